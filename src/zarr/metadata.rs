//! Zarr metadata documents: typed parsing and validation of v3 `zarr.json`
//! and v2 `.zarray`, `.zgroup`, `.zattrs`, `.zmetadata`.
//!
//! Spec: Zarr v3 core, "Metadata" (<https://zarr-specs.readthedocs.io/en/latest/v3/core/index.html#metadata>),
//! and Zarr v2, "Metadata" (<https://zarr-specs.readthedocs.io/en/latest/v2/v2.0.html#metadata>).
//! Where the specs and real clients differ, this module follows what
//! zarr-python 3.1 and TensorStore write and read; each leniency is noted in
//! the module that applies it.
//!
//! The store protocol calls [`validate_document`] before storing a key whose
//! last segment names a metadata document ([`DocumentKind::from_key_name`]).
//! Everything else uses the typed parsers ([`parse_document`],
//! [`NodeMetadataV3::from_slice`], [`ArrayMetadataV2::from_slice`]), whose
//! types serialise back to canonical JSON.
//!
//! Errors ([`MetadataError`]) carry the field path and what was expected:
//! `codecs[1].configuration.level: expected an integer 0..=9, got 12`.
//! Parsing is pure and never panics; it is cheap enough to run per request,
//! but callers should cache parsed metadata per node.
//!
//! # Layout
//!
//! - [`data_type`]: the v3 names and JSON form of the one
//!   [`crate::zarr::data_type::DataType`] (v2 maps onto it too),
//! - [`fill_value`]: fill values typed by data type,
//! - [`codec`]: the v3 `codecs` list (each codec's configuration type lives
//!   in its file under [`crate::zarr::codec`], names map to them in
//!   [`crate::zarr::codec::registry`] and, for numcodecs ids shared with v2,
//!   [`crate::zarr::codec::numcodecs`]),
//! - [`v3`]: `zarr.json`; [`v2`]: `.zarray`, `.zgroup`, `.zattrs`,
//!   `.zmetadata`, [`v2::dtype`]: numpy dtype strings.
//!
//! # Normalisation
//!
//! [`ArrayMetadataV2`] and [`ArrayMetadataV3`] become one
//! [`crate::zarr::array::ArrayDescription`] (shape, engine data type, fill
//! value bytes, chunk grid, chunk key encoding, prepared codec chain), so
//! nothing below this module sees a format version; this module stays about
//! documents.

pub mod codec;
pub mod data_type;
pub mod error;
pub mod fill_value;
pub(crate) mod json;
pub mod v2;
pub mod v3;

#[cfg(test)]
mod tests;

use serde::Serialize;
use serde_json::{Map, Value};

pub use self::codec::{CodecKind, CodecSpec};
pub use self::data_type::DataType;
pub use self::error::MetadataError;
pub use self::fill_value::{FillValue, FloatFill};
pub use self::v2::dtype::DataTypeV2;
pub use self::v2::{ArrayMetadataV2, ConsolidatedMetadataV2, GroupMetadataV2};
pub use self::v3::{ArrayMetadataV3, GroupMetadataV3, NodeMetadataV3};

/// Which metadata document a store key holds, by its last path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DocumentKind {
    /// `zarr.json` (v3 array or group).
    ZarrJson,
    /// `.zarray` (v2 array).
    ZArray,
    /// `.zgroup` (v2 group).
    ZGroup,
    /// `.zattrs` (v2 attributes).
    ZAttrs,
    /// `.zmetadata` (v2 consolidated metadata).
    ZMetadata,
}

impl DocumentKind {
    /// The document kind for the last segment of a key (`"zarr.json"`,
    /// `".zarray"`, ...), or `None` when the key is not a metadata document
    /// (chunks, other files).
    #[must_use]
    pub fn from_key_name(last_segment: &str) -> Option<Self> {
        Some(match last_segment {
            "zarr.json" => Self::ZarrJson,
            ".zarray" => Self::ZArray,
            ".zgroup" => Self::ZGroup,
            ".zattrs" => Self::ZAttrs,
            ".zmetadata" => Self::ZMetadata,
            _ => return None,
        })
    }

    /// The key name of this kind of document.
    #[must_use]
    pub fn key_name(self) -> &'static str {
        match self {
            Self::ZarrJson => "zarr.json",
            Self::ZArray => ".zarray",
            Self::ZGroup => ".zgroup",
            Self::ZAttrs => ".zattrs",
            Self::ZMetadata => ".zmetadata",
        }
    }
}

/// A parsed metadata document.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Document {
    /// `zarr.json`.
    ZarrJson(NodeMetadataV3),
    /// `.zarray`.
    ZArray(ArrayMetadataV2),
    /// `.zgroup`.
    ZGroup(GroupMetadataV2),
    /// `.zattrs`.
    ZAttrs(Map<String, Value>),
    /// `.zmetadata`.
    ZMetadata(ConsolidatedMetadataV2),
}

/// Parses and validates a metadata document of the given kind.
///
/// # Errors
///
/// A [`MetadataError`] naming the first problem found: invalid JSON (empty
/// path), a missing required field, a field of the wrong type, an unknown
/// data type, codec, chunk grid or chunk key encoding, a rank mismatch
/// (chunk shape, dimension names, transpose order, sharding inner chunk
/// shape), a shard shape not divisible by the inner chunk shape, a fill value
/// not representable in the data type, a codec configuration out of range, or
/// an unknown member that is not an ignorable extension.
pub fn parse_document(kind: DocumentKind, bytes: &[u8]) -> Result<Document, MetadataError> {
    let value = parse_json(bytes)?;
    Ok(match kind {
        DocumentKind::ZarrJson => Document::ZarrJson(NodeMetadataV3::from_json(&value, "")?),
        DocumentKind::ZArray => Document::ZArray(ArrayMetadataV2::from_json(&value, "")?),
        DocumentKind::ZGroup => Document::ZGroup(GroupMetadataV2::from_json(&value, "")?),
        DocumentKind::ZAttrs => Document::ZAttrs(v2::attributes_from_json(&value, "")?),
        DocumentKind::ZMetadata => Document::ZMetadata(ConsolidatedMetadataV2::from_json(&value, "")?),
    })
}

/// Validates a metadata document before it is stored.
///
/// # Errors
///
/// As [`parse_document`].
pub fn validate_document(kind: DocumentKind, bytes: &[u8]) -> Result<(), MetadataError> {
    parse_document(kind, bytes).map(|_| ())
}

/// The most dimensions an array may have (its shape, chunk shape, shard
/// and inner chunk shapes, dimension names): TensorStore's `kMaxRank`, so
/// nothing TensorStore can open is refused, and nothing is built per
/// dimension for a document that declares millions of them. Checked when
/// a document is parsed (every face: creates, raw `PUT`s, opens), before
/// any per-dimension value is built.
pub const MAX_RANK: usize = 32;

/// The largest extent of one array dimension: 2^62, within the signed
/// 64-bit index space TensorStore and numpy address (TensorStore's largest
/// finite index is 2^62 - 2), with room for `stop` and `step` arithmetic.
pub const MAX_EXTENT: u64 = 1 << 62;

/// The deepest nesting of arrays and objects a metadata document may have
/// (serde_json's own limit, 128, would fail later readers less clearly).
pub const MAX_DOCUMENT_DEPTH: usize = 64;

/// Checks that JSON `bytes` nest arrays and objects at most `max` deep,
/// without parsing them (strings are skipped).
///
/// # Errors
/// The offset where the nesting first goes deeper.
pub fn check_depth(bytes: &[u8], max: usize) -> Result<(), MetadataError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(MetadataError::new(
                        "",
                        format!("nested more than {max} levels deep (at byte {i}); zarrd reads at most {max}"),
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Parses JSON bytes (at most [`MAX_DOCUMENT_DEPTH`] deep); the error has
/// an empty path.
///
/// # Errors
/// Invalid JSON, or JSON nested too deep.
pub fn parse_json(bytes: &[u8]) -> Result<Value, MetadataError> {
    check_depth(bytes, MAX_DOCUMENT_DEPTH)?;
    serde_json::from_slice(bytes).map_err(|e| MetadataError::new("", format!("invalid JSON: {e}")))
}
