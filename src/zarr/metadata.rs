//! Metadata documents (placeholder until the full v2/v3 parser lands).

/// Which metadata document a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    ZarrJson,
    ZArray,
    ZGroup,
    ZAttrs,
    ZMetadata,
}

impl DocumentKind {
    /// The kind of document stored under a key's last segment, if any.
    #[must_use]
    pub fn from_key_name(name: &str) -> Option<Self> {
        match name {
            "zarr.json" => Some(Self::ZarrJson),
            ".zarray" => Some(Self::ZArray),
            ".zgroup" => Some(Self::ZGroup),
            ".zattrs" => Some(Self::ZAttrs),
            ".zmetadata" => Some(Self::ZMetadata),
            _ => None,
        }
    }
}

/// An invalid metadata document: the field path and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for MetadataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for MetadataError {}

/// Validates a metadata document.
///
/// # Errors
/// A [`MetadataError`] naming the field.
pub fn validate_document(_kind: DocumentKind, bytes: &[u8]) -> Result<(), MetadataError> {
    let v: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| MetadataError { path: String::new(), message: format!("invalid JSON: {e}") })?;
    if v.is_object() {
        Ok(())
    } else {
        Err(MetadataError { path: String::new(), message: "expected a JSON object".into() })
    }
}
