//! Rules about other pods, as kube-scheduler's filter and score plugins apply them: inter-pod affinity
//! and anti-affinity (required, preferred, symmetric), topology spread (hard, soft, `minDomains`, node
//! policies) and host ports, gang-aware (the pods of one gang see each other), through evictions, and
//! in the explanations.

use kai_scheduler_core::model::TaskStatus;
use kai_scheduler_core::model::pod_rules::{
    HOSTNAME_KEY, HostPort, Inclusion, LabelSelector, NamespaceScope, PodTerm, Protocol, RulesSpec,
    SelectorRequirement, Spread, conjoin,
};
use kai_scheduler_core::sim::{GangSpec, Sim};

fn sim() -> Sim {
    let mut s = Sim::new();
    s.queue("dept", None, -1.0, -1.0, 1.0);
    s.queue("q", Some("dept"), -1.0, -1.0, 1.0);
    s
}

/// CPU pods (1 core each) of one gang.
fn pods(name: &str, n: u32) -> GangSpec {
    GangSpec::new(name, "q", n).gpus(0).cpu_mem(1000, 1)
}

fn select(app: &str, key: &str) -> PodTerm {
    PodTerm::new(
        Some(LabelSelector::new(vec![SelectorRequirement::equals("app", app)])),
        NamespaceScope::only("ns"),
        key,
    )
}

fn anti(app: &str, key: &str) -> RulesSpec {
    RulesSpec {
        anti_affinity: vec![select(app, key)],
        ..RulesSpec::default()
    }
}

fn spread(app: &str, key: &str, max_skew: u32, hard: bool) -> Spread<PodTerm> {
    Spread {
        term: select(app, key),
        max_skew,
        hard,
        min_domains: None,
        node_affinity: Inclusion::Honor,
        node_taints: Inclusion::Ignore,
    }
}

fn port(port: u16, ip: Option<&str>) -> RulesSpec {
    RulesSpec {
        host_ports: vec![HostPort {
            ip: ip.map(str::to_owned),
            protocol: Protocol::Tcp,
            port,
        }],
        ..RulesSpec::default()
    }
}

fn zones(s: &mut Sim, per_zone: &[(&str, usize)]) {
    for (zone, n) in per_zone {
        for i in 0..*n {
            s.node_with(&format!("{zone}-{i}"), 8_000, 32, 0, &[("zone", zone)], &[]);
        }
    }
}

fn settle(s: &mut Sim, rounds: usize) {
    s.rounds(rounds);
    s.cluster.check_invariants().expect("model invariants");
}

fn zone_counts(s: &Sim, gang: &str) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for (node, n) in s.placement(gang) {
        let zone = node.split('-').next().unwrap_or_default().to_owned();
        *counts.entry(zone).or_default() += n;
    }
    counts.into_iter().collect()
}

#[test]
fn a_gang_with_hostname_anti_affinity_needs_a_node_per_pod_or_waits_whole() {
    let mut s = sim();
    zones(&mut s, &[("a", 3)]);
    s.gang(
        pods("web", 4)
            .labels(&[("app", "web")])
            .rules(anti("web", HOSTNAME_KEY)),
    );
    settle(&mut s, 2);
    assert_eq!(
        s.count("web", TaskStatus::Running),
        0,
        "3 nodes for 4 pods: none placed"
    );
    let why = s.why("web").expect("a reason");
    assert!(why.contains("pod anti-affinity"), "{why}");

    let mut s = sim();
    zones(&mut s, &[("a", 4)]);
    s.gang(
        pods("web", 4)
            .labels(&[("app", "web")])
            .rules(anti("web", HOSTNAME_KEY)),
    );
    settle(&mut s, 2);
    assert_eq!(s.count("web", TaskStatus::Running), 4);
    assert!(
        s.placement("web").values().all(|n| *n == 1),
        "{:?}",
        s.placement("web")
    );
}

#[test]
fn a_placed_pods_anti_affinity_keeps_newcomers_out_of_its_domain() {
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 1)]);
    // A running pod in zone a that wants no web pod in its zone.
    s.gang(
        pods("guard", 1)
            .labels(&[("app", "guard")])
            .rules(anti("web", "zone"))
            .running_on(&["a-0"]),
    );
    s.gang(pods("web", 2).labels(&[("app", "web")]));
    settle(&mut s, 2);
    assert_eq!(
        s.placement("web").get("b-0"),
        Some(&2),
        "{:?}",
        s.placement("web")
    );

    // Room for one only outside zone a: the gang of 3 waits, and says why.
    s.gang(pods("more", 9).labels(&[("app", "web")]));
    settle(&mut s, 2);
    assert_eq!(s.count("more", TaskStatus::Running), 0);
    let why = s.why("more").expect("a reason");
    assert!(why.contains("anti-affinity of a pod already there"), "{why}");
}

#[test]
fn required_affinity_follows_the_selected_pods_and_lets_the_first_of_a_group_start() {
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    s.gang(pods("db", 1).labels(&[("app", "db")]).running_on(&["b-1"]));
    let near_db = RulesSpec {
        affinity: vec![select("db", "zone")],
        ..RulesSpec::default()
    };
    s.gang(pods("app", 3).rules(near_db.clone()));
    settle(&mut s, 2);
    assert_eq!(zone_counts(&s, "app"), vec![("b".to_owned(), 3)]);

    // Nothing selected anywhere and the pod does not select itself: it waits.
    let mut s = sim();
    zones(&mut s, &[("a", 2)]);
    s.gang(pods("app", 1).rules(near_db));
    settle(&mut s, 2);
    assert_eq!(s.count("app", TaskStatus::Running), 0);
    assert!(s.why("app").expect("a reason").contains("pod affinity not met"));

    // A group that wants to be together: the first pod starts anywhere, the rest join its zone, and the
    // gang's own pods count for each other in the same attempt.
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    let together = RulesSpec {
        affinity: vec![select("team", "zone")],
        ..RulesSpec::default()
    };
    s.gang(pods("team", 4).labels(&[("app", "team")]).rules(together));
    settle(&mut s, 2);
    assert_eq!(s.count("team", TaskStatus::Running), 4);
    assert_eq!(zone_counts(&s, "team").len(), 1, "{:?}", s.placement("team"));
}

#[test]
fn hard_spread_balances_a_gang_across_zones_and_min_domains_caps_it() {
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    let rules = RulesSpec {
        spread: vec![spread("web", "zone", 1, true)],
        ..RulesSpec::default()
    };
    s.gang(pods("web", 4).labels(&[("app", "web")]).rules(rules.clone()));
    settle(&mut s, 2);
    assert_eq!(
        zone_counts(&s, "web"),
        vec![("a".to_owned(), 2), ("b".to_owned(), 2)]
    );

    // Already 2 in zone a: the next two go to b.
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    s.gang(
        pods("old", 2)
            .labels(&[("app", "web")])
            .running_on(&["a-0", "a-1"]),
    );
    s.gang(pods("web", 2).labels(&[("app", "web")]).rules(rules));
    settle(&mut s, 2);
    assert_eq!(zone_counts(&s, "web"), vec![("b".to_owned(), 2)]);

    // minDomains 3 with two zones: the smallest count is taken as 0, so one pod per zone at most; a
    // gang of 3 cannot be placed whole and waits.
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    let mut capped = spread("web", "zone", 1, true);
    capped.min_domains = Some(3);
    let rules = RulesSpec {
        spread: vec![capped],
        ..RulesSpec::default()
    };
    s.gang(pods("web", 3).labels(&[("app", "web")]).rules(rules));
    settle(&mut s, 2);
    assert_eq!(s.count("web", TaskStatus::Running), 0);
    let why = s.why("web").expect("a reason");
    assert!(why.contains("topology spread (zone)"), "{why}");
}

#[test]
fn hard_spread_needs_the_topology_label_and_honours_node_affinity_when_counting() {
    let mut s = sim();
    zones(&mut s, &[("a", 1)]);
    s.node("bare", 8_000, 32, 0);
    // Bin-packing alone would take the fuller, unlabelled node.
    s.gang(pods("filler", 1).running_on(&["bare"]));
    let rules = RulesSpec {
        spread: vec![spread("web", "zone", 5, true)],
        ..RulesSpec::default()
    };
    s.gang(pods("web", 2).labels(&[("app", "web")]).rules(rules.clone()));
    settle(&mut s, 2);
    assert_eq!(
        s.placement("web").get("a-0"),
        Some(&2),
        "the unlabelled node is not a candidate"
    );

    // The pod may only use zone a (node selector): zone b's empty domain is not counted, so the skew
    // stays 0 however many land in a.
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    let rules = RulesSpec {
        spread: vec![spread("web", "zone", 1, true)],
        ..RulesSpec::default()
    };
    s.gang(
        pods("web", 3)
            .labels(&[("app", "web")])
            .selector("zone", "a")
            .rules(rules),
    );
    settle(&mut s, 2);
    assert_eq!(s.count("web", TaskStatus::Running), 3);

    // With `nodeAffinityPolicy: Ignore` zone b counts, empty: one pod per zone at most, so the gang of 3
    // restricted to zone a waits.
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    let mut ignoring = spread("web", "zone", 1, true);
    ignoring.node_affinity = Inclusion::Ignore;
    let rules = RulesSpec {
        spread: vec![ignoring],
        ..RulesSpec::default()
    };
    s.gang(
        pods("web", 3)
            .labels(&[("app", "web")])
            .selector("zone", "a")
            .rules(rules),
    );
    settle(&mut s, 2);
    assert_eq!(s.count("web", TaskStatus::Running), 0);
}

#[test]
fn soft_spread_and_preferred_anti_affinity_spread_pods_out_preferred_affinity_gathers_them() {
    let mut s = sim();
    zones(&mut s, &[("a", 3)]);
    let rules = RulesSpec {
        spread: vec![spread("web", HOSTNAME_KEY, 1, false)],
        ..RulesSpec::default()
    };
    s.gang(pods("web", 3).labels(&[("app", "web")]).rules(rules));
    settle(&mut s, 2);
    assert!(
        s.placement("web").values().all(|n| *n == 1),
        "{:?}",
        s.placement("web")
    );

    let mut s = sim();
    zones(&mut s, &[("a", 3)]);
    let rules = RulesSpec {
        preferred_anti_affinity: vec![(100, select("web", HOSTNAME_KEY))],
        ..RulesSpec::default()
    };
    s.gang(pods("web", 3).labels(&[("app", "web")]).rules(rules));
    settle(&mut s, 2);
    assert!(
        s.placement("web").values().all(|n| *n == 1),
        "{:?}",
        s.placement("web")
    );

    // Bin-packing alone would choose the fuller node a-0; the preference for the cache's node wins.
    let mut s = sim();
    zones(&mut s, &[("a", 3)]);
    s.gang(pods("filler", 2).running_on(&["a-0", "a-0"]));
    s.gang(pods("cache", 1).labels(&[("app", "cache")]).running_on(&["a-2"]));
    let rules = RulesSpec {
        preferred_affinity: vec![(50, select("cache", HOSTNAME_KEY))],
        ..RulesSpec::default()
    };
    s.gang(pods("app", 1).rules(rules));
    settle(&mut s, 2);
    assert_eq!(
        s.placement("app").get("a-2"),
        Some(&1),
        "{:?}",
        s.placement("app")
    );
}

#[test]
fn host_ports_conflict_per_port_protocol_and_address() {
    let mut s = sim();
    zones(&mut s, &[("a", 1)]);
    s.gang(pods("one", 1).rules(port(8080, None)));
    s.gang(pods("two", 1).rules(port(8080, None)).created(10));
    s.gang(pods("other-port", 1).rules(port(9090, None)).created(20));
    settle(&mut s, 2);
    assert_eq!(s.count("one", TaskStatus::Running), 1);
    assert_eq!(s.count("other-port", TaskStatus::Running), 1);
    assert_eq!(s.count("two", TaskStatus::Running), 0);
    let why = s.why("two").expect("a reason");
    assert!(why.contains("host port 8080/TCP in use"), "{why}");

    // Two addresses on one node do not conflict; the wildcard conflicts with both.
    let mut s = sim();
    zones(&mut s, &[("a", 1)]);
    s.gang(pods("x", 1).rules(port(53, Some("10.0.0.1"))));
    s.gang(pods("y", 1).rules(port(53, Some("10.0.0.2"))).created(10));
    s.gang(pods("any", 1).rules(port(53, None)).created(20));
    settle(&mut s, 2);
    assert_eq!(s.count("x", TaskStatus::Running), 1);
    assert_eq!(s.count("y", TaskStatus::Running), 1);
    assert_eq!(s.count("any", TaskStatus::Running), 0);
}

#[test]
fn a_port_freed_by_a_terminating_pod_is_reserved_and_then_bound() {
    let mut s = sim();
    zones(&mut s, &[("a", 1)]);
    s.gang(pods("old", 1).rules(port(80, None)).running_on(&["a-0"]));
    s.deleting("ns", "old-0");
    s.gang(pods("new", 1).rules(port(80, None)));
    settle(&mut s, 1);
    assert_eq!(s.count("new", TaskStatus::Pipelined), 1, "{:?}", s.pods("new"));
    s.cluster.check_invariants().expect("invariants");
}

#[test]
fn preemption_evicts_the_pod_whose_host_port_blocks_not_just_any_pod() {
    let mut s = sim();
    s.node_with("n0", 8_000, 32, 0, &[], &[]);
    // Two low-priority pods; only the second binds the port the newcomer needs, and there is CPU for the
    // newcomer without evicting anything.
    s.gang(pods("plain", 1).priority_class("train").running_on(&["n0"]));
    s.gang(
        pods("holder", 1)
            .priority_class("train")
            .rules(port(443, None))
            .running_on(&["n0"]),
    );
    s.gang(
        pods("urgent", 1)
            .priority_class("build")
            .rules(port(443, None))
            .created(10),
    );
    settle(&mut s, 3);
    assert_eq!(s.evicted, vec!["ns/holder-0".to_owned()]);
    assert_eq!(s.count("urgent", TaskStatus::Running), 1);
    assert_eq!(s.count("plain", TaskStatus::Running), 1);
}

#[test]
fn preemption_clears_anti_affinity_on_the_node_it_chooses() {
    let mut s = sim();
    s.node_with("n0", 8_000, 32, 0, &[], &[]);
    s.gang(
        pods("low", 1)
            .priority_class("train")
            .labels(&[("app", "web")])
            .running_on(&["n0"]),
    );
    s.gang(
        pods("high", 1)
            .priority_class("build")
            .rules(anti("web", HOSTNAME_KEY))
            .created(10),
    );
    settle(&mut s, 3);
    assert_eq!(s.evicted, vec!["ns/low-0".to_owned()]);
    assert_eq!(s.count("high", TaskStatus::Running), 1);
}

#[test]
fn counts_stay_exact_through_rounds_removals_and_relabelled_nodes() {
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    let rules = RulesSpec {
        spread: vec![spread("web", "zone", 1, true)],
        anti_affinity: vec![select("web", HOSTNAME_KEY)],
        host_ports: vec![HostPort {
            ip: None,
            protocol: Protocol::Udp,
            port: 5000,
        }],
        ..RulesSpec::default()
    };
    s.gang(pods("web", 4).labels(&[("app", "web")]).rules(rules));
    settle(&mut s, 2);
    assert_eq!(s.count("web", TaskStatus::Running), 4);
    s.complete("ns", "web-0");
    s.cluster.check_invariants().expect("after a completion");
    s.node_with("a-1", 8_000, 32, 0, &[("zone", "c")], &[]);
    s.cluster.check_invariants().expect("after a relabel");
    s.cluster.recount();
    s.cluster.check_invariants().expect("after a recount");
}

#[test]
fn consolidation_moves_no_pod_to_where_a_rule_forbids_it() {
    let train = |name: &str, gpus: u32| GangSpec::new(name, "q", 1).gpus(gpus).priority_class("train");
    let run = |s: &mut Sim, a_rules: RulesSpec| {
        s.node("n0", 64_000, 256, 2).node("n1", 64_000, 256, 2);
        s.gang(train("a", 1).rules(a_rules).running_on(&["n0"]).created(0));
        s.gang(
            train("b", 1)
                .labels(&[("app", "b")])
                .running_on(&["n1"])
                .created(1),
        );
        s.gang(train("big", 2).created(10));
        settle(s, 4);
    };
    // Without a rule one of the two moves and the 2-GPU pod runs.
    let mut s = sim();
    run(&mut s, RulesSpec::default());
    assert_eq!(s.count("big", TaskStatus::Running), 1);
    assert_eq!(s.evicted.len(), 1);
    // `a` must not share a node with `b`: moving `a` to n1 breaks its rule, moving `b` to n0 breaks it
    // the other way round. Nothing is evicted; the big pod waits.
    let mut s = sim();
    run(&mut s, anti("b", HOSTNAME_KEY));
    assert!(s.evicted.is_empty(), "{:?}", s.evicted);
    assert_eq!(s.count("big", TaskStatus::Running), 0);
    assert_eq!(
        s.count("a", TaskStatus::Running) + s.count("b", TaskStatus::Running),
        2
    );
}

/// Two required affinity terms: a pod counts only where it matches both (kube-scheduler's rule), and
/// every node must carry every term's topology key, even for the first pod of a group.
#[test]
fn required_affinity_terms_are_met_by_pods_matching_all_of_them() {
    let both = RulesSpec {
        affinity: vec![select("db", "zone"), {
            let mut cache = select("cache", "zone");
            cache.selector = Some(LabelSelector::new(vec![SelectorRequirement::equals(
                "tier", "cache",
            )]));
            cache
        }],
        ..RulesSpec::default()
    };
    // As the conversion from the pod spec does.
    let mut both = both;
    conjoin(&mut both.affinity);
    let mut s = sim();
    zones(&mut s, &[("a", 2), ("b", 2)]);
    // Zone a holds a db pod and a cache pod, but no pod that is both.
    s.gang(pods("db", 1).labels(&[("app", "db")]).running_on(&["a-0"]));
    s.gang(pods("cache", 1).labels(&[("tier", "cache")]).running_on(&["a-1"]));
    s.gang(pods("app", 1).rules(both.clone()));
    settle(&mut s, 2);
    assert_eq!(s.count("app", TaskStatus::Running), 0, "{:?}", s.placement("app"));
    // A pod that is both arrives in zone b: the waiting pod follows it there.
    s.gang(
        pods("dbcache", 1)
            .labels(&[("app", "db"), ("tier", "cache")])
            .running_on(&["b-0"]),
    );
    settle(&mut s, 2);
    assert_eq!(zone_counts(&s, "app"), vec![("b".to_owned(), 1)]);

    // The first of a group that selects itself needs a node with the topology key.
    let mut s = sim();
    zones(&mut s, &[("a", 1)]);
    s.node("bare", 8_000, 32, 0);
    s.gang(pods("filler", 1).running_on(&["bare"]));
    let together = RulesSpec {
        affinity: vec![select("team", "zone")],
        ..RulesSpec::default()
    };
    s.gang(pods("team", 1).labels(&[("app", "team")]).rules(together));
    settle(&mut s, 2);
    assert_eq!(
        s.placement("team").get("a-0"),
        Some(&1),
        "{:?}",
        s.placement("team")
    );
}
