//! The backlog (`framework::backlog`) keeps waiting gangs out of the session while the first gang of
//! their class answers for them. It changes what a cycle costs, not what it decides: generated
//! workloads replayed with and without it bind the same pods to the same nodes, evict the same pods and
//! count the same waiting gangs by the same reasons, cycle after cycle, while jobs come and go and the
//! queues change under them.

use std::collections::BTreeSet;

use kai_scheduler_core::config::{ActionKind, Config};
use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{GangSpec, Sim, SplitMix};

/// What a round decided, comparable between the two replays.
#[derive(Debug, PartialEq, Eq)]
struct Round {
    binds: BTreeSet<(String, String)>,
    evictions: BTreeSet<String>,
    waiting: u64,
    by_reason: Vec<(&'static str, u64)>,
    /// Nothing changed since a cycle that decided nothing, and no status was due a refresh: the
    /// cycle did not run (its counts are empty).
    skipped: bool,
}

fn round(sim: &mut Sim) -> Round {
    let r = sim.round();
    Round {
        skipped: r.skipped,
        binds: r
            .decisions
            .binds
            .iter()
            .map(|b| (b.name.to_string(), b.node.to_string()))
            .collect(),
        evictions: r.decisions.evictions.iter().map(|e| e.name.to_string()).collect(),
        waiting: r.stats.gangs_waiting,
        by_reason: r
            .stats
            .gangs_waiting_by_reason
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect(),
    }
}

/// A cluster of `nodes` 8-GPU nodes, three queues under one department (one of them capped), and a
/// stream of jobs of a few shapes arriving, running a few rounds and leaving.
struct Workload {
    layout: Layout,
    rng: SplitMix,
    next: usize,
    /// Jobs running, with the round each ends at.
    running: Vec<(String, usize)>,
}

/// How the replays' queues stand.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Three queues under one department, one of them capped; jobs of many shapes.
    Department,
    /// Four top-level queues with uneven quotas over a cluster smaller than their sum, and jobs of
    /// few shapes: each queue keeps long classes of like gangs, and reclaim moves queues across their
    /// fair shares in both directions.
    Flat,
}

fn setup(nodes: usize, config: &Config, with_backlog: bool, layout: Layout) -> Sim {
    let mut sim = Sim::new();
    sim.config = config.clone();
    sim.cluster.without_backlog = !with_backlog;
    sim.nodes("gpu", nodes, 8);
    match layout {
        Layout::Department => {
            sim.queue("dept", None, 16.0, -1.0, 1.0);
            sim.queue("a", Some("dept"), 8.0, -1.0, 1.0);
            sim.queue("b", Some("dept"), 4.0, -1.0, 2.0);
            // Capped: its backlog waits at its limit, refused by the queue's gate.
            sim.queue("c", Some("dept"), 2.0, 6.0, 1.0);
        }
        Layout::Flat => {
            sim.queue("a", None, 16.0, -1.0, 1.0);
            sim.queue("b", None, 8.0, -1.0, 1.0);
            sim.queue("c", None, 8.0, -1.0, 2.0);
            sim.queue("d", None, 4.0, -1.0, 1.0);
        }
    }
    sim
}

impl Workload {
    fn new(seed: u64, layout: Layout) -> Self {
        Self {
            layout,
            rng: SplitMix(seed),
            next: 0,
            running: Vec::new(),
        }
    }

    /// New jobs for this round, applied to both replays alike.
    fn arrivals(&mut self, round: usize, sims: &mut [&mut Sim]) {
        let count = self.rng.below(4);
        for _ in 0..count {
            let (queue, gpus, pods, priority) = match self.layout {
                Layout::Department => (
                    ["a", "b", "c"][self.rng.below(3)],
                    [1, 1, 2, 4, 8][self.rng.below(5)],
                    [1, 1, 1, 2][self.rng.below(4)],
                    [50, 50, 100][self.rng.below(3)],
                ),
                Layout::Flat => (
                    ["a", "b", "c", "d"][self.rng.below(4)],
                    [1, 8, 8][self.rng.below(3)],
                    [1, 1, 2][self.rng.below(3)],
                    50,
                ),
            };
            let name = format!("job-{}", self.next);
            self.next += 1;
            let created = i64::try_from(round * 1000 + self.next).unwrap_or_default();
            // Some never preempt (`preemptionPolicy: Never`): their own classes.
            let never = self.rng.below(10) == 0;
            for sim in sims.iter_mut() {
                let mut spec = GangSpec::new(&name, queue, pods)
                    .gpus(gpus)
                    .priority(priority)
                    .created(created);
                if never {
                    spec = spec.never_preempts();
                }
                sim.gang(spec);
            }
        }
    }

    /// Jobs that started in `sim` this round get an end; jobs whose end came leave both replays.
    fn departures(&mut self, round: usize, started: &[String], sims: &mut [&mut Sim]) {
        for name in started {
            let length = 2 + self.rng.below(12);
            self.running.push((name.clone(), round + length));
        }
        let (done, left): (Vec<_>, Vec<_>) = self.running.drain(..).partition(|(_, end)| *end <= round);
        self.running = left;
        for (name, _) in done {
            for sim in sims.iter_mut() {
                sim.remove_gang("ns", &name);
            }
        }
    }
}

/// Jobs of `sim` all of whose pods run, among `names`.
fn started(sim: &Sim, names: &mut BTreeSet<String>) -> Vec<String> {
    let now: Vec<String> = names
        .iter()
        .filter(|n| sim.count(n, TaskStatus::Pending) == 0 && sim.count(n, TaskStatus::Running) > 0)
        .cloned()
        .collect();
    for n in &now {
        names.remove(n);
    }
    now
}

fn compare(seed: u64, actions: &[ActionKind], rounds: usize) -> (usize, usize, usize) {
    let config = Config {
        actions: actions.to_vec(),
        ..Config::default()
    };
    compare_with(seed, &config, rounds, Layout::Department)
}

/// Replays a generated workload under `config` with and without a backlog and compares every round;
/// returns the binds, the most gangs kept at once and the evictions.
fn compare_with(seed: u64, config: &Config, rounds: usize, layout: Layout) -> (usize, usize, usize) {
    let mut with = setup(6, config, true, layout);
    let mut without = setup(6, config, false, layout);
    let mut work = Workload::new(seed, layout);
    let mut waiting_names: BTreeSet<String> = BTreeSet::new();
    let mut kept_most = 0;
    let mut binds = 0;
    let mut evictions = 0;
    let mut skips_differ = 0;
    for r in 0..rounds {
        // Queues change under the backlog: a limit is raised, then a queue goes (its gangs then wait
        // for a queue that does not exist).
        if r == rounds / 3 {
            for sim in [&mut with, &mut without] {
                match layout {
                    Layout::Department => sim.queue("c", Some("dept"), 2.0, 12.0, 1.0),
                    Layout::Flat => sim.queue("d", None, 12.0, -1.0, 1.0),
                };
            }
        }
        if r == 2 * rounds / 3 {
            for sim in [&mut with, &mut without] {
                sim.cluster.remove_queue("b");
            }
        }
        let before = work.next;
        work.arrivals(r, &mut [&mut with, &mut without]);
        for i in before..work.next {
            waiting_names.insert(format!("job-{i}"));
        }
        let a = round(&mut with);
        let b = round(&mut without);
        // The same decisions in every round. A cycle that changes nothing runs, or is skipped, by when
        // a status is due a refresh of its figures; the backlog follows what its class's answer
        // says by versions, the report by what each status says, so on rare rounds one runs a cycle
        // that decides nothing where the other skips it. The waiting gangs are compared where both ran.
        assert_eq!(
            (&a.binds, &a.evictions),
            (&b.binds, &b.evictions),
            "seed {seed}, round {r}"
        );
        if a.skipped == b.skipped {
            assert_eq!(a, b, "seed {seed}, round {r}");
        } else {
            assert!(
                a.binds.is_empty() && a.evictions.is_empty(),
                "seed {seed}, round {r}"
            );
            skips_differ += 1;
        }
        binds += a.binds.len();
        evictions += a.evictions.len();
        kept_most = kept_most.max(with.backlog_len());
        assert_eq!(without.backlog_len(), 0);
        with.cluster.check_invariants().expect("model invariants");
        let now_running = started(&with, &mut waiting_names);
        work.departures(r, &now_running, &mut [&mut with, &mut without]);
    }
    assert!(
        skips_differ * 50 <= rounds,
        "seed {seed}: {skips_differ} of {rounds} rounds skipped on one side only"
    );
    (binds, kept_most, evictions)
}

#[test]
fn an_allocate_only_cycle_decides_the_same_with_a_backlog() {
    let mut kept = 0;
    let mut binds = 0;
    for seed in 1..=6 {
        let (b, k, _) = compare(seed, &[ActionKind::Allocate], 120);
        binds += b;
        kept = kept.max(k);
    }
    // The workload builds a backlog the sessions keep out, and still places.
    assert!(kept >= 10, "at most {kept} gangs kept");
    assert!(binds >= 200, "{binds} binds");
}

#[test]
fn a_backlog_is_kept_with_stale_gang_eviction_too() {
    let (_, kept, _) = compare(9, &[ActionKind::Allocate, ActionKind::StaleGangEviction], 80);
    assert!(kept >= 10, "at most {kept} gangs kept");
}

#[test]
fn the_default_actions_decide_the_same_with_a_backlog() {
    let mut kept = 0;
    let mut evictions = 0;
    for seed in 1..=8 {
        let (_, k, e) = compare(seed, &Config::default().actions, 120);
        kept = kept.max(k);
        evictions += e;
    }
    assert!(kept >= 10, "at most {kept} gangs kept");
    // Reclaim and preempt act in these workloads (high-priority jobs, a department's queues below
    // their fair share).
    assert!(evictions >= 20, "{evictions} evictions");
}

#[test]
fn spreading_decides_the_same_with_a_backlog() {
    use kai_scheduler_core::config::PlacementStrategy;
    for seed in 11..=13 {
        let mut config = Config::default();
        config.plugins.nodeplacement.gpu = PlacementStrategy::Spread;
        let (_, kept, _) = compare_with(seed, &config, 100, Layout::Department);
        assert!(kept >= 5, "seed {seed}: at most {kept} gangs kept");
    }
}

/// A class whose kept gangs all fit at once (nodes join a full cluster): allocate takes them in one
/// after another as each is placed, and places them all in the one cycle, as it does without a
/// backlog. The pass's attempt budget is sized from the gangs at its start, so each gang taken in
/// adds its share: sized from the class's first gang alone, it stopped after a few.
#[test]
fn a_class_that_fits_at_once_is_placed_at_once() {
    let config = Config {
        actions: vec![ActionKind::Allocate],
        ..Config::default()
    };
    let mut sims: Vec<Sim> = [true, false]
        .into_iter()
        .map(|with_backlog| {
            let mut sim = Sim::new();
            sim.config = config.clone();
            sim.cluster.without_backlog = !with_backlog;
            sim.nodes("full", 1, 8);
            sim.queue("a", None, 8.0, -1.0, 1.0);
            sim.gang(GangSpec::new("first", "a", 8).gpus(1).created(0));
            for i in 0..40 {
                sim.gang(GangSpec::new(&format!("job-{i}"), "a", 1).gpus(1).created(i + 1));
            }
            sim.rounds(3);
            sim
        })
        .collect();
    assert!(sims[0].backlog_len() >= 30, "{} kept", sims[0].backlog_len());
    let rounds: Vec<Round> = sims
        .iter_mut()
        .map(|sim| {
            sim.nodes("more", 5, 8);
            round(sim)
        })
        .collect();
    assert_eq!(rounds[0].binds.len(), 40, "{:?}", rounds[0]);
    assert_eq!(rounds[0], rounds[1]);
    assert_eq!(sims[0].backlog_len(), 0);
}

/// Reclaim over flat queues whose shares move both ways (an eviction can drop a queue below its fair
/// share while its like gangs wait in the backlog): the kept gangs stand in the queue order where their
/// gangs would, so each has its turn before or after an eviction as it would without the backlog (seeds
/// 4, 20, 30 and 42 decided otherwise when reclaim took kept gangs in after the last gang of their queue
/// that had its turn). Reclaim here often takes the room of a pod allocate placed in the same cycle:
/// the room given back moves the capacity epoch, or a gang remembered as not fitting after that pod
/// took it is passed over in the next cycle though it fits (seeds 12, 44 and 48, where the backlog's
/// gang, remembered by no one, was tried and placed).
#[test]
fn reclaim_across_flat_queues_decides_the_same_with_a_backlog() {
    let config = Config {
        actions: vec![ActionKind::Allocate, ActionKind::Reclaim],
        ..Config::default()
    };
    let mut kept = 0;
    let mut evictions = 0;
    for seed in 1..=40 {
        let (_, k, e) = compare_with(seed, &config, 150, Layout::Flat);
        kept = kept.max(k);
        evictions += e;
    }
    assert!(kept >= 10, "at most {kept} gangs kept");
    assert!(evictions >= 20, "{evictions} evictions");
}
