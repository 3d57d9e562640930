//! The node agent plays the kubelet: bound pods run, annotated pods finish, deletions are confirmed, and
//! the real Job and ReplicaSet controllers see their pods behave.

use std::time::Duration;

use e2e::{EXIT_CODE_ANNOTATION, FakeNodes, RUN_SECONDS_ANNOTATION, TestEnv};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};

/// Nobody schedules pods of this scheduler: the tests bind them themselves.
const MANUAL: &str = "e2e-manual-binding";

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn is_bound(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
}

/// Binds every unbound pod matching `selector`, round-robin over `nodes`.
async fn bind_all(t: &TestEnv, selector: &str, nodes: &[String]) -> anyhow::Result<usize> {
    let pods: Api<Pod> = t.api();
    let unbound: Vec<Pod> = pods
        .list(&kube::api::ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(|p| !is_bound(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    for (i, pod) in unbound.iter().enumerate() {
        t.bind(&pod.name_any(), &nodes[i % nodes.len()]).await?;
    }
    Ok(unbound.len())
}

#[tokio::test]
async fn job_pods_bound_through_binding_run_to_completion() -> anyhow::Result<()> {
    let t = TestEnv::start("agent-job-completes").await?;
    let nodes = t
        .create_nodes(FakeNodes::new("worker").count(2).cpu("8").memory("32Gi"))
        .await?;
    t.apply_yaml(&format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: trainer}}
spec:
  parallelism: 3
  completions: 3
  backoffLimit: 0
  template:
    metadata:
      labels: {{app: trainer}}
      annotations: {{"{RUN_SECONDS_ANNOTATION}": "1"}}
    spec:
      schedulerName: {MANUAL}
      restartPolicy: Never
      containers:
      - {{name: main, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}
"#
    ))
    .await?;
    t.wait_for_pods(
        "3 pods of the Job",
        "app=trainer",
        Duration::from_secs(60),
        |pods| pods.len() == 3,
    )
    .await?;
    assert_eq!(bind_all(&t, "app=trainer", &nodes).await?, 3);

    let jobs: Api<Job> = t.api();
    t.wait_until(
        "Job trainer to succeed 3 times",
        Duration::from_secs(90),
        async || {
            let job = jobs.get("trainer").await?;
            Ok((job.status.as_ref().and_then(|s| s.succeeded) == Some(3)).then_some(()))
        },
    )
    .await?;
    let pods: Api<Pod> = t.api();
    for pod in pods
        .list(&kube::api::ListParams::default().labels("app=trainer"))
        .await?
        .items
    {
        assert_eq!(phase(&pod), "Succeeded", "{}", pod.name_any());
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(nodes.contains(&node), "{} ran on {node}", pod.name_any());
        let status = pod.status.clone().unwrap_or_default();
        assert!(
            status.start_time.is_some() && status.pod_ip.is_some(),
            "{status:?}"
        );
        let terminated = status.container_statuses.unwrap_or_default()[0]
            .state
            .clone()
            .and_then(|s| s.terminated);
        assert_eq!(terminated.map(|t| t.exit_code), Some(0));
    }
    t.finish().await
}

#[tokio::test]
async fn replicaset_stays_satisfied_and_deletions_are_confirmed() -> anyhow::Result<()> {
    let t = TestEnv::start("agent-replicaset").await?;
    let nodes = t.create_nodes(FakeNodes::new("serve").count(1)).await?;
    t.apply_yaml(&format!(
        r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: web}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      schedulerName: {MANUAL}
      containers:
      - {{name: main, image: nginx}}
"#
    ))
    .await?;
    let replicasets: Api<ReplicaSet> = t.api();
    let ready = async || {
        let rs = replicasets.get("web").await?;
        let status = rs.status.unwrap_or_default();
        Ok((status.ready_replicas == Some(2) && status.available_replicas == Some(2)).then_some(()))
    };
    t.wait_for_pods(
        "2 pods of the ReplicaSet",
        "app=web",
        Duration::from_secs(60),
        |pods| pods.len() == 2,
    )
    .await?;
    bind_all(&t, "app=web", &nodes).await?;
    t.wait_until(
        "ReplicaSet web to have 2 ready replicas",
        Duration::from_secs(60),
        ready,
    )
    .await?;

    let pods: Api<Pod> = t.api();
    let victim = pods
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await?
        .items[0]
        .name_any();
    // A graceful delete, as a user or a scheduler's eviction does: only a kubelet confirms it.
    pods.delete(&victim, &DeleteParams::default()).await?;
    t.wait_until(
        &format!("pod {victim} to be gone"),
        Duration::from_secs(30),
        async || Ok(pods.get_opt(&victim).await?.is_none().then_some(())),
    )
    .await?;
    t.wait_for_pods("a replacement pod", "app=web", Duration::from_secs(60), |p| {
        p.len() == 2 && p.iter().any(|p| !is_bound(p))
    })
    .await?;
    bind_all(&t, "app=web", &nodes).await?;
    t.wait_until("ReplicaSet web to be ready again", Duration::from_secs(60), ready)
        .await?;
    t.finish().await
}

#[tokio::test]
async fn pods_run_ready_and_fail_with_their_exit_code() -> anyhow::Result<()> {
    let t = TestEnv::start("agent-pod-states").await?;
    let nodes = t.create_nodes(FakeNodes::new("n").count(1)).await?;
    let node = &nodes[0];
    t.apply_yaml(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: long-running}}
spec:
  nodeName: {node}
  containers:
  - {{name: main, image: busybox}}
---
apiVersion: v1
kind: Pod
metadata:
  name: failing
  annotations: {{"{RUN_SECONDS_ANNOTATION}": "0.5", "{EXIT_CODE_ANNOTATION}": "3"}}
spec:
  nodeName: {node}
  restartPolicy: Never
  containers:
  - {{name: main, image: busybox}}
"#
    ))
    .await?;
    let pods: Api<Pod> = t.api();
    let running = t
        .wait_until(
            "pod long-running to be Running",
            Duration::from_secs(30),
            async || {
                Ok(pods
                    .get("long-running")
                    .await
                    .ok()
                    .filter(|p| phase(p) == "Running"))
            },
        )
        .await?;
    let status = running.status.unwrap_or_default();
    let conditions = status.conditions.unwrap_or_default();
    for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(
            conditions.iter().any(|c| c.type_ == kind && c.status == "True"),
            "{kind} missing: {conditions:?}"
        );
    }
    let container = &status.container_statuses.unwrap_or_default()[0];
    assert!(
        container.ready
            && container
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .is_some(),
        "{container:?}"
    );

    let failed = t
        .wait_until("pod failing to fail", Duration::from_secs(30), async || {
            Ok(pods.get("failing").await.ok().filter(|p| phase(p) == "Failed"))
        })
        .await?;
    let container = &failed
        .status
        .unwrap_or_default()
        .container_statuses
        .unwrap_or_default()[0];
    let terminated = container
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(terminated, Some(3));
    // Still Running: no annotation, no end.
    assert_eq!(phase(&pods.get("long-running").await?), "Running");
    t.finish().await
}
