//! `kai-podgrouper`: makes the PodGroup of every pod whose `schedulerName` is the scheduler's.
//!
//! Flags below; `/livez`, `/readyz` and `/metrics` on the admin address. Until the shared `runtime`
//! crate lands, the admin server, tracing and shutdown are set up here, minimally.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use clap::Parser;
use kai_podgrouper::controller::{self, Config};
use kai_podgrouper::grouping::Settings;
use kai_podgrouper::metrics::Metrics;
use prometheus_client::registry::Registry;

/// Makes the PodGroup every kai-scheduler pod belongs to, from the pod's owner chain.
#[derive(Debug, Parser)]
#[command(name = "kai-podgrouper", version, about)]
struct Args {
    /// Pods with this `spec.schedulerName` are grouped.
    #[arg(long, env = "KAI_SCHEDULER_NAME", default_value = api::keys::SCHEDULER_NAME)]
    scheduler_name: String,
    /// Label naming a workload's queue (on the top owner or the pod). `runai/queue` is also read.
    #[arg(long, env = "KAI_QUEUE_LABEL_KEY", default_value = api::keys::QUEUE_LABEL)]
    queue_label_key: String,
    /// Queue of workloads that name none.
    #[arg(long, env = "KAI_DEFAULT_QUEUE", default_value = api::keys::DEFAULT_QUEUE)]
    default_queue: String,
    /// Reconciles run at once.
    #[arg(long, env = "KAI_MAX_CONCURRENT_RECONCILES", default_value_t = 10)]
    max_concurrent_reconciles: u16,
    /// One gang per Knative revision (`min-scale` pods); `false` gives one group per pod.
    #[arg(long, env = "KAI_KNATIVE_GANG_SCHEDULE", default_value_t = true, action = clap::ArgAction::Set)]
    knative_gang_schedule: bool,
    /// Address of the admin server (`/livez`, `/readyz`, `/metrics`).
    #[arg(long, env = "KAI_ADMIN_ADDR", default_value = "0.0.0.0:8081")]
    admin_addr: SocketAddr,
    /// Group only the pods of this namespace (default: all namespaces).
    #[arg(long, env = "KAI_PODGROUPER_NAMESPACE")]
    namespace: Option<String>,
    /// Instance name on events (defaults to the pod name from `POD_NAME`, else the host name).
    #[arg(long, env = "POD_NAME", default_value = "kai-podgrouper")]
    instance: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args {
        scheduler_name,
        queue_label_key,
        default_queue,
        max_concurrent_reconciles,
        knative_gang_schedule,
        admin_addr,
        namespace,
        instance,
    } = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kai_podgrouper=info")),
        )
        .init();

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(admin_addr)
        .await
        .with_context(|| format!("binding {admin_addr}"))?;
    tokio::spawn(admin_server(listener, Arc::new(registry), Arc::clone(&ready)));

    let client = kube::Client::try_default()
        .await
        .context("building the Kubernetes client")?;
    let config = Config {
        scheduler_name,
        settings: Settings {
            queue_label_key,
            default_queue,
            knative_gang: knative_gang_schedule,
            field_manager: api::keys::FIELD_MANAGER_PODGROUPER.to_owned(),
        },
        concurrency: max_concurrent_reconciles.max(1),
        instance,
        namespace,
    };
    tracing::info!(scheduler = %config.scheduler_name, admin = %admin_addr, "kai-podgrouper starting");
    controller::run(client, config, metrics, ready, shutdown_signal()).await?;
    tracing::info!("kai-podgrouper stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}

async fn admin_server(listener: tokio::net::TcpListener, registry: Arc<Registry>, ready: Arc<AtomicBool>) {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.load(Ordering::Relaxed);
                async move {
                    if ready {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let registry = Arc::clone(&registry);
                async move {
                    let mut body = String::new();
                    match prometheus_client::encoding::text::encode(&mut body, &registry) {
                        Ok(()) => (
                            StatusCode::OK,
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            body,
                        ),
                        Err(_) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [(header::CONTENT_TYPE, "text/plain")],
                            String::new(),
                        ),
                    }
                }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "admin server stopped");
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_is_valid() {
        super::Args::command().debug_assert();
    }
}
