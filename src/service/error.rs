//! Service errors: storage errors keep their meaning; the service adds its own.

use super::cpu::CpuError;
use crate::storage::StorageError;
use crate::zarr::metadata::MetadataError;
use crate::zarr::tensorstore::spec::SpecError;

impl From<crate::zarr::selection::SelectionError> for ServiceError {
    /// Too many listed indices is `SelectionTooLarge` (413); anything else
    /// `InvalidSelection` (400).
    fn from(e: crate::zarr::selection::SelectionError) -> Self {
        if e.is_too_large() {
            Self::SelectionTooLarge(e.0)
        } else {
            Self::InvalidSelection(e.0)
        }
    }
}

/// A service result.
pub type ServiceResult<T> = Result<T, ServiceError>;

/// What went wrong serving a request.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("no mount named `{0}`")]
    UnknownMount(String),
    #[error("mount `{0}` is read-only")]
    ReadOnly(String),
    #[error("{key}: invalid metadata: {source}")]
    InvalidMetadata { key: String, source: MetadataError },
    #[error("{0}")]
    BadRequest(String),
    /// A node path that is not a valid key path (the segment named).
    #[error("invalid node path `{path}`: {source}")]
    InvalidNodePath { path: String, source: StorageError },
    /// A key built inside a node that is not a valid key.
    #[error("invalid key `{key}`: {source}")]
    InvalidKey { key: String, source: StorageError },
    /// A request member (named in `field`: `shape[1]`, ``request body: `open` ``)
    /// the operation cannot accept.
    #[error("{field}: {reason}")]
    InvalidRequest { field: String, reason: String },
    /// A TensorStore spec that cannot be satisfied (the member named).
    #[error("TensorStore spec: {0}")]
    InvalidSpec(#[from] SpecError),
    /// A create asked neither to create nor to open.
    #[error("at least one of `create` and `open` must be true")]
    InvalidOpenMode,
    /// A request body over a configured limit (the option named).
    #[error("the request body is larger than {option} ({limit} bytes)")]
    PayloadTooLarge { limit: u64, option: &'static str },
    /// The key names a prefix ("directory"), not an object: the HTTP layer
    /// redirects to its listing (`.../key/`).
    #[error("{0} is a prefix, not a key: list it at {0}/")]
    IsPrefix(String),
    #[error("no such prefix: {0}")]
    PrefixNotFound(String),
    /// No array or group at this path.
    #[error("no array or group at `{path}` in mount `{mount}`")]
    NodeNotFound { mount: String, path: String },
    /// The node is a group where an array is needed.
    #[error("`{path}` in mount `{mount}` is a group, not an array")]
    NotAnArray { mount: String, path: String },
    /// Valid metadata that zarrd cannot serve (an unsupported codec or type).
    #[error("{key}: unsupported array: {reason}")]
    UnsupportedArray { key: String, reason: String },
    /// The node is an array where a group is needed (consolidation).
    #[error("`{path}` in mount `{mount}` is an array; only groups are consolidated")]
    NotAGroup { mount: String, path: String },
    /// A node already exists where one is being created.
    #[error("`{path}` in mount `{mount}` already exists (ask with open=true to open it, or delete_existing=true to replace it)")]
    AlreadyExists { mount: String, path: String },
    /// A group with children, deleted without `recursive`.
    #[error("group `{path}` in mount `{mount}` is not empty; delete it with recursive=true")]
    NotEmpty { mount: String, path: String },
    /// The request conflicts with what is stored (named in the message).
    #[error("{0}")]
    Conflict(String),
    /// A read-modify-write kept losing its conditional write: other writers
    /// (other processes) changed the chunk every time.
    #[error("{key}: too many concurrent writers: {reason}; try again")]
    WriteConflict { key: String, reason: String },
    /// A selection (or chunk coordinates, or a field) that does not fit the
    /// array: the message names the dimension or field.
    #[error("{0}")]
    InvalidSelection(String),
    /// The output format cannot hold the data type (variable-length
    /// strings as raw bytes).
    #[error("{0}")]
    UnsupportedFormat(String),
    /// A read with `fill_missing_data_reads` off met a missing chunk (the
    /// message names it and its key).
    #[error("{0}; the read does not fill missing chunks (fill_missing=false)")]
    MissingChunk(String),
    /// Stored bytes that do not decode (a failed checksum, a wrong size, a
    /// truncated shard): the message names the key and the codec.
    #[error("{key}: stored data is corrupt: {reason}")]
    CorruptChunk { key: String, reason: String },
    /// A selection over the configured limits (the message names the size
    /// and the limit).
    #[error("{0}")]
    SelectionTooLarge(String),
    /// A hierarchy over the limits a consolidation may list and hold (the
    /// message names the limit).
    #[error("{0}")]
    HierarchyTooLarge(String),
    /// Work refused for want of room (as many background jobs running as
    /// allowed); the message says what to wait for.
    #[error("{0}")]
    Busy(String),
    /// A fault inside zarrd (logged in full; answered generically).
    #[error("internal error: {0}")]
    Internal(String),
    /// CPU work that panicked or was dropped (logged in full; answered as
    /// `Internal`).
    #[error(transparent)]
    Cpu(#[from] CpuError),
}

/// The product of `factors` as a message states it: exact where it fits in
/// 128 bits (a limit check's `u64` product saturates and would print
/// 18446744073709551615), otherwise "more than 2^128".
#[must_use]
pub fn product_text(factors: impl IntoIterator<Item = u64>) -> String {
    factors
        .into_iter()
        .try_fold(1u128, |a, f| a.checked_mul(u128::from(f)))
        .map_or_else(|| "more than 2^128".to_string(), |p| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::product_text;

    #[test]
    fn products_are_stated_exactly_past_u64() {
        assert_eq!(product_text([3, 4]), "12");
        assert_eq!(product_text([1 << 40, 1 << 40]), "1208925819614629174706176");
        assert_eq!(product_text([u64::MAX, u64::MAX, 2]), "more than 2^128");
        assert_eq!(product_text([]), "1");
    }
}
