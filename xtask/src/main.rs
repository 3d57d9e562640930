//! `cargo xtask`: the project's developer tasks.
//!
//! Owns: CRD generation (`crds`), the local Kubernetes control plane (`cluster`), fake nodes (`nodes`),
//! removing what e2e tests left behind (`e2e-clean`), Helm (`helm`), the end-to-end binding benchmark
//! (`bench`), the CI entry point (`ci`), the main job (`demo`), the soak test (`soak`), trace replays with
//! the core's debug checks on (`sim-check`), the profile-guided build of the CLI for long replays
//! (`sim-build`), structural rules (`tidy`: the decision core has no I/O dependency) and the chart's RBAC
//! against what the components did (`rbac-audit`). Talks to clusters through the e2e crate's library, so
//! the tests and the developer's cluster are set up by one piece of code. Must not: be needed by the
//! project's components at run time.

mod bench;
mod ci;
mod cluster;
mod crds;
mod demo;
mod helm;
mod nodes;
mod rbac_audit;
mod sim_build;
mod sim_check;
mod soak;
mod tidy;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    about = "Developer tasks of the KAI scheduler workspace"
)]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Write crds/ from the API types (--check: fail when crds/ is stale).
    Crds {
        /// Only check; exit non-zero naming stale files.
        #[arg(long)]
        check: bool,
    },
    /// The local Kubernetes v1.20.2 control plane (state in $KAI_DEV_HOME, default ~/.cache/kai-dev).
    Cluster {
        #[command(subcommand)]
        command: ClusterTask,
    },
    /// Fake nodes on the cluster (KUBECONFIG, else the local control plane).
    Nodes {
        #[command(subcommand)]
        command: NodesTask,
    },
    /// Delete namespaces and fake nodes that finished e2e tests left behind (e.g. with KAI_E2E_KEEP=1).
    E2eClean,
    /// Helm: fetch it, lint and render the chart, check the rendered manifests, install.
    Helm {
        #[command(subcommand)]
        command: helm::HelmTask,
    },
    /// Run every CI check: fmt, clippy, tidy, unit tests, crds --check, cluster up, e2e tests, rbac-audit.
    Ci,
    /// Structural rules: the decision core (kai-scheduler-core) depends on no I/O crate.
    Tidy,
    /// Binding throughput on the cluster: raw pods/binding, kube-scheduler, this scheduler (release).
    Bench(bench::BenchArgs),
    /// The main job: local cluster, the chart installed, both components running, and a walkthrough
    /// (gang vs kube-scheduler, room freed, preemption, GPU sharing). `demo down` stops the components.
    Demo {
        #[command(subcommand)]
        command: Option<DemoTask>,
    },
    /// Churn gangs for minutes at thousands of pods; fail when memory or cycle time grows (not in `ci`).
    Soak(soak::SoakArgs),
    /// Replay a slice of the Philly trace through a release build with every debug check of the core
    /// on; fail when one fires (not in `ci`).
    SimCheck(sim_check::SimCheckArgs),
    /// A profile-guided release build of the `kai` CLI, trained on a slice of the Philly trace, for
    /// long replays (the same decisions, faster; not in `ci`).
    SimBuild(sim_build::SimBuildArgs),
    /// Compare what the components did (the local API server's audit log) with what the chart grants
    /// them: fail on a granted verb nothing used, or on a refused request.
    RbacAudit {
        /// Only events received at or after this time (RFC 3339, e.g. 2026-11-23T22:00:00Z).
        #[arg(long)]
        since: Option<jiff::Timestamp>,
    },
}

#[derive(Debug, Subcommand)]
enum DemoTask {
    /// Stop the demo's components and remove its namespace and nodes (the cluster keeps running).
    Down,
}

#[derive(Debug, Subcommand)]
enum ClusterTask {
    /// Build (once) and start etcd, kube-apiserver and kube-controller-manager; install the project's CRDs.
    Up,
    /// Stop what `up` started.
    Down {
        /// Also remove the cluster state (etcd data, certificates, kubeconfig); cached binaries stay.
        #[arg(long)]
        purge: bool,
    },
    /// Show what runs, versions and the kubeconfig path.
    Status,
}

#[derive(Debug, Subcommand)]
enum NodesTask {
    /// Create fake nodes (Ready, with capacity, without the not-ready taint).
    Create(nodes::CreateArgs),
    /// Delete the fake nodes whose names start with the prefix.
    Delete {
        /// Name prefix.
        #[arg(long)]
        prefix: String,
    },
    /// Play the kubelet for the fake nodes of a prefix until Ctrl-C (bound pods become Running).
    Agent {
        /// Name prefix given to `nodes create`.
        #[arg(long)]
        prefix: String,
    },
}

fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Task::Crds { check: true } => crds::check(&e2e::paths::crds_dir()),
        Task::Crds { check: false } => crds::write(&e2e::paths::crds_dir()),
        Task::Cluster {
            command: ClusterTask::Up,
        } => cluster::up(),
        Task::Cluster {
            command: ClusterTask::Down { purge },
        } => cluster::down(purge),
        Task::Cluster {
            command: ClusterTask::Status,
        } => cluster::status(),
        Task::Nodes { command } => {
            let rt = async_runtime()?;
            match command {
                NodesTask::Create(args) => rt.block_on(nodes::create(&args)),
                NodesTask::Delete { prefix } => rt.block_on(nodes::delete(&prefix)),
                NodesTask::Agent { prefix } => rt.block_on(nodes::agent(&prefix)),
            }
        }
        Task::Helm { command } => helm::run(command),
        Task::E2eClean => async_runtime()?.block_on(async {
            let client = cluster::connect().await?;
            let (namespaces, nodes) = e2e::harness::clean_leftovers(&client).await?;
            println!("removed {namespaces} test namespaces and {nodes} orphaned fake nodes");
            Ok(())
        }),
        Task::Ci => ci::run(),
        Task::Tidy => tidy::run(),
        Task::Demo { command: None } => demo::up(),
        Task::Soak(args) => soak::run(&args),
        Task::SimCheck(args) => sim_check::run(&args),
        Task::SimBuild(args) => sim_build::run(&args),
        Task::Demo {
            command: Some(DemoTask::Down),
        } => demo::down(),
        Task::Bench(args) => bench::run(&args),
        Task::RbacAudit { since } => rbac_audit::run(since),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_valid() {
        super::Cli::command().debug_assert();
    }
}
