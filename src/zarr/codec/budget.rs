//! The decode budget: decoded bytes all chunk decodes of the process may
//! produce at once (`limits.decode_budget_bytes`).
//!
//! Every decoder is capped at the size its stage is expected to produce,
//! so one decode costs at most about one chunk; the budget makes the sum
//! over concurrent decodes bounded too, so N concurrent decompression bombs
//! cannot each take their cap. A decode reserves its expected output size
//! ([`reserve`]) before it starts and waits (blocking its thread: decodes
//! run on the CPU pool) until the reservation fits. A reservation larger
//! than the budget takes the whole budget. Nested decodes on one thread (a
//! shard's inner chunks inside the shard's decode) are covered by the
//! outer reservation, so a thread never waits for itself.
//!
//! No budget is configured until [`configure`] is called (the engine alone,
//! as in its tests and examples, is unbounded).

use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};

#[derive(Debug)]
struct Budget {
    total: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

static BUDGET: RwLock<Option<Arc<Budget>>> = RwLock::new(None);

thread_local! {
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// Sets the process's decode budget to `total` bytes (replacing any
/// earlier one; decodes holding the old one finish under it).
pub fn configure(total: u64) {
    let budget = Arc::new(Budget { total: total.max(1), used: Mutex::new(0), freed: Condvar::new() });
    *BUDGET.write().unwrap_or_else(PoisonError::into_inner) = Some(budget);
}

/// Bytes currently reserved under the configured budget.
#[must_use]
pub fn in_use() -> u64 {
    BUDGET
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map_or(0, |b| *b.used.lock().unwrap_or_else(PoisonError::into_inner))
}

/// A reservation of decode budget, released when dropped.
#[derive(Debug)]
#[must_use = "the reservation is released when dropped"]
pub struct Reservation {
    held: Option<(Arc<Budget>, u64)>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((budget, n)) = self.held.take() {
            let mut used = budget.used.lock().unwrap_or_else(PoisonError::into_inner);
            *used -= n;
            drop(used);
            budget.freed.notify_all();
            HELD.with(|h| h.set(false));
        }
    }
}

/// Reserves `bytes` of the budget for one decode, waiting until they fit.
pub fn reserve(bytes: u64) -> Reservation {
    if HELD.with(Cell::get) {
        return Reservation { held: None };
    }
    let Some(budget) = BUDGET.read().unwrap_or_else(PoisonError::into_inner).clone() else {
        return Reservation { held: None };
    };
    reserve_from(budget, bytes)
}

fn reserve_from(budget: Arc<Budget>, bytes: u64) -> Reservation {
    if HELD.with(Cell::get) {
        return Reservation { held: None };
    }
    let n = bytes.clamp(1, budget.total);
    let mut used = budget.used.lock().unwrap_or_else(PoisonError::into_inner);
    while *used + n > budget.total {
        used = budget.freed.wait(used).unwrap_or_else(PoisonError::into_inner);
    }
    *used += n;
    drop(used);
    HELD.with(|h| h.set(true));
    Reservation { held: Some((budget, n)) }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn concurrent_reservations_never_exceed_the_budget_and_nest_without_waiting() {
        // A budget of its own: other tests decode under the global one.
        let budget = Arc::new(Budget { total: 100, used: Mutex::new(0), freed: Condvar::new() });
        let used = |b: &Arc<Budget>| *b.used.lock().unwrap();
        let peak = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (peak, budget) = (peak.clone(), budget.clone());
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let _r = reserve_from(budget.clone(), 30 + i);
                        peak.fetch_max(used(&budget), Ordering::SeqCst);
                        // Nested: covered by the outer reservation, no wait.
                        let _inner = reserve_from(budget.clone(), 100);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let p = peak.load(Ordering::SeqCst);
        assert!((30..=100).contains(&p), "peak {p}");
        assert_eq!(used(&budget), 0);
        // Larger than the budget: takes all of it, does not wait forever.
        let r = reserve_from(budget.clone(), 1 << 40);
        assert_eq!(used(&budget), 100);
        drop(r);
        assert_eq!(used(&budget), 0);
    }
}
