//! Timing of the scheduling loop and handling of applier feedback.
//!
//! [`Feedback`] is defined here, on the loop's side: it is what the loop needs to hear about a failed
//! write, and the applier only sends it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use scheduler_core::model::{Cluster, GroupKey, Millis};

/// When the next cycle runs: soon after a change (but not more often than the minimum interval),
/// otherwise after the period.
///
/// Changes that arrive in a stream (a burst of new workloads: pods, PodGroups, the podgrouper's
/// annotations, bind echoes) are taken in batches: after a cycle that took `d`, the next one waits at
/// least [`COST_FACTOR`] x `d`, so the loop spends at most a third of a core on cycles however fast
/// changes come, and leaves the rest to the API server doing the writes.
#[derive(Debug, Clone)]
pub struct LoopState {
    period: Duration,
    min_interval: Duration,
    last: Instant,
    last_took: Duration,
    dirty: bool,
}

/// The gap after a cycle, in multiples of what the cycle took (see [`LoopState`]).
pub const COST_FACTOR: u32 = 2;

impl LoopState {
    /// A loop that runs at least every `period` and at most every `min_interval`.
    #[must_use]
    pub fn new(period: Duration, min_interval: Duration) -> Self {
        Self {
            period,
            min_interval: min_interval.min(period),
            last: Instant::now(),
            last_took: Duration::ZERO,
            dirty: true,
        }
    }

    /// The cycle started at the last [`LoopState::cycled`] took `took`.
    pub fn took(&mut self, took: Duration) {
        self.last_took = took;
    }

    /// Something changed.
    pub fn changed(&mut self, _now: Instant) {
        self.dirty = true;
    }

    /// A cycle started.
    pub fn cycled(&mut self, now: Instant) {
        self.last = now;
        self.dirty = false;
    }

    /// When the next cycle is due. While binds are still in flight (`binding`), changes are taken in at
    /// most every [`BUSY_INTERVAL`]: binds decided now would queue behind them anyway, and cycles run
    /// for every bind echo would take CPU from the API server that is doing the binding.
    #[must_use]
    pub fn next_cycle(&self, binding: bool) -> Instant {
        let min_gap = self.min_interval.max(self.last_took * (COST_FACTOR + 1));
        self.last
            + match (self.dirty, binding) {
                (false, _) => self.period,
                (true, false) => min_gap.min(self.period),
                (true, true) => min_gap.max(BUSY_INTERVAL).min(self.period),
            }
    }
}

/// The shortest time between cycles while binds are in flight.
pub const BUSY_INTERVAL: Duration = Duration::from_millis(200);

/// A write that failed, so the loop can stop assuming its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feedback {
    /// The bind was refused or abandoned; the pod is pending again, and backs off.
    BindFailed {
        /// Pod UID.
        uid: Arc<str>,
        /// Why (for the gang's status).
        reason: Arc<str>,
    },
    /// The bind was not sent (leadership lost): the pod is pending again, with no back-off.
    BindDropped {
        /// Pod UID.
        uid: Arc<str>,
    },
    /// The eviction was refused (a PodDisruptionBudget, or an error); the pod keeps running.
    EvictFailed {
        /// Pod UID.
        uid: Arc<str>,
    },
    /// A PodGroup status write failed; write it again next cycle.
    StatusFailed {
        /// Gang.
        key: GroupKey,
    },
    /// A pod condition write failed.
    PodConditionFailed {
        /// Pod UID.
        uid: Arc<str>,
    },
    /// A queue status write failed.
    QueueStatusFailed {
        /// Queue.
        name: Arc<str>,
    },
}

/// Drops what the model assumed about a write that failed (`now`: the wall clock, for back-offs).
pub fn feedback(cluster: &mut Cluster, fb: Feedback, now: Millis) {
    // Whatever failed is to be decided or written again: the next cycle must run.
    cluster.epochs.changed();
    match fb {
        Feedback::BindFailed { uid, reason } => {
            if let Some(t) = cluster.task_id(&uid) {
                cluster.bind_failed(t, reason, now);
            }
        }
        Feedback::EvictFailed { uid } | Feedback::BindDropped { uid } => {
            if let Some(t) = cluster.task_id(&uid) {
                cluster.clear_assumed(t);
            }
        }
        Feedback::PodConditionFailed { uid } => {
            if let Some(t) = cluster.task_id(&uid)
                && let Some(task) = cluster.tasks.get_mut(t.0)
            {
                task.condition_fingerprint = 0;
            }
        }
        Feedback::StatusFailed { key } => {
            if let Some(g) = cluster.group_id(&key) {
                cluster.group_mut(g).observed.fingerprint = 0;
            }
        }
        Feedback::QueueStatusFailed { name } => {
            if let Some(q) = cluster.queue_id(&name)
                && let Some(queue) = cluster.queues.get_mut(q.0)
            {
                queue.observed_fingerprint = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_follow_changes_within_bounds() {
        let mut s = LoopState::new(Duration::from_secs(1), Duration::from_millis(20));
        let t0 = Instant::now();
        s.cycled(t0);
        assert_eq!(s.next_cycle(false), t0 + Duration::from_secs(1));
        assert_eq!(s.next_cycle(true), t0 + Duration::from_secs(1));
        s.changed(t0);
        assert_eq!(s.next_cycle(false), t0 + Duration::from_millis(20));
        assert_eq!(
            s.next_cycle(true),
            t0 + BUSY_INTERVAL,
            "binds in flight: changes batched"
        );
        let fast = LoopState::new(Duration::from_millis(100), Duration::from_millis(20));
        assert!(
            fast.next_cycle(true) <= fast.last + Duration::from_millis(100),
            "never later than the period"
        );
    }

    #[test]
    fn a_costly_cycle_spaces_the_next_one() {
        let mut s = LoopState::new(Duration::from_secs(1), Duration::from_millis(20));
        let t0 = Instant::now();
        s.cycled(t0);
        s.took(Duration::from_millis(30));
        s.changed(t0);
        // Started at t0, ran 30 ms, then waits twice as long: at most a third of the time in cycles.
        assert_eq!(s.next_cycle(false), t0 + Duration::from_millis(90));
        assert_eq!(
            s.next_cycle(true),
            t0 + BUSY_INTERVAL,
            "the busy interval is longer"
        );
        s.took(Duration::from_millis(100));
        assert_eq!(s.next_cycle(true), t0 + Duration::from_millis(300));
        s.took(Duration::from_secs(2));
        assert_eq!(
            s.next_cycle(false),
            t0 + Duration::from_secs(1),
            "never later than the period"
        );
        s.took(Duration::from_millis(1));
        assert_eq!(
            s.next_cycle(false),
            t0 + Duration::from_millis(20),
            "cheap cycles: the minimum interval"
        );
    }

    /// The loop beats its liveness heartbeat on every wake, so no state may put the next wake further
    /// away than the period: an idle scheduler stays live.
    #[test]
    fn the_next_cycle_is_never_further_than_the_period() {
        let periods = [1, 20, 150, 200, 250, 1_000, 30_000].map(Duration::from_millis);
        for period in periods {
            for min_interval in periods {
                let mut s = LoopState::new(period, min_interval);
                let t0 = Instant::now();
                s.cycled(t0);
                s.took(period * 3);
                for dirty in [false, true] {
                    if dirty {
                        s.changed(t0);
                    }
                    for binding in [false, true] {
                        let wake = s.next_cycle(binding);
                        assert!(
                            wake <= t0 + period,
                            "period {period:?}, min {min_interval:?}, dirty {dirty}, binding {binding}"
                        );
                    }
                }
            }
        }
    }
}
