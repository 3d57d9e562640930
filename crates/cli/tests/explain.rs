//! `kai explain pg` over snapshots built from YAML: what it finds and how it reads.

mod fixtures;

use fixtures::*;
use kai_cli::explain::{FitKind, NodeCount, Verdict, explain, render};
use scheduler_core::config::Config;
use scheduler_core::model::{GroupKey, GroupKind};

fn key(ns: &str, name: &str) -> GroupKey {
    GroupKey {
        kind: GroupKind::Kai,
        namespace: ns.into(),
        name: name.into(),
    }
}

/// Seed 003: three nodes with two GPUs each, a gang of eight one-GPU pods.
fn seed_003() -> String {
    stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        node("node-1", 2, &[]),
        node("node-2", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "training-job-pg", "team-a", 8, "train"),
        pods("ml", "training-job-pg", 8, 1, &[], None),
    ])
}

#[test]
fn seed_003_gang_says_how_much_is_missing() {
    let (snapshot, model) = load(&seed_003());
    let e = explain(
        &snapshot,
        &model,
        &key("ml", "training-job-pg"),
        &Config::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(e.analysis.verdict, Verdict::Waiting);
    assert_eq!(e.pods.pending, 8);
    let why = &e.analysis.reasons[0];
    assert_eq!(why.reason, "PodSchedulingErrors");
    assert!(
        why.message
            .starts_with("8 pods need 8 nvidia.com/gpu, 6 free on 3 nodes"),
        "{}",
        why.message
    );
    let fit = e.analysis.to_fit.as_ref().unwrap();
    assert_eq!(fit.free.get("nvidia.com/gpu").map(String::as_str), Some("2"));
    // The nodes have 6 GPUs in all: no eviction can help, capacity is missing.
    assert_eq!(fit.kind, FitKind::AddCapacity);
    assert_eq!(fit.smallest_eviction, None);
    let text = render(&e, 100);
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    assert_eq!(text, GOLDEN_SEED_003, "{text}");
}

#[test]
fn a_queue_at_its_limit_says_so() {
    let yaml = stream(&[
        default_priority_classes(),
        priority_class("low", 10),
        node("node-0", 4, &[]),
        node("node-1", 4, &[]),
        queue("department-1", None, -1.0, -1.0),
        queue("team-a", Some("department-1"), 2.0, 4.0),
        pod_group("ml", "old", "team-a", 4, "low"),
        pods("ml", "old", 4, 1, &["node-0", "node-0", "node-0", "node-0"], None),
        pod_group("ml", "new", "team-a", 2, "train"),
        pods("ml", "new", 2, 1, &[], None),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "new"), &Config::default(), NOW).unwrap();
    assert_eq!(e.analysis.verdict, Verdict::Waiting);
    let why = &e.analysis.reasons[0];
    assert_eq!(why.reason, "OverLimit");
    assert_eq!(
        why.message,
        "queue team-a at its nvidia.com/gpu limit 4: allocated 4, gang needs 2"
    );
    assert_eq!(e.analysis.queue_gate.as_ref(), Some(why));
    let team = &e.analysis.queues[0];
    assert_eq!(team.name, "team-a");
    let gpu = team
        .resources
        .iter()
        .find(|r| r.resource == "nvidia.com/gpu")
        .unwrap();
    assert_eq!(
        (gpu.quota, gpu.limit, gpu.allocated, gpu.requested),
        (2.0, 4.0, 4.0, 6.0)
    );
    assert_eq!(e.analysis.queues[1].name, "department-1");
    let fit = e.analysis.to_fit.as_ref().unwrap();
    assert_eq!(
        fit.summary,
        "queue team-a would have to free 2 nvidia.com/gpu of the 4 it has allocated, or its limit be raised to at least 6"
    );
    let candidates: Vec<&str> = fit
        .preemptible_lower_priority
        .iter()
        .map(|v| v.gang.as_str())
        .collect();
    assert_eq!(candidates, ["ml/old"]);
    // Room is not the problem, so no eviction search.
    assert_eq!(fit.smallest_eviction, None);
    let text = render(&e, 1000);
    let queue_lines = format!(
        "  Queue:       team-a: nvidia.com/gpu allocated 4, requested 6, fair share 4, quota 2, limit 4\n{}department-1: no quota or limit on what the gang asks for\n",
        " ".repeat(15)
    );
    assert!(text.contains(&queue_lines), "{text}");
    assert!(text.contains("  Preemptible: in queue team-a: ml/old (queue team-a, priority 10, 4 pods: cpu 4, memory 4Gi, nvidia.com/gpu 4)\n"), "{text}");
    assert!(
        !text.contains("Queue rule:"),
        "the gate is the reason; not repeated: {text}"
    );
}

#[test]
fn node_selector_mismatches_are_counted() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-a0", 2, &[("zone", "a")]),
        node("node-a1", 2, &[("zone", "a")]),
        node("node-b0", 2, &[("zone", "b")]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "big", "team-a", 1, "train"),
        pods("ml", "big", 1, 4, &[], Some(("zone", "b"))),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "big"), &Config::default(), NOW).unwrap();
    let nodes = e.analysis.nodes.as_ref().unwrap();
    assert_eq!((nodes.nodes, nodes.eligible, nodes.fits_now), (3, 1, 0));
    assert_eq!(
        nodes.refused,
        vec![
            NodeCount {
                reason: "node selector zone=b does not match".to_owned(),
                nodes: 2
            },
            NodeCount {
                reason: "insufficient nvidia.com/gpu".to_owned(),
                nodes: 1
            },
        ]
    );
    assert_eq!(
        nodes.free_on_eligible.get("nvidia.com/gpu").map(String::as_str),
        Some("2")
    );
    let text = render(&e, 1000);
    assert!(
        text.contains("refused by 2 node selector zone=b does not match, 1 insufficient nvidia.com/gpu"),
        "{text}"
    );
    // The one node it may use has 2 GPUs: capacity is missing there, whatever frees elsewhere.
    let fit = e.analysis.to_fit.as_ref().unwrap();
    assert_eq!(fit.kind, FitKind::AddCapacity);
    assert_eq!(
        fit.summary,
        "more than exists: the gang needs 4 nvidia.com/gpu and the nodes its pods may use have 2 in all; add at least 2 nvidia.com/gpu of capacity there, or lower minMember"
    );
}

#[test]
fn no_eligible_node_means_freeing_does_not_help() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[("zone", "a")]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "lost", "team-a", 1, "train"),
        pods("ml", "lost", 1, 1, &[], Some(("zone", "mars"))),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "lost"), &Config::default(), NOW).unwrap();
    let fit = e.analysis.to_fit.as_ref().unwrap();
    assert!(
        fit.summary.starts_with(
            "nothing: no node passes the placement rules of pod ml/lost-0 (1 node selector zone=mars does not match)"
        ),
        "{}",
        fit.summary
    );
    assert!(fit.free.is_empty());
    assert_eq!(fit.smallest_eviction, None);
}

#[test]
fn preemption_is_simulated_with_the_scheduler_s_actions() {
    let yaml = stream(&[
        default_priority_classes(),
        priority_class("low", 10),
        node("node-0", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "old", "team-a", 2, "low"),
        pods("ml", "old", 2, 1, &["node-0", "node-0"], None),
        pod_group("ml", "urgent", "team-a", 2, "train"),
        pods("ml", "urgent", 2, 1, &[], None),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "urgent"), &Config::default(), NOW).unwrap();
    let text = render(&e, 1000);
    assert_eq!(e.analysis.verdict, Verdict::WouldBePlaced);
    assert_eq!(e.analysis.placed_by.as_deref(), Some("preempt"));
    assert_eq!(e.analysis.evictions.len(), 1);
    let v = &e.analysis.evictions[0];
    assert_eq!(
        (v.gang.as_str(), v.pods, v.action.as_deref()),
        ("ml/old", 2, Some("preempt"))
    );
    // The reason allocate gave is kept: it says why eviction was needed.
    assert_eq!(e.analysis.reasons[0].reason, "PodSchedulingErrors");
    assert!(
        text.contains("  Verdict:     the scheduler would make room for it now (preempt) and bind it once the room is free\n"),
        "{text}"
    );
    assert!(
        text.contains("  Evicts:      ml/old (queue team-a, priority 10, 2 pods: cpu 2, memory 2Gi, nvidia.com/gpu 2, by preempt)\n"),
        "{text}"
    );
}

#[test]
fn the_smallest_eviction_looks_beyond_the_scheduler_s_rules() {
    // Same priority in another queue: neither preempt nor (today's) reclaim takes them, yet evicting
    // one is what would make room. The gang holding least is the one named.
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        node("node-1", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        queue("team-b", None, -1.0, -1.0),
        pod_group("ml", "a-wide", "team-b", 2, "train"),
        pods("ml", "a-wide", 2, 1, &["node-1", "node-1"], None),
        pod_group("ml", "b-small", "team-b", 1, "train"),
        pods("ml", "b-small", 1, 1, &["node-0"], None),
        pod_group("ml", "c-small", "team-b", 1, "train"),
        pods("ml", "c-small", 1, 1, &["node-0"], None),
        pod_group("ml", "waiting", "team-a", 1, "train"),
        pods("ml", "waiting", 1, 1, &[], None),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "waiting"), &Config::default(), NOW).unwrap();
    assert_eq!(e.analysis.verdict, Verdict::Waiting);
    let fit = e.analysis.to_fit.as_ref().unwrap();
    assert_eq!(fit.kind, FitKind::FreeRoom);
    assert_eq!(
        fit.summary,
        "1 more pod needs room: free 1 nvidia.com/gpu (1 per pod, each on one node) on nodes the pods may use"
    );
    assert!(fit.preemptible_lower_priority.is_empty());
    let smallest = fit.smallest_eviction.as_ref().unwrap();
    let names: Vec<&str> = smallest.iter().map(|v| v.gang.as_str()).collect();
    assert_eq!(names, ["ml/b-small"]);
    assert_eq!(
        smallest[0].resources.get("nvidia.com/gpu").map(String::as_str),
        Some("1")
    );
    let text = render(&e, 1000);
    assert!(
        text.contains("  Evicting:    ml/b-small (queue team-b, priority 50, 1 pod: cpu 1, memory 1Gi, nvidia.com/gpu 1) would make room"),
        "{text}"
    );
}

#[test]
fn a_placed_gang_is_reported_as_placed_with_its_written_status() {
    let mut yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "done", "team-a", 2, "train"),
        pods("ml", "done", 2, 1, &["node-0", "node-0"], None),
    ]);
    yaml = yaml.replace(
        "priorityClassName: train}\n",
        "priorityClassName: train}\nstatus:\n  phase: Running\n  conditions:\n  - {type: Scheduled, status: \"True\", reason: Scheduled, message: 2 of minMember 2 pods placed, lastTransitionTime: \"2026-01-01T00:00:05Z\"}\n",
    );
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "done"), &Config::default(), NOW).unwrap();
    assert_eq!(e.analysis.verdict, Verdict::Placed);
    assert!(e.analysis.reasons.is_empty() && e.analysis.to_fit.is_none());
    let text = render(&e, 1000);
    assert!(text.contains("  Status:      Running (as the scheduler wrote it)\n               Scheduled=True Scheduled since 2026-01-01T00:00:05Z: 2 of minMember 2 pods placed\n"), "{text}");
    assert!(
        text.contains("  Verdict:     placed: its minimum is running or bound\n"),
        "{text}"
    );
}

#[test]
fn problems_with_the_definition_are_the_reason() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        pod_group("ml", "orphan", "no-such-queue", 1, "train"),
        pods("ml", "orphan", 1, 1, &[], None),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "orphan"), &Config::default(), NOW).unwrap();
    assert_eq!(e.problems[0].reason, "QueueDoesNotExist");
    assert_eq!(e.analysis.reasons[0].reason, "QueueDoesNotExist");
    assert!(e.analysis.to_fit.is_none());
    assert!(e.analysis.queues.is_empty());
}

#[test]
fn json_has_the_same_facts() {
    let (snapshot, model) = load(&seed_003());
    let e = explain(
        &snapshot,
        &model,
        &key("ml", "training-job-pg"),
        &Config::default(),
        NOW,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::to_value(&e).unwrap();
    assert_eq!(v["analysis"]["verdict"], "waiting");
    assert_eq!(v["analysis"]["reasons"][0]["reason"], "PodSchedulingErrors");
    assert_eq!(v["analysis"]["nodes"]["eligible"], 3);
    assert_eq!(v["analysis"]["toFit"]["free"]["nvidia.com/gpu"], "2");
    assert_eq!(v["pods"]["pending"], 8);
}

const GOLDEN_SEED_003: &str = "\
PodGroup ml/training-job-pg
  Queue:       team-a
  Priority:    train (50), preemptible
  Gang:        minMember 8; 8 pods: 8 pending
  Status:      none written yet (is the scheduler running, and does it own this PodGroup?)

Analysis of a snapshot at 2026-01-01T01:00:00Z (one scheduling cycle simulated, nothing written):
  Verdict:     waits
  Why:         8 pods need 8 nvidia.com/gpu, 6 free on 3 nodes: room for 6 of 8 (gang scheduling
               places all or none). Pod ml/training-job-pg-6 fits 0/3 nodes: 3 insufficient
               nvidia.com/gpu. (PodSchedulingErrors)
  Request:     8 pods to place need cpu 8, memory 8Gi, nvidia.com/gpu 8; largest pod
               ml/training-job-pg-0: cpu 1, memory 1Gi, nvidia.com/gpu 1
  Nodes:       3 of 3 nodes pass ml/training-job-pg-0's placement rules (readiness, cordon,
               selector, affinity, taints); free there: cpu 24, memory 96Gi, nvidia.com/gpu 6. It
               fits 3 nodes now
  Queue:       team-a: no quota or limit on what the gang asks for
  Queue rule:  its request is within every queue limit on the path
  To fit:      more than exists: the gang needs 8 nvidia.com/gpu and the nodes its pods may use have
               6 in all; add at least 2 nvidia.com/gpu of capacity there, or lower minMember
";

/// The seed manifests as users apply them (no UIDs, no status), from the e2e fixtures.
const SEED_HIERARCHICAL: &str = include_str!("../../../e2e/fixtures/seeds/000-hierarchical-podgroups.yaml");
const SEED_VOLCANO: &str = include_str!("../../../e2e/fixtures/seeds/003-volcano-podgroup.yaml");
const DEFAULT_QUEUES: &str = include_str!("../../../e2e/fixtures/kai/default-queues.yaml");

#[test]
fn a_child_podgroup_is_explained_with_its_whole_gang() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 0, &[]),
        queue("training", None, -1.0, -1.0),
        SEED_HIERARCHICAL.to_owned(),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(
        &snapshot,
        &model,
        &key("ml-training", "data-preprocessors"),
        &Config::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(e.part_of.as_deref(), Some("ml-training/ml-pipeline"));
    // Both preprocessors exist (distinct pods although the manifests carry no UID); the trainers do not.
    assert_eq!(e.pods.pending, 2);
    let why = &e.analysis.reasons[0];
    assert_eq!(why.reason, "NotReady");
    assert_eq!(why.message, "waiting for pods: the gang needs 6, 2 exist so far");
    assert!(e.analysis.to_fit.is_none());
    let text = render(&e, 1000);
    assert!(
        text.contains("  Part of:     gang ml-training/ml-pipeline (parentPodGroup); analysed as a whole\n"),
        "{text}"
    );
}

#[test]
fn volcano_min_resources_are_checked_against_free_capacity() {
    // Seed 003's Volcano PodGroup (minResources cpu 16) on three 8-CPU nodes with 16 CPUs taken.
    let yaml = stream(&[
        default_priority_classes(),
        DEFAULT_QUEUES.to_owned(),
        node("node-0", 2, &[]),
        node("node-1", 2, &[]),
        node("node-2", 2, &[]),
        SEED_VOLCANO.to_owned(),
        pods("default", "training-job-pg", 8, 1, &[], None).replace(
            "pod-group-name: training-job-pg",
            "scheduling.k8s.io/group-name: training-job-pg",
        ),
        pod_group("other", "busy", "default-queue", 2, "train"),
        pods("other", "busy", 2, 0, &["node-0", "node-1"], None).replace("cpu: \"1\"", "cpu: \"8\""),
    ]);
    let (snapshot, model) = load(&yaml);
    let volcano = snapshot.find_pod_group("default", "training-job-pg").unwrap();
    assert_eq!(volcano.kind, GroupKind::Volcano);
    let e = explain(&snapshot, &model, &volcano, &Config::default(), NOW).unwrap();
    assert_eq!(e.kind, "PodGroup (volcano)");
    assert_eq!(e.queue, "default-queue");
    assert_eq!(e.pods.pending, 8);
    assert_eq!(e.analysis.reasons[0].reason, "InsufficientMinResources");
    let fit = e.analysis.to_fit.as_ref().unwrap();
    assert_eq!(fit.kind, FitKind::MinResources);
    assert_eq!(fit.free.get("cpu").map(String::as_str), Some("8"));
    assert!(
        fit.summary
            .starts_with("free cpu 8 in the cluster (minResources "),
        "{}",
        fit.summary
    );
}

#[test]
fn volcano_min_resources_that_cannot_be_counted_are_named() {
    let yaml = stream(&[
        default_priority_classes(),
        DEFAULT_QUEUES.to_owned(),
        node("node-0", 2, &[]),
        SEED_VOLCANO.replace("cpu: \"16\"", "cpu: abc"),
        pods("default", "training-job-pg", 8, 1, &[], None).replace(
            "pod-group-name: training-job-pg",
            "scheduling.k8s.io/group-name: training-job-pg",
        ),
    ]);
    let (snapshot, model) = load(&yaml);
    let volcano = snapshot.find_pod_group("default", "training-job-pg").unwrap();
    let e = explain(&snapshot, &model, &volcano, &Config::default(), NOW).unwrap();
    let message = r#"minResources "cpu": "abc" is not a quantity"#;
    assert_eq!(
        e.problems
            .iter()
            .map(|p| (p.reason.as_str(), p.message.as_str()))
            .collect::<Vec<_>>(),
        [("InvalidMinResources", message)]
    );
    assert_eq!(e.analysis.reasons[0].reason, "InvalidMinResources");
    let text = render(&e, 1000);
    assert!(
        text.contains(&format!("InvalidMinResources: {message}")),
        "{text}"
    );
}

#[test]
fn pods_the_scheduler_does_not_try_are_named() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "elsewhere", "team-a", 2, "train"),
        pods("ml", "elsewhere", 2, 1, &[], None)
            .replace("schedulerName: kai-scheduler", "schedulerName: default-scheduler"),
        pod_group("ml", "broken", "team-a", 1, "train"),
        pod_group("ml", "empty", "team-a", 1, "train"),
        pods("ml", "broken", 1, 0, &[], None).replace(
            "pod-group-name: broken",
            "pod-group-name: broken, gpu-fraction: \"abc\"",
        ),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(
        &snapshot,
        &model,
        &key("ml", "elsewhere"),
        &Config::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(e.analysis.verdict, Verdict::Waiting);
    assert_eq!(e.analysis.reasons[0].reason, "OtherScheduler");
    assert_eq!(
        e.analysis.reasons[0].message,
        "2 of its waiting pods name another scheduler (spec.schedulerName is not kai-scheduler); this scheduler does not place them"
    );
    // A pod with a problem of its own: the gang waits whole and names it.
    let e = explain(&snapshot, &model, &key("ml", "broken"), &Config::default(), NOW).unwrap();
    assert_eq!(e.analysis.reasons[0].reason, "NotReady");
    assert!(
        e.analysis.reasons[0].message.starts_with(
            "waiting for pods: the gang needs 1, 1 exist and 1 of them cannot be scheduled \
             (ml/broken-0: gpu-fraction \"abc\" must be"
        ),
        "{}",
        e.analysis.reasons[0].message
    );
    let e = explain(&snapshot, &model, &key("ml", "empty"), &Config::default(), NOW).unwrap();
    assert_eq!(e.analysis.reasons[0].reason, "NoPods");
}

#[test]
fn gated_pods_are_counted_and_named_as_the_reason() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "gated", "team-a", 2, "train"),
        pods("ml", "gated", 2, 1, &[], None).replacen(
            "  containers:",
            "  schedulingGates: [{name: example.com/wait}]\n  containers:",
            1,
        ),
    ]);
    let (snapshot, model) = load(&yaml);
    let e = explain(&snapshot, &model, &key("ml", "gated"), &Config::default(), NOW).unwrap();
    assert_eq!(e.analysis.verdict, Verdict::Waiting);
    assert_eq!((e.pods.pending, e.pods.gated), (1, 1));
    assert_eq!(e.analysis.reasons[0].reason, "NotReady");
    assert_eq!(
        e.analysis.reasons[0].message,
        "waiting for pods: the gang needs 2, 2 exist and 1 of them have scheduling gates"
    );
    let text = render(&e, 100);
    assert!(text.contains("1 pending, 1 gated"), "{text}");
    assert!(text.contains("have scheduling gates"), "{text}");
}

/// A pod of gang `group` asking `gpus` GPUs whose volume `data` uses claim `claim`.
fn pod_with_claim(ns: &str, group: &str, gpus: u32, claim: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {group}-0, namespace: {ns}, uid: {ns}-{group}-0, annotations: {{pod-group-name: {group}}}, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec:\n  schedulerName: kai-scheduler\n  containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]\nstatus: {{phase: Pending}}\n"
    )
}

#[test]
fn nodes_a_bound_volume_excludes_are_counted() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[("kubernetes.io/hostname", "node-0")]),
        node("node-1", 2, &[("kubernetes.io/hostname", "node-1")]),
        // The volume's node has no GPU left for it.
        node("node-2", 0, &[("kubernetes.io/hostname", "node-2")]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "ckpt", "team-a", 1, "train"),
        pod_with_claim("ml", "ckpt", 1, "data"),
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: ml, uid: c1}\nspec: {storageClassName: local, volumeName: pv-a, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\nstatus: {phase: Bound}\n".to_owned(),
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv-a}\nspec:\n  storageClassName: local\n  capacity: {storage: 1Gi}\n  accessModes: [ReadWriteOnce]\n  claimRef: {namespace: ml, name: data, uid: c1}\n  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-2]}]}]}}\nstatus: {phase: Bound}\n".to_owned(),
    ]);
    let (snapshot, model) = load(&yaml);
    assert_eq!(snapshot.claims.len(), 1);
    assert_eq!(snapshot.volumes.len(), 1);
    let e = explain(&snapshot, &model, &key("ml", "ckpt"), &Config::default(), NOW).unwrap();
    let nodes = e.analysis.nodes.as_ref().unwrap();
    assert_eq!(
        nodes.refused,
        vec![
            NodeCount {
                reason: "insufficient nvidia.com/gpu".to_owned(),
                nodes: 1
            },
            NodeCount {
                reason: "volume node affinity conflict".to_owned(),
                nodes: 2
            },
        ],
        "{}",
        render(&e, 1000)
    );
    let text = render(&e, 1000);
    assert!(
        text.contains("fits 0/3 nodes: 1 insufficient nvidia.com/gpu, 2 volume node affinity conflict"),
        "{text}"
    );
}

#[test]
fn a_missing_claim_is_the_reason() {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "ckpt", "team-a", 1, "train"),
        pod_with_claim("ml", "ckpt", 1, "ghost"),
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer\n".to_owned(),
        "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: node-0}\nspec: {drivers: [{name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 2}}]}\n".to_owned(),
    ]);
    let (snapshot, model) = load(&yaml);
    assert_eq!((snapshot.storage_classes.len(), snapshot.csi_nodes.len()), (1, 1));
    let e = explain(&snapshot, &model, &key("ml", "ckpt"), &Config::default(), NOW).unwrap();
    assert_eq!(e.analysis.verdict, Verdict::Waiting);
    let text = render(&e, 1000);
    assert!(
        text.contains("persistentvolumeclaim \"ghost\" not found"),
        "{text}"
    );
}
