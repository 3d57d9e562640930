//! The podgrouper against a real API server: the binary runs as a local process (one per test, limited
//! to the test's namespace); batch Jobs, Deployments and bare pods get their pods from the real
//! controllers; for the CRD kinds (JobSet, RayCluster, TrainJob, PyTorchJob, LeaderWorkerSet, Grove,
//! RunaiJob) the test creates the owner objects and the pods with the owner references their operators
//! would set.
//!
//! Each test asserts the PodGroups' fields and the pods' annotations and labels.
//!
//! Run one: `cargo test -p e2e --test podgrouper raycluster`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use api::{PodGroup, keys};
use e2e::TestEnv;
use e2e::component::Component;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(45);
const COMPONENT: &str = "podgrouper";
static BUILT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Builds the podgrouper once per test process.
async fn build() -> anyhow::Result<()> {
    BUILT
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(|| Component::build("kai-podgrouper")).await?
        })
        .await?;
    Ok(())
}

/// A test namespace with the fixture CRDs and a podgrouper watching it.
async fn start(test: &str) -> anyhow::Result<TestEnv> {
    build().await?;
    let t = TestEnv::start(test).await?;
    t.install_fixture_crds().await?;
    start_podgrouper(&t)?;
    Ok(t)
}

fn start_podgrouper(t: &TestEnv) -> anyhow::Result<()> {
    start_podgrouper_with(t, &[])
}

/// [`start_podgrouper`] with `extra` flags after the test's own.
fn start_podgrouper_with(t: &TestEnv, extra: &[&str]) -> anyhow::Result<()> {
    // Alone on its namespace: no Lease (the binary elects by default).
    let mut args = vec![
        "--namespace",
        t.namespace(),
        "--admin-address",
        "127.0.0.1:0",
        "--leader-elect=false",
    ];
    // No scheduler binds these pods (a binding would name them), so they are named at once unless a
    // test asks for the delay.
    if !extra.iter().any(|a| a.starts_with("--pod-naming-delay-seconds")) {
        args.push("--pod-naming-delay-seconds=0");
    }
    args.extend_from_slice(extra);
    t.start_component(COMPONENT, "kai-podgrouper", args)
}

/// Applies one object given as JSON; returns it as stored.
async fn apply(t: &TestEnv, object: &Value) -> anyhow::Result<DynamicObject> {
    let mut applied = t.apply_yaml(&serde_json::to_string(object)?).await?;
    applied.pop().ok_or_else(|| anyhow::anyhow!("nothing applied"))
}

/// An owner reference to `owner` as its controller would write it.
fn owned_by(owner: &DynamicObject) -> Value {
    reference(owner, true)
}

fn reference(owner: &DynamicObject, controller: bool) -> Value {
    let types = owner.types.clone().unwrap_or_default();
    json!([{
        "apiVersion": types.api_version, "kind": types.kind, "name": owner.name_any(),
        "uid": owner.uid().unwrap_or_default(), "controller": controller,
    }])
}

/// A pod of the scheduler, as an operator would create it.
fn pod(name: &str, labels: Value, owner: &DynamicObject) -> Value {
    pod_with(name, labels, owned_by(owner))
}

fn pod_with(name: &str, labels: Value, owner_references: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner_references},
        "spec": {"schedulerName": keys::SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]},
    })
}

fn group_of(p: &Pod) -> Option<String> {
    p.annotations().get(keys::POD_GROUP_NAME).cloned()
}

fn sub_group_of(p: &Pod) -> Option<String> {
    p.labels().get(keys::SUBGROUP_NAME).cloned()
}

/// Waits until `count` pods matching `selector` all carry a group annotation.
async fn grouped_pods(t: &TestEnv, selector: &str, count: usize) -> anyhow::Result<Vec<Pod>> {
    t.wait_for_pods(
        &format!("{count} grouped pods ({selector})"),
        selector,
        TIMEOUT,
        |pods| pods.len() == count && pods.iter().all(|p| group_of(p).is_some()),
    )
    .await
}

/// Waits until the PodGroup `name` exists and satisfies `accept`.
async fn pod_group(t: &TestEnv, name: &str, accept: impl Fn(&PodGroup) -> bool) -> anyhow::Result<PodGroup> {
    let api: Api<PodGroup> = t.api();
    t.wait_until(&format!("PodGroup {name}"), TIMEOUT, async || {
        Ok(api.get_opt(name).await?.filter(|pg| accept(pg)))
    })
    .await
}

async fn pod_groups(t: &TestEnv) -> anyhow::Result<Vec<PodGroup>> {
    Ok(t.api::<PodGroup>().list(&ListParams::default()).await?.items)
}

fn owner_of(pg: &PodGroup) -> (String, String) {
    let o = pg.owner_references().first().cloned().unwrap_or_default();
    (o.kind, o.name)
}

fn sub_groups(pg: &PodGroup) -> Vec<(String, i32)> {
    pg.spec
        .sub_groups
        .iter()
        .map(|s| (s.name.clone(), s.min_member.unwrap_or(0)))
        .collect()
}

fn pairs(v: &[(&str, i32)]) -> Vec<(String, i32)> {
    v.iter().map(|(n, m)| ((*n).to_owned(), *m)).collect()
}

fn seed(t: &TestEnv, file: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(e2e::paths::fixtures_dir().join("seeds").join(file))?;
    Ok(text.replace("namespace: ml-training", &format!("namespace: {}", t.namespace())))
}

fn batch_job(name: &str, parallelism: i32, completions: i32, annotations: Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"parallelism": parallelism, "completions": completions, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"schedulerName": keys::SCHEDULER_NAME, "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox"}]}}},
    })
}

#[tokio::test]
async fn batch_job_groups_per_pod_unless_it_opts_into_a_gang() -> anyhow::Result<()> {
    let t = start("pg-batch-job").await?;
    let plain = apply(&t, &batch_job("plain", 2, 2, json!({}))).await?;
    let gang = apply(
        &t,
        &batch_job("ddp", 3, 3, json!({keys::GANG_SCHEDULING: "true"})),
    )
    .await?;

    // The real Job controller makes the pods; each plain pod gets its own group, owned by the Job.
    for p in grouped_pods(&t, "app=plain", 2).await? {
        let expected = format!("pg-{}-{}", p.name_any(), plain.uid().unwrap_or_default());
        assert_eq!(group_of(&p).as_deref(), Some(expected.as_str()));
        let pg = pod_group(&t, &expected, |_| true).await?;
        assert_eq!(owner_of(&pg), ("Job".to_owned(), "plain".to_owned()));
        assert_eq!(
            (pg.spec.min_member, pg.spec.queue.as_deref()),
            (Some(1), Some(keys::DEFAULT_QUEUE))
        );
        assert_eq!(pg.spec.priority_class_name.as_deref(), Some("train"));
    }
    // The opted-in Job is one gang of min(parallelism, completions).
    let name = format!("pg-ddp-{}", gang.uid().unwrap_or_default());
    let pods = grouped_pods(&t, "app=ddp", 3).await?;
    assert!(
        pods.iter().all(|p| group_of(p).as_deref() == Some(name.as_str())),
        "{pods:?}"
    );
    let pg = pod_group(&t, &name, |_| true).await?;
    assert_eq!(
        (pg.spec.min_member, owner_of(&pg)),
        (Some(3), ("Job".to_owned(), "ddp".to_owned()))
    );
    t.finish().await
}

#[tokio::test]
async fn indexed_job_is_one_gang_where_the_server_knows_indexed_jobs() -> anyhow::Result<()> {
    let t = start("pg-indexed-job").await?;
    let mut job = batch_job("ranks", 2, 4, json!({}));
    job["spec"]["completionMode"] = json!("Indexed");
    // A create, not an apply: servers before 1.21 refuse to apply a field they do not know but drop it
    // on create, as they would for a user's manifest.
    let job = t
        .api::<Job>()
        .create(&PostParams::default(), &serde_json::from_value(job)?)
        .await?;
    let pods = grouped_pods(&t, "app=ranks", 2).await?;
    let uid = job.uid().unwrap_or_default();
    if t.server_version().minor >= 21 {
        let name = format!("pg-ranks-{uid}");
        assert!(
            pods.iter().all(|p| group_of(p).as_deref() == Some(name.as_str())),
            "{pods:?}"
        );
        assert_eq!(pod_group(&t, &name, |_| true).await?.spec.min_member, Some(2));
    } else {
        // Before 1.21 the API server drops `completionMode`: the Job is a plain one, grouped per pod.
        assert_eq!(job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()), None);
        for p in &pods {
            assert_eq!(group_of(p), Some(format!("pg-{}-{uid}", p.name_any())));
        }
    }
    t.finish().await
}

#[tokio::test]
async fn deployment_pods_and_bare_pods_get_their_own_groups() -> anyhow::Result<()> {
    let t = start("pg-deployment").await?;
    apply(&t, &json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {keys::QUEUE_LABEL: "serving"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"schedulerName": keys::SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .await?;
    for p in grouped_pods(&t, "app=web", 2).await? {
        let expected = format!("pg-{}-{}", p.name_any(), p.uid().unwrap_or_default());
        assert_eq!(group_of(&p).as_deref(), Some(expected.as_str()));
        // The queue does not exist: it is used anyway and reported on the PodGroup.
        let pg = pod_group(&t, &expected, |pg| {
            pg.status.as_ref().is_some_and(|s| !s.conditions.is_empty())
        })
        .await?;
        assert_eq!(owner_of(&pg), ("Pod".to_owned(), p.name_any()));
        assert_eq!(pg.spec.queue.as_deref(), Some("serving"));
        assert_eq!(pg.spec.priority_class_name.as_deref(), Some("inference"));
        let condition = &pg.status.as_ref().expect("status").conditions[0];
        assert_eq!(condition.type_, keys::EVENT_PODGROUPER_WARNING);
        let message = condition.message.as_deref().unwrap_or_default();
        assert!(message.contains("queue serving does not exist"), "{condition:?}");
    }

    let solo = apply(&t, &json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo", "labels": {"app": "solo"}},
        "spec": {"schedulerName": keys::SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .await?;
    let p = grouped_pods(&t, "app=solo", 1).await?.remove(0);
    let expected = format!("pg-solo-{}", solo.uid().unwrap_or_default());
    assert_eq!(group_of(&p).as_deref(), Some(expected.as_str()));
    let pg = pod_group(&t, &expected, |_| true).await?;
    assert_eq!(
        (owner_of(&pg), pg.spec.min_member),
        (("Pod".to_owned(), "solo".to_owned()), Some(1))
    );
    t.finish().await
}

/// With a naming delay (an hour here, so that only the report can explain the name), a bare pod's
/// PodGroup is made at once but the pod is not patched: the scheduler finds the group by its owner and a
/// binding would name the pod. Once the scheduler reports the pod unschedulable (`PodScheduled=False`,
/// written here as the scheduler writes it), the pod is named.
#[tokio::test]
async fn a_bare_pods_name_waits_for_its_binding_or_an_unschedulable_report() -> anyhow::Result<()> {
    build().await?;
    let t = TestEnv::start("pg-naming-delay").await?;
    t.install_fixture_crds().await?;
    start_podgrouper_with(&t, &["--pod-naming-delay-seconds=3600"])?;
    let solo = apply(&t, &json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo", "labels": {"app": "solo"}},
        "spec": {"schedulerName": keys::SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .await?;
    let expected = format!("pg-solo-{}", solo.uid().unwrap_or_default());
    let pg = pod_group(&t, &expected, |_| true).await?;
    assert_eq!(owner_of(&pg), ("Pod".to_owned(), "solo".to_owned()));
    let pods: Api<Pod> = t.api();
    // The group is there, the pod stays unnamed (a reconcile of its own creation has long run).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(group_of(&pods.get("solo").await?), None, "named before its delay");
    pods.patch_status(
        "solo",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "gang pg-solo: 1 pod needs 1 nvidia.com/gpu, 0 free",
        }]}})),
    )
    .await?;
    let p = grouped_pods(&t, "app=solo", 1).await?.remove(0);
    assert_eq!(group_of(&p).as_deref(), Some(expected.as_str()));
    t.finish().await
}

/// The PodGroup of the one pod labelled `app=<app>`.
async fn group_of_app(t: &TestEnv, app: &str) -> anyhow::Result<PodGroup> {
    let p = grouped_pods(t, &format!("app={app}"), 1).await?.remove(0);
    let name = group_of(&p).ok_or_else(|| anyhow::anyhow!("{app}: no group"))?;
    pod_group(t, &name, |_| true).await
}

/// KAI's per-kind defaults ConfigMap (`--default-priorities-configmap-*`) gives a Deployment's groups
/// their priority class and preemptibility when no label names them, and follows the ConfigMap's
/// changes; a workload with KAI's `project` label and no queue label goes to the project's queue.
#[tokio::test]
async fn kind_defaults_configmap_and_project_label_as_kai() -> anyhow::Result<()> {
    build().await?;
    let t = TestEnv::start("pg-kind-defaults").await?;
    let types = |priority: &str| {
        json!([{"typeName": "Deployment", "group": "apps", "priorityName": priority,
                "preemptibility": "preemptible"}])
        .to_string()
    };
    apply(
        &t,
        &json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kind-defaults"},
            "data": {"types": types("build")},
        }),
    )
    .await?;
    // What the chart grants for `podgrouper.kindDefaultsConfigMap` in the ConfigMap's namespace: list and
    // watch of that one ConfigMap (the watch's name field selector is what RBAC matches).
    apply(&t, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "kind-defaults"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kind-defaults"],
                   "verbs": ["list", "watch"]}],
    }))
    .await?;
    apply(&t, &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "kind-defaults"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kind-defaults"},
        "subjects": [{"kind": "ServiceAccount", "name": "kai-podgrouper", "namespace": keys::SYSTEM_NAMESPACE}],
    }))
    .await?;
    let namespace = t.namespace().to_owned();
    start_podgrouper_with(
        &t,
        &[
            "--default-priorities-configmap-name",
            "kind-defaults",
            "--default-priorities-configmap-namespace",
            &namespace,
        ],
    )?;
    let deployment = |name: &str, labels: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"schedulerName": keys::SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]}}},
        })
    };

    apply(&t, &deployment("web", json!({keys::PROJECT_LABEL: "vision"}))).await?;
    let pg = group_of_app(&t, "web").await?;
    assert_eq!(
        pg.spec.priority_class_name.as_deref(),
        Some("build"),
        "the ConfigMap's, not inference"
    );
    assert_eq!(pg.spec.preemptibility, Some(api::Preemptibility::Preemptible));
    assert_eq!(pg.spec.queue.as_deref(), Some("vision"), "the project's queue");

    // A label still wins; the ConfigMap's change is followed.
    apply(
        &t,
        &json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kind-defaults"},
            "data": {"types": types("train")},
        }),
    )
    .await?;
    apply(
        &t,
        &deployment("labelled", json!({keys::PRIORITY_CLASS_LABEL: "inference"})),
    )
    .await?;
    let pg = group_of_app(&t, "labelled").await?;
    assert_eq!(pg.spec.priority_class_name.as_deref(), Some("inference"));
    // The podgrouper reads the change through its watch: a Deployment grouped before it arrived still
    // gets `build`; the next ones get `train`.
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut attempt = 0;
    let pg = loop {
        attempt += 1;
        let app = format!("later-{attempt}");
        apply(&t, &deployment(&app, json!({}))).await?;
        let pg = group_of_app(&t, &app).await?;
        if pg.spec.priority_class_name.as_deref() != Some("build") || std::time::Instant::now() > deadline {
            break pg;
        }
    };
    assert_eq!(
        pg.spec.priority_class_name.as_deref(),
        Some("train"),
        "the changed ConfigMap"
    );
    assert_eq!(pg.spec.queue.as_deref(), Some("default-queue"));
    t.finish().await
}

/// A Deployment that opts into a gang is one PodGroup of `spec.replicas`, owned by the Deployment. Its
/// spec is not in the podgrouper's metadata-only cache of Deployments, so the podgrouper reads the
/// object itself: the owner kinds' `get` the chart grants is needed (controller/owners.rs
/// `with_spec_if_needed`).
#[tokio::test]
async fn gang_deployment_is_one_group_of_its_replicas() -> anyhow::Result<()> {
    let t = start("pg-gang-deployment").await?;
    let deployment = apply(&t, &json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "gang-web", "annotations": {keys::GANG_SCHEDULING: "true"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "gang-web"}}, "template": {
            "metadata": {"labels": {"app": "gang-web"}},
            "spec": {"schedulerName": keys::SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .await?;
    let name = format!("pg-gang-web-{}", deployment.uid().unwrap_or_default());
    for p in grouped_pods(&t, "app=gang-web", 2).await? {
        assert_eq!(group_of(&p).as_deref(), Some(name.as_str()), "{}", p.name_any());
    }
    let pg = pod_group(&t, &name, |_| true).await?;
    assert_eq!(
        (pg.spec.min_member, owner_of(&pg)),
        (Some(2), ("Deployment".to_owned(), "gang-web".to_owned()))
    );
    t.finish().await
}

/// Spark without an operator: an executor owned by a driver pod that another scheduler places. The
/// podgrouper caches only its own scheduler's pods, so it reads the driver's metadata (the pods `get`
/// the chart grants it: controller/owners.rs `lookup_pod`) and groups the executor as the driver's
/// application.
#[tokio::test]
async fn executor_of_a_driver_outside_the_pod_cache_joins_the_driver_s_application() -> anyhow::Result<()> {
    let t = start("pg-spark-driver").await?;
    let driver = apply(
        &t,
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "spark-driver",
                         "labels": {keys::SPARK_APP_NAME: "etl", keys::SPARK_APP_SELECTOR: "spark-e2e"}},
            "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c", "image": "busybox"}]},
        }),
    )
    .await?;
    apply(&t, &pod("etl-exec-1", json!({"app": "etl-exec"}), &driver)).await?;
    let executor = grouped_pods(&t, "app=etl-exec", 1).await?.remove(0);
    assert_eq!(group_of(&executor).as_deref(), Some("spark-e2e"));
    let pg = pod_group(&t, "spark-e2e", |_| true).await?;
    assert_eq!(owner_of(&pg), ("Pod".to_owned(), "spark-driver".to_owned()));
    t.finish().await
}

#[tokio::test]
async fn seed_000_explicit_pod_group_is_joined_not_duplicated() -> anyhow::Result<()> {
    let t = start("pg-seed-000-ddp").await?;
    // As the seed says: `kubectl apply -f pytorch-distributed-training.yaml`.
    let manifest = seed(&t, "000-pytorch-distributed-training.yaml")?;
    t.kubectl()?
        .run_ok(&["apply", "-f", "-"], Some(&manifest))
        .await?;
    let pods = t
        .wait_for_pods(
            "the Job's four pods in the seed's group",
            "job-name=pytorch-ddp",
            TIMEOUT,
            |pods| {
                pods.len() == 4
                    && pods
                        .iter()
                        .all(|p| group_of(p).as_deref() == Some("pytorch-ddp-training"))
            },
        )
        .await?;
    assert_eq!(pods.len(), 4);
    // Give the podgrouper time to (wrongly) make a group of its own, then check it did not.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names: Vec<String> = pod_groups(&t).await?.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["pytorch-ddp-training"]);
    t.finish().await
}

/// The pods KubeRay makes for a cluster: a head and `workers` workers of group `group`, with the
/// worker template's labels.
async fn ray_pods(
    t: &TestEnv,
    cluster: &DynamicObject,
    group: &str,
    workers: usize,
    worker_labels: &Value,
) -> anyhow::Result<()> {
    let name = cluster.name_any();
    let head_labels = json!({"ray.io/cluster": name, keys::RAY_GROUP: "headgroup"});
    apply(t, &pod(&format!("{name}-head"), head_labels, cluster)).await?;
    for i in 0..workers {
        let mut labels = json!({"ray.io/cluster": name, keys::RAY_GROUP: group});
        if let (Some(l), Some(extra)) = (labels.as_object_mut(), worker_labels.as_object()) {
            l.extend(extra.clone());
        }
        apply(t, &pod(&format!("{name}-{group}-{i}"), labels, cluster)).await?;
    }
    Ok(())
}

fn resource_of(o: &DynamicObject) -> kube::discovery::ApiResource {
    let types = o.types.clone().unwrap_or_default();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, &types.kind);
    kube::discovery::ApiResource::from_gvk(&gvk)
}

#[tokio::test]
async fn raycluster_is_one_gang_and_follows_its_owner() -> anyhow::Result<()> {
    let t = start("pg-raycluster").await?;
    // Seed 000 step 6: gang annotation, queue label only on the worker template.
    let cluster = t.apply_yaml(&seed(&t, "000-ray-podgroup.yaml")?).await?.remove(0);
    ray_pods(
        &t,
        &cluster,
        "gpu-workers",
        4,
        &json!({keys::QUEUE_LABEL_LEGACY: "training"}),
    )
    .await?;
    let pods = grouped_pods(&t, "ray.io/cluster=ray-cluster", 5).await?;
    let name = format!("pg-ray-cluster-{}", cluster.uid().unwrap_or_default());
    for p in &pods {
        assert_eq!(group_of(p).as_deref(), Some(name.as_str()));
        let expected = if p.name_any().ends_with("-head") {
            "headgroup"
        } else {
            "gpu-workers"
        };
        assert_eq!(sub_group_of(p).as_deref(), Some(expected), "{}", p.name_any());
    }
    let pg = pod_group(&t, &name, |_| true).await?;
    assert_eq!(
        (pg.spec.min_member, pg.spec.queue.as_deref()),
        (Some(5), Some("training"))
    );
    assert_eq!(sub_groups(&pg), pairs(&[("headgroup", 1), ("gpu-workers", 4)]));
    assert_eq!(owner_of(&pg), ("RayCluster".to_owned(), "ray-cluster".to_owned()));

    // The scheduler's annotation survives the podgrouper's applies.
    let pgs: Api<PodGroup> = t.api();
    let stamp = json!({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "annotations": {keys::LAST_START_TIMESTAMP: "2026-01-01T00:00:00Z"}}});
    pgs.patch(
        &name,
        &PatchParams::apply(keys::FIELD_MANAGER_SCHEDULER),
        &Patch::Apply(&stamp),
    )
    .await?;

    // Scaling the cluster updates the group without any pod event; so does a new label.
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(t.client().clone(), t.namespace(), &resource_of(&cluster));
    let scale = json!({"metadata": {"labels": {"team": "blue"}},
        "spec": {"workerGroupSpecs": [{"groupName": "gpu-workers", "replicas": 6, "minReplicas": 6, "maxReplicas": 6,
            "template": {"metadata": {"labels": {keys::QUEUE_LABEL_LEGACY: "training"}},
                         "spec": {"schedulerName": keys::SCHEDULER_NAME}}}]}});
    clusters
        .patch("ray-cluster", &PatchParams::default(), &Patch::Merge(&scale))
        .await?;
    let pg = pod_group(&t, &name, |pg| {
        pg.spec.min_member == Some(7) && pg.labels().contains_key("team")
    })
    .await?;
    assert_eq!(sub_groups(&pg), pairs(&[("headgroup", 1), ("gpu-workers", 6)]));
    let stamp = pg
        .annotations()
        .get(keys::LAST_START_TIMESTAMP)
        .map(String::as_str);
    assert_eq!(stamp, Some("2026-01-01T00:00:00Z"));
    t.finish().await
}

#[tokio::test]
async fn seed_002_raycluster_queue_label() -> anyhow::Result<()> {
    let t = start("pg-seed-002-ray").await?;
    let cluster = t
        .apply_yaml(&seed(&t, "002-raycluster-queue-label.yaml")?)
        .await?
        .remove(0);
    ray_pods(&t, &cluster, "worker", 2, &json!({})).await?;
    grouped_pods(&t, "ray.io/cluster=raycluster-sample", 3).await?;
    let pg = pod_group(
        &t,
        &format!("pg-raycluster-sample-{}", cluster.uid().unwrap_or_default()),
        |_| true,
    )
    .await?;
    assert_eq!(
        (pg.spec.min_member, pg.spec.queue.as_deref()),
        (Some(3), Some("team-a"))
    );
    t.finish().await
}

#[tokio::test]
async fn trainjob_is_grouped_through_its_jobset() -> anyhow::Result<()> {
    let t = start("pg-trainjob").await?;
    // Seed 001: the TrainJob carries the queue label; the trainer makes a JobSet, JobSet makes Jobs,
    // the real Job controller makes the pods.
    let train_job = apply(
        &t,
        &json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "pytorch-kai-job", "labels": {keys::QUEUE_LABEL: "prod-queue"}},
            "spec": {"runtimeRef": {"name": "pytorch-kai-runtime"}, "trainer": {"numNodes": 4}},
        }),
    )
    .await?;
    let node_template = json!({"parallelism": 4, "completions": 4, "template": {
        "metadata": {"labels": {keys::JOBSET_REPLICATED_JOB: "node", "app": "trainer"}},
        "spec": {"schedulerName": keys::SCHEDULER_NAME, "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}});
    let jobset = apply(&t, &json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "pytorch-kai-job", "ownerReferences": owned_by(&train_job)},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": node_template}}]},
    }))
    .await?;
    apply(
        &t,
        &json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pytorch-kai-job-node-0", "ownerReferences": owned_by(&jobset)},
            "spec": node_template,
        }),
    )
    .await?;
    let name = format!("pg-pytorch-kai-job-{}-node", jobset.uid().unwrap_or_default());
    let pods = grouped_pods(&t, "app=trainer", 4).await?;
    assert!(
        pods.iter().all(|p| group_of(p).as_deref() == Some(name.as_str())),
        "{pods:?}"
    );
    let pg = pod_group(&t, &name, |_| true).await?;
    assert_eq!(
        (pg.spec.min_member, pg.spec.queue.as_deref()),
        (Some(4), Some("prod-queue"))
    );
    assert_eq!(owner_of(&pg), ("JobSet".to_owned(), "pytorch-kai-job".to_owned()));
    t.finish().await
}

#[tokio::test]
async fn pytorchjob_gang_with_master_and_worker_sub_groups() -> anyhow::Result<()> {
    let t = start("pg-pytorchjob").await?;
    let job = apply(
        &t,
        &json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
        }),
    )
    .await?;
    let labels = |role: &str, index: usize| {
        json!({keys::KUBEFLOW_JOB_NAME: "pt", keys::KUBEFLOW_REPLICA_TYPE: role,
               keys::KUBEFLOW_REPLICA_INDEX: index.to_string()})
    };
    apply(&t, &pod("pt-master-0", labels("master", 0), &job)).await?;
    for i in 0..3 {
        apply(&t, &pod(&format!("pt-worker-{i}"), labels("worker", i), &job)).await?;
    }
    let name = format!("pg-pt-{}", job.uid().unwrap_or_default());
    for p in grouped_pods(&t, &format!("{}=pt", keys::KUBEFLOW_JOB_NAME), 4).await? {
        assert_eq!(group_of(&p).as_deref(), Some(name.as_str()));
        let role = if p.name_any().contains("master") {
            "master"
        } else {
            "worker"
        };
        assert_eq!(sub_group_of(&p).as_deref(), Some(role));
    }
    let pg = pod_group(&t, &name, |_| true).await?;
    assert_eq!(pg.spec.min_member, Some(4));
    assert_eq!(sub_groups(&pg), pairs(&[("master", 1), ("worker", 3)]));
    t.finish().await
}

#[tokio::test]
async fn leaderworkerset_gets_one_group_per_replica_group() -> anyhow::Result<()> {
    let t = start("pg-lws").await?;
    let lws = apply(&t, &json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "lws"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3}},
    }))
    .await?;
    // LWS: leader StatefulSet -> leader pod -> worker StatefulSet -> worker pods. With no operator the
    // real StatefulSet controller would delete or release pods it controls; here the pods' references
    // to their StatefulSets are not controller references and the selectors match nothing, so the
    // controller leaves them alone (the podgrouper follows the first reference when none controls).
    let labels = |worker: usize| json!({keys::LWS_NAME: "lws", keys::LWS_GROUP_INDEX: "0", keys::LWS_WORKER_INDEX: worker.to_string()});
    let sts = |name: &str, owner: &DynamicObject, selector: Value| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "ownerReferences": owned_by(owner)},
            "spec": {"replicas": 0, "serviceName": "lws", "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": selector},
                             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    let leader_sts = apply(&t, &sts("lws", &lws, json!({"no-pod": "lws"}))).await?;
    let leader = apply(&t, &pod_with("lws-0", labels(0), reference(&leader_sts, false))).await?;
    let worker_sts = apply(&t, &sts("lws-0", &leader, json!({"no-pod": "lws-0"}))).await?;
    for i in 1..3 {
        apply(
            &t,
            &pod_with(&format!("lws-0-{i}"), labels(i), reference(&worker_sts, false)),
        )
        .await?;
    }
    let name = format!("pg-lws-{}-group-0", lws.uid().unwrap_or_default());
    for p in grouped_pods(&t, &format!("{}=lws", keys::LWS_NAME), 3).await? {
        assert_eq!(group_of(&p).as_deref(), Some(name.as_str()), "{}", p.name_any());
        let role = if p.name_any() == "lws-0" {
            "leader"
        } else {
            "workers"
        };
        assert_eq!(sub_group_of(&p).as_deref(), Some(role));
    }
    let pg = pod_group(&t, &name, |_| true).await?;
    assert_eq!(
        (pg.spec.min_member, owner_of(&pg)),
        (Some(3), ("LeaderWorkerSet".to_owned(), "lws".to_owned()))
    );
    assert_eq!(sub_groups(&pg), pairs(&[("leader", 1), ("workers", 2)]));
    t.finish().await
}

/// `spec.podgroups[]` entry of a PodGang: `min` pods, referencing `pods` of namespace `ns`.
fn grove_pod_group(name: &str, min: i32, ns: &str, pods: &[&str]) -> Value {
    let references: Vec<Value> = pods.iter().map(|p| json!({"namespace": ns, "name": p})).collect();
    json!({"name": name, "minReplicas": min, "podReferences": references})
}

#[tokio::test]
async fn grove_podgang_is_the_gang_and_its_changes_regroup_the_pods() -> anyhow::Result<()> {
    let t = start("pg-grove").await?;
    let ns = t.namespace().to_owned();
    // Grove: PodCliqueSet -> PodClique -> pods, and PodCliqueSet -> PodGang (no owner of the pods),
    // created after the pods, which name it in `grove.io/podgang`.
    let set = apply(
        &t,
        &json!({
            "apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
            "metadata": {"name": "svc", "labels": {"team": "set"}}, "spec": {},
        }),
    )
    .await?;
    let clique = |name: &str| {
        json!({"apiVersion": "grove.io/v1alpha1", "kind": "PodClique",
            "metadata": {"name": name, "ownerReferences": owned_by(&set)}, "spec": {}})
    };
    let prefill = apply(&t, &clique("svc-0-prefill")).await?;
    let decode = apply(&t, &clique("svc-0-decode")).await?;
    let labels = json!({"app": "svc", keys::GROVE_PODGANG: "svc-0"});
    for name in ["svc-0-prefill-a", "svc-0-prefill-b"] {
        apply(&t, &pod(name, labels.clone(), &prefill)).await?;
    }
    apply(&t, &pod("svc-0-decode-a", labels.clone(), &decode)).await?;
    // Without their PodGang the pods wait ungrouped (retried quietly every 15 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = t
        .api::<Pod>()
        .list(&ListParams::default().labels("app=svc"))
        .await?;
    assert!(
        waiting.items.iter().all(|p| group_of(p).is_none()),
        "grouped before their PodGang exists"
    );

    // The decode pod is not referenced yet (Grove fills the references as pods appear).
    let gang_spec = |decode_refs: &[&str]| {
        json!({
            "podgroups": [
                grove_pod_group("svc-0-prefill", 2, &ns, &["svc-0-prefill-a", "svc-0-prefill-b"]),
                grove_pod_group("svc-0-decode", 1, &ns, decode_refs),
            ],
            "topologyConstraintGroupConfigs": [
                {"name": "svc-0-pd", "podGroupNames": ["svc-0-prefill", "svc-0-decode"]},
            ],
            "priorityClassName": "inference",
        })
    };
    let gang = apply(
        &t,
        &json!({
            "apiVersion": "scheduler.grove.io/v1alpha1", "kind": "PodGang",
            "metadata": {"name": "svc-0", "ownerReferences": owned_by(&set)},
            "spec": gang_spec(&[]),
        }),
    )
    .await?;
    let name = format!("pg-svc-0-{}", gang.uid().unwrap_or_default());
    // The PodGang's creation re-groups the waiting pods at once, well before their retry.
    let grouped = t
        .wait_for_pods(
            "3 pods grouped once their PodGang exists",
            "app=svc",
            Duration::from_secs(10),
            |pods| pods.len() == 3 && pods.iter().all(|p| group_of(p).is_some()),
        )
        .await?;
    for p in grouped {
        assert_eq!(group_of(&p).as_deref(), Some(name.as_str()), "{}", p.name_any());
        let expected = p
            .name_any()
            .starts_with("svc-0-prefill")
            .then_some("svc-0-prefill");
        assert_eq!(sub_group_of(&p).as_deref(), expected, "{}", p.name_any());
    }
    let pg = pod_group(&t, &name, |_| true).await?;
    assert_eq!(
        (pg.spec.min_member, owner_of(&pg)),
        (Some(3), ("PodGang".to_owned(), "svc-0".to_owned()))
    );
    assert_eq!(
        sub_groups(&pg),
        pairs(&[("svc-0-pd", 0), ("svc-0-prefill", 2), ("svc-0-decode", 1)])
    );
    let parents: Vec<Option<&str>> = pg.spec.sub_groups.iter().map(|s| s.parent.as_deref()).collect();
    assert_eq!(parents, [None, Some("svc-0-pd"), Some("svc-0-pd")]);
    assert_eq!(pg.spec.priority_class_name.as_deref(), Some("inference"));
    assert_eq!(pg.labels().get("team").map(String::as_str), Some("set"));

    // Grove references the decode pod and grows its minimum: the group and the pod follow, without a
    // pod event.
    let gangs: Api<DynamicObject> =
        Api::namespaced_with(t.client().clone(), t.namespace(), &resource_of(&gang));
    let mut spec = gang_spec(&["svc-0-decode-a"]);
    spec["podgroups"][1]["minReplicas"] = json!(2);
    gangs
        .patch(
            "svc-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await?;
    pod_group(&t, &name, |pg| pg.spec.min_member == Some(4)).await?;
    t.wait_for_pods("the decode pod in its sub-group", "app=svc", TIMEOUT, |pods| {
        pods.iter()
            .any(|p| p.name_any() == "svc-0-decode-a" && sub_group_of(p).as_deref() == Some("svc-0-decode"))
    })
    .await?;
    t.finish().await
}

#[tokio::test]
async fn runaijob_pods_are_grouped_by_their_name_without_its_last_suffix() -> anyhow::Result<()> {
    let t = start("pg-runaijob").await?;
    let job = apply(
        &t,
        &json!({
            "apiVersion": "run.ai/v1", "kind": "RunaiJob",
            "metadata": {"name": "rj", "labels": {"team": "runai"}}, "spec": {"parallelism": 2},
        }),
    )
    .await?;
    for name in ["rj-0-0", "rj-1-0"] {
        apply(&t, &pod(name, json!({"app": "rj"}), &job)).await?;
    }
    let uid = job.uid().unwrap_or_default();
    for p in grouped_pods(&t, "app=rj", 2).await? {
        let prefix = p.name_any().rsplit_once('-').map(|(head, _)| head.to_owned());
        let expected = format!("pg-{}-{uid}", prefix.unwrap_or_default());
        assert_eq!(
            group_of(&p).as_deref(),
            Some(expected.as_str()),
            "{}",
            p.name_any()
        );
        let pg = pod_group(&t, &expected, |_| true).await?;
        assert_eq!(
            (pg.spec.min_member, owner_of(&pg)),
            (Some(1), ("RunaiJob".to_owned(), "rj".to_owned()))
        );
        assert_eq!(pg.spec.priority_class_name.as_deref(), Some("train"));
        assert_eq!(pg.labels().get("team").map(String::as_str), Some("runai"));
    }
    t.finish().await
}

#[tokio::test]
async fn restart_mid_way_makes_no_duplicate_and_loses_no_group() -> anyhow::Result<()> {
    let t = start("pg-restart").await?;
    let job = apply(
        &t,
        &batch_job("first", 2, 2, json!({keys::GANG_SCHEDULING: "true"})),
    )
    .await?;
    grouped_pods(&t, "app=first", 2).await?;
    t.stop_component(COMPONENT, Duration::from_secs(5))?;

    // While it is down: more work arrives, and one PodGroup is deleted by hand.
    apply(
        &t,
        &batch_job("second", 2, 2, json!({keys::GANG_SCHEDULING: "true"})),
    )
    .await?;
    let first = format!("pg-first-{}", job.uid().unwrap_or_default());
    t.api::<PodGroup>().delete(&first, &Default::default()).await?;
    let kept: BTreeMap<String, String> = pod_groups(&t)
        .await?
        .iter()
        .map(|pg| (pg.name_any(), pg.uid().unwrap_or_default()))
        .collect();

    start_podgrouper(&t)?;
    grouped_pods(&t, "app=second", 2).await?;
    pod_group(&t, &first, |_| true).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = pod_groups(&t).await?;
    let names: Vec<String> = after.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names.len(), 2, "one group per Job, no duplicates: {names:?}");
    assert!(
        names.contains(&first),
        "the deleted group is made again: {names:?}"
    );
    for pg in &after {
        if let Some(uid) = kept.get(&pg.name_any()) {
            assert_eq!(
                pg.uid().as_ref(),
                Some(uid),
                "a group that existed is kept, not made again"
            );
        }
    }
    t.finish().await
}

/// A burst of 1,000 bare pods; the podgrouper is killed (SIGKILL) while it is grouping them and started
/// again: every pod ends in exactly one PodGroup, its own (owned by it), and no PodGroup is left without
/// its pod or made twice.
#[tokio::test]
async fn burst_of_1000_pods_with_a_podgrouper_kill_mid_way_groups_each_exactly_once() -> anyhow::Result<()> {
    const PODS: usize = 1000;
    let t = start("pg-burst").await?;
    let api: Api<Pod> = t.api();
    let mut created = tokio::task::JoinSet::new();
    for chunk in 0..20 {
        let api = api.clone();
        created.spawn(async move {
            for i in (chunk..PODS).step_by(20) {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": { "name": format!("burst-{i:04}"), "labels": { "app": "burst" } },
                    "spec": { "schedulerName": keys::SCHEDULER_NAME,
                              "containers": [{ "name": "c", "image": "busybox" }] },
                }))?;
                api.create(&PostParams::default(), &pod).await?;
            }
            anyhow::Ok(())
        });
    }
    // Kill it once it has grouped some but not all. A bare pod's PodGroup is made at once; the pod
    // itself is named only if still unbound 10 s after its creation (here none is bound), so the
    // PodGroups are what shows progress.
    t.wait_until("some pods grouped", Duration::from_secs(120), async || {
        Ok((pod_groups(&t).await?.len() >= 50).then_some(()))
    })
    .await?;
    t.stop_component(COMPONENT, Duration::ZERO)?;
    while let Some(done) = created.join_next().await {
        done??;
    }
    let grouped_before = pod_groups(&t).await?.len();
    start_podgrouper(&t)?;
    let pods = t
        .wait_for_pods(
            "all 1,000 pods grouped",
            "app=burst",
            Duration::from_secs(300),
            |pods| pods.len() == PODS && pods.iter().all(|p| group_of(p).is_some()),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let groups = pod_groups(&t).await?;
    let by_name: BTreeMap<String, &PodGroup> = groups.iter().map(|g| (g.name_any(), g)).collect();
    assert_eq!(groups.len(), PODS, "one PodGroup per pod, none twice");
    for p in &pods {
        let name = group_of(p).unwrap_or_default();
        let pg = by_name
            .get(&name)
            .unwrap_or_else(|| panic!("{} names {name}, which does not exist", p.name_any()));
        let owner = pg.owner_references().first().cloned().unwrap_or_default();
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Pod", p.uid().unwrap_or_default().as_str()),
            "{name} is owned by its own pod"
        );
    }
    println!(
        "killed after {grouped_before} of {PODS} pods were grouped; after the restart all {PODS} were grouped once"
    );
    t.finish().await
}

/// A rolling update of the one-replica Deployment the chart makes, which elects a leader by default:
/// the new podgrouper starts as a follower beside the leader and must be ready as a standby, since the
/// rollout stops the old pod only once the new one is ready and the new one cannot lead before that.
/// When the old one stops (releasing the lease), the new one leads and groups.
#[tokio::test]
async fn a_follower_is_ready_as_a_standby_and_takes_over_when_the_leader_stops() -> anyhow::Result<()> {
    build().await?;
    let t = TestEnv::start("pg-standby").await?;
    // In the test's namespace, so the Lease goes with it, under the chart's lease Role (copied there).
    let election = t.leader_election_flags("kai-podgrouper").await?;
    let start = |name: &str| -> anyhow::Result<u16> {
        let port = e2e::component::free_port()?;
        let mut args = election.clone();
        args.extend(
            [
                "--namespace",
                t.namespace(),
                "--admin-address",
                &format!("127.0.0.1:{port}"),
                "--lease-duration",
                "4s",
                "--renew-deadline",
                "3s",
                "--retry-period",
                "500ms",
            ]
            .map(str::to_owned),
        );
        t.start_component(name, "kai-podgrouper", &args)?;
        Ok(port)
    };
    let ready = async |name: &str, port: u16| {
        t.wait_until(&format!("{name} /readyz"), TIMEOUT, async || {
            Ok((e2e::component::http_status(port, "/readyz") == Some(200)).then_some(()))
        })
        .await
    };

    let old = start("old")?;
    ready("the leader", old).await?;
    apply(&t, &pod_with("before", json!({"rollout": "before"}), json!([]))).await?;
    grouped_pods(&t, "rollout=before", 1).await?;

    let new = start("new")?;
    ready("the follower, as a standby", new).await?;
    let new_log = t.component_log("new").context("the follower's log")?;
    assert!(
        !std::fs::read_to_string(new_log)?.contains("leading; grouping pods"),
        "the follower does not lead while the leader runs"
    );

    t.stop_component("old", Duration::from_secs(10))?;
    apply(&t, &pod_with("after", json!({"rollout": "after"}), json!([]))).await?;
    grouped_pods(&t, "rollout=after", 1).await?;
    ready("the new leader", new).await?;
    Ok(())
}
