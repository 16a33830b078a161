//! Bytes→bytes codecs (compressors and checksums).
//!
//! The implementations land from the `bytes_to_bytes` branch; this module is
//! the hook the chain builder calls, so merging them is one function body.

use super::{BytesToBytesCodec, CodecError};

/// Builds a bytes→bytes codec from its name and configuration.
///
/// Names as they reach here:
/// - v3 core codecs by their v3 name (`gzip`, `zstd`, `blosc`, `crc32c`)
///   with the v3 configuration object (`{}` when absent);
/// - numcodecs codecs as `numcodecs.<id>` with the numcodecs configuration
///   (without `id`): v3 `numcodecs.*` entries and every v2 `compressor` and
///   bytes→bytes `filters` entry (so v2 `blosc` arrives as `numcodecs.blosc`
///   with an integer `shuffle`).
///
/// # Errors
/// An unsupported codec or an invalid configuration; the error names the codec.
pub fn build_bytes_to_bytes(
    name: &str,
    configuration: &serde_json::Value,
) -> Result<Box<dyn BytesToBytesCodec>, CodecError> {
    let _ = configuration;
    Err(CodecError::new(name, "unsupported codec (bytes-to-bytes codecs are not built into this version)"))
}
