//! `kai-scheduler`: the scheduling loop. Watches the cluster into the model, runs a cycle whenever
//! something changed (at most every `--min-cycle-interval`, at least every `--schedule-period`), and
//! hands the decisions to the applier. Only the leader schedules; followers keep a warm model. Every
//! wake of the loop, leader or not, beats the heartbeat `/livez` reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kai_scheduler::apply::{Applier, ApplierOptions, ApplyMetrics};
use kai_scheduler::cache::ingest::{Ingest, Partition};
use kai_scheduler::cache::watch::{self, Offered};
use kai_scheduler::loop_state;
use kai_scheduler::metrics::{self, CycleMetrics};
use kai_scheduler::usage::{self, UsageKeeper};
use kai_scheduler::webhook::{self, WebhookMetrics, keeper};
use runtime::client::RateLimit;
use runtime::{admin, args::CommonArgs, crd, discovery, lease, liveness::Liveness, shutdown, telemetry};
use scheduler_core::config::Config;
use scheduler_core::cycle;
use scheduler_core::model::Cluster;
use tokio::sync::mpsc;
use tracing::{Instrument, info, info_span, warn};

/// Gang scheduler for AI workloads, a drop-in for NVIDIA's KAI Scheduler.
#[derive(Debug, Parser)]
#[command(
    name = "kai-scheduler",
    version,
    about = "Gang scheduler for AI workloads on Kubernetes, a drop-in for NVIDIA's KAI Scheduler."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// `spec.schedulerName` of the pods this scheduler places.
    #[arg(long, env = "KAI_SCHEDULER_NAME", default_value = api::keys::SCHEDULER_NAME)]
    scheduler_name: String,
    /// Scheduler configuration file (actions and plugin settings, YAML). Defaults apply without one.
    #[arg(long, env = "KAI_SCHEDULER_CONFIG")]
    config: Option<String>,
    /// Longest time between cycles when nothing changes.
    #[arg(long, env = "KAI_SCHEDULE_PERIOD", default_value = "1s", value_parser = parse_duration)]
    schedule_period: Duration,
    /// Shortest time between cycles when things change quickly.
    #[arg(long, env = "KAI_MIN_CYCLE_INTERVAL", default_value = "20ms", value_parser = parse_duration)]
    min_cycle_interval: Duration,
    /// Queue of PodGroups that name none.
    #[arg(long, env = "KAI_DEFAULT_QUEUE", default_value = api::keys::DEFAULT_QUEUE)]
    default_queue: String,
    /// Binds in flight at most (the client QPS limit applies on top).
    #[arg(long, env = "KAI_BIND_CONCURRENCY", default_value_t = 64)]
    bind_concurrency: usize,
    /// Serve only this node pool: nodes, PodGroups and pods labelled `<node-pool-label>=<value>` (KAI's
    /// scheduling shards). Without it, the scheduler serves what carries no pool label.
    #[arg(long, env = "KAI_NODE_POOL")]
    node_pool: Option<String>,
    /// Label key of node pools.
    #[arg(long, env = "KAI_NODE_POOL_LABEL", default_value = api::keys::NODE_POOL)]
    node_pool_label: String,
    /// Other writes (statuses, evictions, events) in flight at most.
    #[arg(long, env = "KAI_WRITE_CONCURRENCY", default_value_t = 16)]
    write_concurrency: usize,
    /// Serve the GPU-sharing admission webhook (HTTPS, path /mutate-pods) on this address; unset: no
    /// webhook. Every replica serves it, leader or not.
    #[arg(long, env = "KAI_WEBHOOK_ADDRESS")]
    webhook_address: Option<SocketAddr>,
    /// Secret holding the webhook's certificate (`tls.crt`, `tls.key`, `ca.crt`). With
    /// `--webhook-certificates=self` it must exist (the chart makes it empty) and the scheduler fills it.
    #[arg(long, env = "KAI_WEBHOOK_SECRET", default_value = "kai-scheduler-webhook-tls")]
    webhook_secret: String,
    /// Namespace of --webhook-secret.
    #[arg(long, env = "KAI_WEBHOOK_SECRET_NAMESPACE", default_value = api::keys::SYSTEM_NAMESPACE)]
    webhook_secret_namespace: String,
    /// Who keeps the webhook's certificates: `self` (the scheduler makes and renews a CA and a serving
    /// certificate and keeps the CA bundle in --webhook-configuration) or `external` (cert-manager or
    /// another tool fills the Secret and the bundle; the scheduler only reads the Secret).
    #[arg(long, env = "KAI_WEBHOOK_CERTIFICATES", value_enum, default_value_t = CertificateSource::SelfManaged)]
    webhook_certificates: CertificateSource,
    /// The MutatingWebhookConfiguration whose CA bundle the scheduler keeps (with
    /// `--webhook-certificates=self`).
    #[arg(long, env = "KAI_WEBHOOK_CONFIGURATION")]
    webhook_configuration: Option<String>,
    /// Host names and IP addresses the API server calls the webhook at (the serving certificate's
    /// names), comma-separated.
    #[arg(
        long,
        env = "KAI_WEBHOOK_HOSTS",
        value_delimiter = ',',
        default_value = "kai-scheduler-webhook.kai-scheduler.svc"
    )]
    webhook_hosts: Vec<String>,
    /// Validity of the serving certificates the scheduler makes; each is renewed with a third left.
    #[arg(long, env = "KAI_WEBHOOK_CERT_VALIDITY", default_value = "2160h", value_parser = parse_duration)]
    webhook_cert_validity: Duration,
    /// Validity of the CAs the scheduler makes; each is replaced with a third left.
    #[arg(long, env = "KAI_WEBHOOK_CA_VALIDITY", default_value = "17520h", value_parser = parse_duration)]
    webhook_ca_validity: Duration,
    /// ConfigMap keeping the queues' usage for usage-based fair share (only with `usageDBConfig` in the
    /// configuration). [default: the lease name (`<scheduler-name>[-<node-pool>]`) + `-usage`]
    #[arg(long, env = "KAI_USAGE_CONFIGMAP")]
    usage_configmap: Option<String>,
    /// Namespace of that ConfigMap (the scheduler's own).
    #[arg(long, env = "KAI_USAGE_NAMESPACE", default_value = api::keys::SYSTEM_NAMESPACE)]
    usage_namespace: String,
}

/// Who keeps the webhook's certificates (`--webhook-certificates`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CertificateSource {
    /// The scheduler.
    #[value(name = "self")]
    SelfManaged,
    /// cert-manager or another tool.
    External,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    scheduler_core::config::parse_duration(s)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init(&args.common.log_settings())?;
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let usage_settings = config.usage()?;
    info!(actions = ?config.actions, usage = ?usage_settings, "configuration loaded");
    let shutdown = shutdown::on_signals()?;
    let user_agent = concat!("kai-scheduler/", env!("CARGO_PKG_VERSION"));
    let lease_client = runtime::client::build(user_agent, RateLimit::UNLIMITED)
        .await
        .context("connecting to the cluster")?;
    // One lease per shard, as KAI names it.
    let lease_name = match &args.node_pool {
        Some(pool) => format!("{}-{pool}", args.scheduler_name),
        None => args.scheduler_name.clone(),
    };
    let election = args.common.leader_election(&lease_name)?;
    let identity = match &election {
        lease::LeaderElection::Enabled(config) => config.identity().to_owned(),
        lease::LeaderElection::Disabled => lease::default_identity(),
    };
    let (elector, leadership) = lease::Elector::new(lease_client, election);
    // Every write leaves through the fence: refused unless this process leads at that moment.
    let client = runtime::client::build_fenced(
        user_agent,
        args.common.rate_limit(RateLimit {
            qps: 1000.0,
            burst: 2000,
        }),
        leadership.guard(),
    )
    .await
    .context("connecting to the cluster")?;

    let cycle_metrics = CycleMetrics::default();
    let apply_metrics = ApplyMetrics::default();
    let mut registry = metrics::registry(&cycle_metrics, &apply_metrics);
    let webhook_metrics = WebhookMetrics::default();
    webhook_metrics.register(registry.sub_registry_with_prefix("scheduler"));
    let readiness = admin::Readiness::new();
    let crds_ready = readiness.gate("crds");
    let caches_ready = readiness.gate("caches");
    // With the webhook on, a replica is ready once it serves a certificate (the webhook's Service sends
    // the API server only to ready replicas).
    let webhook_ready = args
        .webhook_address
        .map(|_| readiness.gate("webhook certificate"));
    // The loop wakes at least every --schedule-period (LoopState::next_cycle), idle or not.
    let liveness = Liveness::new(args.common.liveness_timeout(args.schedule_period)?);
    let admin_server = tokio::spawn(admin::serve(
        args.common.admin_address,
        admin::AdminState::new(readiness.clone(), liveness.clone(), registry),
        shutdown.clone().cancelled_owned(),
    ));

    crd::wait_for_crds(
        &client,
        &["podgroups.scheduling.run.ai", "queues.scheduling.run.ai"],
        Duration::from_secs(120),
    )
    .await?;
    crds_ready.set_ready();
    let offered = Offered {
        volcano: discovery::api_resource_exists(&client, "scheduling.volcano.sh", "v1beta1", "podgroups")
            .await?,
        topology: discovery::api_resource_exists(&client, "kai.scheduler", "v1alpha1", "topologies").await?,
    };
    let eviction = discovery::eviction_version(&client).await?;
    info!(?offered, ?eviction, "server capabilities");

    let mut elector_task = tokio::spawn(elector.run(shutdown.clone()));

    let webhook_server = match (args.webhook_address, webhook_ready) {
        (Some(address), Some(ready)) => {
            let tcp = webhook::bind(address).await?;
            let store = Arc::new(webhook::tls::CertStore::default());
            let settings = keeper::Settings {
                secret: args.webhook_secret.clone(),
                namespace: args.webhook_secret_namespace.clone(),
                configuration: args.webhook_configuration.clone(),
                source: match args.webhook_certificates {
                    CertificateSource::SelfManaged => keeper::Source::SelfManaged,
                    CertificateSource::External => keeper::Source::External,
                },
                hosts: args.webhook_hosts.clone(),
                validity: webhook::certs::Validity {
                    ca: args.webhook_ca_validity,
                    cert: args.webhook_cert_validity,
                },
            };
            tokio::spawn(keeper::run(
                client.clone(),
                settings,
                leadership.guard(),
                Arc::clone(&store),
                ready,
                shutdown.clone(),
            ));
            Some(tokio::spawn(webhook::serve(
                tcp,
                store,
                args.scheduler_name.clone(),
                webhook_metrics,
                shutdown.clone().cancelled_owned(),
            )))
        }
        _ => None,
    };

    let (feedback_tx, mut feedback_rx) = mpsc::unbounded_channel();
    let options = ApplierOptions {
        identity,
        bind_concurrency: args.bind_concurrency,
        write_concurrency: args.write_concurrency,
        gpu_sharing: config.plugins.gpusharing.clone(),
    };
    let applier = Arc::new(Applier::new(
        client.clone(),
        eviction,
        leadership.guard(),
        feedback_tx,
        options,
        apply_metrics,
    ));

    // Changes waiting for the loop: enough for the watches to run ahead while a cycle runs, few enough
    // that a burst of pod updates (each a whole Pod until it is converted) is not buffered in memory: at
    // 5,000 nodes 8,192 waiting pods held about 45 MiB.
    let (mut events, kinds) = watch::start(&client, offered, 1024, &liveness);
    let partition = Partition {
        key: args.node_pool_label.clone(),
        value: args.node_pool.clone(),
    };
    let mut ingest = Ingest::new(&args.scheduler_name, &args.default_queue, partition);
    ingest.require_gpu_webhook =
        config.plugins.gpusharing.enabled && config.plugins.gpusharing.require_webhook;
    let mut cluster = Cluster::default();
    if args.node_pool.is_some() {
        cluster.queue_reports = scheduler_core::model::QueueReports::UsedByPool;
    }
    cluster.node_pool = args.node_pool.as_deref().map(Into::into);
    // Usage-based fair share: the record lives here; only the leader folds and stores it.
    let mut usage = usage_settings.map(|settings| {
        let name = args.usage_configmap.clone().unwrap_or_else(|| {
            usage::default_configmap_name(&args.scheduler_name, args.node_pool.as_deref())
        });
        info!(configmap = %name, namespace = %args.usage_namespace, "usage-based fair share on");
        (
            UsageKeeper::new(settings),
            usage::Store::new(client.clone(), &args.usage_namespace, &name),
        )
    });
    let mut state = loop_state::LoopState::new(args.schedule_period, args.min_cycle_interval);
    let mut was_leader = false;
    let mut cycle_id: u64 = 0;
    let heartbeat = liveness.heartbeat("scheduling loop");

    loop {
        let wake = tokio::time::Instant::from_std(state.next_cycle(applier.binds_in_flight() > 0));
        tokio::select! {
            () = shutdown.cancelled() => break,
            result = &mut elector_task => {
                result?;
                anyhow::bail!("leader election stopped; exiting so a healthy replica takes over");
            }
            Some(event) = events.recv() => {
                // Only what a cycle reads makes one due (our own status echoes, a pod's kubelet
                // status details, do not).
                let before = cluster.epochs.changes;
                ingest.apply(&mut cluster, event);
                if cluster.epochs.changes != before {
                    state.changed(Instant::now());
                }
            }
            Some(fb) = feedback_rx.recv() => {
                loop_state::feedback(&mut cluster, fb, k8s_openapi::jiff::Timestamp::now().as_millisecond());
                state.changed(Instant::now());
            }
            () = tokio::time::sleep_until(wake) => {
                // Take in everything that arrived, then decide on a consistent model.
                while let Ok(event) = events.try_recv() {
                    ingest.apply(&mut cluster, event);
                }
                while let Ok(fb) = feedback_rx.try_recv() {
                    loop_state::feedback(&mut cluster, fb, k8s_openapi::jiff::Timestamp::now().as_millisecond());
                }
                let started = Instant::now();
                state.cycled(started);
                heartbeat.beat();
                if !ingest.synced(&kinds) {
                    continue;
                }
                caches_ready.set_ready();
                let leader = leadership.is_leader();
                if was_leader && !leader {
                    warn!("lost leadership; dropping assumed placements");
                    cluster.clear_all_assumed();
                }
                let gained = leader && !was_leader;
                was_leader = leader;
                if !leader {
                    continue;
                }
                if gained && let Some((keeper, store)) = &mut usage {
                    let loaded = store.load().await;
                    keeper.restore(loaded, &mut cluster, k8s_openapi::jiff::Timestamp::now().as_millisecond());
                }
                cycle_id += 1;
                let span = info_span!("cycle", id = cycle_id);
                let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
                let mut result = match span.in_scope(|| cycle::run_contained(&mut cluster, &config, now)) {
                    Ok(result) => result,
                    Err(crash) => {
                        // Contained: the cycle's decisions were never sent and its changes are undone.
                        cycle_metrics.crashed();
                        tracing::error!(
                            cycle = cycle_id,
                            podgroup = crash.group.as_ref().map(ToString::to_string),
                            panic = %crash.message,
                            "a scheduling cycle panicked; the gang it was working on is set aside and \
                             scheduling goes on; please report this with the scheduler's logs"
                        );
                        continue;
                    }
                };
                let elapsed = started.elapsed();
                state.took(elapsed);
                if result.stats.attempt_budget_exhausted {
                    tracing::error!("allocate stopped at its attempt budget; please report this with the scheduler's logs");
                }
                cycle_metrics.observe(&result, elapsed, &cluster);
                if let Some((keeper, store)) = &mut usage
                    && let Some(text) = keeper.after_cycle(&mut cluster, now, result.usage_sample.take())
                {
                    // Off the loop: a slow write must not delay cycles; the fence drops it if deposed.
                    let store = store.clone();
                    tokio::spawn(async move {
                        if let Err(e) = store.save(text).await {
                            warn!(error = %e, "usage record not stored; retried at the next interval");
                        }
                    });
                }
                async {
                    if !result.decisions.is_empty() {
                        info!(
                            binds = result.decisions.binds.len(),
                            evictions = result.decisions.evictions.len(),
                            statuses = result.decisions.group_statuses.len(),
                            took_ms = elapsed.as_secs_f64() * 1e3,
                            "cycle"
                        );
                    }
                }
                .instrument(span)
                .await;
                applier.submit(result.decisions);
            }
        }
    }
    info!("shutting down");
    let _ = elector_task.await;
    if let Some(server) = webhook_server {
        server.await??;
    }
    admin_server.await??;
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
