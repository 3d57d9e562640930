//! Work for a bounded number of workers. A cycle can decide tens of thousands of writes at once (40,000
//! binds at 5,000 nodes). A task per write would hold each write's whole future, several KiB once the
//! client's request is in it, from the moment it is decided, although at most a few dozen are in flight:
//! 40,000 bind tasks alone took 280 MiB. Here a queued job costs only its data; workers start as jobs
//! arrive, up to the limit, take them oldest first and end when none is left.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One piece of work, done with a shared context (the applier).
pub(super) trait Job<C>: Send + 'static {
    /// Does the work.
    fn run(self, context: Arc<C>) -> impl Future<Output = ()> + Send;
}

/// Jobs waiting and the workers taking them.
#[derive(Debug)]
pub(super) struct WorkQueue<J> {
    limit: usize,
    state: Mutex<State<J>>,
}

#[derive(Debug)]
struct State<J> {
    jobs: VecDeque<J>,
    workers: usize,
}

impl<J> WorkQueue<J> {
    /// A queue with at most `limit` (at least 1) jobs running at once.
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                workers: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<J>> {
        // Nothing panics while holding the lock; a poisoned one still holds consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Jobs queued and not yet started.
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.lock().jobs.len()
    }

    /// The next job, or `None`, retiring the calling worker (under the lock, so a job pushed meanwhile
    /// finds the worker gone and starts another).
    fn next(&self) -> Option<J> {
        let mut state = self.lock();
        let job = state.jobs.pop_front();
        if job.is_none() {
            state.workers -= 1;
        }
        job
    }

    /// Queues `jobs` behind those waiting and starts workers for them, up to the limit.
    pub(super) fn push<C>(self: &Arc<Self>, context: &Arc<C>, jobs: impl IntoIterator<Item = J>)
    where
        J: Job<C>,
        C: Send + Sync + 'static,
    {
        let start = {
            let mut state = self.lock();
            state.jobs.extend(jobs);
            let start = self.limit.saturating_sub(state.workers).min(state.jobs.len());
            state.workers += start;
            start
        };
        for _ in 0..start {
            let (queue, context) = (Arc::clone(self), Arc::clone(context));
            tokio::spawn(async move {
                while let Some(job) = queue.next() {
                    job.run(Arc::clone(&context)).await;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[derive(Debug, Default)]
    struct Counts {
        running: AtomicUsize,
        most: AtomicUsize,
        done: Mutex<Vec<usize>>,
    }

    struct Sleep(usize);

    impl Job<Counts> for Sleep {
        async fn run(self, counts: Arc<Counts>) {
            let now = counts.running.fetch_add(1, Ordering::SeqCst) + 1;
            counts.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            counts.running.fetch_sub(1, Ordering::SeqCst);
            counts.done.lock().expect("done").push(self.0);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_the_limit_runs_oldest_first_and_workers_come_back_for_later_jobs() {
        let queue = Arc::new(WorkQueue::new(4));
        let counts = Arc::new(Counts::default());
        queue.push(&counts, (0..40).map(Sleep));
        tokio::task::yield_now().await;
        assert_eq!(queue.queued(), 36, "four started at once");
        tokio::time::sleep(Duration::from_millis(5)).await;
        queue.push(&counts, (40..50).map(Sleep));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(counts.most.load(Ordering::SeqCst), 4);
        let done = counts.done.lock().expect("done").clone();
        assert_eq!(done.len(), 50);
        // Each round of four finishes before the next starts: order holds round by round.
        for (round, chunk) in done.chunks(4).enumerate() {
            let mut chunk = chunk.to_vec();
            chunk.sort_unstable();
            let expected: Vec<usize> = (round * 4..(round * 4 + 4).min(50)).collect();
            assert_eq!(chunk, expected);
        }
        assert_eq!(queue.lock().workers, 0, "workers end when the queue is empty");
        queue.push(&counts, [Sleep(50)]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(counts.done.lock().expect("done").len(), 51, "and start again");
    }
}
