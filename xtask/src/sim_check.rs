//! `cargo xtask sim-check`: replays a slice of a production trace through a release build that keeps
//! every debug check of the decision core on (the report's "a skipped group would have been skipped",
//! the job order's insertion against a scan, each class answer against a real attempt, ...).
//!
//! The unit and scenario tests run those checks on small generated workloads; a trace's backlogs of
//! thousands of gangs reach states they do not (the attempt budget of a pass that takes in a whole
//! class was found this way). Not part of `cargo xtask ci`: the build and a 20,000-job replay take
//! about ten minutes on 2 cores. Reads the trace from `../shared/traces/` or the path given.
//!
//! With `--backlog` it replays the slice a second time with the backlog of waiting gangs off
//! (`kai sim --without-backlog`) and fails unless both print the same tables: the backlog may change
//! when statuses are written, never a placement. Without the backlog reclaim is far slower (445 s
//! against 13 s for the first 20,000 jobs under `gang-reclaim`), so give a smaller `--limit` or one
//! `--policies`.

use std::path::{Path, PathBuf};
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
    /// Also replay without the backlog and compare the tables (see the module's doc).
    #[arg(long)]
    backlog: bool,
}

/// The columns of `summary.csv` from the first that a run without the backlog may differ in: the
/// writes decided (when a status is written) and the run time.
const WRITES_COLUMN: &str = "status_writes";

/// Builds the CLI with debug assertions and replays the slice; fails when a check fires.
pub(crate) fn run(args: &SimCheckArgs) -> anyhow::Result<()> {
    let root = e2e::paths::workspace_root();
    let trace = trace_path(&root, &args.trace)?;
    let status = Command::new(crate::ci::cargo())
        .args(["build", "--release", "-p", "kai-cli", "--target-dir", TARGET_DIR])
        .env("CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS", "true")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        // The checks need debug assertions, not whole-program optimisation, which lengthens the build.
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .current_dir(&root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("the checked build failed");
    }
    let limit = args.limit.to_string();
    let replay = |out: &Path, without_backlog: bool| -> anyhow::Result<()> {
        let mut replay = Command::new(root.join(TARGET_DIR).join("release").join("kai"));
        replay
            .arg("sim")
            .arg("philly")
            .arg("--trace")
            .arg(&trace)
            .args(["--limit", &limit, "--no-progress", "--out"])
            .arg(out);
        if let Some(policies) = &args.policies {
            replay.args(["--policies", policies]);
        }
        if without_backlog {
            replay.arg("--without-backlog");
        }
        let status = replay
            .current_dir(&root)
            .status()
            .context("running the checked replay")?;
        if !status.success() {
            bail!("a debug check fired in the replay (its message is above)");
        }
        Ok(())
    };
    let with = root.join(TARGET_DIR).join("with-backlog");
    replay(&with, false)?;
    println!(
        "sim-check: the first {} jobs of {} replayed with every debug check on",
        args.limit,
        trace.display()
    );
    if args.backlog {
        let without = root.join(TARGET_DIR).join("without-backlog");
        replay(&without, true)?;
        compare_tables(&with, &without)?;
        println!(
            "sim-check: the same tables without the backlog ({} and {})",
            with.display(),
            without.display()
        );
    }
    Ok(())
}

/// The trace given on the command line, relative to the workspace root unless absolute; an error
/// naming where to find one when it is not there.
pub(crate) fn trace_path(root: &Path, given: &Path) -> anyhow::Result<PathBuf> {
    let trace = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    if !trace.is_file() {
        bail!(
            "no trace at {} (give one with --trace; see ../shared/traces/README.md)",
            trace.display()
        );
    }
    Ok(trace)
}

/// Fails unless the two runs' `queues.csv` are the same and their `summary.csv` the same up to
/// [`WRITES_COLUMN`].
fn compare_tables(with: &Path, without: &Path) -> anyhow::Result<()> {
    let read = |dir: &Path, file: &str| {
        let path = dir.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let (a, b) = (read(with, "queues.csv")?, read(without, "queues.csv")?);
    if a != b {
        bail!(
            "queues.csv differs with and without the backlog:\n{}",
            first_difference(&a, &b)
        );
    }
    let (a, b) = (read(with, "summary.csv")?, read(without, "summary.csv")?);
    let header = a.lines().next().context("summary.csv is empty")?;
    let kept = header
        .split(',')
        .position(|c| c == WRITES_COLUMN)
        .with_context(|| format!("summary.csv has no {WRITES_COLUMN} column"))?;
    let decisions = |text: &str| -> String {
        text.lines()
            .map(|l| l.split(',').take(kept).collect::<Vec<_>>().join(","))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (a, b) = (decisions(&a), decisions(&b));
    if a != b {
        bail!(
            "summary.csv differs with and without the backlog:\n{}",
            first_difference(&a, &b)
        );
    }
    Ok(())
}

/// The first line where two texts differ, both versions.
fn first_difference(a: &str, b: &str) -> String {
    a.lines().zip(b.lines()).find(|(x, y)| x != y).map_or_else(
        || "(one has more lines)".to_owned(),
        |(x, y)| format!("with:    {x}\nwithout: {y}"),
    )
}
