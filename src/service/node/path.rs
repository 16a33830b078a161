//! A node's path inside a mount: `""` for the mount root, else `a/b/c` (no
//! leading or trailing `/`; segments validated like store keys).

use super::super::{ServiceError, ServiceResult};
use crate::storage::{KeyPrefix, StoreKey};

/// A validated node path inside a mount (`""` is the root).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodePath(String);

impl NodePath {
    /// Validates `raw`; leading and trailing `/` are ignored.
    ///
    /// # Errors
    /// `InvalidNodePath` naming the path when a segment is not a valid key
    /// segment (empty, `.`, `..`, control characters).
    pub fn new(raw: &str) -> ServiceResult<Self> {
        let trimmed = raw.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(Self(String::new()));
        }
        StoreKey::new(trimmed).map_err(|source| ServiceError::InvalidNodePath { path: raw.to_string(), source })?;
        Ok(Self(trimmed.to_string()))
    }

    /// The mount root.
    #[must_use]
    pub fn root() -> Self {
        Self(String::new())
    }

    /// The path (`""` for the root).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the mount root.
    #[must_use]
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// `<path>/<name>` as text, unchecked.
    pub(crate) fn join(&self, name: &str) -> String {
        if self.0.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.0)
        }
    }

    /// The store key of `name` inside this node (`<path>/<name>`).
    ///
    /// # Errors
    /// `InvalidKey` when `name` is not a valid relative key.
    pub fn key(&self, name: &str) -> ServiceResult<StoreKey> {
        let raw = self.join(name);
        StoreKey::new(&raw).map_err(|source| ServiceError::InvalidKey { key: raw, source })
    }

    /// The node path of the child `name` (one or more segments).
    ///
    /// # Errors
    /// `InvalidNodePath` when `name` is not a valid relative path.
    pub fn child(&self, name: &str) -> ServiceResult<Self> {
        Self::new(&self.join(name))
    }

    /// The key prefix everything under this node shares.
    ///
    /// # Errors
    /// Cannot fail for a valid path (`InvalidKey` from storage otherwise).
    pub fn prefix(&self) -> ServiceResult<KeyPrefix> {
        Ok(KeyPrefix::new(&self.0)?)
    }

    /// This path relative to `base` (an ancestor): `a/b/c` relative to `a`
    /// is `b/c`.
    #[must_use]
    pub fn relative_to(&self, base: &NodePath) -> &str {
        if base.is_root() {
            &self.0
        } else {
            self.0.strip_prefix(base.as_str()).unwrap_or(&self.0).trim_start_matches('/')
        }
    }

    /// The parent node's path; `None` for the root.
    #[must_use]
    pub fn parent(&self) -> Option<Self> {
        if self.0.is_empty() {
            return None;
        }
        Some(Self(self.0.rsplit_once('/').map_or(String::new(), |(p, _)| p.to_string())))
    }

    /// The last segment (`""` for the root).
    #[must_use]
    pub fn name(&self) -> &str {
        self.0.rsplit_once('/').map_or(&self.0, |(_, n)| n)
    }
}

impl std::fmt::Display for NodePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("/")
        } else {
            f.write_str(&self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_validate_and_relate() {
        let p = |s: &str| NodePath::new(s).unwrap();
        assert_eq!(p("/a/b/").as_str(), "a/b");
        assert!(p("").is_root());
        assert_eq!(p("a/b/c").relative_to(&p("")), "a/b/c");
        assert_eq!(p("a/b/c").relative_to(&p("a")), "b/c");
        assert_eq!(p("a").child("b/c").unwrap(), p("a/b/c"));
        assert_eq!(p("a/b").parent(), Some(p("a")));
        assert_eq!(p("a").parent(), Some(p("")));
        assert_eq!(p("a/b").key("zarr.json").unwrap().as_str(), "a/b/zarr.json");
        let e = NodePath::new("a/../b").unwrap_err();
        assert!(matches!(&e, ServiceError::InvalidNodePath { path, .. } if path == "a/../b"), "{e}");
        assert!(e.to_string().starts_with("invalid node path `a/../b`: "), "{e}");
    }
}
