//! Which PodGroup statuses a cycle decides when many groups arrive at once: a group the podgrouper has
//! just made, whose pods are not all in it yet, gets no status (and its gang no warning event) until its
//! gang can be tried (or past the grace); groups with pods are reported in the same cycle that places
//! them.

use kai_scheduler_core::framework::report::status::EMPTY_GROUP_GRACE_MS;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("default-queue", None, -1.0, -1.0, 1.0);
    s
}

fn statuses_of(s: &mut Sim) -> Vec<String> {
    let mut names: Vec<String> = s
        .round()
        .decisions
        .group_statuses
        .iter()
        .map(|g| g.key.name.to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn new_empty_groups_are_not_reported_until_they_have_pods() {
    let mut s = sim();
    let now = s.now;
    s.nodes("n", 2, 8);
    for i in 0..100 {
        s.gang(GangSpec::new(&format!("empty-{i:03}"), "default-queue", 0).created(now));
    }
    s.gang(
        GangSpec::new("with-pods", "default-queue", 2)
            .gpus(1)
            .created(now),
    );
    assert_eq!(statuses_of(&mut s), ["with-pods"], "one status, not 101");
    assert!(s.status("empty-000").is_none());
}

#[test]
fn a_gang_whose_pods_are_still_arriving_is_reported_once_complete() {
    let mut s = sim();
    let now = s.now;
    s.nodes("n", 2, 8);
    // minMember 8, 3 pods so far: the Job controller is still making them.
    s.gang(
        GangSpec::new("job", "default-queue", 3)
            .min(8)
            .gpus(1)
            .created(now),
    );
    let first = s.round();
    assert!(
        first.decisions.group_statuses.is_empty(),
        "no status for a filling gang"
    );
    assert!(first.decisions.events.is_empty(), "no warning event either");
    assert!(s.status("job").is_none());
}

#[test]
fn a_group_still_empty_after_the_grace_is_reported() {
    let mut s = sim();
    let now = s.now;
    s.gang(GangSpec::new("empty", "default-queue", 0).created(now));
    assert!(statuses_of(&mut s).is_empty());
    // Nothing else changes: the grace's end is a deadline the quiet-cycle skip honours.
    s.now = now + EMPTY_GROUP_GRACE_MS;
    assert_eq!(statuses_of(&mut s), ["empty"]);
}

#[test]
fn an_old_empty_group_is_reported_at_once() {
    let mut s = sim();
    let now = s.now;
    s.gang(GangSpec::new("empty", "default-queue", 0).created(now - EMPTY_GROUP_GRACE_MS));
    assert_eq!(statuses_of(&mut s), ["empty"]);
}
