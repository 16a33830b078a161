//! Creating a node (TensorStore's `create`, `open` and `delete_existing`),
//! as zarr-python does: the node's documents and, for every missing
//! ancestor up to the mount root, a group (`zarr.json`
//! `{"attributes": {}, ...}`, or v2 `.zgroup` + empty `.zattrs`); a v2 array
//! gets an empty `.zattrs`. Documents are written only where they are
//! still absent (`If-None-Match: *`), so processes creating the same node
//! or parent at once cannot overwrite each other ([`super::versioned`]).
//! A create whose own write was reported lost and which then finds the
//! node stored exactly as it asked (its write landed, the answer did not)
//! answers created: so does every one of several concurrent creates of
//! identical documents that lost that way, the outcome being the same.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use serde_json::{json, Map, Value};

use super::delete::delete_all;
use super::documents::{checked_doc, json_len, put_checked, DocumentGate};
use super::open::existing_versioned;
use super::versioned::{is_lost_race, retry, Versions};
use super::{open_in_with, ArrayNode, Node};
use crate::service::{NodeRef, ServiceError, ServiceResult};
use crate::storage::{Mount, StoreKey};
use crate::zarr::array::{ArrayDescription, ArrayError, ZarrFormat};
use crate::zarr::metadata::{ArrayMetadataV2, NodeMetadataV3};
use crate::zarr::tensorstore::{self, spec::NewArray};

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

/// `InvalidRequest` about the request body (or one of its members).
fn bad_body(field: impl Into<String>, reason: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest { field: field.into(), reason: reason.into() }
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
/// `InvalidRequest` for a body of none of these forms (naming the member),
/// `InvalidSpec` for a spec that cannot be satisfied; `InvalidMetadata` for documents that do
/// not validate.
pub fn parse_create_body(body: &Value) -> ServiceResult<(NewNode, Map<String, Value>)> {
    let Some(obj) = body.as_object() else {
        return Err(bad_body("request body", "expected a JSON object (a zarr.json, a .zarray or a TensorStore spec)"));
    };
    let mut flags = Map::new();
    if obj.contains_key("driver") {
        for k in ["create", "open", "delete_existing"] {
            if let Some(v) = obj.get(k) {
                if !v.is_boolean() {
                    return Err(bad_body(format!("request body: `{k}`"), "expected a boolean"));
                }
                flags.insert(k.into(), v.clone());
            }
        }
        let array = tensorstore::spec::new_array(body)?;
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
                Some(_) => return Err(bad_body("request body: `attributes`", "expected an object")),
            };
            if doc.contains_key("shape") {
                let zarray = Value::Object(doc);
                let meta = ArrayMetadataV2::from_json(&zarray, "").map_err(invalid_body)?;
                check_supported(ArrayDescription::from_v2(&meta, attributes.clone()))?;
                Ok((NewNode::Array(NewArray::V2 { zarray, zattrs: Some(attributes) }), flags))
            } else {
                if let Some((k, _)) = doc.iter().find(|(k, _)| k.as_str() != "zarr_format") {
                    return Err(bad_body(
                        "request body",
                        format!("unknown member `{k}` for a v2 group (an array needs `shape`, `chunks`, `dtype`, ...)"),
                    ));
                }
                Ok((NewNode::Group { format: ZarrFormat::V2, document: Value::Object(attributes) }, flags))
            }
        }
        _ => Err(bad_body(
            "request body",
            "expected a v3 zarr.json (`zarr_format: 3`), a v2 .zarray or group (`zarr_format: 2`), or a \
             TensorStore spec (`driver`: \"zarr3\" or \"zarr\")",
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
async fn create_parents(node: &NodeRef<'_>, mount: &Mount, format: ZarrFormat) -> ServiceResult<()> {
    let path = node.path();
    let mut ancestors = Vec::new();
    let mut p = path.parent();
    while let Some(a) = p {
        p = a.parent();
        ancestors.push(a);
    }
    for a in ancestors.into_iter().rev() {
        let ancestor = node.at(a);
        match existing_versioned(&ancestor).await? {
            (Some(Node::Group(_)), _) => {}
            (Some(Node::Array(_)), _) => {
                let a = ancestor.path();
                return Err(ServiceError::Conflict(format!("cannot create `{path}`: its ancestor `{a}` is an array")));
            }
            (None, versions) => {
                let group = NewNode::Group { format, document: Value::Object(Map::new()) };
                for (key, bytes) in checked_documents(&ancestor, &group).await? {
                    put_checked(&ancestor, mount, &key, bytes, &versions).await?;
                }
            }
        }
    }
    Ok(())
}

/// Creates (or opens, or replaces) the node.
///
/// # Errors
/// `ReadOnly`, `AlreadyExists` (exists and not `open`), `NodeNotFound`
/// (missing and not `create`), `Conflict` (an ancestor is an array, or the
/// existing node is of the other kind), storage failures.
pub async fn create(node: &NodeRef<'_>, new: &NewNode, mode: OpenMode) -> ServiceResult<Created> {
    let len = match new {
        NewNode::Array(NewArray::V3(doc)) => json_len(doc),
        NewNode::Array(NewArray::V2 { zarray, zattrs }) => json_len(zarray) + zattrs.as_ref().map_or(0, json_len),
        NewNode::Group { document, .. } => json_len(document),
    };
    DocumentGate::of(node.app()).scoped(len, create_scoped(node, new, mode)).await
}

async fn create_scoped(node: &NodeRef<'_>, new: &NewNode, mode: OpenMode) -> ServiceResult<Created> {
    let m = node.writable()?;
    if !mode.create && !mode.open {
        return Err(ServiceError::InvalidOpenMode);
    }
    // Checked before anything is deleted (`delete_existing`) or written
    // (the missing parent groups): a document zarrd would refuse to store
    // leaves the mount as it was.
    let docs = checked_documents(node, new).await?;
    let _guard = node.mount().locks().exclusive(node.path().as_str()).await;
    let tried = AtomicBool::new(false);
    retry(|| create_once(node, m, new, &docs, mode, &tried)).await
}

/// The documents `new` stores at `node` (name, key and bytes), each
/// checked as [`super::documents::put_doc`] checks a document before it
/// stores it.
async fn checked_documents(node: &NodeRef<'_>, new: &NewNode) -> ServiceResult<Vec<(StoreKey, Bytes)>> {
    let attributes = |m: &Option<Map<String, Value>>| Cow::Owned(Value::Object(m.clone().unwrap_or_default()));
    let docs: Vec<(&str, Cow<'_, Value>)> = match new {
        NewNode::Array(NewArray::V3(doc)) => vec![("zarr.json", Cow::Borrowed(doc))],
        NewNode::Array(NewArray::V2 { zarray, zattrs }) => {
            vec![(".zarray", Cow::Borrowed(zarray)), (".zattrs", attributes(zattrs))]
        }
        NewNode::Group { format: ZarrFormat::V3, document } if document.get("zarr_format").is_some() => {
            vec![("zarr.json", Cow::Borrowed(document))]
        }
        NewNode::Group { format: ZarrFormat::V3, .. } => vec![("zarr.json", Cow::Owned(group_doc_v3()))],
        NewNode::Group { format: ZarrFormat::V2, document } => {
            vec![(".zgroup", Cow::Owned(json!({"zarr_format": 2}))), (".zattrs", Cow::Borrowed(document))]
        }
    };
    let mut checked = Vec::with_capacity(docs.len());
    for (name, doc) in docs {
        checked.push(checked_doc(node, name, &doc).await?);
    }
    Ok(checked)
}

/// True when the stored node is exactly what `new` writes: after an
/// attempt whose own write was reported lost, that is the attempt's write
/// having landed (its answer lost on the way back, the store then refusing
/// the client's retry of it), not another creator's node.
fn stored_as_requested(old: &Node, new: &NewNode) -> bool {
    match (old, new) {
        (Node::Array(a), NewNode::Array(NewArray::V3(doc))) => a.metadata == *doc,
        (Node::Array(a), NewNode::Array(NewArray::V2 { zarray, zattrs })) => {
            a.metadata == *zarray && a.zattrs == Some(Value::Object(zattrs.clone().unwrap_or_default()))
        }
        (Node::Group(g), NewNode::Group { format: ZarrFormat::V3, document }) => {
            let written = if document.get("zarr_format").is_some() { document.clone() } else { group_doc_v3() };
            g.format == ZarrFormat::V3 && g.metadata == written
        }
        (Node::Group(g), NewNode::Group { format: ZarrFormat::V2, document }) => {
            g.format == ZarrFormat::V2 && g.zattrs.as_ref() == Some(document)
        }
        _ => false,
    }
}

/// One attempt at a create: the node's documents (and its missing parent
/// groups') written only where they are still absent, so of several
/// processes creating the same node one creates it and the others find it
/// on their next attempt ([`super::versioned`]). `tried` is set when this
/// create's own documents were written and the write was reported lost.
async fn create_once(
    node: &NodeRef<'_>,
    m: &Arc<Mount>,
    new: &NewNode,
    docs: &[(StoreKey, Bytes)],
    mode: OpenMode,
    tried: &AtomicBool,
) -> ServiceResult<Created> {
    let (mount, path) = (node.mount_name(), node.path());
    let (found, mut versions) = existing_versioned(node).await?;
    if let Some(old) = found {
        if tried.load(Ordering::Relaxed) && mode.create && stored_as_requested(&old, new) {
            return Ok(Created { node: old, created: true });
        }
        if mode.delete_existing && mode.create {
            delete_all(node, m).await?;
            versions = Versions::default();
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
        return Err(node.not_found());
    }
    let format = match new {
        NewNode::Array(NewArray::V3(_)) => ZarrFormat::V3,
        NewNode::Array(NewArray::V2 { .. }) => ZarrFormat::V2,
        NewNode::Group { format, .. } => *format,
    };
    create_parents(node, m, format).await?;
    let written = async {
        for (key, bytes) in docs {
            put_checked(node, m, key, bytes.clone(), &versions).await?;
        }
        Ok(())
    }
    .await;
    if written.as_ref().is_err_and(is_lost_race) {
        tried.store(true, Ordering::Relaxed);
    }
    written?;
    let opened = open_in_with(m.clone(), path, &DocumentGate::of(node.app())).await?;
    Ok(Created { node: opened, created: true })
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
        let e = parse_create_body(&json!(3)).unwrap_err();
        assert!(matches!(&e, ServiceError::InvalidRequest { field, .. } if field == "request body"), "{e}");
        assert!(e.to_string().starts_with("request body: expected a JSON object"), "{e}");
        let e = parse_create_body(&json!({"driver": "zarr3"})).unwrap_err();
        assert!(matches!(&e, ServiceError::InvalidSpec(_)) && e.to_string().starts_with("TensorStore spec: "), "{e}");
        let bad = json!({"zarr_format": 3, "node_type": "array", "shape": [1]});
        assert!(matches!(parse_create_body(&bad), Err(ServiceError::InvalidMetadata { .. })));
    }
}
