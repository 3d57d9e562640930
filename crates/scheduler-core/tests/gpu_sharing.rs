//! GPU sharing: fractions packed onto devices (KAI's scenarios 19-23 and 25), mixed gangs, and the
//! seed 002 layout (two 0.5 workers share one device with one group id).

use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.config.plugins.gpusharing.enabled = true;
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q", Some("dept"), -1.0, -1.0, 1.0);
    s
}

fn frac(name: &str, milli: u32, created: i64) -> GangSpec {
    GangSpec::new(name, "q", 1)
        .fraction(milli)
        .priority_class("build")
        .created(created)
}

/// A preemptible fraction (`train`): one consolidation may move.
fn movable_frac(name: &str, milli: u32, created: i64) -> GangSpec {
    frac(name, milli, created).priority_class("train")
}

/// Adds the gangs one at a time, a round after each, so each is placed knowing where the last went.
fn place_in_turn(s: &mut Sim, gangs: impl IntoIterator<Item = GangSpec>) {
    for gang in gangs {
        s.gang(gang);
        s.round();
    }
}

/// The shared-GPU group of each running pod of a gang.
fn groups(s: &Sim, gang: &str) -> Vec<String> {
    s.cluster
        .tasks
        .iter()
        .filter(|(_, t)| t.group_key.as_ref().is_some_and(|k| &*k.name == gang))
        .flat_map(|(_, t)| t.gpu_groups.iter().map(ToString::to_string))
        .collect()
}

#[test]
fn s19_a_fraction_that_does_not_fit_opens_a_new_device() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 2);
    s.gang(frac("a", 600, 0));
    s.round();
    s.gang(frac("b", 500, 1));
    s.round();
    assert_eq!(s.count("b", TaskStatus::Running), 1);
    assert_ne!(groups(&s, "a"), groups(&s, "b"));
    let node = s.cluster.node(s.cluster.node_id("n0").unwrap());
    assert_eq!(node.used.gpu(), 2000, "two devices taken out of the idle pool");
    s.cluster.check_invariants().expect("invariants");
}

#[test]
fn s20_fractions_pack_and_never_exceed_a_device() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 2);
    s.gang(frac("first", 500, 0));
    s.round();
    for (i, (name, m)) in [("f06", 600), ("f05a", 500), ("f05b", 500), ("f03", 300)]
        .iter()
        .enumerate()
    {
        s.gang(frac(name, *m, 10 + i as i64));
    }
    s.rounds(2);
    assert_eq!(s.count("f06", TaskStatus::Running), 1);
    assert_eq!(s.count("f05a", TaskStatus::Running), 1);
    assert_eq!(s.count("f03", TaskStatus::Running), 1);
    assert_eq!(
        s.count("f05b", TaskStatus::Running),
        0,
        "both devices are full (0.5+0.5, 0.6+0.3)"
    );
    assert_eq!(groups(&s, "f05a"), groups(&s, "first"), "joins the 0.5 device");
    assert_eq!(groups(&s, "f03"), groups(&s, "f06"), "0.3 joins the 0.6 device");
    let node = s.cluster.node(s.cluster.node_id("n0").unwrap());
    assert!(node.shared_gpus.iter().all(|d| d.used_milli <= 1000));
    s.cluster.check_invariants().expect("invariants");
}

#[test]
fn s21_joins_the_existing_shared_device_on_another_node() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
    s.gang(frac("existing", 500, 0).running_on(&["n1"]));
    // The running pod's group label, as the cluster would show it.
    s.round();
    s.gang(frac("new", 500, 1));
    s.round();
    assert_eq!(
        s.placement("new").keys().cloned().collect::<Vec<_>>(),
        vec!["n1".to_owned()]
    );
}

#[test]
fn s22_gpu_memory_request() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 1);
    let spec = GangSpec::new("mem", "q", 1).priority_class("build");
    s.gang(spec);
    // Turn the pod into a gpu-memory request of 2000 MiB on an 80000 MiB device.
    let id = s
        .cluster
        .tasks
        .iter()
        .find(|(_, t)| &*t.name == "mem-0")
        .map(|(i, _)| kai_scheduler_core::model::TaskId(i))
        .unwrap();
    let mut t = s.cluster.task(id).clone();
    t.gpu = kai_scheduler_core::model::GpuRequest::Memory {
        mib: 2000,
        devices: 1,
    };
    t.request.0[kai_scheduler_core::model::resources::GPU] = 0;
    s.cluster.remove_pod(&t.uid);
    s.cluster.apply_pod(kai_scheduler_core::model::PodUpdate {
        uid: t.uid.clone(),
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        ours: true,
        group_key: t.group_key.clone(),
        subgroup: None,
        request: t.request,
        gpu: t.gpu,
        constraints: Default::default(),
        labels: Default::default(),
        rules: Default::default(),
        api: t.api.clone(),
        gpu_groups: Vec::new(),
        task_order: 0,
        never_preempts: false,
        created: 0,
        problem: None,
        claims: Vec::new(),
        reservation_for: None,
        gpu_device: None,
    });
    s.round();
    assert_eq!(s.count("mem", TaskStatus::Running), 1);
    assert_eq!(groups(&s, "mem").len(), 1);
}

#[test]
fn seed_002_two_half_gpu_workers_share_one_device_with_a_whole_gpu_head() {
    // Seed 002's layout: a head with 1 GPU and workers at 0.5 each, all or nothing.
    let mut s = sim();
    s.node("n0", 64_000, 256, 2);
    s.gang(
        GangSpec::new("ray", "q", 0)
            .subgroup("headgroup", 1, None, 1)
            .subgroup("workers", 2, None, 2),
    );
    // Make the workers fractional.
    let workers: Vec<_> = s
        .cluster
        .tasks
        .iter()
        .filter(|(_, t)| t.subgroup.as_deref() == Some("workers"))
        .map(|(i, _)| kai_scheduler_core::model::TaskId(i))
        .collect();
    for w in workers {
        let t = s.cluster.task(w).clone();
        s.cluster.remove_pod(&t.uid);
        let mut request = t.request;
        request.0[kai_scheduler_core::model::resources::GPU] = 0;
        s.cluster.apply_pod(kai_scheduler_core::model::PodUpdate {
            uid: t.uid.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            ours: true,
            group_key: t.group_key.clone(),
            subgroup: t.subgroup.clone(),
            request,
            gpu: kai_scheduler_core::model::GpuRequest::Fraction {
                milli: 500,
                devices: 1,
            },
            constraints: Default::default(),
            labels: Default::default(),
            rules: Default::default(),
            api: t.api.clone(),
            gpu_groups: Vec::new(),
            task_order: 0,
            never_preempts: false,
            created: t.created,
            problem: None,
            claims: Vec::new(),
            reservation_for: None,
            gpu_device: None,
        });
    }
    s.round();
    let pods = s.pods("ray");
    assert!(
        pods.values()
            .all(|(st, n)| *st == TaskStatus::Running && n.as_deref() == Some("n0")),
        "{pods:?}"
    );
    let worker_groups: Vec<String> = s
        .cluster
        .tasks
        .iter()
        .filter(|(_, t)| t.subgroup.as_deref() == Some("workers"))
        .flat_map(|(_, t)| t.gpu_groups.iter().map(ToString::to_string))
        .collect();
    assert_eq!(worker_groups.len(), 2);
    assert_eq!(
        worker_groups[0], worker_groups[1],
        "both workers on one device, one group id"
    );
    let node = s.cluster.node(s.cluster.node_id("n0").unwrap());
    assert_eq!(node.used.gpu(), 2000, "head's GPU + the shared device");
}

#[test]
fn fractions_wait_when_gpu_sharing_is_disabled_and_say_why() {
    let mut s = sim();
    s.config.plugins.gpusharing.enabled = false;
    s.node("n0", 64_000, 256, 2);
    s.gang(frac("f", 500, 0));
    s.round();
    assert_eq!(s.count("f", TaskStatus::Running), 0);
    let why = s.why("f").unwrap();
    assert!(why.contains("GPU sharing is disabled"), "{why}");
}

/// Two half-GPU pods on two devices of a 2-GPU node, and a pod waiting for a whole GPU: consolidation
/// moves one half onto the other's device, which frees a whole one (evicting a device's last sharer
/// frees the device).
#[test]
fn consolidation_packs_two_halves_onto_one_device_to_free_a_whole_gpu() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 2);
    let half = |name: &str, created: i64| {
        GangSpec::new(name, "q", 1)
            .fraction(500)
            .priority_class("train")
            .running_on(&["n0"])
            .created(created)
    };
    s.gang(half("a", 0));
    s.gang(half("b", 1));
    s.gang(
        GangSpec::new("whole", "q", 1)
            .gpus(1)
            .priority_class("train")
            .created(10),
    );
    s.rounds(4);
    s.cluster.check_invariants().expect("invariants");
    assert_eq!(s.count("whole", TaskStatus::Running), 1, "{:?}", s.why("whole"));
    assert_eq!(s.evicted.len(), 1, "{:?}", s.evicted);
    assert_eq!(
        s.count("a", TaskStatus::Running) + s.count("b", TaskStatus::Running),
        2
    );
    let (a, b) = (groups(&s, "a"), groups(&s, "b"));
    assert_eq!(a, b, "the two halves share one device now");
}

/// A fraction waiting for a device with 0.7 free, on a node whose devices hold 0.5 + 0.3 and 0.5: no
/// node-level sum shows the room it needs, and a fraction is reserved only on a device that is freed
/// whole. Consolidation passes over the newest pod (0.5 alone on its device, with nowhere else to go)
/// and moves both pods of the first device: the 0.5 beside the other 0.5, the 0.3 beside the waiting
/// fraction on the device they freed.
#[test]
fn consolidation_frees_a_whole_device_for_a_fraction() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 2);
    place_in_turn(
        &mut s,
        [
            movable_frac("a", 500, 0),
            movable_frac("b", 300, 1),
            movable_frac("c", 500, 2),
        ],
    );
    assert_eq!(groups(&s, "a"), groups(&s, "b"), "b joins the fuller device");
    assert_ne!(groups(&s, "a"), groups(&s, "c"), "c opens the second device");
    s.gang(movable_frac("f", 700, 10));
    s.rounds(4);
    s.cluster.check_invariants().expect("invariants");
    assert_eq!(s.count("f", TaskStatus::Running), 1, "{:?}", s.why("f"));
    assert_eq!(s.evicted, vec!["ns/a-0".to_owned(), "ns/b-0".to_owned()]);
    for g in ["a", "b", "c"] {
        assert_eq!(s.count(g, TaskStatus::Running), 1, "{g} still runs");
    }
    assert_eq!(groups(&s, "a"), groups(&s, "c"), "a moved beside c");
    assert_eq!(groups(&s, "b"), groups(&s, "f"), "b moved beside f");
}

/// A pod waiting for a whole GPU on a node whose devices each hold one half-GPU pod of lower priority:
/// preempting one half frees its device.
#[test]
fn preempting_a_devices_last_sharer_frees_the_device() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 1);
    s.gang(
        GangSpec::new("half", "q", 1)
            .fraction(500)
            .priority_class("train")
            .running_on(&["n0"])
            .created(0),
    );
    s.gang(
        GangSpec::new("urgent", "q", 1)
            .gpus(1)
            .priority_class("build")
            .created(10),
    );
    s.rounds(4);
    s.cluster.check_invariants().expect("invariants");
    assert_eq!(s.evicted, vec!["ns/half-0".to_owned()]);
    assert_eq!(s.count("urgent", TaskStatus::Running), 1, "{:?}", s.why("urgent"));
}

/// A device whose only sharer is being deleted counts as freed whole: a whole-GPU pod waiting for it
/// is reserved there. A fraction arriving next must not join the leaving device (the free part beside
/// the pod being deleted), or the device is never freed and the reservation is broken.
#[test]
fn a_fraction_does_not_join_a_device_whose_sharers_are_all_leaving() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 1);
    s.gang(frac("half", 500, 0));
    s.round();
    s.deleting("ns", "half-0");
    s.gang(
        GangSpec::new("whole", "q", 1)
            .gpus(1)
            .priority_class("build")
            .created(5),
    );
    s.round();
    s.gang(frac("late", 300, 10));
    s.round();
    s.cluster.check_invariants().expect("invariants");
    assert_eq!(
        s.count("late", TaskStatus::Running),
        0,
        "late must not join the leaving device"
    );
    // Once the pod is gone, the reserved pod binds on the freed device and the fraction waits.
    s.complete("ns", "half-0");
    s.rounds(2);
    s.cluster.check_invariants().expect("invariants");
    assert_eq!(s.count("whole", TaskStatus::Running), 1, "{:?}", s.why("whole"));
    assert_eq!(s.count("late", TaskStatus::Running), 0);
}

/// With a whole GPU to spare on the node besides, a fraction still joins a device whose sharer is
/// leaving: nobody's reservation depends on it.
#[test]
fn a_fraction_joins_a_leaving_device_when_the_node_has_room_to_spare() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 2);
    s.gang(frac("half", 500, 0));
    s.round();
    s.deleting("ns", "half-0");
    s.gang(frac("late", 300, 10));
    s.round();
    s.cluster.check_invariants().expect("invariants");
    assert_eq!(s.count("late", TaskStatus::Running), 1, "{:?}", s.why("late"));
    assert_eq!(groups(&s, "late"), groups(&s, "half"));
}

/// Freeing a device for a whole-GPU pod would move two 0.3 fractions. The devices left have 0.5 and 0.2
/// free: room for one of them, not both (though 1.1 GPU free in total). The plan's check promises each
/// moved fraction its share of the device it would join, so the second finds that device too full and the
/// plan is refused, rather than accepted with a pod that would find no place again.
#[test]
fn consolidation_does_not_promise_two_moved_fractions_the_same_device_room() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 1)
        .node("n1", 64_000, 256, 1)
        .node("n2", 64_000, 256, 1);
    place_in_turn(
        &mut s,
        [
            movable_frac("v1", 300, 0),
            movable_frac("v2", 300, 1),
            frac("x", 500, 2),
            frac("y", 800, 3),
        ],
    );
    assert_eq!(groups(&s, "v1"), groups(&s, "v2"), "v2 joins v1's device");
    let mut devices = vec![groups(&s, "v1"), groups(&s, "x"), groups(&s, "y")];
    devices.dedup();
    assert_eq!(devices.len(), 3, "x and y open a device each");
    s.gang(
        GangSpec::new("whole", "q", 1)
            .gpus(1)
            .priority_class("train")
            .created(10),
    );
    s.rounds(4);
    s.cluster.check_invariants().expect("invariants");
    assert!(s.evicted.is_empty(), "{:?}", s.evicted);
    for g in ["v1", "v2", "x", "y"] {
        assert_eq!(s.count(g, TaskStatus::Running), 1, "{g} still runs");
    }
    assert_eq!(s.count("whole", TaskStatus::Running), 0);
}
