//! Storage keys, checked when built.
//!
//! A key is `/`-separated segments inside a mount. A segment is never empty,
//! `.` or `..`, and never holds a backslash, NUL or other control character,
//! so a key can never name anything outside its mount's root. The HTTP layer
//! percent-decodes before building a key, so `%2e%2e` is caught too.

use super::StorageError;

/// The longest key accepted, in bytes (S3's own limit).
pub const MAX_KEY_LEN: usize = 1024;

/// A validated, non-empty storage key (`path/to/array/c/0/1`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreKey(String);

/// A validated key prefix: a "directory" in a mount; empty for the root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KeyPrefix(String);

/// True when `raw` is printable ASCII (no backslash) in non-empty
/// segments, none `.` or `..`: a good key, checked in one pass. Anything
/// else (also any non-ASCII key) is left to the full check.
fn plainly_valid(raw: &[u8]) -> bool {
    let mut segment = 0..0;
    for (i, &b) in raw.iter().enumerate() {
        if b == b'/' {
            if matches!(&raw[segment.clone()], b"" | b"." | b"..") {
                return false;
            }
            segment = i + 1..i + 1;
        } else if (0x20..0x7f).contains(&b) && b != b'\\' {
            segment.end = i + 1;
        } else {
            return false;
        }
    }
    !matches!(&raw[segment], b"" | b"." | b"..")
}

fn check_segments(raw: &str) -> Result<(), StorageError> {
    if raw.len() > MAX_KEY_LEN {
        return Err(StorageError::InvalidKey { reason: format!("key is longer than {MAX_KEY_LEN} bytes") });
    }
    if plainly_valid(raw.as_bytes()) {
        return Ok(());
    }
    check_each_segment(raw)
}

/// The full check, which names what is wrong.
fn check_each_segment(raw: &str) -> Result<(), StorageError> {
    for segment in raw.split('/') {
        let bad = match segment {
            "" => Some("an empty segment (`//`, or a leading or trailing `/`)".to_string()),
            "." | ".." => Some(format!("the segment `{segment}`")),
            s if s.contains('\\') => Some("a backslash".to_string()),
            s if s.chars().any(char::is_control) => Some("a control character (NUL, newline, ...)".to_string()),
            _ => None,
        };
        if let Some(what) = bad {
            return Err(StorageError::InvalidKey { reason: format!("key `{}` contains {what}", raw.escape_default()) });
        }
    }
    Ok(())
}

impl StoreKey {
    /// Builds a key.
    ///
    /// # Errors
    /// `InvalidKey` naming what is wrong.
    pub fn new(raw: &str) -> Result<Self, StorageError> {
        if raw.is_empty() {
            return Err(StorageError::InvalidKey { reason: "the key is empty".into() });
        }
        check_segments(raw)?;
        Ok(Self(raw.to_string()))
    }

    /// The key as a string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last segment (`zarr.json` of `a/b/zarr.json`).
    #[must_use]
    pub fn name(&self) -> &str {
        // A byte search: `/` is ASCII, so the slice after it is on a char boundary.
        self.0.as_bytes().iter().rposition(|&b| b == b'/').map_or(self.0.as_str(), |i| &self.0[i + 1..])
    }

    /// The key's segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// This key seen as a prefix (for listing "below" it).
    #[must_use]
    pub fn as_prefix(&self) -> KeyPrefix {
        KeyPrefix(self.0.clone())
    }
}

impl std::fmt::Display for StoreKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl KeyPrefix {
    /// Builds a prefix; leading and trailing slashes are dropped, `""` is the root.
    ///
    /// # Errors
    /// `InvalidKey` naming what is wrong.
    pub fn new(raw: &str) -> Result<Self, StorageError> {
        let trimmed = raw.strip_suffix('/').unwrap_or(raw);
        if trimmed.is_empty() {
            return Ok(Self::root());
        }
        check_segments(trimmed)?;
        Ok(Self(trimmed.to_string()))
    }

    /// The mount's root.
    #[must_use]
    pub fn root() -> Self {
        Self(String::new())
    }

    /// True for the root.
    #[must_use]
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The prefix as a string, without a trailing slash.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of `name` directly under this prefix.
    ///
    /// # Errors
    /// `InvalidKey` when `name` is not a valid key.
    pub fn child(&self, name: &str) -> Result<StoreKey, StorageError> {
        if self.is_root() {
            StoreKey::new(name)
        } else {
            StoreKey::new(&format!("{}/{name}", self.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_pass_check_agrees_with_the_full_one() {
        // Every string of up to 5 characters over an alphabet with each
        // kind of trouble in it.
        let alphabet = ['a', '.', '/', '\\', '\0', '\u{7f}', 'é', '\u{85}', ' '];
        let mut strings = vec![String::new()];
        let mut checked = 0;
        for _ in 0..5 {
            let mut next = Vec::new();
            for s in &strings {
                for c in alphabet {
                    let mut t = s.clone();
                    t.push(c);
                    let full = check_each_segment(&t).is_ok();
                    if plainly_valid(t.as_bytes()) {
                        assert!(full, "{t:?} passed the one-pass check only");
                    } else if t.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                        assert!(!full, "{t:?} is printable ASCII and valid, but not plainly so");
                    }
                    checked += 1;
                    next.push(t);
                }
            }
            strings = next;
        }
        assert!(checked > 60_000, "{checked}");
    }

    #[test]
    fn valid_keys() {
        for k in ["a", "a/b/c", "arr/c/0/1", "arr/0.1.2", ".zarray", "a/.zattrs", "x..y", "é/ü"] {
            assert_eq!(StoreKey::new(k).unwrap().as_str(), k);
        }
        assert_eq!(StoreKey::new("a/b/zarr.json").unwrap().name(), "zarr.json");
        assert_eq!(StoreKey::new("zarr.json").unwrap().name(), "zarr.json");
        assert_eq!(StoreKey::new("é/日本/ü").unwrap().name(), "ü");
    }

    #[test]
    fn unsafe_keys_are_rejected() {
        for k in ["", "/a", "a/", "a//b", ".", "..", "a/../b", "../x", "a/./b", "a\\b", "a\0b", "a\nb"] {
            assert!(StoreKey::new(k).is_err(), "{k:?} accepted");
        }
        assert!(StoreKey::new(&"a".repeat(MAX_KEY_LEN + 1)).is_err());
    }

    #[test]
    fn prefixes() {
        assert!(KeyPrefix::new("").unwrap().is_root());
        assert!(KeyPrefix::new("/").unwrap().is_root());
        assert_eq!(KeyPrefix::new("a/b/").unwrap().as_str(), "a/b");
        assert!(KeyPrefix::new("a/../").is_err());
        assert_eq!(KeyPrefix::new("a").unwrap().child("zarr.json").unwrap().as_str(), "a/zarr.json");
        assert_eq!(KeyPrefix::root().child("zarr.json").unwrap().as_str(), "zarr.json");
    }
}
