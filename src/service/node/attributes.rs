//! Replacing or merging a node's attributes, as zarr-python does: only
//! `attributes` of the stored `zarr.json` is rewritten (other members kept
//! as stored), or the v2 `.zattrs`: conditionally on the version read, and
//! again from a fresh read when another process changed it meanwhile
//! ([`super::versioned`]), so concurrent merges through several processes
//! all land.

use serde_json::{Map, Value};

use super::documents::{json_len, put_doc, DocumentGate};
use super::open::existing_versioned;
use super::versioned::retry;
use super::Node;
use crate::service::{NodeRef, ServiceResult};
use crate::storage::Mount;
use crate::zarr::array::ZarrFormat;

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
    node: &NodeRef<'_>,
    attributes: Map<String, Value>,
    how: AttributeUpdate,
) -> ServiceResult<Map<String, Value>> {
    let len = json_len(&attributes);
    DocumentGate::of(node.app()).scoped(len, update_attributes_scoped(node, attributes, how)).await
}

async fn update_attributes_scoped(
    node: &NodeRef<'_>,
    attributes: Map<String, Value>,
    how: AttributeUpdate,
) -> ServiceResult<Map<String, Value>> {
    let m = node.writable()?;
    let _guard = node.mount().locks().exclusive(node.path().as_str()).await;
    retry(|| update_once(node, m, &attributes, how)).await
}

/// One read-modify-write of the attributes, conditional on the documents
/// read ([`super::versioned`]).
async fn update_once(
    node: &NodeRef<'_>,
    m: &Mount,
    attributes: &Map<String, Value>,
    how: AttributeUpdate,
) -> ServiceResult<Map<String, Value>> {
    let (found, versions) = existing_versioned(node).await?;
    let found = found.ok_or_else(|| node.not_found())?;
    let (format, current, metadata) = match &found {
        Node::Array(a) => (a.format(), a.desc.attributes.clone(), a.metadata.clone()),
        Node::Group(g) => (g.format, g.attributes.clone(), g.metadata.clone()),
    };
    let new = match how {
        AttributeUpdate::Replace => attributes.clone(),
        AttributeUpdate::Merge => {
            let mut merged = current;
            for (k, v) in attributes {
                if v.is_null() {
                    merged.remove(k);
                } else {
                    merged.insert(k.clone(), v.clone());
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
            put_doc(node, m, "zarr.json", &doc, &versions).await?;
        }
        ZarrFormat::V2 => put_doc(node, m, ".zattrs", &Value::Object(new.clone()), &versions).await?,
    }
    Ok(new)
}
