//! Node operations: describe (with TensorStore schema, statistics and
//! children), create, delete, attributes, resize and consolidate.
//!
//! Each operation does what zarr-python does to the store for the same
//! call, so a zarr-python user sees the same keys and documents:
//!
//! - create writes the node's documents and, for every missing ancestor up
//!   to the mount root, a group (`zarr.json` `{"attributes": {}, ...}`, or
//!   v2 `.zgroup` + empty `.zattrs`); a v2 array gets an empty `.zattrs`;
//! - attribute updates rewrite only `attributes` of the stored `zarr.json`
//!   (other members kept as stored) or the v2 `.zattrs`;
//! - resize rewrites `shape` and deletes the chunks wholly outside the new
//!   shape (chunks straddling the boundary keep their bytes, as in
//!   zarr-python and TensorStore);
//! - delete removes every key under the node; a group with children only
//!   when asked to be recursive;
//! - consolidate writes v3 inline `consolidated_metadata` into the group's
//!   `zarr.json` (descendant groups carry an empty inline block) or a v2
//!   `.zmetadata` (`zarr_consolidated_format: 1`).
//!
//! Concurrency: every mutation holds the node's exclusive lock
//! ([`super::locks::MountLocks::exclusive`]) for its whole duration, and
//! invalidates the metadata cache for the paths it writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::node::{self, ArrayNode, DocumentGate, GroupNode, Node, NodePath};
use super::{App, ServiceError, ServiceResult};
use crate::storage::{KeyPrefix, Mount, PutCondition, StoreKey};
use crate::zarr::array::{ArrayDescription, ArrayError, ZarrFormat};
use crate::zarr::metadata::{ArrayMetadataV2, NodeMetadataV3, MAX_EXTENT};
use crate::zarr::tensorstore::{self, spec::NewArray};

/// Every metadata document name a node may have.
pub const DOCUMENT_NAMES: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// The TensorStore schema of an array (`None` for types TensorStore lacks).
#[must_use]
pub fn tensorstore_schema(array: &ArrayNode) -> Option<Value> {
    match array.format() {
        ZarrFormat::V3 => match NodeMetadataV3::from_json(&array.metadata, "").ok()? {
            NodeMetadataV3::Array(meta) => tensorstore::schema_v3(&meta),
            NodeMetadataV3::Group(_) => None,
        },
        ZarrFormat::V2 => tensorstore::schema_v2(&ArrayMetadataV2::from_json(&array.metadata, "").ok()?),
    }
}

/// Stored objects of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Arrays: stored chunk (or shard) keys.
    pub stored_chunks: u64,
    /// Bytes of every object under the node, metadata included.
    pub stored_bytes: u64,
    /// Objects under the node, metadata included.
    pub stored_objects: u64,
}

fn prefix_of(path: &NodePath) -> ServiceResult<KeyPrefix> {
    Ok(KeyPrefix::new(path.as_str())?)
}

/// Counts what is stored under a node.
///
/// # Errors
/// Storage failures.
pub async fn stats(node: &Node) -> ServiceResult<Stats> {
    let (mount, path) = match node {
        Node::Array(a) => (&a.mount, &a.path),
        Node::Group(g) => (&g.mount, &g.path),
    };
    let objects = mount.storage().list_recursive(&prefix_of(path)?, usize::MAX).await?;
    let mut s = Stats::default();
    for (name, meta) in &objects {
        s.stored_objects += 1;
        s.stored_bytes += meta.size;
        if let Node::Array(a) = node {
            if a.desc.chunk_key_encoding.decode(name, a.desc.shape.len()).is_ok() {
                s.stored_chunks += 1;
            }
        }
    }
    Ok(s)
}

/// One descendant of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Child {
    /// Path relative to the group (`sub/arr`).
    pub relative: String,
    /// `array` or `group`.
    pub node_type: &'static str,
    /// Its metadata format.
    pub format: ZarrFormat,
    /// Levels below the group (1 = a direct child).
    pub depth: usize,
    /// Arrays: the shape.
    pub shape: Option<Vec<u64>>,
}

/// The descendants of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// By relative path.
    pub nodes: Vec<Child>,
    /// Whether they came from consolidated metadata.
    pub consolidated: bool,
    /// Whether `limit` cut the list (a listing stops there).
    pub truncated: bool,
}

/// The descendants of a group down to `depth` levels, at most `limit`, from
/// consolidated metadata when the group has it, else by listing (each
/// candidate opened).
///
/// # Errors
/// Storage failures, invalid consolidated metadata.
pub async fn children(group: &GroupNode, depth: usize, limit: usize) -> ServiceResult<Children> {
    if let Some(mut nodes) = consolidated_children(group, depth).await? {
        let truncated = nodes.len() > limit;
        nodes.truncate(limit);
        return Ok(Children { nodes, consolidated: true, truncated });
    }
    let mut out = Vec::new();
    let mut frontier = vec![(group.path.clone(), 0usize)];
    let mut truncated = false;
    while let Some((path, level)) = frontier.pop() {
        if level >= depth {
            continue;
        }
        if out.len() >= limit {
            truncated = true;
            break;
        }
        for entry in group.mount.list(&prefix_of(&path)?).await? {
            if out.len() >= limit {
                truncated = true;
                break;
            }
            let crate::storage::ListEntry::Prefix { name } = entry else { continue };
            let Ok(child_path) = NodePath::new(&join(path.as_str(), &name)) else { continue };
            let child = match node::open_in_with(group.mount.clone(), &child_path, &group.gate).await {
                Ok(n) => n,
                Err(ServiceError::NodeNotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            let relative = relative_to(&group.path, &child_path);
            match &child {
                Node::Array(a) => out.push(Child {
                    relative,
                    node_type: "array",
                    format: a.format(),
                    depth: level + 1,
                    shape: Some(a.desc.shape.clone()),
                }),
                Node::Group(g) => {
                    out.push(Child { relative, node_type: "group", format: g.format, depth: level + 1, shape: None });
                    frontier.push((child_path, level + 1));
                }
            }
        }
    }
    out.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(Children { nodes: out, consolidated: false, truncated })
}

fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_string()
    } else {
        format!("{base}/{name}")
    }
}

fn relative_to(base: &NodePath, path: &NodePath) -> String {
    if base.is_root() {
        path.as_str().to_string()
    } else {
        path.as_str().strip_prefix(base.as_str()).unwrap_or(path.as_str()).trim_start_matches('/').to_string()
    }
}

async fn consolidated_children(group: &GroupNode, depth: usize) -> ServiceResult<Option<Vec<Child>>> {
    let depth_of = |rel: &str| rel.split('/').count();
    match group.format {
        ZarrFormat::V3 => {
            let Some(cm) = group.metadata.get("consolidated_metadata").and_then(|c| c.get("metadata")) else {
                return Ok(None);
            };
            let Some(docs) = cm.as_object() else { return Ok(None) };
            let mut out = Vec::new();
            for (rel, doc) in docs {
                let d = depth_of(rel);
                if d > depth {
                    continue;
                }
                let is_array = doc.get("node_type").and_then(Value::as_str) == Some("array");
                let shape = doc.get("shape").and_then(|s| serde_json::from_value::<Vec<u64>>(s.clone()).ok());
                out.push(Child {
                    relative: rel.clone(),
                    node_type: if is_array { "array" } else { "group" },
                    format: ZarrFormat::V3,
                    depth: d,
                    shape: if is_array { shape } else { None },
                });
            }
            out.sort_by(|a, b| a.relative.cmp(&b.relative));
            Ok(Some(out))
        }
        ZarrFormat::V2 => {
            let key = group.path.key(".zmetadata")?;
            let Some(bytes) = node::read_optional(&group.mount, &key).await? else { return Ok(None) };
            let value = group.gate.parse(&key, bytes).await?;
            let Some(docs) = value.get("metadata").and_then(Value::as_object) else { return Ok(None) };
            let mut out = Vec::new();
            for (k, doc) in docs {
                let (rel, kind) = match k.rsplit_once('/') {
                    Some((rel, kind)) => (rel, kind),
                    None => continue, // the group's own documents
                };
                let node_type = match kind {
                    ".zarray" => "array",
                    ".zgroup" => "group",
                    _ => continue,
                };
                let d = depth_of(rel);
                if d > depth {
                    continue;
                }
                let shape = doc.get("shape").and_then(|s| serde_json::from_value::<Vec<u64>>(s.clone()).ok());
                out.push(Child {
                    relative: rel.to_string(),
                    node_type,
                    format: ZarrFormat::V2,
                    depth: d,
                    shape: if node_type == "array" { shape } else { None },
                });
            }
            out.sort_by(|a, b| a.relative.cmp(&b.relative));
            Ok(Some(out))
        }
    }
}

fn writable(app: &App, mount: &str) -> ServiceResult<Arc<Mount>> {
    let m = app.mount(mount)?;
    if m.read_only() {
        return Err(ServiceError::ReadOnly(mount.to_string()));
    }
    Ok(m.clone())
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

/// Stores a metadata document after checking the exact bytes with the
/// parser and limits that will read them back ([`DocumentGate::check_document`]):
/// a rewrite zarrd could not read again (too large, nested too deep, an
/// array over the limits) writes nothing.
async fn put_doc(app: &App, mount: &Mount, path: &NodePath, name: &str, doc: &Value) -> ServiceResult<()> {
    let (key, bytes) = checked_doc(app, path, name, doc).await?;
    put_checked(app, mount, path, &key, bytes).await
}

/// The bytes of a metadata document, checked as [`put_doc`] checks them,
/// for a rewrite that must know they pass before it changes anything.
async fn checked_doc(app: &App, path: &NodePath, name: &str, doc: &Value) -> ServiceResult<(StoreKey, Bytes)> {
    let key = path.key(name)?;
    let bytes = to_bytes(doc, app.config().limits.max_body_bytes);
    DocumentGate::of(app).check_document(&key, bytes.clone(), &node::array_limits(app)).await?;
    Ok((key, bytes))
}

/// Stores document bytes [`checked_doc`] checked.
async fn put_checked(app: &App, mount: &Mount, path: &NodePath, key: &StoreKey, bytes: Bytes) -> ServiceResult<()> {
    mount.put(key, bytes, &PutCondition::None).await?;
    app.metadata_cache().invalidate(mount.name(), path);
    Ok(())
}

/// Whether a node exists at `path` (of either format), as opened.
async fn existing(app: &App, mount: &Arc<Mount>, path: &NodePath) -> ServiceResult<Option<Node>> {
    match node::open_in_with(mount.clone(), path, &DocumentGate::of(app)).await {
        Ok(n) => Ok(Some(n)),
        Err(ServiceError::NodeNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a create request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum NewNode {
    /// An array's documents.
    Array(NewArray),
    /// A group: its format and attributes.
    Group {
        /// 2 or 3.
        format: ZarrFormat,
        /// The v3 `zarr.json` as given (v3), or the attributes (v2).
        document: Value,
    },
}

/// How a create treats an existing node (TensorStore's `create`, `open`,
/// `delete_existing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenMode {
    /// Create the node when missing.
    pub create: bool,
    /// Return an existing node instead of failing.
    pub open: bool,
    /// Replace an existing node (deleting it first, with everything under it).
    pub delete_existing: bool,
}

impl Default for OpenMode {
    fn default() -> Self {
        Self { create: true, open: false, delete_existing: false }
    }
}

fn bad(msg: impl Into<String>) -> ServiceError {
    ServiceError::BadRequest(msg.into())
}

/// Refuses, before anything is written, an array zarrd could not serve.
fn check_supported(desc: Result<ArrayDescription, ArrayError>) -> ServiceResult<()> {
    desc.map(|_| ()).map_err(|e| ServiceError::UnsupportedArray { key: "request body".into(), reason: e.to_string() })
}

fn invalid_body(source: crate::zarr::metadata::MetadataError) -> ServiceError {
    ServiceError::InvalidMetadata { key: "request body".into(), source }
}

/// Parses a create body: a TensorStore spec (`driver`), a v3 `zarr.json`,
/// or a v2 `.zarray` / group (`zarr_format: 2`) with an optional
/// `attributes` member. Returns the node and the open mode flags found in
/// a spec (`create`, `open`, `delete_existing`).
///
/// # Errors
/// `BadRequest` for a body of none of these forms or a spec that cannot be
/// satisfied (naming the member); `InvalidMetadata` for documents that do
/// not validate.
pub fn parse_create_body(body: &Value) -> ServiceResult<(NewNode, Map<String, Value>)> {
    let Some(obj) = body.as_object() else {
        return Err(bad("request body: expected a JSON object (a zarr.json, a .zarray or a TensorStore spec)"));
    };
    let mut flags = Map::new();
    if obj.contains_key("driver") {
        for k in ["create", "open", "delete_existing"] {
            if let Some(v) = obj.get(k) {
                if !v.is_boolean() {
                    return Err(bad(format!("request body: `{k}`: expected a boolean")));
                }
                flags.insert(k.into(), v.clone());
            }
        }
        let array = tensorstore::spec::new_array(body).map_err(|e| bad(format!("TensorStore spec: {e}")))?;
        match &array {
            NewArray::V3(doc) => {
                if let NodeMetadataV3::Array(meta) = NodeMetadataV3::from_json(doc, "").map_err(invalid_body)? {
                    check_supported(ArrayDescription::from_v3(&meta))?;
                }
            }
            NewArray::V2 { zarray, zattrs } => {
                let meta = ArrayMetadataV2::from_json(zarray, "").map_err(invalid_body)?;
                check_supported(ArrayDescription::from_v2(&meta, zattrs.clone().unwrap_or_default()))?;
            }
        }
        return Ok((NewNode::Array(array), flags));
    }
    match obj.get("zarr_format").and_then(Value::as_u64) {
        Some(3) => match NodeMetadataV3::from_json(body, "").map_err(invalid_body)? {
            NodeMetadataV3::Array(meta) => {
                check_supported(ArrayDescription::from_v3(&meta))?;
                Ok((NewNode::Array(NewArray::V3(body.clone())), flags))
            }
            NodeMetadataV3::Group(_) => Ok((NewNode::Group { format: ZarrFormat::V3, document: body.clone() }, flags)),
        },
        Some(2) => {
            let mut doc = obj.clone();
            let attributes = match doc.remove("attributes") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(m)) => m,
                Some(_) => return Err(bad("request body: `attributes`: expected an object")),
            };
            if doc.contains_key("shape") {
                let zarray = Value::Object(doc);
                let meta = ArrayMetadataV2::from_json(&zarray, "").map_err(invalid_body)?;
                check_supported(ArrayDescription::from_v2(&meta, attributes.clone()))?;
                Ok((NewNode::Array(NewArray::V2 { zarray, zattrs: Some(attributes) }), flags))
            } else {
                if let Some((k, _)) = doc.iter().find(|(k, _)| k.as_str() != "zarr_format") {
                    return Err(bad(format!(
                        "request body: unknown member `{k}` for a v2 group (an array needs `shape`, `chunks`, `dtype`, ...)"
                    )));
                }
                Ok((NewNode::Group { format: ZarrFormat::V2, document: Value::Object(attributes) }, flags))
            }
        }
        _ => Err(bad(
            "request body: expected a v3 zarr.json (`zarr_format: 3`), a v2 .zarray or group (`zarr_format: 2`), \
             or a TensorStore spec (`driver`: \"zarr3\" or \"zarr\")",
        )),
    }
}

/// The outcome of a create.
#[derive(Debug, Clone)]
pub struct Created {
    /// The node, as now stored.
    pub node: Node,
    /// False when an existing node was opened instead.
    pub created: bool,
}

fn group_doc_v3() -> Value {
    json!({"attributes": {}, "zarr_format": 3, "node_type": "group"})
}

/// Creates the missing ancestors of `path` as groups of `format`.
async fn create_parents(app: &App, mount: &Arc<Mount>, path: &NodePath, format: ZarrFormat) -> ServiceResult<()> {
    let mut ancestors = Vec::new();
    let mut p = path.parent();
    while let Some(a) = p {
        p = a.parent();
        ancestors.push(a);
    }
    for a in ancestors.into_iter().rev() {
        match existing(app, mount, &a).await? {
            Some(Node::Group(_)) => {}
            Some(Node::Array(_)) => {
                return Err(ServiceError::Conflict(format!("cannot create `{path}`: its ancestor `{a}` is an array")))
            }
            None => write_group(app, mount, &a, format, &Value::Object(Map::new())).await?,
        }
    }
    Ok(())
}

async fn write_group(app: &App, mount: &Mount, path: &NodePath, format: ZarrFormat, doc: &Value) -> ServiceResult<()> {
    match format {
        ZarrFormat::V3 => {
            let doc = if doc.get("zarr_format").is_some() { doc.clone() } else { group_doc_v3() };
            put_doc(app, mount, path, "zarr.json", &doc).await
        }
        ZarrFormat::V2 => {
            put_doc(app, mount, path, ".zgroup", &json!({"zarr_format": 2})).await?;
            put_doc(app, mount, path, ".zattrs", doc).await
        }
    }
}

/// Creates (or opens, or replaces) the node at `path`.
///
/// # Errors
/// `ReadOnly`, `AlreadyExists` (exists and not `open`), `NodeNotFound`
/// (missing and not `create`), `Conflict` (an ancestor is an array, or the
/// existing node is of the other kind), storage failures.
pub async fn create(app: &App, mount: &str, path: &NodePath, new: &NewNode, mode: OpenMode) -> ServiceResult<Created> {
    let len = match new {
        NewNode::Array(NewArray::V3(doc)) => node::json_len(doc),
        NewNode::Array(NewArray::V2 { zarray, zattrs }) => {
            node::json_len(zarray) + zattrs.as_ref().map_or(0, node::json_len)
        }
        NewNode::Group { document, .. } => node::json_len(document),
    };
    DocumentGate::of(app).scoped(len, create_scoped(app, mount, path, new, mode)).await
}

async fn create_scoped(
    app: &App,
    mount: &str,
    path: &NodePath,
    new: &NewNode,
    mode: OpenMode,
) -> ServiceResult<Created> {
    let m = writable(app, mount)?;
    if !mode.create && !mode.open {
        return Err(bad("at least one of `create` and `open` must be true"));
    }
    let _guard = app.locks(mount)?.exclusive(path.as_str()).await;
    if let Some(old) = existing(app, &m, path).await? {
        if mode.delete_existing && mode.create {
            delete_all(app, &m, path).await?;
        } else if mode.open {
            let same_kind =
                matches!((&old, new), (Node::Array(_), NewNode::Array(_)) | (Node::Group(_), NewNode::Group { .. }));
            if !same_kind {
                return Err(ServiceError::Conflict(format!(
                    "`{path}` in mount `{mount}` exists and is of another node type"
                )));
            }
            if let (Node::Array(a), NewNode::Array(wanted)) = (&old, new) {
                check_open_matches(a, wanted).map_err(|field| {
                    ServiceError::Conflict(format!(
                        "`{path}` in mount `{mount}` exists with a different {field} than requested"
                    ))
                })?;
            }
            return Ok(Created { node: old, created: false });
        } else {
            return Err(ServiceError::AlreadyExists { mount: mount.to_string(), path: path.to_string() });
        }
    } else if !mode.create {
        return Err(ServiceError::NodeNotFound { mount: mount.to_string(), path: path.to_string() });
    }
    let format = match new {
        NewNode::Array(NewArray::V3(_)) => ZarrFormat::V3,
        NewNode::Array(NewArray::V2 { .. }) => ZarrFormat::V2,
        NewNode::Group { format, .. } => *format,
    };
    create_parents(app, &m, path, format).await?;
    match new {
        NewNode::Array(NewArray::V3(doc)) => put_doc(app, &m, path, "zarr.json", doc).await?,
        NewNode::Array(NewArray::V2 { zarray, zattrs }) => {
            put_doc(app, &m, path, ".zarray", zarray).await?;
            put_doc(app, &m, path, ".zattrs", &Value::Object(zattrs.clone().unwrap_or_default())).await?;
        }
        NewNode::Group { format, document } => write_group(app, &m, path, *format, document).await?,
    }
    let node = node::open_in_with(m.clone(), path, &DocumentGate::of(app)).await?;
    Ok(Created { node, created: true })
}

/// Opening an existing array checks what TensorStore checks on open: the
/// format, the shape and the data type (chunking left to the stored array).
fn check_open_matches(existing: &ArrayNode, wanted: &NewArray) -> Result<(), &'static str> {
    let (format, doc, dtype_key) = match wanted {
        NewArray::V3(doc) => (ZarrFormat::V3, doc, "data_type"),
        NewArray::V2 { zarray, .. } => (ZarrFormat::V2, zarray, "dtype"),
    };
    if existing.format() != format {
        return Err("zarr_format");
    }
    if doc.get("shape") != existing.metadata.get("shape") {
        return Err("shape");
    }
    if doc.get(dtype_key) != existing.metadata.get(dtype_key) {
        return Err("data type");
    }
    Ok(())
}

/// Deletes keys (relative to `prefix`), in batches of [`DELETE_CONCURRENCY`].
async fn delete_keys<'a>(
    mount: &Mount,
    prefix: &KeyPrefix,
    names: impl Iterator<Item = &'a String>,
) -> ServiceResult<u64> {
    let keys = names.map(|n| prefix.child(n)).collect::<Result<Vec<_>, _>>()?;
    let count = keys.len() as u64;
    for batch in keys.chunks(DELETE_CONCURRENCY) {
        futures::future::try_join_all(batch.iter().map(|k| mount.delete(k))).await?;
    }
    Ok(count)
}

/// How many deletes a delete or resize keeps in flight.
pub const DELETE_CONCURRENCY: usize = 16;

/// Deletes every key of the node at `path` (its documents and everything
/// under it).
async fn delete_all(app: &App, mount: &Arc<Mount>, path: &NodePath) -> ServiceResult<()> {
    let prefix = prefix_of(path)?;
    let objects = mount.storage().list_recursive(&prefix, usize::MAX).await?;
    // Chunks first, documents last: an interrupted delete leaves a node
    // that still opens (with missing chunks), never orphaned chunks.
    let (docs, data): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .map(|(name, _)| name)
        .partition(|n| DOCUMENT_NAMES.contains(&n.rsplit('/').next().unwrap_or("")));
    delete_keys(mount, &prefix, data.iter().chain(docs.iter().filter(|d| d.contains('/')))).await?;
    for name in DOCUMENT_NAMES {
        mount.delete(&path.key(name)?).await?;
    }
    app.metadata_cache().invalidate_tree(mount.name(), path);
    Ok(())
}

/// Deletes the node at `path`; a group with children only when `recursive`.
///
/// # Errors
/// `ReadOnly`, `NodeNotFound`, `NotEmpty`, storage failures.
pub async fn delete(app: &App, mount: &str, path: &NodePath, recursive: bool) -> ServiceResult<()> {
    let m = writable(app, mount)?;
    let _guard = app.locks(mount)?.exclusive(path.as_str()).await;
    let node = existing(app, &m, path)
        .await?
        .ok_or_else(|| ServiceError::NodeNotFound { mount: mount.to_string(), path: path.to_string() })?;
    if let Node::Group(_) = node {
        if !recursive {
            let entries = m.list(&prefix_of(path)?).await?;
            let has_children = entries.iter().any(|e| match e {
                crate::storage::ListEntry::Prefix { .. } => true,
                crate::storage::ListEntry::Object { name, .. } => !DOCUMENT_NAMES.contains(&name.as_str()),
            });
            if has_children {
                return Err(ServiceError::NotEmpty { mount: mount.to_string(), path: path.to_string() });
            }
        }
    }
    delete_all(app, &m, path).await?;
    forget_in_consolidated(app, &m, path).await
}

/// Drops a deleted node (and its descendants) from the consolidated
/// metadata of every ancestor that has some, so clients opening the
/// hierarchy from it do not see a node that is gone. (zarr-python does this
/// only for a direct child of the group it deletes from.)
async fn forget_in_consolidated(app: &App, mount: &Arc<Mount>, path: &NodePath) -> ServiceResult<()> {
    let mut ancestor = path.parent();
    while let Some(a) = ancestor {
        ancestor = a.parent();
        let Some(Node::Group(g)) = existing(app, mount, &a).await? else { continue };
        let rel = relative_to(&a, path);
        let gone = |k: &str| k == rel || k.starts_with(&format!("{rel}/"));
        match g.format {
            ZarrFormat::V3 => {
                let mut doc = g.metadata.clone();
                let Some(docs) = doc.pointer_mut("/consolidated_metadata/metadata").and_then(Value::as_object_mut)
                else {
                    continue;
                };
                let before = docs.len();
                docs.retain(|k, _| !gone(k));
                if docs.len() != before {
                    put_doc(app, mount, &a, "zarr.json", &doc).await?;
                }
            }
            ZarrFormat::V2 => {
                let key = a.key(".zmetadata")?;
                let Some(bytes) = node::read_optional(mount, &key).await? else { continue };
                let Ok(mut doc) = DocumentGate::of(app).parse(&key, bytes).await else { continue };
                let Some(docs) = doc.get_mut("metadata").and_then(Value::as_object_mut) else { continue };
                let before = docs.len();
                docs.retain(|k, _| !k.starts_with(&format!("{rel}/")));
                if docs.len() != before {
                    put_doc(app, mount, &a, ".zmetadata", &doc).await?;
                }
            }
        }
    }
    Ok(())
}

/// How attributes are updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributeUpdate {
    /// Replace them all.
    Replace,
    /// JSON merge patch (RFC 7386) on the top-level members: `null` removes
    /// a member, other values replace it.
    Merge,
}

/// Updates a node's attributes; returns the new attributes.
///
/// # Errors
/// `ReadOnly`, `NodeNotFound`, storage failures.
pub async fn update_attributes(
    app: &App,
    mount: &str,
    path: &NodePath,
    attributes: Map<String, Value>,
    how: AttributeUpdate,
) -> ServiceResult<Map<String, Value>> {
    let len = node::json_len(&attributes);
    DocumentGate::of(app).scoped(len, update_attributes_scoped(app, mount, path, attributes, how)).await
}

async fn update_attributes_scoped(
    app: &App,
    mount: &str,
    path: &NodePath,
    attributes: Map<String, Value>,
    how: AttributeUpdate,
) -> ServiceResult<Map<String, Value>> {
    let m = writable(app, mount)?;
    let _guard = app.locks(mount)?.exclusive(path.as_str()).await;
    let node = existing(app, &m, path)
        .await?
        .ok_or_else(|| ServiceError::NodeNotFound { mount: mount.to_string(), path: path.to_string() })?;
    let (format, current, metadata) = match &node {
        Node::Array(a) => (a.format(), a.desc.attributes.clone(), a.metadata.clone()),
        Node::Group(g) => (g.format, g.attributes.clone(), g.metadata.clone()),
    };
    let new = match how {
        AttributeUpdate::Replace => attributes,
        AttributeUpdate::Merge => {
            let mut merged = current;
            for (k, v) in attributes {
                if v.is_null() {
                    merged.remove(&k);
                } else {
                    merged.insert(k, v);
                }
            }
            merged
        }
    };
    match format {
        ZarrFormat::V3 => {
            let mut doc = metadata;
            if let Some(o) = doc.as_object_mut() {
                o.insert("attributes".into(), Value::Object(new.clone()));
            }
            put_doc(app, &m, path, "zarr.json", &doc).await?;
        }
        ZarrFormat::V2 => put_doc(app, &m, path, ".zattrs", &Value::Object(new.clone())).await?,
    }
    Ok(new)
}

/// A resize request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resize {
    /// The new shape (same rank).
    pub shape: Vec<u64>,
    /// Fail if any dimension would shrink.
    pub expand_only: bool,
    /// Fail if any dimension would grow.
    pub shrink_only: bool,
}

/// Resizes an array; returns it as now stored and how many chunks were
/// deleted.
///
/// # Errors
/// `ReadOnly`, `NodeNotFound`, `NotAnArray`, `BadRequest` (rank, guards),
/// storage failures.
pub async fn resize(app: &App, mount: &str, path: &NodePath, req: &Resize) -> ServiceResult<(Arc<ArrayNode>, u64)> {
    let m = writable(app, mount)?;
    let _guard = app.locks(mount)?.exclusive(path.as_str()).await;
    let array = match existing(app, &m, path).await? {
        Some(Node::Array(a)) => a,
        Some(Node::Group(_)) => {
            return Err(ServiceError::NotAnArray { mount: mount.to_string(), path: path.to_string() })
        }
        None => return Err(ServiceError::NodeNotFound { mount: mount.to_string(), path: path.to_string() }),
    };
    let old = &array.desc.shape;
    if req.shape.len() != old.len() {
        return Err(bad(format!(
            "shape: expected {} dimensions (the array's rank), got {}",
            old.len(),
            req.shape.len()
        )));
    }
    for (i, (&new, &cur)) in req.shape.iter().zip(old).enumerate() {
        if new > MAX_EXTENT {
            return Err(bad(format!(
                "shape[{i}]: {new} is larger than zarrd supports (2^62 = {MAX_EXTENT}, the index space TensorStore \
                 and numpy address)"
            )));
        }
        if req.expand_only && new < cur {
            return Err(bad(format!("shape[{i}]: expand_only is set but {new} is smaller than the current {cur}")));
        }
        if req.shrink_only && new > cur {
            return Err(bad(format!("shape[{i}]: shrink_only is set but {new} is larger than the current {cur}")));
        }
    }
    // The new document must pass before anything changes; then chunks
    // wholly outside the new shape go first, then the document.
    let mut doc = array.metadata.clone();
    if let Some(o) = doc.as_object_mut() {
        o.insert("shape".into(), json!(req.shape));
    }
    let name = if array.format() == ZarrFormat::V3 { "zarr.json" } else { ".zarray" };
    let (key, bytes) = checked_doc(app, path, name, &doc).await?;
    let mut deleted = 0;
    if req.shape.iter().zip(old).any(|(n, c)| n < c) {
        let prefix = prefix_of(path)?;
        let chunk = &array.desc.chunk_shape;
        let outside: Vec<String> = m
            .storage()
            .list_recursive(&prefix, usize::MAX)
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| {
                array.desc.chunk_key_encoding.decode(name, old.len()).is_ok_and(|coords| {
                    coords.iter().zip(chunk).zip(&req.shape).any(|((&c, &size), &n)| c.saturating_mul(size) >= n)
                })
            })
            .collect();
        deleted = delete_keys(&m, &prefix, outside.iter()).await?;
    }
    put_checked(app, &m, path, &key, bytes).await?;
    match node::open_in_with(m.clone(), path, &DocumentGate::of(app)).await? {
        Node::Array(a) => Ok((a, deleted)),
        Node::Group(_) => Err(ServiceError::NotAnArray { mount: mount.to_string(), path: path.to_string() }),
    }
}

/// Every node below `group` (any depth), with its documents.
async fn descendants(app: &App, mount: &Arc<Mount>, group: &NodePath) -> ServiceResult<Vec<(NodePath, Node)>> {
    let mut out = Vec::new();
    let mut frontier = vec![group.clone()];
    while let Some(path) = frontier.pop() {
        for entry in mount.list(&prefix_of(&path)?).await? {
            let crate::storage::ListEntry::Prefix { name } = entry else { continue };
            let Ok(child) = NodePath::new(&join(path.as_str(), &name)) else { continue };
            match existing(app, mount, &child).await? {
                Some(n @ Node::Group(_)) => {
                    frontier.push(child.clone());
                    out.push((child, n));
                }
                Some(n) => out.push((child, n)),
                None => {}
            }
        }
    }
    out.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    Ok(out)
}

/// Writes consolidated metadata for the group at `path`; returns how many
/// descendant nodes it holds.
///
/// # Errors
/// `ReadOnly`, `NodeNotFound`, `BadRequest` for an array, storage failures.
pub async fn consolidate(app: &App, mount: &str, path: &NodePath) -> ServiceResult<usize> {
    let m = writable(app, mount)?;
    let _guard = app.locks(mount)?.exclusive(path.as_str()).await;
    let group = match existing(app, &m, path).await? {
        Some(Node::Group(g)) => g,
        Some(Node::Array(_)) => {
            return Err(bad(format!("`{path}` in mount `{mount}` is an array; only groups are consolidated")))
        }
        None => return Err(ServiceError::NodeNotFound { mount: mount.to_string(), path: path.to_string() }),
    };
    let nodes = descendants(app, &m, path).await?;
    let empty_inline = json!({"kind": "inline", "must_understand": false, "metadata": {}});
    match group.format {
        ZarrFormat::V3 => {
            let mut docs = BTreeMap::new();
            for (p, n) in &nodes {
                let doc = match n {
                    Node::Array(a) if a.format() == ZarrFormat::V3 => a.metadata.clone(),
                    Node::Group(g) if g.format == ZarrFormat::V3 => {
                        let mut d = g.metadata.clone();
                        if let Some(o) = d.as_object_mut() {
                            o.insert("consolidated_metadata".into(), empty_inline.clone());
                        }
                        d
                    }
                    _ => continue,
                };
                docs.insert(relative_to(path, p), doc);
            }
            let mut doc = group.metadata.clone();
            if let Some(o) = doc.as_object_mut() {
                o.insert(
                    "consolidated_metadata".into(),
                    json!({"kind": "inline", "must_understand": false, "metadata": docs}),
                );
            }
            put_doc(app, &m, path, "zarr.json", &doc).await?;
            Ok(docs.len())
        }
        ZarrFormat::V2 => {
            let mut docs = Map::new();
            docs.insert(".zgroup".into(), group.metadata.clone());
            docs.insert(".zattrs".into(), group.zattrs.clone().unwrap_or_else(|| json!({})));
            let mut count = 0;
            for (p, n) in &nodes {
                let rel = relative_to(path, p);
                let (name, doc, zattrs) = match n {
                    Node::Array(a) if a.format() == ZarrFormat::V2 => (".zarray", a.metadata.clone(), a.zattrs.clone()),
                    Node::Group(g) if g.format == ZarrFormat::V2 => {
                        let mut d = g.metadata.clone();
                        if let Some(o) = d.as_object_mut() {
                            o.insert("consolidated_metadata".into(), empty_inline.clone());
                        }
                        (".zgroup", d, g.zattrs.clone())
                    }
                    _ => continue,
                };
                count += 1;
                docs.insert(format!("{rel}/{name}"), doc);
                if let Some(z) = zattrs {
                    docs.insert(format!("{rel}/.zattrs"), z);
                }
            }
            let doc = json!({"metadata": docs, "zarr_consolidated_format": 1});
            put_doc(app, &m, path, ".zmetadata", &doc).await?;
            Ok(count)
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_bodies_are_recognised() {
        let (n, flags) =
            parse_create_body(&json!({"driver": "zarr3", "dtype": "uint8", "shape": [3], "open": true})).unwrap();
        assert!(matches!(n, NewNode::Array(NewArray::V3(_))));
        assert_eq!(flags.get("open"), Some(&json!(true)));
        let (n, _) = parse_create_body(&json!({"zarr_format": 2, "attributes": {"a": 1}})).unwrap();
        assert_eq!(n, NewNode::Group { format: ZarrFormat::V2, document: json!({"a": 1}) });
        let zarray = json!({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4", "compressor": null,
            "fill_value": 0, "order": "C", "filters": null});
        assert!(matches!(parse_create_body(&zarray).unwrap().0, NewNode::Array(NewArray::V2 { .. })));
        let e = parse_create_body(&json!({"zarr_format": 2, "chunks": [1]})).unwrap_err();
        assert!(e.to_string().contains("`chunks`"), "{e}");
        let e = parse_create_body(&json!({"driver": "zarr3", "open": "yes"})).unwrap_err();
        assert!(e.to_string().contains("`open`"), "{e}");
        assert!(matches!(parse_create_body(&json!(3)), Err(ServiceError::BadRequest(_))));
        let bad = json!({"zarr_format": 3, "node_type": "array", "shape": [1]});
        assert!(matches!(parse_create_body(&bad), Err(ServiceError::InvalidMetadata { .. })));
    }

    #[test]
    fn document_keys_name_their_node() {
        let key = |k: &str| StoreKey::new(k).unwrap();
        assert_eq!(node_of_document_key(&key("a/b/zarr.json")), Some(NodePath::new("a/b").unwrap()));
        assert_eq!(node_of_document_key(&key(".zattrs")), Some(NodePath::root()));
        assert_eq!(node_of_document_key(&key("a/c/0/0")), None);
    }

    #[test]
    fn relative_paths() {
        let p = |s: &str| NodePath::new(s).unwrap();
        assert_eq!(relative_to(&p(""), &p("a/b")), "a/b");
        assert_eq!(relative_to(&p("a"), &p("a/b/c")), "b/c");
    }
}
