//! Service errors: storage errors keep their meaning; the service adds its own.

use crate::storage::StorageError;
use crate::zarr::metadata::MetadataError;

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
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: u64 },
    /// The key names a prefix ("directory"), not an object: the HTTP layer
    /// redirects to its listing (`.../key/`).
    #[error("{0} is a prefix, not a key: list it at {0}/")]
    IsPrefix(String),
    #[error("no such prefix: {0}")]
    PrefixNotFound(String),
}
