//! The service's caches.
//!
//! - [`metadata`]: opened nodes (parsed and normalised metadata) by mount
//!   and path, revalidated against storage ETags.
//! - [`chunk`]: decoded chunks, inner chunks and shard indexes, by mount,
//!   key and the storage version they were read at; the engine reads
//!   through it ([`chunk::ArrayCache`] is its `UnitCache`).

pub mod chunk;
pub mod metadata;
