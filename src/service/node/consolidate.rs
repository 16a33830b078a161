//! Consolidating a group's metadata, as zarr-python's
//! `consolidate_metadata` does: v3 inline `consolidated_metadata` in the
//! group's `zarr.json` (descendant groups carry an empty inline block), or
//! a v2 `.zmetadata` (`zarr_consolidated_format: 1`). The document is
//! written on the condition that it is still the version read before the
//! hierarchy was listed, so a consolidation never undoes a concurrent
//! attribute change of the group nor replaces a newer consolidation made
//! by another process ([`super::versioned`]).

use std::collections::BTreeMap;

use serde_json::{json, Map};

use super::documents::{put_doc, DocumentGate};
use super::open::{existing, existing_versioned};
use super::versioned::retry;
use super::{Node, NodePath};
use crate::service::{NodeRef, ServiceError, ServiceResult};
use crate::storage::{Mount, StorageError, StoreKey};
use crate::zarr::array::ZarrFormat;

/// Every node below `group` (any depth), with its documents.
///
/// Bounded before it holds much: the walk lists at most
/// `limits.max_list_entries` names in all (one listing's worth, spread over
/// every directory it visits), and the documents it holds at most what one
/// stored document may be (twice `limits.max_body_bytes`, which the
/// consolidated document must fit anyway). Past either, 413 naming the
/// limit, before anything is written.
async fn descendants(group: &NodeRef<'_>) -> ServiceResult<Vec<(NodePath, Node)>> {
    let limits = &group.app().config().limits;
    let max_names = limits.max_list_entries;
    let max_doc_bytes = DocumentGate::of(group.app()).max_bytes();
    let too_large = |what: String| {
        ServiceError::HierarchyTooLarge(format!("consolidating `{}`: {what}; nothing was written", group.path()))
    };
    let mut names = 0usize;
    let mut doc_bytes = 0u64;
    let mut out = Vec::new();
    let storage = group.mount().mount().storage();
    let mut frontier = vec![group.path().clone()];
    while let Some(path) = frontier.pop() {
        let (entries, more) = storage.list_names_limited(&path.prefix()?, max_names - names).await?;
        names += entries.len();
        if more {
            return Err(too_large(format!(
                "the hierarchy has more than limits.max_list_entries ({max_names}) names (`{}/` and the directories before it)",
                path
            )));
        }
        for entry in entries.into_iter().filter(|e| e.prefix) {
            let Ok(child) = path.child(&entry.name) else { continue };
            let Some(n) = existing(&group.at(child.clone())).await? else { continue };
            doc_bytes = doc_bytes.saturating_add(held_bytes(&n));
            if doc_bytes > max_doc_bytes {
                return Err(too_large(format!(
                    "its documents are more than the {max_doc_bytes} bytes one stored document may have (twice limits.max_body_bytes)"
                )));
            }
            if matches!(n, Node::Group(_)) {
                frontier.push(child.clone());
            }
            out.push((child, n));
        }
    }
    out.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    Ok(out)
}

/// What a node adds to the consolidated document: its documents' compact
/// JSON text.
fn held_bytes(n: &Node) -> u64 {
    let text = |v: &serde_json::Value| serde_json::to_vec(v).map_or(0, |b| b.len() as u64);
    match n {
        Node::Array(a) => text(&a.metadata) + a.zattrs.as_ref().map_or(0, text),
        Node::Group(g) => text(&g.metadata) + g.zattrs.as_ref().map_or(0, text),
    }
}

/// Writes consolidated metadata for the group at `path`; returns how many
/// descendant nodes it holds.
///
/// # Errors
/// `ReadOnly`, `NodeNotFound`, `NotAGroup` for an array, storage failures.
pub async fn consolidate(node: &NodeRef<'_>) -> ServiceResult<usize> {
    let m = node.writable()?;
    let _guard = node.mount().locks().exclusive(node.path().as_str()).await;
    retry(|| consolidate_once(node, m)).await
}

/// The version of `key` now (`None`: absent).
async fn version_of(mount: &Mount, key: &StoreKey) -> ServiceResult<Option<String>> {
    match mount.storage().head(key).await {
        Ok(meta) => Ok(Some(meta.etag)),
        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One consolidation: the group's document (v3) or `.zmetadata` (v2)
/// written on the condition that it is still the version read before the
/// descendants were listed ([`super::versioned`]).
async fn consolidate_once(node: &NodeRef<'_>, m: &Mount) -> ServiceResult<usize> {
    let path = node.path();
    let (found, mut versions) = existing_versioned(node).await?;
    let group = match found {
        Some(Node::Group(g)) => g,
        Some(Node::Array(_)) => {
            return Err(ServiceError::NotAGroup { mount: node.mount_name().to_string(), path: path.to_string() })
        }
        None => return Err(node.not_found()),
    };
    if group.format == ZarrFormat::V2 {
        let zmetadata = path.key(".zmetadata")?;
        versions.record(zmetadata.clone(), version_of(m, &zmetadata).await?);
    }
    let nodes = descendants(node).await?;
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
                docs.insert(p.relative_to(path).to_string(), doc);
            }
            let mut doc = group.metadata.clone();
            if let Some(o) = doc.as_object_mut() {
                o.insert(
                    "consolidated_metadata".into(),
                    json!({"kind": "inline", "must_understand": false, "metadata": docs}),
                );
            }
            put_doc(node, m, "zarr.json", &doc, &versions).await?;
            Ok(docs.len())
        }
        ZarrFormat::V2 => {
            let mut docs = Map::new();
            docs.insert(".zgroup".into(), group.metadata.clone());
            docs.insert(".zattrs".into(), group.zattrs.clone().unwrap_or_else(|| json!({})));
            let mut count = 0;
            for (p, n) in &nodes {
                let rel = p.relative_to(path);
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
            put_doc(node, m, ".zmetadata", &doc, &versions).await?;
            Ok(count)
        }
    }
}
