//! Opening nodes (arrays and groups) by mount and path.
//!
//! A node's path inside a mount is a [`NodePath`]: `""` for the mount root,
//! else `a/b/c` (no leading or trailing `/`; segments validated like store
//! keys). [`open`] reads the node's metadata documents and normalises them:
//!
//! - v3: `<path>/zarr.json` (`node_type` array or group);
//! - v2: `<path>/.zarray` or `<path>/.zgroup`, plus `<path>/.zattrs` when
//!   present.
//!
//! v3 wins when both exist (zarr-python reads v3 first too). A path with
//! none of these documents is [`ServiceError::NodeNotFound`]; a document that
//! does not parse is [`ServiceError::InvalidMetadata`] naming its key and
//! field.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::{App, ServiceError, ServiceResult};
use crate::storage::{Mount, ReadRequest, StorageError, StoreKey};
use crate::zarr::array::{ArrayDescription, ArrayLimits, ZarrFormat};
use crate::zarr::metadata::v2::attributes_from_json;
use crate::zarr::metadata::{
    ArrayMetadataV2, ConsolidatedMetadataV2, DocumentKind, GroupMetadataV2, MetadataError, NodeMetadataV3,
};

/// A validated node path inside a mount (`""` is the root).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodePath(String);

impl NodePath {
    /// Validates `raw`; leading and trailing `/` are ignored.
    ///
    /// # Errors
    /// `BadRequest` naming the path when a segment is not a valid key
    /// segment (empty, `.`, `..`, control characters).
    pub fn new(raw: &str) -> ServiceResult<Self> {
        let trimmed = raw.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(Self(String::new()));
        }
        StoreKey::new(trimmed).map_err(|e| ServiceError::BadRequest(format!("invalid node path `{raw}`: {e}")))?;
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

    /// The store key of `name` inside this node (`<path>/<name>`).
    ///
    /// # Errors
    /// `BadRequest` when `name` is not a valid relative key.
    pub fn key(&self, name: &str) -> ServiceResult<StoreKey> {
        let raw = if self.0.is_empty() { name.to_string() } else { format!("{}/{name}", self.0) };
        StoreKey::new(&raw).map_err(|e| ServiceError::BadRequest(format!("invalid key `{raw}`: {e}")))
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
}

impl ArrayNode {
    /// The metadata format.
    #[must_use]
    pub fn format(&self) -> ZarrFormat {
        self.desc.zarr_format
    }

    /// The store key of a chunk (grid coordinates).
    ///
    /// # Errors
    /// `BadRequest` when the key is invalid (cannot happen for valid
    /// coordinates).
    pub fn chunk_key(&self, coords: &[u64]) -> ServiceResult<StoreKey> {
        self.path.key(&self.desc.chunk_key(coords))
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
}

/// Reads one key whole; `None` when it does not exist (or is a prefix).
///
/// # Errors
/// Storage failures.
pub async fn read_optional(mount: &Mount, key: &StoreKey) -> ServiceResult<Option<Bytes>> {
    match mount.storage().read(key, &ReadRequest::default()).await {
        Ok(outcome) => Ok(Some(outcome.body)),
        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn invalid(key: &StoreKey) -> impl FnOnce(MetadataError) -> ServiceError + '_ {
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
        super::cpu::run(move || crate::zarr::metadata::parse_json(&bytes))
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?
            .map_err(invalid(key))
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
                    if let Err(e) = ArrayDescription::from_v3(&meta).and_then(|d| d.check_limits(limits)) {
                        over(e)?;
                    }
                }
            }
            DocumentKind::ZArray => {
                let meta = ArrayMetadataV2::from_json(&value, "").map_err(invalid(key))?;
                if let Err(e) = ArrayDescription::from_v2(&meta, Map::new()).and_then(|d| d.check_limits(limits)) {
                    over(e)?;
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

fn unsupported(key: &StoreKey, e: &crate::zarr::array::ArrayError) -> ServiceError {
    ServiceError::UnsupportedArray { key: key.to_string(), reason: e.to_string() }
}

/// Reads one key whole with its ETag; `None` when it does not exist.
/// Reads at most `max` bytes of it (plus one): a larger document is refused
/// without being read whole.
async fn read_validated(mount: &Mount, key: &StoreKey, max: u64) -> ServiceResult<(Option<Bytes>, Validator)> {
    let bounded = ReadRequest {
        range: Some(crate::storage::ByteRange::Bounded { first: 0, last: max }),
        ..ReadRequest::default()
    };
    let read = match mount.storage().read(key, &bounded).await {
        // An empty object has no byte 0: read it as it is.
        Err(StorageError::RangeNotSatisfiable { .. }) => mount.storage().read(key, &ReadRequest::default()).await,
        other => other,
    };
    match read {
        Ok(outcome) if outcome.meta.size > max => Err(ServiceError::InvalidMetadata {
            key: key.to_string(),
            source: MetadataError::new(
                "",
                format!(
                    "the document is {} bytes, more than the {max} stored documents may have (twice \
                     limits.max_body_bytes)",
                    outcome.meta.size
                ),
            ),
        }),
        Ok(outcome) => Ok((Some(outcome.body), (key.clone(), Some(outcome.meta.etag)))),
        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok((None, (key.clone(), None))),
        Err(e) => Err(e.into()),
    }
}

/// A metadata key and the ETag it had when read (`None`: absent).
pub type Validator = (StoreKey, Option<String>);

fn join_key(path: &NodePath, name: &str) -> String {
    if path.as_str().is_empty() {
        name.to_string()
    } else {
        format!("{path}/{name}")
    }
}

/// Opens the node at `path` in `mount`, through the metadata cache.
///
/// # Errors
/// `UnknownMount`, `NodeNotFound`, `InvalidMetadata`, `UnsupportedArray`,
/// storage failures.
pub async fn open(app: &App, mount: &str, path: &NodePath) -> ServiceResult<Node> {
    let mount = app.mount(mount)?.clone();
    app.metadata_cache().open(mount, path, DocumentGate::of(app)).await
}

/// [`open`] on a mount already looked up, bypassing the cache (reads the
/// documents now).
///
/// # Errors
/// As [`open`].
pub async fn open_in(mount: Arc<Mount>, path: &NodePath) -> ServiceResult<Node> {
    Ok(load(mount, path, &DocumentGate::default()).await?.0)
}

/// [`open_in`] with the documents read through `gate`.
///
/// # Errors
/// As [`open`].
pub async fn open_in_with(mount: Arc<Mount>, path: &NodePath, gate: &DocumentGate) -> ServiceResult<Node> {
    Ok(load(mount, path, gate).await?.0)
}

/// Reads and parses a node's documents; also returns what to revalidate
/// them by (each document key read and its ETag).
///
/// # Errors
/// As [`open`].
pub async fn load(mount: Arc<Mount>, path: &NodePath, gate: &DocumentGate) -> ServiceResult<(Node, Vec<Validator>)> {
    let v3_key = path.key("zarr.json")?;
    let (v3, v3_validator) = read_validated(&mount, &v3_key, gate.max_bytes()).await?;
    let mut validators = vec![v3_validator];
    if let Some(bytes) = v3 {
        let value = gate.parse(&v3_key, bytes).await?;
        return match NodeMetadataV3::from_json(&value, "").map_err(invalid(&v3_key))? {
            NodeMetadataV3::Array(meta) => {
                let desc = ArrayDescription::from_v3(&meta).map_err(|e| unsupported(&v3_key, &e))?;
                let node = ArrayNode { mount, path: path.clone(), desc: Arc::new(desc), metadata: value, zattrs: None };
                Ok((Node::Array(Arc::new(node)), validators))
            }
            NodeMetadataV3::Group(group) => Ok((
                Node::Group(Arc::new(GroupNode {
                    gate: gate.clone(),
                    mount,
                    path: path.clone(),
                    format: ZarrFormat::V3,
                    attributes: group.attributes,
                    metadata: value,
                    zattrs: None,
                })),
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
        let node = ArrayNode { mount, path: path.clone(), desc: Arc::new(desc), metadata: value, zattrs: zattrs_value };
        return Ok((Node::Array(Arc::new(node)), validators));
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
        return Ok((Node::Group(Arc::new(node)), validators));
    }
    Err(ServiceError::NodeNotFound { mount: mount.name().to_string(), path: path.to_string() })
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

/// Opens the node at `path` and requires it to be an array whose chunks,
/// shards and fill value keep to the configured limits ([`array_limits`]):
/// documents written behind zarrd's back are checked here, before any
/// chunk is read or written.
///
/// # Errors
/// As [`open`], plus `NotAnArray` for a group and `UnsupportedArray`
/// (naming the limit) for an array over the limits.
pub async fn open_array(app: &App, mount: &str, path: &NodePath) -> ServiceResult<Arc<ArrayNode>> {
    match open(app, mount, path).await? {
        Node::Array(a) => {
            a.desc.check_limits(&array_limits(app)).map_err(|e| {
                let name = if a.format() == ZarrFormat::V3 { "zarr.json" } else { ".zarray" };
                ServiceError::UnsupportedArray {
                    key: format!("{mount}/{}", join_key(path, name)),
                    reason: e.to_string(),
                }
            })?;
            Ok(a)
        }
        Node::Group(g) => Err(ServiceError::NotAnArray { mount: g.mount.name().to_string(), path: path.to_string() }),
    }
}

/// What a description of an array reports beyond its stored documents.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayFacts {
    /// The shape.
    pub shape: Vec<u64>,
    /// The (outer) chunk shape: what one key holds.
    pub chunk_shape: Vec<u64>,
    /// Sharded arrays: the shard shape (the chunk shape).
    pub shard_shape: Option<Vec<u64>>,
    /// Sharded arrays: the inner chunk shape.
    pub inner_chunk_shape: Option<Vec<u64>>,
    /// `C` or `F` element order within a chunk; `None` for other
    /// permutations (and v3 types TensorStore lacks).
    pub order: Option<&'static str>,
    /// Dimension names.
    pub dimension_names: Option<Vec<Option<String>>>,
    /// The schema TensorStore reports (`None` for types it lacks).
    pub tensorstore_schema: Option<Value>,
}

/// The facts of `array` a node description reports: shape, chunk grid and
/// names from its normalised description; whether it is sharded from its
/// parsed codec list (a `sharding_indexed` codec, alone or not); the inner
/// chunk shape from the description's sharding codec, else from the
/// TensorStore schema (whose chunk layout also gives the element order).
///
/// CPU work (the document is parsed again): run it on the CPU pool.
#[must_use]
pub fn describe(array: &ArrayNode) -> ArrayFacts {
    use crate::zarr::metadata::v2::Order;
    use crate::zarr::metadata::CodecSpec;
    use crate::zarr::tensorstore;

    let desc = &array.desc;
    let (sharded, schema, v2_order) = match desc.zarr_format {
        ZarrFormat::V3 => match NodeMetadataV3::from_json(&array.metadata, "") {
            Ok(NodeMetadataV3::Array(meta)) => {
                let sharded = meta.codecs.iter().any(|c| matches!(c, CodecSpec::ShardingIndexed(_)));
                (sharded, tensorstore::schema_v3(&meta), None)
            }
            _ => (desc.sharding.is_some(), None, None),
        },
        ZarrFormat::V2 => match ArrayMetadataV2::from_json(&array.metadata, "") {
            Ok(meta) => (false, tensorstore::schema_v2(&meta), Some(meta.order)),
            Err(_) => (false, None, Some(Order::C)),
        },
    };
    let layout = |pointer: &str| schema.as_ref().and_then(|s| s.pointer(pointer)).cloned();
    let inner = desc
        .sharding
        .as_ref()
        .map(|s| s.inner_chunk_shape().to_vec())
        .or_else(|| layout("/chunk_layout/read_chunk/shape").and_then(|v| serde_json::from_value(v).ok()));
    let order = match v2_order {
        Some(Order::F) => Some("F"),
        Some(Order::C) => Some("C"),
        None => {
            let rank = desc.shape.len();
            match layout("/chunk_layout/inner_order").and_then(|v| serde_json::from_value::<Vec<usize>>(v).ok()) {
                Some(o) if o.iter().enumerate().all(|(i, &d)| i == d) => Some("C"),
                Some(o) if o.iter().enumerate().all(|(i, &d)| d + i + 1 == rank) => Some("F"),
                _ => None,
            }
        }
    };
    ArrayFacts {
        shape: desc.shape.clone(),
        chunk_shape: desc.chunk_shape.clone(),
        shard_shape: sharded.then(|| desc.chunk_shape.clone()),
        inner_chunk_shape: if sharded { inner } else { None },
        order,
        dimension_names: desc.dimension_names.clone(),
        tensorstore_schema: schema,
    }
}
