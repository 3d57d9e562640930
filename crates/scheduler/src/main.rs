//! `kai-scheduler`: the scheduling loop. Watches the cluster into the model, runs a cycle whenever
//! something changed (at most every `--min-cycle-interval`, at least every `--schedule-period`), and
//! hands the decisions to the applier. Only the leader schedules; followers keep a warm model. Every
//! wake of the loop, leader or not, beats the heartbeat `/livez` reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kai_scheduler::apply::{Applier, ApplierOptions, ApplyMetrics};
use kai_scheduler::cache::ingest::{Ingest, Partition};
use kai_scheduler::cache::watch::{self, Offered};
use kai_scheduler::loop_state;
use kai_scheduler::metrics::{self, CycleMetrics};
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
    info!(actions = ?config.actions, "configuration loaded");
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
    let registry = metrics::registry(&cycle_metrics, &apply_metrics);
    let readiness = admin::Readiness::new();
    let crds_ready = readiness.gate("crds");
    let caches_ready = readiness.gate("caches");
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

    let (mut events, kinds) = watch::start(&client, offered, 8192, &liveness);
    let partition = Partition {
        key: args.node_pool_label.clone(),
        value: args.node_pool.clone(),
    };
    let mut ingest = Ingest::new(&args.scheduler_name, &args.default_queue, partition);
    let mut cluster = Cluster::default();
    if args.node_pool.is_some() {
        cluster.queue_reports = scheduler_core::model::QueueReports::UsedByPool;
    }
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
                was_leader = leader;
                if !leader {
                    continue;
                }
                cycle_id += 1;
                let span = info_span!("cycle", id = cycle_id);
                let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
                let result = match span.in_scope(|| cycle::run_contained(&mut cluster, &config, now)) {
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
