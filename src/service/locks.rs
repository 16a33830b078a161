//! Write locking, per mount (DESIGN.md, "Behaviour that users rely on").
//!
//! Two kinds of lock, always taken in this order:
//!
//! 1. **Node locks**, one reader-writer lock per array or group path that
//!    someone is currently writing. Slice writes and raw key writes take it
//!    shared, so they run in parallel; resize, attribute updates, overwrite
//!    and delete take it exclusive. A raw key PUT does not know which array
//!    its key belongs to, so it takes shared every node lock that exists for
//!    one of its parent paths ([`MountLocks::raw_key`]); node locks live only
//!    while someone holds them, so that lookup is a walk over a small map.
//! 2. **Key locks**, striped by key hash: a read-modify-write of a chunk (or
//!    shard) holds its key's stripe across the read and the write, and a raw
//!    key PUT holds the same stripe, so no update is lost in this process.
//!    Stripes are taken in ascending order, never twice, so a writer holding
//!    many keys cannot deadlock with another. Two keys sharing a stripe only
//!    serialise; with [`STRIPES`] stripes that is rare.
//!
//! Across processes, conditional puts (ETags) protect read-modify-write
//! where the store supports them; these locks are per process.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// How many key stripes a mount has.
pub const STRIPES: usize = 1024;

/// The locks of one mount.
#[derive(Debug)]
pub struct MountLocks {
    stripes: Vec<Arc<AsyncMutex<()>>>,
    nodes: Mutex<HashMap<String, Weak<RwLock<()>>>>,
}

impl Default for MountLocks {
    fn default() -> Self {
        Self { stripes: (0..STRIPES).map(|_| Arc::new(AsyncMutex::new(()))).collect(), nodes: Mutex::default() }
    }
}

/// Held while writing keys of a node: the node lock (shared) and the key
/// stripes. Dropping it releases everything.
#[derive(Debug)]
pub struct WriteGuard {
    _nodes: Vec<OwnedRwLockReadGuard<()>>,
    _whole: Option<OwnedRwLockWriteGuard<()>>,
    _stripes: Vec<OwnedMutexGuard<()>>,
}

/// Held while changing a node as a whole (resize, attributes, delete).
#[derive(Debug)]
pub struct ExclusiveGuard {
    _parents: Vec<OwnedRwLockReadGuard<()>>,
    _node: OwnedRwLockWriteGuard<()>,
}

fn stripe_of(key: &str) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    // Only the low bits pick a stripe.
    #[allow(clippy::cast_possible_truncation)]
    let i = (h.finish() as usize) % STRIPES;
    i
}

impl MountLocks {
    fn node(&self, path: &str) -> Arc<RwLock<()>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lock) = nodes.get(path).and_then(Weak::upgrade) {
            return lock;
        }
        // Forget locks nobody holds any more, so the map stays small.
        nodes.retain(|_, w| w.strong_count() > 0);
        let lock = Arc::new(RwLock::new(()));
        nodes.insert(path.to_string(), Arc::downgrade(&lock));
        lock
    }

    /// The node locks that exist for `key`'s parent paths (`a/b/c` →
    /// `a/b`, `a`, `""`), innermost first; none for the root (`""`).
    fn existing_parents(&self, key: &str) -> Vec<Arc<RwLock<()>>> {
        let nodes = self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Vec::new();
        if key.is_empty() {
            // The mount's root has no parent.
            return out;
        }
        let mut path = key;
        loop {
            path = path.rsplit_once('/').map_or("", |(p, _)| p);
            if let Some(lock) = nodes.get(path).and_then(Weak::upgrade) {
                out.push(lock);
            }
            if path.is_empty() {
                break;
            }
        }
        out
    }

    async fn stripes(&self, keys: &[&str]) -> Vec<OwnedMutexGuard<()>> {
        let mut idx: Vec<usize> = keys.iter().map(|k| stripe_of(k)).collect();
        idx.sort_unstable();
        idx.dedup();
        let mut guards = Vec::with_capacity(idx.len());
        for i in idx {
            guards.push(self.stripes[i].clone().lock_owned().await);
        }
        guards
    }

    /// The node locks that exist for the paths strictly below `path`.
    fn existing_below(&self, path: &str) -> Vec<Arc<RwLock<()>>> {
        let nodes = self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes
            .iter()
            .filter(|(p, _)| if path.is_empty() { !p.is_empty() } else { is_below(p, path) })
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    /// Takes, shared, the node locks that exist for `path`'s parents,
    /// outermost first, then what `own` takes (the node's own lock, as its
    /// caller says; nothing for a raw key), then the stripes of `keys`; again from the start when
    /// a parent's lock was made meanwhile (a delete or resize of a parent
    /// began: its holder waits for writers below it that hold their own
    /// lock, so the writer lets go and queues behind it). So a recursive
    /// delete of a group keeps out writes to every node in it, not only
    /// to the group's own keys (a black-box attack: slice writes to `G/A`
    /// during a delete of `G` stored chunks after the delete's listing,
    /// and they were found again under a new `G/A`).
    async fn with_parents<G, F, Fut>(
        &self,
        path: &str,
        keys: &[&str],
        own: F,
    ) -> (Vec<OwnedRwLockReadGuard<()>>, G, Vec<OwnedMutexGuard<()>>)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = G>,
    {
        loop {
            let parents = self.existing_parents(path);
            let mut held = Vec::with_capacity(parents.len());
            // `existing_parents` answers innermost first.
            for lock in parents.iter().rev() {
                held.push(lock.clone().read_owned().await);
            }
            let guard = own().await;
            let stripes = self.stripes(keys).await;
            let now = self.existing_parents(path);
            if now.iter().all(|l| parents.iter().any(|p| Arc::ptr_eq(p, l))) {
                return (held, guard, stripes);
            }
        }
    }

    /// Locks `keys` (full store keys) of the node at `node_path` for a
    /// read-modify-write: the node's parents' locks and its own shared,
    /// then the keys' stripes.
    pub async fn write_keys(&self, node_path: &str, keys: &[&str]) -> WriteGuard {
        let (mut nodes, own, stripes) = self.with_parents(node_path, keys, || self.node(node_path).read_owned()).await;
        nodes.push(own);
        WriteGuard { _nodes: nodes, _whole: None, _stripes: stripes }
    }

    /// Locks every key of the node at `node_path`, for a write that
    /// touches at least [`STRIPES`] chunks (cheaper than listing its
    /// keys): its parents' locks shared and its node lock exclusive, which
    /// every other writer of its keys (slice writes, raw key writes) holds
    /// shared. The stripes, shared by every array of the mount, stay free:
    /// writes to other arrays go on.
    pub async fn write_all_keys(&self, node_path: &str) -> WriteGuard {
        let (nodes, own, _) = self.with_parents(node_path, &[], || self.node(node_path).write_owned()).await;
        self.drain_stripes().await;
        WriteGuard { _nodes: nodes, _whole: Some(own), _stripes: Vec::new() }
    }

    /// Waits for every key write already holding a stripe to end (each
    /// stripe taken and let go in turn). Called with a node lock held
    /// exclusive: a raw key write that looked for its parents' node locks
    /// before that lock existed holds only its stripe; it ends first, and
    /// one that takes its stripe later finds the node lock ([`Self::raw_key`]).
    async fn drain_stripes(&self) {
        for s in &self.stripes {
            drop(s.lock().await);
        }
    }

    /// Locks one key for a raw store write: shared on every node lock held
    /// for a parent path, then the key's stripe.
    pub async fn raw_key(&self, key: &str) -> WriteGuard {
        // A node lock made for a parent meanwhile (an exclusive writer
        // draining the stripes): let go, and take it shared first.
        let (nodes, (), stripes) = self.with_parents(key, &[key], || async {}).await;
        WriteGuard { _nodes: nodes, _whole: None, _stripes: stripes }
    }

    /// Locks the node at `node_path` exclusively (its parents' locks
    /// shared): waits for every writer of its keys and of the nodes below
    /// it to finish and keeps new ones out.
    pub async fn exclusive(&self, node_path: &str) -> ExclusiveGuard {
        let (parents, node, _) = self.with_parents(node_path, &[], || self.node(node_path).write_owned()).await;
        self.drain_stripes().await;
        // Writers below that took their own lock before this one existed
        // (they hold no lock of this node): each ends, or finds this lock
        // when it checks its parents again and lets go.
        for lock in self.existing_below(node_path) {
            drop(lock.write_owned().await);
        }
        ExclusiveGuard { _parents: parents, _node: node }
    }
}

/// Whether `path` is strictly below `parent` (`a/b` is below `a`, `ab` is not).
fn is_below(path: &str, parent: &str) -> bool {
    path.len() > parent.len() && path.starts_with(parent) && path.as_bytes()[parent.len()] == b'/'
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn same_key_serialises_and_disjoint_keys_do_not() {
        let locks = Arc::new(MountLocks::default());
        let g = locks.write_keys("a", &["a/c/0"]).await;
        // The same key: must wait.
        let l2 = locks.clone();
        let waiting = tokio::spawn(async move { l2.write_keys("a", &["a/c/0", "a/c/1"]).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a second writer of a/c/0 must wait");
        // A raw write of another key (almost surely another stripe) goes through.
        let other = (0..100).map(|i| format!("a/c/x{i}")).find(|k| stripe_of(k) != stripe_of("a/c/0")).unwrap();
        tokio::time::timeout(Duration::from_secs(1), locks.raw_key(&other)).await.expect("disjoint key is free");
        drop(g);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.expect("released").unwrap();
    }

    #[tokio::test]
    async fn exclusive_waits_for_writers_including_raw_key_writes() {
        let locks = Arc::new(MountLocks::default());
        let held = locks.write_keys("arr", &["arr/c/0"]).await;
        let raw = locks.raw_key("arr/c/5").await; // takes arr's node lock shared
        let l2 = locks.clone();
        let excl = tokio::spawn(async move {
            let _g = l2.exclusive("arr").await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!excl.is_finished());
        drop(held);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!excl.is_finished(), "the raw key writer still holds arr shared");
        drop(raw);
        tokio::time::timeout(Duration::from_secs(1), excl).await.expect("exclusive acquired").unwrap();
    }

    #[tokio::test]
    async fn a_write_of_every_key_holds_its_array_only() {
        let locks = Arc::new(MountLocks::default());
        let all = locks.write_all_keys("big").await;
        // Other arrays' writes, slice and raw, go through (round 12, a black-box attack: every
        // stripe of the mount was taken, and writes to every array waited seconds).
        let quick = Duration::from_secs(1);
        drop(tokio::time::timeout(quick, locks.write_keys("other", &["other/c/0"])).await.expect("another array"));
        drop(tokio::time::timeout(quick, locks.raw_key("other/c/1")).await.expect("another array's raw key"));
        // Its own keys wait, slice and raw.
        let (l2, l3) = (locks.clone(), locks.clone());
        let slice = tokio::spawn(async move { drop(l2.write_keys("big", &["big/c/0"]).await) });
        let raw = tokio::spawn(async move { drop(l3.raw_key("big/c/7").await) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!slice.is_finished() && !raw.is_finished(), "writers of big's keys must wait");
        drop(all);
        tokio::time::timeout(quick, slice).await.expect("released").unwrap();
        tokio::time::timeout(quick, raw).await.expect("released").unwrap();
    }

    #[tokio::test]
    async fn a_whole_array_writer_waits_for_raw_writes_begun_before_its_lock() {
        let locks = Arc::new(MountLocks::default());
        // No node lock exists for `big` yet: this raw write holds only its stripe.
        let raw = locks.raw_key("big/c/3").await;
        let l2 = locks.clone();
        let all = tokio::spawn(async move { drop(l2.write_all_keys("big").await) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!all.is_finished(), "the whole-array writer must wait for the raw write");
        drop(raw);
        tokio::time::timeout(Duration::from_secs(1), all).await.expect("released").unwrap();
    }

    /// A node's exclusive lock (a recursive delete, a resize) keeps out
    /// writers of every node below it, those that began before it included
    /// (a black-box attack: slice writes to `G/A` went on during a
    /// recursive delete of `G`).
    #[tokio::test]
    async fn a_parents_exclusive_lock_keeps_out_writers_below_it() {
        let quick = Duration::from_millis(50);
        let locks = Arc::new(MountLocks::default());
        // A writer of G/A that began before G's lock existed: the delete waits for it.
        let early = locks.write_keys("G/A", &["G/A/c/0"]).await;
        let l2 = locks.clone();
        let delete = tokio::spawn(async move { l2.exclusive("G").await });
        tokio::time::sleep(quick).await;
        assert!(!delete.is_finished(), "the delete of G must wait for the writer of G/A");
        drop(early);
        let held = tokio::time::timeout(Duration::from_secs(1), delete).await.expect("acquired").unwrap();
        // While it is held, writers below G wait: slice, whole-array, raw keys, resizes, deeper nodes.
        let (a, b, c, d, e) = (locks.clone(), locks.clone(), locks.clone(), locks.clone(), locks.clone());
        let waiting = [
            tokio::spawn(async move { drop(a.write_keys("G/A", &["G/A/c/1"]).await) }),
            tokio::spawn(async move { drop(b.write_all_keys("G/A").await) }),
            tokio::spawn(async move { drop(c.raw_key("G/A/c/2").await) }),
            tokio::spawn(async move { drop(d.exclusive("G/A").await) }),
            tokio::spawn(async move { drop(e.write_keys("G/x/y", &["G/x/y/c/0"]).await) }),
        ];
        tokio::time::sleep(quick).await;
        assert!(waiting.iter().all(|w| !w.is_finished()), "writers below G must wait");
        // Others go on: a sibling whose name starts the same, the root's own keys.
        drop(tokio::time::timeout(quick, locks.write_keys("GA", &["GA/c/0"])).await.expect("GA is not below G"));
        drop(tokio::time::timeout(quick, locks.write_keys("", &["zarr.json"])).await.expect("the root"));
        drop(held);
        for w in waiting {
            tokio::time::timeout(Duration::from_secs(1), w).await.expect("released").unwrap();
        }
        // The root's exclusive lock waits for writers anywhere, and takes no lock of its own twice.
        let w = locks.write_keys("x/y", &["x/y/c/0"]).await;
        let l3 = locks.clone();
        let root = tokio::spawn(async move { drop(l3.exclusive("").await) });
        tokio::time::sleep(quick).await;
        assert!(!root.is_finished());
        drop(w);
        tokio::time::timeout(Duration::from_secs(1), root).await.expect("root acquired").unwrap();
    }

    #[tokio::test]
    async fn node_map_forgets_unheld_locks() {
        let locks = MountLocks::default();
        for i in 0..100 {
            let _g = locks.exclusive(&format!("n{i}")).await;
        }
        let _g = locks.exclusive("last").await;
        assert!(locks.nodes.lock().unwrap().len() <= 2);
    }
}
