//! The service layer: resolves mounts and nodes once per request, runs one
//! operation on them, and owns the caches and locks.
//!
//! Handlers in `http/` resolve what a request addresses ([`App::node`] for
//! `(mount, path)`, [`App::mount_ref`] for a mount), call one operation
//! here and map the result; no Zarr or storage logic lives in `http/`.
//!
//! ```text
//! service.rs          this map; ServiceError re-exported
//! service/
//!   app.rs            App (the shared state); MountRef and NodeRef, resolved
//!                     once, with the one read-only check (`writable()`)
//!   error.rs          ServiceError: storage errors keep their meaning
//!   node.rs, node/    operations on arrays and groups, one file each:
//!     path.rs           NodePath
//!     open.rs           open / load / open_array, ArrayNode, GroupNode
//!     documents.rs      DocumentGate (parse limits and budget), checked writes
//!     describe.rs       stats, children, TensorStore schema
//!     create.rs  delete.rs  attributes.rs  resize.rs  consolidate.rs
//!   keys.rs           raw keys of a mount: the store protocol and PROPFIND
//!   browse.rs         the browser's pages: the node at a path, one page of
//!                     its entries classified
//!   array.rs, array/  operations on an array's data, through the engine
//!     read.rs, read/    slice reads (open, checks, plan, produce);
//!                       read/stream.rs: messages, answer budget, JSON pieces;
//!                       read/chunk.rs: one decoded chunk
//!     write.rs          slice writes (read-modify-write through the engine)
//!     source.rs         the engine's chunk source and sink on a mount
//!   wire.rs, wire/    the wire formats (raw, npy, JSON) of data in answers
//!                     and request bodies: negotiation, encode, decode
//!   cache.rs, cache/  metadata.rs: opened nodes, revalidated by ETag;
//!                     chunk.rs: decoded units, the engine's UnitCache
//!   render.rs, render/ rendered images: format=png (image.rs: layout,
//!                     range, colormaps, PNG) and previews (preview.rs)
//!   locks.rs          per-mount node and key locks
//!   cpu.rs            the CPU pool CPU-heavy work runs on
//! ```

pub mod app;
pub mod array;
pub mod browse;
pub mod cache;
pub mod cpu;
pub mod error;
pub mod jobs;
pub mod keys;
pub mod locks;
pub mod node;
pub mod pyramid;
pub mod render;
pub mod wire;

pub use app::{App, MountRef, NodeRef};
pub use error::{ServiceError, ServiceResult};
