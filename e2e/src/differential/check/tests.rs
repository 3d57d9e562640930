//! The checker against hand-worked cases of each v1.20.2 rule.

use super::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

const ZONE: &str = "topology.kubernetes.io/zone";

/// A node with 4 cpus, 8Gi, 10 pods and `labels` (plus its hostname); `extra` merges into the object.
fn node(name: &str, labels: Value, extra: Value) -> Node {
    let mut l = labels;
    l[HOSTNAME] = json!(name);
    let mut n = json!({
        "metadata": { "name": name, "labels": l },
        "spec": {},
        "status": { "allocatable": { "cpu": "4", "memory": "8Gi", "pods": "10" } },
    });
    merge(&mut n, extra);
    serde_json::from_value(n).expect("a node")
}

/// A pod of namespace `ns` with `labels`, `spec` merged over one container requesting 1 cpu, bound to
/// `node` when given.
fn pod(name: &str, ns: &str, labels: Value, node: Option<&str>, spec: Value) -> Pod {
    let mut p = json!({
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": "1" } } }] },
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    merge(&mut p["spec"], spec);
    serde_json::from_value(p).expect("a pod")
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The failing rules per node for `incoming` on `nodes` with `bound` pods.
fn verdict(incoming: &Pod, nodes: &[Node], bound: &[Pod]) -> Verdict {
    evaluate(incoming, &State::new(nodes, bound, None), Release::V1_20).expect("evaluates")
}

fn feasible(incoming: &Pod, nodes: &[Node], bound: &[Pod]) -> Vec<String> {
    verdict(incoming, nodes, bound)
        .feasible()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

fn rules(v: &Verdict, node: &str) -> Vec<Rule> {
    v.failures(node).expect("node").iter().copied().collect()
}

#[test]
fn quantities_read_as_thousandths_rounded_up() {
    assert_eq!(milli("500m").unwrap(), 500);
    assert_eq!(milli("2").unwrap(), 2000);
    assert_eq!(milli("1.5").unwrap(), 1500);
    assert_eq!(milli("1Gi").unwrap(), 1000 << 30);
    assert_eq!(milli("512Mi").unwrap(), 1000 << 29);
    assert_eq!(milli("2k").unwrap(), 2_000_000);
    assert_eq!(milli("0.0001").unwrap(), 1);
    assert!(milli("1e3").is_err());
    assert!(milli("").is_err());
}

#[test]
fn resources_count_bound_pods_requests_and_the_pod_slots() {
    let nodes = [
        node("a", json!({}), json!({})),
        node(
            "b",
            json!({}),
            json!({ "status": { "allocatable": { "pods": "1" } } }),
        ),
        node(
            "g",
            json!({}),
            json!({ "status": { "allocatable": { "nvidia.com/gpu": "2" } } }),
        ),
    ];
    let big = |name: &str, n: &str| {
        pod(
            name,
            "ns",
            json!({}),
            Some(n),
            json!({ "containers": [{ "name": "c", "resources": { "requests": { "cpu": "3500m" } } }] }),
        )
    };
    let bound = [big("x", "a"), pod("y", "ns", json!({}), Some("b"), json!({}))];
    let half = pod(
        "p",
        "ns",
        json!({}),
        None,
        json!({ "containers": [{ "name": "c", "resources": { "requests": { "cpu": "500m" } } }] }),
    );
    assert_eq!(feasible(&half, &nodes, &bound), ["a", "g"]);
    let one = pod("p", "ns", json!({}), None, json!({}));
    let v = verdict(&one, &nodes, &bound);
    assert_eq!(rules(&v, "a"), [Rule::Resources], "3.5 + 1 > 4 cpus");
    assert_eq!(rules(&v, "b"), [Rule::Resources], "no pod slot left");
    // An extended resource the node lacks; a pod asking for nothing needs only a slot.
    let gpu = pod(
        "p",
        "ns",
        json!({}),
        None,
        json!({ "containers": [{ "name": "c", "resources": { "requests": { "nvidia.com/gpu": "2" } } }] }),
    );
    assert_eq!(feasible(&gpu, &nodes, &bound), ["g"]);
    let nothing = pod(
        "p",
        "ns",
        json!({}),
        None,
        json!({ "containers": [{ "name": "c" }] }),
    );
    assert_eq!(feasible(&nothing, &nodes, &bound), ["a", "g"]);
}

#[test]
fn taints_need_tolerations_of_no_schedule_and_no_execute_only() {
    let taint = |key: &str, value: &str, effect: &str| json!({ "spec": { "taints": [{ "key": key, "value": value, "effect": effect }] } });
    let nodes = [
        node("ns", json!({}), taint("dedicated", "ml", "NoSchedule")),
        node("ne", json!({}), taint("maint", "soon", "NoExecute")),
        node("pn", json!({}), taint("flaky", "yes", "PreferNoSchedule")),
    ];
    let with = |tolerations: Value| pod("p", "ns", json!({}), None, json!({ "tolerations": tolerations }));
    assert_eq!(feasible(&with(json!([])), &nodes, &[]), ["pn"]);
    let equal = with(json!([{ "key": "dedicated", "operator": "Equal", "value": "ml" }]));
    assert_eq!(feasible(&equal, &nodes, &[]), ["ns", "pn"]);
    let wrong_value = with(json!([{ "key": "dedicated", "value": "web" }]));
    assert_eq!(feasible(&wrong_value, &nodes, &[]), ["pn"]);
    let wrong_effect = with(json!([{ "key": "maint", "operator": "Exists", "effect": "NoSchedule" }]));
    assert_eq!(feasible(&wrong_effect, &nodes, &[]), ["pn"]);
    let any_effect = with(json!([{ "key": "maint", "operator": "Exists" }]));
    assert_eq!(feasible(&any_effect, &nodes, &[]), ["ne", "pn"]);
    let everything = with(json!([{ "operator": "Exists" }]));
    assert_eq!(feasible(&everything, &nodes, &[]), ["ne", "ns", "pn"]);
}

#[test]
fn a_cordon_is_passed_only_by_tolerating_the_unschedulable_taint() {
    let nodes = [node("c", json!({}), json!({ "spec": { "unschedulable": true } }))];
    let plain = pod("p", "ns", json!({}), None, json!({}));
    assert_eq!(rules(&verdict(&plain, &nodes, &[]), "c"), [Rule::Cordon]);
    let tolerating = pod(
        "p",
        "ns",
        json!({}),
        None,
        json!({ "tolerations": [{ "key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule" }] }),
    );
    assert_eq!(feasible(&tolerating, &nodes, &[]), ["c"]);
}

#[test]
fn node_selector_and_required_node_affinity() {
    let nodes = [
        node("a", json!({ "tier": "gold", "gen": "3" }), json!({})),
        node("b", json!({ "tier": "silver", "gen": "5" }), json!({})),
        node("c", json!({}), json!({})),
    ];
    let selector = pod(
        "p",
        "ns",
        json!({}),
        None,
        json!({ "nodeSelector": { "tier": "gold" } }),
    );
    let v = verdict(&selector, &nodes, &[]);
    assert_eq!(v.feasible(), ["a"]);
    assert_eq!(rules(&v, "c"), [Rule::NodeSelector]);
    let affinity = |terms: Value| {
        pod(
            "p",
            "ns",
            json!({}),
            None,
            json!({ "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": terms } } } }),
        )
    };
    let expr = |key: &str, op: &str, values: Value| json!({ "matchExpressions": [{ "key": key, "operator": op, "values": values }] });
    let check = |terms: Value, want: &[&str]| {
        assert_eq!(feasible(&affinity(terms.clone()), &nodes, &[]), want, "{terms}")
    };
    check(
        json!([expr("tier", "In", json!(["gold", "silver"]))]),
        &["a", "b"],
    );
    check(json!([expr("tier", "NotIn", json!(["gold"]))]), &["b", "c"]);
    check(
        json!([{ "matchExpressions": [{ "key": "tier", "operator": "Exists" }] }]),
        &["a", "b"],
    );
    check(
        json!([{ "matchExpressions": [{ "key": "tier", "operator": "DoesNotExist" }] }]),
        &["c"],
    );
    check(json!([expr("gen", "Gt", json!(["3"]))]), &["b"]);
    check(json!([expr("gen", "Lt", json!(["4"]))]), &["a"]);
    // Terms are ORed, requirements inside one ANDed.
    check(
        json!([
            expr("tier", "In", json!(["gold"])),
            expr("gen", "Gt", json!(["4"]))
        ]),
        &["a", "b"],
    );
    check(
        json!([{ "matchExpressions": [
            { "key": "tier", "operator": "Exists" },
            { "key": "gen", "operator": "Lt", "values": ["4"] },
        ] }]),
        &["a"],
    );
    check(
        json!([{ "matchFields": [{ "key": "metadata.name", "operator": "In", "values": ["c"] }] }]),
        &["c"],
    );
    // A term with no requirement matches nothing.
    check(json!([{}, expr("tier", "In", json!(["silver"]))]), &["b"]);
}

#[test]
fn host_ports_conflict_on_protocol_port_and_overlapping_ip() {
    let nodes = [node("a", json!({}), json!({}))];
    let with_port = |name: &str, node: Option<&str>, ip: &str, protocol: &str| {
        let mut port = json!({ "containerPort": 80, "hostPort": 8080, "protocol": protocol });
        if !ip.is_empty() {
            port["hostIP"] = json!(ip);
        }
        pod(
            name,
            "ns",
            json!({}),
            node,
            json!({ "containers": [{ "name": "c", "ports": [port] }] }),
        )
    };
    let on_a = |ip: &str, protocol: &str| [with_port("e", Some("a"), ip, protocol)];
    let fits = |ip: &str, protocol: &str, bound: &[Pod]| {
        !feasible(&with_port("p", None, ip, protocol), &nodes, bound).is_empty()
    };
    assert!(!fits("", "TCP", &on_a("", "TCP")));
    assert!(
        !fits("10.0.0.1", "TCP", &on_a("", "TCP")),
        "0.0.0.0 covers every IP"
    );
    assert!(!fits("", "TCP", &on_a("10.0.0.1", "TCP")));
    assert!(!fits("10.0.0.1", "TCP", &on_a("10.0.0.1", "TCP")));
    assert!(fits("10.0.0.1", "TCP", &on_a("127.0.0.1", "TCP")));
    assert!(fits("", "UDP", &on_a("", "TCP")));
    let v = verdict(&with_port("p", None, "", "TCP"), &nodes, &on_a("", "TCP"));
    assert_eq!(rules(&v, "a"), [Rule::HostPorts]);
}

/// Three nodes: h1 and h2 in zone z1, h3 in z2, h4 without a zone.
fn zoned() -> Vec<Node> {
    vec![
        node("h1", json!({ ZONE: "z1" }), json!({})),
        node("h2", json!({ ZONE: "z1" }), json!({})),
        node("h3", json!({ ZONE: "z2" }), json!({})),
        node("h4", json!({}), json!({})),
    ]
}

fn term(key: &str, labels: Value, namespaces: Value) -> Value {
    let mut t = json!({ "topologyKey": key, "labelSelector": { "matchLabels": labels } });
    if !namespaces.is_null() {
        t["namespaces"] = namespaces;
    }
    t
}

fn with_affinity(kind: &str, labels: Value, terms: Value) -> Pod {
    pod(
        "p",
        "ns",
        labels,
        None,
        json!({ "affinity": { kind: { "requiredDuringSchedulingIgnoredDuringExecution": terms } } }),
    )
}

#[test]
fn pod_affinity_needs_a_matching_pod_in_the_domain_or_lets_the_first_of_a_group_start() {
    let nodes = zoned();
    let web =
        |name: &str, node: &str, ns: &str| pod(name, ns, json!({ "app": "web" }), Some(node), json!({}));
    let incoming = |labels: Value, terms: Value| with_affinity("podAffinity", labels, terms);
    let zone_web = json!([term(ZONE, json!({ "app": "web" }), Value::Null)]);
    // A web pod in z1: only z1.
    let v = verdict(
        &incoming(json!({}), zone_web.clone()),
        &nodes,
        &[web("w", "h2", "ns")],
    );
    assert_eq!(v.feasible(), ["h1", "h2"]);
    assert_eq!(rules(&v, "h4"), [Rule::PodAffinity], "a node without the key");
    // Of another namespace it does not count, unless the term names that namespace.
    assert!(
        feasible(
            &incoming(json!({}), zone_web.clone()),
            &nodes,
            &[web("w", "h2", "other")]
        )
        .is_empty()
    );
    let both = json!([term(ZONE, json!({ "app": "web" }), json!(["ns", "other"]))]);
    assert_eq!(
        feasible(&incoming(json!({}), both), &nodes, &[web("w", "h2", "other")]),
        ["h1", "h2"]
    );
    // No matching pod anywhere: a pod matching its own terms may go to any node with the keys.
    assert_eq!(
        feasible(&incoming(json!({ "app": "web" }), zone_web.clone()), &nodes, &[]),
        ["h1", "h2", "h3"]
    );
    assert!(feasible(&incoming(json!({ "app": "db" }), zone_web), &nodes, &[]).is_empty());
    // Two terms: an existing pod counts only when it matches both.
    let two = json!([
        term(ZONE, json!({ "app": "web" }), Value::Null),
        term(HOSTNAME, json!({ "tier": "front" }), Value::Null),
    ]);
    let front = pod("f", "ns", json!({ "tier": "front" }), Some("h1"), json!({}));
    let web_front = pod(
        "wf",
        "ns",
        json!({ "app": "web", "tier": "front" }),
        Some("h1"),
        json!({}),
    );
    assert!(
        feasible(
            &incoming(json!({}), two.clone()),
            &nodes,
            &[web("w", "h1", "ns"), front]
        )
        .is_empty()
    );
    assert_eq!(feasible(&incoming(json!({}), two), &nodes, &[web_front]), ["h1"]);
}

#[test]
fn pod_anti_affinity_keeps_out_of_domains_with_a_matching_pod() {
    let nodes = zoned();
    let db = pod("d", "ns", json!({ "app": "db" }), Some("h1"), json!({}));
    let host = with_affinity(
        "podAntiAffinity",
        json!({}),
        json!([term(HOSTNAME, json!({ "app": "db" }), Value::Null)]),
    );
    assert_eq!(
        feasible(&host, &nodes, std::slice::from_ref(&db)),
        ["h2", "h3", "h4"]
    );
    let zone = with_affinity(
        "podAntiAffinity",
        json!({}),
        json!([term(ZONE, json!({ "app": "db" }), Value::Null)]),
    );
    let v = verdict(&zone, &nodes, std::slice::from_ref(&db));
    assert_eq!(v.feasible(), ["h3", "h4"], "a node without the key passes");
    assert_eq!(rules(&v, "h2"), [Rule::PodAntiAffinity]);
    let other_ns = pod("d", "other", json!({ "app": "db" }), Some("h1"), json!({}));
    assert_eq!(feasible(&zone, &nodes, &[other_ns]), ["h1", "h2", "h3", "h4"]);
}

#[test]
fn existing_pods_anti_affinity_is_symmetric() {
    let nodes = zoned();
    let loner = pod(
        "l",
        "ns",
        json!({ "app": "loner" }),
        Some("h1"),
        json!({ "affinity": { "podAntiAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": [
            term(ZONE, json!({ "app": "web" }), Value::Null)
        ] } } }),
    );
    let web = pod("p", "ns", json!({ "app": "web" }), None, json!({}));
    let v = verdict(&web, &nodes, std::slice::from_ref(&loner));
    assert_eq!(v.feasible(), ["h3", "h4"]);
    assert_eq!(rules(&v, "h2"), [Rule::ExistingAntiAffinity]);
    let db = pod("p", "ns", json!({ "app": "db" }), None, json!({}));
    assert_eq!(feasible(&db, &nodes, std::slice::from_ref(&loner)).len(), 4);
    let web_elsewhere = pod("p", "other", json!({ "app": "web" }), None, json!({}));
    assert_eq!(
        feasible(&web_elsewhere, &nodes, &[loner]).len(),
        4,
        "the term's namespace is its pod's"
    );
}

fn spread(key: &str, max_skew: i32, when: &str, extra: Value) -> Pod {
    let mut spec = json!({ "topologySpreadConstraints": [{
        "maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
        "labelSelector": { "matchLabels": { "app": "web" } },
    }] });
    merge(&mut spec, extra);
    pod("p", "ns", json!({ "app": "web" }), None, spec)
}

#[test]
fn spread_skew_counts_matching_pods_of_the_namespace_per_domain() {
    let nodes = zoned();
    let web = |name: &str, node: &str| pod(name, "ns", json!({ "app": "web" }), Some(node), json!({}));
    let bound = [web("a", "h1"), web("b", "h2")];
    // z1 has 2, z2 has 0: only z2 keeps the skew at 1; h4 lacks the key.
    let v = verdict(&spread(ZONE, 1, "DoNotSchedule", json!({})), &nodes, &bound);
    assert_eq!(v.feasible(), ["h3"]);
    assert_eq!(rules(&v, "h4"), [Rule::TopologySpread]);
    assert_eq!(
        feasible(&spread(ZONE, 3, "DoNotSchedule", json!({})), &nodes, &bound),
        ["h1", "h2", "h3"]
    );
    // ScheduleAnyway does not filter.
    assert_eq!(
        feasible(&spread(ZONE, 1, "ScheduleAnyway", json!({})), &nodes, &bound).len(),
        4
    );
    // Pods of another namespace, terminating pods and pods not matching do not count.
    let mut terminating = web("t", "h1");
    terminating.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    let ignored = [
        pod("o", "other", json!({ "app": "web" }), Some("h1"), json!({})),
        pod("d", "ns", json!({ "app": "db" }), Some("h1"), json!({})),
        terminating,
    ];
    assert_eq!(
        feasible(&spread(ZONE, 1, "DoNotSchedule", json!({})), &nodes, &ignored),
        ["h1", "h2", "h3"]
    );
    // Hostname: every node is its own domain, h4 included.
    let v = verdict(&spread(HOSTNAME, 1, "DoNotSchedule", json!({})), &nodes, &bound);
    assert_eq!(v.feasible(), ["h3", "h4"]);
}

#[test]
fn spread_domains_come_from_eligible_nodes_but_v1_20_counts_every_node_in_them_and_later_releases_do_not() {
    let nodes = vec![
        node("g1", json!({ ZONE: "z1", "tier": "gold" }), json!({})),
        node("s1", json!({ ZONE: "z1" }), json!({})),
        node("g2", json!({ ZONE: "z2", "tier": "gold" }), json!({})),
        node("s3", json!({ ZONE: "z3" }), json!({})),
    ];
    let gold = json!({ "nodeSelector": { "tier": "gold" } });
    // Two web pods on s1 (not gold) count in z1 under v1.20.2; z3 is no domain (no gold node there).
    let bound = [
        pod("a", "ns", json!({ "app": "web" }), Some("s1"), json!({})),
        pod("b", "ns", json!({ "app": "web" }), Some("s1"), json!({})),
    ];
    let pod = spread(ZONE, 1, "DoNotSchedule", gold);
    assert_eq!(feasible(&pod, &nodes, &bound), ["g2"]);
    let current = evaluate(&pod, &State::new(&nodes, &bound, None), Release::Current).expect("evaluates");
    assert_eq!(
        current.feasible(),
        ["g1", "g2"],
        "later releases count the eligible nodes' pods only"
    );
    // No eligible domain at all: the minimum stays unset and spread lets every node with the key pass.
    let nowhere = spread(
        ZONE,
        1,
        "DoNotSchedule",
        json!({ "nodeSelector": { "tier": "platinum" } }),
    );
    let v = verdict(&nowhere, &nodes, &bound);
    assert!(v.failures("g1").expect("g1").contains(&Rule::NodeSelector));
    assert!(!v.failures("g1").expect("g1").contains(&Rule::TopologySpread));
}

#[test]
fn verdicts_name_every_failing_rule_and_the_decisive_ones() {
    let nodes = [
        node(
            "a",
            json!({ "tier": "gold" }),
            json!({ "spec": { "unschedulable": true } }),
        ),
        node("b", json!({}), json!({})),
    ];
    let p = pod(
        "p",
        "ns",
        json!({}),
        None,
        json!({ "nodeSelector": { "tier": "gold" } }),
    );
    let v = verdict(&p, &nodes, &[]);
    assert_eq!(rules(&v, "a"), [Rule::Cordon]);
    assert_eq!(rules(&v, "b"), [Rule::NodeSelector]);
    assert_eq!(v.excluding(), [Rule::NodeSelector, Rule::Cordon].into());
    assert_eq!(v.decisive(), [Rule::NodeSelector, Rule::Cordon].into());
    // The pod itself is left out of the state when it is already bound.
    let bound = pod(
        "p",
        "ns",
        json!({}),
        Some("b"),
        json!({ "containers": [{ "name": "c", "resources": { "requests": { "cpu": "4" } } }] }),
    );
    let state = State::new(&nodes, std::slice::from_ref(&bound), Some(("ns", "p")));
    assert!(
        evaluate(&bound, &state, Release::V1_20)
            .expect("evaluates")
            .feasible()
            .contains(&"b")
    );
}

// Volumes
// ---------------------------------------------------------------------------------------------

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("an object")
}

/// A local volume of `class` with `size` and `modes`, available, usable on `nodes` (by hostname; none:
/// no node affinity); `extra` merges into it.
fn pv(name: &str, class: &str, size: &str, modes: &[&str], nodes: &[&str], extra: Value) -> PersistentVolume {
    let mut v = json!({
        "metadata": { "name": name },
        "spec": { "capacity": { "storage": size }, "accessModes": modes, "storageClassName": class,
                  "local": { "path": "/x" } },
        "status": { "phase": "Available" },
    });
    if !nodes.is_empty() {
        v["spec"]["nodeAffinity"] = json!({ "required": { "nodeSelectorTerms": [
            { "matchExpressions": [{ "key": HOSTNAME, "operator": "In", "values": nodes }] }] } });
    }
    merge(&mut v, extra);
    from(v)
}

/// A claim in namespace `ns` of `class` asking for `size` and `modes`; `extra` merges into it.
fn pvc(name: &str, class: &str, size: &str, modes: &[&str], extra: Value) -> PersistentVolumeClaim {
    let mut c = json!({
        "metadata": { "name": name, "namespace": "ns", "uid": format!("uid-{name}") },
        "spec": { "accessModes": modes, "resources": { "requests": { "storage": size } },
                  "storageClassName": class },
        "status": { "phase": "Pending" },
    });
    merge(&mut c, extra);
    from(c)
}

/// A claim bound to `volume` by the PV controller.
fn bound_pvc(name: &str, volume: &str) -> PersistentVolumeClaim {
    pvc(
        name,
        "wffc",
        "1Gi",
        &["ReadWriteOnce"],
        json!({ "metadata": { "annotations": { "pv.kubernetes.io/bind-completed": "yes" } },
                "spec": { "volumeName": volume }, "status": { "phase": "Bound" } }),
    )
}

fn classes() -> Vec<StorageClass> {
    vec![
        from(
            json!({ "metadata": { "name": "wffc" }, "provisioner": "kubernetes.io/no-provisioner",
                     "volumeBindingMode": "WaitForFirstConsumer" }),
        ),
        from(
            json!({ "metadata": { "name": "immediate" }, "provisioner": "kubernetes.io/no-provisioner",
                     "volumeBindingMode": "Immediate" }),
        ),
    ]
}

/// A pod of namespace `ns` naming `claims`.
fn pod_with_claims(claims: &[&str]) -> Pod {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({ "name": c, "persistentVolumeClaim": { "claimName": c } }))
        .collect();
    pod("p", "ns", json!({}), None, json!({ "volumes": volumes }))
}

fn storage(claims: Vec<PersistentVolumeClaim>, volumes: Vec<PersistentVolume>) -> Storage {
    Storage {
        claims,
        volumes,
        classes: classes(),
    }
}

fn volume_verdict(incoming: &Pod, nodes: &[Node], storage: &Storage) -> Verdict {
    evaluate(
        incoming,
        &State::new(nodes, &[], None).with_storage(storage),
        Release::V1_20,
    )
    .expect("evaluates")
}

fn three_nodes() -> Vec<Node> {
    vec![
        node("a", json!({ ZONE: "z1" }), json!({})),
        node("b", json!({ ZONE: "z1" }), json!({})),
        node("c", json!({ ZONE: "z2" }), json!({})),
    ]
}

#[test]
fn an_unbound_claim_needs_an_available_volume_that_fits_on_the_node() {
    let rwo = ["ReadWriteOnce"];
    let s = storage(
        vec![pvc("data", "wffc", "2Gi", &rwo, json!({}))],
        vec![
            pv("small", "wffc", "1Gi", &rwo, &["a"], json!({})),
            pv(
                "other-modes",
                "wffc",
                "5Gi",
                &["ReadWriteMany"],
                &["b"],
                json!({}),
            ),
            pv("other-class", "slow", "5Gi", &rwo, &["b"], json!({})),
            pv(
                "block",
                "wffc",
                "5Gi",
                &rwo,
                &["b"],
                json!({ "spec": { "volumeMode": "Block" } }),
            ),
            pv(
                "taken",
                "wffc",
                "5Gi",
                &rwo,
                &["b"],
                json!({ "spec": { "claimRef": { "namespace": "ns", "name": "else" } } }),
            ),
            pv(
                "not-yet",
                "wffc",
                "5Gi",
                &rwo,
                &["b"],
                json!({ "status": { "phase": "Pending" } }),
            ),
            pv("fits", "wffc", "5Gi", &rwo, &["c"], json!({})),
        ],
    );
    let v = volume_verdict(&pod_with_claims(&["data"]), &three_nodes(), &s);
    assert_eq!(v.feasible(), ["c"]);
    assert_eq!(rules(&v, "a"), [Rule::VolumeBinding]);
    assert_eq!(rules(&v, "b"), [Rule::VolumeBinding]);
    // A volume reserved for the claim decides: nodes it does not admit take no other volume.
    let mut reserved = s.clone();
    reserved.volumes.push(pv(
        "mine",
        "wffc",
        "2Gi",
        &rwo,
        &["a"],
        json!({ "spec": { "claimRef": { "namespace": "ns", "name": "data" } } }),
    ));
    let v = volume_verdict(&pod_with_claims(&["data"]), &three_nodes(), &reserved);
    assert_eq!(v.feasible(), ["a"]);
}

#[test]
fn claims_take_volumes_by_increasing_request_and_never_one_twice() {
    let nodes = [node("a", json!({}), json!({}))];
    // The small claim goes first and takes the smallest volume that fits it, the one the big claim needed
    // for its access mode: kube-scheduler v1.20 finds no volume for the big one.
    let s = storage(
        vec![
            pvc("big", "wffc", "5Gi", &["ReadWriteMany"], json!({})),
            pvc("small", "wffc", "1Gi", &["ReadWriteOnce"], json!({})),
        ],
        vec![
            pv(
                "rwx",
                "wffc",
                "5Gi",
                &["ReadWriteOnce", "ReadWriteMany"],
                &["a"],
                json!({}),
            ),
            pv("rwo", "wffc", "10Gi", &["ReadWriteOnce"], &["a"], json!({})),
        ],
    );
    let v = volume_verdict(&pod_with_claims(&["big", "small"]), &nodes, &s);
    assert_eq!(rules(&v, "a"), [Rule::VolumeBinding]);
    // Two claims, one volume.
    let s = storage(
        vec![
            pvc("x", "wffc", "1Gi", &["ReadWriteOnce"], json!({})),
            pvc("y", "wffc", "1Gi", &["ReadWriteOnce"], json!({})),
        ],
        vec![pv("only", "wffc", "5Gi", &["ReadWriteOnce"], &["a"], json!({}))],
    );
    let v = volume_verdict(&pod_with_claims(&["x", "y"]), &nodes, &s);
    assert_eq!(rules(&v, "a"), [Rule::VolumeBinding]);
    let v = volume_verdict(&pod_with_claims(&["x"]), &nodes, &s);
    assert_eq!(v.feasible(), ["a"]);
}

#[test]
fn missing_claims_immediate_claims_and_missing_classes_keep_the_pod_off_every_node() {
    let rwo = ["ReadWriteOnce"];
    let s = storage(
        vec![
            pvc("immediate", "immediate", "1Gi", &rwo, json!({})),
            pvc("no-class", "nowhere", "1Gi", &rwo, json!({})),
            pvc("fine", "wffc", "1Gi", &rwo, json!({})),
            pvc(
                "going",
                "wffc",
                "1Gi",
                &rwo,
                json!({ "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z" } }),
            ),
            pvc(
                "half-bound",
                "wffc",
                "1Gi",
                &rwo,
                json!({ "spec": { "volumeName": "v" } }),
            ),
            bound_pvc("bound-to-nothing", "gone"),
        ],
        vec![pv("v", "wffc", "5Gi", &rwo, &[], json!({}))],
    );
    for claims in [
        &["missing"][..],
        &["fine", "missing"],
        &["immediate"],
        &["no-class"],
        &["going"],
        &["half-bound"],
        &["bound-to-nothing"],
    ] {
        let v = volume_verdict(&pod_with_claims(claims), &three_nodes(), &s);
        for n in ["a", "b", "c"] {
            assert_eq!(rules(&v, n), [Rule::Claims], "{claims:?} on {n}");
        }
    }
    let v = volume_verdict(&pod_with_claims(&["fine"]), &three_nodes(), &s);
    assert_eq!(v.feasible(), ["a", "b", "c"]);
}

#[test]
fn a_bound_claim_keeps_the_pod_where_its_volume_is() {
    let rwo = ["ReadWriteOnce"];
    let s = storage(
        vec![bound_pvc("on-b", "vb"), bound_pvc("in-z1", "vz")],
        vec![
            pv("vb", "wffc", "1Gi", &rwo, &["b"], json!({})),
            pv(
                "vz",
                "wffc",
                "1Gi",
                &rwo,
                &[],
                json!({ "metadata": { "labels": { ZONE: "z1__z3" } } }),
            ),
        ],
    );
    let v = volume_verdict(&pod_with_claims(&["on-b"]), &three_nodes(), &s);
    assert_eq!(v.feasible(), ["b"]);
    assert_eq!(rules(&v, "a"), [Rule::VolumeNodeAffinity]);
    let mut nodes = three_nodes();
    nodes.push(node("no-zone", json!({}), json!({})));
    nodes.push(node(
        "region-only",
        json!({ "topology.kubernetes.io/region": "r" }),
        json!({}),
    ));
    let v = volume_verdict(&pod_with_claims(&["in-z1"]), &nodes, &s);
    // A node with no zone or region label is not constrained; one with a region but no zone is.
    assert_eq!(v.feasible(), ["a", "b", "no-zone"]);
    assert_eq!(rules(&v, "c"), [Rule::VolumeZone]);
    assert_eq!(rules(&v, "region-only"), [Rule::VolumeZone]);
}

#[test]
fn binding_faults_hold_the_claims_to_the_decision() {
    let rwo = ["ReadWriteOnce"];
    let nodes = three_nodes();
    let before = storage(
        vec![pvc("data", "wffc", "2Gi", &rwo, json!({}))],
        vec![
            pv("fits", "wffc", "5Gi", &rwo, &["c"], json!({})),
            pv("small", "wffc", "1Gi", &rwo, &["c"], json!({})),
        ],
    );
    let bound_to = |volume: &str| {
        let mut claim = pvc(
            "data",
            "wffc",
            "2Gi",
            &rwo,
            json!({ "spec": { "volumeName": volume }, "status": { "phase": "Bound" } }),
        );
        claim.metadata.annotations =
            Some([("pv.kubernetes.io/bind-completed".to_owned(), "yes".to_owned())].into());
        claim
    };
    let reserved = |volume: &str, size: &str| {
        pv(
            volume,
            "wffc",
            size,
            &rwo,
            &["c"],
            json!({ "spec": { "claimRef": { "namespace": "ns", "name": "data", "uid": "uid-data" } },
                    "status": { "phase": "Bound" } }),
        )
    };
    let p = pod_with_claims(&["data"]);
    let good = storage(
        vec![bound_to("fits")],
        vec![
            reserved("fits", "5Gi"),
            pv("small", "wffc", "1Gi", &rwo, &["c"], json!({})),
        ],
    );
    assert!(
        binding_faults(&p, Some(&nodes[2]), &before, &good)
            .unwrap()
            .is_empty()
    );
    // On a node the volume does not admit.
    assert_eq!(
        binding_faults(&p, Some(&nodes[0]), &before, &good).unwrap().len(),
        1
    );
    // Too small a volume.
    let small = storage(
        vec![bound_to("small")],
        vec![
            pv("fits", "wffc", "5Gi", &rwo, &["c"], json!({})),
            reserved("small", "1Gi"),
        ],
    );
    assert_eq!(
        binding_faults(&p, Some(&nodes[2]), &before, &small)
            .unwrap()
            .len(),
        1
    );
    // Not bound at all.
    assert_eq!(
        binding_faults(&p, Some(&nodes[2]), &before, &before)
            .unwrap()
            .len(),
        1
    );
    // Pending: nothing may have been written for its claims.
    assert!(binding_faults(&p, None, &before, &before).unwrap().is_empty());
    let reserved_only = storage(
        vec![pvc("data", "wffc", "2Gi", &rwo, json!({}))],
        vec![
            reserved("fits", "5Gi"),
            pv("small", "wffc", "1Gi", &rwo, &["c"], json!({})),
        ],
    );
    assert_eq!(
        binding_faults(&p, None, &before, &reserved_only).unwrap().len(),
        1
    );
    // A volume that is two claims' volume.
    let mut twice = good.clone();
    let mut other = bound_to("fits");
    other.metadata.name = Some("other".to_owned());
    twice.claims.push(other);
    assert_eq!(
        binding_faults(&p, Some(&nodes[2]), &before, &twice)
            .unwrap()
            .len(),
        1
    );
}
