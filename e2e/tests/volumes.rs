//! Pods' storage against a real API server, whose kube-controller-manager runs the PV controller: local
//! PersistentVolumes with node affinity under a `kubernetes.io/no-provisioner` class that waits for the
//! first consumer, a claim that does not exist yet, a gang whose pods each need their own local volume,
//! a claim bound before its pod, and a class whose volumes a provisioner makes (the test plays the
//! provisioner). Workloads go in as users write them (bare pods, a StatefulSet with the gang
//! annotation) and the podgrouper groups them; the scheduler serves the test's own node pool and the
//! node agent plays the kubelet.
//!
//! Each test is arranged so that a scheduler ignoring volumes fails it: bin-packing alone puts a pod on
//! the fullest node (a filler pod makes one node the fullest), which is never where its storage is; and
//! a claim waiting for its first consumer is bound by the PV controller only once the scheduler
//! reserved a volume for it or selected a node.
//!
//! Cluster-scoped objects (volumes, classes) are named after the test's namespace and deleted at the end.
//!
//! Run one: `cargo test -p e2e --test volumes gang`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::keys;
use e2e::workloads::{
    ClusterObjectsCleanup, QueuesCleanup, apply, bound, condition, events_with_reason, pods, pool_nodes,
    queue, queue_name, start_with_podgrouper,
};
use e2e::{FakeNodes, TestEnv};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use serde_json::{Value, json};

/// Generous: a loaded 2-core machine runs the control plane, both components and other tests.
const TIMEOUT: Duration = Duration::from_secs(90);
const HOSTNAME: &str = "kubernetes.io/hostname";
/// The provisioner of local volumes' classes: nothing is provisioned.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The test's environment (scheduler and podgrouper running), a queue of its own with unlimited
/// quota, and the cleanup of its cluster-scoped objects.
async fn start(test: &str) -> anyhow::Result<(TestEnv, String, QueuesCleanup, ClusterObjectsCleanup)> {
    let t = start_with_podgrouper(test, &[]).await?;
    let q = queue_name(&t, "apps");
    let queues = QueuesCleanup::new(&t, &[&q])?;
    apply(&t, &[queue(&q, None, (-1, -1, 1))]).await?;
    let objects = ClusterObjectsCleanup::new(&t)?;
    Ok((t, q, queues, objects))
}

/// CPU nodes of the test's pool: 8 cores, no GPU.
fn cpu_nodes(t: &TestEnv, prefix: &str) -> FakeNodes {
    pool_nodes(t, prefix).cpu("8").gpus(0)
}

/// A pod template as users write it: `labels` (plus the test's pool and queue), this scheduler, one
/// container asking for `cpu`, a volume `data` for each claim in `claims`; `extra` adds pod spec fields.
fn template(t: &TestEnv, q: &str, labels: Value, cpu: &str, claims: &[&str], extra: Value) -> Value {
    let mut labels = labels;
    labels[keys::NODE_POOL] = json!(t.namespace());
    labels[keys::QUEUE_LABEL] = json!(q);
    let volumes: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({ "name": format!("data-{i}"), "persistentVolumeClaim": { "claimName": c } }))
        .collect();
    let mut spec = json!({
        "schedulerName": keys::SCHEDULER_NAME,
        "containers": [{
            "name": "app",
            "image": "example.com/app:1",
            // Quantities as strings: server-side apply on 1.20 fails on numbers there.
            "resources": { "requests": { "cpu": cpu } },
        }],
        "volumes": volumes,
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({ "metadata": { "labels": labels }, "spec": spec })
}

/// A bare pod.
fn pod(name: &str, template: Value) -> Value {
    let mut metadata = template["metadata"].clone();
    metadata["name"] = json!(name);
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"] })
}

/// A pod asking 2 cores on `node`, which bin-packing then prefers for everything else.
fn filler(t: &TestEnv, q: &str, node: &str) -> Value {
    pod(
        "filler",
        template(
            t,
            q,
            json!({ "app": "filler" }),
            "2",
            &[],
            json!({ "nodeSelector": { HOSTNAME: node } }),
        ),
    )
}

/// A StorageClass named `<namespace>-<name>` whose binding waits for the first consumer.
fn wait_for_consumer_class(
    t: &TestEnv,
    cleanup: &mut ClusterObjectsCleanup,
    name: &str,
    provisioner: &str,
    allowed_nodes: &[&str],
) -> (String, Value) {
    let full = format!("{}-{name}", t.namespace());
    cleanup.add("storageclasses.storage.k8s.io", &full);
    let mut class = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": { "name": full },
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain",
    });
    if !allowed_nodes.is_empty() {
        class["allowedTopologies"] =
            json!([{ "matchLabelExpressions": [{ "key": HOSTNAME, "values": allowed_nodes }] }]);
    }
    (full, class)
}

/// A local PersistentVolume named `<namespace>-<name>` of `size` on `node`, in `class`.
fn local_volume(
    t: &TestEnv,
    cleanup: &mut ClusterObjectsCleanup,
    name: &str,
    class: &str,
    size: &str,
    node: &str,
) -> (String, Value) {
    let full = format!("{}-{name}", t.namespace());
    cleanup.add("persistentvolumes", &full);
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": { "name": full },
        "spec": {
            "capacity": { "storage": size },
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class,
            "local": { "path": format!("/mnt/disks/{name}") },
            "nodeAffinity": { "required": { "nodeSelectorTerms": [
                { "matchExpressions": [{ "key": HOSTNAME, "operator": "In", "values": [node] }] },
            ] } },
        },
    });
    (full, volume)
}

/// A claim of `size` in `class`.
fn claim(name: &str, class: &str, size: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": name },
        "spec": {
            "storageClassName": class,
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": size } },
        },
    })
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn name_of(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

/// Waits until the `n` pods matching `selector` are all bound.
async fn all_bound(t: &TestEnv, selector: &str, n: usize) -> anyhow::Result<Vec<Pod>> {
    t.wait_for_pods(&format!("{n} pods bound ({selector})"), selector, TIMEOUT, |p| {
        p.len() == n && bound(p) == n
    })
    .await
}

/// Waits until claim `name` is bound; returns the volume it is bound to.
async fn claim_bound(t: &TestEnv, name: &str) -> anyhow::Result<String> {
    let claims: Api<PersistentVolumeClaim> = t.api();
    t.wait_until(&format!("claim {name} bound"), TIMEOUT, async || {
        let c = claims.get(name).await?;
        let phase = c.status.as_ref().and_then(|s| s.phase.as_deref());
        Ok(c.spec
            .and_then(|s| s.volume_name)
            .filter(|_| phase == Some("Bound")))
    })
    .await
}

/// The volume `name`, once the PV controller has bound it (phase `Bound`); checks it is reserved for
/// claim `claim` with that claim's UID.
async fn volume_bound_to(t: &TestEnv, name: &str, claim: &str) -> anyhow::Result<PersistentVolume> {
    let claims: Api<PersistentVolumeClaim> = t.api();
    let uid = claims.get(claim).await?.metadata.uid;
    let volumes: Api<PersistentVolume> = Api::all(t.client().clone());
    let volume = t
        .wait_until(&format!("volume {name} bound"), TIMEOUT, async || {
            let v = volumes.get(name).await?;
            let phase = v.status.as_ref().and_then(|s| s.phase.clone());
            Ok((phase.as_deref() == Some("Bound")).then_some(v))
        })
        .await?;
    let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    assert_eq!(
        claim_ref.and_then(|r| r.name.as_deref()),
        Some(claim),
        "{name} bound to {claim}"
    );
    assert_eq!(claim_ref.and_then(|r| r.uid.clone()), uid, "with {claim}'s UID");
    Ok(volume)
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

/// 1. A local volume on one node, a claim waiting for its first consumer and a pod using it: the pod
/// lands on the volume's node (not on the fullest node, where bin-packing alone puts it; a second local
/// volume on another node is too small), and the PV controller binds the claim to that volume.
#[tokio::test]
async fn a_pod_lands_where_its_local_volume_is_and_its_claim_binds_to_it() -> anyhow::Result<()> {
    let (t, q, _queues, mut objects) = start("local-volume").await?;
    let nodes = t.create_nodes(cpu_nodes(&t, "lv").count(3)).await?;
    apply(&t, &[filler(&t, &q, &nodes[0])]).await?;
    all_bound(&t, "app=filler", 1).await?;

    let (class, class_object) = wait_for_consumer_class(&t, &mut objects, "local", NO_PROVISIONER, &[]);
    let (small, small_volume) = local_volume(&t, &mut objects, "small", &class, "1Gi", &nodes[1]);
    let (fits, fitting_volume) = local_volume(&t, &mut objects, "fits", &class, "10Gi", &nodes[2]);
    apply(
        &t,
        &[
            class_object,
            small_volume,
            fitting_volume,
            claim("data", &class, "5Gi"),
            pod(
                "app",
                template(&t, &q, json!({ "app": "app" }), "1", &["data"], json!({})),
            ),
        ],
    )
    .await?;
    let placed = all_bound(&t, "app=app", 1).await?;
    assert_eq!(
        node_of(&placed[0]),
        Some(nodes[2].as_str()),
        "the pod runs where its volume {fits} is (not on {small}'s node, too small, nor next to the filler)"
    );
    assert_eq!(claim_bound(&t, "data").await?, fits);
    volume_bound_to(&t, &fits, "data").await?;
    t.finish().await
}

/// 2. A pod whose claim does not exist waits, its PodGroup saying so in kube-scheduler's words; once
/// the claim and a volume for it exist, the pod is bound on the volume's node. (A scheduler ignoring
/// volumes binds it at once.)
#[tokio::test]
async fn a_pod_whose_claim_does_not_exist_waits_until_it_does() -> anyhow::Result<()> {
    let (t, q, _queues, mut objects) = start("missing-claim").await?;
    let nodes = t.create_nodes(cpu_nodes(&t, "mc").count(2)).await?;
    apply(&t, &[filler(&t, &q, &nodes[0])]).await?;
    all_bound(&t, "app=filler", 1).await?;
    apply(
        &t,
        &[pod(
            "app",
            template(&t, &q, json!({ "app": "app" }), "1", &["later"], json!({})),
        )],
    )
    .await?;
    let group = group_of(&t, "app").await?;
    let reason = "persistentvolumeclaim \"later\" not found";
    let why = t
        .wait_until(
            &format!("PodGroup {group} to say the claim is missing"),
            TIMEOUT,
            async || {
                Ok(condition(&t, &group, "Unschedulable")
                    .await?
                    .filter(|m| m.contains(reason)))
            },
        )
        .await?;
    println!("app waits: {why}");
    // The pod itself says so too.
    let pod_says = t
        .wait_until(
            "pod app: PodScheduled=False naming the claim",
            TIMEOUT,
            async || {
                let p = t.api::<Pod>().get("app").await?;
                Ok(p.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                    .and_then(|c| c.message)
                    .filter(|m| m.contains(reason)))
            },
        )
        .await?;
    println!("app's condition: {pod_says}");
    assert_eq!(
        bound(&pods(&t, "app=app").await?),
        0,
        "not bound while its claim is missing"
    );

    let (class, class_object) = wait_for_consumer_class(&t, &mut objects, "local", NO_PROVISIONER, &[]);
    let (volume, volume_object) = local_volume(&t, &mut objects, "later", &class, "10Gi", &nodes[1]);
    apply(&t, &[class_object, volume_object, claim("later", &class, "1Gi")]).await?;
    let placed = all_bound(&t, "app=app", 1).await?;
    assert_eq!(node_of(&placed[0]), Some(nodes[1].as_str()));
    assert_eq!(claim_bound(&t, "later").await?, volume);
    t.finish().await
}

/// 3. A gang of 4 (a StatefulSet with the gang annotation, one claim per pod from its claim template)
/// and 4 local volumes, one per node: each pod lands on a different node, where the volume its claim is
/// bound to is; the 4 claims bind to 4 distinct volumes. (Bin-packing alone stacks the 4 pods on one
/// node, and nothing binds the claims.)
#[tokio::test]
async fn a_gang_of_four_takes_one_local_volume_on_each_of_four_nodes() -> anyhow::Result<()> {
    let (t, q, _queues, mut objects) = start("volume-gang").await?;
    let nodes = t.create_nodes(cpu_nodes(&t, "vg").count(4)).await?;
    let (class, class_object) = wait_for_consumer_class(&t, &mut objects, "local", NO_PROVISIONER, &[]);
    let mut applied = vec![class_object];
    let mut volume_node: BTreeMap<String, String> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let (name, volume) = local_volume(&t, &mut objects, &format!("disk-{i}"), &class, "10Gi", node);
        volume_node.insert(name, node.clone());
        applied.push(volume);
    }
    apply(&t, &applied).await?;

    let ranks = template(&t, &q, json!({ "app": "ranks" }), "1", &[], json!({}));
    let set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "ranks", "annotations": { keys::GANG_SCHEDULING: "true" } },
        "spec": {
            "replicas": 4,
            "serviceName": "ranks",
            // All at once: a gang of 4 cannot start one pod at a time.
            "podManagementPolicy": "Parallel",
            "selector": { "matchLabels": { "app": "ranks" } },
            "template": {
                "metadata": ranks["metadata"],
                "spec": {
                    "schedulerName": ranks["spec"]["schedulerName"],
                    "containers": [{
                        "name": "app",
                        "image": "example.com/app:1",
                        "resources": { "requests": { "cpu": "1" } },
                        "volumeMounts": [{ "name": "data", "mountPath": "/data" }],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": { "name": "data" },
                "spec": {
                    "storageClassName": class,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": { "requests": { "storage": "5Gi" } },
                },
            }],
        },
    });
    apply(&t, &[set]).await?;
    let placed = all_bound(&t, "app=ranks", 4).await?;
    let used: BTreeSet<&str> = placed.iter().filter_map(node_of).collect();
    assert_eq!(used.len(), 4, "4 distinct nodes: {used:?}");
    let mut volumes = BTreeSet::new();
    for p in &placed {
        let claim = format!("data-{}", name_of(p));
        let volume = claim_bound(&t, &claim).await?;
        assert_eq!(
            volume_node.get(&volume).map(String::as_str),
            node_of(p),
            "{} runs where {claim}'s volume {volume} is",
            name_of(p)
        );
        volume_bound_to(&t, &volume, &claim).await?;
        volumes.insert(volume);
    }
    assert_eq!(volumes.len(), 4, "one volume per claim: {volumes:?}");
    t.finish().await
}

/// 4. A claim bound before its pod exists (the volume was reserved for it by name; the PV controller
/// bound them): the pod goes to the node the volume's affinity names, not to the fullest node.
#[tokio::test]
async fn a_pod_whose_claim_is_bound_goes_to_its_volumes_node() -> anyhow::Result<()> {
    let (t, q, _queues, mut objects) = start("bound-claim").await?;
    let nodes = t.create_nodes(cpu_nodes(&t, "bc").count(3)).await?;
    apply(&t, &[filler(&t, &q, &nodes[0])]).await?;
    all_bound(&t, "app=filler", 1).await?;
    // No class at all: the PV controller binds the pair as soon as both exist.
    let (volume, mut volume_object) = local_volume(&t, &mut objects, "kept", "", "10Gi", &nodes[1]);
    volume_object["spec"]["claimRef"] = json!({ "namespace": t.namespace(), "name": "kept" });
    apply(&t, &[volume_object, claim("kept", "", "1Gi")]).await?;
    assert_eq!(claim_bound(&t, "kept").await?, volume);

    apply(
        &t,
        &[pod(
            "app",
            template(&t, &q, json!({ "app": "app" }), "1", &["kept"], json!({})),
        )],
    )
    .await?;
    let placed = all_bound(&t, "app=app", 1).await?;
    assert_eq!(
        node_of(&placed[0]),
        Some(nodes[1].as_str()),
        "the node {volume}'s affinity names"
    );
    t.finish().await
}

/// 5. Dynamic provisioning, the test playing the external provisioner: the class may provision on one
/// node only (`allowedTopologies`); the scheduler places the pod there, names the node on the claim
/// (`volume.kubernetes.io/selected-node`) and waits; the test then makes a volume on that node for the
/// claim, the PV controller binds them, and only then is the pod bound.
#[tokio::test]
async fn a_claim_to_provision_gets_the_pods_node_and_the_pod_waits_for_its_volume() -> anyhow::Result<()> {
    let (t, q, _queues, mut objects) = start("provisioning").await?;
    let nodes = t.create_nodes(cpu_nodes(&t, "pr").count(3)).await?;
    apply(&t, &[filler(&t, &q, &nodes[0])]).await?;
    all_bound(&t, "app=filler", 1).await?;
    let provisioner = format!("e2e.kai.example/{}", t.namespace());
    let (class, class_object) =
        wait_for_consumer_class(&t, &mut objects, "made", &provisioner, &[nodes[2].as_str()]);
    apply(
        &t,
        &[
            class_object,
            claim("scratch", &class, "2Gi"),
            pod(
                "app",
                template(&t, &q, json!({ "app": "app" }), "1", &["scratch"], json!({})),
            ),
        ],
    )
    .await?;

    let claims: Api<PersistentVolumeClaim> = t.api();
    let selected = t
        .wait_until(
            "the scheduler to select a node for claim scratch",
            TIMEOUT,
            async || {
                let c = claims.get("scratch").await?;
                Ok(c.metadata
                    .annotations
                    .and_then(|a| a.get(keys::SELECTED_NODE).cloned()))
            },
        )
        .await?;
    assert_eq!(selected, nodes[2], "the one node the class may provision on");
    assert_eq!(
        bound(&pods(&t, "app=app").await?),
        0,
        "the pod waits for its volume"
    );

    // The provisioner's part: a volume on the selected node, made for this claim.
    let uid = claims.get("scratch").await?.metadata.uid;
    let (volume, mut volume_object) = local_volume(&t, &mut objects, "made", &class, "2Gi", &selected);
    volume_object["metadata"]["annotations"] = json!({ "pv.kubernetes.io/provisioned-by": provisioner });
    volume_object["spec"]["claimRef"] = json!({
        "kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": t.namespace(), "name": "scratch", "uid": uid,
    });
    apply(&t, &[volume_object]).await?;
    assert_eq!(claim_bound(&t, "scratch").await?, volume);
    let placed = all_bound(&t, "app=app", 1).await?;
    assert_eq!(node_of(&placed[0]), Some(selected.as_str()));
    t.finish().await
}

/// 6. A claim to provision that no provisioner serves: the scheduler gives up after 60 s, gives the
/// node back (removes `volume.kubernetes.io/selected-node`), sends the pod back to pending with a
/// `FailedBinding` event and the reason in its PodGroup's status, and tries again after a back-off;
/// once a volume appears, the pod is bound.
#[tokio::test]
async fn a_claim_never_provisioned_is_given_back_and_tried_again() -> anyhow::Result<()> {
    let (t, q, _queues, mut objects) = start("provisioning-timeout").await?;
    let nodes = t.create_nodes(cpu_nodes(&t, "pt").count(2)).await?;
    let provisioner = format!("e2e.kai.example/{}", t.namespace());
    let (class, class_object) =
        wait_for_consumer_class(&t, &mut objects, "never", &provisioner, &[nodes[1].as_str()]);
    apply(
        &t,
        &[
            class_object,
            claim("scratch", &class, "2Gi"),
            pod(
                "app",
                template(&t, &q, json!({ "app": "app" }), "1", &["scratch"], json!({})),
            ),
        ],
    )
    .await?;
    let message = format!(
        "binding volumes failed: claim {}/scratch not bound within 60 s",
        t.namespace()
    );
    let event = t
        .wait_until(
            "a FailedBinding event on the pod",
            Duration::from_secs(180),
            async || {
                let events = events_with_reason(&t, "FailedBinding").await?;
                Ok(events
                    .into_iter()
                    .filter(|e| e.involved_object.name.as_deref() == Some("app"))
                    .filter_map(|e| e.message)
                    .find(|m| m.contains(&message)))
            },
        )
        .await?;
    println!("event: {event}");
    let group = group_of(&t, "app").await?;
    let status = t
        .wait_until(
            &format!("PodGroup {group} to say why the bind failed"),
            TIMEOUT,
            async || {
                Ok(condition(&t, &group, "Unschedulable")
                    .await?
                    .filter(|m| m.contains(&message)))
            },
        )
        .await?;
    println!("status: {status}");
    assert_eq!(bound(&pods(&t, "app=app").await?), 0, "the pod waits");
    let log = t
        .component_log("scheduler")
        .map(std::fs::read_to_string)
        .transpose()?
        .unwrap_or_default();
    assert!(
        log.contains("selected node given back"),
        "the claim's node was given back"
    );

    // A volume for the claim at last: the next attempt binds the pod.
    let claims: Api<PersistentVolumeClaim> = t.api();
    let uid = claims.get("scratch").await?.metadata.uid;
    let (volume, mut volume_object) = local_volume(&t, &mut objects, "late", &class, "2Gi", &nodes[1]);
    volume_object["spec"]["claimRef"] = json!({
        "kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": t.namespace(), "name": "scratch", "uid": uid,
    });
    apply(&t, &[volume_object]).await?;
    assert_eq!(claim_bound(&t, "scratch").await?, volume);
    let placed = all_bound(&t, "app=app", 1).await?;
    assert_eq!(node_of(&placed[0]), Some(nodes[1].as_str()));
    t.finish().await
}
