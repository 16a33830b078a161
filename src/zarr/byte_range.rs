//! Byte ranges the engine asks a key-value reader for: a bounded range or
//! the last `n` bytes (how a shard index at the end is read without knowing
//! the shard's size; spec: `codecs/sharding-indexed` §"Implementation notes").
//!
//! The service maps these onto its storage ranges (HTTP `Range: bytes=a-b` /
//! `bytes=-n`, object_store `GetRange`).

use std::ops::Range;

/// A byte range of one stored value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ByteRangeRequest {
    /// Bytes `start..end` (end exclusive).
    Bounded(Range<u64>),
    /// The last `n` bytes.
    Suffix(u64),
}

impl ByteRangeRequest {
    /// How many bytes the range asks for.
    #[must_use]
    pub fn len(&self) -> u64 {
        match self {
            Self::Bounded(r) => r.end.saturating_sub(r.start),
            Self::Suffix(n) => *n,
        }
    }

    /// True when the range asks for no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Display for ByteRangeRequest {
    /// As in an HTTP `Range` header, without the `bytes=` (`0-15`, `-16`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bounded(r) if r.end > r.start => write!(f, "{}-{}", r.start, r.end - 1),
            Self::Bounded(r) => write!(f, "{}-(empty)", r.start),
            Self::Suffix(n) => write!(f, "-{n}"),
        }
    }
}
