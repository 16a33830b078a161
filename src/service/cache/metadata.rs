//! The parsed-metadata cache: opened nodes by (mount, path).
//!
//! A hit saves reading and parsing a node's documents (and building its
//! codec chain). Entries are invalidated by every write through zarrd —
//! REST node operations ([`crate::service::node`]) and raw key PUT/DELETE of a
//! metadata document ([`crate::service::keys`]) — and revalidated against storage
//! according to the mount's `recheck_cached_metadata`
//! ([`RecheckPolicy`], TensorStore's option of that name):
//!
//! - `Always` (`"open"`, the default): on every use, HEAD each document key
//!   the entry was read from and compare ETags (a document that appeared
//!   or disappeared counts as a change);
//! - `After(d)`: like `Always` once the entry is older than `d`;
//! - `Never`: trust the entry until a write through zarrd or eviction.
//!
//! Concurrency: lock-free reads (moka); a miss loads without holding any
//! lock, so two concurrent misses may both load (harmless: same result). A
//! load that overlaps any invalidation is returned but not cached (a
//! generation counter), so a write through zarrd can never be hidden by a
//! stale entry inserted after it. Missing nodes are not cached.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use moka::sync::Cache;

use crate::service::node::{self, DocumentGate, Node, NodePath, Validator};
use crate::service::ServiceResult;
use crate::storage::mount::RecheckPolicy;
use crate::storage::{Mount, StorageError};

/// Parse memory the cached nodes may hold, in bytes: each node counts its
/// documents' size times [`node::PARSE_COST_FACTOR`] (a parsed document
/// takes many times its text), so a few nodes with huge attributes cannot
/// hold more than this, and ordinary nodes (a few kilobytes of JSON) fit
/// by the thousand.
pub const DEFAULT_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Debug, Clone)]
struct Entry {
    node: Node,
    validators: Arc<Vec<Validator>>,
    checked: Instant,
    /// What the entry counts against the cache's capacity.
    weight: u32,
}

/// A node's weight in the cache: its documents' compact size times the
/// parse cost factor, plus a kilobyte for the rest.
fn weight_of(node: &Node) -> u32 {
    let len = match node {
        Node::Array(a) => node::json_len(&a.metadata) + a.zattrs.as_ref().map_or(0, node::json_len),
        // A group keeps its attributes beside the documents they came from.
        Node::Group(g) => {
            node::json_len(&g.metadata) + g.zattrs.as_ref().map_or(0, node::json_len) + node::json_len(&g.attributes)
        }
    };
    let weight = (len as u64).saturating_mul(node::PARSE_COST_FACTOR).saturating_add(1024);
    u32::try_from(weight).unwrap_or(u32::MAX)
}

/// Opened nodes by (mount, path).
#[derive(Debug)]
pub struct MetadataCache {
    entries: Cache<(String, String), Entry>,
    /// Bumped by every invalidation.
    generation: AtomicU64,
    /// See [`MetadataCache::gate`].
    gate: OnceLock<DocumentGate>,
}

impl Default for MetadataCache {
    fn default() -> Self {
        Self::new(DEFAULT_BYTES)
    }
}

impl MetadataCache {
    /// A cache of nodes whose documents weigh at most `bytes` (see
    /// [`DEFAULT_BYTES`]).
    #[must_use]
    pub fn new(bytes: u64) -> Self {
        Self {
            entries: Cache::builder()
                .max_capacity(bytes)
                .weigher(|_, e: &Entry| e.weight)
                .support_invalidation_closures()
                .build(),
            generation: AtomicU64::new(0),
            gate: OnceLock::new(),
        }
    }

    /// Opens a node, from the cache when its entry is still valid.
    ///
    /// # Errors
    /// As [`node::open`].
    pub async fn open(&self, mount: Arc<Mount>, path: &NodePath, gate: DocumentGate) -> ServiceResult<Node> {
        let key = (mount.name().to_string(), path.as_str().to_string());
        if let Some(entry) = self.entries.get(&key) {
            let fresh = match mount.recheck_metadata() {
                RecheckPolicy::Never => true,
                RecheckPolicy::After(d) if entry.checked.elapsed() < d => true,
                RecheckPolicy::After(_) | RecheckPolicy::Always => unchanged(&mount, &entry.validators).await?,
            };
            if fresh {
                if matches!(mount.recheck_metadata(), RecheckPolicy::After(_)) {
                    // Revalidated now: the next check is a full interval away.
                    self.entries.insert(key, Entry { checked: Instant::now(), ..entry.clone() });
                }
                return Ok(entry.node);
            }
        }
        let (node, validators) = node::load(mount, path, &gate).await?;
        let weight = weight_of(&node);
        self.entries.insert(
            key,
            Entry { node: node.clone(), validators: Arc::new(validators), checked: Instant::now(), weight },
        );
        Ok(node)
    }

    /// The document gate for `config`'s limits (made on first use; one per
    /// app, so its parse budget is shared by every request).
    pub fn gate(&self, config: &crate::config::Config) -> DocumentGate {
        self.gate
            .get_or_init(|| DocumentGate::new(config.limits.max_body_bytes, config.limits.document_parse_budget_bytes))
            .clone()
    }

    /// Forgets one node.
    pub fn invalidate(&self, mount: &str, path: &NodePath) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.entries.invalidate(&(mount.to_string(), path.as_str().to_string()));
    }

    /// Forgets a node and everything below it.
    pub fn invalidate_tree(&self, mount: &str, path: &NodePath) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let (mount, base) = (mount.to_string(), path.as_str().to_string());
        // Only fails when closures are not supported, which the builder enables.
        let _ = self.entries.invalidate_entries_if(move |(m, p), _| {
            *m == mount && (base.is_empty() || *p == base || p.starts_with(&format!("{base}/")))
        });
    }

    /// Entries currently held (approximate; for tests and metrics).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }

    /// Whether nothing is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether every document still has the ETag it was read with.
async fn unchanged(mount: &Mount, validators: &[Validator]) -> ServiceResult<bool> {
    let heads = validators.iter().map(|(key, etag)| async move {
        let now = match mount.storage().head(key).await {
            Ok(meta) => Some(meta.etag),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(now == *etag)
    });
    let results = futures::future::try_join_all(heads).await?;
    Ok(results.into_iter().all(|same| same))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{MountSpec, PutCondition, StoreKey};
    use bytes::Bytes;

    const GROUP: &[u8] = br#"{"zarr_format": 3, "node_type": "group", "attributes": {"v": 1}}"#;
    const GROUP2: &[u8] = br#"{"zarr_format": 3, "node_type": "group", "attributes": {"v": 2}}"#;

    async fn mount(recheck: RecheckPolicy) -> Arc<Mount> {
        let m = Mount::build("m", &MountSpec::from_url("memory://")).unwrap().with_recheck_metadata(recheck);
        m.put(&StoreKey::new("g/zarr.json").unwrap(), Bytes::from_static(GROUP), &PutCondition::None).await.unwrap();
        m.put(&StoreKey::new("g/h/zarr.json").unwrap(), Bytes::from_static(GROUP), &PutCondition::None).await.unwrap();
        Arc::new(m)
    }

    fn attr(node: &Node) -> &serde_json::Value {
        match node {
            Node::Group(g) => &g.attributes["v"],
            Node::Array(_) => panic!("a group was stored"),
        }
    }

    async fn overwrite(m: &Mount) {
        // Behind the cache's back (the storage directly, no invalidation).
        m.put(&StoreKey::new("g/zarr.json").unwrap(), Bytes::from_static(GROUP2), &PutCondition::None).await.unwrap();
    }

    #[tokio::test]
    async fn nodes_weigh_their_documents_so_huge_ones_are_not_kept() {
        // A cache with room for small nodes only (recheck never: only the
        // cache could answer without reading storage).
        let (cache, m, g) =
            (MetadataCache::new(1024 * 1024), mount(RecheckPolicy::Never).await, NodePath::new("g").unwrap());
        let small = cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap();
        assert!(weight_of(&small) < 64 * 1024, "{}", weight_of(&small));
        let big = format!(
            r#"{{"zarr_format": 3, "node_type": "group", "attributes": {{"v": 3, "pad": "{}"}}}}"#,
            "p".repeat(64 * 1024)
        );
        m.put(&StoreKey::new("b/zarr.json").unwrap(), Bytes::from(big), &PutCondition::None).await.unwrap();
        let b = NodePath::new("b").unwrap();
        let node = cache.open(m.clone(), &b, DocumentGate::default()).await.unwrap();
        // Attributes counted with the document they came from: 2 x 64 KiB x 32.
        assert!(weight_of(&node) > 4 * 1024 * 1024, "{}", weight_of(&node));
        cache.entries.run_pending_tasks();
        assert!(cache.entries.get(&("m".to_string(), "b".to_string())).is_none(), "heavier than the whole cache");
        assert!(cache.entries.get(&("m".to_string(), "g".to_string())).is_some(), "small nodes stay");
    }

    #[tokio::test]
    async fn always_revalidates_by_etag() {
        let (cache, m, g) = (MetadataCache::default(), mount(RecheckPolicy::Always).await, NodePath::new("g").unwrap());
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 1);
        overwrite(&m).await;
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 2);
    }

    #[tokio::test]
    async fn never_trusts_the_entry_until_invalidated() {
        let (cache, m, g) = (MetadataCache::default(), mount(RecheckPolicy::Never).await, NodePath::new("g").unwrap());
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 1);
        overwrite(&m).await;
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 1);
        cache.invalidate("m", &g);
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 2);
    }

    #[tokio::test]
    async fn after_a_duration_rechecks_once_stale() {
        let recheck = RecheckPolicy::After(std::time::Duration::from_millis(50));
        let (cache, m, g) = (MetadataCache::default(), mount(recheck).await, NodePath::new("g").unwrap());
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 1);
        overwrite(&m).await;
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 1, "still fresh");
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
        assert_eq!(attr(&cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap()), 2, "stale: rechecked");
    }

    #[tokio::test]
    async fn invalidate_tree_drops_descendants_only() {
        let (cache, m) = (MetadataCache::default(), mount(RecheckPolicy::Never).await);
        let (g, h) = (NodePath::new("g").unwrap(), NodePath::new("g/h").unwrap());
        cache.open(m.clone(), &g, DocumentGate::default()).await.unwrap();
        cache.open(m.clone(), &h, DocumentGate::default()).await.unwrap();
        assert_eq!(cache.len(), 2);
        cache.invalidate_tree("m", &h);
        assert_eq!(cache.len(), 1);
        cache.invalidate_tree("other", &NodePath::root());
        assert_eq!(cache.len(), 1);
        cache.invalidate_tree("m", &NodePath::root());
        assert!(cache.is_empty());
    }
}
