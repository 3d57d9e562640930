//! Which PodGroup statuses a cycle decides when many groups arrive at once: a group the podgrouper has
//! just made, whose pods are not all in it yet, gets no status (and its gang no warning event) until its
//! gang can be tried (or past the grace); groups with pods are reported in the same cycle that places
//! them. A waiting gang's status whose only change is what is free is rewritten at a bounded rate.

use kai_scheduler_core::framework::decisions::EventObject;
use kai_scheduler_core::framework::report::status::{
    EMPTY_GROUP_GRACE_MS, FIGURES_REFRESH_MAX_MS, FIGURES_REFRESH_MS,
};
use kai_scheduler_core::model::Millis;
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

/// The PodGroups whose statuses a round decided, in order.
fn statuses_decided(result: &kai_scheduler_core::cycle::CycleResult) -> Vec<&str> {
    result
        .decisions
        .group_statuses
        .iter()
        .map(|g| &*g.key.name)
        .collect()
}

/// The `Unschedulable` events of a round, by PodGroup name.
fn unschedulable_events(result: &kai_scheduler_core::cycle::CycleResult) -> Vec<(String, String)> {
    result
        .decisions
        .events
        .iter()
        .filter(|e| e.reason == api::keys::EVENT_UNSCHEDULABLE)
        .map(|e| match &e.object {
            EventObject::PodGroup { name, .. } => (name.to_string(), e.message.clone()),
            other => panic!("an Unschedulable event for {other:?}"),
        })
        .collect()
}

/// Two 4-GPU nodes; `busy` runs three 2-GPU pods (two on n-0, one on n-1), so 2 GPUs are free on n-1;
/// `wait` needs two 4-GPU pods. Its first report is written and raises an event.
fn waiting_behind_busy() -> Sim {
    let mut s = sim();
    s.nodes("n", 2, 4);
    s.gang(
        GangSpec::new("busy", "default-queue", 3)
            .gpus(2)
            .running_on(&["n-0", "n-0", "n-1"]),
    );
    s.gang(GangSpec::new("wait", "default-queue", 2).gpus(4));
    let first = s.round();
    assert!(
        statuses_decided(first).contains(&"wait"),
        "the first report is written"
    );
    assert_eq!(unschedulable_events(first).len(), 1, "and raises an event");
    assert_eq!(first.decisions.pod_conditions.len(), 2, "each pod is told");
    assert_eq!(first.stats.report_due, None);
    let message = s.why("wait").expect("a reason");
    assert!(
        message.starts_with("2 pods need 8 nvidia.com/gpu, 2 free on 1 node"),
        "{message}"
    );
    s
}

/// A status whose only change is what is free waits for the refresh, raises no event, and is written
/// then (the quiet cycle in between is not run until it is due).
#[test]
fn a_waiting_gangs_free_figures_are_refreshed_at_a_bounded_rate() {
    let mut s = waiting_behind_busy();
    let written = s.now - 1000;
    // A pod of `busy` ends: 4 GPUs free on n-1, room for one of `wait`'s two pods.
    s.now = written + 5_000;
    s.complete("ns", "busy-2");
    let held = s.round();
    assert!(!statuses_decided(held).contains(&"wait"), "held back");
    assert!(
        held.decisions.pod_conditions.is_empty(),
        "its pods' conditions too"
    );
    assert!(unschedulable_events(held).is_empty(), "the same reason: no event");
    assert_eq!(held.stats.report_due, Some(written + FIGURES_REFRESH_MS));
    assert!(s.why("wait").is_some_and(|m| m.contains("2 free on 1 node")));
    // Nothing changes before the refresh: the cycles then are skipped.
    s.now = written + FIGURES_REFRESH_MS - 1;
    assert!(s.round().skipped);
    s.now = written + FIGURES_REFRESH_MS;
    let refreshed = s.round();
    assert!(!refreshed.skipped, "the refresh is due");
    assert!(statuses_decided(refreshed).contains(&"wait"));
    assert!(unschedulable_events(refreshed).is_empty(), "still no event");
    assert_eq!(refreshed.stats.report_due, None);
    let message = s.why("wait").expect("a reason");
    assert!(
        message.starts_with("2 pods need 8 nvidia.com/gpu, 4 free on 1 node: room for 1 of 2"),
        "{message}"
    );
    // The next change of figures alone waits twice as long after that refresh.
    let refreshed_at = written + FIGURES_REFRESH_MS;
    s.now = refreshed_at + 5_000;
    s.complete("ns", "busy-1");
    let held = s.round();
    assert!(!statuses_decided(held).contains(&"wait"));
    assert_eq!(held.stats.report_due, Some(refreshed_at + 2 * FIGURES_REFRESH_MS));
    s.now = refreshed_at + 2 * FIGURES_REFRESH_MS;
    s.round();
    assert!(s.why("wait").is_some_and(|m| m.contains("6 free on 2 nodes")));
}

/// The wait between refreshes of the figures alone doubles up to a bound: a gang waiting for hours
/// has its figures rewritten every hour, not every thirty seconds.
#[test]
fn the_refresh_of_figures_backs_off_to_a_bound() {
    let mut s = waiting_behind_busy();
    let mut last = s.now - 1000;
    let mut waits = Vec::new();
    // Every second another job's pod on n-1 ends and one of another size starts there: what is free
    // for `wait` goes 1, 0, 1, 0... GPUs, and it is tried again at every round.
    let mut previous: Option<String> = None;
    for i in 0..12_000_u32 {
        if let Some(p) = previous.take() {
            s.complete("ns", &format!("{p}-0"));
            s.remove_gang("ns", &p);
        }
        let name = format!("blip-{i}");
        s.gang(
            GangSpec::new(&name, "default-queue", 1)
                .gpus(1 + i % 2)
                .running_on(&["n-1"]),
        );
        previous = Some(name);
        let at = s.now;
        let result = s.round();
        if statuses_decided(result).contains(&"wait") {
            waits.push(at - last);
            last = at;
        }
    }
    // Each refresh is due 30 s, 60 s, ... after the last, up to an hour; when the figures at the due
    // round are the ones written (the cycle of sizes is two rounds long), the next round writes.
    let expected: [Millis; 9] = [30, 60, 120, 240, 480, 960, 1920, 3600, 3600].map(|secs| secs * 1000);
    assert_eq!(
        FIGURES_REFRESH_MAX_MS, 3_600_000,
        "the bound this sequence ends at"
    );
    assert!(waits.len() >= expected.len(), "{waits:?}");
    for (wait, due) in waits.iter().zip(expected) {
        assert!(*wait == due || *wait == due + 1000, "{waits:?}");
    }
}

/// A status held back by a report that had other news to take in (an input the status does not show)
/// is still written at the refresh, though the reasons then are exactly the held ones.
#[test]
fn a_status_held_back_with_other_news_is_written_at_the_refresh() {
    let mut s = waiting_behind_busy();
    let written = s.now - 1000;
    s.now = written + 5_000;
    s.complete("ns", "busy-2");
    let id = s
        .cluster
        .groups
        .iter()
        .find(|(_, g)| &*g.key.name == "wait")
        .map(|(i, _)| kai_scheduler_core::model::GroupId(i))
        .expect("wait exists");
    // A definition change no status field shows: the report runs in full, and holds the figures back.
    s.cluster.group_mut(id).version += 1;
    let held = s.round();
    assert!(!statuses_decided(held).contains(&"wait"), "held back");
    assert_eq!(held.stats.report_due, Some(written + FIGURES_REFRESH_MS));
    s.now = written + FIGURES_REFRESH_MS;
    let refreshed = s.round();
    let names = statuses_decided(refreshed);
    assert_eq!(names, ["wait"], "written at the refresh");
    assert!(s.why("wait").is_some_and(|m| m.contains("4 free on 1 node")));
}

/// A pod that joins a gang whose status is held back is told why it waits at once (the others keep
/// theirs until the refresh).
#[test]
fn a_new_pod_of_a_held_back_gang_is_told_at_once() {
    let mut s = waiting_behind_busy();
    s.now += 4_000;
    s.complete("ns", "busy-2");
    // The controller replaces one of `wait`'s pods: the same counts, a pod told nothing.
    s.recreate("ns", "wait-1", "wait-1b");
    let old = s
        .cluster
        .tasks
        .iter()
        .find(|(_, t)| &*t.name == "wait-1")
        .map(|(_, t)| t.uid.to_string())
        .expect("wait-1 exists");
    s.cluster.remove_pod(&old);
    let held = s.round();
    assert!(!statuses_decided(held).contains(&"wait"), "held back");
    let told: Vec<&str> = held.decisions.pod_conditions.iter().map(|c| &*c.name).collect();
    assert_eq!(told, ["wait-1b"]);
}

/// A new reason is written at once, with its event, however recent the last status: here a node
/// refuses for another cause than room.
#[test]
fn a_new_reason_is_written_at_once() {
    let mut s = waiting_behind_busy();
    let written = s.now - 1000;
    s.now = written + 5_000;
    // A third node the pods may not use (a taint they do not tolerate), with room for both.
    s.node_with("tainted", 64_000, 256, 8, &[], &["dedicated"]);
    let changed = s.round();
    let names = statuses_decided(changed);
    assert_eq!(names, ["wait"], "written at once");
    let events = unschedulable_events(changed);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].1.contains("taint"), "{events:?}");
}

/// When the API no longer holds the status written (someone else wrote one), a status differing only
/// in figures is written at once: nothing of ours is there to hold back.
#[test]
fn a_status_overwritten_by_another_writer_is_restored_at_once() {
    let mut s = waiting_behind_busy();
    s.now += 4_000;
    s.complete("ns", "busy-2");
    let mut group = s
        .cluster
        .groups
        .iter()
        .find(|(_, g)| &*g.key.name == "wait")
        .map(|(_, g)| g.clone())
        .expect("wait exists");
    group.observed.fingerprint ^= 0x5a5a;
    group.observed.status = None;
    s.cluster.apply_group(group);
    let restored = s.round();
    let names = statuses_decided(restored);
    assert!(names.contains(&"wait"), "{names:?}");
    assert!(s.why("wait").is_some_and(|m| m.contains("4 free on 1 node")));
}

/// Like gangs kept in the backlog behind the one a session tries have their figures refreshed with
/// it: at the refresh the kept ones are told the fresh figures, naming their own pods, and they are
/// kept again after.
#[test]
fn kept_gangs_have_their_figures_refreshed_and_stay_kept() {
    let mut s = sim();
    s.nodes("n", 2, 4);
    s.gang(
        GangSpec::new("busy", "default-queue", 3)
            .gpus(2)
            .running_on(&["n-0", "n-0", "n-1"]),
    );
    let names = ["wait-0", "wait-1", "wait-2", "wait-3"];
    for name in names {
        s.gang(GangSpec::new(name, "default-queue", 2).gpus(4));
    }
    let waiting_told = |result: &kai_scheduler_core::cycle::CycleResult| {
        let mut told: Vec<String> = statuses_decided(result)
            .into_iter()
            .filter(|name| name.starts_with("wait-"))
            .map(str::to_owned)
            .collect();
        told.sort_unstable();
        told
    };
    let first = s.round();
    assert_eq!(waiting_told(first), names, "every waiting gang is told");
    let written = s.now - 1000;
    // A pod of `busy` ends: the figures change, and wait for the refresh.
    s.now = written + 5_000;
    s.complete("ns", "busy-2");
    let held = s.round();
    assert!(waiting_told(held).is_empty(), "held back");
    // Another gang takes what is free: a session runs, with the waiting gangs kept (each session
    // takes the first in to be tried; the others wait behind it).
    s.now = written + 10_000;
    s.gang(GangSpec::new("other", "default-queue", 1).gpus(4));
    let other = s.round();
    assert!(waiting_told(other).is_empty(), "still held back");
    let kept = s.backlog_len();
    assert_eq!(kept, names.len(), "the waiting gangs are kept");
    s.now = written + FIGURES_REFRESH_MS;
    let refreshed = s.round();
    assert_eq!(waiting_told(refreshed), names, "the kept gangs are told too");
    assert!(
        unschedulable_events(refreshed).is_empty(),
        "the same reason: no event"
    );
    assert_eq!(refreshed.stats.report_due, None);
    // Each is told what the first, tried in the session, was told (naming its own pod): the figures
    // as they are now.
    let fresh = s.why("wait-0").expect("a reason");
    assert!(
        fresh.starts_with("2 pods need 8 nvidia.com/gpu, 0 free on 0 nodes"),
        "{fresh}"
    );
    for name in names {
        let own = fresh.replace("wait-0-0", &format!("{name}-0"));
        assert_eq!(s.why(name), Some(own), "{name}");
    }
    assert_eq!(s.backlog_len(), kept, "kept again");
}
