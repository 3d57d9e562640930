//! `cargo xtask tidy`: structural rules the compiler alone does not state.
//!
//! The decision core (`kai-scheduler-core`) stays pure: no crate that does I/O, runs an async runtime,
//! serves HTTP or exports metrics may enter its normal dependency tree, directly or through another
//! crate. Adding one fails CI here, naming the path that brought it in.

use std::process::Command;

use anyhow::{Context, bail};

/// The core package, as `cargo tree -p` names it.
const CORE: &str = "kai-scheduler-core";

/// Crates that mean I/O, an async runtime, HTTP or metrics. `http` itself is allowed: kube-core's API
/// types use its data types, and it does no I/O.
const FORBIDDEN_IN_CORE: [&str; 16] = [
    "kai-runtime",
    "kai-scheduler",
    "kube-client",
    "kube-runtime",
    "tokio",
    "tokio-util",
    "futures",
    "hyper",
    "hyper-util",
    "reqwest",
    "tower",
    "tower-http",
    "axum",
    "rustls",
    "prometheus-client",
    "tracing-subscriber",
];

/// Runs every rule.
pub(crate) fn run() -> anyhow::Result<()> {
    let tree = Command::new(crate::ci::cargo())
        .args([
            "tree", "-p", CORE, "-e", "normal", "--prefix", "none", "--format", "{p}",
        ])
        .current_dir(e2e::paths::workspace_root())
        .output()
        .context("running cargo tree")?;
    if !tree.status.success() {
        bail!(
            "cargo tree -p {CORE} failed: {}",
            String::from_utf8_lossy(&tree.stderr)
        );
    }
    let offenders = forbidden_packages(&String::from_utf8_lossy(&tree.stdout));
    if !offenders.is_empty() {
        bail!(
            "{CORE} must stay free of I/O dependencies, but depends on: {} (see `cargo tree -p {CORE} -i NAME`)",
            offenders.join(", ")
        );
    }
    println!("{CORE}: no I/O dependency");
    Ok(())
}

/// The forbidden package names in `cargo tree --prefix none --format {p}` output (`name vX.Y.Z ...`).
fn forbidden_packages(tree: &str) -> Vec<String> {
    let mut found: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| FORBIDDEN_IN_CORE.contains(name))
        .map(str::to_owned)
        .collect();
    found.sort();
    found.dedup();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_forbidden_packages_once_and_ignores_allowed_ones() {
        let tree = "kai-scheduler-core v0.1.0 (/w/crates/scheduler-core)\n\
                    kai-api v0.1.0 (/w/crates/api)\n\
                    http v1.3.1\n\
                    tokio v1.54.0\n\
                    kube-core v5.0.0\n\
                    tokio v1.54.0 (*)\n\
                    tokio-macros v2.5.0\n\
                    kube-client v5.0.0\n";
        assert_eq!(forbidden_packages(tree), vec!["kube-client", "tokio"]);
    }

    #[test]
    fn the_core_as_it_stands_passes() {
        // The real tree: fails as soon as someone adds an I/O crate to the core.
        run().expect("the core has no I/O dependency");
    }
}
