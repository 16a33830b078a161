//! Background jobs (pyramid builds): what runs, its progress, and how to
//! cancel it. Each [`super::App`] owns its [`Jobs`]; a job runs on its own
//! task, so it outlives the request that started it (and the client that
//! went away). Its progress lives in memory here; what it has done lives
//! in the store, so the same request after a restart resumes (see
//! [`super::pyramid`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use super::{ServiceError, ServiceResult};
use utoipa::ToSchema;

/// A job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Working.
    Running,
    /// Done.
    Completed,
    /// Stopped by an error (in `error`).
    Failed,
    /// Stopped by `DELETE`.
    Cancelled,
}

/// One job: what it is, its progress, its task.
#[derive(Debug)]
pub struct Job {
    /// Its id (derived from the request, so the same request finds it).
    pub id: String,
    /// The mount it works in.
    pub mount: String,
    /// The source array.
    pub path: String,
    /// The group it builds.
    pub destination: String,
    started: Instant,
    /// Its state, the error of a failed one, and how long it ran once it
    /// ended.
    state: Mutex<(JobState, Option<String>, Option<f64>)>,
    /// Units of work done (chunks copied or computed, skipped ones too).
    pub done: AtomicU64,
    /// Units of work in all.
    pub total: AtomicU64,
    /// Units found already done in the store (a resumed job).
    pub skipped: AtomicU64,
    /// Bytes written (level 0: as stored; other levels: decoded).
    pub bytes: AtomicU64,
    /// The level being built.
    pub level: AtomicU64,
    /// Levels in all.
    pub levels: AtomicU64,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

/// What `GET /api/v1/jobs/{mount}/{id}` answers.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobStatus {
    /// The job's id.
    pub id: String,
    /// The job's kind (`pyramid`).
    pub kind: &'static str,
    /// Its state.
    pub state: JobState,
    /// The mount.
    pub mount: String,
    /// The source array's path.
    pub path: String,
    /// The multiscale group's path.
    pub destination: String,
    /// The level being built (0: the copy of the source).
    pub level: u64,
    /// Levels in all.
    pub levels: u64,
    /// Chunks (shards) done, found done in the store included.
    pub chunks_done: u64,
    /// Chunks (shards) in all levels.
    pub chunks_total: u64,
    /// Chunks found already done (a resumed job).
    pub chunks_skipped: u64,
    /// Bytes written: level 0's chunks as stored, other levels' decoded.
    pub bytes_written: u64,
    /// Seconds since the job started; once it ended, how long it ran.
    pub elapsed_seconds: f64,
    /// Seconds left, estimated from the pace of the chunks done so far
    /// (`null` until there is a pace, or once the job ended).
    pub estimate_seconds: Option<f64>,
    /// Why it failed.
    pub error: Option<String>,
}

impl Job {
    /// A new running job.
    #[must_use]
    pub fn new(id: String, mount: String, path: String, destination: String) -> Self {
        Self {
            id,
            mount,
            path,
            destination,
            started: Instant::now(),
            state: Mutex::new((JobState::Running, None, None)),
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            level: AtomicU64::new(0),
            levels: AtomicU64::new(0),
            task: Mutex::new(None),
        }
    }

    /// Its state.
    #[must_use]
    pub fn state(&self) -> JobState {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0
    }

    /// Ends it (a running job only: a cancelled job stays cancelled).
    pub fn finish(&self, state: JobState, error: Option<String>) {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.0 == JobState::Running {
            *s = (state, error, Some(self.started.elapsed().as_secs_f64()));
        }
    }

    /// Sets the task that runs it (so `cancel` can stop it).
    pub fn set_task(&self, handle: tokio::task::AbortHandle) {
        *self.task.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(handle);
    }

    /// Stops it; false when it was not running.
    pub fn cancel(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.0 != JobState::Running {
            return false;
        }
        *s = (JobState::Cancelled, None, Some(self.started.elapsed().as_secs_f64()));
        if let Some(t) = self.task.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            t.abort();
        }
        true
    }

    /// Its status now.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    pub fn status(&self) -> JobStatus {
        let (state, error, ran) = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        // A job that ended says how long it ran.
        let elapsed = ran.unwrap_or_else(|| self.started.elapsed().as_secs_f64());
        let (done, total, skipped) = (
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
        );
        // The pace of the chunks this run did (skipped ones cost nothing).
        let worked = done.saturating_sub(skipped);
        let estimate = (state == JobState::Running && worked > 0)
            .then(|| elapsed / worked as f64 * total.saturating_sub(done) as f64);
        JobStatus {
            id: self.id.clone(),
            kind: "pyramid",
            state,
            mount: self.mount.clone(),
            path: self.path.clone(),
            destination: self.destination.clone(),
            level: self.level.load(Ordering::Relaxed),
            levels: self.levels.load(Ordering::Relaxed),
            chunks_done: done,
            chunks_total: total,
            chunks_skipped: skipped,
            bytes_written: self.bytes.load(Ordering::Relaxed),
            elapsed_seconds: elapsed,
            estimate_seconds: estimate,
            error,
        }
    }
}

/// At most this many jobs run at once (each holds a share of the CPU pool,
/// its copies' budget and its writes' locks); one more is 503 `overloaded`.
pub const MAX_RUNNING: usize = 4;

/// At most this many jobs are remembered (running ones always are).
pub const MAX_KEPT: usize = 256;

/// The jobs of one app, by id.
#[derive(Debug, Default)]
pub struct Jobs {
    jobs: Mutex<HashMap<String, Arc<Job>>>,
}

impl Jobs {
    /// The job `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
    }

    /// The running job with `job`'s id if there is one (`false`), else
    /// `job`, registered (`true`): a job that ended runs again (the store
    /// says what is left to do, which may be nothing).
    ///
    /// At most [`MAX_RUNNING`] jobs run at once, and at most [`MAX_KEPT`]
    /// are remembered: registering one more forgets the ended jobs that
    /// ended first.
    ///
    /// # Errors
    /// [`ServiceError::Busy`] when [`MAX_RUNNING`] jobs are running.
    pub fn start(&self, job: Job) -> ServiceResult<(Arc<Job>, bool)> {
        let mut jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(j) = jobs.get(&job.id) {
            if j.state() == JobState::Running {
                return Ok((j.clone(), false));
            }
        }
        // Two requests for the same destination (or one inside the other)
        // would write the same levels: the second is refused while the
        // first runs. (One that ran already is refused by its group's mark.)
        let nested = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"));
        if let Some(other) = jobs.values().find(|j| {
            j.state() == JobState::Running && j.mount == job.mount && nested(&j.destination, &job.destination)
        }) {
            return Err(ServiceError::Conflict(format!(
                "job {} is writing `{}` in mount `{}`; a pyramid is written only to a new path: wait for it, \
                 cancel it, or choose another `destination`",
                other.id, other.destination, other.mount
            )));
        }
        let running = jobs.values().filter(|j| j.state() == JobState::Running).count();
        if running >= MAX_RUNNING {
            return Err(ServiceError::Busy(format!(
                "{running} jobs are running, the most zarrd runs at once; wait for one to end or cancel one \
                 (DELETE /api/v1/jobs/{{mount}}/{{id}})"
            )));
        }
        while jobs.len() >= MAX_KEPT {
            let oldest = jobs.values().filter(|j| j.state() != JobState::Running).min_by_key(|j| j.started).cloned();
            let Some(oldest) = oldest else { break };
            jobs.remove(&oldest.id);
        }
        let job = Arc::new(job);
        jobs.insert(job.id.clone(), job.clone());
        Ok((job, true))
    }

    /// How many jobs are in each state (for `/metrics`).
    #[must_use]
    pub fn counts(&self) -> [(JobState, u64); 4] {
        let mut counts =
            [(JobState::Running, 0), (JobState::Completed, 0), (JobState::Failed, 0), (JobState::Cancelled, 0)];
        for j in self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values() {
            let s = j.state();
            if let Some(c) = counts.iter_mut().find(|(k, _)| *k == s) {
                c.1 += 1;
            }
        }
        counts
    }

    /// Chunks done by every job (for `/metrics`).
    #[must_use]
    pub fn chunks_done(&self) -> u64 {
        let jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        jobs.values().map(|j| j.done.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_job_is_found_again_and_a_cancelled_one_replaced() {
        let jobs = Jobs::default();
        let (a, new) = jobs.start(Job::new("j".into(), "m".into(), "p".into(), "d".into())).unwrap();
        assert!(new);
        let (b, new) = jobs.start(Job::new("j".into(), "m".into(), "p".into(), "d".into())).unwrap();
        assert!(!new && Arc::ptr_eq(&a, &b));
        a.total.store(10, Ordering::Relaxed);
        a.done.store(4, Ordering::Relaxed);
        let st = a.status();
        assert_eq!((st.state, st.chunks_done, st.chunks_total), (JobState::Running, 4, 10));
        assert!(st.estimate_seconds.is_some());
        assert!(a.cancel() && !a.cancel());
        a.finish(JobState::Completed, None);
        assert_eq!(a.state(), JobState::Cancelled, "a cancelled job stays cancelled");
        // An ended job's time stops with it.
        let ran = a.status().elapsed_seconds;
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!((a.status().elapsed_seconds - ran).abs() < f64::EPSILON, "the clock ran on after the end");
        assert_eq!(jobs.counts()[3], (JobState::Cancelled, 1));
        let (c, new) = jobs.start(Job::new("j".into(), "m".into(), "p".into(), "d".into())).unwrap();
        assert!(new && !Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn running_jobs_are_capped_and_ended_ones_forgotten_oldest_first() {
        let jobs = Jobs::default();
        let job = |i: usize| Job::new(format!("j{i}"), "m".into(), "p".into(), format!("d{i}"));
        // Another job for a running job's destination, or one nested in it: 409.
        assert!(jobs.start(Job::new("a".into(), "m".into(), "p".into(), "out/x".into())).unwrap().1);
        for taken in ["out/x", "out", "out/x/y"] {
            let err = jobs.start(Job::new("b".into(), "m".into(), "p".into(), taken.into())).unwrap_err();
            assert!(matches!(err, ServiceError::Conflict(ref m) if m.contains("job a is writing")), "{err}");
        }
        assert!(jobs.start(Job::new("c".into(), "m".into(), "p".into(), "out/xy".into())).unwrap().1);
        assert!(jobs.start(Job::new("d".into(), "other".into(), "p".into(), "out/x".into())).unwrap().1);
        for id in ["a", "c", "d"] {
            jobs.get(id).unwrap().finish(JobState::Completed, None);
        }
        for i in 0..MAX_RUNNING {
            assert!(jobs.start(job(i)).unwrap().1);
        }
        let err = jobs.start(job(MAX_RUNNING)).unwrap_err();
        assert!(matches!(err, ServiceError::Busy(ref m) if m.contains("running")), "{err}");
        // The same request as a running job finds it, even at the cap.
        assert!(!jobs.start(job(0)).unwrap().1);
        for i in 0..MAX_RUNNING {
            jobs.get(&format!("j{i}")).unwrap().finish(JobState::Completed, None);
        }
        for i in MAX_RUNNING..MAX_KEPT + 10 {
            let (j, new) = jobs.start(job(i)).unwrap();
            assert!(new);
            j.finish(JobState::Completed, None);
        }
        let kept = jobs.jobs.lock().unwrap().len();
        assert_eq!(kept, MAX_KEPT);
        assert!(jobs.get("j0").is_none(), "the first ended job is forgotten first");
        assert!(jobs.get(&format!("j{}", MAX_KEPT + 9)).is_some());
    }
}
