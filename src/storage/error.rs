//! The storage error, classified by meaning (as `object_store::Error` is),
//! so the HTTP layer chooses a status by an exhaustive match.

use super::ObjectMeta;

/// A storage result.
pub type StorageResult<T> = Result<T, StorageError>;

/// What went wrong in storage, by meaning.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The key does not exist.
    #[error("key {key} not found")]
    NotFound { key: String },
    /// The key names a prefix ("directory"), not an object (reported by
    /// backends that know it without extra work).
    #[error("{key} is a prefix, not a key")]
    IsPrefix { key: String },
    /// A write with `If-None-Match: *` found an existing object.
    #[error("key {key} already exists")]
    AlreadyExists { key: String },
    /// `If-Match` / `If-Unmodified-Since` did not hold.
    #[error("precondition failed for key {key}: {reason}")]
    PreconditionFailed { key: String, reason: String },
    /// `If-None-Match` / `If-Modified-Since` matched: the client's copy is current.
    #[error("key {key} not modified")]
    NotModified { key: String, meta: Box<ObjectMeta> },
    /// The requested byte range lies outside the object.
    #[error("range not satisfiable for key {key} of {size} bytes")]
    RangeNotSatisfiable { key: String, size: u64 },
    /// The key cannot be stored because of what is already there: on a
    /// directory tree, a key below an object, or a key that is a directory.
    #[error("key {key} conflicts with existing data: {reason}")]
    Conflict { key: String, reason: String },
    /// The key is not a valid storage key.
    #[error("invalid key: {reason}")]
    InvalidKey { reason: String },
    /// The backend refused us (credentials, permissions).
    #[error("permission denied by storage for key {key}: {reason}")]
    PermissionDenied { key: String, reason: String },
    /// The backend cannot do what was asked.
    #[error("not supported by this storage: {reason}")]
    NotSupported { reason: String },
    /// The backend failed or could not be reached.
    #[error("storage unavailable: {reason}")]
    Unavailable { reason: String },
    /// The backend did not answer in time.
    #[error("storage timed out: {reason}")]
    Timeout { reason: String },
    /// The object (or range) is larger than the read allows
    /// ([`super::ReadRequest::max_len`]): refused before it is read.
    #[error("{key} is {size} bytes, more than the {limit} bytes a read of it may take")]
    TooLarge { key: String, size: u64, limit: u64 },
}

impl StorageError {
    /// The kind, as a metrics label ([`crate::metrics::STORAGE_ERROR_KINDS`]).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "not_found",
            Self::IsPrefix { .. } => "is_prefix",
            Self::AlreadyExists { .. } => "already_exists",
            Self::PreconditionFailed { .. } => "precondition_failed",
            Self::NotModified { .. } => "not_modified",
            Self::RangeNotSatisfiable { .. } => "range_not_satisfiable",
            Self::Conflict { .. } => "conflict",
            Self::InvalidKey { .. } => "invalid_key",
            Self::PermissionDenied { .. } => "permission_denied",
            Self::NotSupported { .. } => "not_supported",
            Self::Unavailable { .. } => "unavailable",
            Self::Timeout { .. } => "timeout",
            Self::TooLarge { .. } => "too_large",
        }
    }

    /// Classifies an `object_store` error, naming `key`.
    #[must_use]
    pub fn from_object_store(key: &str, err: object_store::Error) -> Self {
        use object_store::Error as E;
        let key = key.to_string();
        match err {
            E::NotFound { .. } => Self::NotFound { key },
            E::AlreadyExists { .. } => Self::AlreadyExists { key },
            E::Precondition { source, .. } => Self::PreconditionFailed { key, reason: source.to_string() },
            E::NotModified { source, .. } => Self::PreconditionFailed { key, reason: source.to_string() },
            E::PermissionDenied { source, .. } | E::Unauthenticated { source, .. } => {
                Self::PermissionDenied { key, reason: source.to_string() }
            }
            E::InvalidPath { source } => Self::InvalidKey { reason: source.to_string() },
            E::NotSupported { source } => Self::NotSupported { reason: source.to_string() },
            E::NotImplemented { operation, implementer } => {
                Self::NotSupported { reason: format!("{operation} is not implemented by {implementer}") }
            }
            other if timed_out(&other) => Self::Timeout { reason: other.to_string() },
            other => Self::Unavailable { reason: other.to_string() },
        }
    }

    /// Classifies an I/O error, naming `key`.
    #[must_use]
    pub fn from_io(key: &str, err: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let key = key.to_string();
        match rustix::io::Errno::from_io_error(err) {
            // A path leaving a local mount, or a link loop: not there.
            Some(rustix::io::Errno::XDEV | rustix::io::Errno::LOOP) => return Self::NotFound { key },
            Some(rustix::io::Errno::NAMETOOLONG) => {
                return Self::InvalidKey {
                    reason: format!("key `{key}` is longer than this filesystem's names or paths may be"),
                }
            }
            _ => {}
        }
        match err.kind() {
            K::TimedOut => Self::Timeout { reason: format!("{key}: {err}") },
            // A path component that is a file ("a/b" where "a" is a file) reads as missing.
            K::NotFound | K::NotADirectory | K::IsADirectory => Self::NotFound { key },
            K::PermissionDenied => Self::PermissionDenied { key, reason: err.to_string() },
            _ => Self::Unavailable { reason: format!("{key}: {err}") },
        }
    }
}

/// True when an `object_store` error was, at its root, a request that
/// timed out (after its retries): the store did not answer in time, which
/// zarrd answers 504 rather than 503.
fn timed_out(err: &object_store::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<object_store::client::HttpError>() {
            return http.kind() == object_store::client::HttpErrorKind::Timeout;
        }
        source = e.source();
    }
    false
}
