//! GPU sharing, elastic and hierarchical gangs, and topology-aware placement against a real API server
//! (issue 6). Each test has its own namespace and node pool served by its own scheduler process (see
//! `tests/scheduler.rs`); cluster-scoped objects (Queues, Topologies) get names unique to the test.
//!
//! No device plugin runs here: the node agent plays it for the GPU reservation pods, giving each the
//! UUID of the lowest free device of its node.
//!
//! Run one: `cargo test -p e2e --test sharing seed_002`.

use std::collections::BTreeSet;
use std::time::Duration;

use api::keys;
use e2e::TestEnv;
use e2e::workloads::{
    apply, bound, condition, events_with_reason, job, pod_group, pods, pool_labels, pool_nodes, queue,
    queue_name, start, wait_for_phase,
};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How long the scheduler lets a reservation pod without sharers stand, from its creation.
const RESERVATION_IDLE_GRACE_SECS: i64 = 30;

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn seed_documents(file: &str) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(e2e::paths::fixtures_dir().join("seeds").join(file))?;
    e2e::apply::split_documents(&text)
}

/// The scheduler with GPU sharing on (the chart's `global.gpuSharing: true`), through its configuration
/// file, as the chart passes it.
async fn start_sharing(test: &str) -> anyhow::Result<TestEnv> {
    let config = e2e::paths::test_file(
        test,
        "scheduler.yaml",
        "plugins:\n  gpusharing:\n    enabled: true\n    reservationTimeout: 30s\n",
    )?;
    let config = config.to_string_lossy().into_owned();
    let t = start(test, &["--config", &config]).await?;
    e2e::workloads::reservation_account(&t).await?;
    Ok(t)
}

/// The reservation pods on the test's nodes (the reservation namespace is shared by all tests).
async fn reservation_pods(t: &TestEnv, nodes: &[String]) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(t.client().clone(), keys::RESERVATION_NAMESPACE);
    let all = api
        .list(&ListParams::default().labels(&format!("app={}", keys::RESERVATION_APP)))
        .await?
        .items;
    Ok(all
        .into_iter()
        .filter(|p| node_of(p).is_some_and(|n| nodes.iter().any(|m| m == n)))
        .collect())
}

/// Removes reservation pods left on the test's nodes (only after a failure: the scheduler removes them
/// when their last sharer ends, which the test asserts).
async fn remove_reservations(t: &TestEnv, nodes: &[String]) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(t.client().clone(), keys::RESERVATION_NAMESPACE);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for p in reservation_pods(t, nodes).await? {
        let _ = api.delete(&p.name_any(), &now).await;
    }
    Ok(())
}

/// The pods KubeRay would make for the seed's RayCluster: the head and each worker group's replicas from
/// their templates (labels, annotations, containers), owned by the cluster, in the test's pool and gang.
fn ray_pods(t: &TestEnv, cluster: &Value, uid: &str, group: &str) -> Vec<Value> {
    let name = cluster["metadata"]["name"].as_str().unwrap_or_default();
    let owner = json!([{ "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name, "uid": uid,
                         "controller": true }]);
    let pod = |pod_name: String, ray_group: &str, node_type: &str, template: &Value| {
        let mut labels = pool_labels(t);
        labels["ray.io/cluster"] = json!(name);
        labels[keys::RAY_GROUP] = json!(ray_group);
        labels["ray.io/node-type"] = json!(node_type);
        let mut annotations = template["metadata"]["annotations"].clone();
        if !annotations.is_object() {
            annotations = json!({});
        }
        annotations[keys::POD_GROUP_NAME] = json!(group);
        let mut spec = template["spec"].clone();
        spec["schedulerName"] = json!(keys::SCHEDULER_NAME);
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": pod_name, "namespace": t.namespace(), "labels": labels,
                          "annotations": annotations, "ownerReferences": owner },
            "spec": spec,
        })
    };
    let mut out = vec![pod(
        format!("{name}-head"),
        "headgroup",
        "head",
        &cluster["spec"]["headGroupSpec"]["template"],
    )];
    for workers in cluster["spec"]["workerGroupSpecs"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let group_name = workers["groupName"].as_str().unwrap_or_default();
        for i in 0..workers["replicas"].as_u64().unwrap_or(0) {
            out.push(pod(
                format!("{name}-{group_name}-worker-{i}"),
                group_name,
                "worker",
                &workers["template"],
            ));
        }
    }
    out
}

/// Seed 002, step 5: the RayCluster whose two workers ask for half a GPU each. Both workers land on
/// the same node and device (same `runai-gpu-group`, `gpu-fraction: 0.5`) while another node's GPU stays
/// free, held by one reservation pod that got its device index; the seed's verification command prints
/// exactly that. The reservation pod outlives the first worker and is removed with the last.
#[tokio::test]
async fn seed_002_two_half_gpu_ray_workers_share_one_gpu_through_one_reservation() -> anyhow::Result<()> {
    let t = start_sharing("seed-002-sharing").await?;
    let nodes = t.create_nodes(pool_nodes(&t, "sh").count(2).gpus(1)).await?;
    t.install_fixture_crds().await?;
    let cluster = seed_documents("002-raycluster-gpu-sharing.yaml")?.remove(0);
    let applied = t.apply_yaml(&serde_json::to_string(&cluster)?).await?;
    let uid = applied.first().and_then(|c| c.uid()).unwrap_or_default();
    let cluster_name = "raycluster-half-gpu";
    let ray = ray_pods(&t, &cluster, &uid, cluster_name);
    assert_eq!(ray.len(), 3, "a head and two workers");
    let mut objects = vec![pod_group(
        &t,
        cluster_name,
        json!({ "minMember": 3, "queue": keys::DEFAULT_QUEUE }),
    )];
    objects.extend(ray);
    apply(&t, &objects).await?;

    let selector = format!("ray.io/cluster={cluster_name}");
    let placed = t
        .wait_for_pods("the head and both workers bound", &selector, TIMEOUT, |p| {
            p.len() == 3 && bound(p) == 3
        })
        .await?;
    let workers: Vec<&Pod> = placed
        .iter()
        .filter(|p| p.name_any().contains("-worker-"))
        .collect();
    assert_eq!(workers.len(), 2);
    let group_of = |p: &Pod| p.labels().get(keys::GPU_GROUP).cloned();
    let group = group_of(workers[0]).unwrap_or_default();
    assert!(
        !group.is_empty(),
        "{} has no GPU group label",
        workers[0].name_any()
    );
    let node = node_of(workers[0]).unwrap_or_default().to_owned();
    for w in &workers {
        assert_eq!(
            node_of(w),
            Some(node.as_str()),
            "{} on another node",
            w.name_any()
        );
        assert_eq!(group_of(w).as_deref(), Some(group.as_str()), "{}", w.name_any());
        assert_eq!(
            w.annotations().get(keys::GPU_FRACTION).map(String::as_str),
            Some("0.5"),
            "{}",
            w.name_any()
        );
    }

    // One reservation pod holds the shared device, on the workers' node, with the device it was given.
    let reservations = reservation_pods(&t, &nodes).await?;
    assert_eq!(reservations.len(), 1, "one reservation per shared device");
    let reservation = &reservations[0];
    assert_eq!(node_of(reservation), Some(node.as_str()));
    assert_eq!(group_of(reservation).as_deref(), Some(group.as_str()));
    assert_eq!(
        reservation.annotations().get(keys::RESERVED_GPU_INDEX).cloned(),
        Some(e2e::agent::fake_gpu_uuid(&node, 0))
    );

    // The seed's verification command, verbatim but for the namespace.
    let out = t
        .kubectl()?
        .run_ok(
            &[
                "get",
                "pods",
                "-n",
                t.namespace(),
                "-l",
                "ray.io/cluster=raycluster-half-gpu",
                "-o",
                "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,GPU-FRACTION:.metadata.annotations.gpu-fraction,GPU-GROUP:.metadata.labels.runai-gpu-group",
            ],
            None,
        )
        .await?;
    println!("\nseed 002 verification:\n{out}");
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "NODE", "GPU-FRACTION", "GPU-GROUP"], "{out}");
    assert_eq!(rows.len(), 4, "{out}");
    for row in &rows[1..] {
        assert_eq!(row.len(), 4, "{out}");
        if row[0].ends_with("-head") {
            assert_eq!(row[2..], ["<none>", "<none>"], "{out}");
        } else {
            assert_eq!(row[1..], [node.as_str(), "0.5", group.as_str()], "{out}");
        }
    }

    // Scaled down to one worker: the device is still shared by it. Then none: the reservation goes.
    let api: Api<Pod> = t.api();
    api.delete(&workers[0].name_any(), &DeleteParams::default())
        .await?;
    t.wait_for_pods("the first worker gone", &selector, TIMEOUT, |p| p.len() == 2)
        .await?;
    // The scheduler gives an idle reservation pod 30 s from its creation before deleting it: wait past
    // that, so the pod still standing proves the remaining sharer keeps it.
    let created = reservation
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(jiff::Timestamp::now(), |t| t.0);
    let idle_grace = jiff::SignedDuration::from_secs(RESERVATION_IDLE_GRACE_SECS + 3);
    let past_grace = created
        .checked_add(idle_grace)?
        .duration_since(jiff::Timestamp::now());
    let wait = if past_grace.is_positive() {
        past_grace.unsigned_abs()
    } else {
        Duration::ZERO
    };
    tokio::time::sleep(wait.max(Duration::from_secs(2))).await;
    assert_eq!(
        reservation_pods(&t, &nodes).await?.len(),
        1,
        "the reservation stays while a sharer runs"
    );
    api.delete(&workers[1].name_any(), &DeleteParams::default())
        .await?;
    let gone = t
        .wait_until("the reservation pod removed", TIMEOUT, async || {
            Ok(reservation_pods(&t, &nodes).await?.is_empty().then_some(()))
        })
        .await;
    remove_reservations(&t, &nodes).await?;
    gone?;
    t.finish().await
}

/// Seed 000, step 2's shape: an elastic job (minMember 2, maxMember 8, one GPU per pod) starts with 2
/// pods on a 2-GPU pool and grows as nodes join, to all 8.
#[tokio::test]
async fn elastic_job_starts_at_its_minimum_and_grows_to_its_maximum_as_nodes_join() -> anyhow::Result<()> {
    let t = start("elastic", &[]).await?;
    t.create_nodes(pool_nodes(&t, "el").count(1).gpus(2)).await?;
    apply(
        &t,
        &[
            pod_group(
                &t,
                "elastic-training",
                json!({ "minMember": 2, "maxMember": 8, "queue": keys::DEFAULT_QUEUE, "priority": 75 }),
            ),
            job(&t, "elastic-trainer", "elastic-training", 8, 1, json!({})),
        ],
    )
    .await?;
    let selector = "job-name=elastic-trainer";
    t.wait_for_pods("the minimum of 2 bound", selector, TIMEOUT, |p| {
        p.len() == 8 && bound(p) == 2
    })
    .await?;
    wait_for_phase(&t, "elastic-training", api::PodGroupPhase::Running, TIMEOUT).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound(&pods(&t, selector).await?), 2, "no room for more");

    t.create_nodes(pool_nodes(&t, "el2").count(1).gpus(2)).await?;
    t.wait_for_pods("4 bound once 2 GPUs joined", selector, TIMEOUT, |p| bound(p) == 4)
        .await?;
    t.create_nodes(pool_nodes(&t, "el3").count(2).gpus(2)).await?;
    let all = t
        .wait_for_pods("all 8 bound once 4 more GPUs joined", selector, TIMEOUT, |p| {
            bound(p) == 8
        })
        .await?;
    assert_eq!(all.len(), 8, "never more than maxMember pods");
    t.finish().await
}

/// Seed 000, step 5: the ml-pipeline parent with its two children (2 CPU preprocessors, 4 one-GPU
/// trainers; the seed leaves the trainer pods out, here they ask for one GPU each). With 2 GPUs nothing
/// is bound, not even the preprocessors that would fit, and the parent says what is missing; once 2
/// more GPUs join, all 6 are bound.
#[tokio::test]
async fn seed_000_hierarchical_pipeline_is_placed_whole_or_not_at_all() -> anyhow::Result<()> {
    let t = start("seed-000-hierarchy", &[]).await?;
    let training = queue_name(&t, "training");
    apply(&t, &[queue(&training, None, (-1, -1, 1))]).await?;
    t.create_nodes(pool_nodes(&t, "cpu").count(1).cpu("16").memory("64Gi").gpus(0))
        .await?;
    t.create_nodes(pool_nodes(&t, "gpu").count(1).gpus(2)).await?;
    let mut objects = Vec::new();
    for mut doc in seed_documents("000-hierarchical-podgroups.yaml")? {
        doc["metadata"]["namespace"] = json!(t.namespace());
        doc["metadata"]["labels"] = pool_labels(&t);
        if doc["kind"] == "PodGroup" {
            doc["spec"]["queue"] = json!(training);
        }
        objects.push(doc);
    }
    for i in 0..4 {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": format!("trainer-{i}"), "namespace": t.namespace(),
                          "labels": pool_labels(&t),
                          "annotations": { keys::POD_GROUP_SEED: "model-trainers" } },
            "spec": { "schedulerName": keys::SCHEDULER_NAME,
                      "containers": [{ "name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                                       "resources": { "limits": { "nvidia.com/gpu": "1" } } }] },
        }));
    }
    apply(&t, &objects).await?;
    let selector = keys::NODE_POOL;
    let all = |p: &[Pod]| p.len() == 6;
    t.wait_for_pods("the 6 pods", selector, TIMEOUT, all).await?;
    let message = t
        .wait_until("the parent's Unschedulable condition", TIMEOUT, async || {
            Ok(condition(&t, "ml-pipeline", "Unschedulable")
                .await?
                .filter(|m| m.contains(keys::GPU_RESOURCE)))
        })
        .await?;
    println!("ml-pipeline waits: {message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        bound(&pods(&t, selector).await?),
        0,
        "neither child starts alone, though the preprocessors would fit"
    );

    t.create_nodes(pool_nodes(&t, "gpu2").count(1).gpus(2)).await?;
    let placed = t
        .wait_for_pods("all 6 bound", selector, TIMEOUT, |p| {
            p.len() == 6 && bound(p) == 6
        })
        .await?;
    for p in placed
        .iter()
        .filter(|p| p.name_any().starts_with("preprocessor-"))
    {
        assert!(
            node_of(p).is_some_and(|n| n.contains("-cpu-")),
            "CPU pods go to the CPU node: {}",
            p.name_any()
        );
    }
    let queues: Api<api::Queue> = Api::all(t.client().clone());
    queues.delete(&training, &DeleteParams::default()).await?;
    t.finish().await
}

/// A gang with a required rack-level topology constraint: while no single rack can hold it, nothing is
/// bound and the condition names the rack constraint; a smaller gang lands within one rack although
/// its pods would fit across both; when a node joins the other rack, the first gang is bound there.
#[tokio::test]
async fn rack_constrained_gangs_land_in_one_rack_or_wait_and_say_why() -> anyhow::Result<()> {
    let t = start("topology-rack", &[]).await?;
    let rack = "e2e.kai.dev/rack";
    let topology = format!("{}-racks", t.namespace());
    apply(
        &t,
        &[json!({
            "apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
            "metadata": { "name": topology },
            "spec": { "levels": [{ "nodeLabel": rack }] },
        })],
    )
    .await?;
    // Rack r1: 3 GPUs on 2 nodes; rack r2: 4 GPUs on 2 nodes.
    t.create_nodes(pool_nodes(&t, "r1a").count(1).gpus(2).label(rack, "r1"))
        .await?;
    t.create_nodes(pool_nodes(&t, "r1b").count(1).gpus(1).label(rack, "r1"))
        .await?;
    t.create_nodes(pool_nodes(&t, "r2").count(2).gpus(2).label(rack, "r2"))
        .await?;
    let constrained = |min: u32| {
        json!({ "minMember": min, "queue": keys::DEFAULT_QUEUE,
                "topologyConstraint": { "topology": topology, "requiredTopologyLevel": rack } })
    };
    // 5 pods: 7 GPUs free in all, but no rack has 5.
    apply(
        &t,
        &[
            pod_group(&t, "wide", constrained(5)),
            job(&t, "wide", "wide", 5, 1, json!({})),
        ],
    )
    .await?;
    t.wait_for_pods("the wide gang's pods", "job-name=wide", TIMEOUT, |p| p.len() == 5)
        .await?;
    let message = t
        .wait_until(
            "the rack constraint named in the condition",
            TIMEOUT,
            async || {
                Ok(condition(&t, "wide", "Unschedulable")
                    .await?
                    .filter(|m| m.contains("must share one")))
            },
        )
        .await?;
    assert!(
        message.starts_with("5 pods need nvidia.com/gpu 5: room for 0 of 5"),
        "{message}"
    );
    assert!(message.contains(rack), "{message}");
    println!("wide gang waits: {message}");
    assert!(
        !events_with_reason(&t, keys::EVENT_UNSCHEDULABLE)
            .await?
            .is_empty(),
        "an Unschedulable event explains the wait"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound(&pods(&t, "job-name=wide").await?), 0);

    // 4 pods fit only in r2.
    apply(
        &t,
        &[
            pod_group(&t, "narrow", constrained(4)),
            job(&t, "narrow", "narrow", 4, 1, json!({})),
        ],
    )
    .await?;
    let narrow = t
        .wait_for_pods("the narrow gang bound", "job-name=narrow", TIMEOUT, |p| {
            p.len() == 4 && bound(p) == 4
        })
        .await?;
    let racks = |placed: &[Pod]| -> BTreeSet<String> {
        placed
            .iter()
            .filter_map(node_of)
            .map(|n| {
                if n.contains("-r2-") {
                    "r2".to_owned()
                } else {
                    "r1".to_owned()
                }
            })
            .collect()
    };
    assert_eq!(racks(&narrow), BTreeSet::from(["r2".to_owned()]));
    assert_eq!(bound(&pods(&t, "job-name=wide").await?), 0, "r1 still has only 3");

    // r1 grows to 5 GPUs: the wide gang is bound, all of it in r1.
    t.create_nodes(pool_nodes(&t, "r1c").count(1).gpus(2).label(rack, "r1"))
        .await?;
    let wide = t
        .wait_for_pods("the wide gang bound in r1", "job-name=wide", TIMEOUT, |p| {
            bound(p) == 5
        })
        .await?;
    assert_eq!(racks(&wide), BTreeSet::from(["r1".to_owned()]));
    let topologies: Api<api::Topology> = Api::all(t.client().clone());
    topologies.delete(&topology, &DeleteParams::default()).await?;
    t.finish().await
}
