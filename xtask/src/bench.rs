//! `cargo xtask bench`: the end-to-end binding benchmarks (`e2e::bench`) on the cluster the tests use.
//!
//! Builds the binaries in release mode, then measures in one run and prints Markdown tables:
//! - `--mode pre-created` (default): PodGroups and pods made before anyone binds; the raw `pods/binding`
//!   rate, kube-scheduler v1.20.2 and this scheduler;
//! - `--mode pipeline`: workloads as users write them (plain pods, Deployments, Jobs of 8 with the gang
//!   annotation), the podgrouper and the scheduler as the chart runs them, kube-scheduler on the plain
//!   pods, the raw rate, and the API writes per bound pod from the audit log; `--backlog N` runs each
//!   beside N waiting pods that never fit;
//! - `--mode memory`: the scheduler alone on a generated cluster (default 5,000 nodes, 50,000 pods in
//!   gangs of 8) served by a fake API server, its resident memory at each step (no local cluster needed).
//!
//! Must not: tear the cluster down.

use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// Which benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// PodGroups and pods made in advance; the scheduler alone.
    PreCreated,
    /// No PodGroups: the podgrouper and the scheduler as the chart runs them, end to end.
    Pipeline,
    /// The scheduler's peak memory on a generated cluster served by a fake API server.
    Memory,
    /// The API server's CPU per write of each kind the pipeline makes (pod, PodGroup, status, binding,
    /// event), against the local control plane with nothing else of the run's running.
    WriteCost,
}

/// Options of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Which benchmark.
    #[arg(long, value_enum, default_value_t = Mode::PreCreated)]
    mode: Mode,
    /// Pods per workload (pre-created: A 1-pod groups, B gangs of 8; pipeline: each workload; memory:
    /// pending pods in gangs of 8; write-cost: writes of each kind; rounded down to a multiple of 8).
    /// [default: 3,000; memory: 50,000; write-cost: 2,000]
    #[arg(long)]
    pods: Option<usize>,
    /// Fake nodes per run (8 GPUs each). [default: 100; memory: 5,000]
    #[arg(long)]
    nodes: Option<usize>,
    /// Binds in flight tried for the raw reference, comma-separated (the best rate is the reference).
    #[arg(long, value_delimiter = ',', default_value = "32,64")]
    raw_concurrency: Vec<usize>,
    /// Writes in flight (write-cost).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Pipeline workloads to run for kai, comma-separated: plain, deployments, jobs.
    #[arg(long, value_delimiter = ',', default_value = "plain,deployments,jobs")]
    workloads: Vec<String>,
    /// Pipeline: bare pods that never fit, made and reported unschedulable before each run's clock starts
    /// (what a standing backlog of waiting gangs costs; its writes are counted apart).
    #[arg(long, default_value_t = 0)]
    backlog: usize,
    /// Leave kube-scheduler out.
    #[arg(long)]
    no_kube_scheduler: bool,
    /// Use the release binaries in the target directory as they are (no `cargo build --release`).
    #[arg(long)]
    no_build: bool,
    /// Take the binaries from this directory instead (implies --no-build): to compare builds back to back.
    #[arg(long)]
    bin_dir: Option<std::path::PathBuf>,
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let (default_pods, default_nodes) = match args.mode {
        Mode::Memory => (50_000, 5_000),
        Mode::WriteCost => (2_000, 1),
        Mode::PreCreated | Mode::Pipeline => (3_000, 100),
    };
    let pods = args.pods.unwrap_or(default_pods);
    let pods = pods - pods % 8;
    let nodes = args.nodes.unwrap_or(default_nodes);
    if pods == 0 || nodes == 0 || args.raw_concurrency.is_empty() {
        bail!("--pods must be at least 8, --nodes and --raw-concurrency non-empty");
    }
    let release = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| e2e::paths::target_dir().join("release"));
    let bins: &[&str] = match args.mode {
        Mode::PreCreated | Mode::Memory => &["kai-scheduler"],
        // Writes alone: no component runs.
        Mode::WriteCost => &[],
        Mode::Pipeline => &["kai-scheduler", "kai-podgrouper"],
    };
    if !bins.is_empty() && !args.no_build && args.bin_dir.is_none() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command.args(["build", "--release"]);
        for bin in bins {
            command.args(["--bin", bin]);
        }
        let status = command
            .current_dir(e2e::paths::workspace_root())
            .stdin(Stdio::null())
            .status()
            .context("running cargo build --release")?;
        if !status.success() {
            bail!("cargo build --release of {bins:?} failed ({status})");
        }
    }
    for bin in bins {
        let path = release.join(bin);
        if !path.exists() {
            bail!("{} is missing: drop --no-build", path.display());
        }
    }
    // The memory mode runs no cluster, and the write-cost mode no scheduler: no kube-scheduler either.
    let kube_scheduler = if args.no_kube_scheduler || matches!(args.mode, Mode::Memory | Mode::WriteCost) {
        None
    } else {
        let path = e2e::DevPaths::from_env().k8s_bin("kube-scheduler");
        if !path.exists() {
            bail!(
                "{} is missing: run `cargo xtask cluster up` (or pass --no-kube-scheduler)",
                path.display()
            );
        }
        Some(path)
    };
    let header = format!(
        "\n{pods} pods per workload on {nodes} nodes x 8 GPUs; {} cores on this machine; load average before: {}\n",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    let failures = match args.mode {
        Mode::Memory => return memory(&release.join("kai-scheduler"), nodes, pods),
        Mode::WriteCost => return write_cost(pods, args.concurrency),
        Mode::PreCreated => {
            let options = e2e::bench::Options {
                pods,
                nodes,
                raw_concurrency: args.raw_concurrency.clone(),
                scheduler: release.join("kai-scheduler"),
                kube_scheduler,
            };
            let (results, failures) = crate::async_runtime()?.block_on(e2e::bench::run(&options));
            println!("{header}");
            print!("{}", e2e::bench::table(&results));
            failures
        }
        Mode::Pipeline => {
            let workloads = args
                .workloads
                .iter()
                .map(|w| e2e::bench::pipeline::Workload::parse(w))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let options = e2e::bench::pipeline::Options {
                pods,
                nodes,
                raw_concurrency: args.raw_concurrency.clone(),
                scheduler: release.join("kai-scheduler"),
                podgrouper: release.join("kai-podgrouper"),
                kube_scheduler,
                workloads,
                backlog: args.backlog,
            };
            let (results, failures) = crate::async_runtime()?.block_on(e2e::bench::pipeline::run(&options));
            println!("{header}");
            print!("{}", e2e::bench::pipeline::table(&results));
            failures
        }
    };
    println!("\nload average after: {}", load_average());
    for failure in &failures {
        println!("failed: {failure}");
    }
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("{} of the runs failed", failures.len())
    }
}

/// `--mode memory`: no cluster, a fake API server in this process.
fn memory(scheduler: &std::path::Path, nodes: usize, pods: usize) -> anyhow::Result<()> {
    let load_before = load_average();
    let options = e2e::bench::memory::Options {
        nodes,
        pods,
        scheduler: scheduler.to_path_buf(),
        timeout: std::time::Duration::from_secs(30 * 60),
    };
    let report = crate::async_runtime()?.block_on(e2e::bench::memory::run(&options))?;
    println!(
        "\n{} cores on this machine; load average before: {load_before}, after: {}\n",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    print!("{}", e2e::bench::memory::table(&report));
    Ok(())
}

/// `--mode write-cost`: no component runs, only writes against the local control plane.
fn write_cost(writes: usize, concurrency: usize) -> anyhow::Result<()> {
    let load_before = load_average();
    let options = e2e::bench::write_cost::Options { writes, concurrency };
    let costs = crate::async_runtime()?.block_on(e2e::bench::write_cost::run(&options))?;
    println!(
        "\n{} cores on this machine; load average before: {load_before}, after: {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    print!("{}", e2e::bench::write_cost::table(&costs, &options));
    Ok(())
}

/// `/proc/loadavg`'s first three figures (the machine is shared; figures taken under load are noisy).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".to_owned())
}
