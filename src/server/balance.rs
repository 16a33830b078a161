//! Spreading connections evenly over the workers that accept from one
//! listening socket.
//!
//! The workers (one single-threaded runtime per core, see
//! [`super::serve_on`]) accept from copies of one socket. Left alone, the
//! first worker to wake takes a whole burst of connections — a client
//! opening 16 keep-alive connections at once found 12 or more on one
//! worker, whose core then limited the whole server while the other idled
//! (measured: 91 vs 317 CPU ticks over one `wrk -c16` run). Keep-alive
//! connections stay where they were accepted, so the split at the burst is
//! the split for the connections' lifetime.
//!
//! So a worker holding more open connections than the least loaded other
//! worker lets the next connection go: it waits until the counts change
//! (another worker accepted, or a connection closed) and looks again. It
//! never waits longer than [`DEFER`] at a time, so a connection is accepted
//! even when every other worker is busy. nginx's workers behave alike: with
//! `multi_accept off` (its default) each accepts one connection per event,
//! and every worker is woken for it.
//!
//! With `bind_reuse_port` each worker has a socket of its own and the kernel
//! spreads connections over them; there is nothing to balance.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// The longest a worker that is ahead waits before accepting anyway.
pub(super) const DEFER: Duration = Duration::from_millis(2);

/// Open connections per worker.
#[derive(Debug)]
pub(super) struct Balance {
    live: Box<[AtomicUsize]>,
    changed: Notify,
}

impl Balance {
    pub(super) fn new(workers: usize) -> Arc<Self> {
        Arc::new(Self { live: (0..workers.max(1)).map(|_| AtomicUsize::new(0)).collect(), changed: Notify::new() })
    }
}

/// One worker's place in a [`Balance`].
#[derive(Debug, Clone)]
pub(super) struct Seat {
    balance: Arc<Balance>,
    me: usize,
}

impl Seat {
    /// Worker `me` of `balance`.
    ///
    /// # Panics
    /// When `me` is not a worker of `balance` (a programming error).
    pub(super) fn new(balance: &Arc<Balance>, me: usize) -> Self {
        assert!(me < balance.live.len(), "worker {me} of {}", balance.live.len());
        Self { balance: Arc::clone(balance), me }
    }

    /// True when this worker holds more open connections than the least
    /// loaded other worker.
    pub(super) fn ahead(&self) -> bool {
        let live = &self.balance.live;
        let mine = live[self.me].load(Ordering::Relaxed);
        live.iter().enumerate().any(|(i, n)| i != self.me && n.load(Ordering::Relaxed) < mine)
    }

    /// Waits until this worker is no longer ahead, or at most [`DEFER`]
    /// (returns at once when it is not ahead).
    pub(super) async fn wait_turn(&self) {
        self.wait_turn_at_most(DEFER).await;
    }

    async fn wait_turn_at_most(&self, defer: Duration) {
        let deadline = tokio::time::Instant::now() + defer;
        loop {
            let changed = self.balance.changed.notified();
            tokio::pin!(changed);
            // Registered before the counts are read: a change made after the
            // read wakes this wait.
            changed.as_mut().enable();
            if !self.ahead() {
                return;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    /// Counts a connection this worker accepted, until the returned guard
    /// is dropped.
    pub(super) fn opened(&self) -> Open {
        self.balance.live[self.me].fetch_add(1, Ordering::Relaxed);
        self.balance.changed.notify_waiters();
        Open { seat: self.clone() }
    }
}

/// An open connection, counted in its worker's [`Seat`] until dropped.
#[derive(Debug)]
pub(super) struct Open {
    seat: Seat,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.seat.balance.live[self.seat.me].fetch_sub(1, Ordering::Relaxed);
        self.seat.balance.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_ahead_only_of_a_less_loaded_one() {
        let b = Balance::new(3);
        let (w0, w1, w2) = (Seat::new(&b, 0), Seat::new(&b, 1), Seat::new(&b, 2));
        assert!(!w0.ahead() && !w1.ahead() && !w2.ahead());
        let first = w0.opened();
        assert!(w0.ahead(), "1 connection against 0");
        assert!(!w1.ahead() && !w2.ahead());
        let second = w1.opened();
        assert!(w0.ahead() && w1.ahead(), "worker 2 still has none");
        let third = w2.opened();
        assert!(!w0.ahead() && !w1.ahead() && !w2.ahead());
        drop(third);
        assert!(w0.ahead());
        drop((first, second));
        assert!(!w0.ahead() && !w1.ahead());
        // A single worker is never ahead.
        let alone = Seat::new(&Balance::new(1), 0);
        let _open = alone.opened();
        assert!(!alone.ahead());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_worker_ahead_waits_for_a_change_or_at_most_the_deferral() {
        let b = Balance::new(2);
        let (w0, w1) = (Seat::new(&b, 0), Seat::new(&b, 1));
        let first = w0.opened();
        // Nobody else accepts: the wait ends after the deferral, not before.
        let start = tokio::time::Instant::now();
        w0.wait_turn().await;
        assert!(start.elapsed() >= DEFER, "{:?}", start.elapsed());
        // The other worker accepts meanwhile: the wait ends then, long
        // before its (here one hour) deferral.
        let other = tokio::spawn(async move {
            tokio::task::yield_now().await;
            w1.opened()
        });
        let waited = tokio::time::timeout(Duration::from_secs(10), w0.wait_turn_at_most(Duration::from_secs(3600)));
        assert!(waited.await.is_ok(), "the change did not end the wait");
        assert!(!w0.ahead());
        // Not ahead: no wait at all, whatever the deferral.
        drop(other.await.unwrap());
        drop(first);
        let waited = tokio::time::timeout(Duration::from_secs(10), w0.wait_turn_at_most(Duration::from_secs(3600)));
        assert!(waited.await.is_ok());
    }
}
