//! Volumes as kube-scheduler's volume plugins treat them: a pod waits while a claim is missing, being
//! deleted or unbound with immediate binding; a bound claim's volume (node affinity, zone) limits the
//! nodes; an unbound claim waiting for its first consumer needs a matching free volume on the node
//! (the smallest, never one given to another claim) or a class that may provision there; CSI attach
//! limits and ReadWriteOncePod hold; gangs take their volumes all together; evictions respect storage.
//!
//! The simulated API server binds pods at once; `pv_controller` plays the PV controller (and an external
//! provisioner), binding what the scheduler chose, as kube-controller-manager does on a real cluster.

use std::sync::Arc;

use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::model::constraints::{Operator, Requirement};
use kai_scheduler_core::model::pod_rules::HOSTNAME_KEY;
use kai_scheduler_core::model::volumes::{
    AccessModes, ClaimChoice, ClaimKey, ClaimRef, ClaimUpdate, NO_PROVISIONER, StorageClassUpdate,
    VolumeMode, VolumePhase, VolumeUpdate,
};
use kai_scheduler_core::sim::{GangSpec, Sim};

const GI: u64 = 1 << 30;

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q", Some("dept"), -1.0, -1.0, 1.0);
    s
}

fn cpu_nodes(s: &mut Sim, names: &[&str]) {
    for n in names {
        s.node(n, 8_000, 32, 0);
    }
}

/// CPU pods (1 core each) of one gang.
fn pods(name: &str, n: u32) -> GangSpec {
    GangSpec::new(name, "q", n).gpus(0).cpu_mem(1000, 1)
}

fn key(name: &str) -> ClaimKey {
    ClaimKey {
        namespace: "ns".into(),
        name: name.into(),
    }
}

fn claim(name: &str, class: &str, gi: u64) -> ClaimUpdate {
    ClaimUpdate {
        key: key(name),
        uid: format!("uid-{name}").into(),
        deleting: false,
        volume_name: None,
        class: Some(class.into()),
        request_bytes: gi * GI,
        access_modes: AccessModes::READ_WRITE_ONCE,
        volume_mode: VolumeMode::Filesystem,
        selector: None,
        selected_node: None,
        owner_uid: None,
    }
}

fn on_node(node: &str) -> Option<Vec<Vec<Requirement>>> {
    Some(vec![vec![Requirement {
        key: HOSTNAME_KEY.to_owned(),
        field: false,
        op: Operator::In(vec![node.to_owned()]),
    }]])
}

/// A local volume on one node.
fn local_pv(name: &str, class: &str, gi: u64, node: &str) -> VolumeUpdate {
    VolumeUpdate {
        name: name.into(),
        claim_ref: None,
        phase: VolumePhase::Available,
        deleting: false,
        class: class.into(),
        capacity_bytes: gi * GI,
        access_modes: AccessModes::READ_WRITE_ONCE,
        volume_mode: VolumeMode::Filesystem,
        labels: Default::default(),
        node_affinity: on_node(node),
        csi: None,
    }
}

fn class(name: &str, provisioner: &str, wait_for_first_consumer: bool) -> StorageClassUpdate {
    StorageClassUpdate {
        name: name.into(),
        provisioner: provisioner.into(),
        wait_for_first_consumer,
        allowed_topologies: Vec::new(),
    }
}

/// The local-volume class: nothing provisioned, binding waits for the first consumer.
fn local_class(s: &mut Sim) {
    s.cluster
        .apply_storage_class(class("local", NO_PROVISIONER, true));
}

fn settle(s: &mut Sim, rounds: usize) {
    for _ in 0..rounds {
        s.round();
        s.cluster.check_invariants().expect("model invariants");
        pv_controller(s);
        s.cluster
            .check_invariants()
            .expect("model invariants after binding claims");
    }
}

/// Binds what the last round's binds chose: a volume reserved for a claim is bound to it; a claim
/// given a node is provisioned there (a volume with that node's affinity) and bound.
fn pv_controller(s: &mut Sim) {
    let binds = s.history.last().map(|d| d.binds.clone()).unwrap_or_default();
    for b in binds {
        for v in b.volumes {
            let Some(mut c) = claim_spec(s, &v.claim) else {
                continue;
            };
            let volume = match &v.choice {
                ClaimChoice::Volume(pv) => pv.clone(),
                ClaimChoice::Provision(node) => {
                    let name: Arc<str> = format!("pvc-{}", v.claim.name).into();
                    let mut pv = local_pv(
                        &name,
                        c.class.as_deref().unwrap_or(""),
                        c.request_bytes / GI,
                        node,
                    );
                    pv.csi = Some(("csi.example.com".into(), name.clone()));
                    s.cluster.apply_volume(pv);
                    name
                }
            };
            let mut pv = volume_spec(s, &volume).expect("chosen volume exists");
            pv.claim_ref = Some(ClaimRef {
                key: v.claim.clone(),
                uid: Some(v.claim_uid.clone()),
            });
            pv.phase = VolumePhase::Bound;
            s.cluster.apply_volume(pv);
            c.volume_name = Some(volume);
            s.cluster.apply_claim(c);
        }
    }
}

/// Test-side copies of what was applied, since the model does not hand its objects back.
fn claim_spec(s: &Sim, key: &ClaimKey) -> Option<ClaimUpdate> {
    s.cluster.volumes.claim(key).cloned()
}

fn volume_spec(s: &Sim, name: &str) -> Option<VolumeUpdate> {
    s.cluster.volumes.volume(name).cloned()
}

fn node_of(s: &Sim, pod: &str) -> Option<String> {
    s.pods(pod.rsplit_once('-').map_or(pod, |(g, _)| g))
        .get(pod)
        .and_then(|(_, n)| n.clone())
}

#[test]
fn a_claim_waiting_for_its_first_consumer_takes_the_local_volume_and_the_pod_its_node() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0", "n1", "n2"]);
    local_class(&mut s);
    s.cluster.apply_volume(local_pv("pv-n2", "local", 10, "n2"));
    s.cluster.apply_claim(claim("data", "local", 5));
    s.gang(pods("db", 1).claims(&["data"]));
    settle(&mut s, 2);
    assert_eq!(node_of(&s, "db-0").as_deref(), Some("n2"));
    let first = &s.history[0].binds[0];
    assert_eq!(first.volumes.len(), 1);
    assert_eq!(first.volumes[0].choice, ClaimChoice::Volume("pv-n2".into()));
    assert_eq!(&*first.volumes[0].claim_uid, "uid-data");
    // Bound now: the claim names its volume and the pod stays where its storage is.
    assert_eq!(
        claim_spec(&s, &key("data"))
            .and_then(|c| c.volume_name)
            .as_deref(),
        Some("pv-n2")
    );
}

#[test]
fn pods_wait_with_kube_schedulers_reasons_until_their_claims_can_be_used() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0"]);
    local_class(&mut s);
    s.gang(pods("missing", 1).claims(&["nope"]));
    s.gang(pods("immediate", 1).claims(&["now"]));
    s.cluster.apply_claim(claim("now", "fast", 1));
    s.cluster
        .apply_storage_class(class("fast", "csi.example.com", false));
    s.gang(pods("classless", 1).claims(&["ghost-class"]));
    s.cluster.apply_claim(claim("ghost-class", "gone", 1));
    s.gang(pods("going", 1).claims(&["deleted"]));
    s.cluster.apply_claim(ClaimUpdate {
        deleting: true,
        ..claim("deleted", "local", 1)
    });
    s.gang(pods("eph", 1).ephemeral_volumes(&["scratch"]));
    settle(&mut s, 2);
    for (gang, reason) in [
        ("missing", "persistentvolumeclaim \"nope\" not found"),
        ("immediate", "pod has unbound immediate PersistentVolumeClaims"),
        ("classless", "storageclass.storage.k8s.io \"gone\" not found"),
        ("going", "persistentvolumeclaim \"deleted\" is being deleted"),
        (
            "eph",
            "waiting for ephemeral volume controller to create the persistentvolumeclaim \"eph-0-scratch\"",
        ),
    ] {
        assert_eq!(s.count(gang, TaskStatus::Running), 0, "{gang}");
        let why = s.why(gang).unwrap_or_default();
        assert!(why.contains(reason), "{gang}: {why}");
    }
    // The claims appear (the ephemeral one owned by its pod) and become usable: every pod runs.
    s.cluster.apply_claim(claim("nope", "local", 1));
    s.cluster.apply_volume(local_pv("pv-a", "local", 1, "n0"));
    s.cluster
        .apply_storage_class(class("fast", "csi.example.com", true));
    s.cluster
        .apply_storage_class(class("gone", "csi.example.com", true));
    s.cluster.apply_claim(claim("deleted", "local", 1));
    s.cluster.apply_volume(local_pv("pv-b", "local", 1, "n0"));
    let eph_uid = s.pods("eph").keys().next().cloned().and_then(|name| {
        s.cluster
            .tasks
            .iter()
            .find(|(_, t)| *t.name == *name)
            .map(|(_, t)| t.uid.clone())
    });
    s.cluster.apply_claim(ClaimUpdate {
        owner_uid: eph_uid,
        ..claim("eph-0-scratch", "fast", 1)
    });
    settle(&mut s, 3);
    for gang in ["missing", "immediate", "classless", "going", "eph"] {
        assert_eq!(s.count(gang, TaskStatus::Running), 1, "{gang}: {:?}", s.why(gang));
    }
}

#[test]
fn an_ephemeral_claim_not_owned_by_its_pod_is_refused() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0"]);
    s.cluster
        .apply_storage_class(class("fast", "csi.example.com", true));
    s.gang(pods("eph", 1).ephemeral_volumes(&["scratch"]));
    s.cluster.apply_claim(ClaimUpdate {
        owner_uid: Some("someone-else".into()),
        ..claim("eph-0-scratch", "fast", 1)
    });
    settle(&mut s, 2);
    assert_eq!(s.count("eph", TaskStatus::Running), 0);
    assert!(s.why("eph").unwrap_or_default().contains("pod is not owner"));
}

#[test]
fn a_gang_of_four_each_with_its_own_local_volume_lands_on_their_nodes_or_waits_whole() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0", "n1", "n2", "n3", "n4"]);
    local_class(&mut s);
    for i in 0..4 {
        s.cluster.apply_claim(claim(&format!("ckpt-{i}"), "local", 100));
    }
    // Only three volumes exist: the gang waits whole, and takes nothing meanwhile.
    for i in 0..3 {
        s.cluster
            .apply_volume(local_pv(&format!("pv-{i}"), "local", 100, &format!("n{}", i + 1)));
    }
    s.gang(pods("train", 4).claims(&["ckpt-{i}"]));
    settle(&mut s, 2);
    assert_eq!(s.count("train", TaskStatus::Running), 0);
    assert!(s.history.iter().all(|d| d.binds.is_empty()));
    let why = s.why("train").unwrap_or_default();
    assert!(why.contains("no available persistent volume to bind"), "{why}");
    // The fourth volume appears: all four bind, each on the node of the volume its claim took.
    s.cluster.apply_volume(local_pv("pv-3", "local", 100, "n4"));
    settle(&mut s, 2);
    assert_eq!(s.count("train", TaskStatus::Running), 4);
    let mut nodes: Vec<String> = (0..4)
        .filter_map(|i| node_of(&s, &format!("train-{i}")))
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3", "n4"]);
    for i in 0..4 {
        let c = claim_spec(&s, &key(&format!("ckpt-{i}"))).expect("claim");
        let pv = volume_spec(&s, c.volume_name.as_deref().expect("bound")).expect("volume");
        let pv_node = match &pv.node_affinity.expect("local")[0][0].op {
            Operator::In(v) => v[0].clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(node_of(&s, &format!("train-{i}")), Some(pv_node));
    }
}

#[test]
fn one_volume_is_never_handed_to_two_claims_and_the_smallest_that_fits_is_chosen() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0"]);
    local_class(&mut s);
    s.cluster.apply_volume(local_pv("pv-big", "local", 500, "n0"));
    s.cluster.apply_volume(local_pv("pv-small", "local", 20, "n0"));
    s.cluster.apply_volume(local_pv("pv-tiny", "local", 1, "n0"));
    s.cluster.apply_claim(claim("a", "local", 10));
    s.cluster.apply_claim(claim("b", "local", 10));
    s.cluster.apply_claim(claim("c", "local", 10));
    s.gang(pods("a", 1).claims(&["a"]).created(0));
    s.gang(pods("b", 1).claims(&["b"]).created(1));
    s.gang(pods("c", 1).claims(&["c"]).created(2));
    s.round();
    let chosen: Vec<(String, ClaimChoice)> = s.history[0]
        .binds
        .iter()
        .flat_map(|b| {
            b.volumes
                .iter()
                .map(|v| (v.claim.name.to_string(), v.choice.clone()))
        })
        .collect();
    assert_eq!(
        chosen,
        vec![
            ("a".to_owned(), ClaimChoice::Volume("pv-small".into())),
            ("b".to_owned(), ClaimChoice::Volume("pv-big".into())),
        ],
        "in one cycle: the smallest fitting volume first, then the next; none for the third"
    );
    s.cluster.check_invariants().expect("invariants");
    pv_controller(&mut s);
    settle(&mut s, 2);
    assert_eq!(s.count("c", TaskStatus::Running), 0);
    assert_eq!(
        s.count("a", TaskStatus::Running) + s.count("b", TaskStatus::Running),
        2
    );
}

#[test]
fn a_pods_claims_take_volumes_by_increasing_request_as_kube_scheduler_matches_them() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0"]);
    local_class(&mut s);
    let rwo_rwx = AccessModes::READ_WRITE_ONCE.with(AccessModes::READ_WRITE_MANY);
    let mut both = local_pv("pv-rwx", "local", 5, "n0");
    both.access_modes = rwo_rwx;
    s.cluster.apply_volume(both);
    s.cluster.apply_volume(local_pv("pv-rwo", "local", 10, "n0"));
    let mut big = claim("big", "local", 5);
    big.access_modes = AccessModes::READ_WRITE_MANY;
    s.cluster.apply_claim(big);
    s.cluster.apply_claim(claim("small", "local", 1));
    // In the pod's order both claims would find a volume (big: pv-rwx, small: pv-rwo); kube-scheduler
    // matches the small claim first, which takes pv-rwx, the smallest that fits it, and finds none for
    // the big one: the pod waits, as there.
    s.gang(pods("app", 1).claims(&["big", "small"]));
    settle(&mut s, 2);
    assert_eq!(node_of(&s, "app-0"), None);
    // A second volume the big claim can use: the small claim still takes the smallest.
    let mut more = local_pv("pv-rwx-10", "local", 10, "n0");
    more.access_modes = rwo_rwx;
    s.cluster.apply_volume(more);
    settle(&mut s, 2);
    assert_eq!(node_of(&s, "app-0").as_deref(), Some("n0"));
    let mut chosen: Vec<(String, ClaimChoice)> = s
        .history
        .iter()
        .flat_map(|d| &d.binds)
        .flat_map(|b| &b.volumes)
        .map(|v| (v.claim.name.to_string(), v.choice.clone()))
        .collect();
    chosen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        chosen,
        vec![
            ("big".to_owned(), ClaimChoice::Volume("pv-rwx-10".into())),
            ("small".to_owned(), ClaimChoice::Volume("pv-rwx".into())),
        ]
    );
}

#[test]
fn a_bound_claims_volume_limits_the_nodes_by_affinity_and_zone() {
    let mut s = sim();
    s.node_with("a-0", 8_000, 32, 0, &[("topology.kubernetes.io/zone", "a")], &[]);
    s.node_with("b-0", 8_000, 32, 0, &[("topology.kubernetes.io/zone", "b")], &[]);
    s.node_with("b-1", 8_000, 32, 0, &[("topology.kubernetes.io/zone", "b")], &[]);
    // Bound to a local volume on b-1.
    let mut local = local_pv("pv-local", "local", 1, "b-1");
    local.claim_ref = Some(ClaimRef {
        key: key("pinned"),
        uid: Some("uid-pinned".into()),
    });
    local.phase = VolumePhase::Bound;
    s.cluster.apply_volume(local);
    s.cluster.apply_claim(ClaimUpdate {
        volume_name: Some("pv-local".into()),
        ..claim("pinned", "local", 1)
    });
    // Bound to a zonal disk in zone a (labels only, as VolumeZone reads them).
    let mut zonal = local_pv("pv-zonal", "disk", 1, "unused");
    zonal.node_affinity = None;
    zonal
        .labels
        .insert("topology.kubernetes.io/zone".to_owned(), "a".to_owned());
    zonal.claim_ref = Some(ClaimRef {
        key: key("zonal"),
        uid: None,
    });
    zonal.phase = VolumePhase::Bound;
    s.cluster.apply_volume(zonal);
    s.cluster.apply_claim(ClaimUpdate {
        volume_name: Some("pv-zonal".into()),
        ..claim("zonal", "disk", 1)
    });
    s.gang(pods("pinned", 1).claims(&["pinned"]));
    s.gang(pods("zonal", 1).claims(&["zonal"]));
    settle(&mut s, 2);
    assert_eq!(node_of(&s, "pinned-0").as_deref(), Some("b-1"));
    assert_eq!(node_of(&s, "zonal-0").as_deref(), Some("a-0"));
    assert!(
        s.history[0].binds.iter().all(|b| b.volumes.is_empty()),
        "bound claims need no binding"
    );
    // Two pods sharing a bound claim whose volume's node is full: the second waits, naming the volume.
    s.gang(pods("more", 1).cpu_mem(8_000, 1).claims(&["pinned"]));
    settle(&mut s, 2);
    assert_eq!(s.count("more", TaskStatus::Running), 0);
    let why = s.why("more").unwrap_or_default();
    assert!(why.contains("volume node affinity conflict"), "{why}");
}

#[test]
fn a_class_that_provisions_picks_a_node_its_allowed_topologies_admit() {
    let mut s = sim();
    s.node_with("a-0", 8_000, 32, 0, &[("zone", "a")], &[]);
    s.node_with("b-0", 8_000, 32, 0, &[("zone", "b")], &[]);
    s.cluster.apply_storage_class(StorageClassUpdate {
        allowed_topologies: vec![vec![("zone".to_owned(), vec!["b".to_owned()])]],
        ..class("zonal", "csi.example.com", true)
    });
    s.cluster.apply_claim(claim("data", "zonal", 10));
    s.gang(pods("app", 1).claims(&["data"]));
    settle(&mut s, 2);
    assert_eq!(node_of(&s, "app-0").as_deref(), Some("b-0"));
    assert_eq!(
        s.history[0].binds[0].volumes[0].choice,
        ClaimChoice::Provision("b-0".into())
    );
    // A claim that already has a selected node (an earlier attempt) provisions only there.
    s.cluster.apply_claim(ClaimUpdate {
        selected_node: Some("a-0".into()),
        ..claim("stuck", "zonal", 1)
    });
    s.gang(pods("stuck", 1).claims(&["stuck"]));
    settle(&mut s, 2);
    assert_eq!(s.count("stuck", TaskStatus::Running), 0);
}

#[test]
fn csi_attach_limits_count_distinct_volumes_per_driver() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0", "n1"]);
    s.cluster
        .apply_storage_class(class("csi", "csi.example.com", true));
    s.cluster
        .apply_attach_limits("n0".into(), vec![("csi.example.com".into(), 2)]);
    s.cluster
        .apply_attach_limits("n1".into(), vec![("csi.example.com".into(), 1)]);
    for i in 0..4 {
        s.cluster.apply_claim(claim(&format!("vol-{i}"), "csi", 1));
    }
    s.gang(pods("app", 4).claims(&["vol-{i}"]));
    settle(&mut s, 2);
    // Three volumes attach (two on n0, one on n1): a gang of four cannot start.
    assert_eq!(s.count("app", TaskStatus::Running), 0);
    let why = s.why("app").unwrap_or_default();
    assert!(why.contains("max volume count exceeded"), "{why}");
    // Raise n1's limit: two per node.
    s.cluster
        .apply_attach_limits("n1".into(), vec![("csi.example.com".into(), 2)]);
    settle(&mut s, 2);
    assert_eq!(s.count("app", TaskStatus::Running), 4);
    assert_eq!(s.placement("app").values().copied().collect::<Vec<_>>(), [2, 2]);
}

#[test]
fn a_read_write_once_pod_claim_serves_one_pod() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0", "n1"]);
    local_class(&mut s);
    s.cluster.apply_volume(local_pv("pv", "local", 1, "n0"));
    let rwop = |name: &str| ClaimUpdate {
        access_modes: AccessModes::READ_WRITE_ONCE_POD,
        ..claim(name, "local", 1)
    };
    s.cluster.apply_claim(rwop("solo"));
    let mut pv = local_pv("pv", "local", 1, "n0");
    pv.access_modes = AccessModes::READ_WRITE_ONCE_POD;
    s.cluster.apply_volume(pv);
    s.gang(pods("first", 1).claims(&["solo"]).created(0));
    settle(&mut s, 2);
    assert_eq!(s.count("first", TaskStatus::Running), 1);
    s.gang(pods("second", 1).claims(&["solo"]).created(5));
    settle(&mut s, 2);
    assert_eq!(s.count("second", TaskStatus::Running), 0);
    let why = s.why("second").unwrap_or_default();
    assert!(why.contains("ReadWriteOncePod"), "{why}");
    // The first pod finishes: the claim is free again.
    s.complete("ns", "first-0");
    settle(&mut s, 2);
    assert_eq!(s.count("second", TaskStatus::Running), 1);
}

#[test]
fn preemption_makes_room_on_the_node_of_the_volume_not_elsewhere() {
    let mut s = sim();
    s.node("n0", 2_000, 32, 0).node("n1", 2_000, 32, 0);
    local_class(&mut s);
    s.cluster.apply_volume(local_pv("pv", "local", 1, "n0"));
    s.cluster.apply_claim(claim("data", "local", 1));
    // Both nodes full of low-priority pods; the urgent pod's volume is on n0, where the older one runs
    // (without the volume, the newer one would go).
    s.gang(
        pods("low0", 1)
            .cpu_mem(2_000, 1)
            .priority_class("train")
            .running_on(&["n0"])
            .created(0),
    );
    s.gang(
        pods("low1", 1)
            .cpu_mem(2_000, 1)
            .priority_class("train")
            .running_on(&["n1"])
            .created(1),
    );
    s.gang(
        pods("urgent", 1)
            .cpu_mem(2_000, 1)
            .priority_class("build")
            .claims(&["data"])
            .created(10),
    );
    settle(&mut s, 4);
    assert_eq!(s.evicted, vec!["ns/low0-0".to_owned()]);
    assert_eq!(node_of(&s, "urgent-0").as_deref(), Some("n0"));
}

#[test]
fn consolidation_moves_no_pod_away_from_its_local_volume() {
    let train = |name: &str, gpus: u32| GangSpec::new(name, "q", 1).gpus(gpus).priority_class("train");
    let run = |s: &mut Sim, local: bool| {
        s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
        local_class(s);
        let mut pv = local_pv("pv-a", "local", 1, "n0");
        pv.claim_ref = Some(ClaimRef {
            key: key("a-data"),
            uid: None,
        });
        pv.phase = VolumePhase::Bound;
        s.cluster.apply_volume(pv);
        let mut pv = local_pv("pv-b", "local", 1, "n1");
        pv.claim_ref = Some(ClaimRef {
            key: key("b-data"),
            uid: None,
        });
        pv.phase = VolumePhase::Bound;
        if local {
            s.cluster.apply_volume(pv);
        } else {
            pv.node_affinity = None;
            s.cluster.apply_volume(pv.clone());
            let mut pv_a = volume_spec(s, "pv-a").expect("pv-a");
            pv_a.node_affinity = None;
            s.cluster.apply_volume(pv_a);
        }
        for c in ["a-data", "b-data"] {
            s.cluster.apply_claim(ClaimUpdate {
                volume_name: Some(format!("pv-{}", &c[..1]).into()),
                ..claim(c, "local", 1)
            });
        }
        s.gang(train("a", 1).claims(&["a-data"]).running_on(&["n0"]).created(0));
        s.gang(train("b", 1).claims(&["b-data"]).running_on(&["n1"]).created(1));
        s.gang(train("big", 2).created(10));
        settle(s, 4);
    };
    // Network volumes: one of the two moves and the 2-GPU pod runs.
    let mut s = sim();
    run(&mut s, false);
    assert_eq!(s.count("big", TaskStatus::Running), 1);
    assert_eq!(s.evicted.len(), 1);
    // Local volumes: neither can move; nothing is evicted and the big pod waits.
    let mut s = sim();
    run(&mut s, true);
    assert!(s.evicted.is_empty(), "{:?}", s.evicted);
    assert_eq!(s.count("big", TaskStatus::Running), 0);
}

#[test]
fn counts_and_choices_stay_exact_through_claim_changes_removals_and_recounts() {
    let mut s = sim();
    cpu_nodes(&mut s, &["n0", "n1"]);
    local_class(&mut s);
    s.cluster.apply_volume(local_pv("pv-0", "local", 1, "n0"));
    s.cluster.apply_volume(local_pv("pv-1", "local", 1, "n1"));
    s.cluster.apply_claim(claim("c0", "local", 1));
    s.cluster.apply_claim(claim("c1", "local", 1));
    s.gang(pods("g", 2).claims(&["c{i}"]));
    // One cycle without the PV controller: the choices are held by the placed pods.
    s.round();
    s.cluster.check_invariants().expect("after placing");
    assert_eq!(s.count("g", TaskStatus::Running), 2);
    // A volume chosen by a claim disappears: its pod's choice is re-derived, and nothing else moves.
    s.cluster.remove_volume("pv-0");
    s.cluster
        .check_invariants()
        .expect("after removing a chosen volume");
    s.cluster.recount();
    s.cluster.check_invariants().expect("after a recount");
    s.cluster.remove_claim(&key("c1"));
    s.cluster
        .check_invariants()
        .expect("after removing a claim in use");
    s.cluster.remove_storage_class("local");
    s.cluster.check_invariants().expect("after removing the class");
    s.complete("ns", "g-0");
    s.complete("ns", "g-1");
    s.cluster.check_invariants().expect("after the pods finished");
}
