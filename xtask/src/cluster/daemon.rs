//! Detached background processes with pid files: started in a session of their own (so they outlive
//! `cargo xtask` and the terminal), stopped only when the pid still runs the binary we started.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// One control-plane process.
#[derive(Debug, Clone)]
pub(crate) struct Daemon {
    pub(crate) name: &'static str,
    pub(crate) binary: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) ports: Vec<u16>,
    pub(crate) run_dir: PathBuf,
    pub(crate) log_dir: PathBuf,
}

impl Daemon {
    pub(crate) fn pid_file(&self) -> PathBuf {
        self.run_dir.join(format!("{}.pid", self.name))
    }

    pub(crate) fn log_file(&self) -> PathBuf {
        self.log_dir.join(format!("{}.log", self.name))
    }

    /// The pid, when the pid file names a live process running our binary.
    pub(crate) fn running_pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.pid_file())
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (runs_binary(pid, &self.binary) && !is_zombie(pid)).then_some(pid)
    }

    /// Starts the process unless it already runs. Returns its pid and whether it was started now.
    pub(crate) fn ensure_started(&self) -> anyhow::Result<(u32, bool)> {
        if let Some(pid) = self.running_pid() {
            return Ok((pid, false));
        }
        for port in &self.ports {
            ensure_port_free(*port).with_context(|| format!("{} cannot start", self.name))?;
        }
        std::fs::create_dir_all(&self.run_dir)?;
        std::fs::create_dir_all(&self.log_dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())
            .with_context(|| format!("opening {}", self.log_file().display()))?;
        {
            use std::io::Write as _;
            let mut header = &log;
            let _ = writeln!(
                header,
                "---- started by cargo xtask cluster up at {} ----",
                e2e::now()
            );
        }
        // `setsid` (util-linux) gives the process a session of its own: no controlling terminal, not in
        // the caller's process group, so neither Ctrl-C nor the end of `cargo xtask` stops it. It execs
        // (the child is not a group leader), so the pid we get is the daemon's.
        let child = Command::new("setsid")
            .arg(&self.binary)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let pid = child.id();
        // Not waited for on purpose: it outlives us and is reparented when we exit.
        drop(child);
        std::fs::write(self.pid_file(), format!("{pid}\n"))?;
        std::thread::sleep(Duration::from_millis(300));
        if self.running_pid().is_none() {
            bail!(
                "{} exited right after starting; last log lines:\n{}",
                self.name,
                e2e::component::tail(&self.log_file(), 30)
            );
        }
        Ok((pid, true))
    }

    /// Stops the process if it runs: SIGTERM, then SIGKILL after `grace`; waits until it is gone and its
    /// ports are free. Returns whether it was running.
    pub(crate) fn stop(&self, grace: Duration) -> anyhow::Result<bool> {
        let Some(pid) = self.running_pid() else {
            let _ = std::fs::remove_file(self.pid_file());
            return Ok(false);
        };
        signal(pid, "TERM")?;
        let deadline = Instant::now() + grace;
        while is_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if is_alive(pid) {
            signal(pid, "KILL")?;
            let deadline = Instant::now() + Duration::from_secs(10);
            while is_alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if is_alive(pid) {
                bail!("{} (pid {pid}) survived SIGKILL", self.name);
            }
        }
        let _ = std::fs::remove_file(self.pid_file());
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in &self.ports {
            while ensure_port_free(*port).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            ensure_port_free(*port)
                .with_context(|| format!("{} stopped but its port is still taken", self.name))?;
        }
        Ok(true)
    }

    /// The last lines of its log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        e2e::component::tail(&self.log_file(), lines)
    }
}

/// Whether `pid`'s command line starts with `binary`.
fn runs_binary(pid: u32, binary: &Path) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).next() == Some(binary.as_os_str().as_encoded_bytes()))
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}

fn is_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

/// Sends a signal with the shell's `kill` builtin (always present; no unsafe code needed).
fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("sh")
        .args(["-c", "kill -s \"$1\" \"$2\"", "sh", signal, &pid.to_string()])
        .stdin(Stdio::null())
        .status()
        .context("running kill")?;
    if !status.success() && is_alive(pid) {
        bail!("kill -s {signal} {pid} failed");
    }
    Ok(())
}

/// Fails when something listens on 127.0.0.1:`port`.
pub(crate) fn ensure_port_free(port: u16) -> anyhow::Result<()> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    match TcpListener::bind(address) {
        Ok(listener) => {
            drop(listener);
            Ok(())
        }
        Err(err) => bail!(
            "port 127.0.0.1:{port} is in use ({err}); find the owner with `ss -ltnp 'sport = :{port}'` and stop it"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_reported_by_number() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let err = ensure_port_free(port).expect_err("taken");
        assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
        drop(listener);
        assert!(ensure_port_free(port).is_ok());
    }

    #[test]
    fn starts_detached_and_stops_only_its_own_process() {
        let dir = std::env::temp_dir().join(format!("xtask-daemon-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let daemon = Daemon {
            name: "sleeper",
            binary: PathBuf::from("/bin/sleep"),
            args: vec!["30".into()],
            ports: vec![],
            run_dir: dir.join("run"),
            log_dir: dir.join("logs"),
        };
        let (pid, started) = daemon.ensure_started().expect("start");
        assert!(started);
        assert_eq!(daemon.ensure_started().expect("idempotent"), (pid, false));
        // A pid file naming another program is not ours to stop.
        let stranger = Daemon {
            binary: PathBuf::from("/bin/true"),
            ..daemon.clone()
        };
        assert_eq!(stranger.running_pid(), None);
        assert!(daemon.stop(Duration::from_secs(5)).expect("stop"));
        assert!(!is_alive(pid));
        assert!(!daemon.stop(Duration::from_secs(5)).expect("stop again"));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
