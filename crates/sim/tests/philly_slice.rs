//! A CI-sized replay of a slice of the real Philly trace under every policy, checked against what
//! follows from the rules (not against figures copied from a run).
//!
//! Reads the trace from `$KAI_TRACES/philly/philly_jobs.csv`, `KAI_TRACES` defaulting to the
//! workspace's `../shared/traces`; fails with a message naming the path when it is missing. The trace
//! is never copied into the project.

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;

use kai_sim::metrics::GPU_HOUR;
use kai_sim::philly;
use kai_sim::replay::{self, Policy};

/// Jobs in the slice (in submit order, from the busy part of the trace).
const SLICE: usize = 300;
/// Jobs skipped first.
const OFFSET: usize = 40_000;

fn trace() -> PathBuf {
    let root = std::env::var_os("KAI_TRACES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
        PathBuf::from,
    );
    let path = root.join("philly/philly_jobs.csv");
    assert!(
        path.is_file(),
        "the Philly trace is missing at {} (set KAI_TRACES to the directory holding philly/philly_jobs.csv)",
        path.display()
    );
    path
}

#[test]
fn a_slice_of_philly_replays_under_every_policy_as_the_rules_say() {
    let rows = philly::read(&trace()).expect("the trace reads");
    assert_eq!(rows.len(), 82_247, "the Pollux subset of Philly has 82,247 jobs");
    let (workload, setup) = philly::workload(
        &rows,
        &philly::Options {
            target_load: 0.8,
            offset: OFFSET,
            limit: Some(SLICE),
        },
    )
    .expect("a slice");
    assert!(
        setup.offered_load <= 0.8 + 1e-9,
        "sized for at most the target: {setup:?}"
    );
    let w = workload.check().expect("the slice is a valid workload");
    let capacity = w.gpus * 1000;
    let counters: Vec<AtomicUsize> = Policy::ALL.iter().map(|_| AtomicUsize::new(0)).collect();
    let outcomes = replay::replay_all(&w, &Policy::ALL, &replay::Options::default(), &counters);
    let quota = |job: &kai_sim::workload::Job| w.workload.queues[job.queue].quota * 1000.0;
    for o in &outcomes {
        let p = o.policy;
        let s = replay::summarize(&w, o);
        assert!(!o.stopped_early, "{p:?} stopped early");
        assert!(o.peak_allocated <= capacity, "{p:?}: allocation above capacity");
        assert!(s.jain > 0.0 && s.jain <= 1.0 + 1e-9, "{p:?}: Jain {}", s.jain);
        let mut work = 0.0;
        for (job, r) in w.jobs.iter().zip(&o.jobs) {
            if let Some(start) = r.first_start {
                assert!(start >= r.arrival, "{p:?} {}: started before arriving", job.name);
            }
            if let Some(end) = r.end {
                let start = r.first_start.expect("a finished job started");
                // A job runs exactly once unless evicted; an evicted one reruns in full.
                if r.evictions == 0 {
                    assert_eq!(end - start, job.duration, "{p:?} {}: ran once", job.name);
                } else {
                    assert!(end - start >= job.duration, "{p:?} {}", job.name);
                }
                work += job.total_gpu_milli() as f64 * job.duration as f64;
            }
            if r.partial {
                assert!(
                    job.pods > 1,
                    "{p:?} {}: a one-pod job cannot start partially",
                    job.name
                );
            }
        }
        // Every GPU-ms held was useful work, a run thrown away by an eviction, or held by a job still
        // missing pods.
        let lost = s.lost_gpu_hours * GPU_HOUR;
        let held = o.allocated_all.integral;
        assert!(
            (held - work - lost - o.held_idle_all.integral).abs() <= 1e-6 * held.max(1.0),
            "{p:?}: held {held}, work {work}, lost {lost}, idle {}",
            o.held_idle_all.integral
        );
        match p {
            Policy::FifoNoGang | Policy::GangIsolated | Policy::GangFair => {
                assert_eq!(s.evictions, 0, "{p:?}: allocate alone never evicts");
            }
            Policy::GangReclaim | Policy::GangConsolidate => {}
        }
        if p != Policy::FifoNoGang {
            assert_eq!(s.partial_jobs, 0, "{p:?}: a gang runs whole or not at all");
            assert_eq!(
                o.held_idle_all.integral, 0.0,
                "{p:?}: no GPU held by a partial gang"
            );
        }
        match p {
            // Isolation: exactly the jobs larger than their queue's quota never run.
            Policy::GangIsolated => {
                for (job, r) in w.jobs.iter().zip(&o.jobs) {
                    let too_big = job.total_gpu_milli() as f64 > quota(job);
                    assert_eq!(r.first_start.is_none(), too_big, "{p:?} {}", job.name);
                }
            }
            // Borrowing: every job fits the cluster, so once arrivals stop every job runs.
            Policy::GangFair | Policy::GangReclaim | Policy::GangConsolidate => {
                assert_eq!(s.finished, s.jobs, "{p:?}: every job finishes");
            }
            Policy::FifoNoGang => {}
        }
    }
}

/// Jobs in the slice replayed with and without the backlog under the victim actions: the smallest
/// from [`OFFSET`] (in steps of 1,500) on which reclaim, before 41e4c07, decided differently with the
/// backlog (it took kept gangs in after an eviction, out of job order).
const BACKLOG_SLICE: usize = 3_000;

/// Replays the first `limit` jobs from [`OFFSET`] under `policies` with and without the backlog, and
/// checks every job starts, ends and is evicted at the same times; returns the evictions.
fn same_without_the_backlog(limit: usize, policies: &[Policy]) -> u32 {
    let rows = philly::read(&trace()).expect("the trace reads");
    let (workload, _) = philly::workload(
        &rows,
        &philly::Options {
            target_load: 0.8,
            offset: OFFSET,
            limit: Some(limit),
        },
    )
    .expect("a slice");
    let w = workload.check().expect("the slice is a valid workload");
    let counters: Vec<AtomicUsize> = policies.iter().map(|_| AtomicUsize::new(0)).collect();
    let with = replay::replay_all(&w, policies, &replay::Options::default(), &counters);
    let options = replay::Options {
        without_backlog: true,
        ..replay::Options::default()
    };
    let without = replay::replay_all(&w, policies, &options, &counters);
    let mut evictions = 0;
    for (a, b) in with.iter().zip(&without) {
        let p = a.policy;
        assert_eq!(p, b.policy);
        assert_eq!(a.cycles, b.cycles, "{p:?}: cycles");
        for ((job, x), y) in w.jobs.iter().zip(&a.jobs).zip(&b.jobs) {
            assert_eq!(x, y, "{p:?} {}: with and without the backlog", job.name);
        }
        evictions += a.jobs.iter().map(|r| r.evictions).sum::<u32>();
    }
    evictions
}

/// The backlog keeps waiting gangs whose failure is known out of the sessions; it may change when a
/// status is written, never a placement. Under every policy on the CI slice, and under the victim
/// actions on a longer one, every job starts, ends and is evicted at the same times with it and
/// without it (`cargo xtask sim-check --backlog` checks larger slices; the core's `tests/backlog.rs`
/// generated ones).
#[test]
fn a_slice_of_philly_replays_the_same_without_the_backlog() {
    same_without_the_backlog(SLICE, &Policy::ALL);
    let evictions = same_without_the_backlog(BACKLOG_SLICE, &[Policy::GangReclaim, Policy::GangConsolidate]);
    // The victim actions, which take kept gangs back in, do evict on this slice.
    assert!(evictions > 0, "reclaim evicts on this slice");
}
