//! The decoded chunk cache: decoded chunks (inner chunks, for sharded
//! arrays) and shard indexes, shared by every request, bounded in bytes
//! (moka, weighed by decoded size).
//!
//! Keys are `(mount, store key, part)`: the whole chunk stored under the
//! key, the shard index stored in it, or one inner chunk of it. Whole chunks
//! and shard indexes carry the storage version (ETag) they were read at and
//! when that was last confirmed; the mount's
//! [`RecheckPolicy`](crate::storage::mount::RecheckPolicy) says when a use
//! must confirm it again (TensorStore's `recheck_cached_data`). An inner
//! chunk carries the *stamp* of the shard index it was read through: a
//! shard index read anew (after a change or an invalidation) gets a new
//! stamp, so every inner chunk cached under the old one stops matching at
//! once, without a scan of the cache.
//!
//! Invalidation: every write through zarrd (store-protocol PUT and DELETE,
//! slice writes — anything through `Mount::put`/`Mount::delete`) calls
//! [`ChunkCache::invalidate`] for its key. A read that raced with a write
//! cannot leave stale data behind: readers note [`ChunkCache::generation`]
//! before reading storage, and [`ChunkCache::insert`] drops the entry again
//! when any invalidation happened meanwhile.
//!
//! Missing chunks are cached too (as "absent"), so fill-value reads of a
//! sparse array do not hit storage again.
//!
//! Concurrency: every method takes `&self` and may be called from any
//! thread; moka is lock-free for reads.
//!
//! The region engine reads through it as its [`UnitCache`]: [`ArrayCache`]
//! is one read's view (an array in a mount), which turns the engine's keys
//! (relative to the array) into store keys, revalidates entries against
//! the store's ETags as the mount's policy says, and lets a read's results
//! in only when the read is small enough not to evict hot chunks: the read
//! decides from its planned size, and each view lets in at most half the
//! cache's capacity in all, counted as entries arrive (a variable-length
//! chunk's real size is known only once it is decoded: a scan of string
//! chunks that each decode to hundreds of MiB would otherwise pass the
//! planned check and take the whole cache).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::service::array::source::classify;
use crate::service::node::{ArrayNode, NodePath};
use crate::storage::mount::RecheckPolicy;
use crate::storage::{Mount, StorageError, StoreKey};
use crate::zarr::chunk::ChunkData;
use crate::zarr::codec::array_to_bytes::sharding::ShardIndex;
use crate::zarr::region::{IndexEntry, SourceError, UnitCache};

/// What part of a stored value an entry holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// The whole decoded chunk.
    Chunk,
    /// The shard index.
    Index,
    /// One inner chunk of the shard (coordinates inside the shard).
    Inner(Vec<u64>),
}

/// A cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The mount's name.
    pub mount: Arc<str>,
    /// The full store key in the mount.
    pub key: Arc<str>,
    /// Which part.
    pub part: Part,
}

/// Where a cached value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The storage ETag it was read at; `None`: the key did not exist.
    pub etag: Option<String>,
    /// When that was last confirmed.
    pub checked: Instant,
    /// What it was decoded with: the array's [`ArrayNode::decoding`]. The
    /// same stored bytes decode to other values under other metadata (a
    /// byte order, a codec, a data type changed), so an entry decoded under
    /// another document is not used.
    ///
    /// [`ArrayNode::decoding`]: crate::service::node::ArrayNode::decoding
    pub decoding: u64,
}

impl Version {
    /// Whether a use now must revalidate first under `policy`.
    #[must_use]
    pub fn needs_recheck(&self, policy: RecheckPolicy) -> bool {
        match policy {
            RecheckPolicy::Never => false,
            RecheckPolicy::Always => true,
            RecheckPolicy::After(d) => self.checked.elapsed() >= d,
        }
    }
}

/// A cached value.
#[derive(Debug, Clone)]
pub enum Cached {
    /// A whole chunk (`None`: the key is missing: the fill value).
    Chunk { version: Version, data: Option<Arc<ChunkData>> },
    /// A shard index (`None`: the shard is missing) and its stamp.
    Index { version: Version, stamp: u64, index: Option<Arc<ShardIndex>> },
    /// An inner chunk read through the index with `stamp` (`None`: empty,
    /// the fill value).
    Inner { stamp: u64, data: Option<Arc<ChunkData>> },
}

/// Counters and sizes, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Lookups that found a usable entry.
    pub hits: u64,
    /// Lookups that did not (absent, stale or of another version).
    pub misses: u64,
    /// Entries dropped by invalidation.
    pub invalidations: u64,
    /// Entries held now.
    pub entries: u64,
    /// Their weight in bytes (decoded size plus a small overhead).
    pub bytes: u64,
    /// The budget in bytes.
    pub capacity: u64,
}

/// The cache (see the module documentation).
#[derive(Debug)]
pub struct ChunkCache {
    cache: Option<moka::sync::Cache<CacheKey, Arc<Cached>>>,
    capacity: u64,
    generation: AtomicU64,
    stamps: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    invalidations: AtomicU64,
}

const ENTRY_OVERHEAD: usize = 128;

/// Entries at least this heavy make the cache evict at once
/// ([`ChunkCache::insert`]).
const EVICT_NOW_WEIGHT: u32 = 1 << 20;

fn data_weight(d: &ChunkData) -> usize {
    match d {
        ChunkData::Fixed(b) => b.len(),
        ChunkData::Variable(items) => items.iter().map(|i| i.len() + 24).sum(),
    }
}

fn weight(k: &CacheKey, v: &Arc<Cached>) -> u32 {
    let data = match &**v {
        Cached::Chunk { data, .. } | Cached::Inner { data, .. } => data.as_deref().map_or(0, data_weight),
        Cached::Index { index, .. } => {
            index.as_ref().map_or(0, |i| i.chunks_per_shard().iter().product::<u64>() as usize * 16)
        }
    };
    let w = data + k.key.len() + ENTRY_OVERHEAD;
    u32::try_from(w).unwrap_or(u32::MAX)
}

impl ChunkCache {
    /// A cache of `capacity` bytes (0: nothing is cached, every lookup
    /// misses).
    #[must_use]
    pub fn new(capacity: u64) -> Self {
        let cache = (capacity > 0).then(|| moka::sync::Cache::builder().max_capacity(capacity).weigher(weight).build());
        Self {
            cache,
            capacity,
            generation: AtomicU64::new(0),
            stamps: AtomicU64::new(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
        }
    }

    /// The budget in bytes.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The invalidation counter; note it before reading storage and pass it
    /// to [`ChunkCache::insert`].
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A fresh stamp for a shard index read from storage.
    #[must_use]
    pub fn new_stamp(&self) -> u64 {
        self.stamps.fetch_add(1, Ordering::Relaxed)
    }

    /// The entry for `key`, if any (not yet checked for freshness: the
    /// caller does that and reports with [`ChunkCache::record`]).
    #[must_use]
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Cached>> {
        self.cache.as_ref()?.get(key)
    }

    /// Counts a lookup as a hit or a miss.
    pub fn record(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Stores `value`, unless an invalidation happened since `generation`
    /// was read (then the value may predate a write and is dropped).
    pub fn insert(&self, key: CacheKey, value: Cached, generation: u64) {
        let Some(cache) = &self.cache else { return };
        if self.generation() != generation {
            return;
        }
        let value = Arc::new(value);
        let large = weight(&key, &value) >= EVICT_NOW_WEIGHT;
        cache.insert(key.clone(), value);
        if self.generation() != generation {
            cache.invalidate(&key);
        }
        // moka evicts in housekeeping that runs every so often: large
        // entries inserted quickly would pile up far past the capacity
        // before it runs. After a large one it runs now (its cost is the
        // entries logged since, a few microseconds each).
        if large {
            cache.run_pending_tasks();
        }
    }

    /// Drops what is cached for `key` in `mount`: the whole chunk and the
    /// shard index (which retires the inner chunks read through it).
    pub fn invalidate(&self, mount: &str, key: &str) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let Some(cache) = &self.cache else { return };
        let (mount, key): (Arc<str>, Arc<str>) = (mount.into(), key.into());
        for part in [Part::Chunk, Part::Index] {
            let k = CacheKey { mount: mount.clone(), key: key.clone(), part };
            if cache.remove(&k).is_some() {
                self.invalidations.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The counters and sizes now.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        let (entries, bytes) = self.cache.as_ref().map_or((0, 0), |c| {
            c.run_pending_tasks();
            (c.entry_count(), c.weighted_size())
        });
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            invalidations: self.invalidations.load(Ordering::Relaxed),
            entries,
            bytes,
            capacity: self.capacity,
        }
    }
}

/// One read's view of the cache: the array at `path` in a mount (see the
/// module documentation).
#[derive(Debug)]
pub struct ArrayCache {
    cache: Arc<ChunkCache>,
    mount: Arc<Mount>,
    mount_name: Arc<str>,
    path: NodePath,
    /// The array's [`ArrayNode::decoding`](crate::service::node::ArrayNode::decoding).
    decoding: u64,
    recheck: RecheckPolicy,
    /// Whether decoded data read now may enter the cache (shard indexes
    /// always do: they are small and every later read needs them).
    fill: bool,
    /// Bytes of decoded data this view may still let in (half the cache's
    /// capacity at first); an entry heavier than what is left ends the
    /// view's filling.
    allowance: AtomicU64,
}

impl ArrayCache {
    /// The view of `cache` for `array` in `mount` (named `mount_name`),
    /// revalidating by the mount's recheck policy; `fill`: whether decoded
    /// data may enter it.
    #[must_use]
    pub fn new(cache: Arc<ChunkCache>, mount_name: Arc<str>, array: &ArrayNode, fill: bool) -> Self {
        let mount = array.mount.clone();
        let recheck = mount.recheck_policy();
        let allowance = AtomicU64::new(if fill { cache.capacity() / 2 } else { 0 });
        Self { cache, mount, mount_name, path: array.path.clone(), decoding: array.decoding, recheck, fill, allowance }
    }

    /// Takes `data`'s weight from the allowance: `false` (and no more
    /// filling by this view) when it does not fit in what is left.
    fn admit(&self, data: Option<&ChunkData>) -> bool {
        let w = data.map_or(0, data_weight) as u64 + ENTRY_OVERHEAD as u64;
        let taken = self.allowance.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(w));
        if taken.is_err() {
            self.allowance.store(0, Ordering::Relaxed);
        }
        taken.is_ok()
    }

    /// The shared cache.
    #[must_use]
    pub fn cache(&self) -> &Arc<ChunkCache> {
        &self.cache
    }

    fn store_key(&self, rel: &str) -> Option<StoreKey> {
        self.path.key(rel).ok()
    }

    fn cache_key(&self, key: &StoreKey, part: Part) -> CacheKey {
        CacheKey { mount: self.mount_name.clone(), key: key.as_str().into(), part }
    }

    /// The current ETag of `key` (`None`: missing).
    async fn etag(&self, key: &StoreKey) -> Result<Option<String>, SourceError> {
        match self.mount.storage().head(key).await {
            Ok(meta) => Ok(Some(meta.etag)),
            Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    /// Whether the cached `version` of `key` may be used now (revalidating
    /// by ETag when the policy asks).
    async fn usable(&self, key: &StoreKey, version: &Version) -> Result<bool, SourceError> {
        if version.decoding != self.decoding {
            return Ok(false);
        }
        if !version.needs_recheck(self.recheck) {
            return Ok(true);
        }
        Ok(self.etag(key).await? == version.etag)
    }
}

#[async_trait]
impl UnitCache for ArrayCache {
    async fn chunk(&self, key: &str) -> Result<Option<Option<Arc<ChunkData>>>, SourceError> {
        let Some(sk) = self.store_key(key) else { return Ok(None) };
        let ck = self.cache_key(&sk, Part::Chunk);
        if let Some(entry) = self.cache.get(&ck) {
            if let Cached::Chunk { version, data } = &*entry {
                let g = self.cache.generation();
                if self.usable(&sk, version).await? {
                    self.cache.record(true);
                    if version.needs_recheck(self.recheck) {
                        // Confirmed: stored again with the new check time.
                        let version = Version { checked: Instant::now(), ..version.clone() };
                        self.cache.insert(ck, Cached::Chunk { version, data: data.clone() }, g);
                    }
                    return Ok(Some(data.clone()));
                }
            }
        }
        self.cache.record(false);
        Ok(None)
    }

    fn ticket(&self) -> u64 {
        self.cache.generation()
    }

    fn keeps_units(&self) -> bool {
        self.fill && self.cache.capacity() > 0
    }

    fn insert_chunk(&self, key: &str, version: Option<String>, data: Option<Arc<ChunkData>>, ticket: u64) {
        if !self.fill || !self.admit(data.as_deref()) {
            return;
        }
        let Some(sk) = self.store_key(key) else { return };
        let version = Version { etag: version, checked: Instant::now(), decoding: self.decoding };
        self.cache.insert(self.cache_key(&sk, Part::Chunk), Cached::Chunk { version, data }, ticket);
    }

    async fn index(&self, key: &str) -> Result<Option<IndexEntry>, SourceError> {
        let Some(sk) = self.store_key(key) else { return Ok(None) };
        let ck = self.cache_key(&sk, Part::Index);
        if let Some(entry) = self.cache.get(&ck) {
            if let Cached::Index { version, stamp, index } = &*entry {
                let g = self.cache.generation();
                if self.usable(&sk, version).await? {
                    if version.needs_recheck(self.recheck) {
                        let v = Version { checked: Instant::now(), ..version.clone() };
                        self.cache.insert(ck, Cached::Index { version: v, stamp: *stamp, index: index.clone() }, g);
                    }
                    return Ok(Some(IndexEntry { version: version.etag.clone(), stamp: *stamp, index: index.clone() }));
                }
            }
        }
        Ok(None)
    }

    fn insert_index(&self, key: &str, version: Option<String>, index: Option<Arc<ShardIndex>>, ticket: u64) -> u64 {
        let stamp = self.cache.new_stamp();
        if let Some(sk) = self.store_key(key) {
            let version = Version { etag: version, checked: Instant::now(), decoding: self.decoding };
            self.cache.insert(self.cache_key(&sk, Part::Index), Cached::Index { version, stamp, index }, ticket);
        }
        stamp
    }

    fn inner(&self, key: &str, inner: &[u64], stamp: u64) -> Option<Arc<ChunkData>> {
        let sk = self.store_key(key)?;
        if let Some(entry) = self.cache.get(&self.cache_key(&sk, Part::Inner(inner.to_vec()))) {
            if let Cached::Inner { stamp: s, data: Some(data) } = &*entry {
                if *s == stamp {
                    self.cache.record(true);
                    return Some(data.clone());
                }
            }
        }
        self.cache.record(false);
        None
    }

    fn insert_inner(&self, key: &str, inner: Vec<u64>, stamp: u64, data: Arc<ChunkData>, ticket: u64) {
        if !self.fill || !self.admit(Some(&data)) {
            return;
        }
        let Some(sk) = self.store_key(key) else { return };
        self.cache.insert(self.cache_key(&sk, Part::Inner(inner)), Cached::Inner { stamp, data: Some(data) }, ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str, part: Part) -> CacheKey {
        CacheKey { mount: "m".into(), key: k.into(), part }
    }

    fn chunk(bytes: usize) -> Cached {
        Cached::Chunk {
            version: Version { etag: Some("\"1\"".into()), checked: Instant::now(), decoding: 0 },
            data: Some(Arc::new(ChunkData::Fixed(vec![7; bytes]))),
        }
    }

    #[test]
    fn invalidation_removes_the_chunk_and_index_and_blocks_racing_inserts() {
        let c = ChunkCache::new(1 << 20);
        let g = c.generation();
        c.insert(key("a/c/0", Part::Chunk), chunk(100), g);
        assert!(c.get(&key("a/c/0", Part::Chunk)).is_some());
        let before = c.generation();
        c.invalidate("m", "a/c/0");
        assert!(c.get(&key("a/c/0", Part::Chunk)).is_none());
        // A reader that started before the invalidation cannot insert.
        c.insert(key("a/c/0", Part::Chunk), chunk(100), before);
        assert!(c.get(&key("a/c/0", Part::Chunk)).is_none());
        let s = c.stats();
        assert_eq!(s.invalidations, 1);
        assert_eq!(s.entries, 0);
    }

    #[test]
    fn bounded_by_bytes_and_counts() {
        let c = ChunkCache::new(10_000);
        for i in 0..50 {
            c.insert(key(&format!("k{i}"), Part::Chunk), chunk(1000), c.generation());
        }
        let s = c.stats();
        assert!(s.bytes <= 10_000, "{s:?}");
        assert!(s.entries < 50, "{s:?}");
        c.record(true);
        c.record(false);
        c.record(false);
        let s = c.stats();
        assert_eq!((s.hits, s.misses), (1, 2));
        let off = ChunkCache::new(0);
        off.insert(key("x", Part::Chunk), chunk(1), off.generation());
        assert!(off.get(&key("x", Part::Chunk)).is_none());
    }

    #[test]
    fn recheck_policies() {
        let v = Version { etag: None, checked: Instant::now(), decoding: 0 };
        assert!(!v.needs_recheck(RecheckPolicy::Never));
        assert!(v.needs_recheck(RecheckPolicy::Always));
        assert!(!v.needs_recheck(RecheckPolicy::After(std::time::Duration::from_secs(60))));
        assert!(v.needs_recheck(RecheckPolicy::After(std::time::Duration::ZERO)));
    }
}
