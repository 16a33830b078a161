//! The service's caches.
//!
//! - [`metadata`]: opened nodes (parsed and normalised metadata) by mount
//!   and path, revalidated against storage ETags.
//!
//! The decoded-chunk cache is [`super::chunk_cache`] for now (it moves here
//! with the read path's reorganisation).

pub mod metadata;
