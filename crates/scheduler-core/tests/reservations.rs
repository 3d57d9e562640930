//! GPU reservation pods are decided from the model: created for a shared device with sharers, reused
//! while it has sharers, deleted once the last sharer is gone.

use kai_scheduler_core::framework::decisions::ReservationChange;
use kai_scheduler_core::model::{ApiView, GpuRequest, PodUpdate, Resources, TaskStatus};
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.config.plugins.gpusharing.enabled = true;
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q", Some("dept"), -1.0, -1.0, 1.0);
    s
}

/// The reservation pod as the API would show it once created and running.
fn reservation_pod(s: &mut Sim, uid: &str, node: &str, group: &str) {
    s.cluster.apply_pod(PodUpdate {
        uid: uid.into(),
        namespace: api::keys::RESERVATION_NAMESPACE.into(),
        name: format!("gpu-reservation-{node}").into(),
        ours: false,
        group_key: None,
        subgroup: None,
        request: Resources::new(1, 16 << 20, 1000).with(3, 1),
        gpu: GpuRequest::Whole(1),
        constraints: Default::default(),
        labels: Default::default(),
        rules: Default::default(),
        api: ApiView {
            status: TaskStatus::Running,
            node_name: Some(node.into()),
            bound_at: None,
        },
        gpu_groups: Vec::new(),
        task_order: 0,
        never_preempts: false,
        created: s.now,
        problem: None,
        claims: Vec::new(),
        reservation_for: Some(group.into()),
        gpu_device: Some("GPU-1234".into()),
    });
}

#[test]
fn created_reused_and_deleted_with_the_last_sharer() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 2);
    s.gang(GangSpec::new("a", "q", 1).fraction(500));
    s.round();
    let d = s.history.last().unwrap();
    let group = match d.reservations.as_slice() {
        [ReservationChange::Create { node, group }] => {
            assert_eq!(&**node, "n0");
            group.clone()
        }
        other => panic!("expected one reservation: {other:?}"),
    };
    assert!(
        s.round().decisions.reservations.is_empty(),
        "requested once, not every cycle"
    );
    // The pod appears: the device is now accounted through it, once.
    reservation_pod(&mut s, "res-1", "n0", &group);
    let node = s.cluster.node(s.cluster.node_id("n0").unwrap());
    assert_eq!(node.used.gpu(), 1000);
    s.cluster.check_invariants().expect("invariants");
    // A second sharer joins the same device and learns its UUID.
    s.gang(GangSpec::new("b", "q", 1).fraction(500));
    let r = s.round();
    assert_eq!(r.decisions.binds[0].gpu_groups, vec![group.clone()]);
    assert_eq!(r.decisions.binds[0].devices, vec![Some("GPU-1234".into())]);
    assert!(r.decisions.reservations.is_empty());
    // Both sharers finish: after the grace period the reservation pod is deleted.
    s.complete("ns", "a-0").complete("ns", "b-0");
    let node = s.cluster.node(s.cluster.node_id("n0").unwrap());
    assert_eq!(node.used.gpu(), 1000, "the reservation pod still holds the GPU");
    s.rounds(2);
    assert!(
        s.history.iter().rev().take(2).all(|d| d.reservations.is_empty()),
        "not before the grace period"
    );
    s.now += 30_000;
    let r = s.round();
    assert_eq!(
        r.decisions.reservations,
        vec![ReservationChange::Delete {
            uid: "res-1".into(),
            name: "gpu-reservation-n0".into()
        }]
    );
    s.cluster.remove_pod("res-1");
    let node = s.cluster.node(s.cluster.node_id("n0").unwrap());
    assert_eq!(node.used.gpu(), 0);
    assert!(node.shared_gpus.is_empty());
    s.cluster.check_invariants().expect("invariants");
}
