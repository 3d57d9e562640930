//! [`TestEnv`]: one test's share of the cluster.
//!
//! Each test gets a fresh namespace (unique name, labelled), a [`NodeAgent`] for the fake nodes it
//! creates (labelled with the namespace's name so tests running in parallel own their capacity), the
//! project's kubectl, waits that print the namespace's state when they time out, and the project's
//! binaries as local processes, each with the token of the ServiceAccount the chart gives it (the chart's
//! RBAC is installed once per test process: [`crate::chart_rbac`]); the test itself acts as the admin.
//! Everything is removed at the end, also when the test fails, unless `KAI_E2E_KEEP=1`.

use std::ffi::OsString;
use std::hash::{BuildHasher as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Client, Resource};
use tokio::sync::OnceCell;

use crate::agent::NodeAgent;
use crate::apply::{Applier, Placement};
use crate::chart_rbac::ChartRbac;
use crate::component::Component;
use crate::connect::{ServerVersion, Target};
use crate::install::InstallReport;
use crate::kubectl::Kubectl;
use crate::nodes::{self, FakeNodes};

/// Label on every test namespace: the test's name.
pub const TEST_LABEL: &str = "e2e.kai.dev/test";
/// Label on every test namespace: the pid of the test process (leftovers of live processes are kept).
pub const PID_LABEL: &str = "e2e.kai.dev/pid";
/// Environment variable: keep every test's namespace and nodes for debugging.
pub const ENV_KEEP: &str = "KAI_E2E_KEEP";

/// The cluster, resolved once per test process.
static TARGET: OnceCell<Target> = OnceCell::const_new();
/// The project's CRDs and default objects, installed once per test process.
static PROJECT: OnceCell<(InstallReport, ServerVersion)> = OnceCell::const_new();
/// The chart's RBAC and the components' tokens, installed and read once per test process.
static CHART_RBAC: OnceCell<ChartRbac> = OnceCell::const_new();
/// The third-party fixture CRDs, installed once per test process when a test asks.
static FIXTURE_CRDS: OnceCell<InstallReport> = OnceCell::const_new();

/// One test's namespace, nodes, node agent and components.
pub struct TestEnv {
    target: Target,
    client: Client,
    server: ServerVersion,
    rbac: &'static ChartRbac,
    name: String,
    namespace: String,
    agent: Option<NodeAgent>,
    components: Mutex<Vec<Component>>,
    log_dir: PathBuf,
    finished: bool,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The test's name as a label value: lowercase, `-` for anything else, at most 40 characters.
fn slug(test: &str) -> String {
    let mut slug = String::new();
    for c in test.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        if !(c == '-' && slug.ends_with('-')) {
            slug.push(c);
        }
    }
    slug.truncate(40);
    slug.trim_matches('-').to_owned()
}

/// `e2e-<slug>-<random>`: at most 63 characters, DNS-1123.
fn namespace_name(slug: &str) -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    let suffix = format!("{:06x}", hasher.finish() & 0xff_ffff);
    if slug.is_empty() {
        format!("e2e-{suffix}")
    } else {
        format!("e2e-{slug}-{suffix}")
    }
}

fn keep_requested() -> bool {
    std::env::var(ENV_KEEP).is_ok_and(|v| matches!(v.as_str(), "1" | "true" | "yes"))
}

/// Sends test logs (the node agent's warnings, the harness's steps) to the test's output. `RUST_LOG`
/// overrides the default `info`.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

impl TestEnv {
    /// Connects, installs the project's CRDs and default objects (once per process), creates the test's
    /// namespace and starts its node agent.
    ///
    /// # Errors
    /// When no cluster is reachable (the message says to run `cargo xtask cluster up`) or setup fails.
    pub async fn start(test_name: &str) -> anyhow::Result<Self> {
        init_tracing();
        let target = TARGET.get_or_try_init(Target::resolve).await?.clone();
        let client = target.connect().await?;
        let (_, server) = PROJECT
            .get_or_try_init(|| async {
                let report = crate::install::install_project(&client, &crate::paths::crds_dir())
                    .await
                    .context("installing the project's CRDs, priority classes and default queues")?;
                let server = ServerVersion::of(&client).await?;
                anyhow::Ok((report, server))
            })
            .await?
            .clone();
        let rbac = CHART_RBAC
            .get_or_try_init(|| async {
                crate::chart_rbac::install(&client)
                    .await
                    .context("installing the chart's RBAC (the components run with its ServiceAccounts)")
            })
            .await?;

        let slug = slug(test_name);
        let namespace = namespace_name(&slug);
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(
            TEST_LABEL.to_owned(),
            if slug.is_empty() {
                "unnamed".to_owned()
            } else {
                slug
            },
        );
        labels.insert(PID_LABEL.to_owned(), std::process::id().to_string());
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating namespace {namespace}"))?;

        let agent = NodeAgent::start(client.clone(), &nodes::owner_selector(&namespace));
        let log_dir = crate::paths::target_dir().join("e2e-logs").join(&namespace);
        let env = Self {
            target,
            client,
            server,
            rbac,
            name: test_name.to_owned(),
            namespace,
            agent: Some(agent),
            components: Mutex::new(Vec::new()),
            log_dir,
            finished: false,
        };
        env.wait_for_service_account().await?;
        Ok(env)
    }

    /// Pods cannot be created before the namespace's `default` ServiceAccount exists (and, before
    /// Kubernetes 1.24, before the token controller gave it a token secret).
    async fn wait_for_service_account(&self) -> anyhow::Result<()> {
        let api: Api<ServiceAccount> = self.api();
        let needs_secret = !self.server.at_least(24);
        self.wait_until(
            "the default ServiceAccount and its token",
            Duration::from_secs(60),
            async || {
                Ok(api
                    .get_opt("default")
                    .await?
                    .filter(|sa| !needs_secret || sa.secrets.as_ref().is_some_and(|s| !s.is_empty())))
            },
        )
        .await
        .map(drop)
    }

    /// The client (bound to this test's runtime).
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The server's version.
    #[must_use]
    pub fn server_version(&self) -> ServerVersion {
        self.server
    }

    /// The test's namespace.
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The value to pass as `KUBECONFIG` to processes the test starts.
    #[must_use]
    pub fn kubeconfig_env(&self) -> OsString {
        self.target.source.as_env_value()
    }

    /// Label selector of the fake nodes this test owns.
    #[must_use]
    pub fn node_selector(&self) -> String {
        nodes::owner_selector(&self.namespace)
    }

    /// The label (key, value) on the test's nodes, for a pod's `nodeSelector` or a node affinity.
    #[must_use]
    pub fn node_label(&self) -> (&'static str, &str) {
        (nodes::OWNER_LABEL, &self.namespace)
    }

    /// A namespaced API in the test's namespace.
    #[must_use]
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates fake nodes owned by this test: their names get the namespace as a prefix
    /// (`<namespace>-<prefix>-<i>`) and the node agent plays their kubelet. Returns the names.
    ///
    /// # Errors
    /// When the server rejects a node.
    pub async fn create_nodes(&self, nodes: FakeNodes) -> anyhow::Result<Vec<String>> {
        let nodes = FakeNodes {
            prefix: format!("{}-{}", self.namespace, nodes.prefix),
            owner: self.namespace.clone(),
            ..nodes
        };
        nodes::create(&self.client, &nodes).await
    }

    /// Installs the third-party CRDs of `e2e/fixtures/crds/` (once per test process).
    ///
    /// # Errors
    /// When the server rejects them.
    pub async fn install_fixture_crds(&self) -> anyhow::Result<()> {
        FIXTURE_CRDS
            .get_or_try_init(|| crate::install::install_fixture_crds(&self.client))
            .await
            .map(drop)
    }

    /// Server-side applies a YAML stream; namespaced documents go into the test's namespace.
    ///
    /// # Errors
    /// When a document is rejected.
    pub async fn apply_yaml(&self, yaml: &str) -> anyhow::Result<Vec<DynamicObject>> {
        Applier::new(self.client.clone())
            .apply_yaml(yaml, Placement::Into(&self.namespace))
            .await
    }

    /// Server-side applies a YAML file; namespaced documents go into the test's namespace.
    ///
    /// # Errors
    /// When the file cannot be read or a document is rejected.
    pub async fn apply_file(&self, path: &Path) -> anyhow::Result<Vec<DynamicObject>> {
        Applier::new(self.client.clone())
            .apply_file(path, Placement::Into(&self.namespace))
            .await
    }

    /// The project's kubectl, pointed at this cluster.
    ///
    /// # Errors
    /// When it was not built (`cargo xtask cluster up` builds it).
    pub fn kubectl(&self) -> anyhow::Result<Kubectl> {
        Kubectl::new(self.kubeconfig_env())
    }

    /// Binds a pod of the test's namespace to a node through `pods/binding`, as a scheduler does.
    ///
    /// # Errors
    /// When the server refuses (already bound, no such pod).
    pub async fn bind(&self, pod: &str, node: &str) -> anyhow::Result<()> {
        let binding = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": self.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let _: Status = self
            .api::<Pod>()
            .create_subresource("binding", pod, &PostParams::default(), &binding)
            .await
            .with_context(|| format!("binding pod {pod} to {node}"))?;
        Ok(())
    }

    /// Polls `check` every 250 ms until it returns `Some`. Errors from `check` count as "not yet" (the
    /// last one is quoted) until the deadline. On timeout the error carries [`TestEnv::report`].
    ///
    /// # Errors
    /// On timeout.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last_error = None;
        loop {
            match check().await {
                Ok(Some(value)) => return Ok(value),
                Ok(None) => {}
                Err(err) => last_error = Some(err),
            }
            if tokio::time::Instant::now() >= deadline {
                let cause = last_error
                    .map(|e| format!(" (last error: {e:#})"))
                    .unwrap_or_default();
                bail!(
                    "timed out after {timeout:?} waiting for {what}{cause}\n{}",
                    self.report().await
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the pods matching `label_selector` satisfy `accept` (given all of them).
    ///
    /// # Errors
    /// On timeout, with the report.
    pub async fn wait_for_pods(
        &self,
        what: &str,
        label_selector: &str,
        timeout: Duration,
        accept: impl Fn(&[Pod]) -> bool,
    ) -> anyhow::Result<Vec<Pod>> {
        let api: Api<Pod> = self.api();
        let params = ListParams::default().labels(label_selector);
        self.wait_until(what, timeout, async || {
            let pods = api.list(&params).await?.items;
            Ok(accept(&pods).then_some(pods))
        })
        .await
    }

    /// Starts a component's binary (`target/debug/<bin>`: `kai-scheduler`, `kai-podgrouper`) with a
    /// `KUBECONFIG` holding the token of the chart's ServiceAccount for it
    /// ([`TestEnv::component_kubeconfig`]); its log tail is part of [`TestEnv::report`] and it is killed at
    /// the end of the test.
    ///
    /// # Errors
    /// When `bin` is not one of the chart's components or it cannot start.
    pub fn start_component<I, S>(&self, name: &str, bin: &str, args: I) -> anyhow::Result<()>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let kubeconfig = self.component_kubeconfig(bin)?;
        let component = Component::start(name, bin, args, kubeconfig.as_os_str(), &self.log_dir)?;
        self.components
            .lock()
            .map_err(|_| anyhow::anyhow!("component list poisoned"))?
            .push(component);
        Ok(())
    }

    /// A kubeconfig file for the component running `bin`: this cluster, the token of the chart's
    /// ServiceAccount for it (`system:serviceaccount:kai-scheduler:<component>`), so it may do exactly
    /// what the chart grants.
    ///
    /// # Errors
    /// When `bin` is not one of the chart's components or the file cannot be written.
    pub fn component_kubeconfig(&self, bin: &str) -> anyhow::Result<PathBuf> {
        self.rbac
            .write_kubeconfig(bin, &self.target.source, &self.log_dir)
    }

    /// Flags that make the component running `bin` elect its leader through a Lease in the test's
    /// namespace, with the chart's lease permissions: the chart's lease Role and RoleBinding of the
    /// component are copied into the namespace ([`ChartRbac::lease_objects`]) and the flags name the
    /// lease they allow (`--leader-elect --lease-namespace=<namespace> --lease-name=<the chart's>`).
    ///
    /// # Errors
    /// When `bin` is no component or the server refuses the objects.
    pub async fn leader_election_flags(&self, bin: &str) -> anyhow::Result<Vec<String>> {
        let (objects, lease) = self.rbac.lease_objects(bin, &self.namespace)?;
        let mut applier = Applier::new(self.client.clone());
        for object in objects {
            applier.apply_value(object, Placement::AsWritten).await?;
        }
        Ok(vec![
            "--leader-elect".to_owned(),
            format!("--lease-namespace={}", self.namespace),
            format!("--lease-name={lease}"),
        ])
    }

    /// Registers the chart's GPU-sharing admission webhook for this test's namespace only, calling a
    /// loopback port; start the scheduler with [`crate::webhook::LocalWebhook::scheduler_args`] to serve
    /// it. Removed with the namespace.
    ///
    /// # Errors
    /// When the server refuses the objects.
    pub async fn register_gpu_webhook(&self) -> anyhow::Result<crate::webhook::LocalWebhook> {
        crate::webhook::LocalWebhook::register(&self.client, self.rbac, &self.namespace).await
    }

    /// Stops every component started with [`TestEnv::start_component`] (each killed and waited for).
    pub fn stop_components(&self) {
        self.components.lock().map(|mut c| c.clear()).ok();
    }

    /// Removes the test's GPU-sharing webhook ([`crate::webhook::LocalWebhook::remove`]) after stopping
    /// the components: the scheduler keeping the webhook's CA bundle reads its configuration every
    /// second, and a read after the grant is gone is refused (the RBAC audit fails on it).
    ///
    /// # Errors
    /// When the server refuses a deletion.
    pub async fn remove_webhook(&self, webhook: &crate::webhook::LocalWebhook) -> anyhow::Result<()> {
        self.stop_components();
        webhook.remove(&self.client).await
    }

    /// Stops a component started with [`TestEnv::start_component`]: SIGTERM, then a kill after `grace`.
    ///
    /// # Errors
    /// When no component has that name or it cannot be signalled.
    pub fn stop_component(&self, name: &str, grace: Duration) -> anyhow::Result<ExitStatus> {
        let mut components = self
            .components
            .lock()
            .map_err(|_| anyhow::anyhow!("component list poisoned"))?;
        let index = components
            .iter()
            .position(|c| c.name() == name)
            .with_context(|| format!("no component {name}"))?;
        let mut component = components.remove(index);
        component.terminate(grace)
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to a component started with [`TestEnv::start_component`].
    ///
    /// # Errors
    /// When no component has that name or it cannot be signalled.
    pub fn signal_component(&self, name: &str, signal: &str) -> anyhow::Result<()> {
        let mut components = self
            .components
            .lock()
            .map_err(|_| anyhow::anyhow!("component list poisoned"))?;
        components
            .iter_mut()
            .find(|c| c.name() == name)
            .with_context(|| format!("no component {name}"))?
            .signal(signal)
    }

    /// The log file of a component.
    #[must_use]
    pub fn component_log(&self, name: &str) -> Option<PathBuf> {
        let components = self.components.lock().ok()?;
        components
            .iter()
            .find(|c| c.name() == name)
            .map(|c| c.log_path().to_path_buf())
    }

    /// The state of the namespace, the test's nodes and the components' log tails.
    pub async fn report(&self) -> String {
        let mut report =
            crate::report::namespace_report(&self.client, &self.namespace, Some(&self.node_selector())).await;
        if let Ok(components) = self.components.lock() {
            for component in components.iter() {
                report.push_str(&format!(
                    "-- component {} (log {}), last 40 lines\n{}\n",
                    component.name(),
                    component.log_path().display(),
                    component.log_tail(40)
                ));
            }
        }
        report
    }

    /// Stops the components and the node agent, deletes the namespace (confirming pod deletions) and the
    /// test's nodes. Dropping a `TestEnv` does the same, blocking; this is the async, error-reporting way.
    ///
    /// # Errors
    /// When the cleanup fails.
    pub async fn finish(mut self) -> anyhow::Result<()> {
        self.finished = true;
        self.stop_components();
        if keep_requested() {
            self.print_kept();
            return Ok(());
        }
        let result = teardown(&self.client, &self.namespace).await;
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        result
    }

    fn print_kept(&self) {
        eprintln!(
            "{ENV_KEEP}: kept namespace {} and nodes {}; remove them with `cargo xtask e2e-clean`",
            self.namespace,
            self.node_selector()
        );
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.stop_components();
        self.agent.take();
        let panicking = std::thread::panicking();
        let keep = keep_requested();
        if keep && !panicking {
            self.print_kept();
            return;
        }
        // The test's runtime may be shutting down (a panic unwinds through it), so the cleanup runs on a
        // runtime of its own with a client of its own.
        let config = self.target.config.clone();
        let namespace = self.namespace.clone();
        let selector = self.node_selector();
        let cleanup = std::thread::spawn(move || -> anyhow::Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let client = Client::try_from(config)?;
                if panicking {
                    eprintln!(
                        "{}",
                        crate::report::namespace_report(&client, &namespace, Some(&selector)).await
                    );
                }
                if keep {
                    Ok(())
                } else {
                    teardown(&client, &namespace).await
                }
            })
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(err)) => eprintln!("cleanup of {} failed: {err:#}", self.namespace),
            Err(_) => eprintln!("cleanup of {} panicked", self.namespace),
        }
        if keep {
            self.print_kept();
        }
    }
}

/// Deletes a test namespace and its fake nodes. Pods bound to fake nodes would stay Terminating forever
/// (no kubelet), blocking the namespace's deletion, so they are deleted with grace period 0 until none
/// is left; the namespace is Terminating by then, so no new pod can appear.
///
/// # Errors
/// When the server refuses or pods remain after 60 s.
pub async fn teardown(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(namespace, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => return Err(err).with_context(|| format!("deleting namespace {namespace}")),
    }
    // The nodes go even when pods are left: a benchmark's thousand nodes must not outlive it.
    let pods = remove_pods(client, namespace).await;
    nodes::delete(client, &nodes::owner_selector(namespace)).await?;
    pods
}

/// Force-deletes the namespace's pods (grace 0: fake nodes have no kubelet to confirm a graceful
/// delete), one request per pod with a few in flight: one collection delete of thousands of pods outlasts
/// the API server's request timeout on a busy server. Gives up after 60 s plus 20 ms per pod.
async fn remove_pods(client: &Client, namespace: &str) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let mut deadline = None;
    loop {
        let names: Vec<String> = pods
            .list_metadata(&ListParams::default())
            .await
            .context("listing pods")?
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        let per_pod = Duration::from_millis(20) * u32::try_from(names.len()).unwrap_or(u32::MAX);
        let deadline =
            *deadline.get_or_insert_with(|| tokio::time::Instant::now() + Duration::from_secs(60) + per_pod);
        if tokio::time::Instant::now() >= deadline {
            bail!("{} pods left in namespace {namespace}", names.len());
        }
        futures::stream::iter(names)
            .for_each_concurrent(32, |name| {
                let (pods, force) = (&pods, &force);
                // A pod already gone, or a busy server's timeout, is seen at the next listing.
                async move { drop(pods.delete(&name, force).await) }
            })
            .await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Removes what tests left behind: namespaces labelled [`TEST_LABEL`] whose test process (on this
/// machine) is gone, and fake nodes owned by test namespaces that no longer exist. Returns the number of
/// namespaces and nodes removed.
///
/// # Errors
/// When the server refuses.
pub async fn clean_leftovers(client: &Client) -> anyhow::Result<(usize, usize)> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let found = namespaces
        .list_metadata(&ListParams::default().labels(TEST_LABEL))
        .await?;
    let mut live = std::collections::HashSet::new();
    let mut removed = 0;
    for namespace in found.items {
        let Some(name) = namespace.metadata.name.clone() else {
            continue;
        };
        let pid = namespace
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PID_LABEL))
            .cloned();
        if pid.is_some_and(|pid| Path::new("/proc").join(pid).exists()) {
            live.insert(name);
        } else {
            teardown(client, &name).await?;
            removed += 1;
        }
    }
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let fake = node_api
        .list_metadata(&ListParams::default().labels(&format!("{}=true", nodes::FAKE_NODE_LABEL)))
        .await?;
    let mut orphans = 0;
    for node in fake.items {
        let owner = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(nodes::OWNER_LABEL))
            .cloned()
            .unwrap_or_default();
        if owner.starts_with("e2e-") && !live.contains(&owner) {
            orphans += nodes::delete(client, &nodes::owner_selector(&owner)).await?;
        }
    }
    Ok((removed, orphans))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_unique_dns_labels() {
        let slug = slug("node_agent::Jobs Complete With A Very Long Name That Goes On And On");
        assert_eq!(slug, "node-agent-jobs-complete-with-a-very-lon");
        let (a, b) = (namespace_name(&slug), namespace_name(&slug));
        assert_ne!(a, b);
        assert!(a.len() <= 63, "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{a}"
        );
        assert!(a.starts_with("e2e-node-agent-jobs-"), "{a}");
        assert_eq!(super::slug("!!!"), "");
        assert_eq!(namespace_name("").len(), "e2e-".len() + 6);
    }
}
