//! Opening nodes (arrays and groups): reading a node's metadata documents
//! and normalising them.
//!
//! - v3: `<path>/zarr.json` (`node_type` array or group);
//! - v2: `<path>/.zarray` or `<path>/.zgroup`, plus `<path>/.zattrs` when
//!   present.
//!
//! v3 wins when both exist (zarr-python reads v3 first too). A path with
//! none of these documents is [`ServiceError::NodeNotFound`]; a document that
//! does not parse is [`ServiceError::InvalidMetadata`] naming its key and
//! field. [`open()`] goes through the metadata cache
//! ([`crate::service::cache::metadata`]); [`load`] reads the documents now.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::documents::{invalid, DocumentGate};
use super::versioned::Versions;
use super::NodePath;
use crate::service::{App, NodeRef, ServiceError, ServiceResult};
use crate::storage::{Mount, ReadRequest, StorageError, StoreKey};
use crate::zarr::array::{ArrayDescription, ArrayLimits, ZarrFormat};
use crate::zarr::metadata::v2::attributes_from_json;
use crate::zarr::metadata::{ArrayMetadataV2, GroupMetadataV2, MetadataError, NodeMetadataV3};

/// An opened array: its normalised description plus the documents it came
/// from.
#[derive(Debug)]
pub struct ArrayNode {
    /// The mount it lives in.
    pub mount: Arc<Mount>,
    /// Its path in the mount.
    pub path: NodePath,
    /// The normalised description the engine works from (shared, so CPU
    /// work on the array can run on the CPU pool).
    pub desc: Arc<ArrayDescription>,
    /// The stored metadata document (`zarr.json` or `.zarray`), as stored.
    pub metadata: Value,
    /// v2 only: the stored `.zattrs` (v3 keeps attributes inside `metadata`).
    pub zattrs: Option<Value>,
    /// Which decoding of its chunks the metadata makes: a hash of every
    /// member of the stored document but `attributes` (the data type, the
    /// chunk shape, the codecs, the fill value...), keyed per process. A
    /// decoded chunk cached under one document is not served under another
    /// (see [`crate::service::cache::chunk::Version`]).
    pub decoding: u64,
}

/// The keys of [`ArrayNode::decoding`]'s hash: random per process, so no
/// document can be made to collide with another on purpose.
static DECODING_KEYS: std::sync::LazyLock<std::hash::RandomState> = std::sync::LazyLock::new(Default::default);

impl ArrayNode {
    /// The array described by `metadata` (parsed into `desc`).
    #[must_use]
    pub fn new(
        mount: Arc<Mount>,
        path: NodePath,
        desc: ArrayDescription,
        metadata: Value,
        zattrs: Option<Value>,
    ) -> Self {
        let decoding = decoding_of(&metadata);
        Self { mount, path, desc: Arc::new(desc), metadata, zattrs, decoding }
    }

    /// The metadata format.
    #[must_use]
    pub fn format(&self) -> ZarrFormat {
        self.desc.zarr_format
    }

    /// The store key of a chunk (grid coordinates).
    ///
    /// # Errors
    /// `InvalidKey` when the key is invalid (cannot happen for valid
    /// coordinates).
    pub fn chunk_key(&self, coords: &[u64]) -> ServiceResult<StoreKey> {
        self.path.key(&self.desc.chunk_key(coords))
    }

    /// True when `other` is the same array but for its attributes: the
    /// same document apart from v3 `attributes` (v2 keeps them in
    /// `.zattrs`), and the same dimension names. A write planned against one is
    /// valid for the other; an attribute merge by another process in
    /// between must not make a slice write start over.
    #[must_use]
    pub fn same_layout(&self, other: &ArrayNode) -> bool {
        if self.format() != other.format() || self.desc.dimension_names != other.desc.dimension_names {
            return false;
        }
        match (self.metadata.as_object(), other.metadata.as_object()) {
            (Some(a), Some(b)) => {
                let layout = |m: &'_ Map<String, Value>| m.iter().filter(|(k, _)| k.as_str() != "attributes").count();
                layout(a) == layout(b)
                    && a.iter().filter(|(k, _)| k.as_str() != "attributes").all(|(k, v)| b.get(k) == Some(v))
            }
            _ => self.metadata == other.metadata,
        }
    }
}

/// An opened group.
#[derive(Debug)]
pub struct GroupNode {
    /// The mount it lives in.
    pub mount: Arc<Mount>,
    /// Its path in the mount.
    pub path: NodePath,
    /// The metadata format.
    pub format: ZarrFormat,
    /// User attributes.
    pub attributes: Map<String, Value>,
    /// The stored group document (`zarr.json` or `.zgroup`), as stored.
    pub metadata: Value,
    /// v2 only: the stored `.zattrs`.
    pub zattrs: Option<Value>,
    /// How its children's documents are read.
    pub gate: DocumentGate,
}

/// An array or a group.
#[derive(Debug, Clone)]
pub enum Node {
    /// An array.
    Array(Arc<ArrayNode>),
    /// A group.
    Group(Arc<GroupNode>),
}

impl Node {
    /// The node's path.
    #[must_use]
    pub fn path(&self) -> &NodePath {
        match self {
            Self::Array(a) => &a.path,
            Self::Group(g) => &g.path,
        }
    }

    /// The mount the node lives in.
    #[must_use]
    pub fn mount(&self) -> &Arc<Mount> {
        match self {
            Self::Array(a) => &a.mount,
            Self::Group(g) => &g.mount,
        }
    }
}

/// Reads one stored document whole; `None` when it does not exist (or is a
/// prefix). A document over `max` bytes (the gate's
/// [`DocumentGate::max_bytes`](super::documents::DocumentGate::max_bytes))
/// is refused from its size, unread.
///
/// # Errors
/// Storage failures; a document over `max` bytes.
pub async fn read_document(
    mount: &Mount,
    key: &StoreKey,
    max: u64,
) -> ServiceResult<Option<crate::storage::ReadOutcome>> {
    match mount.storage().read(key, &ReadRequest { max_len: Some(max), ..ReadRequest::default() }).await {
        Ok(outcome) => Ok(Some(outcome)),
        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
        Err(StorageError::TooLarge { size, .. }) => Err(document_too_large(key, size, max)),
        Err(e) => Err(e.into()),
    }
}

/// A stored document of `size` bytes, over the `max` stored documents may
/// have.
fn document_too_large(key: &StoreKey, size: u64, max: u64) -> ServiceError {
    ServiceError::InvalidMetadata {
        key: key.to_string(),
        source: MetadataError::new(
            "",
            format!("the document is {size} bytes, more than the {max} stored documents may have (twice limits.max_body_bytes)"),
        ),
    }
}

fn unsupported(key: &StoreKey, e: &crate::zarr::array::ArrayError) -> ServiceError {
    ServiceError::UnsupportedArray { key: key.to_string(), reason: e.to_string() }
}

/// Reads one key whole with its ETag; `None` when it does not exist. A
/// document over `max` bytes is refused from its stored size, before any of
/// it is read ([`read_document`]).
async fn read_validated(mount: &Mount, key: &StoreKey, max: u64) -> ServiceResult<(Option<Bytes>, Validator)> {
    match read_document(mount, key, max).await? {
        Some(outcome) => Ok((Some(outcome.body), (key.clone(), Some(outcome.meta.etag)))),
        None => Ok((None, (key.clone(), None))),
    }
}

/// A metadata key and the ETag it had when read (`None`: absent).
pub type Validator = (StoreKey, Option<String>);

/// The nearest ancestor of `node` (the mount's root included) that is an
/// array, if any: nothing can be made below an array. One open per
/// ancestor, through the metadata cache.
///
/// # Errors
/// An ancestor's stored metadata that does not parse; storage failures.
pub async fn array_ancestor(node: &NodeRef<'_>) -> ServiceResult<Option<NodePath>> {
    let mut ancestor = node.path().parent();
    while let Some(p) = ancestor {
        match open(&node.at(p.clone())).await {
            Ok(Node::Array(_)) => return Ok(Some(p)),
            Ok(Node::Group(_)) | Err(ServiceError::NodeNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        ancestor = p.parent();
    }
    Ok(None)
}

/// Opens the node, through the metadata cache.
///
/// # Errors
/// `NodeNotFound`, `InvalidMetadata`, `UnsupportedArray`, storage failures.
pub async fn open(node: &NodeRef<'_>) -> ServiceResult<Node> {
    let app = node.app();
    app.metadata_cache().open(node.mount().mount().clone(), node.path(), DocumentGate::of(app)).await
}

/// [`open()`] on a mount already looked up, bypassing the cache (reads the
/// documents now).
///
/// # Errors
/// As [`open()`].
pub async fn open_in(mount: Arc<Mount>, path: &NodePath) -> ServiceResult<Node> {
    Ok(load(mount, path, &DocumentGate::default()).await?.0)
}

/// [`open_in`] with the documents read through `gate`.
///
/// # Errors
/// As [`open()`].
pub async fn open_in_with(mount: Arc<Mount>, path: &NodePath, gate: &DocumentGate) -> ServiceResult<Node> {
    Ok(load(mount, path, gate).await?.0)
}

/// The node as stored now (bypassing the cache: a mutation decides on
/// fresh documents), or `None` when there is none.
pub(super) async fn existing(node: &NodeRef<'_>) -> ServiceResult<Option<Node>> {
    let gate = DocumentGate::of(node.app());
    match open_in_with(node.mount().mount().clone(), node.path(), &gate).await {
        Ok(n) => Ok(Some(n)),
        Err(ServiceError::NodeNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// As [`existing`], with the version of every document read (also when
/// there is no node: the documents were then absent), for a conditional
/// rewrite ([`super::versioned`]).
pub(super) async fn existing_versioned(node: &NodeRef<'_>) -> ServiceResult<(Option<Node>, Versions)> {
    let gate = DocumentGate::of(node.app());
    let (found, read) = load_or_absent(node.mount().mount().clone(), node.path(), &gate).await?;
    Ok((found, Versions::new(read)))
}

/// [`ArrayNode::decoding`] of a stored array document.
fn decoding_of(metadata: &Value) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = DECODING_KEYS.build_hasher();
    match metadata {
        Value::Object(members) => {
            for (name, value) in members.iter().filter(|(name, _)| name.as_str() != "attributes") {
                name.hash(&mut h);
                value.to_string().hash(&mut h);
            }
        }
        other => other.to_string().hash(&mut h),
    }
    h.finish()
}

/// Reads and parses a node's documents; also returns what to revalidate
/// them by (each document key read and its ETag).
///
/// # Errors
/// As [`open()`].
pub async fn load(mount: Arc<Mount>, path: &NodePath, gate: &DocumentGate) -> ServiceResult<(Node, Vec<Validator>)> {
    let name = mount.name().to_string();
    match load_or_absent(mount, path, gate).await? {
        (Some(node), read) => Ok((node, read)),
        (None, _) => Err(ServiceError::NodeNotFound { mount: name, path: path.to_string() }),
    }
}

/// [`load`], answering `None` (with the documents' absence as their
/// versions) where there is no node.
async fn load_or_absent(
    mount: Arc<Mount>,
    path: &NodePath,
    gate: &DocumentGate,
) -> ServiceResult<(Option<Node>, Vec<Validator>)> {
    let v3_key = path.key("zarr.json")?;
    let (v3, v3_validator) = read_validated(&mount, &v3_key, gate.max_bytes()).await?;
    let mut validators = vec![v3_validator];
    if let Some(bytes) = v3 {
        let value = gate.parse(&v3_key, bytes).await?;
        return match NodeMetadataV3::from_json(&value, "").map_err(invalid(&v3_key))? {
            NodeMetadataV3::Array(meta) => {
                let desc = ArrayDescription::from_v3(&meta).map_err(|e| unsupported(&v3_key, &e))?;
                let node = ArrayNode::new(mount, path.clone(), desc, value, None);
                Ok((Some(Node::Array(Arc::new(node))), validators))
            }
            NodeMetadataV3::Group(group) => Ok((
                Some(Node::Group(Arc::new(GroupNode {
                    gate: gate.clone(),
                    mount,
                    path: path.clone(),
                    format: ZarrFormat::V3,
                    attributes: group.attributes,
                    metadata: value,
                    zattrs: None,
                }))),
                validators,
            )),
        };
    }
    let (zarray_key, zgroup_key, zattrs_key) = (path.key(".zarray")?, path.key(".zgroup")?, path.key(".zattrs")?);
    let ((zarray, v1), (zgroup, v2), (zattrs, v3)) = futures::try_join!(
        read_validated(&mount, &zarray_key, gate.max_bytes()),
        read_validated(&mount, &zgroup_key, gate.max_bytes()),
        read_validated(&mount, &zattrs_key, gate.max_bytes())
    )?;
    validators.extend([v1, v2, v3]);
    let (attributes, zattrs_value) = match zattrs {
        Some(bytes) => {
            let value = gate.parse(&zattrs_key, bytes).await?;
            (attributes_from_json(&value, "").map_err(invalid(&zattrs_key))?, Some(value))
        }
        None => (Map::new(), None),
    };
    if let Some(bytes) = zarray {
        let value = gate.parse(&zarray_key, bytes).await?;
        let meta = ArrayMetadataV2::from_json(&value, "").map_err(invalid(&zarray_key))?;
        let desc = ArrayDescription::from_v2(&meta, attributes).map_err(|e| unsupported(&zarray_key, &e))?;
        let node = ArrayNode::new(mount, path.clone(), desc, value, zattrs_value);
        return Ok((Some(Node::Array(Arc::new(node))), validators));
    }
    if let Some(bytes) = zgroup {
        let value = gate.parse(&zgroup_key, bytes).await?;
        GroupMetadataV2::from_json(&value, "").map_err(invalid(&zgroup_key))?;
        let node = GroupNode {
            gate: gate.clone(),
            mount,
            path: path.clone(),
            format: ZarrFormat::V2,
            attributes,
            metadata: value,
            zattrs: zattrs_value,
        };
        return Ok((Some(Node::Group(Arc::new(node))), validators));
    }
    Ok((None, validators))
}

/// The limits every array must keep to (`limits.max_decoded_chunk_bytes`,
/// `max_inner_chunks_per_shard`, `max_fill_value_bytes`).
#[must_use]
pub fn array_limits(app: &App) -> ArrayLimits {
    let l = &app.config().limits;
    ArrayLimits {
        max_decoded_chunk_bytes: l.max_decoded_chunk_bytes,
        max_inner_chunks_per_shard: l.max_inner_chunks_per_shard,
        max_fill_value_bytes: l.max_fill_value_bytes,
    }
}

/// Opens the node and requires it to be an array whose chunks, shards and
/// fill value keep to the configured limits ([`array_limits`]): documents
/// written behind zarrd's back are checked here, before any chunk is read
/// or written.
///
/// # Errors
/// As [`open()`], plus `NotAnArray` for a group and `UnsupportedArray`
/// (naming the limit) for an array over the limits.
pub async fn open_array(node: &NodeRef<'_>) -> ServiceResult<Arc<ArrayNode>> {
    match open(node).await? {
        Node::Array(a) => {
            a.desc.check_limits(&array_limits(node.app())).map_err(|e| {
                let name = if a.format() == ZarrFormat::V3 { "zarr.json" } else { ".zarray" };
                ServiceError::UnsupportedArray {
                    key: format!("{}/{}", node.mount_name(), node.path().join(name)),
                    reason: e.to_string(),
                }
            })?;
            Ok(a)
        }
        Node::Group(_) => Err(node.not_an_array()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::storage::MountSpec;

    fn array(doc: &Value, zattrs: Option<Value>) -> ArrayNode {
        let mount = Arc::new(Mount::build("m", &MountSpec::from_url("memory://")).unwrap());
        let desc = if doc["zarr_format"] == 3 {
            let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(doc, "").unwrap() else { panic!("a group") };
            ArrayDescription::from_v3(&meta).unwrap()
        } else {
            let attrs = zattrs.clone().and_then(|z| z.as_object().cloned()).unwrap_or_default();
            ArrayDescription::from_v2(&ArrayMetadataV2::from_json(doc, "").unwrap(), attrs).unwrap()
        };
        ArrayNode::new(mount, NodePath::root(), desc, doc.clone(), zattrs)
    }

    #[test]
    fn attributes_do_not_change_the_layout() {
        let v3 = |shape: u64, attrs: Value| {
            json!({"zarr_format": 3, "node_type": "array", "shape": [shape], "data_type": "uint8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
                "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}],
                "attributes": attrs})
        };
        let a = array(&v3(4, json!({"x": 1})), None);
        assert!(a.same_layout(&array(&v3(4, json!({"x": 2, "y": 3})), None)));
        assert!(!a.same_layout(&array(&v3(5, json!({"x": 1})), None)));
        let v2 = json!({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "|u1", "compressor": null,
            "fill_value": 0, "order": "C", "filters": null});
        let b = array(&v2, Some(json!({"_ARRAY_DIMENSIONS": ["x"], "note": 1})));
        assert!(b.same_layout(&array(&v2, Some(json!({"_ARRAY_DIMENSIONS": ["x"], "note": 2})))));
        let mut grown = v2.clone();
        grown["shape"] = json!([6]);
        assert!(!b.same_layout(&array(&grown, Some(json!({"_ARRAY_DIMENSIONS": ["x"], "note": 1})))));
        assert!(!a.same_layout(&b));
    }
}
