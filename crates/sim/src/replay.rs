//! Dynamic replay: jobs arrive and complete on a simulated clock, and the scheduler's real decision core
//! (`cycle::run` with the policy's `Config`, through `scheduler_core::sim::Sim`) decides every bind and
//! eviction.
//!
//! The clock is event-driven: a cycle runs only when something changed (an arrival, a completion, or
//! the last cycle evicted, so the next places on what it freed), at ticks of a fixed period (the
//! scheduler's cycle interval, default 10 s of simulated time): every event up to a tick is taken in,
//! then one cycle runs at the tick. After binds alone no follow-up cycle runs: allocate placed all
//! that fit, and nothing else changed. A completion frees its GPUs at its exact time (the allocation
//! figures see that), the scheduler sees it at the next tick, as it would. A time-based rule of the core
//! (a deadline it returns) also wakes it.
//!
//! A job runs once every pod it needs runs (its gang minimum; under the no-gang policy, all its pods:
//! a distributed job cannot progress with workers missing) and completes `duration` later. An evicted
//! pod goes back pending (its controller recreates it) and the run it was part of is lost: the job
//! restarts from scratch when it has all it needs again, and the GPU-time of the broken run counts as
//! lost.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use scheduler_core::config::{ActionKind, Config};
use scheduler_core::model::Queue;
use scheduler_core::model::queue::QueueResourceSpec;
use scheduler_core::model::resources::GPU;
use scheduler_core::sim::{GangSpec, Sim};
use serde::Serialize;

use crate::metrics::{self, Claim, CycleKind, CycleTrigger, JobRecord, QueueSummary, Summary, TimeAverage};
use crate::workload::{Checked, Millis};

/// Namespace of the replayed PodGroups and pods.
const NAMESPACE: &str = "sim";

/// A scheduling policy: a way to submit the jobs and the core's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// No gangs, no queues (kube-scheduler's way): every pod its own PodGroup of one in one unlimited
    /// queue, oldest first; a job's pods start as they fit (partial starts). Actions: allocate.
    FifoNoGang,
    /// Gangs (all or nothing), each queue isolated: limit = quota, no borrowing. Actions: allocate.
    GangIsolated,
    /// Gangs, hierarchical fair share: quota, over-quota weight, borrowing idle GPUs up to the limit.
    /// Actions: allocate.
    GangFair,
    /// As `GangFair`, and queues below their fair share take GPUs back (reclaim), higher priority
    /// preempts lower in a queue. Actions: allocate, reclaim, preempt.
    GangReclaim,
    /// As `GangReclaim` plus consolidation (moving gangs to make room for one that fits nowhere).
    /// Actions: allocate, consolidation, reclaim, preempt.
    GangConsolidate,
}

impl Policy {
    /// Every policy, in the order of the report.
    pub const ALL: [Self; 5] = [
        Self::FifoNoGang,
        Self::GangIsolated,
        Self::GangFair,
        Self::GangReclaim,
        Self::GangConsolidate,
    ];

    /// How costly a replay under it is, relative to the others (higher: costlier): each adds work to
    /// the one before (queues, then fair share, then victim searches, then moves). On the full Philly
    /// trace they took 16, 23, 27, 43 and 47 s of CPU in this order. Only the order in which
    /// [`replay_all`] starts them reads it.
    #[must_use]
    pub fn cost_rank(self) -> u8 {
        match self {
            Self::FifoNoGang => 0,
            Self::GangIsolated => 1,
            Self::GangFair => 2,
            Self::GangReclaim => 3,
            Self::GangConsolidate => 4,
        }
    }

    /// Name on the command line and in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::FifoNoGang => "fifo-nogang",
            Self::GangIsolated => "gang-isolated",
            Self::GangFair => "gang-fair",
            Self::GangReclaim => "gang-reclaim",
            Self::GangConsolidate => "gang-consolidate",
        }
    }

    /// The policy of a name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    fn gangs(self) -> bool {
        self != Self::FifoNoGang
    }

    /// The core's configuration for the policy: `base` (the scheduler's configuration, by default its
    /// defaults) with the policy's actions; GPU sharing on when the workload shares GPUs, without
    /// reservation pods, which the replay does not play.
    #[must_use]
    pub fn config(self, shares_gpus: bool, base: &Config) -> Config {
        let actions = match self {
            Self::FifoNoGang | Self::GangIsolated | Self::GangFair => vec![ActionKind::Allocate],
            Self::GangReclaim => vec![ActionKind::Allocate, ActionKind::Reclaim, ActionKind::Preempt],
            Self::GangConsolidate => vec![
                ActionKind::Allocate,
                ActionKind::Consolidation,
                ActionKind::Reclaim,
                ActionKind::Preempt,
            ],
        };
        let mut config = Config {
            actions,
            ..base.clone()
        };
        if shares_gpus {
            config.plugins.gpusharing.enabled = true;
            config.plugins.gpusharing.reservation_pods = false;
        }
        config
    }
}

/// Replay settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Cycle period (ms of simulated time).
    pub tick: Millis,
    /// Most cycles before giving up (a policy that keeps evicting and placing forever).
    pub max_cycles: u64,
    /// The scheduler's configuration each policy starts from (see [`Policy::config`]).
    pub config: Config,
    /// Replays with the core's backlog of waiting gangs off (`Cluster::without_backlog`): every
    /// waiting gang in every session. The decisions must be the same, only slower; a check of the
    /// backlog (`kai sim --without-backlog`), not a policy.
    pub without_backlog: bool,
    /// How many policies [`replay_all`] replays at once (`None`: as many as the machine has cores).
    pub threads: Option<std::num::NonZeroUsize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            tick: 10_000,
            max_cycles: 50_000_000,
            config: Config::default(),
            without_backlog: false,
            threads: None,
        }
    }
}

/// What a replay produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Policy.
    pub policy: Policy,
    /// Per job, in the workload's arrival order.
    pub jobs: Vec<JobRecord>,
    /// Per leaf queue (workload index): time-averaged GPUs held (milli).
    pub queue_gpus: BTreeMap<usize, TimeAverage>,
    /// Per leaf queue: time-averaged fair share (milli).
    pub queue_fair: BTreeMap<usize, TimeAverage>,
    /// Allocated GPU-milli, time-averaged over the arrival window.
    pub allocated: TimeAverage,
    /// Idle GPU-milli counted while a waiting job's missing GPUs were at most the idle ones (zero
    /// otherwise).
    pub idle_while_fit: TimeAverage,
    /// 1 while a waiting job would fit in the idle GPUs, else 0.
    pub fit_waiting: TimeAverage,
    /// GPU-milli held by jobs without all the pods they need.
    pub held_idle: TimeAverage,
    /// Jain's index over allocated / fair share, while some queue has demand.
    pub jain: TimeAverage,
    /// Allocated GPU-milli over the whole replay (not only the arrival window).
    pub allocated_all: TimeAverage,
    /// GPU-milli held by jobs without all the pods they need, over the whole replay.
    pub held_idle_all: TimeAverage,
    /// Allocated GPU-milli after each change: (time, allocated).
    pub timeline: Vec<(Millis, i64)>,
    /// Cycles run (not skipped).
    pub cycles: u64,
    /// Cycles run, by trigger and whether they placed or evicted anything.
    pub cycle_kinds: BTreeMap<(CycleTrigger, bool), CycleKind>,
    /// API writes the cycles decided.
    pub writes: metrics::Writes,
    /// The replay stopped at `max_cycles`.
    pub stopped_early: bool,
    /// Highest allocated GPU-milli seen (never above the capacity).
    pub peak_allocated: i64,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
    /// Simulated end (ms).
    pub end: Millis,
}

/// A job's state during the replay.
#[derive(Clone, Debug, Default)]
struct Run {
    running: u32,
    need: u32,
    run_start: Option<Millis>,
    epoch: u32,
    arrived: bool,
    done: bool,
}

struct Replay<'a> {
    w: &'a Checked,
    policy: Policy,
    sim: Sim,
    runs: Vec<Run>,
    records: Vec<JobRecord>,
    pods: HashMap<Arc<str>, usize>,
    /// Pods bound and not yet evicted or completed, by name: what an eviction frees.
    bound: HashSet<Arc<str>>,
    completions: BinaryHeap<Reverse<(Millis, usize, u32)>>,
    capacity: i64,
    allocated: i64,
    held_idle: i64,
    queue_alloc: Vec<i64>,
    queue_demand: Vec<i64>,
    /// Missing GPU-milli of each waiting job: value -> jobs.
    waiting: BTreeMap<i64, u32>,
    now: Millis,
    window_end: Millis,
    out: Outcome,
}

/// Name of a job's PodGroup (gang policies) or of its `k`-th pod's own PodGroup (no gangs).
fn group_name(job: usize, pod: Option<u32>) -> String {
    match pod {
        None => format!("j{job:06}"),
        Some(k) => format!("j{job:06}p{k}"),
    }
}

impl<'a> Replay<'a> {
    fn new(w: &'a Checked, policy: Policy, options: &Options) -> Self {
        let shares = w.jobs.iter().any(|j| j.shared);
        let mut sim = Sim::new();
        sim.config = policy.config(shares, &options.config);
        sim.cluster.without_backlog = options.without_backlog;
        for n in &w.workload.nodes {
            let labels: Vec<(&str, &str)> = n.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let cpu_milli = (n.cpu * 1000.0).round() as i64;
            for i in 0..n.count {
                let name = if n.count == 1 {
                    n.name.clone()
                } else {
                    format!("{}-{i}", n.name)
                };
                sim.node_with(
                    &name,
                    cpu_milli,
                    i64::from(n.memory_gib),
                    i64::from(n.gpus),
                    &labels,
                    &[],
                );
            }
        }
        let capacity = w.gpus * 1000;
        if policy.gangs() {
            for (i, q) in w.workload.queues.iter().enumerate() {
                let mut queue = Queue::new(&q.name);
                queue.parent_name = q.parent.as_deref().map(Into::into);
                if let Some(p) = q.priority {
                    queue.priority = p;
                }
                let limit = if policy == Policy::GangIsolated {
                    q.quota
                } else {
                    q.limit.unwrap_or(-1.0)
                };
                queue.resources[GPU] = QueueResourceSpec {
                    quota: q.quota,
                    limit,
                    weight: q.over_quota_weight,
                };
                queue.created = i64::try_from(i).unwrap_or_default();
                sim.queue_spec(queue);
            }
        } else {
            sim.queue("fifo", None, w.gpus as f64, -1.0, 1.0);
        }
        let n = w.workload.queues.len();
        let window_end = w.jobs.last().map_or(0, |j| j.arrival);
        Self {
            w,
            policy,
            sim,
            runs: vec![Run::default(); w.jobs.len()],
            records: w
                .jobs
                .iter()
                .map(|j| JobRecord {
                    queue: j.queue,
                    arrival: j.arrival,
                    first_start: None,
                    end: None,
                    evictions: 0,
                    pods_evicted: 0,
                    lost: 0.0,
                    partial: false,
                })
                .collect(),
            pods: HashMap::new(),
            bound: HashSet::new(),
            completions: BinaryHeap::new(),
            capacity,
            allocated: 0,
            held_idle: 0,
            queue_alloc: vec![0; n],
            queue_demand: vec![0; n],
            waiting: BTreeMap::new(),
            now: 0,
            window_end,
            out: Outcome {
                policy,
                jobs: Vec::new(),
                queue_gpus: BTreeMap::new(),
                queue_fair: BTreeMap::new(),
                allocated: TimeAverage::default(),
                idle_while_fit: TimeAverage::default(),
                fit_waiting: TimeAverage::default(),
                held_idle: TimeAverage::default(),
                jain: TimeAverage::default(),
                allocated_all: TimeAverage::default(),
                held_idle_all: TimeAverage::default(),
                timeline: Vec::new(),
                cycles: 0,
                cycle_kinds: BTreeMap::new(),
                writes: metrics::Writes::default(),
                stopped_early: false,
                peak_allocated: 0,
                wall_seconds: 0.0,
                end: 0,
            },
        }
    }

    /// Counts the state held since `self.now` up to `t` (clipped to the arrival window).
    fn advance(&mut self, t: Millis) {
        let all = (t - self.now) as f64;
        self.out.allocated_all.add(self.allocated as f64, all);
        self.out.held_idle_all.add(self.held_idle as f64, all);
        let from = self.now.min(self.window_end);
        let to = t.min(self.window_end);
        let dt = (to - from) as f64;
        if dt > 0.0 {
            let free = self.capacity - self.allocated;
            self.out.allocated.add(self.allocated as f64, dt);
            self.out.held_idle.add(self.held_idle as f64, dt);
            let fits = self.waiting.keys().next().is_some_and(|m| *m <= free);
            self.out
                .idle_while_fit
                .add(if fits { free as f64 } else { 0.0 }, dt);
            self.out.fit_waiting.add(if fits { 1.0 } else { 0.0 }, dt);
            let leaves = &self.w.leaves;
            let claims: Vec<Claim> = leaves
                .iter()
                .map(|q| {
                    let spec = &self.w.workload.queues[*q];
                    Claim {
                        quota: spec.quota * 1000.0,
                        weight: spec.over_quota_weight,
                        demand: self.queue_demand[*q] as f64,
                    }
                })
                .collect();
            let fair = metrics::fair_shares(self.capacity as f64, &claims);
            let mut ratios = Vec::with_capacity(leaves.len());
            for (q, f) in leaves.iter().zip(&fair) {
                let held = self.queue_alloc[*q] as f64;
                self.out.queue_gpus.entry(*q).or_default().add(held, dt);
                self.out.queue_fair.entry(*q).or_default().add(*f, dt);
                if *f > 0.0 {
                    ratios.push(held / f);
                }
            }
            if let Some(j) = metrics::jain(&ratios) {
                self.out.jain.add(j, dt);
            } else if !ratios.is_empty() {
                // Demand but nothing held anywhere: everyone equally at zero.
                self.out.jain.add(1.0, dt);
            }
        }
        self.now = self.now.max(t);
    }

    /// GPU-milli a waiting job still misses, if it waits.
    fn missing(&self, job: usize) -> Option<i64> {
        let r = &self.runs[job];
        (r.arrived && !r.done && r.run_start.is_none()).then(|| {
            let w = self.w;
            let j = &w.jobs[job];
            j.gpu_milli * i64::from(r.need.saturating_sub(r.running))
        })
    }

    fn held_idle_of(&self, job: usize) -> i64 {
        let r = &self.runs[job];
        if r.run_start.is_none() && !r.done {
            self.w.jobs[job].gpu_milli * i64::from(r.running)
        } else {
            0
        }
    }

    /// Runs `change` on a job, keeping the waiting set and the idle-held GPUs in step.
    fn update(&mut self, job: usize, change: impl FnOnce(&mut Self)) {
        if let Some(m) = self.missing(job).filter(|m| *m > 0)
            && let Some(n) = self.waiting.get_mut(&m)
        {
            *n -= 1;
            if *n == 0 {
                self.waiting.remove(&m);
            }
        }
        self.held_idle -= self.held_idle_of(job);
        change(self);
        self.held_idle += self.held_idle_of(job);
        if let Some(m) = self.missing(job).filter(|m| *m > 0) {
            *self.waiting.entry(m).or_default() += 1;
        }
    }

    fn arrive(&mut self, job: usize) {
        let w = self.w;
        let j = &w.jobs[job];
        let created = j.arrival;
        let queue_name = if self.policy.gangs() {
            self.w.workload.queues[j.queue].name.clone()
        } else {
            "fifo".to_owned()
        };
        let spec = |name: &str, pods: u32| {
            let mut s = GangSpec::new(name, &queue_name, pods)
                .namespace(NAMESPACE)
                .cpu_mem(j.cpu_milli, j.memory_gib)
                .created(created);
            s = if j.shared {
                s.fraction(u32::try_from(j.gpu_milli).unwrap_or(0))
            } else {
                s.gpus(u32::try_from(j.gpu_milli / 1000).unwrap_or(0))
            };
            if let Some(p) = j.priority {
                s = s.priority(p);
            }
            if let Some(p) = j.preemptible {
                s = s.preemptible(p);
            }
            s
        };
        if self.policy.gangs() {
            let name = group_name(job, None);
            self.sim.gang(spec(&name, j.pods).min(j.min_member));
            for k in 0..j.pods {
                self.pods.insert(format!("{name}-{k}").into(), job);
            }
        } else {
            for k in 0..j.pods {
                let name = group_name(job, Some(k));
                self.sim.gang(spec(&name, 1));
                self.pods.insert(format!("{name}-0").into(), job);
            }
        }
        let need = if self.policy.gangs() { j.min_member } else { j.pods };
        self.queue_demand[j.queue] += j.total_gpu_milli();
        self.update(job, |s| {
            s.runs[job].need = need;
            s.runs[job].arrived = true;
        });
    }

    fn complete(&mut self, job: usize, at: Millis) {
        let w = self.w;
        let j = &w.jobs[job];
        let held = j.gpu_milli * i64::from(self.runs[job].running);
        self.allocated -= held;
        self.queue_alloc[j.queue] -= held;
        self.queue_demand[j.queue] -= j.total_gpu_milli();
        self.update(job, |s| {
            s.runs[job].running = 0;
            s.runs[job].done = true;
        });
        self.records[job].end = Some(at);
        let groups: Vec<String> = if self.policy.gangs() {
            vec![group_name(job, None)]
        } else {
            (0..j.pods).map(|k| group_name(job, Some(k))).collect()
        };
        for g in groups {
            self.sim.remove_gang(NAMESPACE, &g);
            if self.policy.gangs() {
                for k in 0..j.pods {
                    let pod = format!("{g}-{k}");
                    self.pods.remove(pod.as_str());
                    self.bound.remove(pod.as_str());
                }
            } else {
                let pod = format!("{g}-0");
                self.pods.remove(pod.as_str());
                self.bound.remove(pod.as_str());
            }
        }
        self.out.timeline.push((at, self.allocated));
    }

    /// One cycle at `tick`, started by `trigger`: whether the next tick needs a cycle even without an
    /// event, and the earliest deadline of a time-based rule.
    fn cycle(&mut self, tick: Millis, trigger: CycleTrigger) -> (bool, Option<Millis>) {
        self.sim.now = tick;
        let started = Instant::now();
        let result = self.sim.step();
        if !result.skipped {
            self.out.cycles += 1;
            let decided = !result.decisions.binds.is_empty() || !result.decisions.evictions.is_empty();
            let kind = self
                .out
                .cycle_kinds
                .entry((trigger, decided))
                .or_insert(CycleKind {
                    trigger,
                    decided,
                    cycles: 0,
                    seconds: 0.0,
                });
            kind.cycles += 1;
            kind.seconds += started.elapsed().as_secs_f64();
        }
        let d = &result.decisions;
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let writes = &mut self.out.writes;
        writes.binds += count(d.binds.len());
        writes.statuses += count(d.group_statuses.len());
        writes.events += count(d.events.len());
        writes.pod_conditions += count(d.pod_conditions.len());
        let mut touched = Vec::new();
        for e in &d.evictions {
            let Some(&job) = self.pods.get(&e.name) else {
                continue;
            };
            // The core decides evictions of pods that hold a node only; one that does not frees nothing.
            let held = self.bound.remove(&e.name);
            debug_assert!(held, "eviction of {} which holds no node", e.name);
            if !held {
                continue;
            }
            let w = self.w;
            let j = &w.jobs[job];
            self.allocated -= j.gpu_milli;
            self.queue_alloc[j.queue] -= j.gpu_milli;
            self.records[job].pods_evicted += 1;
            let running_before = self.runs[job].running;
            self.update(job, |s| {
                let r = &mut s.runs[job];
                r.running = r.running.saturating_sub(1);
                if let Some(start) = r.run_start
                    && r.running < r.need
                {
                    r.run_start = None;
                    r.epoch += 1;
                    s.records[job].evictions += 1;
                    s.records[job].lost +=
                        (j.gpu_milli * i64::from(running_before)) as f64 * (tick - start) as f64;
                }
            });
        }
        for b in &d.binds {
            let Some(&job) = self.pods.get(&b.name) else {
                continue;
            };
            self.bound.insert(b.name.clone());
            let w = self.w;
            let j = &w.jobs[job];
            self.allocated += j.gpu_milli;
            self.queue_alloc[j.queue] += j.gpu_milli;
            self.update(job, |s| s.runs[job].running += 1);
            touched.push(job);
        }
        for job in touched {
            let r = &self.runs[job];
            if r.run_start.is_none() && r.running >= r.need {
                let epoch = r.epoch;
                let duration = self.w.jobs[job].duration;
                self.update(job, |s| s.runs[job].run_start = Some(tick));
                self.records[job].first_start.get_or_insert(tick);
                self.completions.push(Reverse((tick + duration, job, epoch)));
            }
        }
        // Partial starts: some but not all the pods a job needs, after the cycle's binds.
        for b in &d.binds {
            if let Some(&job) = self.pods.get(&b.name) {
                let r = &self.runs[job];
                if r.run_start.is_none() && r.running > 0 {
                    self.records[job].partial = true;
                }
            }
        }
        self.out.peak_allocated = self.out.peak_allocated.max(self.allocated);
        if !d.binds.is_empty() || !d.evictions.is_empty() {
            self.out.timeline.push((tick, self.allocated));
        }
        // Only evictions (resources freed for gangs waiting on them) or an exhausted attempt budget
        // leave work for the very next cycle; after binds alone it would find nothing new to place.
        let again = !d.evictions.is_empty() || result.stats.attempt_budget_exhausted;
        (again, result.stats.next_deadline)
    }

    fn next_completion(&mut self) -> Option<Millis> {
        while let Some(Reverse((t, job, epoch))) = self.completions.peek().copied() {
            let r = &self.runs[job];
            if r.done || r.epoch != epoch || r.run_start.is_none() {
                self.completions.pop();
            } else {
                return Some(t);
            }
        }
        None
    }

    fn run(mut self, options: &Options, progress: &AtomicUsize) -> Outcome {
        let started = Instant::now();
        let tick_ms = options.tick.max(1);
        let mut next_arrival = 0usize;
        let mut wake: Option<Millis> = None;
        loop {
            let arrival = self.w.jobs.get(next_arrival).map(|j| j.arrival);
            let completion = self.next_completion();
            let Some(next) = [arrival, completion, wake].into_iter().flatten().min() else {
                break;
            };
            if self.out.cycles >= options.max_cycles {
                self.out.stopped_early = true;
                break;
            }
            let tick = next
                .div_euclid(tick_ms)
                .saturating_add(i64::from(next % tick_ms != 0))
                * tick_ms;
            // Every event up to the tick, in time order (completions first on ties: they free GPUs).
            let mut trigger = CycleTrigger::FollowUp;
            loop {
                let a = self
                    .w
                    .jobs
                    .get(next_arrival)
                    .map(|j| j.arrival)
                    .filter(|t| *t <= tick);
                let c = self.next_completion().filter(|t| *t <= tick);
                match (a, c) {
                    (_, Some(ct)) if a.is_none_or(|at| ct <= at) => {
                        if let Some(Reverse((_, job, _))) = self.completions.pop() {
                            self.advance(ct);
                            self.complete(job, ct);
                            trigger = CycleTrigger::Completions;
                            progress.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    (Some(at), _) => {
                        self.advance(at);
                        self.arrive(next_arrival);
                        if trigger == CycleTrigger::FollowUp {
                            trigger = CycleTrigger::Arrivals;
                        }
                        next_arrival += 1;
                        progress.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => break,
                }
            }
            self.advance(tick);
            let (again, deadline) = self.cycle(tick, trigger);
            wake = if again {
                Some(tick + tick_ms)
            } else {
                deadline.filter(|d| *d > tick)
            };
        }
        // Jobs that never finished still count up to the end of the window.
        let end = self.now.max(self.window_end);
        self.advance(end);
        self.out.end = end;
        self.out.jobs = self.records;
        self.out.wall_seconds = started.elapsed().as_secs_f64();
        self.out
    }
}

/// Replays the workload under one policy. `progress` counts arrivals and completions (two per job
/// that finishes).
#[must_use]
pub fn replay(workload: &Checked, policy: Policy, options: &Options, progress: &AtomicUsize) -> Outcome {
    Replay::new(workload, policy, options).run(options, progress)
}

/// Replays the workload under each policy side by side, as many at once as `options.threads` says
/// (default: the machine's cores), the costliest first ([`Policy::cost_rank`]); `progress[i]` counts the
/// events of the `i`-th. The outcomes come in the order of `policies`.
///
/// A thread per policy would run five replays on two cores at once, each evicting the others' model
/// from the caches: on the full Philly trace that took 5-14 % more wall time than two at a time.
#[must_use]
pub fn replay_all(
    workload: &Checked,
    policies: &[Policy],
    options: &Options,
    progress: &[AtomicUsize],
) -> Vec<Outcome> {
    let threads = options
        .threads
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, std::num::NonZeroUsize::get)
        .min(policies.len())
        .max(1);
    // Longest first, so that the last replay to start is a short one (the longest-processing-time rule).
    let mut claim_order: Vec<usize> = (0..policies.len()).collect();
    claim_order.sort_by_key(|&i| Reverse(policies[i].cost_rank()));
    let next = AtomicUsize::new(0);
    let outcomes: Vec<Option<Outcome>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    while let Some(&i) = claim_order.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let counter = &progress[i];
                        done.push((i, replay(workload, policies[i], options, counter)));
                    }
                    done
                })
            })
            .collect();
        let mut outcomes: Vec<Option<Outcome>> = policies.iter().map(|_| None).collect();
        for worker in workers {
            match worker.join() {
                Ok(done) => {
                    for (i, outcome) in done {
                        outcomes[i] = Some(outcome);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        outcomes
    });
    // Every index was claimed once, by exactly one worker.
    debug_assert!(outcomes.iter().all(Option::is_some), "a policy was not replayed");
    outcomes.into_iter().flatten().collect()
}

/// The figures of an outcome.
#[must_use]
pub fn summarize(workload: &Checked, outcome: &Outcome) -> Summary {
    let capacity = (workload.gpus * 1000).max(1) as f64;
    let all = metrics::job_stats(outcome.jobs.iter());
    let queues = workload
        .leaves
        .iter()
        .filter(|q| outcome.jobs.iter().any(|j| j.queue == **q))
        .map(|q| {
            let f = metrics::job_stats(outcome.jobs.iter().filter(|j| j.queue == *q));
            QueueSummary {
                queue: workload.workload.queues[*q].name.clone(),
                jobs: f.jobs,
                finished: f.finished,
                never_started: f.never_started,
                delay: f.delay,
                jct: f.jct,
                gpus: outcome.queue_gpus.get(q).map_or(0.0, TimeAverage::mean) / 1000.0,
                fair_share: outcome.queue_fair.get(q).map_or(0.0, TimeAverage::mean) / 1000.0,
                evictions: f.evictions,
                lost_gpu_hours: f.lost_gpu_hours,
            }
        })
        .collect();
    Summary {
        policy: outcome.policy.name().to_owned(),
        jobs: all.jobs,
        finished: all.finished,
        never_started: all.never_started,
        delay: all.delay,
        jct: all.jct,
        allocation_pct: 100.0 * outcome.allocated.mean() / capacity,
        idle_while_fit_pct: 100.0 * outcome.idle_while_fit.mean() / capacity,
        fit_waiting_time_pct: 100.0 * outcome.fit_waiting.mean(),
        held_idle_pct: 100.0 * outcome.held_idle.mean() / capacity,
        jain: outcome.jain.mean(),
        partial_jobs: outcome.jobs.iter().filter(|j| j.partial).count(),
        evictions: all.evictions,
        pods_evicted: all.pods_evicted,
        lost_gpu_hours: all.lost_gpu_hours,
        cycles: outcome.cycles,
        writes: outcome.writes,
        wall_seconds: outcome.wall_seconds,
        cycle_kinds: outcome.cycle_kinds.values().copied().collect(),
        queues,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    /// Two 8-GPU nodes and the given queues (`name: quota`) and jobs
    /// (`queue, arrival s, duration s, pods, GPUs per pod`), in that order.
    fn workload(queues: &[(&str, f64)], jobs: &[(&str, u32, u32, u32, u32)]) -> Checked {
        let mut text =
            String::from("nodes: [{name: n, count: 2, cpu: 64, memoryGiB: 512, gpus: 8}]\nqueues:\n");
        text.push_str("  - {name: top, quota: 16}\n");
        for (name, quota) in queues {
            text.push_str(&format!("  - {{name: {name}, parent: top, quota: {quota}}}\n"));
        }
        text.push_str("jobs:\n");
        for (i, (queue, arrival, duration, pods, gpus)) in jobs.iter().enumerate() {
            text.push_str(&format!(
                "  - {{name: job{i}, queue: {queue}, arrival: {arrival}, duration: {duration}, pods: {{count: {pods}, gpus: {gpus}}}}}\n"
            ));
        }
        Workload::parse(&text).expect("parses").check().expect("valid")
    }

    fn run(w: &Checked, policy: Policy) -> (Outcome, Summary) {
        let o = replay(w, policy, &Options::default(), &AtomicUsize::new(0));
        assert!(o.peak_allocated <= w.gpus * 1000, "never above capacity");
        let s = summarize(w, &o);
        (o, s)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_policy_keeps_the_base_configuration_but_sets_the_actions() {
        let mut base = Config {
            actions: vec![ActionKind::Preempt],
            ..Config::default()
        };
        base.plugins.nodeplacement.gpu = scheduler_core::config::PlacementStrategy::Spread;
        base.plugins.consolidation.max_preemptees = 3;
        for policy in Policy::ALL {
            let config = policy.config(false, &base);
            assert_eq!(config.actions, policy.config(false, &Config::default()).actions);
            assert_eq!(config.plugins, base.plugins, "{policy:?}");
            // A workload that shares GPUs turns sharing on, without reservation pods.
            let shared = policy.config(true, &base);
            assert!(shared.plugins.gpusharing.enabled && !shared.plugins.gpusharing.reservation_pods);
            assert_eq!(shared.plugins.nodeplacement, base.plugins.nodeplacement);
        }
    }

    #[test]
    fn jobs_wait_for_free_gpus_and_allocation_is_time_averaged() {
        // A and B fill the 16 GPUs for 100 s; C waits for them, runs 50 s; D (1 GPU at 200 s) marks the
        // end of the arrival window.
        let w = workload(
            &[("q", 16.0)],
            &[
                ("q", 0, 100, 1, 8),
                ("q", 0, 100, 1, 8),
                ("q", 0, 50, 1, 8),
                ("q", 200, 10, 1, 1),
            ],
        );
        for policy in Policy::ALL {
            let (o, s) = run(&w, policy);
            let starts: Vec<Option<i64>> = o.jobs.iter().map(|j| j.first_start).collect();
            assert_eq!(
                starts,
                [Some(0), Some(0), Some(100_000), Some(200_000)],
                "{policy:?}"
            );
            let ends: Vec<Option<i64>> = o.jobs.iter().map(|j| j.end).collect();
            assert_eq!(
                ends,
                [Some(100_000), Some(100_000), Some(150_000), Some(210_000)],
                "{policy:?}"
            );
            assert!(
                close(s.delay.mean, 25.0) && close(s.delay.p99, 100.0),
                "{policy:?} {:?}",
                s.delay
            );
            assert!(
                close(s.jct.mean, (100.0 + 100.0 + 150.0 + 10.0) / 4.0),
                "{policy:?}"
            );
            // 16 GPUs for 100 s, 8 for 50 s, over 16 GPUs x 200 s.
            assert!(close(s.allocation_pct, 62.5), "{policy:?} {}", s.allocation_pct);
            assert_eq!(
                (s.evictions, s.partial_jobs, s.never_started),
                (0, 0, 0),
                "{policy:?}"
            );
            // C's 8 GPUs never fit in what is idle while it waits.
            assert!(close(s.idle_while_fit_pct, 0.0), "{policy:?}");
            // One queue: it holds exactly its fair share whenever it holds anything.
            assert!(close(s.jain, 1.0), "{policy:?}");
        }
    }

    #[test]
    fn cycles_are_counted_by_what_started_them_and_whether_they_decided_anything() {
        // A fills both nodes from 0 s to 100 s; B arrives at 20 s and cannot start (an arrival that
        // decides nothing); A's end places B (a completion that places); B's end at 110 s leaves nothing
        // to place (a completion that decides nothing). Nothing is evicted, so no follow-up runs.
        let w = workload(&[("q", 16.0)], &[("q", 0, 100, 2, 8), ("q", 20, 10, 1, 8)]);
        for policy in Policy::ALL {
            let (o, s) = run(&w, policy);
            let kinds: Vec<((CycleTrigger, bool), u64)> =
                o.cycle_kinds.iter().map(|(k, kind)| (*k, kind.cycles)).collect();
            assert_eq!(
                kinds,
                [
                    ((CycleTrigger::Arrivals, false), 1),
                    ((CycleTrigger::Arrivals, true), 1),
                    ((CycleTrigger::Completions, false), 1),
                    ((CycleTrigger::Completions, true), 1),
                ],
                "{policy:?}"
            );
            assert_eq!(o.cycles, 4, "{policy:?}");
            assert_eq!(
                s.cycle_kinds.iter().map(|k| k.cycles).sum::<u64>(),
                o.cycles,
                "{policy:?}"
            );
            let text = crate::report::render(std::slice::from_ref(&s));
            assert!(
                text.contains("cycles after arrivals 2 (50 % placed and evicted nothing;"),
                "{text}"
            );
        }
    }

    #[test]
    fn without_gangs_a_job_starts_partially_and_holds_gpus_idle() {
        // X holds one node for 100 s; G needs both nodes. A 1-GPU job at 200 s ends the window.
        let w = workload(
            &[("q", 16.0)],
            &[("q", 0, 100, 1, 8), ("q", 0, 50, 2, 8), ("q", 200, 10, 1, 1)],
        );
        let (o, s) = run(&w, Policy::FifoNoGang);
        assert_eq!(o.jobs[1].first_start, Some(100_000));
        assert!(o.jobs[1].partial, "one of G's pods ran alone");
        assert_eq!(s.partial_jobs, 1);
        // 8 GPUs held idle for 100 s of 16 GPUs x 200 s.
        assert!(close(s.held_idle_pct, 25.0), "{}", s.held_idle_pct);
        let (o, s) = run(&w, Policy::GangFair);
        assert_eq!(o.jobs[1].first_start, Some(100_000));
        assert_eq!((s.partial_jobs, s.held_idle_pct), (0, 0.0));
        // The gang's 16 GPUs never fit in the 8 idle ones.
        assert!(close(s.idle_while_fit_pct, 0.0));
    }

    #[test]
    fn a_waiting_gang_is_not_rewritten_for_every_change_of_what_is_free() {
        // L holds 5 GPUs of one node for 40 s; W (two 5-GPU pods) waits for it; ten 1-GPU jobs come
        // and go from 2 s to 24 s. W's message quotes what is free on the two nodes: 11, 10, 9 GPUs
        // as they come and go.
        let mut jobs = vec![("q", 0, 40, 1, 5), ("q", 1, 10, 2, 5)];
        jobs.extend((0..10).map(|i| ("q", 2 + 2 * i, 3 + i % 4, 1, 1)));
        let w = workload(&[("q", 16.0)], &jobs);
        // A cycle a second, so every arrival and completion has its own.
        let options = Options {
            tick: 1000,
            ..Options::default()
        };
        let run = |w: &Checked| {
            let o = replay(w, Policy::GangFair, &options, &AtomicUsize::new(0));
            let s = summarize(w, &o);
            (o, s)
        };
        let (o, s) = run(&w);
        assert_eq!(o.jobs[1].first_start, Some(40_000), "W starts when L ends");
        assert_eq!(s.writes.binds, 1 + 2 + 10, "every pod bound once");
        // An event per gang placed and one Unschedulable for W: its reason never changed, only the
        // figures (six times, each within 30 s of its first status).
        assert_eq!(s.writes.events, 12 + 1);
        // W's pods are told why they wait once.
        assert_eq!(s.writes.pod_conditions, 2);
        // W's statuses: the first and the placed one; every other gang's are the same without W.
        let alone = workload(&[("q", 16.0)], &[&jobs[..1], &jobs[2..]].concat());
        let (_, without) = run(&alone);
        assert_eq!(s.writes.statuses - without.writes.statuses, 2);
    }

    #[test]
    fn isolated_queues_leave_gpus_idle_that_borrowing_uses() {
        // Queue a (quota 8) has two 8-GPU jobs; queue b (quota 8) only a small late one.
        let w = workload(
            &[("a", 8.0), ("b", 8.0)],
            &[("a", 0, 100, 1, 8), ("a", 0, 100, 1, 8), ("b", 200, 10, 1, 1)],
        );
        let (o, s) = run(&w, Policy::GangIsolated);
        assert_eq!(o.jobs[1].first_start, Some(100_000), "a may not exceed its quota");
        // The second job's 8 GPUs fit in the 8 idle ones for 100 s: half the GPUs for half the window.
        assert!(close(s.idle_while_fit_pct, 25.0), "{}", s.idle_while_fit_pct);
        assert!(close(s.fit_waiting_time_pct, 50.0), "{}", s.fit_waiting_time_pct);
        let (o, s) = run(&w, Policy::GangFair);
        assert_eq!(o.jobs[1].first_start, Some(0), "a borrows b's idle quota");
        assert!(close(s.idle_while_fit_pct, 0.0));
        // Fair share: a alone has demand 16 -> fair share 16 and holds 16; Jain 1.
        assert!(close(s.jain, 1.0), "{}", s.jain);
    }

    #[test]
    fn reclaim_takes_borrowed_gpus_back_and_the_victim_restarts_from_scratch() {
        // a borrows all 16 GPUs with two long jobs; b (quota 8) asks for 8 at 100 s.
        let w = workload(
            &[("a", 8.0), ("b", 8.0)],
            &[("a", 0, 1000, 1, 8), ("a", 0, 1000, 1, 8), ("b", 100, 50, 1, 8)],
        );
        let (o, s) = run(&w, Policy::GangFair);
        assert_eq!(
            o.jobs[2].first_start,
            Some(1_000_000),
            "without reclaim b waits for a"
        );
        assert_eq!(s.evictions, 0);
        for policy in [Policy::GangReclaim, Policy::GangConsolidate] {
            let (o, s) = run(&w, policy);
            let b_start = o.jobs[2].first_start.expect("b started");
            assert!(
                b_start < 200_000,
                "{policy:?}: b got its quota back within a few cycles: {b_start}"
            );
            assert_eq!((s.evictions, s.pods_evicted), (1, 1), "{policy:?}");
            let victim = o.jobs.iter().position(|j| j.evictions == 1).expect("a victim");
            assert!(victim < 2, "the victim is one of a's jobs");
            // The victim ran 8 GPUs from 0 until evicted, at or before b's start.
            let lost_seconds = s.lost_gpu_hours * 3600.0 / 8.0;
            assert!(
                (100.0..=b_start as f64 / 1000.0).contains(&lost_seconds),
                "{policy:?}: {lost_seconds}"
            );
            // It restarted from scratch: it ends a full run after its restart.
            let v = &o.jobs[victim];
            assert!(v.end.expect("finished") >= b_start + 1_000_000, "{policy:?}");
            assert_eq!(s.finished, 3);
            // Accounting: everything allocated was either work done or a run thrown away.
            let work = 3.0 * 8000.0 * 1_000_000.0 - 8000.0 * 950_000.0;
            let lost = s.lost_gpu_hours * metrics::GPU_HOUR;
            assert!((o.allocated_all.integral - work - lost).abs() < 1.0, "{policy:?}");
        }
    }

    #[test]
    fn a_job_placed_and_reclaimed_in_one_cycle_is_not_counted_as_run_or_evicted() {
        // a (quota 4) runs `old` on one node. At 100 s `big` (b, two 6-GPU pods) and `late` (a, 8 GPUs)
        // arrive: big fits nowhere, late takes the idle node, and reclaim, in the same cycle, needs both
        // nodes for big. late never held its node: only old is evicted, and the GPUs counted held stay
        // those of pods that were bound.
        let w = workload(
            &[("a", 4.0), ("b", 12.0)],
            &[("a", 0, 1000, 1, 8), ("b", 100, 50, 2, 6), ("a", 100, 50, 1, 8)],
        );
        for policy in [Policy::GangReclaim, Policy::GangConsolidate] {
            let (o, s) = run(&w, policy);
            let evicted: Vec<u32> = o.jobs.iter().map(|j| j.evictions).collect();
            assert_eq!(evicted, [1, 0, 0], "{policy:?}");
            assert_eq!(s.pods_evicted, 1, "{policy:?}");
            let big = o.jobs[1].first_start.expect("big started");
            assert!(big < 200_000, "{policy:?}: {big}");
            assert!(
                o.jobs[2].first_start.expect("late started") >= big + 50_000,
                "{policy:?}"
            );
            // Everything allocated was work done or old's first run, thrown away.
            let work = (8.0 * 1000.0 + 12.0 * 50.0 + 8.0 * 50.0) * 1_000_000.0;
            let lost = s.lost_gpu_hours * metrics::GPU_HOUR;
            assert!((o.allocated_all.integral - work - lost).abs() < 1.0, "{policy:?}");
            assert_eq!(s.finished, 3, "{policy:?}");
        }
    }

    #[test]
    fn a_job_too_big_for_its_isolated_queue_never_starts_but_the_replay_ends() {
        let w = workload(
            &[("a", 8.0), ("b", 8.0)],
            &[("a", 0, 10, 2, 8), ("b", 0, 10, 1, 8)],
        );
        let (o, s) = run(&w, Policy::GangIsolated);
        assert_eq!(o.jobs[0].first_start, None);
        assert_eq!((s.never_started, s.finished), (1, 1));
        let (_, s) = run(&w, Policy::GangFair);
        assert_eq!((s.never_started, s.finished), (0, 2));
    }

    #[test]
    fn the_documented_example_runs_every_job_under_every_policy() {
        let doc = include_str!("../../../docs/sim.md");
        let start = doc.find("```yaml\n").expect("an example") + "```yaml\n".len();
        let len = doc[start..].find("```").expect("its end");
        let w = Workload::parse(&doc[start..start + len])
            .expect("parses")
            .check()
            .expect("valid");
        assert!(w.jobs.iter().any(|j| j.shared), "the example shares a GPU");
        for policy in Policy::ALL {
            let (_, s) = run(&w, policy);
            assert_eq!((s.finished, s.never_started), (3, 0), "{policy:?}");
        }
    }
}
