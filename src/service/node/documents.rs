//! Metadata documents (`zarr.json`, `.zarray`, `.zgroup`, `.zattrs`,
//! `.zmetadata`): the [`DocumentGate`] every parse passes (a size limit and
//! a process-wide parse budget), the checks a document passes before zarrd
//! stores it, and the checked writes of the node operations.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::versioned::Versions;
use super::{array_limits, NodePath};
use crate::service::{cpu, App, NodeRef, ServiceError, ServiceResult};
use crate::storage::{Mount, StoreKey};
use crate::zarr::array::{ArrayDescription, ArrayLimits};
use crate::zarr::metadata::v2::attributes_from_json;
use crate::zarr::metadata::{
    ArrayMetadataV2, ConsolidatedMetadataV2, DocumentKind, GroupMetadataV2, MetadataError, NodeMetadataV3,
};

/// Every metadata document name a node may have.
pub const DOCUMENT_NAMES: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// The node path a metadata document key belongs to (`a/b/zarr.json` →
/// `a/b`); `None` for keys that are not metadata documents.
#[must_use]
pub fn node_of_document_key(key: &StoreKey) -> Option<NodePath> {
    if !DOCUMENT_NAMES.contains(&key.name()) {
        return None;
    }
    let parent = key.as_str().rsplit_once('/').map_or("", |(p, _)| p);
    NodePath::new(parent).ok()
}

/// `InvalidMetadata` naming `key`.
pub(super) fn invalid(key: &StoreKey) -> impl FnOnce(MetadataError) -> ServiceError + '_ {
    move |source| ServiceError::InvalidMetadata { key: key.to_string(), source }
}

tokio::task_local! {
    /// Set while a task holds a reservation of the parse budget for its
    /// whole operation ([`DocumentGate::scoped`]): its own parses do not
    /// reserve again (which could wait on itself).
    static RESERVED: ();
}

fn reserved_here() -> bool {
    RESERVED.try_with(|()| ()).is_ok()
}

/// The length of `v` serialised as compact JSON, without building it.
#[must_use]
pub fn json_len(v: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Parse memory per document byte the budget assumes: a parsed JSON value
/// tree takes up to about 30 times its text (small numbers and strings).
pub const PARSE_COST_FACTOR: u64 = 32;

/// What stands between a metadata document and its parse: a size limit
/// (twice `limits.max_body_bytes` for documents in storage, room for the
/// indentation and envelope zarrd adds around a body at the limit; bodies
/// themselves are held to `max_body_bytes` where they arrive) and a byte budget shared by all parses of
/// the process (`limits.document_parse_budget_bytes` of parse memory, each
/// document counted at [`PARSE_COST_FACTOR`] times its size; concurrent
/// parses wait for room, one larger than the budget takes all of it).
/// Parsing runs on the CPU pool. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DocumentGate {
    max_bytes: u64,
    budget_kib: u32,
    permits: Arc<tokio::sync::Semaphore>,
}

impl Default for DocumentGate {
    fn default() -> Self {
        let l = crate::config::Limits::default();
        Self::new(l.max_body_bytes, l.document_parse_budget_bytes)
    }
}

impl DocumentGate {
    /// A gate for bodies of at most `max_body_bytes` (stored documents of
    /// at most twice that), parsing at most `budget_bytes` of documents at
    /// once.
    #[must_use]
    pub fn new(max_body_bytes: u64, budget_bytes: u64) -> Self {
        let max_bytes = max_body_bytes.saturating_mul(2);
        let budget_kib = u32::try_from(budget_bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX >> 4).min(u32::MAX >> 4);
        Self { max_bytes, budget_kib, permits: Arc::new(tokio::sync::Semaphore::new(budget_kib as usize)) }
    }

    /// The gate of `app` (its configured limits).
    #[must_use]
    pub fn of(app: &App) -> Self {
        app.metadata_cache().gate(app.config())
    }

    /// The largest document this gate parses.
    #[must_use]
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Budget units (KiB of parse memory) a document of `len` bytes takes.
    fn units(&self, len: u64) -> u32 {
        let cost = len.saturating_mul(PARSE_COST_FACTOR);
        u32::try_from(cost.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, self.budget_kib)
    }

    /// Reserves room in the parse budget for a document of `len` bytes
    /// parsed elsewhere (a JSON request body), held until dropped; `None`
    /// inside [`DocumentGate::scoped`], which reserved already.
    pub async fn reserve(&self, len: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if reserved_here() {
            return None;
        }
        let want = self.units(len as u64);
        self.permits.clone().acquire_many_owned(want).await.ok()
    }

    /// Runs `f` (an operation on a document of about `len` bytes: a create,
    /// an attribute update) holding its share of the parse budget
    /// throughout, so the copies it makes of the document (parsed, checked,
    /// serialised) count, not only its parses.
    pub async fn scoped<F: std::future::Future>(&self, len: usize, f: F) -> F::Output {
        if reserved_here() {
            return f.await;
        }
        let _permit = self.reserve(len).await;
        RESERVED.scope((), f).await
    }

    /// Parses the document stored (or to be stored) under `key`.
    ///
    /// # Errors
    /// `InvalidMetadata` (422) for a document over the size limit, nested
    /// too deep or not JSON.
    pub async fn parse(&self, key: &StoreKey, bytes: Bytes) -> ServiceResult<Value> {
        let len = bytes.len() as u64;
        if len > self.max_bytes {
            return Err(ServiceError::InvalidMetadata {
                key: key.to_string(),
                source: MetadataError::new(
                    "",
                    format!(
                        "the document is {len} bytes, more than the {} stored documents may have \
                         (twice limits.max_body_bytes)",
                        self.max_bytes
                    ),
                ),
            });
        }
        let _permit = self.reserve(usize::try_from(len).unwrap_or(usize::MAX)).await;
        cpu::run(move || crate::zarr::metadata::parse_json(&bytes)).await?.map_err(invalid(key))
    }

    /// The checks a metadata document passes before zarrd stores it, with
    /// the same parser and limits that will read it back: size, depth,
    /// the document's own rules, and for arrays [`ArrayDescription`]'s
    /// limits. Nothing is written when this fails.
    ///
    /// # Errors
    /// `InvalidMetadata` (size, depth, rules) or `UnsupportedArray` (an
    /// array over the limits, naming the limit).
    pub async fn check_document(&self, key: &StoreKey, bytes: Bytes, limits: &ArrayLimits) -> ServiceResult<()> {
        let Some(kind) = DocumentKind::from_key_name(key.name()) else { return Ok(()) };
        let value = self.parse(key, bytes).await?;
        let over = |e: crate::zarr::array::ArrayError| match e {
            e @ crate::zarr::array::ArrayError::TooLarge(_) => {
                Err(ServiceError::UnsupportedArray { key: key.to_string(), reason: e.to_string() })
            }
            // Valid but unsupported arrays may be stored (other tools read them).
            _ => Ok(()),
        };
        match kind {
            DocumentKind::ZarrJson => {
                if let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(&value, "").map_err(invalid(key))? {
                    match ArrayDescription::from_v3(&meta).and_then(|d| d.check_limits(limits).map(|()| d)) {
                        Ok(desc) => check_chunk_keys(key, &desc)?,
                        Err(e) => over(e)?,
                    }
                }
            }
            DocumentKind::ZArray => {
                let meta = ArrayMetadataV2::from_json(&value, "").map_err(invalid(key))?;
                match ArrayDescription::from_v2(&meta, Map::new()).and_then(|d| d.check_limits(limits).map(|()| d)) {
                    Ok(desc) => check_chunk_keys(key, &desc)?,
                    Err(e) => over(e)?,
                }
            }
            DocumentKind::ZGroup => {
                GroupMetadataV2::from_json(&value, "").map_err(invalid(key))?;
            }
            DocumentKind::ZAttrs => {
                attributes_from_json(&value, "").map_err(invalid(key))?;
            }
            DocumentKind::ZMetadata => {
                ConsolidatedMetadataV2::from_json(&value, "").map_err(invalid(key))?;
            }
        }
        Ok(())
    }
}

/// `v` indented, as zarr-python writes documents (clients do not care,
/// people reading files do), unless that is larger than `max_pretty` bytes:
/// indentation can multiply a document of many small arrays several times,
/// past what zarrd reads back (twice `limits.max_body_bytes`), so such a
/// document is written compact.
fn to_bytes(v: &Value, max_pretty: u64) -> Bytes {
    let pretty = serde_json::to_vec_pretty(v).unwrap_or_default();
    if pretty.len() as u64 <= max_pretty {
        return Bytes::from(pretty);
    }
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// Stores the document `name` of `node` after checking the exact bytes
/// with the parser and limits that will read them back
/// ([`DocumentGate::check_document`]): a rewrite zarrd could not read again
/// (too large, nested too deep, an array over the limits) writes nothing.
/// `mount` is the node's mount as [`NodeRef::writable`] gave it; the write
/// is made on the condition [`Versions::condition`] gives for the key (see
/// [`super::versioned`]).
pub(super) async fn put_doc(
    node: &NodeRef<'_>,
    mount: &Mount,
    name: &str,
    doc: &Value,
    versions: &Versions,
) -> ServiceResult<()> {
    let (key, bytes) = checked_doc(node, name, doc).await?;
    put_checked(node, mount, &key, bytes, versions).await
}

/// The bytes of a metadata document, checked as [`put_doc`] checks them,
/// for a rewrite that must know they pass before it changes anything.
pub(super) async fn checked_doc(node: &NodeRef<'_>, name: &str, doc: &Value) -> ServiceResult<(StoreKey, Bytes)> {
    let app = node.app();
    let key = node.path().key(name)?;
    let bytes = to_bytes(doc, app.config().limits.max_body_bytes);
    DocumentGate::of(app).check_document(&key, bytes.clone(), &array_limits(app)).await?;
    Ok((key, bytes))
}

/// Stores document bytes [`checked_doc`] checked, on the condition
/// `versions` gives for the key.
pub(super) async fn put_checked(
    node: &NodeRef<'_>,
    mount: &Mount,
    key: &StoreKey,
    bytes: Bytes,
    versions: &Versions,
) -> ServiceResult<()> {
    let result = mount.put(key, bytes, &versions.condition(key)).await;
    // A lost conditional write changed nothing here, but it says another
    // process changed the document: what is cached of it is stale too.
    node.app().metadata_cache().invalidate(mount.name(), node.path());
    result?;
    Ok(())
}

/// Refuses an array (its document at `key`) whose chunk keys could not all
/// be stored: the key of its last chunk (the longest, every index at its
/// most) would pass the longest key a store takes
/// ([`crate::storage::key::MAX_KEY_LEN`]), and every read or write of those
/// chunks would be 400 (a deep path of many dimensions).
///
/// # Errors
/// `UnsupportedArray` naming the length, the limit and that key.
fn check_chunk_keys(key: &StoreKey, desc: &ArrayDescription) -> ServiceResult<()> {
    let last: Vec<u64> =
        desc.shape.iter().zip(&desc.chunk_shape).map(|(&n, &c)| n.div_ceil(c.max(1)).saturating_sub(1)).collect();
    let dir = &key.as_str()[..key.as_str().len() - key.name().len()];
    let longest = format!("{dir}{}", desc.chunk_key(&last));
    let max = crate::storage::key::MAX_KEY_LEN;
    if longest.len() > max {
        return Err(ServiceError::UnsupportedArray {
            key: key.to_string(),
            reason: format!(
                "its chunk keys would be up to {} bytes (`{longest}`), more than the {max} a key may have: \
                 a shorter path or fewer dimensions",
                longest.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_keys_name_their_node() {
        let key = |k: &str| StoreKey::new(k).unwrap();
        assert_eq!(node_of_document_key(&key("a/b/zarr.json")), Some(NodePath::new("a/b").unwrap()));
        assert_eq!(node_of_document_key(&key(".zattrs")), Some(NodePath::root()));
        assert_eq!(node_of_document_key(&key("a/c/0/0")), None);
    }
}
