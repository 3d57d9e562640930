//! `kai sim openb`: the FGD paper's static experiment on Alibaba's openb trace, through the scheduler's
//! own decision core (`kai_sim::fgd`). This module is its I/O edge: it reads the traces, runs the replays
//! on a few threads with a progress line on stderr, and writes the tables, CSV, JSON and SVG charts.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use sim::fgd::{self, Policy, RunResult};
use sim::openb;

/// `kai sim openb`.
#[derive(Debug, ClapArgs)]
pub struct OpenbArgs {
    /// Directory of the openb CSVs.
    #[arg(long, default_value = "../shared/traces/openb")]
    pub traces: PathBuf,
    /// Pod lists to replay (file stems in the trace directory).
    #[arg(long, value_delimiter = ',', default_value = "openb_pod_list_default")]
    pub workloads: Vec<String>,
    /// Placement policies: random, bestfit, binpack, spread, fragmentation, fragmentation-consolidate
    /// (fragmentation, and consolidation moves before a pod is refused).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "random,bestfit,binpack,fragmentation"
    )]
    pub policies: Vec<String>,
    /// Seeds: a list (`42,43`) or a range (`42-51`).
    #[arg(long, default_value = "42-51")]
    pub seeds: String,
    /// Arrived GPU request at which the workload ends, as a multiple of capacity.
    #[arg(long, default_value_t = 1.3)]
    pub ratio: f64,
    /// Keep only the first N pods of each pod list (a smaller workload for a quick look).
    #[arg(long)]
    pub pods: Option<usize>,
    /// Directory for the CSV, JSON and SVG files (not written when absent).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replays run at once.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// What the core knows of the request shapes at the start: `observed` (counted as pods arrive, as
    /// on a live cluster) or `known` (the list's shapes counted once up front, as the paper's simulator
    /// gives FGD its typical pods).
    #[arg(long, default_value = "observed", value_parser = parse_mix)]
    pub mix: fgd::Mix,
}

fn parse_mix(text: &str) -> Result<fgd::Mix, String> {
    fgd::Mix::parse(text.trim()).ok_or_else(|| format!("unknown mix {text:?} (known: observed, known)"))
}

fn parse_seeds(text: &str) -> anyhow::Result<Vec<u64>> {
    let mut seeds = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (u64, u64) = (a.trim().parse()?, b.trim().parse()?);
            if b < a || b - a > 10_000 {
                bail!("seed range {part} is empty or too long");
            }
            seeds.extend(a..=b);
        } else {
            seeds.push(part.parse().with_context(|| format!("seed {part:?}"))?);
        }
    }
    if seeds.is_empty() {
        bail!("no seed given");
    }
    Ok(seeds)
}

/// Runs `kai sim openb` and returns the text to print (tables, or JSON when `json`).
///
/// # Errors
/// Unreadable traces, unknown policies, files that cannot be written.
pub fn run(args: &OpenbArgs, json: bool) -> anyhow::Result<String> {
    let policies: Vec<Policy> = args
        .policies
        .iter()
        .map(|p| {
            Policy::parse(p.trim()).with_context(|| {
                format!(
                    "unknown policy {p:?} (known: {})",
                    Policy::ALL.map(Policy::name).join(", ")
                )
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let seeds = parse_seeds(&args.seeds)?;
    let mix = args.mix;
    if !(args.ratio > 0.0 && args.ratio <= 10.0) {
        bail!("--ratio must be in (0, 10]");
    }
    let nodes = openb::read_file(
        &args.traces.join("openb_node_list_gpu_node.csv"),
        openb::read_nodes,
    )?;
    let capacity = fgd::capacity_milli(&nodes);
    let mut workloads = Vec::new();
    for w in &args.workloads {
        let mut pods = openb::read_file(&args.traces.join(format!("{w}.csv")), openb::read_pods)?;
        if let Some(n) = args.pods {
            pods.truncate(n);
        }
        let typical = fgd::Typical::of(&pods);
        workloads.push((w.clone(), pods, typical));
    }
    let published = openb::read_file(&args.traces.join("published_fgd_atc23_summary.csv"), |f| {
        fgd::read_published(f)
    })
    .unwrap_or_default();
    // Every (workload, policy, seed), run on `jobs` threads.
    let mut jobs: Vec<(usize, Policy, u64)> = Vec::new();
    for w in 0..workloads.len() {
        for p in &policies {
            for s in &seeds {
                jobs.push((w, *p, *s));
            }
        }
    }
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, anyhow::Result<RunResult>)>> = Mutex::new(Vec::new());
    let progress = Progress::new(jobs.len());
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.clamp(1, 64) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(w, policy, seed)) = jobs.get(i) else {
                        break;
                    };
                    let (name, pods, typical) = &workloads[w];
                    let order = fgd::arrival_order(pods, capacity, args.ratio, seed);
                    let nodes = fgd::node_order(&nodes, seed);
                    let result = fgd::replay(
                        &nodes,
                        pods,
                        &order,
                        &policy.config(seed),
                        mix,
                        typical,
                        &mut |n| {
                            progress.pods(n, order.len());
                        },
                    )
                    .map(|r| RunResult::of(name, policy, seed, &r))
                    .with_context(|| format!("{name} {} seed {seed}", policy.name()));
                    let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                    progress.run_done(finished, name, policy.name(), seed);
                    if let Ok(mut r) = results.lock() {
                        r.push((i, result));
                    }
                }
            });
        }
    });
    progress.finish();
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|(i, _)| *i);
    let runs: Vec<RunResult> = results
        .into_iter()
        .map(|(_, r)| r)
        .collect::<anyhow::Result<_>>()?;
    let rows = fgd::summarize(&runs, &published);
    if let Some(out) = &args.out {
        write_outputs(
            out,
            &runs,
            &rows,
            &workloads.iter().map(|w| w.0.clone()).collect::<Vec<_>>(),
        )?;
    }
    if json {
        let mut s = serde_json::to_string_pretty(&rows).context("encoding JSON")?;
        s.push('\n');
        return Ok(s);
    }
    // The mix changes what `fragmentation` weighs; say which one these figures had.
    let mut text = format!("mix of request shapes: {} (--mix)\n", mix.name());
    text.push_str(&fgd::render_table(&rows));
    if let Some(out) = &args.out {
        text.push_str(&format!("\nwritten to {}\n", out.display()));
    }
    Ok(text)
}

fn write_outputs(
    out: &Path,
    runs: &[RunResult],
    rows: &[fgd::SummaryRow],
    workloads: &[String],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("openb_runs.csv", &fgd::runs_csv(runs))?;
    write("openb_summary.csv", &fgd::summary_csv(rows))?;
    let json = serde_json::to_string_pretty(&serde_json::json!({ "summary": rows, "runs": runs }))
        .context("encoding JSON")?;
    write("openb.json", &json)?;
    for w in workloads {
        let path = out.join(format!("{w}_alloc.svg"));
        fgd::chart(w, runs)
            .write_svg(&path, 900, 560)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    Ok(())
}

/// A progress line on stderr: redrawn in place on a terminal, a line per finished run otherwise.
struct Progress {
    total: usize,
    tty: bool,
    last: Mutex<(usize, usize, usize)>,
}

impl Progress {
    fn new(total: usize) -> Self {
        Self {
            total,
            tty: std::io::stderr().is_terminal(),
            last: Mutex::new((0, 0, 0)),
        }
    }

    fn draw(&self, runs: usize, pods: usize, of: usize) {
        if !self.tty {
            return;
        }
        let width = 30;
        let filled = (runs * width).checked_div(self.total).unwrap_or(width);
        let bar: String = "#".repeat(filled) + &"-".repeat(width - filled.min(width));
        let _ = write!(
            std::io::stderr().lock(),
            "\r[{bar}] {runs}/{} replays, current {pods}/{of} pods   ",
            self.total
        );
    }

    fn pods(&self, pods: usize, of: usize) {
        if let Ok(mut last) = self.last.lock() {
            last.1 = pods;
            last.2 = of;
            self.draw(last.0, pods, of);
        }
    }

    fn run_done(&self, finished: usize, workload: &str, policy: &str, seed: u64) {
        if let Ok(mut last) = self.last.lock() {
            last.0 = finished;
            if self.tty {
                self.draw(finished, last.1, last.2);
            } else {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[{finished}/{}] {workload} {policy} seed {seed}",
                    self.total
                );
            }
        }
    }

    fn finish(&self) {
        if self.tty {
            let _ = writeln!(std::io::stderr().lock());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_lists_or_ranges() {
        assert_eq!(parse_seeds("42-45").expect("range"), vec![42, 43, 44, 45]);
        assert_eq!(parse_seeds("1,5-6").expect("mixed"), vec![1, 5, 6]);
        assert!(parse_seeds("5-1").is_err());
        assert!(parse_seeds("").is_err());
        assert!(parse_seeds("x").is_err());
    }
}
