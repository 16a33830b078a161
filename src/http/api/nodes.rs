//! Mounts and nodes: `GET /api/v1/mounts`; `GET` (describe), `PUT`
//! (create) and `DELETE` on `/api/v1/nodes/{mount}[/{*path}]`.
//!
//! `GET` describes an array or a group ([`NodeInfo`]), or a plain directory
//! ([`DirectoryInfo`]: the mount's root or a folder that is no Zarr node,
//! outside every array), whose children come a page at a time
//! ([`crate::service::browse::page`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::config::Scope;
use crate::http::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::http::extract::{ApiQuery, JsonBody, NodeTarget};
use crate::http::guard::Access;
use crate::http::params;
use crate::service::browse::{self, EntryKind};
use crate::service::cpu;
use crate::service::node::{self, ArrayNode, Node};
use crate::service::node::{self as ops, OpenMode};
use crate::service::App;
use crate::zarr::array::ZarrFormat;

/// One mount.
#[derive(Debug, Serialize, ToSchema)]
pub struct MountInfo {
    /// The mount's name, as used in URLs.
    #[schema(example = "data")]
    pub name: String,
    /// Whether writes are refused.
    pub read_only: bool,
}

/// The mounts.
#[derive(Debug, Serialize, ToSchema)]
pub struct MountList {
    /// Every mount the caller may read, by name.
    pub mounts: Vec<MountInfo>,
}

/// The mounts the caller may read (all of them for an anonymous caller when
/// no token is configured; see the security scheme).
#[utoipa::path(get, path = "/api/v1/mounts", tag = "nodes", responses((status = 200, description = "The mounts", body = MountList)))]
pub async fn list_mounts(State(app): State<Arc<App>>, access: Option<Extension<Access>>) -> Json<MountList> {
    // The guard puts the caller's access here (`Need::Caller`); without it, nothing is listed.
    let readable = |name: &str| access.as_ref().is_some_and(|Extension(a)| a.may(&app, name, Scope::Read));
    let mounts = app
        .mounts()
        .filter(|m| readable(m.name()))
        .map(|m| MountInfo { name: m.name().to_string(), read_only: m.read_only() })
        .collect();
    Json(MountList { mounts })
}

/// A node (array or group), as stored and normalised.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "mount": "data", "path": "climate/t", "node_type": "array", "zarr_format": 3,
    "shape": [1000, 2000], "data_type": "float32", "chunk_shape": [512, 512],
    "shard_shape": [512, 512], "inner_chunk_shape": [64, 64],
    "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [64, 64], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}], "index_location": "end"}}],
    "fill_value": "NaN", "order": "C", "dimension_names": ["y", "x"], "attributes": {"units": "K"},
    "metadata": {"zarr_format": 3, "node_type": "array"},
    "tensorstore_schema": {"rank": 2, "dtype": "float32"}
}))]
pub struct NodeInfo {
    /// The mount.
    #[schema(example = "data")]
    pub mount: String,
    /// The path in the mount (`""` for the root).
    #[schema(example = "climate/temperature")]
    pub path: String,
    /// `array` or `group`.
    #[schema(example = "array")]
    pub node_type: &'static str,
    /// 2 or 3.
    #[schema(example = 3)]
    pub zarr_format: u8,
    /// Arrays: the shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Arrays: the data type as in the metadata (v3 name, or v2 `dtype`):
    /// a string (`"float32"`, `"<f4"`), or an object or a list for
    /// parameterised and structured types.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub data_type: Option<Value>,
    /// Arrays: the (outer) chunk shape: the shape of what is stored under one key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_shape: Option<Vec<u64>>,
    /// Sharded arrays: the shard shape (equal to `chunk_shape`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_shape: Option<Vec<u64>>,
    /// Sharded arrays: the inner chunk shape (the unit of reading).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner_chunk_shape: Option<Vec<u64>>,
    /// Arrays: v3 `codecs`, or for v2 the `filters` followed by the `compressor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub codecs: Option<Value>,
    /// Arrays: the fill value as in the metadata (a number, a string such
    /// as `"NaN"`, a list, or `null`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub fill_value: Option<Value>,
    /// Arrays: `C` or `F` element order within a chunk (v2 `order`; v3 from a
    /// `transpose` codec; absent for other permutations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<&'static str>,
    /// Arrays (v3): dimension names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension_names: Option<Vec<Option<String>>>,
    /// User attributes.
    #[schema(value_type = Object)]
    pub attributes: Map<String, Value>,
    /// The stored metadata document (`zarr.json`, `.zarray` or `.zgroup`), as stored.
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// Arrays: the schema TensorStore reports for this array (`domain`,
    /// `chunk_layout`, `codec`, `dtype`, `fill_value`, `rank`,
    /// `dimension_units`); `null` for data types TensorStore lacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub tensorstore_schema: Option<Value>,
    /// Arrays over the configured limits (`limits.max_decoded_chunk_bytes`,
    /// `max_inner_chunks_per_shard`, `max_fill_value_bytes`): which limit and
    /// why. Reads and writes refuse such an array (422 `unsupported_array`,
    /// with this message); describing, resizing and deleting it work.
    /// Absent for arrays within the limits, and for groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(
        example = "the chunk shape [2147483648, 2147483648] of UInt8 is 4611686018427387904 bytes decoded, more than limits.max_decoded_chunk_bytes = 1073741824"
    )]
    pub limits_exceeded: Option<String>,
    /// With `?stats=true`: what is stored under the node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<NodeStats>,
    /// Groups: descendants down to `?depth=` levels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<ChildInfo>>,
    /// Groups: whether `children` came from consolidated metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consolidated: Option<bool>,
    /// Groups: why the group's consolidated metadata was not used (it does
    /// not parse, is over the size bound, or its `metadata` is not an
    /// object of documents): `children` then come from listing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consolidated_error: Option<String>,
    /// Groups: whether `children` stops at `limits.max_list_entries` (of
    /// children, or of candidate folders opened, nodes or not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children_truncated: Option<bool>,
}

/// What is stored under a node.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeStats {
    /// Arrays: stored chunk (shard) keys; chunks equal to the fill value are not stored.
    #[schema(example = 12)]
    pub stored_chunks: u64,
    /// Bytes of every object under the node, metadata included.
    #[schema(example = 48_213)]
    pub stored_bytes: u64,
    /// Objects under the node, metadata included.
    #[schema(example = 13)]
    pub stored_objects: u64,
}

/// A descendant of a group.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChildInfo {
    /// Its last path segment.
    #[schema(example = "temperature")]
    pub name: String,
    /// Its path in the mount.
    #[schema(example = "climate/temperature")]
    pub path: String,
    /// `array`, `group`, or `unreadable` (its metadata does not open: a
    /// document that does not parse, is over the size bound or describes
    /// an unsupported array; see `error`).
    pub node_type: &'static str,
    /// 2 or 3 (absent when unreadable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zarr_format: Option<u8>,
    /// Levels below the described group (1: a direct child).
    pub depth: usize,
    /// Arrays: the shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Unreadable children: why, naming the document (what describing the
    /// child answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A plain directory: the mount's root, or a folder with something under
/// it, that is no Zarr node and lies in no array. Its children come a
/// page at a time (`page`, `per_page`): folders first, then files, each by
/// name; Zarr's own documents are not listed.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "mount": "data", "path": "raw", "node_type": "directory",
    "children": [
        {"name": "em", "path": "raw/em", "node_type": "array", "zarr_format": 3, "shape": [1024, 1024], "data_type": "uint8"},
        {"name": "scans", "path": "raw/scans", "node_type": "group", "zarr_format": 2},
        {"name": "notes", "path": "raw/notes", "node_type": "directory"},
        {"name": "README.txt", "path": "raw/README.txt", "node_type": "file", "size": 812}
    ],
    "children_total": 4, "children_truncated": false, "page": 0, "per_page": 100
}))]
pub struct DirectoryInfo {
    /// The mount.
    #[schema(example = "data")]
    pub mount: String,
    /// The path in the mount (`""` for the root).
    pub path: String,
    /// `directory`.
    #[schema(example = "directory")]
    pub node_type: &'static str,
    /// This page of what is directly under it.
    pub children: Vec<DirectoryEntry>,
    /// Entries in all (folders and files), over every page.
    pub children_total: usize,
    /// Whether the listing stopped at `limits.max_list_entries` names (in
    /// name order): `children_total` and the pages then count only those.
    pub children_truncated: bool,
    /// This page's number (zero-based).
    pub page: usize,
    /// Entries a page holds.
    pub per_page: usize,
}

/// One entry directly under a plain directory.
#[derive(Debug, Serialize, ToSchema)]
pub struct DirectoryEntry {
    /// Its name (the last path segment).
    #[schema(example = "em")]
    pub name: String,
    /// Its path in the mount.
    #[schema(example = "raw/em")]
    pub path: String,
    /// `array`, `group`, `directory` (a folder that is no Zarr node),
    /// `unreadable` (a folder whose metadata does not parse; see `error`)
    /// or `file`.
    #[schema(example = "array")]
    pub node_type: &'static str,
    /// Arrays and groups: 2 or 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zarr_format: Option<u8>,
    /// Arrays: the shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Arrays: the data type (Zarr v3's name, for v2 arrays too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_type: Option<String>,
    /// Files: the size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Unreadable folders: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `GET /api/v1/nodes/...` describes: an array or a group, or a
/// plain directory (`node_type` tells them apart).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Description {
    /// An array or a group.
    Node(Box<NodeInfo>),
    /// A plain directory.
    Directory(DirectoryInfo),
}

fn format_number(f: ZarrFormat) -> u8 {
    match f {
        ZarrFormat::V2 => 2,
        ZarrFormat::V3 => 3,
    }
}

/// The array's facts ([`node::describe`]) and, as stored, its data type,
/// codecs and fill value.
fn array_fields(a: &ArrayNode, info: &mut NodeInfo) {
    let facts = node::describe(a);
    info.shape = Some(facts.shape);
    info.chunk_shape = Some(facts.chunk_shape);
    info.shard_shape = facts.shard_shape;
    info.inner_chunk_shape = facts.inner_chunk_shape;
    info.order = facts.order;
    info.dimension_names = facts.dimension_names;
    info.tensorstore_schema = Some(facts.tensorstore_schema.unwrap_or(Value::Null));
    let m = &a.metadata;
    info.fill_value = m.get("fill_value").cloned();
    match a.format() {
        ZarrFormat::V3 => {
            info.data_type = m.get("data_type").cloned();
            info.codecs = m.get("codecs").cloned();
        }
        ZarrFormat::V2 => {
            info.data_type = m.get("dtype").cloned();
            let mut codecs: Vec<Value> = m.get("filters").and_then(Value::as_array).cloned().unwrap_or_default();
            codecs.extend(m.get("compressor").filter(|c| !c.is_null()).cloned());
            info.codecs = Some(Value::Array(codecs));
        }
    }
}

impl NodeInfo {
    fn of(node: &Node) -> Self {
        let (mount, path, node_type, format, attributes, metadata) = match node {
            Node::Array(a) => (&a.mount, &a.path, "array", a.format(), a.desc.attributes.clone(), a.metadata.clone()),
            Node::Group(g) => (&g.mount, &g.path, "group", g.format, g.attributes.clone(), g.metadata.clone()),
        };
        let mut info = Self {
            mount: mount.name().to_string(),
            path: path.as_str().to_string(),
            node_type,
            zarr_format: format_number(format),
            shape: None,
            data_type: None,
            chunk_shape: None,
            shard_shape: None,
            inner_chunk_shape: None,
            codecs: None,
            fill_value: None,
            order: None,
            dimension_names: None,
            attributes,
            metadata,
            tensorstore_schema: None,
            limits_exceeded: None,
            stats: None,
            children: None,
            consolidated: None,
            consolidated_error: None,
            children_truncated: None,
        };
        if let Node::Array(a) = node {
            array_fields(a, &mut info);
        }
        info
    }
}

/// Options of a node description.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DescribeQuery {
    /// Count what is stored under the node (lists every key below it).
    #[serde(default)]
    pub stats: bool,
    /// Groups: how many levels of descendants to list (default 1; 0 for none).
    #[param(example = 1, maximum = 64)]
    pub depth: Option<usize>,
    /// Plain directories: the page of children (zero-based; default 0; a
    /// page past the last is empty). Arrays and groups ignore it.
    #[param(example = 0)]
    pub page: Option<usize>,
    /// Plain directories: children a page (1 to 1000, default 100).
    /// Arrays and groups ignore it (a value out of range is 400 anywhere).
    #[param(example = 100, minimum = 1, maximum = 1000)]
    pub per_page: Option<usize>,
}

/// Children a directory page holds by default.
const DIRECTORY_PER_PAGE: usize = 100;

/// `per_page`, checked on every description (an array or a group ignores
/// a valid one, as it ignores `page`).
fn per_page(q: &DescribeQuery) -> ApiResult<usize> {
    match q.per_page.unwrap_or(DIRECTORY_PER_PAGE) {
        n if (1..=browse::MAX_PAGE).contains(&n) => Ok(n),
        n => {
            let max = browse::MAX_PAGE;
            Err(ErrorCode::InvalidQuery.error(format!("per_page: 1 to {max}, got {n}")))
        }
    }
}

/// The plain directory at `target`, when there is one there.
async fn describe_directory(app: &App, target: &NodeTarget, q: &DescribeQuery) -> ApiResult<Option<DirectoryInfo>> {
    let per_page = per_page(q)?;
    let at = app.node(&target.mount, &target.path)?;
    if !browse::directory(&at).await? {
        return Ok(None);
    }
    if q.stats {
        return Err(ErrorCode::InvalidQuery.error("stats: a plain directory has none (only arrays and groups)"));
    }
    let page = browse::page(&at, q.page.unwrap_or(0), per_page).await?;
    let base = target.path.as_str();
    let children = page
        .entries
        .into_iter()
        .map(|e| {
            let mut entry = DirectoryEntry {
                path: if base.is_empty() { e.name.clone() } else { format!("{base}/{}", e.name) },
                name: e.name,
                node_type: "directory",
                zarr_format: None,
                shape: None,
                data_type: None,
                size: None,
                error: None,
            };
            match e.kind {
                EntryKind::Array { shape, data_type, zarr_format } => {
                    entry.node_type = "array";
                    entry.zarr_format = Some(zarr_format);
                    entry.shape = Some(shape);
                    entry.data_type = Some(data_type);
                }
                EntryKind::Group { zarr_format } => {
                    entry.node_type = "group";
                    entry.zarr_format = Some(zarr_format);
                }
                EntryKind::Directory | EntryKind::EmptyDirectory => {}
                EntryKind::Unreadable(why) => {
                    entry.node_type = "unreadable";
                    entry.error = Some(why);
                }
                EntryKind::Object { size } => {
                    entry.node_type = "file";
                    entry.size = Some(size);
                }
            }
            entry
        })
        .collect();
    Ok(Some(DirectoryInfo {
        mount: target.mount.clone(),
        path: base.to_string(),
        node_type: "directory",
        children,
        children_total: page.total,
        children_truncated: page.truncated,
        page: page.page,
        per_page: page.per_page,
    }))
}

async fn describe(app: &App, target: &NodeTarget, q: &DescribeQuery) -> ApiResult<NodeInfo> {
    let node = node::open(&app.node(&target.mount, &target.path)?).await?;
    // Copies and validates the node's documents (up to twice
    // limits.max_body_bytes each): on the CPU pool.
    let of = node.clone();
    let mut info = cpu::run(move || NodeInfo::of(&of)).await.map_err(cpu_failed)?;
    if let Node::Array(a) = &node {
        // Arithmetic on the declared shapes, nothing built from them.
        info.limits_exceeded = a.desc.check_limits(&node::array_limits(app)).err().map(|e| e.to_string());
    }
    if q.stats {
        let s = ops::stats(&node).await?;
        info.stats = Some(NodeStats {
            stored_chunks: s.stored_chunks,
            stored_bytes: s.stored_bytes,
            stored_objects: s.stored_objects,
        });
    }
    if let Node::Group(g) = &node {
        let depth = params::describe_depth(q.depth)?;
        let found = ops::children(g, depth, app.config().limits.max_list_entries).await?;
        let base = g.path.as_str();
        info.children = Some(
            found
                .nodes
                .into_iter()
                .map(|c| ChildInfo {
                    name: c.relative.rsplit('/').next().unwrap_or_default().to_string(),
                    path: if base.is_empty() { c.relative.clone() } else { format!("{base}/{}", c.relative) },
                    node_type: c.node_type,
                    zarr_format: c.format.map(format_number),
                    depth: c.depth,
                    shape: c.shape,
                    error: c.error,
                })
                .collect(),
        );
        info.consolidated = Some(found.consolidated);
        info.consolidated_error = found.consolidated_error;
        info.children_truncated = Some(found.truncated);
    }
    Ok(info)
}

/// Describe the node at a path.
///
/// Arrays: shape, data type, chunk (shard, inner chunk) shapes, codecs,
/// fill value, order, dimension names, attributes, the stored metadata and
/// the TensorStore schema. Groups: attributes, the stored metadata and the
/// descendants (from consolidated metadata when present, else by listing).
/// Plain directories (the mount's root or a folder that is no Zarr node,
/// outside every array): one page of their children (`page`, `per_page`),
/// each classified. A path with nothing under it, or inside an array (a
/// chunk folder), is 404 `node_not_found`.
#[utoipa::path(
    get,
    path = "/api/v1/nodes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget, DescribeQuery),
    responses(
        (status = 200, description = "The node (`node_type` `array` or `group`), or a plain directory (`node_type` `directory`)", body = Description),
        (status = 400, description = "Invalid path or query", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid or unsupported", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_node(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    ApiQuery(q): ApiQuery<DescribeQuery>,
) -> ApiResult<Response> {
    per_page(&q)?;
    let info = match describe(&app, &target, &q).await {
        Ok(info) => Description::Node(Box::new(info)),
        Err(e) if e.code == ErrorCode::NodeNotFound => match describe_directory(&app, &target, &q).await? {
            Some(dir) => Description::Directory(dir),
            None => return Err(e),
        },
        Err(e) => return Err(e),
    };
    // The answer holds the stored documents: serialised on the CPU pool.
    let body = cpu::run(move || serde_json::to_vec(&info)).await.map_err(cpu_failed)?.map_err(internal)?;
    Ok(([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response())
}

fn cpu_failed(e: cpu::CpuError) -> ApiError {
    ApiError::from(crate::service::ServiceError::from(e))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::from(crate::service::ServiceError::Internal(e.to_string()))
}

/// How a create treats an existing node; each may also be given in a
/// TensorStore spec body (the body wins).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CreateQuery {
    /// Create the node when missing (default true).
    pub create: Option<bool>,
    /// Return an existing node (200) instead of failing with 409 (default false).
    pub open: Option<bool>,
    /// Replace an existing node, deleting it and everything under it first (default false).
    pub delete_existing: Option<bool>,
}

/// A create request body: a Zarr v3 `zarr.json` (array or group), a Zarr v2
/// `.zarray` (or `{"zarr_format": 2}` for a group) with an optional
/// `attributes` member, or a TensorStore spec (`driver` `zarr3` or `zarr`,
/// partial `metadata`, `schema` constraints).
#[derive(Debug, ToSchema)]
#[schema(value_type = Object, example = json!({
    "driver": "zarr3",
    "schema": {"dtype": "uint16", "domain": {"shape": [1000, 2000, 3000], "labels": ["z", "y", "x"]},
               "chunk_layout": {"read_chunk": {"shape": [64, 64, 64]}, "write_chunk": {"shape": [512, 512, 512]}},
               "codec": {"driver": "zarr3", "codecs": [{"name": "zstd"}]},
               "dimension_units": ["4 nm", "4 nm", "40 nm"]}
}))]
pub struct CreateBody(pub Value);

fn created_response(created: &ops::Created) -> Response {
    let info = NodeInfo::of(&created.node);
    let status = if created.created { StatusCode::CREATED } else { StatusCode::OK };
    let location = format!("/api/v1/nodes/{}/{}", info.mount, info.path);
    let mut resp = (status, Json(info)).into_response();
    if let Ok(v) = HeaderValue::from_str(location.trim_end_matches('/')) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

async fn create(app: &App, target: &NodeTarget, q: &CreateQuery, body: Value) -> ApiResult<Response> {
    // Validating a spec chooses chunk shapes (factorising explicit sizes,
    // bisecting aspect ratios): on the CPU pool, off the async workers. The
    // body moves there and back (no copy of it: a document of millions of
    // dimensions is large) and is freed here, on the thread that made it
    // (the allocator reuses a thread's own freed pages soonest).
    let (parsed, body) = cpu::run(move || (ops::parse_create_body(&body), body)).await.map_err(cpu_failed)?;
    drop(body);
    let (new, flags) = parsed?;
    let flag = |name: &str, query: Option<bool>, default: bool| {
        flags.get(name).and_then(Value::as_bool).or(query).unwrap_or(default)
    };
    let mode = OpenMode {
        create: flag("create", q.create, true),
        open: flag("open", q.open, false),
        delete_existing: flag("delete_existing", q.delete_existing, false),
    };
    let created = ops::create(&app.node(&target.mount, &target.path)?, &new, mode).await?;
    Ok(created_response(&created))
}

/// Create an array or a group (missing parent groups are created, as
/// zarr-python does).
///
/// With a TensorStore spec, unspecified chunk shapes are chosen by
/// TensorStore's rules (about 2^20 elements per chunk, aspect ratio and
/// element constraints), and different read and write chunks insert a
/// `sharding_indexed` codec.
#[utoipa::path(
    put,
    path = "/api/v1/nodes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget, CreateQuery),
    request_body(content = CreateBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = NodeInfo),
        (status = 200, description = "Existing node opened (`open=true`)", body = NodeInfo),
        (status = 400, description = "Body not JSON, or a spec that cannot be satisfied (the message names the member)", body = ErrorBody),
        (status = 404, description = "No such mount; or missing node with `create=false`", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 409, description = "The node exists (and `open` is false), or an ancestor is an array", body = ErrorBody),
        (status = 413, description = "Body larger than `limits.max_body_bytes`", body = ErrorBody),
        (status = 422, description = "Invalid metadata document", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn put_node(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    ApiQuery(q): ApiQuery<CreateQuery>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    create(&app, &target, &q, body).await
}

/// Options of a delete.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Delete a group with children, and everything under it.
    #[serde(default)]
    pub recursive: bool,
}

/// Delete an array (with all its chunks) or a group (one with children
/// only with `recursive=true`).
#[utoipa::path(
    delete,
    path = "/api/v1/nodes/{mount}/{*path}",
    tag = "nodes",
    params(NodeTarget, DeleteQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid path or query", body = ErrorBody),
        (status = 404, description = "No such mount or node", body = ErrorBody),
        (status = 405, description = "Read-only mount", body = ErrorBody),
        (status = 409, description = "A group with children, without `recursive=true`", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid or unsupported", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn delete_node(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> ApiResult<StatusCode> {
    ops::delete(&app.node(&target.mount, &target.path)?, q.recursive).await?;
    Ok(StatusCode::NO_CONTENT)
}
