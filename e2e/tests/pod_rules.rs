//! Rules about other pods against a real API server: inter-pod affinity and anti-affinity (the pod's own
//! and, symmetrically, those of the pods already there), topology spread, host ports, preferred pod and
//! node affinity, and a preemption that clears a host port. Workloads go in as users write them
//! (Deployments, a Job with the gang annotation, bare pods) and the podgrouper groups them; the scheduler
//! serves the test's own node pool (as in `tests/scheduler.rs`) and the node agent plays the kubelet.
//!
//! Each test is arranged so that a scheduler ignoring these fields fails it: bin-packing alone puts the
//! pods together on the fullest node, which every expected placement avoids.
//!
//! Run one: `cargo test -p e2e --test pod_rules host_port`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::keys;
use e2e::workloads::{
    QueuesCleanup, apply, bound, condition, events_with_reason, pods, pool_nodes, queue, queue_name,
    start_with_podgrouper,
};
use e2e::{FakeNodes, TestEnv};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::DeleteParams;
use serde_json::{Value, json};

/// Generous: a loaded 2-core machine runs the control plane, both components and other tests.
const TIMEOUT: Duration = Duration::from_secs(60);
const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// The test's environment (scheduler and podgrouper running) and a queue of its own with unlimited
/// quota: Deployments' pods get the non-preemptible `inference` class, which must fit in the queue's
/// quota, and the default queue's is 0.
async fn start(test: &str) -> anyhow::Result<(TestEnv, String, QueuesCleanup)> {
    let t = start_with_podgrouper(test, &[]).await?;
    let q = queue_name(&t, "apps");
    let cleanup = QueuesCleanup::new(&t, &[&q])?;
    apply(&t, &[queue(&q, None, (-1, -1, 1))]).await?;
    Ok((t, q, cleanup))
}

/// CPU nodes of the test's pool: 8 cores, no GPU.
fn cpu_nodes(t: &TestEnv, prefix: &str) -> FakeNodes {
    pool_nodes(t, prefix).cpu("8").gpus(0)
}

/// A pod template as users write it: `labels` (plus the test's pool and queue), this scheduler, one
/// container asking for `cpu`; `extra` adds fields to the pod spec (affinity, nodeSelector, ...).
fn template(t: &TestEnv, q: &str, labels: Value, cpu: &str, extra: Value) -> Value {
    let mut labels = labels;
    labels[keys::NODE_POOL] = json!(t.namespace());
    labels[keys::QUEUE_LABEL] = json!(q);
    let mut spec = json!({
        "schedulerName": keys::SCHEDULER_NAME,
        "containers": [{
            "name": "app",
            "image": "example.com/app:1",
            // Quantities as strings: server-side apply on 1.20 fails on numbers there.
            "resources": { "requests": { "cpu": cpu } },
        }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({ "metadata": { "labels": labels }, "spec": spec })
}

/// The template with its container binding `port` on the host.
fn with_host_port(mut template: Value, port: u16) -> Value {
    template["spec"]["containers"][0]["ports"] =
        json!([{ "containerPort": 8080, "hostPort": port, "protocol": "TCP" }]);
    template
}

/// A Deployment of `replicas`; its template must carry `app=<name>`.
fn deployment(name: &str, replicas: u32, template: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": template,
        },
    })
}

/// A batch Job of `n` pods that asks for one gang (the podgrouper makes one PodGroup of `n`).
fn gang_job(name: &str, n: u32, mut template: Value) -> Value {
    template["spec"]["restartPolicy"] = json!("Never");
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "annotations": { keys::GANG_SCHEDULING: "true" } },
        "spec": { "parallelism": n, "completions": n, "backoffLimit": 0, "template": template },
    })
}

/// A bare pod.
fn pod(name: &str, template: Value) -> Value {
    let mut metadata = template["metadata"].clone();
    metadata["name"] = json!(name);
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"] })
}

/// A pod affinity term selecting `label=value` within `topology_key`.
fn term(label: (&str, &str), topology_key: &str) -> Value {
    json!({
        "labelSelector": { "matchLabels": { label.0: label.1 } },
        "topologyKey": topology_key,
    })
}

/// Pod spec fields: required pod anti-affinity to `label` within `topology_key`.
fn anti_affinity(label: (&str, &str), topology_key: &str) -> Value {
    json!({ "affinity": { "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [term(label, topology_key)],
    } } })
}

/// Pod spec fields: required pod affinity to `label` within `topology_key`.
fn affinity(label: (&str, &str), topology_key: &str) -> Value {
    json!({ "affinity": { "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [term(label, topology_key)],
    } } })
}

/// Pod spec fields: one topology spread constraint of `maxSkew` 1 over the pods labelled `label`.
fn spread(label: (&str, &str), topology_key: &str, when_unsatisfiable: &str) -> Value {
    json!({ "topologySpreadConstraints": [{
        "maxSkew": 1,
        "topologyKey": topology_key,
        "whenUnsatisfiable": when_unsatisfiable,
        "labelSelector": { "matchLabels": { label.0: label.1 } },
    }] })
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn name_of(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

/// Bound pods per node.
fn per_node(pods: &[Pod]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for n in pods.iter().filter_map(node_of) {
        *counts.entry(n.to_owned()).or_default() += 1;
    }
    counts
}

/// Waits until the `n` pods matching `selector` are all bound.
async fn all_bound(t: &TestEnv, selector: &str, n: usize) -> anyhow::Result<Vec<Pod>> {
    t.wait_for_pods(&format!("{n} pods bound ({selector})"), selector, TIMEOUT, |p| {
        p.len() == n && bound(p) == n
    })
    .await
}

/// The PodGroup the podgrouper gave pod `name`.
async fn group_of(t: &TestEnv, name: &str) -> anyhow::Result<String> {
    t.wait_until(&format!("pod {name} grouped"), TIMEOUT, async || {
        let p = t.api::<Pod>().get(name).await?;
        Ok(p.metadata
            .annotations
            .and_then(|a| a.get(keys::POD_GROUP_NAME).cloned()))
    })
    .await
}

/// Why pod `name` waits: its PodGroup's Unschedulable condition, once it names `rule` (printed).
async fn why_waiting(t: &TestEnv, name: &str, rule: &str) -> anyhow::Result<String> {
    let group = group_of(t, name).await?;
    let why = t
        .wait_until(
            &format!("{name}'s PodGroup {group} to say it waits for {rule:?}"),
            TIMEOUT,
            async || {
                Ok(condition(t, &group, "Unschedulable")
                    .await?
                    .filter(|m| m.contains(rule)))
            },
        )
        .await?;
    println!("{name} waits: {why}");
    Ok(why)
}

/// The Unschedulable event on PodGroup `group` naming `rule`, once it is there.
async fn unschedulable_event(t: &TestEnv, group: &str, rule: &str) -> anyhow::Result<String> {
    t.wait_until(
        &format!("an Unschedulable event on PodGroup {group} naming {rule:?}"),
        TIMEOUT,
        async || {
            let events = events_with_reason(t, keys::EVENT_UNSCHEDULABLE).await?;
            Ok(events
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(group))
                .filter_map(|e| e.message)
                .find(|m| m.contains(rule)))
        },
    )
    .await
}

/// 1. Three replicas that must not share a node, two nodes: two run, one per node; the third waits and
/// its PodGroup's condition and event say pod anti-affinity. (Bin-packing alone runs all three on one
/// node.)
#[tokio::test]
async fn deployment_with_hostname_anti_affinity_runs_one_replica_per_node_and_the_third_waits()
-> anyhow::Result<()> {
    let (t, q, _queues) = start("anti-affinity-deployment").await?;
    t.create_nodes(cpu_nodes(&t, "aa").count(2)).await?;
    let web = template(
        &t,
        &q,
        json!({ "app": "web" }),
        "1",
        anti_affinity(("app", "web"), HOSTNAME),
    );
    apply(&t, &[deployment("web", 3, web)]).await?;
    let replicas = t
        .wait_for_pods("2 of 3 replicas bound", "app=web", TIMEOUT, |p| {
            p.len() == 3 && bound(p) == 2
        })
        .await?;
    let waiting = replicas
        .iter()
        .find(|p| node_of(p).is_none())
        .map(name_of)
        .unwrap_or_default()
        .to_owned();
    // Both nodes are ruled out by the rule.
    let rule = "fits 0/2 nodes: 2 pod anti-affinity";
    why_waiting(&t, &waiting, rule).await?;
    let group = group_of(&t, &waiting).await?;
    unschedulable_event(&t, &group, rule).await?;
    let now = pods(&t, "app=web").await?;
    assert_eq!(bound(&now), 2, "the third replica still waits");
    let nodes = per_node(&now);
    assert!(nodes.values().all(|n| *n == 1), "one replica per node: {nodes:?}");
    t.finish().await
}

/// 2. A gang Job of 4 pods that must not share a node: on 3 nodes none is bound (the gang waits whole,
/// and says why); once a fourth node joins, all 4 are bound on 4 distinct nodes. (Bin-packing alone binds
/// all 4 on one node at once.)
#[tokio::test]
async fn gang_with_hostname_anti_affinity_waits_whole_on_3_nodes_and_spreads_over_4() -> anyhow::Result<()> {
    let (t, q, _queues) = start("anti-affinity-gang").await?;
    t.create_nodes(cpu_nodes(&t, "g3").count(3)).await?;
    let ranks = template(
        &t,
        &q,
        json!({ "app": "ranks" }),
        "1",
        anti_affinity(("app", "ranks"), HOSTNAME),
    );
    apply(&t, &[gang_job("ranks", 4, ranks)]).await?;
    let created = t
        .wait_for_pods("the gang's 4 pods", "app=ranks", TIMEOUT, |p| p.len() == 4)
        .await?;
    let first = name_of(&created[0]).to_owned();
    let group = group_of(&t, &first).await?;
    for p in &created {
        assert_eq!(group_of(&t, name_of(p)).await?, group, "one PodGroup for the Job");
    }
    // The pod that found no node: each of the 3 holds a pod of the gang.
    let rule = "fits 0/3 nodes: 3 pod anti-affinity";
    let why = why_waiting(&t, &first, rule).await?;
    unschedulable_event(&t, &group, rule).await?;
    assert_eq!(
        bound(&pods(&t, "app=ranks").await?),
        0,
        "no pod of a gang that cannot start whole: {why}"
    );

    t.create_nodes(cpu_nodes(&t, "g4").count(1)).await?;
    let placed = all_bound(&t, "app=ranks", 4).await?;
    let nodes = per_node(&placed);
    assert_eq!(nodes.len(), 4, "4 distinct nodes: {nodes:?}");
    t.finish().await
}

/// 3. Required pod affinity by zone: the replicas of a Deployment that must run in the zone of a running
/// `db` pod all land in that zone (zone b), although a fuller node in zone a is what bin-packing picks. A
/// pod whose affinity selects no pod anywhere waits, saying so.
#[tokio::test]
async fn required_pod_affinity_puts_replicas_in_the_zone_of_the_selected_pod() -> anyhow::Result<()> {
    let (t, q, _queues) = start("pod-affinity-zone").await?;
    let zone_a = t
        .create_nodes(cpu_nodes(&t, "za").count(2).label(ZONE, "a"))
        .await?;
    let zone_b = t
        .create_nodes(cpu_nodes(&t, "zb").count(2).label(ZONE, "b"))
        .await?;
    let in_zone = |zone: &str| json!({ "nodeSelector": { ZONE: zone } });
    apply(
        &t,
        &[
            pod("db", template(&t, &q, json!({ "app": "db" }), "1", in_zone("b"))),
            pod(
                "filler",
                template(&t, &q, json!({ "app": "filler" }), "4", in_zone("a")),
            ),
        ],
    )
    .await?;
    all_bound(&t, "app in (db,filler)", 2).await?;

    let api = template(
        &t,
        &q,
        json!({ "app": "api" }),
        "1",
        affinity(("app", "db"), ZONE),
    );
    let lonely = template(
        &t,
        &q,
        json!({ "app": "lonely" }),
        "1",
        affinity(("app", "cache"), ZONE),
    );
    apply(&t, &[deployment("api", 3, api), pod("lonely", lonely)]).await?;
    let placed = all_bound(&t, "app=api", 3).await?;
    let nodes = per_node(&placed);
    assert!(
        nodes.keys().all(|n| zone_b.contains(n)),
        "all in zone b {zone_b:?}, none in zone a {zone_a:?}: {nodes:?}"
    );
    why_waiting(&t, "lonely", "fits 0/4 nodes: 4 pod affinity not met").await?;
    assert_eq!(bound(&pods(&t, "app=lonely").await?), 0);
    t.finish().await
}

/// 4. The symmetric rule: a running pod in zone a whose required anti-affinity selects `tier=web` pods
/// in its zone keeps a web Deployment's replicas out of zone a (they have no rule of their own, and
/// bin-packing alone puts them next to it); a web pod that may only use zone a waits, saying why.
#[tokio::test]
async fn a_running_pods_anti_affinity_keeps_web_pods_out_of_its_zone() -> anyhow::Result<()> {
    let (t, q, _queues) = start("symmetric-anti-affinity").await?;
    let zone_a = t
        .create_nodes(cpu_nodes(&t, "za").count(1).label(ZONE, "a"))
        .await?;
    let zone_b = t
        .create_nodes(cpu_nodes(&t, "zb").count(1).label(ZONE, "b"))
        .await?;
    let mut guard_rules = anti_affinity(("tier", "web"), ZONE);
    guard_rules["nodeSelector"] = json!({ ZONE: "a" });
    apply(
        &t,
        &[pod(
            "guard",
            template(&t, &q, json!({ "app": "guard" }), "4", guard_rules),
        )],
    )
    .await?;
    all_bound(&t, "app=guard", 1).await?;

    let web = template(&t, &q, json!({ "app": "web", "tier": "web" }), "1", json!({}));
    let web_in_a = template(
        &t,
        &q,
        json!({ "app": "web-in-a", "tier": "web" }),
        "1",
        json!({ "nodeSelector": { ZONE: "a" } }),
    );
    apply(&t, &[deployment("web", 3, web), pod("web-in-a", web_in_a)]).await?;
    let placed = all_bound(&t, "app=web", 3).await?;
    let nodes = per_node(&placed);
    assert_eq!(
        nodes,
        BTreeMap::from([(zone_b[0].clone(), 3)]),
        "all in zone b, none next to the guard on {}",
        zone_a[0]
    );
    why_waiting(&t, "web-in-a", "1 anti-affinity of a pod already there").await?;
    assert_eq!(bound(&pods(&t, "app=web-in-a").await?), 0);
    t.finish().await
}

/// 5. Topology spread: 4 replicas with `DoNotSchedule` and maxSkew 1 over 2 zones (2 nodes in a, 1 in
/// b) end 2 + 2; 3 replicas with `ScheduleAnyway` over hostnames take a node each; a pod whose hard
/// constraint names a key no node has waits, saying so. (Bin-packing alone stacks each Deployment on
/// one node.)
#[tokio::test]
async fn topology_spread_balances_zones_hard_and_hostnames_soft() -> anyhow::Result<()> {
    let (t, q, _queues) = start("topology-spread").await?;
    let zone_a = t
        .create_nodes(cpu_nodes(&t, "za").count(2).label(ZONE, "a"))
        .await?;
    let zone_b = t
        .create_nodes(cpu_nodes(&t, "zb").count(1).label(ZONE, "b"))
        .await?;
    let zonal = template(
        &t,
        &q,
        json!({ "app": "zonal" }),
        "1",
        spread(("app", "zonal"), ZONE, "DoNotSchedule"),
    );
    let hosts = template(
        &t,
        &q,
        json!({ "app": "hosts" }),
        "1",
        spread(("app", "hosts"), HOSTNAME, "ScheduleAnyway"),
    );
    let rack = "example.com/rack";
    let racked = template(
        &t,
        &q,
        json!({ "app": "racked" }),
        "1",
        spread(("app", "racked"), rack, "DoNotSchedule"),
    );
    apply(
        &t,
        &[
            deployment("zonal", 4, zonal),
            deployment("hosts", 3, hosts),
            pod("racked", racked),
        ],
    )
    .await?;
    let placed = all_bound(&t, "app=zonal", 4).await?;
    let in_a = placed
        .iter()
        .filter(|p| node_of(p).is_some_and(|n| zone_a.iter().any(|a| a == n)))
        .count();
    let in_b = placed
        .iter()
        .filter(|p| node_of(p).is_some_and(|n| zone_b.iter().any(|b| b == n)))
        .count();
    assert_eq!((in_a, in_b), (2, 2), "{:?}", per_node(&placed));
    let placed = all_bound(&t, "app=hosts", 3).await?;
    let nodes = per_node(&placed);
    assert_eq!(nodes.len(), 3, "one replica per node: {nodes:?}");
    why_waiting(
        &t,
        "racked",
        &format!("fits 0/3 nodes: 3 no {rack} label (topology spread)"),
    )
    .await?;
    t.finish().await
}

/// 6. Host ports on one node: of two pods binding 8080/TCP one runs and the other waits with "host port
/// 8080/TCP in use", until the other one is deleted; a pod binding 9090 runs beside them. (Without the
/// rule all three run at once.)
#[tokio::test]
async fn pods_binding_the_same_host_port_never_share_a_node() -> anyhow::Result<()> {
    let (t, q, _queues) = start("host-ports").await?;
    t.create_nodes(cpu_nodes(&t, "hp").count(1)).await?;
    let bare = |name: &str, port: u16| {
        pod(
            name,
            with_host_port(template(&t, &q, json!({ "app": name }), "1", json!({})), port),
        )
    };
    apply(
        &t,
        &[bare("first", 8080), bare("second", 8080), bare("other", 9090)],
    )
    .await?;
    let selector = "app in (first,second,other)";
    let now = t
        .wait_for_pods("two of the three bound", selector, TIMEOUT, |p| {
            p.len() == 3 && bound(p) == 2
        })
        .await?;
    let waiting: Vec<&str> = now.iter().filter(|p| node_of(p).is_none()).map(name_of).collect();
    let [waiting] = waiting.as_slice() else {
        anyhow::bail!("one pod waits: {waiting:?}");
    };
    assert_ne!(*waiting, "other", "9090 is free");
    why_waiting(&t, waiting, "fits 0/1 nodes: 1 host port 8080/TCP in use").await?;
    assert_eq!(bound(&pods(&t, selector).await?), 2, "{waiting} still waits");

    // The pod holding the port goes: the port is free again and the waiting pod is bound.
    let holder = if *waiting == "first" { "second" } else { "first" };
    t.api::<Pod>().delete(holder, &DeleteParams::default()).await?;
    all_bound(&t, &format!("app in ({waiting},other)"), 2).await?;
    t.finish().await
}

/// 7. Preferences are followed when they can be: a pod preferring the node of a `cache` pod lands there,
/// and a pod preferring `disk=ssd` nodes lands on the one there is, though bin-packing would pick the
/// fuller node for both; a preference no node can meet does not keep a pod from running.
#[tokio::test]
async fn preferred_pod_affinity_and_preferred_node_affinity_are_followed() -> anyhow::Result<()> {
    let (t, q, _queues) = start("preferences").await?;
    let plain = t.create_nodes(cpu_nodes(&t, "p").count(2)).await?;
    let ssd = t
        .create_nodes(cpu_nodes(&t, "ssd").count(1).label("disk", "ssd"))
        .await?;
    let on = |node: &str| json!({ "nodeSelector": { HOSTNAME: node } });
    apply(
        &t,
        &[
            pod(
                "filler",
                template(&t, &q, json!({ "app": "filler" }), "4", on(&plain[0])),
            ),
            pod(
                "cache",
                template(&t, &q, json!({ "app": "cache" }), "1", on(&plain[1])),
            ),
        ],
    )
    .await?;
    all_bound(&t, "app in (filler,cache)", 2).await?;

    let near_cache = json!({ "affinity": { "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            { "weight": 50, "podAffinityTerm": term(("app", "cache"), HOSTNAME) },
        ],
    } } });
    let prefers_disk = |disk: &str| {
        json!({ "affinity": { "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 50,
                "preference": { "matchExpressions": [
                    { "key": "disk", "operator": "In", "values": [disk] },
                ] },
            }],
        } } })
    };
    apply(
        &t,
        &[
            pod(
                "near-cache",
                template(&t, &q, json!({ "app": "near-cache" }), "1", near_cache),
            ),
            pod(
                "wants-ssd",
                template(&t, &q, json!({ "app": "wants-ssd" }), "1", prefers_disk("ssd")),
            ),
            pod(
                "wants-nvme",
                template(&t, &q, json!({ "app": "wants-nvme" }), "1", prefers_disk("nvme")),
            ),
        ],
    )
    .await?;
    let placed = all_bound(&t, "app in (near-cache,wants-ssd,wants-nvme)", 3).await?;
    let node = |name: &str| {
        placed
            .iter()
            .find(|p| name_of(p) == name)
            .and_then(node_of)
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        node("near-cache"),
        plain[1],
        "next to the cache, not on the fuller node"
    );
    assert_eq!(node("wants-ssd"), ssd[0], "on the ssd node");
    t.finish().await
}

/// 8. Preemption clears a host port: one node with CPU to spare holds two low-priority (`train`) pods,
/// one binding 8443. A high-priority (`build`) pod binding 8443 arrives: the scheduler evicts exactly the
/// pod holding the port (an `Evict` event) and binds the newcomer; the other pod runs on, untouched.
/// (Without the rule the newcomer binds at once and nothing is evicted.)
#[tokio::test]
async fn preemption_evicts_exactly_the_pod_holding_the_host_port() -> anyhow::Result<()> {
    let (t, q, _queues) = start("host-port-preemption").await?;
    t.create_nodes(cpu_nodes(&t, "pp").count(1)).await?;
    let with_class = |class: &str| json!({ "priorityClassName": class });
    let holder = with_host_port(
        template(&t, &q, json!({ "app": "holder" }), "1", with_class("train")),
        8443,
    );
    let plain = template(&t, &q, json!({ "app": "plain" }), "1", with_class("train"));
    apply(&t, &[pod("holder", holder), pod("plain", plain)]).await?;
    let low = all_bound(&t, "app in (holder,plain)", 2).await?;
    let plain_uid = low
        .iter()
        .find(|p| name_of(p) == "plain")
        .and_then(|p| p.metadata.uid.clone())
        .unwrap_or_default();

    let urgent = with_host_port(
        template(&t, &q, json!({ "app": "urgent" }), "1", with_class("build")),
        8443,
    );
    apply(&t, &[pod("urgent", urgent)]).await?;
    all_bound(&t, "app=urgent", 1).await?;
    let evicted: Vec<Event> = t
        .wait_until("an Evict event on the holder", TIMEOUT, async || {
            let mut events = events_with_reason(&t, keys::EVENT_EVICT).await?;
            events.retain(|e| e.involved_object.kind.as_deref() == Some("Pod"));
            Ok((!events.is_empty()).then_some(events))
        })
        .await?;
    let names: BTreeSet<&str> = evicted
        .iter()
        .filter_map(|e| e.involved_object.name.as_deref())
        .collect();
    assert_eq!(names, BTreeSet::from(["holder"]), "{evicted:#?}");
    let message = evicted[0].message.as_deref().unwrap_or_default();
    assert!(
        message.starts_with("preempted by higher priority workload"),
        "{message}"
    );
    t.wait_for_pods("the holder gone", "app=holder", TIMEOUT, <[Pod]>::is_empty)
        .await?;
    let plain = pods(&t, "app=plain").await?;
    assert!(
        plain.len() == 1
            && plain[0].metadata.uid.as_deref() == Some(plain_uid.as_str())
            && node_of(&plain[0]).is_some()
            && plain[0].metadata.deletion_timestamp.is_none(),
        "the other low-priority pod runs on untouched: {plain:#?}"
    );
    t.finish().await
}
