//! Process plumbing shared by the podgrouper and the scheduler, so neither duplicates it.
//!
//! Owns: common flags ([`args`]), tracing setup ([`telemetry`]), the Kubernetes client with its
//! rate limit and user agent ([`client`]), server discovery and eviction ([`discovery`]), the admin
//! server with `/livez`, `/readyz` and `/metrics` ([`admin`]) and the heartbeats `/livez` reads
//! ([`liveness`]), leader election ([`lease`]), signal handling ([`shutdown`]), the CRD start-up gate
//! ([`crd`]) and metric helpers ([`metrics`]).
//!
//! Must not: hold scheduling or grouping logic, or know any component's resources beyond what the
//! caller passes in.
//!
//! # Wiring a binary
//!
//! ```no_run
//! # use kai_runtime as runtime;
//! use clap::Parser;
//! use prometheus_client::registry::Registry;
//! use runtime::{admin, args::CommonArgs, client::{self, RateLimit}, crd, lease, liveness, shutdown, telemetry};
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     common: CommonArgs,
//! }
//!
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     let args = Args::parse();
//!     telemetry::init(&args.common.log_settings())?;
//!     let shutdown = shutdown::on_signals()?;
//!
//!     let user_agent = concat!("kai-scheduler/", env!("CARGO_PKG_VERSION"));
//!     let client = client::build(user_agent, args.common.rate_limit(RateLimit { qps: 50.0, burst: 100 })).await?;
//!     // Renewals get their own client so component traffic cannot hold them back.
//!     let lease_client = client::build(user_agent, RateLimit::UNLIMITED).await?;
//!
//!     // Register metrics and readiness gates before serving.
//!     let mut registry = Registry::with_prefix("kai_scheduler");
//!     let cycle_seconds = runtime::metrics::duration_histogram();
//!     registry.register("cycle_duration_seconds", "Scheduling cycle duration", cycle_seconds.clone());
//!     let readiness = admin::Readiness::new();
//!     let crds_ready = readiness.gate("crds");
//!     let period = std::time::Duration::from_secs(1);
//!     let liveness = liveness::Liveness::new(args.common.liveness_timeout(period)?);
//!     let admin_server = tokio::spawn(admin::serve(
//!         args.common.admin_address,
//!         admin::AdminState::new(readiness.clone(), liveness.clone(), registry),
//!         shutdown.clone().cancelled_owned(),
//!     ));
//!
//!     crd::wait_for_crds(&client, &["queues.scheduling.run.ai"], std::time::Duration::from_secs(60)).await?;
//!     crds_ready.set_ready();
//!
//!     let (elector, leadership) = lease::Elector::new(lease_client, args.common.leader_election("kai-scheduler")?);
//!     let mut elector_task = tokio::spawn(elector.run(shutdown.clone()));
//!     let guard = leadership.guard();
//!
//!     // Registered where the loop starts: the waits above do not count against it.
//!     let heartbeat = liveness.heartbeat("loop");
//!     let mut tick = tokio::time::interval(period);
//!     loop {
//!         tokio::select! {
//!             () = shutdown.cancelled() => break,
//!             // The elector only ends on shutdown; anything else means leadership can no longer be kept.
//!             _ = &mut elector_task => anyhow::bail!("leader election stopped"),
//!             _ = tick.tick() => {
//!                 heartbeat.beat();
//!                 if !leadership.is_leader() { continue; }
//!                 let _timer = runtime::metrics::Timer::start(cycle_seconds.clone());
//!                 // ... decide, then right before each write:
//!                 if guard.check().is_ok() { /* write */ }
//!             }
//!         }
//!     }
//!     elector_task.await?; // releases the lease
//!     admin_server.await??;
//!     Ok(())
//! }
//! ```

pub mod admin;
pub mod args;
pub mod client;
pub mod crd;
pub mod discovery;
pub mod fence;
pub mod lease;
pub mod liveness;
pub mod metrics;
pub mod shutdown;
pub mod telemetry;

#[cfg(test)]
mod test_support;
