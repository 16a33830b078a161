//! The Zarr format engine: no HTTP and no tokio in its core types.
//!
//! Specs: Zarr v3 core (`reference/zarr-specs/v3/core/index.rst`) and Zarr v2
//! (`reference/zarr-specs/v2/v2.0.rst`).

pub mod array;
pub mod byte_range;
pub mod chunk;
pub mod chunk_key;
pub mod codec;
pub mod data_type;
pub mod downsample;
pub mod field;
pub mod metadata;
pub mod region;
pub mod selection;
pub mod subset;
pub mod tensorstore;
