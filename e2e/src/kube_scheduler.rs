//! kube-scheduler v1.20.2, from the local control plane's build, as a local process with a scheduler name
//! of its own: the baseline the seed 003 comparison (tests and demo) and the benchmarks run beside ours.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context as _;

use crate::DevPaths;

/// A running kube-scheduler; killed when dropped.
#[derive(Debug)]
pub struct KubeScheduler {
    child: Child,
    log: PathBuf,
    port: u16,
}

impl KubeScheduler {
    /// Starts kube-scheduler serving pods with `schedulerName: <name>` on the cluster of `kubeconfig`, with
    /// client QPS and burst `qps`, logging to `<dir>/kube-scheduler.log`.
    ///
    /// # Errors
    /// When the binary was not built (`cargo xtask cluster up` builds it) or cannot start.
    pub fn start(kubeconfig: &Path, name: &str, qps: u32, dir: &Path) -> anyhow::Result<Self> {
        let binary = DevPaths::from_env().k8s_bin("kube-scheduler");
        anyhow::ensure!(
            binary.exists(),
            "{} is missing: run `cargo xtask cluster up`",
            binary.display()
        );
        Self::start_binary(&binary, kubeconfig, name, qps, dir)
    }

    /// As [`KubeScheduler::start`], with the kube-scheduler binary at `binary`. QPS and burst go in the
    /// configuration file: the `--kube-api-qps` / `--kube-api-burst` flags are ignored with `--config`.
    ///
    /// # Errors
    /// When it cannot start.
    pub fn start_binary(
        binary: &Path,
        kubeconfig: &Path,
        name: &str,
        qps: u32,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("kube-scheduler.yaml");
        // With a configuration file the insecure health and metrics server listens where the file says
        // (default 0.0.0.0:10251, whatever `--port` says): a port of its own, so several kube-schedulers
        // (parallel tests, benchmarks) run side by side, and `/healthz` tells when it serves.
        let port = crate::component::free_port()?;
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\n\
                 clientConnection:\n  kubeconfig: {}\n  qps: {qps}\n  burst: {qps}\n\
                 healthzBindAddress: 127.0.0.1:{port}\nmetricsBindAddress: 127.0.0.1:{port}\n\
                 leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {name}\n",
                kubeconfig.display()
            ),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        let log = dir.join("kube-scheduler.log");
        let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(binary)
            .args([
                "--config",
                &config.to_string_lossy(),
                "--port=0",
                "--secure-port=0",
                "-v=1",
            ])
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self { child, log, port })
    }

    /// Waits until `/healthz` answers 200 (at most `timeout`).
    ///
    /// # Errors
    /// When it does not, with the log's tail.
    pub async fn wait_healthy(&self, timeout: std::time::Duration) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        while crate::component::http_status(self.port, "/healthz") != Some(200) {
            if std::time::Instant::now() > deadline {
                anyhow::bail!(
                    "kube-scheduler not healthy after {timeout:?}:\n{}",
                    crate::component::tail(&self.log, 20)
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file.
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

impl Drop for KubeScheduler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
