//! Debian packages and the Kubernetes source package: installed or fetched only when missing, with
//! `apt-get update` only when apt does not know what is needed, and sudo only when not root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use super::run;

/// The Debian source package the control plane is built from. Pinned: where several suites are listed,
/// a bare `kubernetes` can resolve to a newer repacked source that ships only kubectl.
pub(crate) const SOURCE_PACKAGE: &str = "kubernetes";
pub(crate) const SOURCE_VERSION: &str = "1.20.5+really1.20.2-1.1+deb12u1";

/// Where the deb-src entry goes.
const DEB_SRC_FILE: &str = "/etc/apt/sources.list.d/kai-dev-deb-src.sources";
const DEB_SRC_LIST_FILE: &str = "/etc/apt/sources.list.d/kai-dev-deb-src.list";

/// Installs state-changing apt commands as root (directly or through `sudo -n`).
pub(crate) struct Apt {
    sudo: bool,
    updated: bool,
}

impl Apt {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let sudo = !is_root();
        if sudo
            && !Command::new("sudo")
                .args(["-n", "true"])
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        {
            bail!(
                "not root and `sudo -n` is not available: install packages as root or configure passwordless sudo"
            );
        }
        Ok(Self { sudo, updated: false })
    }

    fn root_command(&self, program: &str) -> Command {
        let mut command = if self.sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "--preserve-env=DEBIAN_FRONTEND", program]);
            c
        } else {
            Command::new(program)
        };
        command
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null());
        command
    }

    fn update(&mut self) -> anyhow::Result<()> {
        println!("    apt-get update");
        run(
            self.root_command("apt-get").args(["update", "-q"]),
            "apt-get update",
        )?;
        self.updated = true;
        Ok(())
    }

    /// Installs the packages that are not installed yet.
    pub(crate) fn ensure_packages(&mut self, packages: &[&str]) -> anyhow::Result<()> {
        let missing: Vec<&str> = packages.iter().copied().filter(|p| !is_installed(p)).collect();
        if missing.is_empty() {
            println!("    all present: {}", packages.join(" "));
            return Ok(());
        }
        if !self.updated && missing.iter().any(|p| !apt_knows(p)) {
            self.update()?;
        }
        println!("    installing {}", missing.join(" "));
        let install = |apt: &Self| {
            run(
                apt.root_command("apt-get")
                    .args(["install", "-y", "-q", "--no-install-recommends"])
                    .args(&missing),
                "apt-get install",
            )
        };
        if let Err(err) = install(self) {
            if self.updated {
                return Err(err);
            }
            // The lists may be stale (a package version no longer served): refresh once and retry.
            self.update()?;
            install(self)?;
        }
        Ok(())
    }

    /// Downloads the pinned source package into `dir` (once) and returns its `.dsc`.
    pub(crate) fn ensure_source(&mut self, dir: &Path) -> anyhow::Result<PathBuf> {
        let dsc = dir.join(format!("{SOURCE_PACKAGE}_{SOURCE_VERSION}.dsc"));
        let complete = dir.join(".complete");
        if dsc.exists() && complete.exists() {
            println!("    cached in {}", dir.display());
            return Ok(dsc);
        }
        if !source_known() {
            if !self.updated {
                self.update()?;
            }
            if !source_known() {
                self.add_deb_src()?;
                self.update()?;
            }
            if !source_known() {
                bail!(
                    "apt does not know source {SOURCE_PACKAGE}={SOURCE_VERSION} even with deb-src entries ({}); \
                     is Debian bookworm configured?",
                    DEB_SRC_FILE
                );
            }
        }
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        println!("    apt-get source --download-only {SOURCE_PACKAGE}={SOURCE_VERSION}");
        // Unprivileged: apt-get source needs no root; `_apt` cannot write here, which apt only warns about.
        run(
            Command::new("apt-get")
                .args([
                    "source",
                    "--download-only",
                    "-q",
                    &format!("{SOURCE_PACKAGE}={SOURCE_VERSION}"),
                ])
                .current_dir(dir)
                .stdin(Stdio::null()),
            "apt-get source",
        )?;
        if !dsc.exists() {
            bail!("apt-get source did not produce {}", dsc.display());
        }
        std::fs::write(&complete, SOURCE_VERSION).context("marking the source download complete")?;
        Ok(dsc)
    }

    /// Adds deb-src entries mirroring the Debian deb entries.
    fn add_deb_src(&self) -> anyhow::Result<()> {
        let deb822 = Path::new("/etc/apt/sources.list.d/debian.sources");
        let (file, content) = if let Ok(text) = std::fs::read_to_string(deb822) {
            (DEB_SRC_FILE, deb_src_stanzas(&text))
        } else {
            let text = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
            (DEB_SRC_LIST_FILE, deb_src_lines(&text))
        };
        if content.trim().is_empty() {
            bail!(
                "found no Debian deb entries to mirror as deb-src (looked at {} and /etc/apt/sources.list)",
                deb822.display()
            );
        }
        println!("    adding deb-src entries in {file}");
        let mut child = self
            .root_command("tee")
            .arg(file)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("writing the deb-src entry")?;
        use std::io::Write as _;
        child
            .stdin
            .take()
            .context("tee stdin")?
            .write_all(content.as_bytes())
            .context("writing the deb-src entry")?;
        if !child.wait()?.success() {
            bail!("could not write {file}");
        }
        Ok(())
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(1) == Some("0"))
    })
}

fn is_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", package])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout == b"installed")
}

fn apt_knows(package: &str) -> bool {
    Command::new("apt-cache")
        .args(["show", "--no-all-versions", package])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn source_known() -> bool {
    Command::new("apt-cache")
        .args(["showsrc", "--only-source", SOURCE_PACKAGE])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == format!("Version: {SOURCE_VERSION}"))
        })
}

/// deb822 stanzas with `Types: deb-src` for every stanza of `sources` whose types include `deb`.
pub(crate) fn deb_src_stanzas(sources: &str) -> String {
    let mut out = Vec::new();
    for stanza in sources.split("\n\n") {
        let fields: Vec<&str> = stanza
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
            .collect();
        let types = fields
            .iter()
            .find_map(|l| l.strip_prefix("Types:"))
            .map(str::split_whitespace);
        if !types.is_some_and(|mut t| t.any(|t| t == "deb")) {
            continue;
        }
        let mut lines = vec!["Types: deb-src".to_owned()];
        lines.extend(
            fields
                .iter()
                .filter(|l| !l.starts_with("Types:"))
                .map(|l| (*l).to_owned()),
        );
        out.push(lines.join("\n"));
    }
    if out.is_empty() {
        String::new()
    } else {
        out.join("\n\n") + "\n"
    }
}

/// One-line-format `deb-src` lines for every `deb` line of a `sources.list`.
pub(crate) fn deb_src_lines(sources: &str) -> String {
    sources
        .lines()
        .filter_map(|l| l.trim().strip_prefix("deb "))
        .map(|rest| format!("deb-src {rest}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_deb822_stanzas_with_comments() {
        let sources = "Types: deb\n# a snapshot comment\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
                       Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                       Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n\n\
                       Types: deb-src\nURIs: http://x\nSuites: y\nComponents: main\n";
        let out = deb_src_stanzas(sources);
        assert_eq!(out.matches("Types: deb-src").count(), 2, "{out}");
        assert!(out.contains("Suites: bookworm bookworm-updates\n"));
        assert!(out.contains("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"));
        assert!(out.contains("URIs: http://deb.debian.org/debian-security"));
        assert!(!out.contains('#'));
        assert!(!out.contains("http://x"));
    }

    #[test]
    fn mirrors_one_line_entries() {
        let out = deb_src_lines(
            "deb http://deb.debian.org/debian bookworm main\n# deb http://old\ndeb-src http://a b c\n",
        );
        assert_eq!(out, "deb-src http://deb.debian.org/debian bookworm main\n");
    }
}
