//! Liveness: whether the process still makes progress, the answer `/livez` gives.
//!
//! A process registers two kinds of parts:
//!
//! * **heartbeats**, beaten by a loop on each iteration ([`Liveness::heartbeat`]); the process is not live
//!   once a heartbeat is older than the timeout (a loop that hangs, a starved runtime, a deadlock);
//! * **tasks** that must run as long as the process does, such as watches ([`Liveness::task`]); the
//!   process is not live once one ends or panics, since its cache would never change again.
//!
//! A process with no parts is live: start-up (waiting for CRDs, for leadership) is for `/readyz` to
//! report. The clock is tokio's, so tests run in paused time; the rule itself, [`Liveness::status_at`],
//! takes the instant to judge at.
//!
//! Owns: the parts and the staleness rule. Must not: serve HTTP (see [`crate::admin`]) or decide what a
//! component counts as progress.

use std::{
    collections::BTreeMap,
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use api::duration;
use tokio::time::Instant;

/// The shortest default timeout: long enough for a slow cycle, a pause for garbage in the allocator, or
/// a burst of API errors with backoff not to restart a healthy process.
pub const MIN_DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How many loop periods the default timeout spans.
pub const DEFAULT_TIMEOUT_PERIODS: u32 = 10;

/// A liveness setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A loop that beats every `period` would read as stale between two beats.
    #[error(
        "--liveness-timeout ({}) must be longer than the loop's period ({})",
        duration::format(*timeout),
        duration::format(*period)
    )]
    TimeoutNotAbovePeriod {
        /// The timeout asked for.
        timeout: Duration,
        /// The period the loop beats at (at least).
        period: Duration,
    },
}

/// The timeout for a loop that beats at least every `period` when none is configured:
/// max(10 x period, 60 s).
pub fn default_timeout(period: Duration) -> Duration {
    period
        .saturating_mul(DEFAULT_TIMEOUT_PERIODS)
        .max(MIN_DEFAULT_TIMEOUT)
}

/// Checks `configured` (else takes [`default_timeout`]) against the loop's `period`.
pub fn timeout(configured: Option<Duration>, period: Duration) -> Result<Duration, Error> {
    match configured {
        None => Ok(default_timeout(period)),
        Some(timeout) if timeout > period => Ok(timeout),
        Some(timeout) => Err(Error::TimeoutNotAbovePeriod { timeout, period }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// A heartbeat, last beaten at this instant.
    Beating(Instant),
    /// A task that runs.
    Running,
    /// A task that ended while the process still needs it.
    Stopped,
}

/// Why the process is not live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A heartbeat is older than the timeout.
    Stale {
        /// The part's name.
        part: String,
        /// Time since its last beat.
        silent_for: Duration,
        /// The timeout it broke.
        timeout: Duration,
    },
    /// A task that must run for the life of the process ended.
    Stopped {
        /// The part's name.
        part: String,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stale {
                part,
                silent_for,
                timeout,
            } => write!(
                f,
                "{part}: no progress for {} (timeout {})",
                // Whole seconds, rounded up so that it never reads as the timeout itself.
                duration::format(Duration::from_secs(
                    silent_for.as_secs() + u64::from(silent_for.subsec_nanos() > 0)
                )),
                duration::format(*timeout)
            ),
            Self::Stopped { part } => write!(f, "{part}: stopped"),
        }
    }
}

/// The answer `/livez` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LivenessStatus {
    /// Every heartbeat is fresh and every task runs.
    Live,
    /// These parts failed (in name order).
    NotLive(Vec<Failure>),
}

/// Shared liveness of the process. Cloning shares the state.
#[derive(Debug, Clone)]
pub struct Liveness {
    timeout: Duration,
    parts: Arc<Mutex<BTreeMap<String, Part>>>,
}

impl Liveness {
    /// A liveness without parts whose heartbeats go stale after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            parts: Arc::default(),
        }
    }

    /// How old a heartbeat may get.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Registers a heartbeat named `part`, beaten now. Register it where the loop starts, not before:
    /// whatever precedes the loop (a CRD wait, an election) must not count against it.
    pub fn heartbeat(&self, part: impl Into<String>) -> Heartbeat {
        let heartbeat = Heartbeat {
            liveness: self.clone(),
            part: part.into(),
        };
        heartbeat.beat();
        heartbeat
    }

    /// Registers a running task named `part`; the part stops when the returned guard is dropped (the
    /// task returned or panicked), unless the task ends deliberately through [`TaskGuard::finish`].
    pub fn task(&self, part: impl Into<String>) -> TaskGuard {
        let part = part.into();
        self.lock().insert(part.clone(), Part::Running);
        TaskGuard {
            liveness: self.clone(),
            part: Some(part),
        }
    }

    /// The current answer.
    pub fn status(&self) -> LivenessStatus {
        self.status_at(Instant::now())
    }

    /// The answer at `now`: not live when a heartbeat is older than the timeout (exactly the timeout
    /// is still live) or a task stopped.
    pub fn status_at(&self, now: Instant) -> LivenessStatus {
        let failures: Vec<Failure> = self
            .lock()
            .iter()
            .filter_map(|(part, state)| match *state {
                Part::Beating(last) => {
                    let silent_for = now.saturating_duration_since(last);
                    (silent_for > self.timeout).then(|| Failure::Stale {
                        part: part.clone(),
                        silent_for,
                        timeout: self.timeout,
                    })
                }
                Part::Running => None,
                Part::Stopped => Some(Failure::Stopped { part: part.clone() }),
            })
            .collect();
        if failures.is_empty() {
            LivenessStatus::Live
        } else {
            LivenessStatus::NotLive(failures)
        }
    }

    fn set(&self, part: &str, state: Part) {
        let mut parts = self.lock();
        match parts.get_mut(part) {
            Some(current) => *current = state,
            None => {
                parts.insert(part.to_owned(), state);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Part>> {
        // Every write is a single insert or removal, so the map stays consistent if a holder panicked.
        self.parts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A loop's heartbeat; see [`Liveness::heartbeat`].
#[derive(Debug, Clone)]
pub struct Heartbeat {
    liveness: Liveness,
    part: String,
}

impl Heartbeat {
    /// The loop made progress now.
    pub fn beat(&self) {
        self.beat_at(Instant::now());
    }

    /// The loop made progress at `at`.
    pub fn beat_at(&self, at: Instant) {
        self.liveness.set(&self.part, Part::Beating(at));
    }
}

/// Held by a task that must run for the life of the process; see [`Liveness::task`].
#[derive(Debug)]
pub struct TaskGuard {
    liveness: Liveness,
    /// `None` once finished.
    part: Option<String>,
}

impl TaskGuard {
    /// The task ends on purpose (the process is shutting down): its part is removed, not stopped.
    pub fn finish(mut self) {
        if let Some(part) = self.part.take() {
            self.liveness.lock().remove(&part);
        }
    }
}

impl Drop for TaskGuard {
    // No log here: the runtime also drops the tasks it still holds when the process exits. The task
    // logs why it ended (a panic is logged by the panic hook), and /livez names the part when probed.
    fn drop(&mut self) {
        if let Some(part) = self.part.take() {
            self.liveness.set(&part, Part::Stopped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(60);

    #[test]
    fn default_timeout_is_ten_periods_but_at_least_a_minute() {
        assert_eq!(default_timeout(Duration::from_secs(1)), Duration::from_secs(60));
        assert_eq!(
            default_timeout(Duration::from_millis(20)),
            Duration::from_secs(60)
        );
        assert_eq!(default_timeout(Duration::from_secs(6)), Duration::from_secs(60));
        assert_eq!(default_timeout(Duration::from_secs(30)), Duration::from_secs(300));
        assert_eq!(default_timeout(Duration::MAX), Duration::MAX, "saturates");
    }

    #[test]
    fn a_configured_timeout_must_exceed_the_period() {
        let period = Duration::from_secs(1);
        assert_eq!(timeout(None, period), Ok(Duration::from_secs(60)));
        assert_eq!(
            timeout(Some(Duration::from_secs(5)), period),
            Ok(Duration::from_secs(5))
        );
        assert_eq!(
            timeout(Some(period), period),
            Err(Error::TimeoutNotAbovePeriod {
                timeout: period,
                period
            })
        );
        assert!(timeout(Some(Duration::ZERO), period).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn no_parts_is_live() {
        let liveness = Liveness::new(TIMEOUT);
        assert_eq!(
            liveness.status_at(Instant::now() + Duration::from_secs(3600)),
            LivenessStatus::Live
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_is_stale_only_past_the_timeout() {
        let liveness = Liveness::new(TIMEOUT);
        let t0 = Instant::now();
        let heartbeat = liveness.heartbeat("scheduling loop");
        heartbeat.beat_at(t0);
        assert_eq!(
            liveness.status_at(t0 + TIMEOUT),
            LivenessStatus::Live,
            "exactly the timeout"
        );
        let late = t0 + TIMEOUT + Duration::from_millis(1);
        assert_eq!(
            liveness.status_at(late),
            LivenessStatus::NotLive(vec![Failure::Stale {
                part: "scheduling loop".to_owned(),
                silent_for: TIMEOUT + Duration::from_millis(1),
                timeout: TIMEOUT,
            }])
        );
        heartbeat.beat_at(late);
        assert_eq!(
            liveness.status_at(late),
            LivenessStatus::Live,
            "a beat revives it"
        );
        assert_eq!(
            liveness.status_at(t0),
            LivenessStatus::Live,
            "an instant before the last beat is not stale"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn registering_beats_and_time_passes_with_tokio() {
        let liveness = Liveness::new(TIMEOUT);
        let heartbeat = liveness.heartbeat("controller");
        tokio::time::sleep(TIMEOUT).await;
        assert_eq!(liveness.status(), LivenessStatus::Live);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(matches!(liveness.status(), LivenessStatus::NotLive(_)));
        heartbeat.beat();
        assert_eq!(liveness.status(), LivenessStatus::Live);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ends_stops_the_process_unless_finished_on_purpose() {
        let liveness = Liveness::new(TIMEOUT);
        let pods = liveness.task("watch pods");
        let nodes = liveness.task("watch nodes");
        assert_eq!(
            liveness.status(),
            LivenessStatus::Live,
            "running tasks never go stale"
        );
        tokio::time::sleep(TIMEOUT * 2).await;
        assert_eq!(liveness.status(), LivenessStatus::Live);

        nodes.finish();
        assert_eq!(liveness.status(), LivenessStatus::Live, "finished on purpose");
        drop(pods);
        assert_eq!(
            liveness.status(),
            LivenessStatus::NotLive(vec![Failure::Stopped {
                part: "watch pods".to_owned()
            }])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_task_stops_the_process() {
        let liveness = Liveness::new(TIMEOUT);
        let guard = liveness.task("watch queues");
        let task = tokio::spawn(async move {
            let _guard = guard;
            panic!("bug in the watch");
        });
        assert!(task.await.is_err(), "the task panicked");
        assert_eq!(
            liveness.status(),
            LivenessStatus::NotLive(vec![Failure::Stopped {
                part: "watch queues".to_owned()
            }])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_failure_is_named_in_order() {
        let liveness = Liveness::new(TIMEOUT);
        let t0 = Instant::now();
        liveness.heartbeat("loop").beat_at(t0);
        drop(liveness.task("cache queues"));
        let _running = liveness.task("cache pods");
        let LivenessStatus::NotLive(failures) = liveness.status_at(t0 + Duration::from_secs(90)) else {
            panic!("expected failures");
        };
        let shown: Vec<String> = failures.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "cache queues: stopped",
                "loop: no progress for 1m30s (timeout 1m)"
            ]
        );
    }
}
