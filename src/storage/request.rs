//! Reads as HTTP asks for them: byte ranges (RFC 9110 §14) and
//! preconditions (RFC 9110 §13), evaluated against an object's metadata.
//!
//! Evaluation order follows RFC 9110 §13.2.2: `If-Match`, else
//! `If-Unmodified-Since`; then `If-None-Match`, else `If-Modified-Since`;
//! then `If-Range` decides whether the range applies.

use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{ObjectMeta, StorageError, StorageResult};

/// One byte range of a `Range: bytes=...` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=a-b` (both inclusive).
    Bounded { first: u64, last: u64 },
    /// `bytes=a-`.
    From(u64),
    /// `bytes=-n`: the last `n` bytes.
    Suffix(u64),
}

/// What a `Range` header asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeHeader {
    /// One range: answered 206 (or 416).
    Single(ByteRange),
    /// Several ranges: zarrd answers these 200 with the whole body (documented;
    /// no Zarr client sends them).
    Multiple,
    /// Not a byte range we understand: ignored, as RFC 9110 §14.2 allows.
    Ignored,
}

impl ByteRange {
    /// Parses a `Range` header value.
    #[must_use]
    pub fn parse_header(value: &str) -> RangeHeader {
        let Some(spec) = value.trim().strip_prefix("bytes=") else {
            return RangeHeader::Ignored;
        };
        let parts: Vec<&str> = spec.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
        match parts.as_slice() {
            [one] => Self::parse_one(one).map_or(RangeHeader::Ignored, RangeHeader::Single),
            [] => RangeHeader::Ignored,
            many if many.iter().all(|p| Self::parse_one(p).is_some()) => RangeHeader::Multiple,
            _ => RangeHeader::Ignored,
        }
    }

    fn parse_one(spec: &str) -> Option<Self> {
        let (first, last) = spec.split_once('-')?;
        let num = |s: &str| -> Option<u64> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                // Digits past u64 (RFC 9110 sets no bound) are as good as
                // u64::MAX: past the end of any object.
                Some(s.parse().unwrap_or(u64::MAX))
            }
        };
        match (first.trim(), last.trim()) {
            ("", n) => num(n).map(Self::Suffix),
            (a, "") => num(a).map(Self::From),
            (a, b) => {
                let (first, last) = (num(a)?, num(b)?);
                (first <= last).then_some(Self::Bounded { first, last })
            }
        }
    }

    /// The most bytes this range can select.
    #[must_use]
    pub fn max_len(self) -> u64 {
        match self {
            Self::Bounded { first, last } => (last - first).saturating_add(1),
            Self::From(_) => u64::MAX,
            Self::Suffix(n) => n,
        }
    }

    /// The half-open byte range this selects in an object of `size` bytes, or
    /// `None` when it is unsatisfiable (416).
    #[must_use]
    pub fn resolve(self, size: u64) -> Option<Range<u64>> {
        match self {
            Self::Bounded { first, last } => (first < size).then(|| first..last.saturating_add(1).min(size)),
            Self::From(first) => (first < size).then_some(first..size),
            Self::Suffix(n) => (n > 0 && size > 0).then(|| size.saturating_sub(n)..size),
        }
    }
}

/// `If-Range`: a validator that must still hold for the range to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfRange {
    ETag(String),
    Date(SystemTime),
}

/// Conditional request headers, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    pub if_match: Option<Vec<String>>,
    pub if_none_match: Option<Vec<String>>,
    pub if_modified_since: Option<SystemTime>,
    pub if_unmodified_since: Option<SystemTime>,
    pub if_range: Option<IfRange>,
}

impl Preconditions {
    /// True when no condition is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The conditions a write or delete evaluates ([`evaluate_write`]):
    /// `If-Modified-Since` and `If-Range` apply to reads only.
    #[must_use]
    pub fn for_write(&self) -> Self {
        Self { if_modified_since: None, if_range: None, ..self.clone() }
    }

    /// Parses an ETag list header value (`"a", W/"b"` or `*`).
    #[must_use]
    pub fn parse_etag_list(value: &str) -> Vec<String> {
        value.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect()
    }
}

/// A read as the HTTP layer asks for it.
#[derive(Debug, Clone, Default)]
pub struct ReadRequest {
    pub range: Option<ByteRange>,
    pub preconditions: Preconditions,
    /// `HEAD`: evaluate everything, read no bytes.
    pub head_only: bool,
    /// A bulk read (a pyramid job, a large downsampled read): answered from
    /// a cache that holds the object, never added to one (it would only
    /// evict what other requests keep hot).
    pub bulk: bool,
    /// The caller writes the bytes out as they come (the store protocol's
    /// GET): a local file's uncached bytes may be left in the file
    /// ([`super::ReadOutcome::tail`]), read frame by frame as the answer
    /// is written, instead of read whole first.
    pub stream: bool,
    /// The most bytes the answer may have (the object, or the range):
    /// larger is [`super::StorageError::TooLarge`], decided from the
    /// object's size before any byte is read (a stored chunk of gigabytes
    /// behind a small chunk is refused, never allocated).
    pub max_len: Option<u64>,
}

impl ReadRequest {
    /// Refuses an answer of `len` bytes for `key` above [`Self::max_len`].
    ///
    /// # Errors
    /// [`super::StorageError::TooLarge`].
    pub fn check_len(&self, key: &str, len: u64) -> Result<(), super::StorageError> {
        match self.max_len {
            Some(limit) if len > limit => Err(super::StorageError::TooLarge { key: key.to_owned(), size: len, limit }),
            _ => Ok(()),
        }
    }
}

fn opaque(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// Strong comparison of an `If-Match` list against an ETag (`*` matches any).
#[must_use]
pub fn etag_matches(list: &[String], etag: &str) -> bool {
    strong_match(list, etag)
}

fn strong_match(list: &[String], etag: &str) -> bool {
    list.iter().any(|t| t == "*" || (!t.starts_with("W/") && t == etag))
}

fn weak_match(list: &[String], etag: &str) -> bool {
    list.iter().any(|t| t == "*" || opaque(t) == opaque(etag))
}

/// HTTP dates have one-second resolution; compare at that resolution.
fn whole_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs()
}

/// Evaluates the preconditions of a write or delete (RFC 9110 §13.2.2)
/// against the object as it is (`None`: absent): `If-Match` (strong; `*`
/// any object), else `If-Unmodified-Since`, then `If-None-Match` (weak;
/// `*` any object). `If-Modified-Since` does not apply to writes.
///
/// # Errors
/// `PreconditionFailed` naming the header that failed.
pub fn evaluate_write(key: &str, current: Option<&ObjectMeta>, p: &Preconditions) -> StorageResult<()> {
    let failed = |reason: String| Err(StorageError::PreconditionFailed { key: key.to_string(), reason });
    let etag = current.map_or("", |m| m.etag.as_str());
    if let Some(list) = &p.if_match {
        if current.is_none() || !strong_match(list, etag) {
            let now = current.map_or_else(|| "no object".to_string(), |m| format!("the current ETag {}", m.etag));
            return failed(format!("If-Match {} does not match {now}", list.join(", ")));
        }
    } else if let (Some(since), Some(modified)) = (p.if_unmodified_since, current.and_then(|m| m.last_modified)) {
        if whole_seconds(modified) > whole_seconds(since) {
            return failed("the object was modified after If-Unmodified-Since".into());
        }
    }
    if let (Some(list), Some(m)) = (&p.if_none_match, current) {
        if weak_match(list, &m.etag) {
            return failed(format!("If-None-Match {} matches the current ETag {}", list.join(", "), m.etag));
        }
    }
    Ok(())
}

/// Evaluates a read's preconditions and range against `meta`.
///
/// Returns the byte range to serve (`None` for the whole object).
///
/// # Errors
/// `PreconditionFailed` (412), `NotModified` (304) or `RangeNotSatisfiable` (416).
pub fn evaluate(key: &str, meta: &ObjectMeta, request: &ReadRequest) -> StorageResult<Option<Range<u64>>> {
    let p = &request.preconditions;
    if let Some(list) = &p.if_match {
        if !strong_match(list, &meta.etag) {
            return Err(StorageError::PreconditionFailed {
                key: key.to_string(),
                reason: format!("If-Match {} does not match the current ETag {}", list.join(", "), meta.etag),
            });
        }
    } else if let (Some(since), Some(modified)) = (p.if_unmodified_since, meta.last_modified) {
        if whole_seconds(modified) > whole_seconds(since) {
            return Err(StorageError::PreconditionFailed {
                key: key.to_string(),
                reason: "the object was modified after If-Unmodified-Since".into(),
            });
        }
    }
    let not_modified = || StorageError::NotModified { key: key.to_string(), meta: Box::new(meta.clone()) };
    if let Some(list) = &p.if_none_match {
        if weak_match(list, &meta.etag) {
            return Err(not_modified());
        }
    } else if let (Some(since), Some(modified)) = (p.if_modified_since, meta.last_modified) {
        if whole_seconds(modified) <= whole_seconds(since) {
            return Err(not_modified());
        }
    }
    let Some(range) = request.range else { return Ok(None) };
    let range_applies = match &p.if_range {
        None => true,
        Some(IfRange::ETag(tag)) => !tag.starts_with("W/") && *tag == meta.etag,
        Some(IfRange::Date(date)) => meta.last_modified.is_some_and(|m| whole_seconds(m) == whole_seconds(*date)),
    };
    if !range_applies {
        return Ok(None);
    }
    if meta.size == 0 && matches!(range, ByteRange::Suffix(n) if n > 0) {
        // RFC 9110 §14.1.1: a non-zero suffix range is satisfiable even for an
        // empty representation; the whole (empty) object is the answer (200).
        return Ok(None);
    }
    range
        .resolve(meta.size)
        .map(Some)
        .ok_or(StorageError::RangeNotSatisfiable { key: key.to_string(), size: meta.size })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(size: u64) -> ObjectMeta {
        ObjectMeta {
            size,
            last_modified: Some(UNIX_EPOCH + Duration::from_secs(1_000_000)),
            etag: "\"v1\"".into(),
            version_token: None,
            version_id: None,
        }
    }

    #[test]
    fn range_headers() {
        use ByteRange::*;
        assert_eq!(ByteRange::parse_header("bytes=0-9"), RangeHeader::Single(Bounded { first: 0, last: 9 }));
        assert_eq!(ByteRange::parse_header("bytes=5-"), RangeHeader::Single(From(5)));
        assert_eq!(ByteRange::parse_header("bytes=-16"), RangeHeader::Single(Suffix(16)));
        assert_eq!(ByteRange::parse_header("bytes=0-1,4-5"), RangeHeader::Multiple);
        // Numbers past u64 are past the end of anything (round 12: they were ignored, and the
        // whole object came back 200 where `bytes=18446744073709551614-` was 416).
        let huge = "99999999999999999999";
        assert_eq!(ByteRange::parse_header(&format!("bytes={huge}-")), RangeHeader::Single(From(u64::MAX)));
        assert_eq!(ByteRange::parse_header(&format!("bytes=-{huge}")), RangeHeader::Single(Suffix(u64::MAX)));
        assert_eq!(
            ByteRange::parse_header(&format!("bytes=3-{huge}")),
            RangeHeader::Single(Bounded { first: 3, last: u64::MAX })
        );
        assert_eq!(From(u64::MAX).resolve(10), None);
        assert_eq!(Suffix(u64::MAX).resolve(10), Some(0..10));
        for ignored in ["items=0-1", "bytes=9-3", "bytes=a-b", "bytes=-", "bytes=", "bytes=+1-2"] {
            assert_eq!(ByteRange::parse_header(ignored), RangeHeader::Ignored, "{ignored}");
        }
    }

    #[test]
    fn ranges_resolve() {
        use ByteRange::*;
        assert_eq!(Bounded { first: 0, last: 9 }.resolve(100), Some(0..10));
        assert_eq!(Bounded { first: 90, last: 200 }.resolve(100), Some(90..100));
        assert_eq!(Bounded { first: 100, last: 200 }.resolve(100), None);
        assert_eq!(From(99).resolve(100), Some(99..100));
        assert_eq!(From(100).resolve(100), None);
        assert_eq!(Suffix(16).resolve(100), Some(84..100));
        assert_eq!(Suffix(1000).resolve(100), Some(0..100));
        assert_eq!(Suffix(0).resolve(100), None);
        assert_eq!(Suffix(5).resolve(0), None);
        assert_eq!(Bounded { first: 0, last: u64::MAX }.resolve(3), Some(0..3));
    }

    #[test]
    fn preconditions() {
        let m = meta(10);
        let req = |p: Preconditions| ReadRequest {
            range: Some(ByteRange::From(2)),
            preconditions: p,
            ..ReadRequest::default()
        };
        assert_eq!(evaluate("k", &m, &req(Preconditions::default())).unwrap(), Some(2..10));
        let p = Preconditions { if_match: Some(vec!["\"v0\"".into()]), ..Default::default() };
        assert!(matches!(evaluate("k", &m, &req(p)), Err(StorageError::PreconditionFailed { .. })));
        let p = Preconditions { if_match: Some(vec!["\"v0\"".into(), "\"v1\"".into()]), ..Default::default() };
        assert!(evaluate("k", &m, &req(p)).is_ok());
        let p = Preconditions { if_match: Some(vec!["W/\"v1\"".into()]), ..Default::default() };
        assert!(evaluate("k", &m, &req(p)).is_err(), "If-Match compares strongly");
        let p = Preconditions { if_none_match: Some(vec!["W/\"v1\"".into()]), ..Default::default() };
        assert!(matches!(evaluate("k", &m, &req(p)), Err(StorageError::NotModified { .. })));
        let p = Preconditions { if_modified_since: m.last_modified, ..Default::default() };
        assert!(matches!(evaluate("k", &m, &req(p)), Err(StorageError::NotModified { .. })));
        let p = Preconditions { if_modified_since: Some(UNIX_EPOCH + Duration::from_secs(10)), ..Default::default() };
        assert!(evaluate("k", &m, &req(p)).is_ok());
        let p = Preconditions {
            if_none_match: Some(vec!["\"other\"".into()]),
            if_modified_since: m.last_modified,
            ..Default::default()
        };
        assert!(evaluate("k", &m, &req(p)).is_ok(), "If-None-Match wins over If-Modified-Since");
        let p = Preconditions { if_range: Some(IfRange::ETag("\"old\"".into())), ..Default::default() };
        assert_eq!(evaluate("k", &m, &req(p)).unwrap(), None, "a stale If-Range serves the whole object");
        let empty = ReadRequest { range: Some(ByteRange::Suffix(16)), ..Default::default() };
        assert_eq!(evaluate("k", &meta(0), &empty).unwrap(), None, "a suffix of an empty object is all of it");
        let unsat = ReadRequest { range: Some(ByteRange::From(10)), ..Default::default() };
        assert!(matches!(evaluate("k", &m, &unsat), Err(StorageError::RangeNotSatisfiable { size: 10, .. })));
    }
}
