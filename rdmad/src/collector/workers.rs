//! The threads collectors run on, kept between scrapes ([`Workers`]).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Work for a [`Workers`] thread.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// Threads that run collectors, kept between scrapes: starting eight threads a scrape and
/// tearing them down again cost more than most collectors take. Each job goes to an idle
/// thread, or to a new one when none is idle, so a collector stuck past the deadline (a
/// hung driver) keeps its thread and delays no other: the same as a thread per collector
/// per scrape. A thread idle for [`WORKER_IDLE_EXIT`], or beyond [`MAX_IDLE_WORKERS`] idle
/// ones, ends; all end when the collectors are dropped.
#[derive(Default)]
pub(super) struct Workers {
    pub(super) shared: Arc<(Mutex<WorkQueue>, Condvar)>,
}

#[derive(Default)]
pub(super) struct WorkQueue {
    jobs: std::collections::VecDeque<Job>,
    /// Threads waiting for a job, minus the jobs queued for them.
    pub(super) idle: usize,
    closed: bool,
}

/// How long a collector thread waits for the next scrape before it ends.
const WORKER_IDLE_EXIT: Duration = Duration::from_secs(120);

/// At most this many collector threads wait between scrapes.
const MAX_IDLE_WORKERS: usize = 32;

impl Workers {
    /// Run `job` on an idle thread, or on a new one.
    pub(super) fn run(&self, job: Job) -> std::io::Result<()> {
        {
            let (queue, wake) = &*self.shared;
            let mut queue = lock(queue);
            if queue.idle > 0 {
                queue.idle -= 1;
                queue.jobs.push_back(job);
                wake.notify_one();
                return Ok(());
            }
        }
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || Workers::serve(&shared, job))
            .map(drop)
    }

    /// A thread's life: its first job, then what the queue gives it until it is idle too
    /// long, too many are idle or the collectors are gone.
    fn serve(shared: &(Mutex<WorkQueue>, Condvar), first: Job) {
        let (queue, wake) = shared;
        let mut job = first;
        loop {
            // Jobs catch their own panics (see `Collectors::scrape`).
            job();
            let mut guard = lock(queue);
            if guard.closed || guard.idle >= MAX_IDLE_WORKERS {
                return;
            }
            guard.idle += 1;
            let (mut guard, _) = wake
                .wait_timeout_while(guard, WORKER_IDLE_EXIT, |q| q.jobs.is_empty() && !q.closed)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match guard.jobs.pop_front() {
                // Its `idle` share was taken by the caller that queued it.
                Some(next) => job = next,
                None => {
                    guard.idle -= 1;
                    return;
                }
            }
        }
    }
}

/// Lock, ignoring poisoning: jobs catch their panics, and the queue stays consistent.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for Workers {
    fn drop(&mut self) {
        let (queue, wake) = &*self.shared;
        lock(queue).closed = true;
        wake.notify_all();
    }
}
