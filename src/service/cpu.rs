//! The CPU pool: decoding, encoding and format conversion run here, off the
//! async threads.
//!
//! One rayon pool for the process, as many threads as cores (rayon's
//! default), so CPU work is bounded by the machine whatever the number of
//! requests: excess work queues instead of oversubscribing the cores. The
//! async side awaits a oneshot channel; a panic in the work becomes an
//! error instead of taking the server down.

use tokio::sync::oneshot;

use crate::zarr::region::Offload;

/// Why CPU work did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("internal error: CPU work failed: {0}")]
pub struct CpuError(pub String);

/// Runs `f` on the CPU pool and waits for its result without blocking the
/// async thread.
///
/// # Errors
/// `CpuError` when `f` panicked (the panic message is kept).
pub async fn run<F, R>(f: F) -> Result<R, CpuError>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    rayon::spawn(move || {
        // A request cancelled while its work waited for a thread (the
        // client went away): the work is not done at all.
        if tx.is_closed() {
            return;
        }
        // The receiver may be gone since (cancelled meanwhile): nothing to do.
        let _ = tx.send(guarded(f));
    });
    match rx.await {
        Ok(r) => r,
        Err(_) => Err(CpuError("the CPU pool dropped the work".into())),
    }
}

/// As [`run`], but runs `f` right here when `inline`: for work smaller than
/// the hand-off to the pool and back (two thread wake-ups), such as copying
/// a small selection out of a cached chunk. The caller bounds the work.
///
/// # Errors
/// `CpuError` when `f` panicked.
pub async fn run_or_inline<F, R>(inline: bool, f: F) -> Result<R, CpuError>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    if inline {
        guarded(f)
    } else {
        run(f).await
    }
}

/// The CPU pool as the region engine's [`Offload`]: slice reads decode and
/// copy each unit here, slice writes decode, place and encode each chunk. A job that panics is dropped (the
/// engine reports it as an internal error).
/// The names of the CPU pool's threads: `zarrd-cpu-0`, `zarrd-cpu-1`, ...
/// (what `top -H`, `perf` and `/proc/<pid>/task/*/comm` show).
pub const THREAD_PREFIX: &str = "zarrd-cpu-";

/// Builds the CPU pool (one thread per core, named [`THREAD_PREFIX`]`N`).
/// The binary calls it once, before any CPU work; where the pool already
/// exists (a test, an embedding program) it stays as it is. Without it, the
/// pool is rayon's default, built on first use with unnamed threads that
/// inherit the name of whichever thread first used it.
pub fn init_pool() {
    let _ = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("{THREAD_PREFIX}{i}")).build_global();
}

/// Drops `value` on the CPU pool instead of the calling (async) thread.
///
/// Freeing a large buffer is not free: glibc returns allocations of more
/// than a few MiB to the kernel with `munmap`, which unmaps and frees every
/// page on the calling thread (tens of milliseconds for a 256 MiB body).
/// A slice write holds its request body and its decoded elements until it
/// ends; dropped on an async worker they stalled every other connection of
/// that worker, `/healthz` included, for up to 300 ms
/// (`bench/write_health.py`).
pub fn drop_on_pool<T: Send + 'static>(value: T) {
    rayon::spawn(move || drop(value));
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Pool;

impl Offload for Pool {
    fn spawn(&self, job: Box<dyn FnOnce() + Send>) {
        rayon::spawn(move || {
            let _ = guarded(job);
        });
    }

    /// Direct reads of uncompressed chunks hold their slab's lock while the
    /// kernel reads the file: on the CPU pool, one cold or slow read would
    /// park every pool thread waiting on that lock (the slab's other
    /// chunks) and stall every other request's decoding behind it. tokio's
    /// blocking pool has threads to spare for waiting; outside a runtime
    /// (tools), the CPU pool.
    fn spawn_io(&self, job: Box<dyn FnOnce() + Send>) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || {
                    let _ = guarded(job);
                });
            }
            Err(_) => self.spawn(job),
        }
    }

    /// tokio's cooperative budget: a read finding many units ready at once
    /// yields to other requests every so often.
    fn yield_point(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        Some(Box::pin(tokio::task::coop::consume_budget()))
    }
}

fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, CpuError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        CpuError(
            p.downcast_ref::<&str>()
                .map(ToString::to_string)
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_string()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_work_runs_on_the_blocking_pool_never_the_cpu_pool() {
        // Direct reads wait on files and on their slab's lock: a CPU pool
        // thread parked there would hold up every other read's decoding.
        let (tx, rx) = tokio::sync::oneshot::channel();
        Pool.spawn_io(Box::new(move || {
            let _ = tx.send(rayon::current_thread_index());
        }));
        assert_eq!(rx.await.unwrap(), None, "ran on a rayon thread");
        let (tx, rx) = tokio::sync::oneshot::channel();
        Pool.spawn(Box::new(move || {
            let _ = tx.send(rayon::current_thread_index());
        }));
        assert!(rx.await.unwrap().is_some(), "CPU work left the rayon pool");
    }

    /// Work whose request was cancelled while it waited for a pool thread
    /// is not done: a client that goes away takes its queued decodes along.
    #[tokio::test]
    async fn work_cancelled_while_queued_never_runs() {
        use futures::FutureExt;
        // Every pool thread busy until released.
        let threads = rayon::current_num_threads();
        let (release, gate) = gate(threads);
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        for _ in 0..threads {
            let gate = gate.clone();
            let started_tx = started_tx.clone();
            rayon::spawn(move || {
                let _ = started_tx.send(());
                let _ = gate.lock().unwrap().recv();
            });
        }
        for _ in 0..threads {
            started_rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        }
        let (ran_tx, ran_rx) = std::sync::mpsc::channel();
        let queued = run(move || {
            let _ = ran_tx.send(());
        });
        // Polled once (queued on the pool), then dropped: cancelled.
        assert!(queued.now_or_never().is_none());
        release();
        // Work queued after it runs; the cancelled work never does.
        assert_eq!(run(|| 7).await.unwrap(), 7);
        assert!(ran_rx.recv_timeout(std::time::Duration::from_millis(500)).is_err(), "cancelled work ran");
    }

    /// A gate `n` pool threads wait at; calling the first value opens it.
    fn gate(n: usize) -> (impl FnOnce(), std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let open = move || {
            for _ in 0..n {
                let _ = tx.send(());
            }
        };
        (open, std::sync::Arc::new(std::sync::Mutex::new(rx)))
    }

    #[test]
    fn large_values_are_dropped_on_the_pool() {
        struct Noted(std::sync::mpsc::Sender<std::thread::ThreadId>);
        impl Drop for Noted {
            fn drop(&mut self) {
                let _ = self.0.send(std::thread::current().id());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        drop_on_pool(Noted(tx));
        let dropped_on = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_ne!(dropped_on, std::thread::current().id());
    }

    #[tokio::test]
    async fn runs_work_off_the_async_thread_and_reports_panics() {
        let here = std::thread::current().id();
        let there = run(move || std::thread::current().id()).await.unwrap();
        assert_ne!(here, there);
        assert_eq!(run(|| 6 * 7).await.unwrap(), 42);
        let e = run(|| -> u8 { panic!("boom") }).await.unwrap_err();
        assert!(e.0.contains("boom"), "{e}");
        let inline = run_or_inline(true, move || std::thread::current().id()).await.unwrap();
        assert_eq!(here, inline);
        assert_ne!(here, run_or_inline(false, move || std::thread::current().id()).await.unwrap());
        let e = run_or_inline(true, || -> u8 { panic!("inline boom") }).await.unwrap_err();
        assert!(e.0.contains("inline boom"), "{e}");
    }
}
