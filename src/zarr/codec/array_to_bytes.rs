//! Array→bytes codecs (Zarr v3 core §"Codecs"): `bytes`, `vlen-utf8`,
//! `vlen-bytes`, `sharding_indexed`.

pub mod bytes;
pub mod sharding;
pub mod vlen;

pub use self::bytes::BytesCodec;
pub use self::sharding::ShardingCodec;
pub use self::vlen::{VlenCodec, VlenKind};
