//! Running the project's binaries (`target/debug/<bin>`) as local processes during a test, the way the
//! chart would run them in a cluster: same arguments, a `KUBECONFIG`, logs captured to a file.
//!
//! A [`Component`] is killed when dropped, so a failing test never leaves one behind.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A running binary of the workspace.
#[derive(Debug)]
pub struct Component {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Component {
    /// Where cargo puts the debug build of `bin`.
    #[must_use]
    pub fn binary_path(bin: &str) -> PathBuf {
        crate::paths::target_dir().join("debug").join(bin)
    }

    /// Builds the workspace binary `bin` (`cargo build --bin <bin>`), so a test never runs a stale one.
    ///
    /// # Errors
    /// When cargo fails.
    pub fn build(bin: &str) -> anyhow::Result<()> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
        let mut command = Command::new(cargo);
        // A test runs with the variables cargo sets for the e2e package (CARGO_MANIFEST_DIR, CARGO_PKG_*,
        // ...). Build scripts that watch them (ring's does) would rerun and rebuild the TLS stack and
        // everything above it, here and again at the next plain `cargo build`.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO_PKG_")
                || matches!(
                    key.as_ref(),
                    "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                        | "CARGO_TARGET_TMPDIR"
                )
            {
                command.env_remove(key.as_ref());
            }
        }
        let status = command
            .args(["build", "--quiet", "--workspace", "--bin", bin])
            .current_dir(crate::paths::workspace_root())
            .stdin(Stdio::null())
            .status()
            .with_context(|| format!("running cargo build --bin {bin}"))?;
        if !status.success() {
            bail!("cargo build --bin {bin} failed ({status})");
        }
        Ok(())
    }

    /// Starts `target/debug/<bin>` with `args`, `KUBECONFIG` set to `kubeconfig` and `RUST_LOG` to
    /// `debug` unless already set; stdout and stderr go to `<log_dir>/<name>.log`.
    ///
    /// # Errors
    /// When the binary does not exist (build it with [`Component::build`]) or cannot start.
    pub fn start<I, S>(
        name: &str,
        bin: &str,
        args: I,
        kubeconfig: &OsStr,
        log_dir: &Path,
    ) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let path = Self::binary_path(bin);
        if !path.exists() {
            bail!(
                "{} does not exist: build it first (`cargo build --bin {bin}`)",
                path.display()
            );
        }
        Self::start_binary(name, &path, args, kubeconfig, log_dir)
    }

    /// Starts the executable at `path` (a release build, or another project's binary) the way
    /// [`Component::start`] starts a workspace binary.
    ///
    /// # Errors
    /// When the process cannot start.
    pub fn start_binary<I, S>(
        name: &str,
        path: &Path,
        args: I,
        kubeconfig: &OsStr,
        log_dir: &Path,
    ) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        std::fs::create_dir_all(log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("duplicating the log file handle")?;
        let mut command = Command::new(path);
        command
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "debug");
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", path.display()))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log,
        })
    }

    /// The name given at start.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
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

    /// The last `lines` lines of the log.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// The exit status if it exited.
    ///
    /// # Errors
    /// When the status cannot be read.
    pub fn exit_status(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        self.child.try_wait().context("checking the process")
    }

    /// Sends `signal` (a name `kill -s` understands: `STOP`, `CONT`, `TERM`, ...) to the process, e.g. to
    /// freeze it past its lease and thaw it again.
    ///
    /// # Errors
    /// When the process has exited or `kill` fails.
    pub fn signal(&mut self, signal: &str) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} already exited ({status})", self.name);
        }
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .with_context(|| format!("running kill -s {signal} {pid}"))?;
        if !status.success() {
            bail!("kill -s {signal} {pid} failed");
        }
        Ok(())
    }

    /// Sends SIGTERM and waits up to `grace` for the exit, then kills. Returns the exit status.
    ///
    /// # Errors
    /// When the process cannot be signalled or waited for.
    pub fn terminate(&mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .context("running kill -TERM")?;
        if !status.success() {
            bail!("kill -TERM {} failed", self.child.id());
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill().context("killing the process")?;
        self.child.wait().context("waiting for the process")
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The last `lines` lines of a file (a note when it cannot be read).
#[must_use]
pub fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(err) => format!("(cannot read {}: {err})", path.display()),
    }
}

/// A loopback port nothing listens on now (for a component's admin server).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// GET `path` on `127.0.0.1:port`: the status code, if a server answered (probes `/readyz`).
#[must_use]
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    http_get(port, path).map(|(status, _)| status)
}

/// GET `path` on `127.0.0.1:port`: the status code and the whole response (headers and body), if a server
/// answered (`/metrics` of a component).
#[must_use]
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("e2e-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("log");
        std::fs::write(&file, "a\nb\nc\n").expect("write");
        assert_eq!(tail(&file, 2), "b\nc");
        assert_eq!(tail(&file, 10), "a\nb\nc");
        assert!(tail(&dir.join("missing"), 1).contains("cannot read"));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
