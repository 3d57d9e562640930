//! A failed bind (the API refused it, or the binder gave up waiting for the pod's claims) drops the
//! assumption and backs the pod's gang off: not tried again for 5 s, doubling with each failure in a
//! row, and the gang's status says why meanwhile. A bind that lands clears the record.

use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q", Some("dept"), -1.0, -1.0, 1.0);
    s.node("n0", 8_000, 32, 0);
    s
}

/// Rounds until the next bind of the pod, with how many rounds (1 s each) passed.
fn rounds_until_bind(s: &mut Sim, pod: &str, max: usize) -> Option<usize> {
    for i in 1..=max {
        s.round();
        if s.history
            .last()
            .is_some_and(|d| d.binds.iter().any(|b| *b.name == *pod))
        {
            return Some(i);
        }
    }
    None
}

#[test]
fn a_refused_bind_backs_the_gang_off_longer_each_time_and_says_why() {
    let mut s = sim();
    s.gang(GangSpec::new("a", "q", 1).gpus(0).cpu_mem(1000, 1));
    s.refuse_binds
        .insert("ns/a-0".to_owned(), "claims not bound within 60 s".to_owned());
    assert_eq!(rounds_until_bind(&mut s, "a-0", 1), Some(1), "tried at once");
    assert_eq!(s.count("a", TaskStatus::Pending), 1);
    // The next attempts wait 5 s, then 10 s (one round is 1 s); the status says why meanwhile.
    assert_eq!(rounds_until_bind(&mut s, "a-0", 30), Some(5));
    s.round();
    let why = s.why("a").unwrap_or_default();
    assert!(
        why.contains("binding pod ns/a-0 failed (2 times in a row): claims not bound within 60 s"),
        "{why}"
    );
    assert_eq!(rounds_until_bind(&mut s, "a-0", 30), Some(9));
    s.cluster.check_invariants().expect("invariants");
    // The API accepts it now: bound, and the record is gone.
    s.refuse_binds.clear();
    assert_eq!(rounds_until_bind(&mut s, "a-0", 30), Some(20));
    assert_eq!(s.count("a", TaskStatus::Running), 1);
    assert!(s.cluster.tasks.iter().all(|(_, t)| t.bind_failure.is_none()));
}

#[test]
fn a_backing_off_gang_does_not_hold_others_back() {
    let mut s = sim();
    s.gang(GangSpec::new("a", "q", 1).gpus(0).cpu_mem(1000, 1).created(0));
    s.gang(GangSpec::new("b", "q", 1).gpus(0).cpu_mem(1000, 1).created(5));
    s.refuse_binds.insert("ns/a-0".to_owned(), "refused".to_owned());
    s.rounds(3);
    assert_eq!(s.count("b", TaskStatus::Running), 1);
    assert_eq!(s.count("a", TaskStatus::Pending), 1);
}
