//! Describing an opened node: the stored objects under it ([`stats`]), a
//! group's descendants ([`children`], from consolidated metadata when the
//! group has it, else by listing) and what a description reports of an
//! array beyond its documents ([`describe`]: chunk grid, sharding, element
//! order, TensorStore schema).

use serde_json::Value;

use super::{open_in_with, read_document, ArrayNode, GroupNode, Node};
use crate::service::{ServiceError, ServiceResult};
use crate::zarr::array::ZarrFormat;
use crate::zarr::metadata::{ArrayMetadataV2, MetadataError, NodeMetadataV3};
use crate::zarr::tensorstore;

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

/// Counts what is stored under a node.
///
/// # Errors
/// Storage failures.
pub async fn stats(node: &Node) -> ServiceResult<Stats> {
    // Counted as the listing goes (an array of millions of chunks holds
    // none of their names).
    let counted = std::sync::Arc::new(std::sync::Mutex::new(Stats::default()));
    let chunks = match node {
        Node::Array(a) => Some((a.desc.chunk_key_encoding, a.desc.shape.len())),
        Node::Group(_) => None,
    };
    let into = counted.clone();
    let visit: crate::storage::Visitor = Box::new(move |name, meta| {
        let mut s = into.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.stored_objects += 1;
        s.stored_bytes = s.stored_bytes.saturating_add(meta.size);
        if chunks.as_ref().is_some_and(|(encoding, rank)| encoding.decode(name, *rank).is_ok()) {
            s.stored_chunks += 1;
        }
    });
    drop(node.mount().storage().visit_recursive(&node.path().prefix()?, visit).await?);
    let s = *counted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(s)
}

/// One descendant of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Child {
    /// Path relative to the group (`sub/arr`).
    pub relative: String,
    /// `array`, `group`, or `unreadable` (its documents do not open:
    /// [`Child::error`]).
    pub node_type: &'static str,
    /// Its metadata format (`None` when unreadable).
    pub format: Option<ZarrFormat>,
    /// Levels below the group (1 = a direct child).
    pub depth: usize,
    /// Arrays: the shape.
    pub shape: Option<Vec<u64>>,
    /// Unreadable children: why (the error a describe of it answers, naming
    /// the document).
    pub error: Option<String>,
}

/// The descendants of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// By relative path.
    pub nodes: Vec<Child>,
    /// Whether they came from consolidated metadata.
    pub consolidated: bool,
    /// Why the group's consolidated metadata was not used (invalid, over
    /// the size bound): the children come from listing instead.
    pub consolidated_error: Option<String>,
    /// Whether `limit` cut the list (a listing stops there).
    pub truncated: bool,
}

/// The descendants of a group down to `depth` levels, at most `limit`, from
/// consolidated metadata when the group has it, else by listing (each
/// candidate opened).
///
/// A listing opens at most `limit` candidate folders in all, nodes or not:
/// each costs up to four document reads (`zarr.json`, `.zarray`, `.zgroup`,
/// `.zattrs`), and a group beside thousands of plain folders once cost four
/// upstream requests per folder without a node to show for them (5,000
/// folders on S3: 20,000 GETs and 77 s for an empty answer). Past that, the
/// answer says it was cut.
///
/// A child whose documents do not open (invalid, over the size bound,
/// unsupported: anyone who can write below the group can leave one) is
/// listed as `unreadable` with the reason, and not descended into: one
/// bad document must not make its parent (the mount's root, say)
/// undescribable. Storage failures still fail the listing (listing every
/// child as unreadable would hide an outage).
///
/// # Errors
/// Storage failures.
pub async fn children(group: &GroupNode, depth: usize, limit: usize) -> ServiceResult<Children> {
    // Consolidated metadata that does not open (a v2 `.zmetadata` written
    // around zarrd) is named, and the children are listed instead.
    let consolidated_error = match consolidated_children(group, depth).await {
        Ok(Some(mut nodes)) => {
            let truncated = nodes.len() > limit;
            nodes.truncate(limit);
            return Ok(Children { nodes, consolidated: true, consolidated_error: None, truncated });
        }
        Ok(None) => None,
        Err(e @ (ServiceError::InvalidMetadata { .. } | ServiceError::UnsupportedArray { .. })) => Some(e.to_string()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut frontier = vec![(group.path.clone(), 0usize)];
    let mut truncated = false;
    // Candidate folders opened so far (at least the children found).
    let mut opened = 0usize;
    while let Some((path, level)) = frontier.pop() {
        if level >= depth {
            continue;
        }
        if opened >= limit {
            truncated = true;
            break;
        }
        // At most `limit` entries of each directory, and room for a group's
        // own documents (names only: a local one reads its names and their
        // types): a group beside a million files costs a bounded listing.
        let listed = limit.saturating_add(super::documents::DOCUMENT_NAMES.len());
        let (entries, more) = group.mount.storage().list_names_limited(&path.prefix()?, listed).await?;
        truncated |= more;
        for entry in entries {
            let crate::storage::ListName { name, prefix: true, .. } = entry else { continue };
            if opened >= limit {
                truncated = true;
                break;
            }
            opened += 1;
            let Ok(child_path) = path.child(&name) else { continue };
            let relative = child_path.relative_to(&group.path).to_string();
            let child = match open_in_with(group.mount.clone(), &child_path, &group.gate).await {
                Ok(n) => n,
                Err(ServiceError::NodeNotFound { .. }) => continue,
                Err(e @ (ServiceError::InvalidMetadata { .. } | ServiceError::UnsupportedArray { .. })) => {
                    let error = Some(e.to_string());
                    out.push(Child {
                        relative,
                        node_type: "unreadable",
                        format: None,
                        depth: level + 1,
                        shape: None,
                        error,
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            match &child {
                Node::Array(a) => out.push(Child {
                    relative,
                    node_type: "array",
                    format: Some(a.format()),
                    depth: level + 1,
                    shape: Some(a.desc.shape.clone()),
                    error: None,
                }),
                Node::Group(g) => {
                    let format = Some(g.format);
                    out.push(Child {
                        relative,
                        node_type: "group",
                        format,
                        depth: level + 1,
                        shape: None,
                        error: None,
                    });
                    frontier.push((child_path, level + 1));
                }
            }
        }
    }
    out.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(Children { nodes: out, consolidated: false, consolidated_error, truncated })
}

async fn consolidated_children(group: &GroupNode, depth: usize) -> ServiceResult<Option<Vec<Child>>> {
    let depth_of = |rel: &str| rel.split('/').count();
    match group.format {
        ZarrFormat::V3 => {
            // Absent or null (zarr-python writes `null` for a group not
            // consolidated): listed instead.
            let cm = match group.metadata.get("consolidated_metadata") {
                None | Some(Value::Null) => return Ok(None),
                Some(cm) => cm,
            };
            let key = group.path.key("zarr.json")?;
            let docs = entries(&key, cm, "consolidated_metadata.metadata")?;
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
                    format: Some(ZarrFormat::V3),
                    depth: d,
                    shape: if is_array { shape } else { None },
                    error: None,
                });
            }
            out.sort_by(|a, b| a.relative.cmp(&b.relative));
            Ok(Some(out))
        }
        ZarrFormat::V2 => {
            let key = group.path.key(".zmetadata")?;
            let Some(read) = read_document(&group.mount, &key, group.gate.max_bytes()).await? else { return Ok(None) };
            let value = group.gate.parse(&key, read.body).await?;
            let docs = entries(&key, &value, "metadata")?;
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
                    format: Some(ZarrFormat::V2),
                    depth: d,
                    shape: if node_type == "array" { shape } else { None },
                    error: None,
                });
            }
            out.sort_by(|a, b| a.relative.cmp(&b.relative));
            Ok(Some(out))
        }
    }
}

/// The documents of consolidated metadata (`container`'s `metadata`, at
/// `path` in the document `key`), each an object: anything else is
/// invalid metadata naming where (the children are listed instead).
fn entries<'a>(
    key: &crate::storage::StoreKey,
    container: &'a Value,
    path: &str,
) -> ServiceResult<&'a serde_json::Map<String, Value>> {
    let invalid = |source| ServiceError::InvalidMetadata { key: key.to_string(), source };
    let docs = match container.get("metadata") {
        Some(Value::Object(docs)) => docs,
        Some(other) => return Err(invalid(MetadataError::expected(path, "an object of documents", other))),
        None => return Err(invalid(MetadataError::new(path, "missing: consolidated metadata without documents"))),
    };
    if let Some((name, doc)) = docs.iter().find(|(_, d)| !d.is_object()) {
        return Err(invalid(MetadataError::expected(format!("{path}.{name}"), "a document (an object)", doc)));
    }
    Ok(docs)
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
    use crate::zarr::codec::array_to_bytes::sharding::ShardingConfig;
    use crate::zarr::metadata::v2::Order;

    let desc = &array.desc;
    let (sharded, schema, v2_order) = match desc.zarr_format {
        ZarrFormat::V3 => match NodeMetadataV3::from_json(&array.metadata, "") {
            Ok(NodeMetadataV3::Array(meta)) => {
                let sharded = meta.codecs.iter().any(|c| c.config::<ShardingConfig>().is_some());
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
