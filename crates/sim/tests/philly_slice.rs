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
