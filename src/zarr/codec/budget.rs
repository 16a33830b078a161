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

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};

#[derive(Debug)]
struct Budget {
    total: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

impl Budget {
    /// Waits until `n` more bytes fit, then takes them.
    fn take(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        while *used + n > self.total {
            used = self.freed.wait(used).unwrap_or_else(PoisonError::into_inner);
        }
        *used += n;
    }

    /// Gives `n` bytes back.
    fn give(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used -= n;
        drop(used);
        self.freed.notify_all();
    }
}

static BUDGET: RwLock<Option<Arc<Budget>>> = RwLock::new(None);

thread_local! {
    /// The reservation this thread's outermost decode holds, and its size.
    static HELD: RefCell<Option<(Arc<Budget>, u64)>> = const { RefCell::new(None) };
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
    /// Whether this is the thread's outermost reservation (nested ones
    /// are covered by it and hold nothing).
    outermost: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.outermost {
            if let Some((budget, n)) = HELD.with(|h| h.borrow_mut().take()) {
                budget.give(n);
            }
        }
    }
}

fn holds() -> bool {
    HELD.with(|h| h.borrow().is_some())
}

/// Reserves `bytes` of the budget for one decode, waiting until they fit.
pub fn reserve(bytes: u64) -> Reservation {
    if holds() {
        return Reservation { outermost: false };
    }
    let Some(budget) = BUDGET.read().unwrap_or_else(PoisonError::into_inner).clone() else {
        return Reservation { outermost: false };
    };
    reserve_from(budget, bytes)
}

fn reserve_from(budget: Arc<Budget>, bytes: u64) -> Reservation {
    if holds() {
        return Reservation { outermost: false };
    }
    let n = bytes.clamp(1, budget.total);
    budget.take(n);
    HELD.with(|h| *h.borrow_mut() = Some((budget, n)));
    Reservation { outermost: true }
}

/// Raises the reservation this thread holds to `bytes` in all, when a
/// decode learns it needs more than it reserved (a variable-length chunk,
/// whose size only its decompressed bytes tell). Waits until they fit,
/// holding nothing meanwhile (so two growing decodes never wait for each
/// other). Nothing happens when no reservation is held or it is already
/// that large.
pub fn grow(bytes: u64) {
    HELD.with(|h| {
        let mut held = h.borrow_mut();
        let Some((budget, n)) = held.as_mut() else { return };
        let want = bytes.clamp(1, budget.total);
        if want <= *n {
            return;
        }
        budget.give(*n);
        budget.take(want);
        *n = want;
    });
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

    #[test]
    fn a_reservation_grows_waiting_with_nothing_held() {
        let budget = Arc::new(Budget { total: 100, used: Mutex::new(0), freed: Condvar::new() });
        let used = |b: &Arc<Budget>| *b.used.lock().unwrap();
        // Nothing held: growing does nothing.
        grow(50);
        assert_eq!(used(&budget), 0);
        let r = reserve_from(budget.clone(), 10);
        grow(5);
        assert_eq!(used(&budget), 10, "never shrinks");
        grow(60);
        assert_eq!(used(&budget), 60);
        grow(1 << 40);
        assert_eq!(used(&budget), 100, "at most the whole budget");
        drop(r);
        assert_eq!(used(&budget), 0);
        // Two threads that each hold 40 and grow to 70 cannot both have it
        // at once, yet neither waits for the other forever.
        let peak = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (peak, budget) = (peak.clone(), budget.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _r = reserve_from(budget.clone(), 40);
                        std::thread::sleep(Duration::from_micros(100));
                        grow(70);
                        peak.fetch_max(used(&budget), Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(100));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let p = peak.load(Ordering::SeqCst);
        assert!((70..=100).contains(&p), "peak {p}");
        assert_eq!(used(&budget), 0);
    }

    /// A variable-length chunk's decode is counted at what its
    /// decompressed bytes say it takes, not at the estimate reserved
    /// before (a vector per element): its bytes and their copies.
    #[test]
    fn a_variable_length_decode_counts_its_real_size() {
        use crate::zarr::chunk::{ChunkData, ChunkRepr};
        use crate::zarr::codec::array_to_bytes::vlen::{VlenCodec, VlenKind};
        use crate::zarr::codec::{ArrayToBytesCodec, CodecChain};
        use crate::zarr::data_type::DataType;

        let budget = Arc::new(Budget { total: 1 << 30, used: Mutex::new(0), freed: Condvar::new() });
        let chain = CodecChain::new(Vec::new(), Box::new(VlenCodec::new(VlenKind::Utf8)), Vec::new());
        let repr = ChunkRepr { shape: vec![2], data_type: DataType::String, fill_value: Vec::new() };
        let items = vec![vec![b'x'; 100_000], vec![b'y'; 50_000]];
        let bytes = chain.encode(ChunkData::Variable(items.clone()), &repr).unwrap();
        let stored = bytes.len() as u64;
        let r = reserve_from(budget.clone(), 2 * 24);
        let data = chain.decode(bytes, &repr).unwrap();
        assert!(matches!(&data, ChunkData::Variable(v) if *v == items));
        assert_eq!(*budget.used.lock().unwrap(), 2 * stored + 2 * 24);
        drop(r);
        assert_eq!(*budget.used.lock().unwrap(), 0);
    }
}
