//! Array data formats on the wire: raw little-endian C-order bytes, `.npy`
//! and JSON. [`decode`] turns request bodies of slice writes into engine
//! data.

pub mod decode;
