//! Topology-aware placement (KAI's scenarios 48-51 and a rack-constrained gang).

use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q", Some("dept"), -1.0, -1.0, 1.0);
    s.cluster
        .apply_topology("cluster", vec!["zone".to_owned(), "rack".to_owned()]);
    s
}

#[test]
fn s48_required_zone_preferred_rack() {
    let mut s = sim();
    s.node_with("n0", 64_000, 256, 2, &[("zone", "z1"), ("rack", "r1")], &[]);
    s.node_with("n1", 64_000, 256, 2, &[("zone", "z1"), ("rack", "r2")], &[]);
    s.node_with("n2", 64_000, 256, 2, &[("zone", "z2"), ("rack", "r3")], &[]);
    s.gang(GangSpec::new("job", "q", 3).topology("cluster", Some("zone"), Some("rack")));
    s.round();
    assert_eq!(s.count("job", TaskStatus::Running), 3);
    let nodes: Vec<String> = s.placement("job").keys().cloned().collect();
    assert_eq!(nodes, vec!["n0", "n1"], "both in zone z1");
}

#[test]
fn s49_pack_into_the_rack_already_in_use() {
    let mut s = sim();
    s.node_with("n0", 64_000, 256, 3, &[("zone", "z"), ("rack", "r1")], &[]);
    s.node_with("n1", 64_000, 256, 3, &[("zone", "z"), ("rack", "r2")], &[]);
    s.gang(
        GangSpec::new("first", "q", 1)
            .topology("cluster", Some("rack"), None)
            .running_on(&["n0"]),
    );
    s.gang(GangSpec::new("second", "q", 2).topology("cluster", Some("rack"), None));
    s.round();
    assert_eq!(s.placement("second").get("n0"), Some(&2), "tightest rack first");
}

#[test]
fn s50_s51_required_rack_that_no_rack_can_hold_waits_and_says_why() {
    let mut s = sim();
    s.node_with("n0", 64_000, 256, 1, &[("zone", "z"), ("rack", "r1")], &[]);
    s.node_with("n1", 64_000, 256, 1, &[("zone", "z"), ("rack", "r1")], &[]);
    s.node_with("n2", 64_000, 256, 2, &[("zone", "z"), ("rack", "r2")], &[]);
    s.gang(
        GangSpec::new("big", "q", 2)
            .gpus(2)
            .topology("cluster", Some("rack"), None),
    );
    s.rounds(2);
    assert_eq!(s.count("big", TaskStatus::Running), 0);
    let mut s = sim();
    for i in 0..4 {
        s.node_with(
            &format!("n{i}"),
            64_000,
            256,
            2,
            &[("zone", "z"), ("rack", &format!("r{i}"))],
            &[],
        );
    }
    s.gang(GangSpec::new("spread", "q", 4).topology("cluster", Some("rack"), None));
    s.rounds(2);
    assert_eq!(s.count("spread", TaskStatus::Running), 0);
    let why = s.why("spread").unwrap();
    // No rack could even be tried: the message still states what the gang needs.
    assert!(
        why.starts_with("4 pods need cpu 4, memory 4Gi, nvidia.com/gpu 4: room for 0 of 4"),
        "{why}"
    );
    assert!(why.contains("must share one rack domain"), "{why}");
    assert!(why.contains("the freest rack domain"), "{why}");
}

#[test]
fn rack_constrained_gang_lands_in_one_rack() {
    let mut s = sim();
    for (i, rack) in ["r1", "r1", "r2", "r2"].iter().enumerate() {
        s.node_with(
            &format!("n{i}"),
            64_000,
            256,
            4,
            &[("zone", "z"), ("rack", rack)],
            &[],
        );
    }
    // 2 GPUs already used in r1: r2 is the only rack with 8 free.
    s.gang(GangSpec::new("busy", "q", 1).gpus(2).running_on(&["n0"]));
    s.gang(GangSpec::new("gang", "q", 8).topology("cluster", Some("rack"), None));
    s.round();
    assert_eq!(s.count("gang", TaskStatus::Running), 8);
    let nodes: Vec<String> = s.placement("gang").keys().cloned().collect();
    assert_eq!(nodes, vec!["n2", "n3"]);
}

#[test]
fn unknown_topology_is_reported() {
    let mut s = sim();
    s.node("n0", 64_000, 256, 4);
    s.gang(GangSpec::new("g", "q", 1).topology("missing", Some("rack"), None));
    s.round();
    let status = s.status("g").unwrap();
    let invalid = status.conditions.iter().find(|c| c.type_ == "Invalid").unwrap();
    assert_eq!(invalid.reason.as_deref(), Some("InvalidTopology"));
    assert!(
        invalid
            .message
            .as_deref()
            .unwrap()
            .contains("topology \"missing\" does not exist")
    );
}
