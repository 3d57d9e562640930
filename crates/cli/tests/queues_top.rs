//! `kai queues`, `kai top nodes` and snapshot reading, over objects built from YAML.

mod fixtures;

use fixtures::*;
use kai_cli::snapshot::{ModelOptions, Snapshot};
use kai_cli::{queues, top};
use scheduler::cache::ingest::Partition;

fn queue_tree() -> String {
    stream(&[
        default_priority_classes(),
        node("node-0", 8, &[]),
        queue("department-1", None, 8.0, -1.0),
        queue("team-b", Some("department-1"), 2.0, 4.0),
        // Written by the scheduler: usage and fair share come from here.
        queue("team-a", Some("department-1"), 6.0, 8.0).replace(
            "}}}\n",
            "}}}\nstatus: {allocated: {nvidia.com/gpu: \"3\", cpu: 3500m, memory: \"3221225472\"}, requested: {nvidia.com/gpu: \"5\", cpu: \"5\", memory: \"5368709120\"}, fairShare: {nvidia.com/gpu: \"5.5\"}}\n",
        ),
        queue("default-parent-queue", None, -1.0, -1.0),
        queue("default-queue", Some("default-parent-queue"), -1.0, -1.0),
        queue("orphan", Some("no-such-parent"), 1.0, -1.0),
        // team-b runs two one-GPU pods and waits for a third.
        pod_group("ml", "b-job", "team-b", 3, "train"),
        pods("ml", "b-job", 3, 1, &["node-0", "node-0"], None),
    ])
}

#[test]
fn queue_tree_with_status_and_snapshot_usage() {
    let (snapshot, model) = load(&queue_tree());
    let r = queues::report(&snapshot, &model, NOW);
    let names: Vec<(&str, usize)> = r.queues.iter().map(|q| (q.name.as_str(), q.depth)).collect();
    assert_eq!(
        names,
        [
            ("default-parent-queue", 0),
            ("default-queue", 1),
            ("department-1", 0),
            ("team-a", 1),
            ("team-b", 1),
            ("orphan", 0),
        ]
    );
    let team_a = &r.queues[3];
    assert_eq!(team_a.usage_source, queues::UsageSource::Status);
    assert_eq!(
        (team_a.gpu.allocated, team_a.gpu.requested, team_a.gpu.fair_share),
        (3.0, 5.0, Some(5.5))
    );
    assert_eq!(team_a.cpu.allocated, 3500.0);
    let team_b = &r.queues[4];
    assert_eq!(team_b.usage_source, queues::UsageSource::Snapshot);
    // Computed by the scheduler's division: quota 2, asks 3, within its limit 4 and the free GPUs.
    assert_eq!(
        (team_b.gpu.allocated, team_b.gpu.requested, team_b.gpu.fair_share),
        (2.0, 3.0, Some(3.0))
    );
    assert_eq!((team_b.gpu.quota, team_b.gpu.limit), (2.0, 4.0));
    // The parent rolls its children up (team-a has no pods in the snapshot).
    let dept = &r.queues[2];
    assert_eq!((dept.gpu.allocated, dept.gpu.requested), (2.0, 3.0));
    assert_eq!(
        r.queues[5].problems,
        ["parent queue \"no-such-parent\" does not exist"]
    );

    let text = queues::render(&r);
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    assert_eq!(text, GOLDEN_QUEUES.trim_start_matches('\n'), "{text}");
    let json: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["queues"][3]["gpu"]["fairShare"], 5.5);
    assert_eq!(json["queues"][4]["usageSource"], "snapshot");
}

#[test]
fn no_queues_says_how_to_get_one() {
    let (snapshot, model) = load(&node("n", 1, &[]));
    let text = queues::render(&queues::report(&snapshot, &model, NOW));
    assert!(text.starts_with("No queues."), "{text}");
}

fn fraction_pod(name: &str, node: &str, fraction: &str, group: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml, uid: {name}, annotations: {{gpu-fraction: \"{fraction}\", pod-group-name: {name}}}, labels: {{runai-gpu-group: {group}}}}}\nspec:\n  schedulerName: kai-scheduler\n  nodeName: {node}\n  containers: [{{name: c, image: x, resources: {{requests: {{cpu: 500m, memory: 1Gi}}}}}}]\nstatus: {{phase: Running}}\n"
    )
}

fn foreign_pod(name: &str, node: &str, gpus: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: other, uid: {name}}}\nspec:\n  nodeName: {node}\n  containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}, requests: {{cpu: \"2\", memory: 4Gi}}}}}}]\nstatus: {{phase: Running}}\n"
    )
}

#[test]
fn top_shows_whole_and_shared_gpus_and_who_holds_them() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        node("node-1", 4, &[]),
        node("node-2", 8, &[])
            .replace("status: \"True\"", "status: \"False\"")
            .replace("kind: Node\n", "kind: Node\nspec: {unschedulable: true}\n"),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "job", "team-a", 2, "train"),
        pods("ml", "job", 2, 1, &["node-0", "node-0"], None),
        fraction_pod("half", "node-1", "0.5", "dev-1"),
        fraction_pod("quarter", "node-1", "0.25", "dev-1"),
        foreign_pod("other-gpu", "node-1", 1),
        // A pod of another scheduler that has finished holds nothing.
        foreign_pod("done", "node-1", 1).replace("phase: Running", "phase: Succeeded"),
    ]);
    let (_, model) = load(&yaml);
    let r = top::report(&model);
    let n1 = &r.nodes[1];
    assert_eq!(n1.name, "node-1");
    assert_eq!((n1.gpus, n1.gpus_used, n1.gpus_free), (4.0, 2.0, 2.0));
    assert_eq!(n1.shared.len(), 1);
    assert_eq!((n1.shared[0].fill, n1.shared[0].pods), (0.75, 2));
    assert_eq!((n1.pods_kai, n1.pods_other), (2, 1));
    assert_eq!(
        (r.total.gpus, r.total.gpus_used, r.total.gpus_free),
        (14.0, 4.0, 10.0)
    );
    let text = top::render(&r);
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    assert_eq!(text, GOLDEN_TOP.trim_start_matches('\n'), "{text}");
    let json: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["nodes"][1]["shared"][0]["fill"], 0.75);
    assert_eq!(json["total"]["gpusFree"], 10.0);
}

#[test]
fn node_pools_are_seen_as_the_scheduler_of_that_pool_sees_them() {
    let yaml = stream(&[
        node("shared-0", 2, &[]),
        node("pool-a-0", 4, &[(api::keys::NODE_POOL, "pool-a")]),
        queue("team-a", None, -1.0, -1.0),
    ]);
    let snapshot = Snapshot::from_yaml(&yaml).unwrap();
    let names = |options: &ModelOptions| -> Vec<String> {
        top::report(&snapshot.model(options))
            .nodes
            .into_iter()
            .map(|n| n.name)
            .collect()
    };
    assert_eq!(names(&ModelOptions::default()), ["shared-0"]);
    let pool_a = ModelOptions {
        partition: Partition {
            key: api::keys::NODE_POOL.to_owned(),
            value: Some("pool-a".to_owned()),
        },
        ..ModelOptions::default()
    };
    assert_eq!(names(&pool_a), ["pool-a-0"]);
}

#[test]
fn snapshots_read_lists_and_skip_other_kinds() {
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {}\n- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: x}}}}\n",
        serde_json::to_string(&serde_yaml::from_str::<serde_json::Value>(&node("n1", 2, &[])).unwrap())
            .unwrap()
    );
    let volcano = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: v, namespace: ml}\nspec: {minMember: 2}\n";
    let yaml = format!(
        "{list}---\n{volcano}---\n{}",
        pod_group("ml", "k", "q", 1, "train")
    );
    let s = Snapshot::from_yaml(&yaml).unwrap();
    assert_eq!(
        (s.nodes.len(), s.volcano_pod_groups.len(), s.pod_groups.len()),
        (1, 1, 1)
    );
    assert_eq!(
        s.find_pod_group("ml", "v").map(|k| k.kind),
        Some(scheduler_core::model::GroupKind::Volcano)
    );
    assert_eq!(
        s.find_pod_group("ml", "k").map(|k| k.kind),
        Some(scheduler_core::model::GroupKind::Kai)
    );
    assert_eq!(s.find_pod_group("ml", "nope"), None);
    assert_eq!(s.pod_group_names("ml"), ["k", "v"]);
    let err = Snapshot::from_yaml("metadata: {name: x}\n")
        .unwrap_err()
        .to_string();
    assert_eq!(err, "document 1: missing apiVersion and kind");
    let err = Snapshot::from_yaml("apiVersion: v1\nkind: Node\nspec: {unschedulable: 3}\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("document 1: Node: "), "{err}");
}

const GOLDEN_QUEUES: &str = r#"
                           GPU (devices)               CPU (cores)            MEMORY
QUEUE                PRIO  QUOTA LIMIT FAIR ALLOC REQ  QUOTA LIMIT ALLOC REQ  QUOTA LIMIT ALLOC  REQ
default-parent-queue  100      -     -    0     0   0      -     -     0   0      -     -     0    0
  default-queue       100      -     -    0     0   0      -     -     0   0      -     -     0    0
department-1          100      8     -    3     2   3      -     -     2   3      -     -  2.1G 3.2G
  team-a              100      6     8  5.5     3   5      -     -   3.5   5      -     -  3.2G 5.4G
  team-b              100      2     4    3     2   3      -     -     2   3      -     -  2.1G 3.2G
orphan (!)            100      1     -    0     0   0      -     -     0   0      -     -     0    0
(!) orphan: parent queue "no-such-parent" does not exist
"-": unlimited (quota, limit) or not reported (fair share).
Queues without a status: usage and fair share computed from the snapshot.
"#;

const GOLDEN_TOP: &str = r#"
                          GPU (devices)                  PODS       CPU (cores)  MEMORY
NODE   STATUS             ALLOC USED FREE SHARED (FILL)  KAI OTHER  USED ALLOC  USED ALLOC
node-0 Ready                  2    2    0 -                2     0     2     8   2Gi  32Gi
node-1 Ready                  4    2    2 1: 75%           2     1     3     8   6Gi  32Gi
node-2 NotReady,Cordoned      8    0    8 -                0     0     0     8     0  32Gi
TOTAL                        14    4   10 1                4     1     5    24   8Gi  96Gi
"#;

/// With usage-based fair share on, the queues' fair shares computed from a snapshot weigh the usage
/// record the scheduler stored (its ConfigMap, read as the scheduler reads it): of two queues alike in
/// everything but their past use, the one that used more recently gets less. Without the settings, or
/// without the record, they are equal.
#[test]
fn computed_fair_shares_weigh_the_stored_usage_record() {
    use kai_cli::snapshot::UsageOrigin;
    use scheduler_core::config::Config;
    use scheduler_core::fairshare::{UsageRecord, UsageSample};

    let settings = Config::from_yaml(
        "usageDBConfig: {clientType: scheduler, usageParams: {halfLifePeriod: 1h, windowSize: 24h}}",
    )
    .expect("config")
    .usage()
    .expect("usage settings")
    .expect("on");
    // "busy" held all 8 GPUs for the last hour; "idle" nothing.
    let mut record = UsageRecord::default();
    let sample = UsageSample {
        capacity: [8.0, 8000.0, 32.0 * 1024.0 * 1024.0 * 1024.0],
        queues: vec![("busy".into(), [8.0, 0.0, 0.0]), ("dept".into(), [8.0, 0.0, 0.0])],
    };
    for minute in 0..=60 {
        record.fold(&settings.params, NOW - 3_600_000 + minute * 60_000, &sample);
    }
    let configmap = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: kai-scheduler-usage, namespace: kai-scheduler}}\ndata:\n  {}: {}\n",
        scheduler::usage::DATA_KEY,
        serde_json::to_string(&record.encode().expect("encoded")).expect("quoted")
    );
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 8, &[]),
        queue("dept", None, -1.0, -1.0),
        queue("busy", Some("dept"), 0.0, -1.0),
        queue("idle", Some("dept"), 0.0, -1.0),
        pod_group("ml", "b", "busy", 8, "train"),
        pods("ml", "b", 8, 1, &[], None),
        pod_group("ml", "i", "idle", 8, "train"),
        pods("ml", "i", 8, 1, &[], None),
        configmap,
    ]);
    let gpu_shares = |settings: Option<&scheduler_core::config::UsageSettings>, name: &str| {
        let (snapshot, mut model) = load(&yaml);
        let origin = snapshot.apply_usage(&mut model, settings, "kai-scheduler", name, NOW);
        let r = queues::report(&snapshot, &model, NOW);
        let share = |q: &str| {
            r.queues
                .iter()
                .find(|x| x.name == q)
                .and_then(|x| x.gpu.fair_share)
                .expect("a computed fair share")
        };
        (origin, share("busy"), share("idle"))
    };
    let (origin, busy, idle) = gpu_shares(None, "kai-scheduler-usage");
    assert_eq!(origin, UsageOrigin::Off);
    assert_eq!((busy, idle), (4.0, 4.0), "without usage-based fair share, equal");
    let (origin, busy, idle) = gpu_shares(Some(&settings), "kai-scheduler-usage");
    assert_eq!(
        origin,
        UsageOrigin::Record("kai-scheduler/kai-scheduler-usage".into())
    );
    assert!(
        busy < idle,
        "the queue that used more yields: busy {busy}, idle {idle}"
    );
    assert!(
        (busy + idle - 8.0).abs() < 1e-9,
        "the 8 GPUs are still divided: {busy} + {idle}"
    );
    let (origin, busy, idle) = gpu_shares(Some(&settings), "other-name");
    assert_eq!(origin, UsageOrigin::Missing("kai-scheduler/other-name".into()));
    assert_eq!((busy, idle), (4.0, 4.0), "no record: usage 0 for all");
}
