//! The application state ([`App`]) and the handles a request resolves once:
//! a mount by name ([`MountRef`]) and a node by mount name and path
//! ([`NodeRef`]).
//!
//! Handlers resolve `(mount, path)` with [`App::node`] (answering
//! `UnknownMount`) and pass the [`NodeRef`] to one operation; an operation
//! that writes asks [`NodeRef::writable`] (answering `ReadOnly`), the one
//! read-only check of the service. Store-protocol operations take a
//! [`MountRef`] the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::cache::chunk::ChunkCache;
use super::cache::metadata::MetadataCache;
use super::locks::MountLocks;
use super::node::NodePath;
use super::{ServiceError, ServiceResult};
use crate::config::Config;
use crate::storage::mount::MountError;
use crate::storage::Mount;

/// A mount and its write locks.
#[derive(Debug)]
struct MountEntry {
    mount: Arc<Mount>,
    locks: Arc<MountLocks>,
}

/// The shared application state (one `Arc<App>` per server).
#[derive(Debug)]
pub struct App {
    config: Config,
    mounts: BTreeMap<String, MountEntry>,
    metadata: MetadataCache,
    chunk_cache: Arc<ChunkCache>,
    /// `limits.read_answer_budget_bytes`, in KiB (see [`super::read`]).
    read_answers: Arc<tokio::sync::Semaphore>,
    /// `limits.render_budget_bytes`, in KiB (see [`super::render`]).
    renders: Arc<tokio::sync::Semaphore>,
    /// `limits.upload_budget_bytes`, in KiB (see `http::extract::read_body`).
    uploads: Arc<tokio::sync::Semaphore>,
    /// Rendered previews (see [`super::render::preview`]).
    previews: super::render::preview::PreviewCache,
    /// Background jobs (pyramid builds).
    jobs: Arc<super::jobs::Jobs>,
}

impl App {
    /// Builds every configured mount.
    ///
    /// # Errors
    /// The first mount that cannot be built, named.
    pub fn from_config(config: Config) -> Result<Self, MountError> {
        let mounts = config
            .mounts
            .iter()
            .map(|(name, spec)| {
                Mount::build_with(name, spec, config.cache.object_cache()).map(|m| (name.clone(), Arc::new(m)))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self::assemble(config, mounts))
    }

    /// An app over ready-made mounts (tests, embedding).
    #[must_use]
    pub fn with_mounts(config: Config, mounts: Vec<Mount>) -> Self {
        let mounts = mounts.into_iter().map(|m| (m.name().to_string(), Arc::new(m))).collect();
        Self::assemble(config, mounts)
    }

    fn assemble(config: Config, mounts: BTreeMap<String, Arc<Mount>>) -> Self {
        // Decodes of the whole process share one budget (issue 12, finding 9).
        crate::zarr::codec::budget::configure(config.limits.decode_budget_bytes);
        let chunk_cache = Arc::new(ChunkCache::new(config.cache.chunk_bytes));
        // Every write through a mount (either face) invalidates what the
        // cache holds for that key.
        for (name, mount) in &mounts {
            let (cache, name) = (chunk_cache.clone(), name.clone());
            mount.set_write_listener(Arc::new(move |key| cache.invalidate(&name, key.as_str())));
        }
        let mounts = mounts
            .into_iter()
            .map(|(name, mount)| (name, MountEntry { mount, locks: Arc::new(MountLocks::default()) }))
            .collect();
        let budget = |bytes: u64| {
            let kib = usize::try_from(bytes.div_ceil(1024)).unwrap_or(usize::MAX);
            Arc::new(tokio::sync::Semaphore::new(kib.clamp(1, tokio::sync::Semaphore::MAX_PERMITS)))
        };
        let read_answers = budget(config.limits.read_answer_budget_bytes);
        let renders = budget(config.limits.render_budget_bytes);
        let uploads = budget(config.limits.upload_budget_bytes);
        let previews = super::render::preview::PreviewCache::default();
        let jobs = Arc::default();
        Self {
            config,
            mounts,
            metadata: MetadataCache::default(),
            chunk_cache,
            read_answers,
            renders,
            uploads,
            previews,
            jobs,
        }
    }

    /// The memory budget of array-data request bodies being received, in
    /// KiB permits (`limits.upload_budget_bytes`).
    #[must_use]
    pub fn upload_budget(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.uploads
    }

    /// The memory budget of started read answers, in KiB permits
    /// (`limits.read_answer_budget_bytes`; see [`super::read`]).
    #[must_use]
    pub fn read_answer_budget(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.read_answers
    }

    /// The memory budget of rendered images, in KiB permits
    /// (`limits.render_budget_bytes`; see [`super::render`]).
    #[must_use]
    pub fn render_budget(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.renders
    }

    /// Background jobs (see [`super::jobs`]).
    #[must_use]
    pub fn jobs(&self) -> &Arc<super::jobs::Jobs> {
        &self.jobs
    }

    /// The decoded chunk cache (see [`super::cache::chunk`]); writers that
    /// bypass `Mount::put`/`Mount::delete` must call [`ChunkCache::invalidate`].
    #[must_use]
    pub fn chunk_cache(&self) -> &Arc<ChunkCache> {
        &self.chunk_cache
    }

    /// The cache of rendered previews.
    #[must_use]
    pub fn previews(&self) -> &super::render::preview::PreviewCache {
        &self.previews
    }

    /// The write locks of a mount.
    ///
    /// # Errors
    /// `UnknownMount`.
    pub fn locks(&self, mount: &str) -> ServiceResult<&Arc<MountLocks>> {
        Ok(&self.entry(mount)?.locks)
    }

    /// The parsed-metadata cache.
    #[must_use]
    pub fn metadata_cache(&self) -> &MetadataCache {
        &self.metadata
    }

    /// The configuration the app runs with.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every mount, by name.
    pub fn mounts(&self) -> impl Iterator<Item = &Arc<Mount>> {
        self.mounts.values().map(|e| &e.mount)
    }

    fn entry(&self, name: &str) -> ServiceResult<&MountEntry> {
        self.mounts.get(name).ok_or_else(|| ServiceError::UnknownMount(name.to_string()))
    }

    /// One mount.
    ///
    /// # Errors
    /// `UnknownMount`.
    pub fn mount(&self, name: &str) -> ServiceResult<&Arc<Mount>> {
        Ok(&self.entry(name)?.mount)
    }

    /// One mount, resolved for store-protocol operations.
    ///
    /// # Errors
    /// `UnknownMount`.
    pub fn mount_ref(&self, name: &str) -> ServiceResult<MountRef<'_>> {
        Ok(MountRef { app: self, entry: self.entry(name)? })
    }

    /// The node at `path` in mount `name`, resolved for node operations
    /// (nothing is read: whether a node exists there is the operation's
    /// question).
    ///
    /// # Errors
    /// `UnknownMount`.
    pub fn node(&self, name: &str, path: &NodePath) -> ServiceResult<NodeRef<'_>> {
        Ok(self.mount_ref(name)?.node(path.clone()))
    }

    /// Probes every mount; the failures, by mount name.
    pub async fn probe_mounts(&self) -> Vec<(String, String)> {
        let probes = self.mounts().map(|m| async move { (m.name().to_string(), m.probe().await) });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .filter_map(|(name, r)| r.err().map(|e| (name, e.to_string())))
            .collect()
    }
}

/// A mount of an [`App`], looked up once.
#[derive(Clone, Copy)]
pub struct MountRef<'a> {
    app: &'a App,
    entry: &'a MountEntry,
}

impl std::fmt::Debug for MountRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountRef").field("name", &self.name()).finish_non_exhaustive()
    }
}

impl<'a> MountRef<'a> {
    /// The app the mount belongs to (its configuration and caches).
    #[must_use]
    pub fn app(&self) -> &'a App {
        self.app
    }

    /// The mount's name.
    #[must_use]
    pub fn name(&self) -> &'a str {
        self.entry.mount.name()
    }

    /// The mount, for reading.
    #[must_use]
    pub fn mount(&self) -> &'a Arc<Mount> {
        &self.entry.mount
    }

    /// The mount's write locks.
    #[must_use]
    pub fn locks(&self) -> &'a MountLocks {
        &self.entry.locks
    }

    /// Whether the mount may be written.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        !self.entry.mount.read_only()
    }

    /// The mount, for writing: the service's one read-only check.
    ///
    /// # Errors
    /// `ReadOnly` for a read-only mount.
    pub fn writable(&self) -> ServiceResult<&'a Arc<Mount>> {
        if self.is_writable() {
            Ok(&self.entry.mount)
        } else {
            Err(ServiceError::ReadOnly(self.name().to_string()))
        }
    }

    /// The node at `path` in this mount.
    #[must_use]
    pub fn node(&self, path: NodePath) -> NodeRef<'a> {
        NodeRef { mount: *self, path }
    }
}

/// A node of an [`App`] addressed by mount and path: the mount looked up
/// once, the node not yet opened.
#[derive(Clone)]
pub struct NodeRef<'a> {
    mount: MountRef<'a>,
    path: NodePath,
}

impl std::fmt::Debug for NodeRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRef").field("mount", &self.mount.name()).field("path", &self.path).finish()
    }
}

impl<'a> NodeRef<'a> {
    /// The app the node belongs to.
    #[must_use]
    pub fn app(&self) -> &'a App {
        self.mount.app
    }

    /// Its mount.
    #[must_use]
    pub fn mount(&self) -> &MountRef<'a> {
        &self.mount
    }

    /// Its mount's name.
    #[must_use]
    pub fn mount_name(&self) -> &'a str {
        self.mount.name()
    }

    /// Its path in the mount.
    #[must_use]
    pub fn path(&self) -> &NodePath {
        &self.path
    }

    /// Its mount, for writing (see [`MountRef::writable`]).
    ///
    /// # Errors
    /// `ReadOnly` for a read-only mount.
    pub fn writable(&self) -> ServiceResult<&'a Arc<Mount>> {
        self.mount.writable()
    }

    /// Another node of the same mount (an ancestor, a child).
    #[must_use]
    pub fn at(&self, path: NodePath) -> Self {
        self.mount.node(path)
    }

    /// `NodeNotFound` for this node.
    #[must_use]
    pub fn not_found(&self) -> ServiceError {
        ServiceError::NodeNotFound { mount: self.mount_name().to_string(), path: self.path.to_string() }
    }

    /// `NotAnArray` for this node.
    #[must_use]
    pub fn not_an_array(&self) -> ServiceError {
        ServiceError::NotAnArray { mount: self.mount_name().to_string(), path: self.path.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::mount::MountSpec;

    fn app() -> App {
        let spec = |read_only: bool| {
            serde_json::from_value::<MountSpec>(serde_json::json!({"url": "memory://", "read_only": read_only}))
                .unwrap()
        };
        App::with_mounts(
            Config::default(),
            vec![Mount::build("rw", &spec(false)).unwrap(), Mount::build("ro", &spec(true)).unwrap()],
        )
    }

    #[test]
    fn nodes_resolve_their_mount_once_and_know_whether_they_may_write() {
        let app = app();
        let path = NodePath::new("a/b").unwrap();
        let n = app.node("rw", &path).unwrap();
        assert_eq!((n.mount_name(), n.path().as_str()), ("rw", "a/b"));
        assert_eq!(n.writable().unwrap().name(), "rw");
        let e = app.node("ro", &path).unwrap().writable().unwrap_err();
        assert!(matches!(&e, ServiceError::ReadOnly(m) if m == "ro"), "{e}");
        let e = app.node("nope", &path).unwrap_err();
        assert!(matches!(&e, ServiceError::UnknownMount(m) if m == "nope"), "{e}");
        assert!(matches!(n.not_found(), ServiceError::NodeNotFound { mount, path } if mount == "rw" && path == "a/b"));
        assert_eq!(n.at(NodePath::root()).path(), &NodePath::root());
        assert!(!app.mount_ref("ro").unwrap().is_writable());
    }
}
