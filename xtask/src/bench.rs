//! `cargo xtask bench`: the end-to-end binding benchmark (`e2e::bench`) on the cluster the tests use.
//!
//! Builds the scheduler in release mode, then measures the raw `pods/binding` rate, kube-scheduler
//! v1.20.2 and this scheduler in one run and prints a Markdown table. Must not: tear the cluster down.

use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// Options of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Pods per workload (A: 1-pod groups, B: gangs of 8; rounded down to a multiple of 8).
    #[arg(long, default_value_t = 3000)]
    pods: usize,
    /// Fake nodes per run (8 GPUs each).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Binds in flight tried for the raw reference, comma-separated (the best rate is the reference).
    #[arg(long, value_delimiter = ',', default_value = "32,64")]
    raw_concurrency: Vec<usize>,
    /// Leave kube-scheduler out.
    #[arg(long)]
    no_kube_scheduler: bool,
    /// Use target/release/kai-scheduler as it is (no `cargo build --release`).
    #[arg(long)]
    no_build: bool,
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let pods = args.pods - args.pods % 8;
    if pods == 0 || args.nodes == 0 || args.raw_concurrency.is_empty() {
        bail!("--pods must be at least 8, --nodes and --raw-concurrency non-empty");
    }
    if !args.no_build {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "-p",
                "kai-scheduler",
                "--bin",
                "kai-scheduler",
            ])
            .current_dir(e2e::paths::workspace_root())
            .stdin(Stdio::null())
            .status()
            .context("running cargo build --release")?;
        if !status.success() {
            bail!("cargo build --release -p kai-scheduler failed ({status})");
        }
    }
    let scheduler = e2e::paths::target_dir().join("release").join("kai-scheduler");
    if !scheduler.exists() {
        bail!("{} is missing: drop --no-build", scheduler.display());
    }
    let kube_scheduler = if args.no_kube_scheduler {
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
    let options = e2e::bench::Options {
        pods,
        nodes: args.nodes,
        raw_concurrency: args.raw_concurrency.clone(),
        scheduler,
        kube_scheduler,
    };
    let (results, failures) = crate::async_runtime()?.block_on(e2e::bench::run(&options));
    println!(
        "\n{pods} pods on {} nodes x 8 GPUs; {} cores on this machine\n",
        args.nodes,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    print!("{}", e2e::bench::table(&results));
    for failure in &failures {
        println!("failed: {failure}");
    }
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("{} of the runs failed", failures.len())
    }
}
