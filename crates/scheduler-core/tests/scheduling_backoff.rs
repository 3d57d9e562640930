//! `schedulingBackoff` (KAI's `spec.schedulingBackoff`): a gang that asks for it is tried once per node
//! pool. Once its status records it unschedulable on the pool this scheduler serves, it is not tried
//! there again, and its status keeps the reason found then, until that record goes or names another pool.

use std::sync::Arc;

use api::PodGroupStatus;
use kai_scheduler_core::framework::report::status::status_fingerprint;
use kai_scheduler_core::model::group_status::SeenStatus;
use kai_scheduler_core::model::{Group, GroupKey, GroupKind, TaskStatus};
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("default-parent-queue", None, 0.0, -1.0, 1.0);
    s.queue("q", Some("default-parent-queue"), -1.0, -1.0, 1.0);
    // One GPU: neither two-GPU gang below fits at first.
    s.node("small", 8000, 32, 1);
    s.gang(
        GangSpec::new("once", "q", 1)
            .gpus(2)
            .scheduling_backoff()
            .created(0),
    );
    s.gang(GangSpec::new("again", "q", 1).gpus(2).created(1));
    s
}

fn key(name: &str) -> GroupKey {
    GroupKey {
        kind: GroupKind::Kai,
        namespace: "ns".into(),
        name: name.into(),
    }
}

/// A copy of a gang's PodGroup and its last status as the API object, to edit as a user would.
fn group_and_status(s: &Sim, name: &str) -> (Group, PodGroupStatus) {
    let id = s.cluster.group_id(&key(name)).expect("group");
    let group = s.cluster.group(id).clone();
    let status = group
        .observed
        .status
        .as_ref()
        .map(SeenStatus::render)
        .expect("status");
    (group, status)
}

/// What the gang's last cycle said about it (the outcome, before any status filter).
fn reason(s: &Sim, name: &str) -> Option<String> {
    s.cluster
        .group_id(&key(name))
        .map(|g| s.cluster.group(g))
        .and_then(|g| g.observed.status.as_ref())
        .map(SeenStatus::render)
        .and_then(|st| st.scheduling_conditions.first().cloned())
        .and_then(|c| c.reasons.first().cloned())
        .and_then(|r| r.reason)
}

#[test]
fn a_backed_off_gang_is_not_tried_again_on_its_pool_and_keeps_its_reason() {
    let mut s = sim();
    s.round();
    let first = s.status("once").expect("status written");
    let condition = &first.scheduling_conditions[0];
    assert_eq!(condition.node_pool.as_deref(), Some("default"));
    let message = condition.message.as_deref().unwrap_or_default();
    assert!(message.starts_with("Node-Pool 'default': "), "{message}");
    // Without back-off the message is the reason alone, as in KAI.
    let plain = s.status("again").expect("status written");
    let plain_message = plain.scheduling_conditions[0]
        .message
        .as_deref()
        .unwrap_or_default();
    assert!(!plain_message.starts_with("Node-Pool"), "{plain_message}");
    assert_eq!(reason(&s, "once").as_deref(), Some("PodSchedulingErrors"));

    // Room appears: the gang without back-off is placed, the backed-off one is not even tried, and
    // nothing is written for it (its status still says why it was found unschedulable).
    s.node("big", 16000, 64, 4);
    let result = s.round();
    assert!(
        !result
            .decisions
            .group_statuses
            .iter()
            .any(|g| &*g.key.name == "once"),
        "no status is written for a backed-off gang"
    );
    s.rounds(2);
    assert_eq!(s.count("again", TaskStatus::Running), 1);
    assert_eq!(s.count("once", TaskStatus::Running), 0);
    assert_eq!(s.status("once").expect("kept"), first);
}

#[test]
fn removing_the_pool_record_lets_the_gang_be_tried_again() {
    let mut s = sim();
    s.round();
    s.node("big", 16000, 64, 4);
    s.round();
    assert_eq!(s.count("once", TaskStatus::Running), 0);
    // A user (or a controller moving it) clears the scheduling conditions.
    let (mut group, mut status) = group_and_status(&s, "once");
    status.scheduling_conditions.clear();
    // As the watch would bring it: someone else's status, with its fingerprint.
    group.observed.fingerprint = status_fingerprint(&status);
    group.observed.status = Some(SeenStatus::Api(Arc::new(status)));
    s.cluster.apply_group(group);
    s.rounds(2);
    assert_eq!(s.count("once", TaskStatus::Running), 1);
}

#[test]
fn the_record_names_the_served_pool_and_another_pool_tries_again() {
    let mut s = sim();
    s.cluster.node_pool = Some("pool-a".into());
    s.round();
    let condition = s.status("once").expect("status").scheduling_conditions[0].clone();
    assert_eq!(condition.node_pool.as_deref(), Some("pool-a"));
    assert!(
        condition
            .message
            .as_deref()
            .unwrap_or_default()
            .starts_with("Node-Pool 'pool-a': "),
        "{condition:?}"
    );
    s.node("big", 16000, 64, 4);
    s.round();
    assert_eq!(s.count("once", TaskStatus::Running), 0, "backed off on pool-a");
    // The PodGroup moves to pool-b, whose scheduler reads it with pool-a's record as its last: tried.
    let status = s.status("once").expect("status");
    let mut pool_b = sim();
    pool_b.cluster.node_pool = Some("pool-b".into());
    pool_b.node("big", 16000, 64, 2);
    let id = pool_b.cluster.group_id(&key("once")).expect("group");
    let mut group = pool_b.cluster.group(id).clone();
    group.observed.fingerprint = status_fingerprint(&status);
    group.observed.status = Some(SeenStatus::Api(Arc::new(status)));
    assert!(group.backed_off_on("pool-a") && !group.backed_off_on("pool-b"));
    pool_b.cluster.apply_group(group);
    pool_b.rounds(2);
    assert_eq!(pool_b.count("once", TaskStatus::Running), 1);
}

#[test]
fn the_last_record_by_transition_id_decides() {
    let mut s = sim();
    s.round();
    let (mut group, mut status) = group_and_status(&s, "once");
    let mut other = status.scheduling_conditions[0].clone();
    other.node_pool = Some("elsewhere".into());
    other.transition_id = Some("7".into());
    status.scheduling_conditions.push(other);
    group.observed.status = Some(SeenStatus::Api(Arc::new(status)));
    assert!(
        !group.backed_off_on("default"),
        "the last record (id 7) is about another pool"
    );
    assert!(group.backed_off_on("elsewhere"));
    group.scheduling_backoff = false;
    assert!(
        !group.backed_off_on("elsewhere"),
        "only gangs that ask for it back off"
    );
}
