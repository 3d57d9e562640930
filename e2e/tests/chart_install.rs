//! The chart installed on a real API server (KUBECONFIG, else the local control plane of
//! `cargo xtask cluster up`), and both binaries run as local processes with exactly what it renders and
//! the tokens of the ServiceAccounts it makes: a missing permission fails this test (the components log
//! and retry a 403, and the pod is then never grouped or bound). The rest of the e2e tier runs the
//! components the same way (`e2e::chart_rbac`); a permission nothing uses fails `cargo xtask rbac-audit`.
//!
//! Shares the cluster with other tests: its own release, namespace, scheduler name, queue and a node
//! tainted for its pods only.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use e2e::chart::{self, Rendered};
use e2e::component::{free_port, http_status};
use e2e::helm::Helm;
use e2e::serviceaccount;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

fn kubeconfig_path() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return PathBuf::from(path);
    }
    e2e::helm::tools_dir()
        .parent()
        .expect("tool directory has a parent")
        .join("cluster")
        .join("kubeconfig")
}

async fn client(path: &Path) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path).with_context(|| {
        format!(
            "reading {} (start the cluster: cargo xtask cluster up)",
            path.display()
        )
    })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A local process killed when dropped.
struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn build_binaries(binaries: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    // `--workspace`, as the other e2e tests build, so features unify alike and nothing rebuilds in turn.
    command.args(["build", "--quiet", "--workspace"]);
    for bin in binaries {
        command.args(["--bin", bin]);
    }
    let status = command
        .current_dir(chart::workspace_root())
        .stdin(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("cargo build {binaries:?} failed");
    }
    Ok(())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| {
            if d.is_absolute() {
                d
            } else {
                chart::workspace_root().join(d)
            }
        })
        .unwrap_or_else(|| chart::workspace_root().join("target"))
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = probe().await? {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Everything the test made, removed on every exit path.
struct Cleanup {
    client: Client,
    helm: Helm,
    kubeconfig: PathBuf,
    release: String,
    node: String,
    queue: String,
}

impl Cleanup {
    async fn run(self) {
        let _ = chart::uninstall(&self.helm, &self.kubeconfig, &self.release, &self.release);
        let nodes: Api<Node> = Api::all(self.client.clone());
        let _ = nodes.delete(&self.node, &DeleteParams::default()).await;
        let queues: Api<api::Queue> = Api::all(self.client.clone());
        let _ = queues.delete(&self.queue, &DeleteParams::default()).await;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let _ = namespaces
            .delete(&self.release, &DeleteParams::background())
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_work_with_exactly_the_chart_s_permissions() -> anyhow::Result<()> {
    let kubeconfig = kubeconfig_path();
    let admin = client(&kubeconfig).await?;
    let helm = Helm::find_or_fetch()?;
    build_binaries(&["kai-scheduler", "kai-podgrouper"])?;

    let id = format!("e2e-chart-{}", std::process::id());
    let cleanup = Cleanup {
        client: admin.clone(),
        helm: helm.clone(),
        kubeconfig: kubeconfig.clone(),
        release: id.clone(),
        node: format!("{id}-node"),
        queue: format!("{id}-queue"),
    };
    let result = run(&admin, &helm, &kubeconfig, &id).await;
    cleanup.run().await;
    result
}

async fn run(admin: &Client, helm: &Helm, kubeconfig: &Path, id: &str) -> anyhow::Result<()> {
    // The cluster-wide objects (CRDs, priority classes, default queues) are the cluster's already; this
    // release makes only its own. GPU sharing on, so the reservation RBAC and the GPU-sharing webhook are
    // installed too: the webhook is called at the local scheduler's loopback port and sent only pods
    // labelled for this test (the cluster is shared).
    let webhook_port = free_port()?;
    let webhook_url = format!("https://127.0.0.1:{webhook_port}/mutate-pods");
    let values = [
        ("global.schedulerName", id),
        ("global.defaultQueue", &format!("{id}-queue")),
        ("global.gpuSharing", "true"),
        ("gpuSharingWebhook.url", &webhook_url),
        ("gpuSharingWebhook.objectSelector.matchLabels.chart-e2e", id),
        ("global.logFormat", "plain"),
        // `--set` syntax: a comma inside a value is escaped.
        (
            "global.logLevel",
            r"info\,kai_scheduler=debug\,kai_podgrouper=debug\,kai_runtime=debug",
        ),
        ("priorityClasses.create", "false"),
        ("defaultQueues.create", "false"),
        ("volcano.installCRD", "false"),
    ];
    chart::install(helm, kubeconfig, id, id, &values, true)?;
    let components = Rendered::render(helm, id, id, &values)?.components()?;
    assert_eq!(components.len(), 2);

    // The queue the workload runs in, and a node only this test's pods tolerate.
    let queues: Api<api::Queue> = Api::all(admin.clone());
    let queue: api::Queue = serde_json::from_value(json!({
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
        "metadata": {"name": format!("{id}-queue")},
        "spec": {"resources": {
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    }))?;
    queues.create(&PostParams::default(), &queue).await?;
    let nodes: Api<Node> = Api::all(admin.clone());
    let node_name = format!("{id}-node");
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name}},
        "spec": {"taints": [{"key": "kai.scheduler/e2e", "value": id, "effect": "NoSchedule"}]}
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    let now = e2e_now();
    nodes
        .patch_status(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"},
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}]}})),
        )
        .await?;
    // The API server adds the not-ready taint at creation; nothing removes it without a node controller.
    nodes
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{"key": "kai.scheduler/e2e", "value": id, "effect": "NoSchedule"}]}})),
        )
        .await?;

    // Each component as a local process: the chart's arguments and files, its ServiceAccount's token.
    let admin_text = std::fs::read_to_string(kubeconfig)?;
    let work = std::env::temp_dir().join(id);
    std::fs::create_dir_all(&work)?;
    let mut processes = Vec::new();
    for spec in &components {
        let token = serviceaccount::token(
            admin,
            &spec.namespace,
            &spec.service_account,
            Duration::from_secs(30),
        )
        .await?;
        let config_path = work.join(format!("{}.kubeconfig", spec.component));
        std::fs::write(
            &config_path,
            serviceaccount::kubeconfig_with_token(&admin_text, &spec.service_account, &token)?,
        )?;
        let port = free_port()?;
        let mut overrides = vec![("admin-address", format!("127.0.0.1:{port}"))];
        if spec.flag("webhook-address").is_some() {
            overrides.push(("webhook-address", format!("127.0.0.1:{webhook_port}")));
        }
        let overrides: Vec<(&str, &str)> = overrides.iter().map(|(f, v)| (*f, v.as_str())).collect();
        let args = spec.local_args(&work.join(&spec.component), &overrides)?;
        let log = work.join(format!("{}.log", spec.component));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(target_dir().join("debug").join(&spec.binary))
            .args(&args)
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("KUBECONFIG", &config_path)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", spec.binary))?;
        let mut process = Process {
            name: spec.component.clone(),
            child,
            log,
        };
        wait_for(
            &format!("{} /readyz", spec.component),
            Duration::from_secs(60),
            || {
                let status = http_status(port, "/readyz");
                // The process itself says whether it ended: its log may name errors it lived through
                // (another test's objects on this shared cluster, for one).
                let exited = process.child.try_wait();
                let log = process.log();
                async move {
                    match exited {
                        Ok(Some(code)) => bail!("exited ({code}):\n{log}"),
                        Ok(None) => Ok((status == Some(200)).then_some(())),
                        Err(e) => bail!("waiting on the process: {e}\n{log}"),
                    }
                }
            },
        )
        .await?;
        processes.push(process);
    }

    // The chart's webhook, with the certificate the scheduler made and the CA bundle it published under
    // the chart's permissions: the API server sends this test's pod asking for half a GPU through it.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), id);
    let sharing: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "half-", "labels": {"chart-e2e": id},
                     "annotations": {api::keys::GPU_FRACTION: "0.5"}},
        "spec": {"schedulerName": id, "containers": [{"name": "c", "image": "busybox"}]}
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let admitted = wait_for("the webhook to prepare a pod", Duration::from_secs(60), || {
        let (pods, sharing, dry_run) = (pods.clone(), sharing.clone(), dry_run.clone());
        async move {
            let made = pods.create(&dry_run, &sharing).await?;
            Ok(made
                .metadata
                .annotations
                .and_then(|a| a.get(api::keys::GPU_SHARING_CONFIGMAP).cloned()))
        }
    })
    .await;
    if let Err(e) = admitted {
        let shown: Vec<String> = processes
            .iter()
            .map(|p| format!("---- {}\n{}", p.name, p.log()))
            .collect();
        bail!("{e}\n{}", shown.join("\n"));
    }

    // A pod of this scheduler: the podgrouper must group it and the scheduler bind it.
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "work", "labels": {"kai.scheduler/queue": format!("{id}-queue")}},
        "spec": {
            "schedulerName": id,
            "tolerations": [{"key": "kai.scheduler/e2e", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let outcome = wait_for("the pod to be grouped and bound", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("work").await?;
            let group = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(api::keys::POD_GROUP_NAME))
                .cloned();
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            Ok(group.zip(node))
        }
    })
    .await;
    let logs: Vec<(String, String)> = processes.iter().map(|p| (p.name.clone(), p.log())).collect();
    drop(processes);
    let (group, node) = match outcome {
        Ok(found) => found,
        Err(e) => {
            let shown: Vec<String> = logs.iter().map(|(n, l)| format!("---- {n}\n{l}")).collect();
            bail!("{e}\n{}", shown.join("\n"));
        }
    };
    assert_eq!(node, node_name);
    let groups: Api<api::PodGroup> = Api::namespaced(admin.clone(), id);
    assert!(groups.get_opt(&group).await?.is_some(), "PodGroup {group} exists");
    // Its group was made for it alone: the scheduler found it by owner and the binding named it on the
    // pod, so the podgrouper never wrote to the pod.
    let bound = Api::<Pod>::namespaced(admin.clone(), id).get("work").await?;
    let writers: Vec<String> = bound
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !writers.iter().any(|m| m == api::keys::FIELD_MANAGER_PODGROUPER),
        "the podgrouper patched a pod its binding names: {writers:?}"
    );
    for (name, log) in &logs {
        assert!(
            !log.contains("forbidden") && !log.contains("Forbidden"),
            "{name} was refused something it needs:\n{log}"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// A release whose pods run without a Lease (`leaderElection=false`, or the former default at one
/// replica) upgraded to the default: that one upgrade recreates the pods, since the running ones hold no
/// Lease and would not wait for the new ones to get it; the next upgrade rolls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_leader_election_on_recreates_the_pods_once_then_rolls() -> anyhow::Result<()> {
    let kubeconfig = kubeconfig_path();
    let admin = client(&kubeconfig).await?;
    let helm = Helm::find_or_fetch()?;
    let id = format!("e2e-chart-upgrade-{}", std::process::id());
    let result = upgrade_twice(&admin, &helm, &kubeconfig, &id).await;
    let _ = chart::uninstall(&helm, &kubeconfig, &id, &id);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    let _ = namespaces.delete(&id, &DeleteParams::background()).await;
    result
}

async fn upgrade_twice(admin: &Client, helm: &Helm, kubeconfig: &Path, id: &str) -> anyhow::Result<()> {
    let queue = format!("{id}-queue");
    let defaults = [
        ("global.schedulerName", id),
        ("global.defaultQueue", queue.as_str()),
        ("priorityClasses.create", "false"),
        ("defaultQueues.create", "false"),
        ("volcano.installCRD", "false"),
    ];
    let mut without_lease = defaults.to_vec();
    without_lease.extend([
        ("scheduler.leaderElection", "false"),
        ("podgrouper.leaderElection", "false"),
    ]);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(admin.clone(), id);
    // (name, strategy, whether the pods elect) of each Deployment.
    let rollout = async || -> anyhow::Result<Vec<(String, String, bool)>> {
        let mut found = Vec::new();
        for d in deployments.list(&Default::default()).await?.items {
            let spec = d.spec.unwrap_or_default();
            let strategy = spec.strategy.and_then(|s| s.type_).unwrap_or_default();
            let args = spec
                .template
                .spec
                .and_then(|p| p.containers.into_iter().next())
                .and_then(|c| c.args)
                .unwrap_or_default();
            let elects = args.iter().any(|a| a == "--leader-elect=true");
            found.push((d.metadata.name.unwrap_or_default(), strategy, elects));
        }
        Ok(found)
    };
    let expect = |strategy: &str, elects: bool| {
        ["podgrouper", "scheduler"]
            .map(|c| (format!("{id}-{c}"), strategy.to_owned(), elects))
            .to_vec()
    };

    chart::install(helm, kubeconfig, id, id, &without_lease, true)?;
    assert_eq!(rollout().await?, expect("Recreate", false), "without a lease");
    chart::install(helm, kubeconfig, id, id, &defaults, true)?;
    assert_eq!(
        rollout().await?,
        expect("Recreate", true),
        "the upgrade that turns leader election on replaces pods that hold no lease"
    );
    chart::install(helm, kubeconfig, id, id, &defaults, true)?;
    assert_eq!(
        rollout().await?,
        expect("RollingUpdate", true),
        "once the pods elect, upgrades roll"
    );
    Ok(())
}

fn e2e_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
