//! A [`Storage`] wrapper that injects faults, for tests: errors
//! (unavailable, timeout, a reply lost after the operation took effect),
//! latency, and short reads, at chosen keys (by prefix) and operations, on
//! every call or at a seeded, deterministic rate. The plan
//! ([`FaultPlan`]) is shared and can be changed while a server runs.
//!
//! ```
//! use std::sync::Arc;
//! use zarrd::metrics::StorageOp;
//! use zarrd::storage::fault::{Fault, FaultPlan, FaultRule, Faulty};
//! use zarrd::storage::object::ObjectBackend;
//!
//! let inner = ObjectBackend::new(Arc::new(object_store::memory::InMemory::new()), "").unwrap();
//! let plan = FaultPlan::seeded(7);
//! let storage = Faulty::new(Arc::new(inner), Arc::clone(&plan));
//! // Half the chunk reads below `arr/c/` fail as if the backend were down.
//! plan.set(vec![FaultRule::new(Fault::Unavailable).ops(&[StorageOp::Read]).prefix("arr/c/").rate(0.5)]);
//! plan.clear(); // healthy again
//! # let _ = storage;
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    KeyPrefix, ListEntry, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, Storage, StorageError,
    StorageResult, StoreKey,
};
use crate::metrics::StorageOp;

/// What an injected fault does.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Fails at once as an unreachable backend would; nothing happens.
    Unavailable,
    /// Waits, then fails as a timed-out call would; nothing happens.
    Timeout(Duration),
    /// Delays the call, which then runs normally.
    Latency(Duration),
    /// Runs the call, then reports it failed (a reply lost on the way back:
    /// the write or delete did take effect).
    LostReply,
    /// Returns at most this many bytes of a read's body (a truncated
    /// transfer); other operations run normally.
    ShortRead(usize),
}

/// When and where a fault is injected.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// The fault.
    pub fault: Fault,
    /// The operations it applies to; empty: all.
    pub ops: Vec<StorageOp>,
    /// Keys (or listed prefixes) starting with this; empty: all.
    pub prefix: String,
    /// The share of matching calls that get the fault, 0 to 1.
    pub rate: f64,
}

impl FaultRule {
    /// A rule injecting `fault` into every call.
    #[must_use]
    pub fn new(fault: Fault) -> Self {
        Self { fault, ops: Vec::new(), prefix: String::new(), rate: 1.0 }
    }

    /// Only for these operations.
    #[must_use]
    pub fn ops(mut self, ops: &[StorageOp]) -> Self {
        self.ops = ops.to_vec();
        self
    }

    /// Only for keys starting with `prefix`.
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    /// Only for this share of the matching calls (drawn from the plan's
    /// seeded generator).
    #[must_use]
    pub fn rate(mut self, rate: f64) -> Self {
        self.rate = rate.clamp(0.0, 1.0);
        self
    }

    fn matches(&self, op: StorageOp, key: &str) -> bool {
        (self.ops.is_empty() || self.ops.contains(&op)) && key.starts_with(&self.prefix)
    }
}

#[derive(Debug)]
struct State {
    rules: Vec<FaultRule>,
    rng: u64,
}

/// The faults to inject, shared between the test and the wrapper.
#[derive(Debug)]
pub struct FaultPlan {
    state: Mutex<State>,
    injected: AtomicU64,
}

impl FaultPlan {
    /// An empty plan whose rates draw from a generator seeded with `seed`
    /// (the same seed and the same sequence of calls inject the same faults).
    #[must_use]
    pub fn seeded(seed: u64) -> Arc<Self> {
        // xorshift must not start at zero.
        let rng = seed ^ 0x9E37_79B9_7F4A_7C15;
        Arc::new(Self { state: Mutex::new(State { rules: Vec::new(), rng: rng.max(1) }), injected: AtomicU64::new(0) })
    }

    /// Replaces the rules (the first matching rule of a call applies).
    pub fn set(&self, rules: Vec<FaultRule>) {
        self.lock().rules = rules;
    }

    /// Removes every rule: the backend is healthy again.
    pub fn clear(&self) {
        self.set(Vec::new());
    }

    /// Faults injected so far.
    #[must_use]
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fault for this call, if any.
    fn draw(&self, op: StorageOp, key: &str) -> Option<Fault> {
        let mut state = self.lock();
        let rule = state.rules.iter().find(|r| r.matches(op, key))?.clone();
        if rule.rate < 1.0 {
            // xorshift64*: deterministic for a seed, good enough for rates.
            let mut x = state.rng;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            state.rng = x;
            #[allow(clippy::cast_precision_loss)]
            let unit = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
            if unit >= rule.rate {
                return None;
            }
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(rule.fault)
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct Faulty {
    inner: Arc<dyn Storage>,
    plan: Arc<FaultPlan>,
}

impl Faulty {
    /// Wraps `inner`, injecting what `plan` says.
    #[must_use]
    pub fn new(inner: Arc<dyn Storage>, plan: Arc<FaultPlan>) -> Self {
        Self { inner, plan }
    }

    /// Applies the fault chosen for a call before it runs: `Err` ends the
    /// call; `Ok` carries what to do after it.
    async fn before(&self, op: StorageOp, key: &str) -> StorageResult<Option<Fault>> {
        match self.plan.draw(op, key) {
            None => Ok(None),
            Some(Fault::Unavailable) => {
                Err(StorageError::Unavailable { reason: format!("injected fault: {} {key}", op.as_str()) })
            }
            Some(Fault::Timeout(wait)) => {
                tokio::time::sleep(wait).await;
                Err(StorageError::Timeout {
                    reason: format!("injected fault: {} {key} timed out after {wait:?}", op.as_str()),
                })
            }
            Some(Fault::Latency(wait)) => {
                tokio::time::sleep(wait).await;
                Ok(None)
            }
            Some(after) => Ok(Some(after)),
        }
    }

    fn after<T>(op: StorageOp, key: &str, fault: Option<&Fault>, result: StorageResult<T>) -> StorageResult<T> {
        match (fault, result) {
            (Some(Fault::LostReply), Ok(_)) => Err(StorageError::Unavailable {
                reason: format!("injected fault: the reply to {} {key} was lost", op.as_str()),
            }),
            (_, result) => result,
        }
    }
}

#[async_trait]
impl Storage for Faulty {
    async fn read(&self, key: &StoreKey, request: &ReadRequest) -> StorageResult<ReadOutcome> {
        let fault = self.before(StorageOp::Read, key.as_str()).await?;
        let result = self.inner.read(key, request).await;
        match (&fault, result) {
            (Some(Fault::ShortRead(keep)), Ok(mut out)) => {
                out.body = out.body.slice(..(*keep).min(out.body.len()));
                out.tail = None;
                Ok(out)
            }
            (_, result) => Self::after(StorageOp::Read, key.as_str(), fault.as_ref(), result),
        }
    }

    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        let fault = self.before(StorageOp::Head, key.as_str()).await?;
        Self::after(StorageOp::Head, key.as_str(), fault.as_ref(), self.inner.head(key).await)
    }

    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        let fault = self.before(StorageOp::Put, key.as_str()).await?;
        Self::after(StorageOp::Put, key.as_str(), fault.as_ref(), self.inner.put(key, body, condition).await)
    }

    async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
        let fault = self.before(StorageOp::Delete, key.as_str()).await?;
        Self::after(StorageOp::Delete, key.as_str(), fault.as_ref(), self.inner.delete(key).await)
    }

    async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>> {
        let fault = self.before(StorageOp::List, prefix.as_str()).await?;
        Self::after(StorageOp::List, prefix.as_str(), fault.as_ref(), self.inner.list(prefix).await)
    }

    async fn list_limited(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListEntry>, bool)> {
        let fault = self.before(StorageOp::List, prefix.as_str()).await?;
        Self::after(StorageOp::List, prefix.as_str(), fault.as_ref(), self.inner.list_limited(prefix, limit).await)
    }

    async fn list_names_limited(
        &self,
        prefix: &KeyPrefix,
        limit: usize,
    ) -> StorageResult<(Vec<super::ListName>, bool)> {
        let fault = self.before(StorageOp::List, prefix.as_str()).await?;
        let result = self.inner.list_names_limited(prefix, limit).await;
        Self::after(StorageOp::List, prefix.as_str(), fault.as_ref(), result)
    }

    async fn list_recursive(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>> {
        let fault = self.before(StorageOp::ListRecursive, prefix.as_str()).await?;
        let result = self.inner.list_recursive(prefix, limit).await;
        Self::after(StorageOp::ListRecursive, prefix.as_str(), fault.as_ref(), result)
    }

    async fn visit_recursive(&self, prefix: &KeyPrefix, visit: super::Visitor) -> StorageResult<super::Visitor> {
        let fault = self.before(StorageOp::ListRecursive, prefix.as_str()).await?;
        let result = self.inner.visit_recursive(prefix, visit).await;
        Self::after(StorageOp::ListRecursive, prefix.as_str(), fault.as_ref(), result)
    }

    async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool> {
        let fault = self.before(StorageOp::IsPrefix, key.as_str()).await?;
        Self::after(StorageOp::IsPrefix, key.as_str(), fault.as_ref(), self.inner.is_prefix(key).await)
    }

    async fn probe(&self) -> StorageResult<()> {
        let fault = self.before(StorageOp::Probe, "").await?;
        Self::after(StorageOp::Probe, "", fault.as_ref(), self.inner.probe().await)
    }

    fn cache_usage(&self) -> Option<super::CacheUsage> {
        self.inner.cache_usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::object::ObjectBackend;

    fn memory() -> Arc<dyn Storage> {
        Arc::new(ObjectBackend::new(Arc::new(object_store::memory::InMemory::new()), "").unwrap())
    }

    #[tokio::test]
    async fn faults_hit_only_their_keys_and_operations_and_can_be_cleared() {
        let plan = FaultPlan::seeded(1);
        let s = Faulty::new(memory(), Arc::clone(&plan));
        let (a, b) = (StoreKey::new("a/x").unwrap(), StoreKey::new("b/x").unwrap());
        s.put(&a, Bytes::from_static(b"0123456789"), &PutCondition::None).await.unwrap();
        plan.set(vec![FaultRule::new(Fault::Unavailable).ops(&[StorageOp::Put]).prefix("b/")]);
        assert!(matches!(s.put(&b, Bytes::new(), &PutCondition::None).await, Err(StorageError::Unavailable { .. })));
        assert!(s.put(&a, Bytes::from_static(b"0123456789"), &PutCondition::None).await.is_ok());
        assert!(matches!(s.read(&b, &ReadRequest::default()).await, Err(StorageError::NotFound { .. })));
        plan.set(vec![FaultRule::new(Fault::ShortRead(3))]);
        assert_eq!(s.read(&a, &ReadRequest::default()).await.unwrap().body.len(), 3);
        plan.set(vec![FaultRule::new(Fault::LostReply).ops(&[StorageOp::Put])]);
        assert!(s.put(&b, Bytes::from_static(b"late"), &PutCondition::None).await.is_err());
        plan.set(vec![FaultRule::new(Fault::Timeout(Duration::from_millis(1)))]);
        assert!(matches!(s.head(&a).await, Err(StorageError::Timeout { .. })));
        plan.clear();
        // The lost reply's write took effect.
        assert_eq!(&s.read(&b, &ReadRequest::default()).await.unwrap().body[..], b"late");
        assert_eq!(plan.injected(), 4);
    }

    #[tokio::test]
    async fn rates_are_deterministic_for_a_seed() {
        async fn pattern(seed: u64) -> Vec<bool> {
            let plan = FaultPlan::seeded(seed);
            let s = Faulty::new(memory(), Arc::clone(&plan));
            plan.set(vec![FaultRule::new(Fault::Unavailable).rate(0.3)]);
            let key = StoreKey::new("k").unwrap();
            let mut out = Vec::new();
            for _ in 0..200 {
                out.push(matches!(s.head(&key).await, Err(StorageError::Unavailable { .. })));
            }
            out
        }
        let (a, b, c) = (pattern(5).await, pattern(5).await, pattern(6).await);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let failed = a.iter().filter(|f| **f).count();
        assert!((30..90).contains(&failed), "{failed} of 200 at rate 0.3");
    }
}
