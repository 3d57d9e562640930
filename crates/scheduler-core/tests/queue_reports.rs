//! Which queues' statuses a scheduler writes: all of them when it serves the whole cluster; only those
//! its node pool's gangs use (and their ancestors) when it serves one pool, so schedulers of different
//! pools never overwrite each other's view of a queue.

use kai_scheduler_core::framework::decisions::QueueStatus;
use kai_scheduler_core::model::QueueReports;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn reported(reports: QueueReports) -> Vec<String> {
    let mut s = Sim::new();
    s.cluster.queue_reports = reports;
    s.queue("dept", None, -1.0, -1.0, 1.0)
        .queue("team-a", Some("dept"), 2.0, -1.0, 1.0)
        .queue("team-b", Some("dept"), 2.0, -1.0, 1.0)
        .queue("other", None, 2.0, -1.0, 1.0)
        .nodes("n", 1, 4)
        .gang(GangSpec::new("job", "team-a", 2).gpus(1));
    let mut names: Vec<String> = s
        .round()
        .decisions
        .queue_statuses
        .iter()
        .map(|q| q.name.to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn a_pool_scheduler_reports_only_the_queues_its_gangs_use_and_their_ancestors() {
    assert_eq!(reported(QueueReports::UsedByPool), ["dept", "team-a"]);
}

#[test]
fn a_whole_cluster_scheduler_reports_every_queue() {
    let all = reported(QueueReports::All);
    for q in ["dept", "other", "team-a", "team-b"] {
        assert!(all.iter().any(|n| n == q), "{q} in {all:?}");
    }
}

/// The GPUs of `queue`'s fair share in the statuses the last round wrote.
fn fair_share_gpus(statuses: &[QueueStatus], queue: &str) -> String {
    statuses
        .iter()
        .find(|q| q.name.as_ref() == queue)
        .and_then(|q| q.status.fair_share.get("nvidia.com/gpu"))
        .map_or_else(|| "0".to_owned(), |q| q.0.clone())
}

/// Seed 002's shape as a node-pool scheduler sees it: the hierarchy's fair share comes from the pool's
/// nodes. A pod of another scheduler (or another pool) on a node outside the pool takes nothing from
/// them, while one on a pool node does.
#[test]
fn fair_share_counts_only_foreign_pods_on_the_schedulers_own_nodes() {
    let fair = |foreign_node: &str| {
        let mut s = Sim::new();
        s.cluster.queue_reports = QueueReports::UsedByPool;
        s.queue("department-1", None, -1.0, -1.0, 1.0)
            .queue("team-a", Some("department-1"), -1.0, -1.0, 1.0)
            .nodes("q2", 2, 2)
            .foreign_pod("elsewhere", foreign_node, 1_000, 1)
            .gang(GangSpec::new("team-a-job", "team-a", 4).gpus(1));
        let statuses = &s.round().decisions.queue_statuses;
        (
            fair_share_gpus(statuses, "team-a"),
            fair_share_gpus(statuses, "department-1"),
        )
    };
    // All 4 pool GPUs are team-a's to share: the foreign pod sits on another pool's node.
    assert_eq!(fair("another-pools-node"), ("4".to_owned(), "4".to_owned()));
    // The foreign pod holds one pool GPU: 3 remain to share.
    assert_eq!(fair("q2-0"), ("3".to_owned(), "3".to_owned()));
}
