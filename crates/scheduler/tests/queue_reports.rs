//! Which queues' statuses a scheduler writes: all of them when it serves the whole cluster; only those
//! its node pool's gangs use (and their ancestors) when it serves one pool, so schedulers of different
//! pools never overwrite each other's view of a queue.

use kai_scheduler::model::QueueReports;
use kai_scheduler::sim::{GangSpec, Sim};

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
