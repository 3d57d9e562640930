//! The command line and the I/O edge: parses arguments, lists the cluster's objects into a
//! [`Snapshot`] (or reads one from a file), runs the pure reports and prints them.
//!
//! Must not: hold any rule of its own about scheduling; the reports and the scheduler's code decide.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::ListParams;
use kube::{Api, Client};
use runtime::client::RateLimit;
use scheduler::cache::ingest::Partition;
use scheduler_core::config::Config;
use serde::de::DeserializeOwned;

use crate::explain;
use crate::queues;
use crate::snapshot::{ModelOptions, Snapshot, UsageOrigin};
use crate::top;

/// Explains the KAI-compatible gang scheduler's decisions.
#[derive(Debug, Parser)]
#[command(
    name = "kai",
    version,
    about = "Explains the gang scheduler's decisions: why a PodGroup waits, the queue tree, GPU use per node.",
    after_help = "Also runs as a kubectl plugin: put `kubectl-kai` on PATH and run `kubectl kai ...`."
)]
pub struct Args {
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Read the objects from a YAML file (`kubectl get ... -o yaml` output; `-` for stdin) instead of
    /// the cluster.
    #[arg(long, global = true, value_name = "FILE")]
    pub from_file: Option<String>,
    /// `spec.schedulerName` of the pods the scheduler places.
    #[arg(long, global = true, env = "KAI_SCHEDULER_NAME", default_value = api::keys::SCHEDULER_NAME)]
    pub scheduler_name: String,
    /// Queue of PodGroups that name none.
    #[arg(long, global = true, env = "KAI_DEFAULT_QUEUE", default_value = api::keys::DEFAULT_QUEUE)]
    pub default_queue: String,
    /// The node pool the scheduler serves (KAI's scheduling shards): only nodes, PodGroups and pods
    /// labelled `<node-pool-label>=<value>`; without it, what carries no pool label.
    #[arg(long, global = true, env = "KAI_NODE_POOL")]
    pub node_pool: Option<String>,
    /// Label key of node pools.
    #[arg(long, global = true, env = "KAI_NODE_POOL_LABEL", default_value = api::keys::NODE_POOL)]
    pub node_pool_label: String,
    /// The scheduler's configuration file (actions and plugin settings), to simulate exactly what it runs;
    /// `kai sim replay` and `kai sim philly` start each policy from it (the policy sets the actions).
    #[arg(long, global = true, env = "KAI_SCHEDULER_CONFIG", value_name = "FILE")]
    pub scheduler_config: Option<String>,
    /// ConfigMap of the usage record for usage-based fair share (read only when the configuration has
    /// `usageDBConfig`). [default: as the scheduler names it, `<scheduler-name>[-<node-pool>]-usage`]
    #[arg(long, global = true, env = "KAI_USAGE_CONFIGMAP")]
    pub usage_configmap: Option<String>,
    /// Namespace of that ConfigMap.
    #[arg(long, global = true, env = "KAI_USAGE_NAMESPACE", default_value = api::keys::SYSTEM_NAMESPACE)]
    pub usage_namespace: String,
    /// What to show.
    #[command(subcommand)]
    pub command: Command,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Text for a terminal.
    Table,
    /// JSON for scripts.
    Json,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Why a gang waits and what would let it run.
    Explain {
        /// What to explain.
        #[command(subcommand)]
        what: ExplainWhat,
    },
    /// The queue tree: priority, quota, limit, fair share, allocated and requested.
    #[command(alias = "queue", alias = "q")]
    Queues,
    /// GPU allocation per node.
    Top {
        /// What to show (nodes by default).
        #[command(subcommand)]
        what: Option<TopWhat>,
    },
    /// Scheduling quality on a workload: replays it through the scheduler's decision core on a
    /// simulated clock (no cluster needed) and reports waiting, allocation, fairness and evictions.
    Sim {
        /// What to replay.
        #[command(subcommand)]
        what: crate::sim::SimCommand,
    },
}

/// Objects `explain` knows.
#[derive(Debug, Subcommand)]
pub enum ExplainWhat {
    /// A PodGroup (scheduling.run.ai, or Volcano's when no such PodGroup exists).
    #[command(alias = "podgroup", alias = "podgroups")]
    Pg {
        /// Name.
        name: String,
        /// Namespace (default: the context's namespace).
        #[arg(short, long)]
        namespace: Option<String>,
    },
}

/// Objects `top` knows.
#[derive(Debug, Subcommand)]
pub enum TopWhat {
    /// GPUs per node: allocatable, used, free, shared devices, pods.
    #[command(alias = "node", alias = "no")]
    Nodes,
}

/// Runs the program; the exit code is 1 on any error (printed to stderr).
#[must_use]
pub fn main() -> ExitCode {
    let args = parse_args();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`kai queues | head`) is not an error worth reporting.
            let _ = stdout.write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Parses the arguments; invoked as `kubectl-kai`, usage reads `kubectl kai`.
fn parse_args() -> Args {
    use clap::{CommandFactory, FromArgMatches};
    let plugin = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().starts_with("kubectl-kai"))
        })
        .unwrap_or(false);
    let mut command = Args::command();
    if plugin {
        command = command.bin_name("kubectl kai");
    }
    let matches = command.get_matches();
    match Args::from_arg_matches(&matches) {
        Ok(args) => args,
        Err(e) => e.exit(),
    }
}

fn now_millis() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

fn width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
        .filter(|w| *w >= 60)
        .unwrap_or(100)
}

fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    let mut s = serde_json::to_string_pretty(value).context("encoding JSON")?;
    s.push('\n');
    Ok(s)
}

/// Runs one command and returns what to print.
///
/// # Errors
/// Connection problems, missing CRDs, objects that do not exist.
pub async fn run(args: Args) -> anyhow::Result<String> {
    let Args {
        output,
        context,
        from_file,
        scheduler_name,
        default_queue,
        node_pool,
        node_pool_label,
        scheduler_config,
        usage_configmap,
        usage_namespace,
        command,
    } = args;
    // A simulation reads traces, not the cluster: a flag that names one is refused, not ignored.
    let command = match command {
        Command::Sim { what } => {
            if let Some(flag) = [("--context", &context), ("--from-file", &from_file)]
                .into_iter()
                .find_map(|(flag, value)| value.is_some().then_some(flag))
            {
                anyhow::bail!(
                    "{flag} names a cluster to read, and `kai sim` reads no cluster: it replays the \
                     trace or workload file it is given; drop {flag}"
                );
            }
            return crate::sim::run(what, scheduler_config.as_deref(), output == Output::Json);
        }
        other => other,
    };
    let config = match &scheduler_config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let options = ModelOptions {
        scheduler_name,
        default_queue,
        partition: Partition {
            key: node_pool_label,
            value: node_pool,
        },
    };
    let usage_settings = config.usage()?;
    let usage_configmap = usage_configmap.unwrap_or_else(|| {
        scheduler::usage::default_configmap_name(&options.scheduler_name, options.partition.value.as_deref())
    });
    let (snapshot, default_namespace) = match &from_file {
        Some(path) => (read_file(path)?, "default".to_owned()),
        None => {
            let (client, namespace) = connect(context.as_deref()).await?;
            let mut snapshot = fetch(&client).await?;
            if usage_settings.is_some() {
                snapshot
                    .usage_records
                    .extend(fetch_usage_record(&client, &usage_namespace, &usage_configmap).await?);
            }
            (snapshot, namespace)
        }
    };
    let now = now_millis();
    let mut model = snapshot.model(&options);
    let usage_origin = snapshot.apply_usage(
        &mut model,
        usage_settings.as_ref(),
        &usage_namespace,
        &usage_configmap,
        now,
    );
    if let Some(note) = usage_note(&usage_origin) {
        eprintln!("{note}");
    }
    match command {
        Command::Explain {
            what: ExplainWhat::Pg { name, namespace },
        } => {
            let namespace = namespace.unwrap_or(default_namespace);
            let Some(key) = snapshot.find_pod_group(&namespace, &name) else {
                let others = snapshot.pod_group_names(&namespace);
                let hint = if others.is_empty() {
                    format!("there are no PodGroups in namespace {namespace}")
                } else {
                    format!("PodGroups in namespace {namespace}: {}", others.join(", "))
                };
                bail!("PodGroup {namespace}/{name} not found; {hint}");
            };
            if model.group_id(&key).is_none() {
                let pool = options.partition.value.as_deref().unwrap_or("(none)");
                bail!(
                    "PodGroup {namespace}/{name} is not in node pool {pool} (label {}); name its pool with \
                     --node-pool",
                    options.partition.key
                );
            }
            let e = explain::explain_for(&snapshot, &model, &key, &config, now, &options.scheduler_name)?;
            match output {
                Output::Table => Ok(explain::render(&e, width())),
                Output::Json => json(&e),
            }
        }
        Command::Queues => {
            let r = queues::report(&snapshot, &model, now);
            match output {
                Output::Table => Ok(queues::render(&r)),
                Output::Json => json(&r),
            }
        }
        // Taken before the snapshot is read (a replay needs no cluster); kept here for completeness.
        Command::Sim { what } => crate::sim::run(what, scheduler_config.as_deref(), output == Output::Json),
        Command::Top { what: _ } => {
            let r = top::report(&model);
            match output {
                Output::Table => Ok(top::render(&r)),
                Output::Json => json(&r),
            }
        }
    }
}

/// What to tell the user about the usage record behind fair share, when it is not simply used.
fn usage_note(origin: &UsageOrigin) -> Option<String> {
    match origin {
        UsageOrigin::Off | UsageOrigin::Record(_) => None,
        UsageOrigin::Missing(cm) => Some(format!(
            "note: usage-based fair share is on but ConfigMap {cm} does not exist (yet): usage counted as 0"
        )),
        UsageOrigin::Unreadable { configmap, error } => Some(format!(
            "note: the usage record in ConfigMap {configmap} cannot be used ({error}): usage counted as 0"
        )),
    }
}

/// The usage ConfigMap, if it exists.
async fn fetch_usage_record(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<ConfigMap>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(found) => Ok(found),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            bail!(
                "not allowed to read ConfigMap {namespace}/{name} (the usage record): {}",
                s.message
            )
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading ConfigMap {namespace}/{name}"))),
    }
}

fn read_file(path: &str) -> anyhow::Result<Snapshot> {
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading objects from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?
    };
    Snapshot::from_yaml(&text).with_context(|| format!("reading objects from {path}"))
}

/// A client for the current (or named) kubeconfig context, else in-cluster; and the default namespace.
async fn connect(context: Option<&str>) -> anyhow::Result<(Client, String)> {
    let user_agent = concat!("kai-cli/", env!("CARGO_PKG_VERSION"));
    let client = match context {
        None => runtime::client::build(user_agent, RateLimit::UNLIMITED).await?,
        Some(ctx) => {
            let options = kube::config::KubeConfigOptions {
                context: Some(ctx.to_owned()),
                ..Default::default()
            };
            let config = kube::Config::from_kubeconfig(&options)
                .await
                .with_context(|| format!("loading kubeconfig context {ctx:?}"))?;
            runtime::client::from_config(config, user_agent, RateLimit::UNLIMITED)?
        }
    };
    let namespace = client.default_namespace().to_owned();
    Ok((client, namespace))
}

async fn list<K>(api: Api<K>, what: &str) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(|e| match e {
            kube::Error::Api(s) if s.code == 403 => {
                anyhow::anyhow!("not allowed to list {what}: {}", s.message)
            }
            e => anyhow::Error::new(e).context(format!("listing {what}")),
        })?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(items)
}

/// Lists everything scheduling depends on. The KAI CRDs must be installed; Volcano's PodGroups and
/// Topologies are read only where the server offers them.
async fn fetch(client: &Client) -> anyhow::Result<Snapshot> {
    let served = |group: &'static str, version: &'static str, plural: &'static str| async move {
        runtime::discovery::api_resource_exists(client, group, version, plural)
            .await
            .with_context(|| {
                format!(
                    "asking the API server whether it serves {plural}.{group} (is the cluster reachable?)"
                )
            })
    };
    let missing: Vec<&str> = [
        (
            "podgroups",
            served("scheduling.run.ai", "v2alpha2", "podgroups").await?,
        ),
        ("queues", served("scheduling.run.ai", "v2", "queues").await?),
    ]
    .iter()
    .filter(|(_, ok)| !ok)
    .map(|(n, _)| *n)
    .collect();
    if !missing.is_empty() {
        bail!(
            "the API server does not serve {} of scheduling.run.ai: the KAI CRDs are not installed in this \
             cluster (install the chart or apply crds/)",
            missing.join(" and ")
        );
    }
    let volcano = served("scheduling.volcano.sh", "v1beta1", "podgroups").await?;
    let topology = served("kai.scheduler", "v1alpha1", "topologies").await?;
    let (nodes, pods, pod_groups, queues, priority_classes, namespaces) = tokio::try_join!(
        list(Api::<Node>::all(client.clone()), "nodes"),
        list(Api::<Pod>::all(client.clone()), "pods"),
        list(
            Api::<api::PodGroup>::all(client.clone()),
            "podgroups.scheduling.run.ai"
        ),
        list(Api::<api::Queue>::all(client.clone()), "queues.scheduling.run.ai"),
        list(Api::<PriorityClass>::all(client.clone()), "priorityclasses"),
        list(Api::<Namespace>::all(client.clone()), "namespaces"),
    )?;
    // Storage, for pods' volumes (the scheduler reads the same four kinds).
    let (claims, volumes, storage_classes, csi_nodes) = tokio::try_join!(
        list(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            "persistentvolumeclaims"
        ),
        list(Api::<PersistentVolume>::all(client.clone()), "persistentvolumes"),
        list(
            Api::<StorageClass>::all(client.clone()),
            "storageclasses.storage.k8s.io"
        ),
        list(Api::<CSINode>::all(client.clone()), "csinodes.storage.k8s.io"),
    )?;
    let volcano_pod_groups = if volcano {
        list(
            Api::<api::VolcanoPodGroup>::all(client.clone()),
            "podgroups.scheduling.volcano.sh",
        )
        .await?
    } else {
        Vec::new()
    };
    let topologies = if topology {
        list(
            Api::<api::Topology>::all(client.clone()),
            "topologies.kai.scheduler",
        )
        .await?
    } else {
        Vec::new()
    };
    Ok(Snapshot {
        nodes,
        pods,
        pod_groups,
        volcano_pod_groups,
        queues,
        priority_classes,
        topologies,
        namespaces,
        claims,
        volumes,
        storage_classes,
        csi_nodes,
        // Read by `run` only when the configuration turns usage-based fair share on.
        usage_records: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_is_valid() {
        Args::command().debug_assert();
    }

    #[test]
    fn parses_the_documented_forms() {
        let a = Args::try_parse_from(["kai", "explain", "pg", "train", "-n", "ml", "-o", "json"]).unwrap();
        assert_eq!(a.output, Output::Json);
        assert!(matches!(
            a.command,
            Command::Explain { what: ExplainWhat::Pg { ref name, namespace: Some(ref ns) } } if name == "train" && ns == "ml"
        ));
        let a = Args::try_parse_from(["kai", "explain", "podgroup", "train"]).unwrap();
        assert!(matches!(
            a.command,
            Command::Explain {
                what: ExplainWhat::Pg { namespace: None, .. }
            }
        ));
        let a = Args::try_parse_from(["kai", "-o", "json", "queues"]).unwrap();
        assert!(matches!(a.command, Command::Queues) && a.output == Output::Json);
        let a = Args::try_parse_from(["kai", "top"]).unwrap();
        assert!(matches!(a.command, Command::Top { what: None }));
        let a = Args::try_parse_from(["kai", "top", "nodes", "--context", "dev"]).unwrap();
        assert!(matches!(
            a.command,
            Command::Top {
                what: Some(TopWhat::Nodes)
            }
        ));
        assert_eq!(a.context.as_deref(), Some("dev"));
        assert!(Args::try_parse_from(["kai", "explain", "pod", "x"]).is_err());
    }
}

/// The listing code against a fake API server.
#[cfg(test)]
mod fetch_tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    use serde_json::{Value, json};

    use super::*;

    /// A client whose requests (`path?query`) are answered by `respond`; also returns the request log.
    fn fake(
        respond: impl Fn(&str) -> (StatusCode, Value) + Send + Sync + 'static,
    ) -> (Client, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let respond = Arc::new(respond);
        let seen = log.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let (respond, seen) = (respond.clone(), seen.clone());
            async move {
                let uri = request.uri().to_string();
                let (code, body) = respond(&uri);
                seen.lock().expect("log").push(uri);
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string().into_bytes()))
                    .expect("response");
                Ok::<_, Infallible>(response)
            }
        });
        (Client::new(service, "default"), log)
    }

    fn resources(group_version: &str, plural: &str) -> (StatusCode, Value) {
        let kind = if plural == "queues" { "Queue" } else { "PodGroup" };
        (
            StatusCode::OK,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": [{"name": plural, "singularName": "", "namespaced": plural != "queues", "kind": kind, "verbs": ["list"]}]}),
        )
    }

    fn not_found() -> (StatusCode, Value) {
        (
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound", "code": 404, "message": "the server could not find the requested resource"}),
        )
    }

    fn list(kind: &str, items: Vec<Value>, continue_: &str) -> (StatusCode, Value) {
        (
            StatusCode::OK,
            json!({"kind": format!("{kind}List"), "apiVersion": "v1", "metadata": {"continue": continue_}, "items": items}),
        )
    }

    fn node(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    /// A server with the KAI CRDs and neither Volcano nor Topology; nodes come in two pages.
    fn cluster(uri: &str) -> (StatusCode, Value) {
        let path = uri.split('?').next().unwrap_or(uri);
        match path {
            "/apis/scheduling.run.ai/v2alpha2" => resources("scheduling.run.ai/v2alpha2", "podgroups"),
            "/apis/scheduling.run.ai/v2" => resources("scheduling.run.ai/v2", "queues"),
            "/api/v1/nodes" if uri.contains("continue=page-2") => list("Node", vec![node("n2")], ""),
            "/api/v1/nodes" => list("Node", vec![node("n1")], "page-2"),
            "/api/v1/pods" => list("Pod", vec![], ""),
            "/apis/scheduling.run.ai/v2alpha2/podgroups" => list("PodGroup", vec![], ""),
            "/apis/scheduling.run.ai/v2/queues" => list("Queue", vec![], ""),
            "/apis/scheduling.k8s.io/v1/priorityclasses" => list("PriorityClass", vec![], ""),
            "/api/v1/namespaces" => list("Namespace", vec![], ""),
            "/api/v1/persistentvolumeclaims" => list("PersistentVolumeClaim", vec![], ""),
            "/api/v1/persistentvolumes" => list("PersistentVolume", vec![], ""),
            "/apis/storage.k8s.io/v1/storageclasses" => list("StorageClass", vec![], ""),
            "/apis/storage.k8s.io/v1/csinodes" => list("CSINode", vec![], ""),
            _ => not_found(),
        }
    }

    #[tokio::test]
    async fn lists_everything_page_by_page_and_skips_apis_not_served() {
        let (client, log) = fake(cluster);
        let snapshot = fetch(&client).await.unwrap();
        let nodes: Vec<_> = snapshot
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        assert_eq!(nodes, ["n1", "n2"]);
        let log = log.lock().unwrap();
        assert!(
            log.iter()
                .all(|u| !u.contains("volcano.sh/v1beta1/") && !u.contains("/topologies")),
            "{log:?}"
        );
        assert!(
            log.iter()
                .any(|u| u.starts_with("/apis/scheduling.volcano.sh/v1beta1")),
            "{log:?}"
        );
    }

    #[tokio::test]
    async fn missing_crds_are_named() {
        let (client, _) = fake(|_| not_found());
        let e = fetch(&client).await.unwrap_err().to_string();
        assert_eq!(
            e,
            "the API server does not serve podgroups and queues of scheduling.run.ai: the KAI CRDs are not \
             installed in this cluster (install the chart or apply crds/)"
        );
    }

    #[tokio::test]
    async fn forbidden_lists_say_what_was_refused() {
        let (client, _) = fake(|uri| {
            if uri.starts_with("/api/v1/pods") {
                (
                    StatusCode::FORBIDDEN,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
                        "message": "pods is forbidden: User \"dev\" cannot list resource \"pods\" at the cluster scope"}),
                )
            } else {
                cluster(uri)
            }
        });
        let e = format!("{:#}", fetch(&client).await.unwrap_err());
        assert_eq!(
            e,
            "not allowed to list pods: pods is forbidden: User \"dev\" cannot list resource \"pods\" at the cluster scope"
        );
    }
}
