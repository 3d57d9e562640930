//! `cargo xtask helm`: the chart in `deploy/chart/kai-scheduler`. Fetches Helm into the tool cache,
//! lints the chart, keeps its CRD copies and the plain manifests (`deploy/manifests/`) in sync with the
//! sources (`render`; `check` fails when they are stale), and installs it on a cluster.
//!
//! Must not: hold chart logic the tests need; that lives in `e2e::chart` and `e2e::helm`.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use e2e::chart;
use e2e::helm::Helm;

/// What `cargo xtask helm` does.
#[derive(Debug, Subcommand)]
pub(crate) enum HelmTask {
    /// Fetch Helm into the tool cache (once) and print its path.
    Fetch,
    /// `helm lint --strict` with the default values and with GPU sharing on.
    Lint,
    /// Copy crds/ into the chart and render deploy/manifests/ (--check: fail when any is stale).
    Render {
        /// Only check; exit non-zero naming stale files.
        #[arg(long)]
        check: bool,
    },
    /// lint, then render --check: what CI runs.
    Check,
    /// `helm upgrade -i` the chart on KUBECONFIG, else on the local control plane.
    Install {
        /// Release name.
        #[arg(long, default_value = chart::RELEASE)]
        release: String,
        /// Release namespace (created when missing).
        #[arg(long, default_value = chart::NAMESPACE)]
        namespace: String,
        /// Chart values, `key=value` (as `helm --set`), repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        values: Vec<String>,
        /// Helm's `--server-side` (true, false, auto). Default false: Helm 4 applies CRDs server-side by
        /// default, which a server older than 1.23 (the local 1.20 control plane) refuses because the CRDs
        /// carry `x-kubernetes-validations`; a client-side create works there (the server drops the rules).
        #[arg(long, default_value = "false")]
        server_side: String,
    },
    /// `helm uninstall` a release (CRDs, priority classes and default queues stay, as in any uninstall).
    Uninstall {
        /// Release name.
        #[arg(long, default_value = chart::RELEASE)]
        release: String,
        /// Release namespace.
        #[arg(long, default_value = chart::NAMESPACE)]
        namespace: String,
    },
}

pub(crate) fn run(task: HelmTask) -> anyhow::Result<()> {
    let helm = Helm::find_or_fetch()?;
    match task {
        HelmTask::Fetch => {
            println!("{} ({})", helm.path().display(), helm.version()?);
            Ok(())
        }
        HelmTask::Lint => lint(&helm),
        HelmTask::Render { check: false } => render(&helm),
        HelmTask::Render { check: true } => check_fresh(&helm),
        HelmTask::Check => {
            lint(&helm)?;
            check_fresh(&helm)
        }
        HelmTask::Install {
            release,
            namespace,
            values,
            server_side,
        } => install(&helm, &release, &namespace, &values, &server_side),
        HelmTask::Uninstall { release, namespace } => {
            let kubeconfig = kubeconfig()?;
            let out = helm.run([
                "uninstall".as_ref(),
                release.as_ref(),
                "--namespace".as_ref(),
                namespace.as_ref(),
                "--kubeconfig".as_ref(),
                kubeconfig.as_os_str(),
            ])?;
            print!("{out}");
            Ok(())
        }
    }
}

fn lint(helm: &Helm) -> anyhow::Result<()> {
    let chart = chart::chart_dir();
    for values in [
        &[][..],
        &[
            "global.gpuSharing=true",
            "scheduler.replicas=2",
            "podgrouper.replicas=2",
        ][..],
    ] {
        let mut args = vec![
            "lint".to_owned(),
            "--strict".to_owned(),
            chart.display().to_string(),
        ];
        for v in values {
            args.push("--set".to_owned());
            args.push((*v).to_owned());
        }
        print!("{}", helm.run(&args)?);
    }
    Ok(())
}

/// Every generated file with its expected content.
fn expected(helm: &Helm) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    for (copy, source) in chart::chart_crd_copies()? {
        let text =
            std::fs::read_to_string(&source).with_context(|| format!("reading {}", source.display()))?;
        files.push((copy, text));
    }
    files.extend(chart::plain_manifests(helm)?);
    Ok(files)
}

fn render(helm: &Helm) -> anyhow::Result<()> {
    // The CRD copies first: the manifests are rendered from them.
    for (copy, source) in chart::chart_crd_copies()? {
        write_if_changed(&copy, &std::fs::read_to_string(&source)?)?;
    }
    for (path, content) in expected(helm)? {
        write_if_changed(&path, &content)?;
    }
    Ok(())
}

fn write_if_changed(path: &std::path::Path, content: &str) -> anyhow::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn check_fresh(helm: &Helm) -> anyhow::Result<()> {
    let mut stale = Vec::new();
    for (path, content) in expected(helm)? {
        if std::fs::read_to_string(&path).ok().as_deref() != Some(content.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    // A CRD copy whose source is gone is stale too.
    let known: Vec<PathBuf> = chart::chart_crd_copies()?
        .into_iter()
        .map(|(copy, _)| copy)
        .collect();
    let chart = chart::chart_dir();
    for dir in [chart.join("crds"), chart.join("files").join("volcano")] {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if !known.contains(&path) {
                stale.push(format!("{} (no source in crds/)", path.display()));
            }
        }
    }
    if !stale.is_empty() {
        bail!(
            "stale generated files (run `cargo xtask helm render`):\n  {}",
            stale.join("\n  ")
        );
    }
    println!("chart CRDs and deploy/manifests are up to date");
    Ok(())
}

/// `$KUBECONFIG`, else the local control plane's.
fn kubeconfig() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let local = e2e::helm::tools_dir()
        .parent()
        .map(|home| home.join("cluster").join("kubeconfig"))
        .context("tool directory has no parent")?;
    if !local.is_file() {
        bail!(
            "no KUBECONFIG and no local control plane ({} is missing): start it with `cargo xtask cluster up`",
            local.display()
        );
    }
    Ok(local)
}

fn install(
    helm: &Helm,
    release: &str,
    namespace: &str,
    values: &[String],
    server_side: &str,
) -> anyhow::Result<()> {
    let kubeconfig = kubeconfig()?;
    let mut args = vec![
        "upgrade".to_owned(),
        "--install".to_owned(),
        release.to_owned(),
        chart::chart_dir().display().to_string(),
        "--namespace".to_owned(),
        namespace.to_owned(),
        "--create-namespace".to_owned(),
        "--kubeconfig".to_owned(),
        kubeconfig.display().to_string(),
        format!("--server-side={server_side}"),
    ];
    for value in values {
        if !value.contains('=') {
            bail!("--set takes key=value, not {value:?}");
        }
        args.push("--set".to_owned());
        args.push(value.clone());
    }
    print!("{}", helm.run(&args)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser};

    use super::HelmTask;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        task: HelmTask,
    }

    #[test]
    fn cli_is_valid() {
        Cli::command().debug_assert();
        let parsed = Cli::try_parse_from(["helm", "install", "--set", "a=b", "--set", "c=d"]).expect("parse");
        let HelmTask::Install {
            release,
            values,
            server_side,
            ..
        } = parsed.task
        else {
            panic!("not an install: {parsed:?}");
        };
        assert_eq!(release, e2e::chart::RELEASE);
        assert_eq!(values, ["a=b", "c=d"]);
        assert_eq!(
            server_side, "false",
            "client-side by default: the local server is 1.20"
        );
    }
}
