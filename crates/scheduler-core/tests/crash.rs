//! Crash containment: a cycle that panics half way (after placing part of a gang) is undone, the gang it
//! was working on is set aside with a reason users can read, and the next cycles schedule everyone else.

use kai_scheduler_core::config::ActionKind;
use kai_scheduler_core::cycle::{self, contain};
use kai_scheduler_core::framework::Session;
use kai_scheduler_core::model::{NodeId, TaskStatus};
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("default-parent-queue", None, 0.0, -1.0, 1.0);
    s.queue("q", Some("default-parent-queue"), -1.0, -1.0, 1.0);
    s.nodes("gpu", 2, 2);
    s
}

#[test]
fn a_cycle_that_panics_mid_gang_is_undone_and_only_that_gang_is_set_aside() {
    let mut s = sim();
    s.gang(GangSpec::new("poison", "q", 2).gpus(1));
    s.gang(GangSpec::new("healthy", "q", 2).gpus(1));
    let config = s.config.clone();
    let now = s.now;

    // A cycle that places one pod of "poison" and then panics, as a bug reachable from its spec would.
    let crash = contain(&mut s.cluster, |cluster| {
        let mut ssn = Session::open(cluster, &config, now);
        let g = ssn
            .gangs
            .iter()
            .position(|gang| &*ssn.cluster.group(gang.root).key.name == "poison")
            .expect("gang");
        ssn.attempt(g);
        let task = ssn.gangs[g].tasks().next().expect("a pod");
        let node = NodeId(ssn.cluster.nodes.iter().map(|(i, _)| i).next().expect("node"));
        ssn.allocate(task, node, Vec::new());
        panic!("attempt to subtract with overflow");
    })
    .expect_err("the panic is contained");
    assert_eq!(crash.message, "attempt to subtract with overflow");
    assert_eq!(crash.group.as_ref().map(|k| &*k.name), Some("poison"));
    s.cluster
        .check_invariants()
        .expect("the half-placed gang was undone");
    assert_eq!(s.count("poison", TaskStatus::Binding), 0);

    // Scheduling goes on: the healthy gang is placed, the poisoned one waits and says why.
    s.rounds(3);
    assert_eq!(s.count("healthy", TaskStatus::Running), 2);
    assert_eq!(s.count("poison", TaskStatus::Running), 0);
    let why = s.why("poison").expect("a reason on the PodGroup");
    assert!(
        why.contains("internal error (attempt to subtract with overflow)"),
        "{why}"
    );
    s.cluster.check_invariants().expect("consistent");
}

#[test]
fn a_contained_cycle_without_a_panic_is_the_plain_cycle() {
    let mut a = sim();
    let mut b = sim();
    for s in [&mut a, &mut b] {
        s.gang(GangSpec::new("x", "q", 3).gpus(1));
    }
    let plain = cycle::run(&mut a.cluster, &a.config, a.now);
    let contained = cycle::run_contained(&mut b.cluster, &b.config, b.now).expect("no panic");
    assert_eq!(plain.decisions.binds.len(), 3);
    assert_eq!(
        format!("{:?}", plain.decisions.binds),
        format!("{:?}", contained.decisions.binds)
    );
    // The configured actions ran.
    assert!(contained.actions.iter().any(|(a, _)| *a == ActionKind::Allocate));
}
