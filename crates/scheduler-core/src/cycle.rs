//! One scheduling cycle, pure: model + configuration + time in, decisions out.

use std::time::{Duration, Instant};

use crate::actions;
use crate::config::{ActionKind, Config};
use crate::framework::decisions::Decisions;
use crate::framework::report::queues::QueueFigures;
use crate::framework::{Session, SessionStats};
use crate::model::{Cluster, GroupKey, Millis, Quiet};

/// What one cycle produced.
#[derive(Debug)]
pub struct CycleResult {
    /// What to do.
    pub decisions: Decisions,
    /// What it took.
    pub stats: SessionStats,
    /// Time spent opening the session (gangs, indexes, fair share).
    pub open: Duration,
    /// Time spent per action, in order (observability only; decisions never depend on it).
    pub actions: Vec<(ActionKind, Duration)>,
    /// Nothing changed since a cycle that decided nothing to place, evict or reserve, and no time-based
    /// rule fell due: the cycle was not run (its decisions are empty).
    pub skipped: bool,
    /// With usage-based fair share on (`usageDBConfig`), what every queue holds at the end of the cycle
    /// and the capacity shared, for the loop to fold into its usage record; `None` when off or
    /// skipped (nothing changed since the last sample).
    pub usage_sample: Option<crate::fairshare::UsageSample>,
    /// Each queue's allocated, deserved, fair share and limit after the cycle (for metrics; empty when
    /// the cycle was skipped, as nothing changed).
    pub queues: Vec<QueueFigures>,
}

/// A cycle that panicked and was contained by [`run_contained`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    /// The PodGroup of the gang the cycle was working on, now set aside until it changes; `None` when the
    /// panic struck outside any gang (the cycle is retried after the next change).
    pub group: Option<GroupKey>,
    /// The panic's message.
    pub message: String,
}

/// [`run`], surviving a panic: the cycle's decisions are dropped (nothing was sent), its changes to the
/// model are undone, node accounting is recounted, and the gang it was working on is set aside with a
/// blocking problem that its PodGroup's status, events and `kai explain` show. No input should reach a
/// panic; this keeps one that does from stopping scheduling for everyone (a crash loop would).
///
/// # Errors
/// The [`Crash`], for the caller to log and count.
pub fn run_contained(cluster: &mut Cluster, config: &Config, now: Millis) -> Result<CycleResult, Crash> {
    contain(cluster, |cluster| run(cluster, config, now))
}

/// Runs `cycle` over the model as [`run_contained`] runs [`run`] (separate so tests can make a cycle
/// panic on purpose).
///
/// # Errors
/// The [`Crash`] when `cycle` panicked.
pub fn contain<F>(cluster: &mut Cluster, cycle: F) -> Result<CycleResult, Crash>
where
    F: FnOnce(&mut Cluster) -> CycleResult,
{
    cluster.cycle_completed();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cycle(&mut *cluster)));
    match outcome {
        Ok(result) => Ok(result),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|m| (*m).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            let group = cluster
                .recover_from_crash(&message)
                .map(|g| cluster.group(g).key.clone());
            Err(Crash { group, message })
        }
    }
}

/// Runs the configured actions over the model and returns the decisions. The model keeps the assumed
/// placements (binds in flight, reservations, evictions in flight) the decisions imply.
///
/// A cycle is a pure function of the model and the time, and the time matters only through deadlines
/// the cycle records. So after a cycle that placed, evicted and reserved nothing, the next one is
/// skipped until the model changes ([`crate::model::Epochs::changes`]) or the earliest deadline passes
/// (a rule's, or a held-back status's, [`SessionStats::report_due`]): it would decide the same
/// nothing, and an idle cluster costs nothing to schedule.
pub fn run(cluster: &mut Cluster, config: &Config, now: Millis) -> CycleResult {
    if let Some(quiet) = cluster.quiet
        && quiet.changes == cluster.epochs.changes
        && now < quiet.until
    {
        return CycleResult {
            decisions: Decisions::default(),
            stats: SessionStats::default(),
            open: Duration::ZERO,
            actions: Vec::new(),
            skipped: true,
            usage_sample: None,
            queues: Vec::new(),
        };
    }
    let started = Instant::now();
    let mut ssn = Session::open(cluster, config, now);
    let open = started.elapsed();
    let mut timings = Vec::with_capacity(config.actions.len());
    for action in &config.actions {
        let t = Instant::now();
        actions::run(&mut ssn, *action);
        timings.push((*action, t.elapsed()));
    }
    crate::framework::report::status::timeouts(&mut ssn);
    let usage_sample = config
        .usage_db
        .is_some()
        .then(|| ssn.fairness.usage_sample(ssn.cluster));
    let queues = crate::framework::report::queues::figures(&ssn);
    let (decisions, stats) = ssn.close();
    let settled = !stats.placement_changed
        && decisions.binds.is_empty()
        && decisions.evictions.is_empty()
        && decisions.reservations.is_empty()
        && !stats.attempt_budget_exhausted;
    if settled {
        let until = [stats.next_deadline, stats.report_due]
            .into_iter()
            .flatten()
            .min();
        cluster.quiet = Some(Quiet {
            changes: cluster.epochs.changes,
            until: until.unwrap_or(Millis::MAX),
        });
    } else {
        cluster.epochs.changed();
        cluster.quiet = None;
    }
    CycleResult {
        decisions,
        stats,
        open,
        actions: timings,
        skipped: false,
        usage_sample,
        queues,
    }
}
