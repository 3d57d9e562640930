//! Faults injected into the local control plane that `cargo xtask cluster up` runs: restarting
//! kube-apiserver alone, with the arguments it runs with now, to prove the components reconnect.
//!
//! Must not: touch etcd or kube-controller-manager, or start anything that was not running (a cluster
//! that is down stays down). Restarting the shared API server disturbs every test running at the same
//! time, so tests that call this are `#[ignore]`d and run alone.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::paths::DevPaths;

/// The running kube-apiserver of the local control plane: its pid and command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServerProcess {
    /// Process id, from the pid file.
    pub pid: u32,
    /// The binary (first word of the command line).
    pub binary: PathBuf,
    /// The arguments after the binary.
    pub args: Vec<String>,
}

fn pid_file(paths: &DevPaths) -> PathBuf {
    paths.cluster_dir().join("run").join("kube-apiserver.pid")
}

fn log_file(paths: &DevPaths) -> PathBuf {
    paths.cluster_dir().join("logs").join("kube-apiserver.log")
}

/// Splits `/proc/<pid>/cmdline` (NUL-separated, NUL-terminated) into words.
#[must_use]
pub fn split_cmdline(raw: &[u8]) -> Vec<String> {
    raw.split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn is_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

/// The kube-apiserver the pid file names, when it runs the local control plane's binary.
///
/// # Errors
/// When the pid file is missing, or names no live kube-apiserver of this control plane.
pub fn apiserver(paths: &DevPaths) -> anyhow::Result<ApiServerProcess> {
    let file = pid_file(paths);
    let pid: u32 = std::fs::read_to_string(&file)
        .with_context(|| format!("reading {} (is `cargo xtask cluster up` done?)", file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("{} holds no pid", file.display()))?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline"))
        .with_context(|| format!("kube-apiserver (pid {pid}) is not running"))?;
    let mut words = split_cmdline(&raw).into_iter();
    let binary = PathBuf::from(words.next().unwrap_or_default());
    let expected = paths.k8s_bin("kube-apiserver");
    if binary != expected || !is_alive(pid) {
        bail!(
            "pid {pid} runs {} rather than {}: not this control plane's API server",
            binary.display(),
            expected.display()
        );
    }
    Ok(ApiServerProcess {
        pid,
        binary,
        args: words.collect(),
    })
}

/// Stops the local kube-apiserver (SIGTERM, then SIGKILL after 20 s), keeps it down for `down_for`, and
/// starts the same binary with the same arguments the way `cargo xtask cluster up` does (its own session,
/// log appended, pid file rewritten). Returns the new pid. etcd and the controller manager keep running.
///
/// # Errors
/// When it is not running, cannot be stopped, or exits right after the restart (the log tail says why).
pub fn restart_apiserver(paths: &DevPaths, down_for: Duration) -> anyhow::Result<u32> {
    let old = apiserver(paths)?;
    signal(old.pid, "TERM")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while is_alive(old.pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if is_alive(old.pid) {
        signal(old.pid, "KILL")?;
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(down_for);
    let log_path = log_file(paths);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let _ = writeln!(
        log,
        "---- restarted by the e2e fault injection at {} ----",
        crate::now()
    );
    // The port is free once the old process is gone; a TIME_WAIT socket does not stop a listener.
    let child = Command::new("setsid")
        .arg(&old.binary)
        .args(&old.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", old.binary.display()))?;
    let pid = child.id();
    // Not waited for: like `cargo xtask cluster up`, it outlives the test process.
    drop(child);
    std::fs::write(pid_file(paths), format!("{pid}\n"))?;
    std::thread::sleep(Duration::from_millis(500));
    if !is_alive(pid) {
        bail!(
            "kube-apiserver exited right after the restart; last log lines:\n{}",
            crate::component::tail(&log_path, 30)
        );
    }
    Ok(pid)
}

fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() && is_alive(pid) {
        bail!("kill -s {signal} {pid} failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_words_split_on_nul() {
        assert_eq!(
            split_cmdline(b"/bin/kube-apiserver\0--secure-port=16443\0--v=1\0"),
            vec!["/bin/kube-apiserver", "--secure-port=16443", "--v=1"]
        );
        assert!(split_cmdline(b"").is_empty());
    }

    #[test]
    fn a_missing_pid_file_is_an_error_not_a_restart() {
        let home = std::env::temp_dir().join(format!("e2e-cp-{}", std::process::id()));
        let err = apiserver(&DevPaths::at(&home)).expect_err("no pid file");
        assert!(format!("{err:#}").contains("kube-apiserver.pid"), "{err:#}");
    }
}
