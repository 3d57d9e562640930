//! Resource semantics the way kube-scheduler's `NodeResourcesFit` applies them: every resource of the
//! pod's request (extended resources, ephemeral storage, the node's pod slots) against the node's
//! allocatable, pods bound by anyone counted on their node, gated pods and pods with a problem waiting
//! with a reason.

use std::collections::BTreeMap;

use kai_scheduler_core::model::resources::{GPU, PODS};
use kai_scheduler_core::model::{NodeUpdate, PodUpdate, Resources, TaskId, TaskStatus};
use kai_scheduler_core::sim::{GI, GangSpec, Sim, pod_update_of};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("q", None, -1.0, -1.0, 1.0);
    s
}

/// A ready node with 8 CPUs, 32 GiB, no GPU, and `extra` (resource name, amount) on top; `pods` pod
/// slots (`None`: no `pods` in its allocatable).
fn node(s: &mut Sim, name: &str, pods: Option<i64>, extra: &[(&str, i64)]) {
    let mut allocatable = Resources::new(8000, 32 * GI, 0).with(PODS, pods.unwrap_or(0));
    for (resource, amount) in extra {
        let slot = s.cluster.names.slot(resource).expect("a free slot");
        allocatable.0[slot] = *amount;
    }
    s.cluster.apply_node(NodeUpdate {
        name: name.into(),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        ready: true,
        unschedulable: false,
        allocatable,
        gpu_memory_mib: None,
    });
}

/// A gang of `pods` CPU-only pods (1 CPU, 1 GiB each) needing all of them.
fn gang(name: &str, pods: u32) -> GangSpec {
    GangSpec::new(name, "q", pods).gpus(0).cpu_mem(1000, 1)
}

/// Re-applies every pod of `gang` changed by `edit`, as a watch event would.
fn edit_pods(s: &mut Sim, gang: &str, edit: impl Fn(usize, &mut PodUpdate)) {
    let ids: Vec<TaskId> = s
        .cluster
        .tasks
        .iter()
        .filter(|(_, t)| t.group_key.as_ref().is_some_and(|k| &*k.name == gang))
        .map(|(i, _)| TaskId(i))
        .collect();
    for (i, id) in ids.into_iter().enumerate() {
        let mut update = pod_update_of(&s.cluster, id);
        edit(i, &mut update);
        s.cluster.apply_pod(update);
    }
}

/// Every pod of `gang` also asks for `amount` of `resource`.
fn ask(s: &mut Sim, gang: &str, resource: &str, amount: i64) {
    let slot = s.cluster.names.slot(resource).expect("a free slot");
    edit_pods(s, gang, |_, u| u.request.0[slot] = amount);
}

fn why(s: &Sim, gang: &str) -> String {
    s.why(gang)
        .unwrap_or_else(|| panic!("{gang} has no Unschedulable condition"))
}

#[test]
fn a_node_out_of_pod_slots_takes_no_more_pods_and_the_explanation_says_so() {
    let mut s = sim();
    node(&mut s, "n0", Some(2), &[]);
    // Another scheduler's pod holds one of the two slots.
    s.foreign_pod("other", "n0", 100, 0);
    s.gang(gang("pair", 2));
    s.round();
    assert_eq!(s.count("pair", TaskStatus::Running), 0, "all or nothing");
    let why = why(&s, "pair");
    assert!(
        why.starts_with("2 pods need 2 pod slots, 1 free on 1 node"),
        "{why}"
    );
    // The other pod finishes: its slot is free again and the pair fits.
    s.complete("other", "other");
    s.round();
    assert_eq!(s.count("pair", TaskStatus::Running), 2);
    s.cluster.check_invariants().expect("invariants");
}

#[test]
fn a_node_without_pods_in_its_allocatable_takes_no_pod() {
    // kube-scheduler reads a missing `pods` allocatable as 0: "Too many pods" on every pod.
    let mut s = sim();
    node(&mut s, "n0", None, &[]);
    s.gang(gang("one", 1));
    s.round();
    assert_eq!(s.count("one", TaskStatus::Pending), 1);
    let why = why(&s, "one");
    assert!(
        why.starts_with("pod needs 1 pod slot, which no node has"),
        "{why}"
    );
}

#[test]
fn an_extended_resource_is_counted_against_the_nodes_allocatable() {
    let mut s = sim();
    node(&mut s, "fpga-0", Some(110), &[("example.com/fpga", 1)]);
    node(&mut s, "fpga-1", Some(110), &[("example.com/fpga", 1)]);
    node(&mut s, "plain", Some(110), &[]);
    s.gang(gang("three", 3));
    ask(&mut s, "three", "example.com/fpga", 1);
    s.round();
    assert_eq!(s.count("three", TaskStatus::Running), 0);
    let why = why(&s, "three");
    assert!(
        why.starts_with("3 pods need 3 example.com/fpga, 2 free on 2 nodes"),
        "{why}"
    );
    s.gang(gang("two", 2).created(1));
    ask(&mut s, "two", "example.com/fpga", 1);
    s.round();
    let placed: Vec<String> = s.placement("two").into_keys().collect();
    assert_eq!(placed, ["fpga-0", "fpga-1"]);
    s.cluster.check_invariants().expect("invariants");
}

#[test]
fn ephemeral_storage_and_hugepages_are_counted_in_bytes() {
    let mut s = sim();
    node(
        &mut s,
        "n0",
        Some(110),
        &[("ephemeral-storage", 5 * GI), ("hugepages-2Mi", 64 << 20)],
    );
    s.gang(gang("scratch", 1));
    ask(&mut s, "scratch", "ephemeral-storage", 10 * GI);
    s.gang(gang("huge", 1).created(1));
    ask(&mut s, "huge", "hugepages-2Mi", 32 << 20);
    s.round();
    let why = why(&s, "scratch");
    assert!(
        why.starts_with("pod needs 10Gi ephemeral-storage, more than any node has (at most 5Gi)"),
        "{why}"
    );
    assert_eq!(s.count("huge", TaskStatus::Running), 1);
}

#[test]
fn a_resource_the_pod_does_not_ask_for_never_blocks_it() {
    // The node's GPUs went away (device plugin gone) while a pod still uses two: free GPUs are -2.
    let mut s = sim();
    node(&mut s, "n0", Some(110), &[]);
    s.foreign_pod("gpu-user", "n0", 100, 2);
    s.gang(gang("cpu", 1));
    s.round();
    assert_eq!(s.count("cpu", TaskStatus::Running), 1);
    let n = s.cluster.node(s.cluster.node_id("n0").unwrap());
    assert_eq!(n.used.0[GPU], 2000);
}

#[test]
fn a_pod_created_bound_to_a_node_takes_its_room() {
    let mut s = sim();
    node(&mut s, "n0", Some(110), &[]);
    // Ours, created with spec.nodeName set (never bound by a scheduler): Bound, not Running yet.
    s.gang(gang("prebound", 1).cpu_mem(6000, 1));
    edit_pods(&mut s, "prebound", |_, u| {
        u.api.status = TaskStatus::Bound;
        u.api.node_name = Some("n0".into());
    });
    s.gang(gang("pair", 2).cpu_mem(2000, 1).created(1));
    s.round();
    assert!(s.history[0].binds.is_empty(), "the bound pod is not bound again");
    assert_eq!(s.count("pair", TaskStatus::Running), 0);
    let why = why(&s, "pair");
    assert!(why.starts_with("2 pods need 4 cpu, 2 free on 1 node"), "{why}");
    s.cluster.check_invariants().expect("invariants");
}

#[test]
fn gated_pods_are_not_scheduled_and_the_gang_says_why() {
    let mut s = sim();
    node(&mut s, "n0", Some(110), &[]);
    s.gang(gang("gated", 2));
    edit_pods(&mut s, "gated", |i, u| {
        if i == 1 {
            u.api.status = TaskStatus::Gated;
        }
    });
    s.round();
    assert!(s.history[0].binds.is_empty());
    assert_eq!(
        why(&s, "gated"),
        "waiting for pods: the gang needs 2, 2 exist and 1 of them have scheduling gates"
    );
    // Every pod gated: the gang still says why it waits.
    s.gang(gang("all-gated", 1).created(1));
    edit_pods(&mut s, "all-gated", |_, u| u.api.status = TaskStatus::Gated);
    s.round();
    assert_eq!(
        why(&s, "all-gated"),
        "waiting for pods: the gang needs 1, 1 exist and 1 of them have scheduling gates"
    );
    // The gate is removed: the gang is placed whole.
    edit_pods(&mut s, "gated", |_, u| u.api.status = TaskStatus::Pending);
    s.round();
    assert_eq!(s.count("gated", TaskStatus::Running), 2);
}

#[test]
fn a_pod_with_a_problem_holds_its_gang_back_and_both_say_why() {
    let mut s = sim();
    node(&mut s, "n0", Some(110), &[]);
    s.gang(gang("claims", 2));
    edit_pods(&mut s, "claims", |i, u| {
        if i == 0 {
            u.problem = Some("the pod uses dynamic resource allocation".into());
        }
    });
    for _ in 0..2 {
        s.round();
    }
    // Never bound alone: the gang needs both pods, and one cannot be placed.
    assert!(s.history.iter().all(|d| d.binds.is_empty()), "{:?}", s.history);
    assert_eq!(
        why(&s, "claims"),
        "waiting for pods: the gang needs 2, 2 exist and 1 of them cannot be scheduled \
         (ns/claims-0: the pod uses dynamic resource allocation)"
    );
    // Each pod's PodScheduled condition is written once: its own problem, or the gang's reason.
    let conditions: Vec<(String, String)> = s
        .history
        .iter()
        .flat_map(|d| &d.pod_conditions)
        .map(|c| (c.name.to_string(), c.message.clone()))
        .collect();
    assert_eq!(
        conditions,
        [
            (
                "claims-1".to_owned(),
                "gang claims: waiting for pods: the gang needs 2, 2 exist and 1 of them cannot be \
                 scheduled (ns/claims-0: the pod uses dynamic resource allocation)"
                    .to_owned()
            ),
            (
                "claims-0".to_owned(),
                "pod cannot be scheduled: the pod uses dynamic resource allocation".to_owned()
            ),
        ]
    );
    // A gang whose only pod has a problem says so too.
    s.gang(gang("alone", 1).created(1));
    edit_pods(&mut s, "alone", |_, u| u.problem = Some("bad".into()));
    s.round();
    assert_eq!(
        why(&s, "alone"),
        "waiting for pods: the gang needs 1, 1 exist and 1 of them cannot be scheduled (ns/alone-0: bad)"
    );
    // The problem is fixed (the pod is re-made without claims): the gang is placed whole.
    edit_pods(&mut s, "claims", |_, u| u.problem = None);
    s.round();
    assert_eq!(s.count("claims", TaskStatus::Running), 2);
}

/// MIG profiles count against queues as GPUs, `g` per `nvidia.com/mig-<g>g.<mem>gb`, as in KAI: a queue
/// limited to 4 GPUs takes one 3-slice MIG pod but not a second one, and says so in GPUs; the cluster's
/// capacity counts the node's profiles as GPUs too.
#[test]
fn mig_profiles_count_as_their_compute_slices_in_queue_accounting() {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("team", Some("dept"), 4.0, 4.0, 1.0);
    node(
        &mut s,
        "mig-node",
        Some(110),
        &[("nvidia.com/mig-3g.20gb", 2), ("nvidia.com/mig-1g.5gb", 1)],
    );
    let mig = |name: &str, created| {
        GangSpec::new(name, "team", 1)
            .gpus(0)
            .cpu_mem(1000, 1)
            .created(created)
    };
    s.gang(mig("first", 0));
    s.gang(mig("second", 1));
    ask(&mut s, "first", "nvidia.com/mig-3g.20gb", 1);
    ask(&mut s, "second", "nvidia.com/mig-3g.20gb", 1);
    let queues = s.round().queues.clone();
    assert_eq!(s.count("first", TaskStatus::Running), 1);
    assert_eq!(
        s.count("second", TaskStatus::Running),
        0,
        "the node has room, the queue's limit has not"
    );
    let why = why(&s, "second");
    assert_eq!(
        why,
        "queue team at its nvidia.com/gpu limit 4: allocated 3, gang needs 3"
    );
    // The queue's figures count the placed profile as 3 GPUs, and capacity the node's 2x3 + 1x1.
    let team = queues
        .iter()
        .find(|q| &*q.name == "team")
        .expect("team's figures");
    assert!((team.allocated.0[GPU] - 3.0).abs() < 1e-9, "{:?}", team.allocated);
    let status = s.status("first").expect("status");
    let allocated = status.resources_status.expect("resources").allocated;
    assert_eq!(allocated.get("nvidia.com/gpu").map(|q| q.0.as_str()), Some("3"));
}

#[test]
fn mig_profile_names_follow_kais_pattern_exactly() {
    use kai_scheduler_core::model::resources::mig_slices;
    assert_eq!(mig_slices("nvidia.com/mig-1g.5gb"), Some(1));
    assert_eq!(mig_slices("nvidia.com/mig-7g.80gb"), Some(7));
    for other in [
        "nvidia.com/mig-1g.5gb+me",
        "nvidia.com/mig-g.5gb",
        "nvidia.com/mig-1g.gb",
        "nvidia.com/gpu",
        "mig-1g.5gb",
    ] {
        assert_eq!(mig_slices(other), None, "{other}");
    }
    let mut names = kai_scheduler_core::model::resources::ResourceNames::default();
    let slot = names.slot("nvidia.com/mig-2g.10gb").expect("slot");
    let mut r = Resources::new(0, 0, 500);
    r.0[slot] = 3;
    assert_eq!(
        names.with_mig_as_gpus(r).0[GPU],
        6500,
        "3 x 2 slices plus half a GPU"
    );
    r.0[slot] = i64::MAX;
    assert_eq!(names.with_mig_as_gpus(r).0[GPU], i64::MAX, "saturates");
}
