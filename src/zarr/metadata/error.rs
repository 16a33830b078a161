//! The metadata validation error: a field path plus what was expected.
//!
//! Paths follow the shape of the document: object members are joined with
//! `.`, array elements use `[i]`, and map keys that are not plain identifiers
//! (consolidated metadata keys such as `a/.zarray`) use `["key"]`. Examples:
//! `codecs[1].configuration.level`, `metadata["a/.zarray"].dtype`. The path
//! is empty for whole-document problems (invalid JSON, not an object).
//!
//! Error messages state what was expected and what was found, e.g.
//! `expected an integer 0..=9, got 12`, so a server can hand them to the
//! client unchanged (`422 invalid_metadata`).

use serde_json::Value;

/// Why a metadata document was rejected.
///
/// `Display` renders `"{path}: {message}"`, or just the message when the path
/// is empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.path, .message))]
pub struct MetadataError {
    /// Where in the document the problem is (empty for the whole document).
    pub path: String,
    /// What was expected and what was found.
    pub message: String,
}

impl MetadataError {
    /// Builds an error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }

    /// Builds a "`expected ..., got <value>`" error at `path`.
    pub(crate) fn expected(path: impl Into<String>, expected: &str, got: &Value) -> Self {
        Self::new(path, format!("expected {expected}, got {}", describe(got)))
    }
}

fn render(path: &str, message: &str) -> String {
    if path.is_empty() {
        message.to_owned()
    } else {
        format!("{path}: {message}")
    }
}

/// Result alias used throughout the metadata module.
pub type Result<T, E = MetadataError> = std::result::Result<T, E>;

/// Longest rendering of an offending value inside a message; documents can be
/// large and an error message should stay one readable line.
const MAX_DESCRIBE: usize = 60;

/// Compact JSON rendering of a value for error messages, truncated.
pub(crate) fn describe(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= MAX_DESCRIBE {
        text
    } else {
        let cut: String = text.chars().take(MAX_DESCRIBE).collect();
        format!("{cut}...")
    }
}

/// `path.field` (or `field` at the root).
pub(crate) fn join(path: &str, field: &str) -> String {
    let plain = !field.is_empty() && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => field.to_owned(),
        (false, true) => format!("{path}.{field}"),
        (_, false) => key(path, field),
    }
}

/// `path[i]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// `path["key"]`, with the key JSON-escaped.
pub(crate) fn key(path: &str, key: &str) -> String {
    format!("{path}[{}]", Value::String(key.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn display_with_and_without_path() {
        let e = MetadataError::new("codecs[1].configuration.level", "expected x");
        assert_eq!(e.to_string(), "codecs[1].configuration.level: expected x");
        assert_eq!(MetadataError::new("", "invalid JSON").to_string(), "invalid JSON");
    }

    #[test]
    fn paths() {
        assert_eq!(join("", "codecs"), "codecs");
        assert_eq!(join(&index("codecs", 1), "configuration"), "codecs[1].configuration");
        assert_eq!(join("metadata", "a/.zarray"), "metadata[\"a/.zarray\"]");
        assert_eq!(join("", "a b"), "[\"a b\"]");
    }

    #[test]
    fn describe_truncates() {
        let long = json!("x".repeat(500));
        assert!(describe(&long).len() < 80);
        assert_eq!(describe(&json!(12)), "12");
    }
}
