//! `cargo xtask sim-check`: replays a slice of a production trace through a release build that keeps
//! every debug check of the decision core on (the report's "a skipped group would have been skipped",
//! the job order's insertion against a scan, each class answer against a real attempt, ...).
//!
//! The unit and scenario tests run those checks on small generated workloads; a trace's backlogs of
//! thousands of gangs reach states they do not (the attempt budget of a pass that takes in a whole
//! class was found this way). Not part of `cargo xtask ci`: the build and a 20,000-job replay take
//! about ten minutes on 2 cores. Reads the trace from `../shared/traces/` or the path given.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail};

/// Where the checked build goes (its own target dir: the profile differs from `release`'s).
const TARGET_DIR: &str = "target/sim-check";

#[derive(Debug, clap::Args)]
pub(crate) struct SimCheckArgs {
    /// The Philly trace (`timestamp,duration,num_gpus,gpu_time,cluster`).
    #[arg(long, default_value = "../shared/traces/philly/philly_jobs.csv")]
    trace: PathBuf,
    /// Jobs replayed, in submit order from the first.
    #[arg(long, default_value_t = 20_000)]
    limit: usize,
    /// Policies side by side (as `kai sim philly --policies`; default: all five).
    #[arg(long)]
    policies: Option<String>,
}

/// Builds the CLI with debug assertions and replays the slice; fails when a check fires.
pub(crate) fn run(args: &SimCheckArgs) -> anyhow::Result<()> {
    let root = e2e::paths::workspace_root();
    let trace = if args.trace.is_absolute() {
        args.trace.clone()
    } else {
        root.join(&args.trace)
    };
    if !trace.is_file() {
        bail!(
            "no trace at {} (give one with --trace; see ../shared/traces/README.md)",
            trace.display()
        );
    }
    let status = Command::new(crate::ci::cargo())
        .args(["build", "--release", "-p", "kai-cli", "--target-dir", TARGET_DIR])
        .env("CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS", "true")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .current_dir(&root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("the checked build failed");
    }
    let limit = args.limit.to_string();
    let mut replay = Command::new(root.join(TARGET_DIR).join("release").join("kai"));
    replay
        .arg("sim")
        .arg("philly")
        .arg("--trace")
        .arg(&trace)
        .args(["--limit", &limit, "--no-progress"]);
    if let Some(policies) = &args.policies {
        replay.args(["--policies", policies]);
    }
    let status = replay
        .current_dir(&root)
        .status()
        .context("running the checked replay")?;
    if !status.success() {
        bail!("a debug check fired in the replay (its message is above)");
    }
    println!(
        "sim-check: the first {} jobs of {} replayed with every debug check on",
        args.limit,
        trace.display()
    );
    Ok(())
}
