//! Resource semantics against a real API server: what the API server adds to a pod (RuntimeClass
//! overhead, requests defaulted from limits) and every allocatable the node reports (ephemeral storage,
//! hugepages, extended resources, pod slots) is counted as kube-scheduler counts it, pods created already
//! bound (`spec.nodeName`) take their room, and a gang that does not fit says which resource is missing.
//! The scheduler serves a node pool of the test's own, as in `scheduler.rs`.
//!
//! Sidecars, scheduling gates and resource claims need servers newer than the local control plane
//! (v1.20); their rules are unit-tested (`crates/scheduler/src/cache/convert.rs`, `tests/resources.rs`
//! of the scheduler and core crates).
//!
//! Run one: `cargo test -p e2e --test resources overhead`.

use std::time::Duration;

use api::keys;
use e2e::TestEnv;
use e2e::workloads::{apply, bound, condition, pod_group, pods, pool_labels, pool_nodes, start};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Label on every pod these tests make, for selectors.
const APP: &str = "e2e.kai.dev/app";

/// A pod of this scheduler in the test's pool, in gang `group` (one PodGroup per gang), with `resources`
/// for its one container and `spec` entries merged into its spec.
fn pod(t: &TestEnv, name: &str, group: &str, resources: Value, spec: Value) -> Value {
    let mut labels = pool_labels(t);
    labels[APP] = json!(group);
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": t.namespace(), "labels": labels,
                      "annotations": { keys::POD_GROUP_NAME: group } },
        "spec": { "schedulerName": keys::SCHEDULER_NAME,
                  "containers": [{ "name": "c", "image": "example.com/c:1", "resources": resources }] },
    });
    if let (Some(s), Some(extra)) = (pod["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    pod
}

/// A gang `group` of `n` identical pods (`<group>-<i>`) and its PodGroup needing all of them.
fn gang(t: &TestEnv, group: &str, n: u32, resources: &Value, spec: &Value) -> Vec<Value> {
    let mut objects = vec![pod_group(t, group, json!({ "minMember": n }))];
    objects.extend((0..n).map(|i| pod(t, &format!("{group}-{i}"), group, resources.clone(), spec.clone())));
    objects
}

/// Waits for the message of the PodGroup's Unschedulable condition once it names a missing resource
/// (before all pods are seen it says the gang is still forming).
async fn waiting_reason(t: &TestEnv, group: &str) -> anyhow::Result<String> {
    t.wait_until(
        &format!("PodGroup {group}'s Unschedulable condition to name a resource"),
        TIMEOUT,
        async || {
            Ok(condition(t, group, "Unschedulable")
                .await?
                .filter(|m| !m.starts_with("waiting for pods")))
        },
    )
    .await
}

/// Waits until every pod of gang `group` is bound; returns their nodes.
async fn all_bound(t: &TestEnv, group: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let selector = format!("{APP}={group}");
    let placed = t
        .wait_for_pods(&format!("{n} pods of {group} bound"), &selector, TIMEOUT, |p| {
            p.len() == n && bound(p) == n
        })
        .await?;
    Ok(placed
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect())
}

/// How many pods of gang `group` are bound now.
async fn bound_now(t: &TestEnv, group: &str) -> anyhow::Result<usize> {
    Ok(bound(&pods(t, &format!("{APP}={group}")).await?))
}

/// A RuntimeClass's `overhead.podFixed` lands in `spec.overhead` of the pods naming it (the API server's
/// RuntimeClass admission plugin): a gang that fits without it waits with it, and the reason counts it.
#[tokio::test]
async fn runtime_class_overhead_is_counted() -> anyhow::Result<()> {
    let t = start("res-overhead", &[]).await?;
    let class = format!("{}-vm", t.namespace());
    let classes: Api<RuntimeClass> = Api::all(t.client().clone());
    t.apply_yaml(&serde_json::to_string(&json!({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": { "name": class }, "handler": "runc",
        "overhead": { "podFixed": { "cpu": "250m", "memory": "64Mi" } },
    }))?)
    .await?;
    let outcome = overhead_case(&t, &class).await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    outcome?;
    t.finish().await
}

async fn overhead_case(t: &TestEnv, class: &str) -> anyhow::Result<()> {
    t.create_nodes(pool_nodes(t, "oh").cpu("3").gpus(0)).await?;
    // Two pods of 1500m fill 3 CPUs exactly; 250m of overhead each does not fit.
    let resources = json!({ "requests": { "cpu": "1500m" } });
    apply(
        t,
        &gang(t, "vm", 2, &resources, &json!({ "runtimeClassName": class })),
    )
    .await?;
    let overhead = t.api::<Pod>().get("vm-0").await?.spec.and_then(|s| s.overhead);
    let Some(overhead) = overhead else {
        println!("skipped: the API server did not set spec.overhead (RuntimeClass admission plugin off)");
        return Ok(());
    };
    assert_eq!(overhead.get("cpu").map(|q| q.0.as_str()), Some("250m"));
    let message = waiting_reason(t, "vm").await?;
    assert!(
        message.starts_with("2 pods need 3500m cpu, 3 free on 1 node"),
        "{message}"
    );
    assert_eq!(bound_now(t, "vm").await?, 0);
    // Room for both with their overhead: bound on two nodes.
    t.create_nodes(pool_nodes(t, "oh2").cpu("2").gpus(0)).await?;
    let nodes = all_bound(t, "vm", 2).await?;
    assert_ne!(nodes[0], nodes[1], "1750m each: one per node");
    Ok(())
}

/// Ephemeral storage requests count against the node's `ephemeral-storage` allocatable.
#[tokio::test]
async fn ephemeral_storage_is_counted() -> anyhow::Result<()> {
    let t = start("res-storage", &[]).await?;
    t.create_nodes(
        pool_nodes(&t, "disk")
            .gpus(0)
            .resource("ephemeral-storage", "10Gi"),
    )
    .await?;
    let resources = json!({ "requests": { "cpu": "100m", "ephemeral-storage": "6Gi" } });
    apply(&t, &gang(&t, "first", 1, &resources, &json!({}))).await?;
    all_bound(&t, "first", 1).await?;
    apply(&t, &gang(&t, "second", 1, &resources, &json!({}))).await?;
    let message = waiting_reason(&t, "second").await?;
    assert!(
        message.starts_with("pod needs 6Gi ephemeral-storage, 4Gi free on 1 node"),
        "{message}"
    );
    assert_eq!(bound_now(&t, "second").await?, 0);
    t.finish().await
}

/// Extended resources and hugepages count against the node's allocatable: a gang needing more than
/// one node holds waits whole and names the resource, and is placed when a second node joins.
#[tokio::test]
async fn extended_resources_and_hugepages_are_counted() -> anyhow::Result<()> {
    let t = start("res-extended", &[]).await?;
    let fpga_node = |prefix: &str| {
        pool_nodes(&t, prefix)
            .gpus(0)
            .resource("example.com/fpga", "1")
            .resource("hugepages-2Mi", "64Mi")
    };
    t.create_nodes(fpga_node("fpga")).await?;
    // Extended resources and hugepages: limits only (the API server copies them to requests).
    let resources = json!({ "requests": { "cpu": "100m" },
                            "limits": { "example.com/fpga": "1", "hugepages-2Mi": "32Mi" } });
    apply(&t, &gang(&t, "pair", 2, &resources, &json!({}))).await?;
    let defaulted = t.api::<Pod>().get("pair-0").await?.spec.expect("spec").containers[0]
        .resources
        .clone()
        .and_then(|r| r.requests)
        .and_then(|r| r.get("example.com/fpga").cloned());
    assert_eq!(
        defaulted.map(|q| q.0),
        Some("1".to_owned()),
        "requests defaulted from limits"
    );
    let message = waiting_reason(&t, "pair").await?;
    assert!(
        message.starts_with("2 pods need 2 example.com/fpga, 1 free on 1 node"),
        "{message}"
    );
    assert_eq!(bound_now(&t, "pair").await?, 0);
    // Hugepages: 128Mi asked, 64Mi on the node (the only one): more than any node has.
    let huge = json!({ "requests": { "cpu": "100m" }, "limits": { "hugepages-2Mi": "128Mi" } });
    apply(&t, &gang(&t, "huge", 1, &huge, &json!({}))).await?;
    let message = waiting_reason(&t, "huge").await?;
    assert!(
        message.starts_with("pod needs 128Mi hugepages-2Mi, more than any node has (at most 64Mi)"),
        "{message}"
    );
    t.create_nodes(fpga_node("fpga2")).await?;
    let nodes = all_bound(&t, "pair", 2).await?;
    assert_ne!(nodes[0], nodes[1], "one FPGA per node");
    assert_eq!(bound_now(&t, "huge").await?, 0);
    t.finish().await
}

/// A pod of another scheduler, created with `spec.nodeName` (never bound by a scheduler).
fn foreign_pod(t: &TestEnv, name: &str, node: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": t.namespace() },
        "spec": { "schedulerName": "someone-else", "nodeName": node,
                  "containers": [{ "name": "c", "image": "example.com/c:1",
                                   "resources": { "requests": { "cpu": cpu } } }] },
    })
}

/// Each pod takes one of the node's `pods` allocatable, whoever placed it; a node that reports no
/// `pods` takes no pod at all (kube-scheduler reads the missing value as 0).
#[tokio::test]
async fn pod_slots_are_counted_and_a_node_without_them_takes_no_pod() -> anyhow::Result<()> {
    let t = start("res-pods", &[]).await?;
    let mut no_slots = pool_nodes(&t, "noslots").gpus(0);
    no_slots.capacity.remove("pods");
    t.create_nodes(no_slots).await?;
    let two = t.create_nodes(pool_nodes(&t, "two").gpus(0).pods(2)).await?;
    apply(&t, &[foreign_pod(&t, "elsewhere", &two[0], "100m")]).await?;
    let resources = json!({ "requests": { "cpu": "100m" } });
    apply(&t, &gang(&t, "pair", 2, &resources, &json!({}))).await?;
    let message = waiting_reason(&t, "pair").await?;
    assert!(
        message.starts_with("2 pods need 2 pod slots, 1 free on 1 node"),
        "{message}"
    );
    assert_eq!(bound_now(&t, "pair").await?, 0);
    // The other pod goes: both slots are the gang's.
    t.api::<Pod>()
        .delete("elsewhere", &DeleteParams::default().grace_period(0))
        .await?;
    let nodes = all_bound(&t, "pair", 2).await?;
    assert!(nodes.iter().all(|n| n == &two[0]), "{nodes:?}");
    t.finish().await
}

/// Pods created with `spec.nodeName`, another scheduler's and one naming this scheduler, take their
/// room on the node; the one naming this scheduler is not bound again.
#[tokio::test]
async fn pods_created_bound_take_their_room() -> anyhow::Result<()> {
    let t = start("res-prebound", &[]).await?;
    let nodes = t.create_nodes(pool_nodes(&t, "cpu").cpu("4").gpus(0)).await?;
    let node = &nodes[0];
    apply(&t, &[foreign_pod(&t, "foreign", node, "2")]).await?;
    let mut ours = pod(
        &t,
        "by-hand",
        "by-hand",
        json!({ "requests": { "cpu": "1" } }),
        json!({ "nodeName": node }),
    );
    ours["metadata"]["annotations"] = json!({});
    apply(&t, &[ours]).await?;
    let resources = json!({ "requests": { "cpu": "2" } });
    apply(&t, &gang(&t, "late", 1, &resources, &json!({}))).await?;
    let message = waiting_reason(&t, "late").await?;
    assert!(
        message.starts_with("pod needs 2 cpu, 1 free on 1 node"),
        "{message}"
    );
    assert_eq!(bound_now(&t, "late").await?, 0);
    // The hand-placed pod runs where it was put (the node agent started it; nobody bound it again).
    let by_hand = t.api::<Pod>().get("by-hand").await?;
    assert_eq!(
        by_hand.spec.and_then(|s| s.node_name).as_deref(),
        Some(node.as_str())
    );
    // The foreign pod goes: room for the gang.
    t.api::<Pod>()
        .delete("foreign", &DeleteParams::default().grace_period(0))
        .await?;
    all_bound(&t, "late", 1).await?;
    t.finish().await
}
