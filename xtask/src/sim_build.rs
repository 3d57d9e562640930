//! `cargo xtask sim-build`: a profile-guided (PGO) release build of the `kai` CLI for long trace
//! replays.
//!
//! Three steps: an instrumented release build, a replay of a training slice of the Philly trace under
//! every policy (each run writes the counts of which branches and calls it took), and a release build
//! that lays out and inlines the code by those counts. The decisions are the same as a plain release
//! build's (the profile changes machine code, never what it computes); the replay runs faster
//! (`docs/quality.md`, "The full trace and run time", has the figures).
//!
//! Not part of `cargo xtask ci`: the two builds take about seventeen minutes on 2 cores. Needs rustup's
//! `llvm-tools` component for `llvm-profdata` (installed here once, from the Rust package server) and
//! the trace, from `../shared/traces/` or the path given. The binary lands at
//! `target/sim-pgo/<host>/release/kai`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// Where both builds and the profiles go (their own target dir: the flags differ from `release`'s).
const TARGET_DIR: &str = "target/sim-pgo";

#[derive(Debug, clap::Args)]
pub(crate) struct SimBuildArgs {
    /// The Philly trace (`timestamp,duration,num_gpus,gpu_time,cluster`) the training slice is read from.
    #[arg(long, default_value = "../shared/traces/philly/philly_jobs.csv")]
    trace: PathBuf,
    /// Jobs in the training slice, in submit order from `--offset`.
    #[arg(long, default_value_t = 20_000)]
    limit: usize,
    /// Jobs skipped before the training slice.
    #[arg(long, default_value_t = 0)]
    offset: usize,
}

/// Builds, trains and rebuilds; prints where the binary is.
pub(crate) fn run(args: &SimBuildArgs) -> anyhow::Result<()> {
    let root = e2e::paths::workspace_root();
    let trace = crate::sim_check::trace_path(&root, &args.trace)?;
    let host = host_triple(&root)?;
    let profdata = llvm_profdata(&root, &host)?;
    let target_dir = root.join(TARGET_DIR);
    let raw = target_dir.join("profiles");
    // Counts of an older build would describe code that is no longer there.
    if raw.exists() {
        std::fs::remove_dir_all(&raw).with_context(|| format!("removing {}", raw.display()))?;
    }
    let generate = target_dir.join("instrumented");
    build(
        &root,
        &host,
        &generate,
        &format!("-Cprofile-generate={}", raw.display()),
    )?;
    let status = Command::new(generate.join(&host).join("release").join("kai"))
        .arg("sim")
        .arg("philly")
        .arg("--trace")
        .arg(&trace)
        .args(["--offset", &args.offset.to_string()])
        .args(["--limit", &args.limit.to_string(), "--no-progress", "--out"])
        .arg(target_dir.join("training"))
        // The tables are in the output directory; only the counts matter here.
        .stdout(Stdio::null())
        .current_dir(&root)
        .status()
        .context("running the training replay")?;
    if !status.success() {
        bail!("the training replay failed");
    }
    let merged = target_dir.join("merged.profdata");
    let status = Command::new(&profdata)
        .arg("merge")
        .arg("-o")
        .arg(&merged)
        .arg(&raw)
        .status()
        .with_context(|| format!("running {}", profdata.display()))?;
    if !status.success() {
        bail!("llvm-profdata merge failed");
    }
    // Cargo rebuilds when the flags change, not when a file they name does: the flag names the
    // counts by their content, so new counts rebuild. (They differ a little from one training run to
    // the next, so each run of this task rebuilds.)
    let counts = std::fs::read(&merged).with_context(|| format!("reading {}", merged.display()))?;
    let named = target_dir.join(format!("counts-{:016x}.profdata", content_hash(&counts)));
    remove_old_counts(&target_dir)?;
    std::fs::rename(&merged, &named).with_context(|| format!("naming {}", named.display()))?;
    build(
        &root,
        &host,
        &target_dir,
        &format!("-Cprofile-use={}", named.display()),
    )?;
    println!(
        "sim-build: {} (trained on jobs {}..{} of {})",
        target_dir.join(&host).join("release").join("kai").display(),
        args.offset,
        args.offset.saturating_add(args.limit),
        trace.display()
    );
    Ok(())
}

/// A release build of the CLI with `flag` added to the compiler's. The host target is named so the
/// flag reaches the CLI's code only, not build scripts and proc macros (which would write profiles of
/// their own while compiling).
fn build(root: &Path, host: &str, target_dir: &Path, flag: &str) -> anyhow::Result<()> {
    let mut rustflags = std::env::var_os("RUSTFLAGS").unwrap_or_default();
    if !rustflags.is_empty() {
        rustflags.push(" ");
    }
    rustflags.push(flag);
    let status = Command::new(crate::ci::cargo())
        .args([
            "build",
            "--release",
            "-p",
            "kai-cli",
            "--target",
            host,
            "--target-dir",
        ])
        .arg(target_dir)
        .env("RUSTFLAGS", rustflags)
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("the build with {flag} failed");
    }
    Ok(())
}

/// The toolchain's `llvm-profdata` (rustup's `llvm-tools`, added when missing: it must match the
/// compiler's LLVM, so a system one will not do).
fn llvm_profdata(root: &Path, host: &str) -> anyhow::Result<PathBuf> {
    let sysroot = rustc_output(root, &["--print", "sysroot"])?;
    let path = PathBuf::from(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin/llvm-profdata");
    if !path.is_file() {
        let status = Command::new("rustup")
            .args(["component", "add", "llvm-tools"])
            .current_dir(root)
            .status()
            .context("running rustup component add llvm-tools")?;
        if !status.success() || !path.is_file() {
            bail!("no llvm-profdata at {} after adding llvm-tools", path.display());
        }
    }
    Ok(path)
}

/// The compiler's host target triple.
fn host_triple(root: &Path) -> anyhow::Result<String> {
    let version = rustc_output(root, &["-vV"])?;
    host_of(&version)
        .map(str::to_owned)
        .context("rustc -vV names no host")
}

/// Removes the counts files of earlier runs (about 13 MB each) from `dir`.
fn remove_old_counts(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("counts-") && name.ends_with(".profdata") {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

/// A hash of `bytes` that names them (not a security measure).
fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// The host triple in `rustc -vV`'s output.
fn host_of(version: &str) -> Option<&str> {
    version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::trim)
        .filter(|h| !h.is_empty())
}

fn rustc_output(root: &Path, args: &[&str]) -> anyhow::Result<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let output = Command::new(rustc)
        .args(args)
        .current_dir(root)
        .output()
        .context("running rustc")?;
    if !output.status.success() {
        bail!("rustc {} failed", args.join(" "));
    }
    String::from_utf8(output.stdout).context("rustc printed non-UTF-8")
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_is_read_from_rustcs_verbose_version() {
        let version = "rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\nhost: x86_64-unknown-linux-gnu\nrelease: 1.95.0\nLLVM version: 22.1.2\n";
        assert_eq!(host_of(version), Some("x86_64-unknown-linux-gnu"));
        assert_eq!(host_of("rustc 1.95.0\nhost: \n"), None);
        assert_eq!(host_of("rustc 1.95.0\n"), None);
    }
}
