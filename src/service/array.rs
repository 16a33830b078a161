//! Operations on an array's data, through the region engine
//! ([`crate::zarr::region`]):
//!
//! - [`read`]: slice reads and decoded chunk reads, streamed slab by slab
//!   (`read/stream.rs`: messages, the answer budget, JSON pieces;
//!   `read/chunk.rs`: one decoded chunk);
//! - [`write`]: slice writes (read-modify-write of the chunks a selection
//!   touches, CPU work on the pool, per-key locks);
//! - [`source`]: the engine's chunk source and sink on a mount.
//!
//! What is the service's here and not the engine's: opening the array,
//! the decoded-unit cache with its revalidation against storage, limits,
//! locks, and turning slabs into an answer body.

pub mod downsample;
pub mod read;
pub mod source;
pub mod write;
