//! Array→bytes codecs (Zarr v3 core §"Codecs"): `bytes`, `vlen-utf8`,
//! `vlen-bytes`.

pub mod bytes;
pub mod vlen;

pub use self::bytes::BytesCodec;
pub use self::vlen::{VlenCodec, VlenKind};
