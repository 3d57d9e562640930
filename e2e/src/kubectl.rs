//! Running the project's kubectl (built with the local control plane, same version as the server) so
//! tests exercise what a user types, never whatever kubectl the machine happens to have.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, bail};
use tokio::io::AsyncWriteExt as _;

use crate::paths::{DevPaths, ENV_KUBECTL};

/// A kubectl bound to one kubeconfig.
#[derive(Debug, Clone)]
pub struct Kubectl {
    path: PathBuf,
    kubeconfig: OsString,
}

/// What one kubectl run printed.
#[derive(Debug, Clone)]
pub struct KubectlOutput {
    /// Whether it exited 0.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Kubectl {
    /// The project's kubectl (`$KAI_KUBECTL`, else the one `cargo xtask cluster up` built).
    ///
    /// # Errors
    /// When it does not exist.
    pub fn new(kubeconfig: OsString) -> anyhow::Result<Self> {
        let path = DevPaths::from_env().kubectl();
        if !path.exists() {
            bail!(
                "kubectl not found at {}: run `cargo xtask cluster up` (it builds kubectl {}) or set {ENV_KUBECTL}",
                path.display(),
                crate::paths::K8S_VERSION
            );
        }
        Ok(Self { path, kubeconfig })
    }

    /// The binary.
    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Runs kubectl with `args`, feeding `stdin` when given.
    ///
    /// # Errors
    /// When kubectl cannot be started (a non-zero exit is reported in the output, not as an error).
    pub async fn run(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<KubectlOutput> {
        let mut command = tokio::process::Command::new(&self.path);
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", self.path.display()))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().context("kubectl stdin")?;
            pipe.write_all(input.as_bytes())
                .await
                .context("writing kubectl stdin")?;
            drop(pipe);
        }
        let output = child.wait_with_output().await.context("waiting for kubectl")?;
        Ok(KubectlOutput {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Runs kubectl and returns its standard output.
    ///
    /// # Errors
    /// When it exits non-zero; the error quotes the command and its standard error.
    pub async fn run_ok(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let output = self.run(args, stdin).await?;
        if !output.success {
            bail!(
                "kubectl {} failed: {}{}",
                args.join(" "),
                output.stderr.trim(),
                output.stdout.trim()
            );
        }
        Ok(output.stdout)
    }
}
