//! The service layer: opens mounts and nodes, owns caches and locks.
//!
//! Handlers in `http/` call one function here and map the result; no Zarr
//! or storage logic lives in `http/`.

pub mod chunk_cache;
pub mod chunk_store;
pub mod cpu;
pub mod error;
pub mod format;
pub mod locks;
pub mod metadata_cache;
pub mod node;
pub mod nodes;
pub mod read;
pub mod store;
pub mod write;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use error::{ServiceError, ServiceResult};

use crate::config::Config;
use crate::storage::mount::MountError;
use crate::storage::Mount;
use chunk_cache::ChunkCache;
use locks::MountLocks;
use metadata_cache::MetadataCache;

/// The shared application state (one `Arc<App>` per server).
#[derive(Debug)]
pub struct App {
    config: Config,
    mounts: BTreeMap<String, Arc<Mount>>,
    locks: BTreeMap<String, Arc<MountLocks>>,
    metadata: MetadataCache,
    chunk_cache: Arc<ChunkCache>,
    /// `limits.read_answer_budget_bytes`, in KiB (see [`read`]).
    read_answers: Arc<tokio::sync::Semaphore>,
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
        let locks = mounts.keys().map(|name| (name.clone(), Arc::new(MountLocks::default()))).collect();
        let chunk_cache = Arc::new(ChunkCache::new(config.cache.chunk_bytes));
        // Every write through a mount (either face) invalidates what the
        // cache holds for that key.
        for (name, mount) in &mounts {
            let (cache, name) = (chunk_cache.clone(), name.clone());
            mount.set_write_listener(Arc::new(move |key| cache.invalidate(&name, key.as_str())));
        }
        let kib = usize::try_from(config.limits.read_answer_budget_bytes.div_ceil(1024))
            .unwrap_or(usize::MAX)
            .clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        let read_answers = Arc::new(tokio::sync::Semaphore::new(kib));
        Self { config, mounts, locks, metadata: MetadataCache::default(), chunk_cache, read_answers }
    }

    /// The memory budget of started read answers, in KiB permits
    /// (`limits.read_answer_budget_bytes`; see [`read`]).
    #[must_use]
    pub fn read_answer_budget(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.read_answers
    }

    /// The decoded chunk cache (see [`chunk_cache`]); writers that bypass
    /// `Mount::put`/`Mount::delete` must call [`ChunkCache::invalidate`].
    #[must_use]
    pub fn chunk_cache(&self) -> &Arc<ChunkCache> {
        &self.chunk_cache
    }

    /// The write locks of a mount.
    ///
    /// # Errors
    /// `UnknownMount`.
    pub fn locks(&self, mount: &str) -> ServiceResult<&Arc<MountLocks>> {
        self.locks.get(mount).ok_or_else(|| ServiceError::UnknownMount(mount.to_string()))
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
        self.mounts.values()
    }

    /// One mount.
    ///
    /// # Errors
    /// `UnknownMount`.
    pub fn mount(&self, name: &str) -> ServiceResult<&Arc<Mount>> {
        self.mounts.get(name).ok_or_else(|| ServiceError::UnknownMount(name.to_string()))
    }

    /// Probes every mount; the failures, by mount name.
    pub async fn probe_mounts(&self) -> Vec<(String, String)> {
        let probes = self.mounts.values().map(|m| async move { (m.name().to_string(), m.probe().await) });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .filter_map(|(name, r)| r.err().map(|e| (name, e.to_string())))
            .collect()
    }
}
