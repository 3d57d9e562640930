//! `kai sim`: replays a workload through the scheduler's decision core on a simulated clock and
//! reports the quality figures (`kai_sim` decides and measures; this is the I/O around it: files,
//! progress bar, output directory).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use scheduler_core::config::Config;
use serde::Serialize;
use sim::metrics::Summary;
use sim::replay::{self, Outcome, Policy};
use sim::workload::{Checked, Workload};
use sim::{philly, report};

pub mod openb;

/// What `kai sim` replays.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// The FGD paper's static experiment on Alibaba's openb trace: pods in a seeded random order until
    /// 1.3 x the GPU capacity has arrived, each offered once; allocation at 90/95/100/130 % arrived.
    Openb(openb::OpenbArgs),
    /// A workload in the native format (YAML or JSON: nodes, queues, jobs; see docs/quality.md).
    Replay {
        /// The workload file.
        file: PathBuf,
        /// Replay settings and outputs.
        #[command(flatten)]
        run: RunArgs,
    },
    /// The Philly trace (Microsoft, Pollux's 82,247-job subset): each virtual cluster a queue with a
    /// quota proportional to its GPU-time, 8-GPU nodes, the cluster sized for a target load.
    Philly {
        /// The trace (`timestamp,duration,num_gpus,gpu_time,cluster`).
        #[arg(long, default_value = "../shared/traces/philly/philly_jobs.csv")]
        trace: PathBuf,
        /// Offered load the cluster is sized for (GPU-time / (GPUs x span)), in (0, 1].
        #[arg(long, default_value_t = 0.8)]
        load: f64,
        /// Jobs (in submit order) skipped before the slice.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Most jobs in the slice (default: all).
        #[arg(long)]
        limit: Option<usize>,
        /// Replay settings and outputs.
        #[command(flatten)]
        run: RunArgs,
    },
}

/// Settings common to every replay.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Policies to run side by side (comma-separated): fifo-nogang, gang-isolated, gang-fair,
    /// gang-reclaim, gang-consolidate.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fifo-nogang,gang-isolated,gang-fair,gang-reclaim,gang-consolidate"
    )]
    pub policies: Vec<String>,
    /// Scheduling cycle period in simulated seconds (events are taken in at these ticks).
    #[arg(long, default_value_t = 10)]
    pub tick_seconds: u32,
    /// Directory for summary.csv, queues.csv, cycles.csv, summary.json and allocation.svg.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar (it is drawn on stderr only when stderr is a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Replay with the scheduler's backlog of waiting gangs off, every waiting gang in every cycle:
    /// the same decisions, far slower. A check of the backlog (`cargo xtask sim-check --backlog`).
    #[arg(long)]
    pub without_backlog: bool,
    /// How many policies replay at once (default: as many as the machine has cores; more than that
    /// only makes them take turns on the cores and share the caches).
    #[arg(long, value_name = "N")]
    pub threads: Option<std::num::NonZeroUsize>,
}

/// Everything a run produced, as JSON.
#[derive(Debug, Serialize)]
struct RunReport<'a, S: Serialize> {
    setup: S,
    summaries: &'a [Summary],
}

/// Runs `kai sim ...` and returns the text to print (tables, or JSON when `json`). `scheduler_config`
/// is the scheduler's configuration file (`--scheduler-config`) the replays start from.
///
/// # Errors
/// Unreadable or invalid inputs, unknown policies, a configuration the command cannot replay,
/// unwritable outputs.
pub fn run(command: SimCommand, scheduler_config: Option<&str>, json: bool) -> anyhow::Result<String> {
    match command {
        SimCommand::Openb(args) => {
            if let Some(path) = scheduler_config {
                bail!(
                    "--scheduler-config {path}: `kai sim openb` replays the FGD paper's setup, whose policies \
                     are whole configurations; the configuration file applies to `kai sim replay` and `kai sim philly`"
                );
            }
            openb::run(&args, json)
        }
        SimCommand::Replay { file, run: args } => {
            let base = base_config(scheduler_config)?;
            let workload = Workload::load(&file)?.check()?;
            let setup = serde_json::json!({
                "workload": file.display().to_string(),
                "nodes": workload.workload.nodes.iter().map(|n| n.count).sum::<u32>(),
                "gpus": workload.gpus,
                "jobs": workload.jobs.len(),
            });
            let title = format!("GPU allocation, {}", file.display());
            execute(&workload, &args, (base, scheduler_config), setup, &title, json)
        }
        SimCommand::Philly {
            trace,
            load,
            offset,
            limit,
            run: args,
        } => {
            let base = base_config(scheduler_config)?;
            let rows = philly::read(&trace)?;
            let (workload, setup) = philly::workload(
                &rows,
                &philly::Options {
                    target_load: load,
                    offset,
                    limit,
                },
            )?;
            let workload = workload.check().context("the Philly slice as a workload")?;
            let title = format!(
                "Philly, {} jobs, {} GPUs, load {:.2}",
                setup.jobs, setup.gpus, setup.offered_load
            );
            execute(&workload, &args, (base, scheduler_config), setup, &title, json)
        }
    }
}

/// A replay's setup and the configuration file it was replayed with, if any.
#[derive(Debug, Serialize)]
struct ReplaySetup<'a, S> {
    #[serde(flatten)]
    setup: S,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduler_config: Option<&'a str>,
}

/// The configuration the replays start from: the scheduler's defaults, or its configuration file. Each
/// policy then sets the actions, so the file's `actions` are not used; usage-based fair share needs the
/// usage record the scheduler keeps, which a replay does not, so a file with `usageDBConfig` is refused
/// rather than replayed without it.
fn base_config(path: Option<&str>) -> anyhow::Result<Config> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    let config = Config::load(path).with_context(|| format!("--scheduler-config {path}"))?;
    if config.usage_db.is_some() {
        bail!(
            "--scheduler-config {path}: usageDBConfig (usage-based fair share) is not replayed: a replay keeps \
             no usage record; remove it from a copy of the file to replay the rest"
        );
    }
    Ok(config)
}

/// Replays `workload` under the policies of `args`, each starting from `config` (the configuration and
/// the file it came from, which the setup names).
fn execute<S: Serialize>(
    workload: &Checked,
    args: &RunArgs,
    config: (Config, Option<&str>),
    setup: S,
    title: &str,
    json: bool,
) -> anyhow::Result<String> {
    let (base, scheduler_config) = config;
    let setup = ReplaySetup {
        setup,
        scheduler_config,
    };
    let policies = args
        .policies
        .iter()
        .map(|name| {
            Policy::from_name(name.trim()).with_context(|| {
                let known: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown policy {name:?}; known: {}", known.join(", "))
            })
        })
        .collect::<anyhow::Result<Vec<Policy>>>()?;
    if policies.is_empty() {
        bail!("no policy to run");
    }
    let options = replay::Options {
        tick: i64::from(args.tick_seconds.max(1)) * 1000,
        config: base,
        without_backlog: args.without_backlog,
        threads: args.threads,
        ..replay::Options::default()
    };
    let counters: Vec<AtomicUsize> = policies.iter().map(|_| AtomicUsize::new(0)).collect();
    let total = workload.jobs.len() * 2 * policies.len();
    let show = !args.no_progress && std::io::stderr().is_terminal();
    let done = AtomicBool::new(false);
    let outcomes = std::thread::scope(|scope| {
        if show {
            scope.spawn(|| progress(&counters, total, &done));
        }
        let outcomes = replay::replay_all(workload, &policies, &options, &counters);
        done.store(true, Ordering::Relaxed);
        outcomes
    });
    let summaries: Vec<Summary> = outcomes.iter().map(|o| replay::summarize(workload, o)).collect();
    let stopped: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.stopped_early)
        .map(|o| o.policy.name())
        .collect();
    if !stopped.is_empty() {
        eprintln!(
            "warning: stopped at {} cycles without finishing: {}",
            options.max_cycles,
            stopped.join(", ")
        );
    }
    let report = RunReport {
        setup,
        summaries: &summaries,
    };
    if let Some(dir) = &args.out {
        write_outputs(dir, &report, &outcomes, workload.gpus, title)?;
    }
    if json {
        let mut s = serde_json::to_string_pretty(&report).context("encoding JSON")?;
        s.push('\n');
        Ok(s)
    } else {
        let setup = serde_json::to_string(&report.setup).context("encoding the setup")?;
        Ok(format!(
            "{title}\nsetup: {setup}\n\n{}",
            report::render(&summaries)
        ))
    }
}

fn write_outputs<S: Serialize>(
    dir: &Path,
    report: &RunReport<'_, S>,
    outcomes: &[Outcome],
    gpus: i64,
    title: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = |name: &str| -> anyhow::Result<std::fs::File> {
        let path = dir.join(name);
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))
    };
    report::summary_csv(report.summaries, file("summary.csv")?)?;
    report::queues_csv(report.summaries, file("queues.csv")?)?;
    report::cycles_csv(report.summaries, file("cycles.csv")?)?;
    let mut json = serde_json::to_string_pretty(report).context("encoding JSON")?;
    json.push('\n');
    file("summary.json")?
        .write_all(json.as_bytes())
        .context("writing summary.json")?;
    report::allocation_chart(outcomes, gpus, 400, title).write_svg(&dir.join("allocation.svg"), 960, 480)?;
    Ok(())
}

/// A progress bar on stderr until `done`.
fn progress(counters: &[AtomicUsize], total: usize, done: &AtomicBool) {
    let mut stderr = std::io::stderr();
    loop {
        let finished = done.load(Ordering::Relaxed);
        let n: usize = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let fraction = if total == 0 {
            1.0
        } else {
            (n as f64 / total as f64).min(1.0)
        };
        let filled = (fraction * 40.0) as usize;
        let _ = write!(
            stderr,
            "\r[{}{}] {:5.1}% events {n}/{total}",
            "#".repeat(filled),
            ".".repeat(40 - filled),
            fraction * 100.0
        );
        let _ = stderr.flush();
        if finished {
            let _ = writeln!(stderr);
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
