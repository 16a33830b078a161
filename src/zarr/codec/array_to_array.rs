//! Array→array codecs (Zarr v3 core §"Codecs"): `transpose` and the numcodecs
//! filters `delta`, `fixedscaleoffset`, `astype`, `quantize` and `bitround`
//! (v2 `filters`, v3 `numcodecs.*`).

pub mod cast;
pub mod delta;
pub mod fixedscaleoffset;
mod numeric;
pub mod transpose;

pub use self::cast::CastCodec;
pub use self::delta::DeltaCodec;
pub use self::fixedscaleoffset::FixedScaleOffsetCodec;
pub use self::transpose::TransposeCodec;
