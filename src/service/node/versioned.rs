//! Conditional metadata rewrites: how a read-modify-write of metadata
//! documents (an attribute merge, a resize, a consolidation, a create and
//! its parent groups, a delete dropping a node from consolidated metadata)
//! stays correct when several zarrd processes share one store.
//!
//! Inside one process the node's exclusive lock serialises these
//! operations; across processes only the store can. So every document an
//! operation rewrites is written on the condition that it is still the
//! version the operation read ([`Versions`]: `If-Match` with the ETag read,
//! `If-None-Match: *` for a document that was absent), and when another
//! process changed it in between the whole operation starts again from a
//! fresh read ([`retry`]), a bounded number of times with jittered
//! exponential pauses, then fails with [`ServiceError::WriteConflict`] (503
//! `write_conflict`, `Retry-After`) naming the document.
//!
//! How much the store guarantees depends on the backend: S3, GCS, Azure and
//! memory apply the condition atomically (`object_store`'s
//! `PutMode::Update` / `PutMode::Create`); a local directory creates
//! without replacing and checks `If-Match` again under its directory's
//! `flock` ([`crate::storage::local`]).

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use super::Validator;
use crate::service::{ServiceError, ServiceResult};
use crate::storage::{PutCondition, StorageError, StoreKey};

/// How many times a metadata read-modify-write runs before it gives up.
pub const MAX_ATTEMPTS: u32 = 12;

/// The first pause after a lost conditional write; it doubles per attempt
/// (the actual pause is a random share of it) up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(2);

/// The longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// The documents an operation read, each with the version it had: the
/// conditions its rewrites are made on.
#[derive(Debug, Clone, Default)]
pub struct Versions(Vec<Validator>);

impl Versions {
    /// The versions `load` reported (every document key it looked at).
    #[must_use]
    pub fn new(read: Vec<Validator>) -> Self {
        Self(read)
    }

    /// Records the version of another key read (`None`: absent).
    pub fn record(&mut self, key: StoreKey, etag: Option<String>) {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, etag));
    }

    /// The condition a rewrite of `key` is made on: the version read, or
    /// absence for a document that was not there. A key that was not read
    /// at all must be absent too: nothing is overwritten blind.
    #[must_use]
    pub fn condition(&self, key: &StoreKey) -> PutCondition {
        match self.0.iter().find(|(k, _)| k == key) {
            Some((_, Some(etag))) => PutCondition::IfMatch(vec![etag.clone()]),
            Some((_, None)) | None => PutCondition::IfAbsent,
        }
    }
}

/// True when `e` says a conditional write lost to another writer (or to
/// itself: a write that landed but whose answer was lost, retried by the
/// storage client).
#[must_use]
pub fn is_lost_race(e: &ServiceError) -> bool {
    lost_race(e).is_some()
}

/// The key of the document whose conditional write lost, if `e` says so.
fn lost_race(e: &ServiceError) -> Option<&str> {
    match e {
        ServiceError::Storage(
            StorageError::PreconditionFailed { key, .. } | StorageError::AlreadyExists { key, .. },
        ) => Some(key),
        _ => None,
    }
}

/// A random share of the pause before attempt `attempt + 1` (full jitter,
/// so processes that collided do not collide again in step).
fn pause(attempt: u32) -> Duration {
    let cap = FIRST_PAUSE.saturating_mul(1 << attempt.min(16)).min(MAX_PAUSE);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    let cap_us = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(h.finish() % cap_us)
}

/// Runs `op` (one whole read-modify-write, reading fresh documents each
/// time) until none of its conditional writes loses to another writer, at
/// most [`MAX_ATTEMPTS`] times.
///
/// # Errors
/// `op`'s own errors; [`ServiceError::WriteConflict`] naming the document
/// when every attempt lost its conditional write.
pub async fn retry<T, F, Fut>(mut op: F) -> ServiceResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ServiceResult<T>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Err(e) => {
                let Some(key) = lost_race(&e) else { return Err(e) };
                attempt += 1;
                if attempt >= MAX_ATTEMPTS {
                    return Err(ServiceError::WriteConflict {
                        key: key.to_string(),
                        reason: format!(
                            "another writer changed this metadata document each of the {MAX_ATTEMPTS} times it \
                             was read and rewritten"
                        ),
                    });
                }
                tokio::time::sleep(pause(attempt)).await;
            }
            ok => return ok,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn key(k: &str) -> StoreKey {
        StoreKey::new(k).unwrap()
    }

    #[test]
    fn conditions_follow_what_was_read() {
        let mut v = Versions::new(vec![(key("a/zarr.json"), Some("\"e1\"".into())), (key("a/.zattrs"), None)]);
        assert_eq!(v.condition(&key("a/zarr.json")), PutCondition::IfMatch(vec!["\"e1\"".into()]));
        assert_eq!(v.condition(&key("a/.zattrs")), PutCondition::IfAbsent);
        assert_eq!(v.condition(&key("a/.zmetadata")), PutCondition::IfAbsent);
        v.record(key("a/.zmetadata"), Some("\"e2\"".into()));
        assert_eq!(v.condition(&key("a/.zmetadata")), PutCondition::IfMatch(vec!["\"e2\"".into()]));
    }

    #[test]
    fn pauses_are_bounded_and_vary() {
        for attempt in 0..40 {
            assert!(pause(attempt) < MAX_PAUSE, "attempt {attempt}");
        }
        let seen: std::collections::HashSet<_> = (0..20).map(|_| pause(6)).collect();
        assert!(seen.len() > 1, "the pause is not random: {seen:?}");
    }

    #[tokio::test]
    async fn lost_races_are_retried_then_named() {
        let runs = AtomicU32::new(0);
        let lost = || {
            ServiceError::Storage(StorageError::PreconditionFailed { key: "g/zarr.json".into(), reason: "x".into() })
        };
        let r = retry(|| async {
            if runs.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(lost())
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(runs.load(Ordering::SeqCst), 4);

        runs.store(0, Ordering::SeqCst);
        let r: ServiceResult<()> = retry(|| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(lost())
        })
        .await;
        assert!(matches!(&r, Err(ServiceError::WriteConflict { key, .. }) if key == "g/zarr.json"), "{r:?}");
        assert_eq!(runs.load(Ordering::SeqCst), MAX_ATTEMPTS);

        // Other errors are not retried.
        runs.store(0, Ordering::SeqCst);
        let r: ServiceResult<()> = retry(|| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(ServiceError::Conflict("no".into()))
        })
        .await;
        assert!(matches!(r, Err(ServiceError::Conflict(_))));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
