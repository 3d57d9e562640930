//! `kai-podgrouper`: makes the PodGroup of every pod whose `schedulerName` is the scheduler's.
//!
//! Flags: `--help`. Endpoints `/livez` (the controller's heartbeat is fresh and its caches' watches
//! run), `/readyz` (CRDs present; for the leader also caches synced) and `/metrics` on the admin
//! address. Only the lease holder reconciles (`--leader-elect`, on by default); losing the lease ends the
//! process (its Deployment restarts it as a follower). A follower is ready as a standby: a rolling
//! update waits for the new pod to be ready before it stops the old leader.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kai_podgrouper::controller::{self, Config};
use kai_podgrouper::grouping::Settings;
use kai_podgrouper::metrics::Metrics;
use prometheus_client::registry::Registry;
use runtime::args::CommonArgs;
use runtime::client::{self, RateLimit};
use runtime::liveness::Liveness;
use runtime::{admin, crd, lease, shutdown, telemetry};

/// Makes the PodGroup every kai-scheduler pod belongs to, from the pod's owner chain.
#[derive(Debug, Parser)]
#[command(name = "kai-podgrouper", version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Pods with this `spec.schedulerName` are grouped.
    #[arg(long, env = "KAI_SCHEDULER_NAME", default_value = api::keys::SCHEDULER_NAME)]
    scheduler_name: String,
    /// Label naming a workload's queue (on the top owner or the pod). `runai/queue` is also read.
    #[arg(long, env = "KAI_QUEUE_LABEL_KEY", default_value = api::keys::QUEUE_LABEL)]
    queue_label_key: String,
    /// Queue of workloads that name none.
    #[arg(long, env = "KAI_DEFAULT_QUEUE", default_value = api::keys::DEFAULT_QUEUE)]
    default_queue: String,
    /// Label naming a pod's node pool (the scheduler's `--node-pool-label`): a workload with KAI's
    /// `project` label and no queue label goes to the queue `<project>-<pool>` when its pod has one.
    #[arg(long, env = "KAI_NODE_POOL_LABEL_KEY", default_value = api::keys::NODE_POOL)]
    node_pool_label: String,
    /// Reconciles run at once. Each waits on up to two writes, so this bounds the pods grouped per
    /// second to about this many per write round trip: sized for a burst of new pods.
    #[arg(long, env = "KAI_MAX_CONCURRENT_RECONCILES", default_value_t = 32)]
    max_concurrent_reconciles: u16,
    /// One gang per Knative revision (`min-scale` pods); `false` gives one group per pod.
    #[arg(long, env = "KAI_KNATIVE_GANG_SCHEDULE", default_value_t = true, action = clap::ArgAction::Set)]
    knative_gang_schedule: bool,
    /// Seconds a pod whose PodGroup is made for it alone (a bare pod, a Deployment's replica) may wait
    /// unbound without `pod-group-name`, unless the scheduler reports it unschedulable first: its
    /// binding names it, so a pod bound in time costs no patch. 0 names every pod at once.
    #[arg(long, env = "KAI_POD_NAMING_DELAY_SECONDS", default_value_t = 30)]
    pod_naming_delay_seconds: u32,
    /// Group only the pods of this namespace (default: all namespaces).
    #[arg(long, env = "KAI_PODGROUPER_NAMESPACE")]
    namespace: Option<String>,
    /// KAI's per-kind defaults: a ConfigMap whose `types` key lists `{typeName, group, priorityName,
    /// preemptibility}`, the priority class and preemptibility of a kind's PodGroups when no label names
    /// them. Read (and watched) only with its namespace.
    #[arg(
        long,
        env = "KAI_DEFAULT_PRIORITIES_CONFIGMAP_NAME",
        requires = "default_priorities_configmap_namespace"
    )]
    default_priorities_configmap_name: Option<String>,
    /// Namespace of `--default-priorities-configmap-name`.
    #[arg(
        long,
        env = "KAI_DEFAULT_PRIORITIES_CONFIGMAP_NAMESPACE",
        requires = "default_priorities_configmap_name"
    )]
    default_priorities_configmap_namespace: Option<String>,
}

/// The client's default rate limit, the scheduler's: sized for bursts, since a workload's pods arrive
/// together and each costs the podgrouper up to two writes (its PodGroup once, the pod's annotation).
/// KAI's podgrouper defaults to 50 / 300, which makes 1,000 new pods wait about half a minute for their groups.
const RATE_LIMIT: RateLimit = RateLimit {
    qps: 1000.0,
    burst: 2000,
};
const USER_AGENT: &str = concat!("kai-podgrouper/", env!("CARGO_PKG_VERSION"));

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args {
        common,
        scheduler_name,
        queue_label_key,
        default_queue,
        node_pool_label,
        max_concurrent_reconciles,
        knative_gang_schedule,
        pod_naming_delay_seconds,
        namespace,
        default_priorities_configmap_name,
        default_priorities_configmap_namespace,
    } = Args::parse();
    telemetry::init(&common.log_settings())?;
    let shutdown = shutdown::on_signals()?;

    let lease_client = client::build(USER_AGENT, RateLimit::UNLIMITED).await?;
    // One lease per scope, as the scheduler has one per node pool: podgroupers confined to different
    // namespaces write different pods, and one must not wait on the other's lease.
    let lease_name = match &namespace {
        Some(namespace) => format!("kai-podgrouper-{namespace}"),
        None => "kai-podgrouper".to_owned(),
    };
    let (elector, leadership) = lease::Elector::new(lease_client, common.leader_election(&lease_name)?);
    // Every write leaves through the fence: refused unless this process leads at that moment.
    let client = client::build_fenced(USER_AGENT, common.rate_limit(RATE_LIMIT), leadership.guard()).await?;

    let mut registry = Registry::with_prefix("kai_podgrouper");
    let metrics = Metrics::register(&mut registry);
    let readiness = admin::Readiness::new();
    let crds_ready = readiness.gate("crds");
    let caches_ready = readiness.gate("caches");
    // Parts are registered once the controller runs: a follower waiting for the lease is live.
    let liveness = Liveness::new(common.liveness_timeout(controller::HEARTBEAT_PERIOD)?);
    let admin_server = tokio::spawn(admin::serve(
        common.admin_address,
        admin::AdminState::new(readiness.clone(), liveness.clone(), registry),
        shutdown.clone().cancelled_owned(),
    ));

    crd::wait_for_crds(
        &client,
        &["podgroups.scheduling.run.ai"],
        Duration::from_secs(120),
    )
    .await
    .context("waiting for the PodGroup CRD")?;
    crds_ready.set_ready();

    let mut elector_task = tokio::spawn(elector.run(shutdown.clone()));
    let mut state = leadership.subscribe();
    if !state.borrow().is_leader() {
        // Ready as a standby; the caches are filled once it leads.
        caches_ready.set_ready();
    }
    tokio::select! {
        () = shutdown.cancelled() => {}
        led = state.wait_for(lease::LeaderState::is_leader) => { led.context("leader election stopped")?; }
    }
    caches_ready.set_not_ready();

    let config = Config {
        scheduler_name,
        settings: Settings {
            queue_label_key,
            default_queue,
            node_pool_label_key: node_pool_label,
            knative_gang: knative_gang_schedule,
            field_manager: api::keys::FIELD_MANAGER_PODGROUPER.to_owned(),
            naming_delay_ms: i64::from(pod_naming_delay_seconds) * 1000,
        },
        concurrency: max_concurrent_reconciles.max(1),
        instance: common.identity.clone().unwrap_or_else(lease::default_identity),
        namespace,
        kind_defaults: default_priorities_configmap_namespace.zip(default_priorities_configmap_name),
    };
    if !shutdown.is_cancelled() {
        tracing::info!(scheduler = %config.scheduler_name, "kai-podgrouper leading; grouping pods");
        let stop = shutdown.clone();
        let mut lost = leadership.subscribe();
        let lost = async move {
            let _ = lost.wait_for(|s| !s.is_leader()).await;
        };
        let run = controller::run(
            client,
            config,
            metrics,
            caches_ready,
            leadership.guard(),
            &liveness,
            async move {
                tokio::select! { () = stop.cancelled() => {}, () = lost => {} }
            },
        );
        tokio::select! {
            () = run => {}
            _ = &mut elector_task => anyhow::bail!("leader election stopped"),
        }
        if !shutdown.is_cancelled() {
            anyhow::bail!("lost the lease; exiting so a restart follows the new leader");
        }
    }
    elector_task.await.context("leader election task")?;
    admin_server.await.context("admin server task")??;
    tracing::info!("kai-podgrouper stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_is_valid() {
        super::Args::command().debug_assert();
    }
}
