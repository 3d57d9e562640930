//! Quality metrics of a replay, pure: queueing delay and job completion time (mean, p50, p99, overall
//! and per queue), time-averaged GPU allocation, idle GPUs while a fitting job waits, Jain's fairness
//! index over allocated / fair share, evictions and the GPU-hours they threw away.
//!
//! Definitions (also in docs/quality.md):
//! - queueing delay: from a job's arrival to the first time it ran (all the pods it needs running);
//!   jobs that never started are counted apart, not averaged in;
//! - job completion time (JCT): arrival to completion, restarts after evictions included;
//! - percentiles are nearest-rank;
//! - time averages are over the arrival window (first arrival to last arrival), where the offered load
//!   is what the cluster was sized for;
//! - fair share: a policy-independent yardstick, the leaf queues' weighted max-min share of the GPUs
//!   over their current demand (GPUs of their arrived, unfinished jobs): each gets its demand up to its
//!   quota, the rest is divided by over-quota weight, water-filling;
//! - Jain's index over `allocated / fair share` of the queues with demand: `(sum x)^2 / (n sum x^2)`,
//!   1 when every queue holds the same fraction of its fair share;
//! - API writes decided: what the cycles asked the API server to write (binds, PodGroup statuses,
//!   events, pods' `PodScheduled` conditions), before the scheduler's applier merges or drops any; the
//!   load a backlog of waiting gangs puts on a live cluster's API server.

use serde::Serialize;

/// Mean and percentiles of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Values in the sample.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
}

impl Stats {
    /// Stats of the values (any order); all zero for an empty sample.
    #[must_use]
    pub fn of(values: &mut [f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Self {
            count: values.len(),
            mean,
            p50: percentile(values, 50.0),
            p99: percentile(values, 99.0),
        }
    }
}

/// The nearest-rank percentile `p` (0-100] of sorted values; 0 for none.
#[must_use]
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Jain's fairness index of the values; `None` without any value or when all are zero.
#[must_use]
pub fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    (!xs.is_empty() && squares > 0.0).then(|| sum * sum / (xs.len() as f64 * squares))
}

/// A queue's claim on the GPUs, for [`fair_shares`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    /// Deserved GPUs.
    pub quota: f64,
    /// Over-quota weight.
    pub weight: f64,
    /// GPUs its jobs ask for now.
    pub demand: f64,
}

/// Weighted max-min fair shares of `capacity`: each claim gets its demand up to its quota (scaled down
/// together if the quotas over-commit the capacity), then what is left is water-filled by weight among
/// the claims still short of their demand.
#[must_use]
pub fn fair_shares(capacity: f64, claims: &[Claim]) -> Vec<f64> {
    let mut share: Vec<f64> = claims.iter().map(|c| c.demand.min(c.quota).max(0.0)).collect();
    let granted: f64 = share.iter().sum();
    if granted > capacity && granted > 0.0 {
        let scale = capacity / granted;
        share.iter_mut().for_each(|s| *s *= scale);
        return share;
    }
    let mut left = capacity - granted;
    let mut open: Vec<usize> = (0..claims.len())
        .filter(|i| claims[*i].weight > 0.0 && claims[*i].demand > share[*i])
        .collect();
    while left > 1e-9 && !open.is_empty() {
        let total: f64 = open.iter().map(|i| claims[*i].weight).sum();
        // Claims that the next even pour would fill: fill them exactly and pour again.
        let full: Vec<usize> = open
            .iter()
            .copied()
            .filter(|i| share[*i] + left * claims[*i].weight / total >= claims[*i].demand)
            .collect();
        if full.is_empty() {
            for i in &open {
                share[*i] += left * claims[*i].weight / total;
            }
            left = 0.0;
        } else {
            for i in &full {
                left -= claims[*i].demand - share[*i];
                share[*i] = claims[*i].demand;
            }
            open.retain(|i| !full.contains(i));
        }
    }
    share
}

/// A time average of a piecewise-constant value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TimeAverage {
    /// Integral of the value over the time counted.
    pub integral: f64,
    /// Time counted (ms).
    pub time: f64,
}

impl TimeAverage {
    /// Counts `value` held for `dt` ms.
    pub fn add(&mut self, value: f64, dt: f64) {
        if dt > 0.0 {
            self.integral += value * dt;
            self.time += dt;
        }
    }

    /// The average; 0 over no time.
    #[must_use]
    pub fn mean(&self) -> f64 {
        if self.time > 0.0 {
            self.integral / self.time
        } else {
            0.0
        }
    }
}

/// What happened to one job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    /// Leaf queue index (the workload's).
    pub queue: usize,
    /// Arrival (ms).
    pub arrival: i64,
    /// First start (ms), if it started.
    pub first_start: Option<i64>,
    /// Completion (ms), if it finished.
    pub end: Option<i64>,
    /// Times a run was broken by an eviction.
    pub evictions: u32,
    /// Pods evicted.
    pub pods_evicted: u32,
    /// GPU-milli x ms of runs thrown away by evictions.
    pub lost: f64,
    /// Some but not all of the pods it needs ran at once at the end of some cycle.
    pub partial: bool,
}

/// Per-queue figures of a replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueSummary {
    /// Queue.
    pub queue: String,
    /// Jobs.
    pub jobs: usize,
    /// Jobs finished.
    pub finished: usize,
    /// Jobs that never started.
    pub never_started: usize,
    /// Queueing delay (s) of jobs that started.
    pub delay: Stats,
    /// Completion time (s) of finished jobs.
    pub jct: Stats,
    /// Time-averaged GPUs held.
    pub gpus: f64,
    /// Time-averaged fair share (GPUs).
    pub fair_share: f64,
    /// Runs broken by evictions.
    pub evictions: u32,
    /// GPU-hours thrown away by evictions.
    pub lost_gpu_hours: f64,
}

/// The API writes a replay's cycles decided, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Writes {
    /// Pod binds.
    pub binds: u64,
    /// PodGroup statuses.
    pub statuses: u64,
    /// Events.
    pub events: u64,
    /// Pods' `PodScheduled=False` conditions.
    pub pod_conditions: u64,
}

impl Writes {
    /// Writes other than binds per bind (0 without binds).
    #[must_use]
    pub fn per_bind(&self) -> f64 {
        if self.binds == 0 {
            return 0.0;
        }
        (self.statuses + self.events + self.pod_conditions) as f64 / self.binds as f64
    }
}

/// Figures of one policy's replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Policy.
    pub policy: String,
    /// Jobs.
    pub jobs: usize,
    /// Jobs finished.
    pub finished: usize,
    /// Jobs that never started.
    pub never_started: usize,
    /// Queueing delay (s) of jobs that started.
    pub delay: Stats,
    /// Completion time (s) of finished jobs.
    pub jct: Stats,
    /// Time-averaged GPU allocation over the arrival window, % of the GPUs.
    pub allocation_pct: f64,
    /// Time-averaged GPUs idle while a waiting job's missing GPUs were fewer than the idle ones, % of
    /// the GPUs (fragmentation and quota walls).
    pub idle_while_fit_pct: f64,
    /// Share of the window during which some waiting job would have fit in the idle GPUs, %.
    pub fit_waiting_time_pct: f64,
    /// Time-averaged GPUs held by jobs that have not all the pods they need (idle), % of the GPUs.
    pub held_idle_pct: f64,
    /// Time-averaged Jain's index over allocated / fair share.
    pub jain: f64,
    /// Jobs that ran partially (some but not all needed pods) at some cycle's end.
    pub partial_jobs: usize,
    /// Runs broken by evictions.
    pub evictions: u32,
    /// Pods evicted.
    pub pods_evicted: u32,
    /// GPU-hours thrown away by evictions.
    pub lost_gpu_hours: f64,
    /// Cycles run (not skipped) by the core.
    pub cycles: u64,
    /// API writes the cycles decided.
    pub writes: Writes,
    /// Wall-clock seconds of the replay.
    pub wall_seconds: f64,
    /// The cycles run, by what started them and whether they placed or evicted anything.
    pub cycle_kinds: Vec<CycleKind>,
    /// Per leaf queue.
    pub queues: Vec<QueueSummary>,
}

/// What started a cycle of a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CycleTrigger {
    /// Jobs arrived since the last cycle, and none finished.
    Arrivals,
    /// Jobs finished since the last cycle (some may have arrived too).
    Completions,
    /// No job arrived or finished: a cycle the last one asked for (after evictions, an exhausted
    /// attempt budget, or a time-based rule falling due).
    FollowUp,
}

impl CycleTrigger {
    /// Its name in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Arrivals => "arrivals",
            Self::Completions => "completions",
            Self::FollowUp => "follow-up",
        }
    }
}

/// Cycles of one trigger and result: how many, and the wall-clock seconds they took (where a replay's
/// time goes: a cycle that decides nothing is far from free).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CycleKind {
    /// What started them.
    pub trigger: CycleTrigger,
    /// Whether they placed or evicted some pod.
    pub decided: bool,
    /// How many ran.
    pub cycles: u64,
    /// Wall-clock seconds they took.
    pub seconds: f64,
}

/// Milli-GPU x ms in a GPU-hour.
pub const GPU_HOUR: f64 = 1000.0 * 3_600_000.0;

/// Counts, delay and JCT of a set of jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JobFigures {
    /// Jobs.
    pub jobs: usize,
    /// Finished.
    pub finished: usize,
    /// Never started.
    pub never_started: usize,
    /// Queueing delay (s) of those that started.
    pub delay: Stats,
    /// Completion time (s) of those that finished.
    pub jct: Stats,
    /// Runs broken by evictions.
    pub evictions: u32,
    /// Pods evicted.
    pub pods_evicted: u32,
    /// GPU-hours thrown away.
    pub lost_gpu_hours: f64,
}

/// Delay and JCT (seconds) and counts of a set of jobs.
#[must_use]
pub fn job_stats<'a>(jobs: impl Iterator<Item = &'a JobRecord>) -> JobFigures {
    let (mut n, mut finished, mut never) = (0, 0, 0);
    let (mut delays, mut jcts) = (Vec::new(), Vec::new());
    let (mut evictions, mut pods, mut lost) = (0u32, 0u32, 0.0);
    for j in jobs {
        n += 1;
        match j.first_start {
            Some(s) => delays.push((s - j.arrival) as f64 / 1000.0),
            None => never += 1,
        }
        if let Some(e) = j.end {
            finished += 1;
            jcts.push((e - j.arrival) as f64 / 1000.0);
        }
        evictions = evictions.saturating_add(j.evictions);
        pods = pods.saturating_add(j.pods_evicted);
        lost += j.lost;
    }
    JobFigures {
        jobs: n,
        finished,
        never_started: never,
        delay: Stats::of(&mut delays),
        jct: Stats::of(&mut jcts),
        evictions,
        pods_evicted: pods,
        lost_gpu_hours: lost / GPU_HOUR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Stats::of(&mut v);
        assert_eq!((s.count, s.p50, s.p99), (100, 50.0, 99.0));
        assert!((s.mean - 50.5).abs() < 1e-12);
        let mut one = [7.0];
        let s = Stats::of(&mut one);
        assert_eq!((s.p50, s.p99, s.mean), (7.0, 7.0, 7.0));
        assert_eq!(Stats::of(&mut []), Stats::default());
    }

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain(&[0.5, 0.5, 0.5]), Some(1.0));
        let j = jain(&[1.0, 0.0, 0.0, 0.0]).expect("some");
        assert!((j - 0.25).abs() < 1e-12, "{j}");
        // (1 + 3)^2 / (2 (1 + 9)) = 16 / 20.
        assert!((jain(&[1.0, 3.0]).expect("some") - 0.8).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    fn claim(quota: f64, weight: f64, demand: f64) -> Claim {
        Claim {
            quota,
            weight,
            demand,
        }
    }

    #[test]
    fn fair_shares_fill_quotas_then_water_fill_by_weight() {
        // 10 GPUs; quotas 2 and 2; demands 1 and 20: A gets its 1, B its 2, the 7 left go to B (A is
        // satisfied): B 9.
        let s = fair_shares(10.0, &[claim(2.0, 1.0, 1.0), claim(2.0, 1.0, 20.0)]);
        assert_eq!(s, vec![1.0, 9.0]);
        // Both hungry, weights 1 and 3: quotas 2 + 2, the 6 left split 1.5 / 4.5.
        let s = fair_shares(10.0, &[claim(2.0, 1.0, 50.0), claim(2.0, 3.0, 50.0)]);
        assert!((s[0] - 3.5).abs() < 1e-9 && (s[1] - 6.5).abs() < 1e-9, "{s:?}");
        // Water-filling: C's demand caps it and the rest flows to the others.
        let s = fair_shares(
            12.0,
            &[
                claim(0.0, 1.0, 100.0),
                claim(0.0, 1.0, 100.0),
                claim(0.0, 1.0, 2.0),
            ],
        );
        assert!(
            (s[0] - 5.0).abs() < 1e-9 && (s[1] - 5.0).abs() < 1e-9 && (s[2] - 2.0).abs() < 1e-9,
            "{s:?}"
        );
        // No demand, no share; over-committed quotas scale down.
        assert_eq!(fair_shares(4.0, &[claim(4.0, 1.0, 0.0)]), vec![0.0]);
        assert_eq!(
            fair_shares(4.0, &[claim(4.0, 1.0, 4.0), claim(4.0, 1.0, 4.0)]),
            vec![2.0, 2.0]
        );
    }

    #[test]
    fn time_average_weights_by_duration() {
        let mut a = TimeAverage::default();
        a.add(10.0, 1.0);
        a.add(0.0, 3.0);
        a.add(99.0, 0.0);
        assert!((a.mean() - 2.5).abs() < 1e-12);
        assert_eq!(TimeAverage::default().mean(), 0.0);
    }

    #[test]
    fn job_stats_separate_never_started_and_count_losses() {
        let job = |arrival, start: Option<i64>, end: Option<i64>, lost| JobRecord {
            queue: 0,
            arrival,
            first_start: start,
            end,
            evictions: u32::from(lost > 0.0),
            pods_evicted: if lost > 0.0 { 2 } else { 0 },
            lost,
            partial: false,
        };
        let jobs = [
            job(0, Some(10_000), Some(20_000), 0.0),
            job(0, Some(30_000), Some(90_000), 2.0 * GPU_HOUR),
            job(5_000, None, None, 0.0),
        ];
        let f = job_stats(jobs.iter());
        assert_eq!(
            (f.jobs, f.finished, f.never_started, f.evictions, f.pods_evicted),
            (3, 2, 1, 1, 2)
        );
        assert_eq!((f.delay.count, f.delay.mean, f.delay.p99), (2, 20.0, 30.0));
        assert_eq!((f.jct.mean, f.jct.p50), (55.0, 20.0));
        assert!((f.lost_gpu_hours - 2.0).abs() < 1e-12);
    }
}
