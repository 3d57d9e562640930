//! `cargo xtask ci`: everything CI checks, in order, with a summary of the time each step took.
//!
//! Formatting, clippy, structural rules (`tidy`), unit and doc tests, CRD freshness, `helm lint` and the rendered chart's
//! freshness, the local control plane (built and started when missing), the binaries, the e2e tier
//! against it, the docs walkthroughs (`e2e/tests/docs.rs`, alone), the main job (`cargo xtask demo`,
//! stopped again afterwards), then `cargo xtask rbac-audit` over what the components did since CI
//! started (every permission the chart grants them used, none refused). The cluster is left running.

use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

enum Step {
    Cargo(&'static [&'static str]),
    CrdsCheck,
    HelmCheck,
    ClusterUp,
    Demo,
    Tidy,
    RbacAudit,
}

const STEPS: [(&str, Step); 12] = [
    (
        "cargo fmt --check",
        Step::Cargo(&["fmt", "--all", "--", "--check"]),
    ),
    (
        "cargo clippy",
        Step::Cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]),
    ),
    ("cargo xtask tidy", Step::Tidy),
    (
        "unit and doc tests",
        Step::Cargo(&["test", "--workspace", "--exclude", "e2e", "--locked"]),
    ),
    ("cargo xtask crds --check", Step::CrdsCheck),
    ("helm lint and chart freshness", Step::HelmCheck),
    ("cargo xtask cluster up", Step::ClusterUp),
    // The e2e tier runs the components as local processes.
    (
        "build the binaries",
        Step::Cargo(&["build", "--workspace", "--bins", "--locked"]),
    ),
    ("e2e tests", Step::Cargo(&["test", "-p", "e2e", "--locked"])),
    // Alone, after the e2e tier: the walkthroughs' scheduler and podgrouper serve the whole cluster.
    (
        "docs walkthroughs",
        Step::Cargo(&[
            "test",
            "-p",
            "e2e",
            "--test",
            "docs",
            "--",
            "--ignored",
            "--test-threads=1",
        ]),
    ),
    // After the e2e tier: the demo's scheduler and podgrouper serve the whole cluster.
    ("the main job (cargo xtask demo)", Step::Demo),
    // After everything that runs the components with the chart's ServiceAccounts.
    ("unused permissions (rbac-audit)", Step::RbacAudit),
];

pub(crate) fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"))
}

fn run_step(step: &Step, started: jiff::Timestamp) -> anyhow::Result<()> {
    match step {
        Step::Cargo(args) => {
            // One-shot builds gain nothing from incremental state, which would double the target dir.
            let status = Command::new(cargo())
                .args(*args)
                .env("CARGO_INCREMENTAL", "0")
                .current_dir(e2e::paths::workspace_root())
                .status()?;
            if !status.success() {
                bail!("cargo {} failed ({status})", args.join(" "));
            }
            Ok(())
        }
        Step::CrdsCheck => crate::crds::check(&e2e::paths::crds_dir()),
        Step::HelmCheck => crate::helm::run(crate::helm::HelmTask::Check),
        Step::ClusterUp => crate::cluster::up(),
        Step::Tidy => crate::tidy::run(),
        Step::RbacAudit => crate::rbac_audit::run(Some(started)),
        Step::Demo => {
            let outcome = crate::demo::up();
            // Stopped either way: its components must not outlive CI.
            let stopped = crate::demo::down();
            outcome.and(stopped)
        }
    }
}

pub(crate) fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let mut results: Vec<(&str, Duration, bool)> = Vec::new();
    let mut failure = None;
    for (name, step) in &STEPS {
        println!("\n######## {name}");
        let step_started = Instant::now();
        let outcome = run_step(step, started_at);
        let ok = outcome.is_ok();
        results.push((name, step_started.elapsed(), ok));
        if let Err(err) = outcome {
            failure = Some(format!("{name}: {err:#}"));
            break;
        }
    }
    println!("\n######## summary");
    for (name, took, ok) in &results {
        println!(
            "  {:<34} {:>8.1}s  {}",
            name,
            took.as_secs_f64(),
            if *ok { "ok" } else { "FAILED" }
        );
    }
    for (name, _) in STEPS.iter().skip(results.len()) {
        println!("  {name:<34} {:>9}  skipped", "-");
    }
    println!("  {:<34} {:>8.1}s", "total", started.elapsed().as_secs_f64());
    if let Some(failure) = failure {
        bail!("ci failed at {failure}");
    }
    println!("The local control plane keeps running; stop it with `cargo xtask cluster down`.");
    Ok(())
}
