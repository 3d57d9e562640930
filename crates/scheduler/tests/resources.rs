//! Resource semantics from API objects to decisions: objects go through the watch ingestion (`cache`)
//! into the model, then one cycle runs. What kube-scheduler would count on a node is counted here too.

use k8s_openapi::api::core::v1::{Node, Pod};
use kai_scheduler::cache::ingest::{Ingest, Partition};
use kai_scheduler::cache::watch::{Change, Event};
use scheduler_core::config::Config;
use scheduler_core::framework::decisions::Decisions;
use scheduler_core::model::Cluster;

/// 2026-01-01T00:00:00Z.
const NOW: i64 = 1_767_225_600_000;

/// A ready node with 4 CPUs, 16Gi and these extra allocatable entries (YAML flow-mapping entries, e.g.
/// `pods: "110"`).
fn node(name: &str, extra: &str) -> Event {
    let n: Node = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}}}\nstatus: {{allocatable: {{cpu: \"4\", memory: 16Gi, {extra}}}, conditions: [{{type: Ready, status: \"True\"}}]}}"
    ))
    .expect("node yaml");
    Event::Node(Box::new(Change::Apply(n)))
}

/// A pod of gang `group` (or none) with these spec entries (YAML flow-mapping entries).
fn pod(name: &str, group: &str, spec: &str) -> Event {
    let p: Pod = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}, namespace: ns, uid: uid-{name}, annotations: {{pod-group-name: {group}}}, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec: {{{spec}}}\nstatus: {{phase: Pending}}"
    ))
    .expect("pod yaml");
    Event::Pod(Box::new(Change::Apply(p)))
}

/// A PodGroup needing `min` pods in the default queue.
fn pod_group(name: &str, min: u32) -> Event {
    let pg: api::PodGroup = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}, namespace: ns, uid: pg-{name}, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec: {{minMember: {min}}}"
    ))
    .expect("podgroup yaml");
    Event::PodGroup(Change::Apply(pg))
}

/// The default queue.
fn queue() -> Event {
    let q: api::Queue = serde_yaml::from_str(&format!(
        "metadata: {{name: {}}}\nspec: {{}}",
        api::keys::DEFAULT_QUEUE
    ))
    .expect("queue yaml");
    Event::Queue(Change::Apply(q))
}

/// One cycle over the objects.
fn cycle(events: Vec<Event>) -> (Cluster, Decisions) {
    let mut ingest = Ingest::new(
        api::keys::SCHEDULER_NAME,
        api::keys::DEFAULT_QUEUE,
        Partition::default(),
    );
    let mut cluster = Cluster::default();
    ingest.apply(&mut cluster, queue());
    for e in events {
        ingest.apply(&mut cluster, e);
    }
    let decisions = scheduler_core::cycle::run(&mut cluster, &Config::default(), NOW).decisions;
    cluster.check_invariants().expect("invariants");
    (cluster, decisions)
}

/// The message of the gang's Unschedulable condition.
fn why(d: &Decisions, group: &str) -> String {
    let status = &d
        .group_statuses
        .iter()
        .find(|s| &*s.key.name == group)
        .unwrap_or_else(|| panic!("a status for {group}: {d:?}"))
        .render();
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Unschedulable")
        .and_then(|c| c.message.clone())
        .unwrap_or_else(|| panic!("an Unschedulable condition: {status:?}"))
}

const OURS: &str = "schedulerName: kai-scheduler";

#[test]
fn pods_created_with_a_node_name_count_on_their_node() {
    // Another scheduler's pod and one of ours, both created with spec.nodeName (never bound by a
    // scheduler), take 3 of the node's 4 CPUs.
    let (_, d) = cycle(vec![
        node("n0", "pods: \"110\""),
        pod(
            "foreign",
            "none",
            "schedulerName: other, nodeName: n0, containers: [{name: c, resources: {requests: {cpu: 2}}}]",
        ),
        pod(
            "placed-by-hand",
            "none",
            &format!("{OURS}, nodeName: n0, containers: [{{name: c, resources: {{requests: {{cpu: 1}}}}}}]"),
        ),
        pod_group("g", 1),
        pod(
            "w",
            "g",
            &format!("{OURS}, containers: [{{name: c, resources: {{requests: {{cpu: 2}}}}}}]"),
        ),
    ]);
    assert!(d.binds.is_empty(), "{:?}", d.binds);
    assert!(
        why(&d, "g").starts_with("pod needs 2 cpu, 1 free on 1 node"),
        "{}",
        why(&d, "g")
    );
}

#[test]
fn a_node_without_pods_allocatable_takes_no_pod_and_one_with_room_does() {
    let (_, d) = cycle(vec![
        node("no-pods", ""),
        pod_group("g", 1),
        pod("w", "g", &format!("{OURS}, containers: [{{name: c}}]")),
    ]);
    assert!(d.binds.is_empty());
    assert!(
        why(&d, "g").starts_with("pod needs 1 pod slot, which no node has"),
        "{}",
        why(&d, "g")
    );
    let (_, d) = cycle(vec![
        node("no-pods", ""),
        node("roomy", "pods: \"1\""),
        pod_group("g", 1),
        pod("w", "g", &format!("{OURS}, containers: [{{name: c}}]")),
    ]);
    assert_eq!(d.binds.iter().map(|b| &*b.node).collect::<Vec<_>>(), ["roomy"]);
}

#[test]
fn sidecars_and_overhead_decide_whether_a_pod_fits() {
    // 2 CPUs of app container + 1 of sidecar + 500m overhead = 3.5 of the node's 4: fits once, and a
    // second copy does not.
    let spec = format!(
        "{OURS}, overhead: {{cpu: 500m}}, initContainers: [{{name: s, restartPolicy: Always, resources: {{requests: {{cpu: 1}}}}}}], containers: [{{name: c, resources: {{requests: {{cpu: 2}}}}}}]"
    );
    let (_, d) = cycle(vec![
        node("n0", "pods: \"110\""),
        pod_group("g", 2),
        pod("w-0", "g", &spec),
        pod("w-1", "g", &spec),
    ]);
    assert!(d.binds.is_empty());
    assert!(
        why(&d, "g").starts_with("2 pods need 7 cpu, 4 free on 1 node"),
        "{}",
        why(&d, "g")
    );
    let (_, d) = cycle(vec![
        node("n0", "pods: \"110\""),
        pod_group("g", 1),
        pod("w-0", "g", &spec),
    ]);
    assert_eq!(d.binds.len(), 1);
}

#[test]
fn a_gated_pod_holds_its_gang_and_the_reason_says_so() {
    let (_, d) = cycle(vec![
        node("n0", "pods: \"110\""),
        pod_group("g", 2),
        pod("w-0", "g", &format!("{OURS}, containers: [{{name: c}}]")),
        pod(
            "w-1",
            "g",
            &format!("{OURS}, schedulingGates: [{{name: example.com/quota}}], containers: [{{name: c}}]"),
        ),
    ]);
    assert!(d.binds.is_empty());
    assert_eq!(
        why(&d, "g"),
        "waiting for pods: the gang needs 2, 2 exist and 1 of them have scheduling gates"
    );
}

#[test]
fn a_pod_with_resource_claims_is_refused_and_its_gang_waits() {
    let (_, d) = cycle(vec![
        node("n0", "pods: \"110\""),
        pod_group("g", 2),
        pod("w-0", "g", &format!("{OURS}, containers: [{{name: c}}]")),
        pod(
            "w-1",
            "g",
            &format!(
                "{OURS}, resourceClaims: [{{name: gpu, resourceClaimTemplateName: t}}], containers: [{{name: c, resources: {{claims: [{{name: gpu}}]}}}}]"
            ),
        ),
    ]);
    assert!(d.binds.is_empty(), "{:?}", d.binds);
    let why = why(&d, "g");
    assert!(
        why.starts_with(
            "waiting for pods: the gang needs 2, 2 exist and 1 of them cannot be scheduled (ns/w-1: the pod \
             uses dynamic resource allocation (resource claims gpu)"
        ),
        "{why}"
    );
    let own = d
        .pod_conditions
        .iter()
        .find(|c| &*c.name == "w-1")
        .expect("w-1's own condition");
    assert!(
        own.message
            .starts_with("pod cannot be scheduled: the pod uses dynamic resource allocation")
    );
}
