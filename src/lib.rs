//! zarrd: an HTTP server for Zarr v2 and v3 arrays.
//!
//! Layers, top to bottom (a lower layer never imports a higher one):
//! [`http`] (axum routers, error mapping, OpenAPI), [`service`] (mounts,
//! caches, locks), [`zarr`] (the format engine), [`storage`] (`object_store`
//! behind one trait), and [`config`] and [`metrics`], which every layer uses.

pub mod config;
pub mod http;
pub mod metrics;
pub mod server;
pub mod service;
pub mod storage;
pub mod zarr;
