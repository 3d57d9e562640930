//! Finding and reaching the cluster the tests run against.
//!
//! `KUBECONFIG` when set, else the local control plane's kubeconfig. An unreachable cluster is an error
//! that says how to start one; tests never skip silently.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::paths::DevPaths;

/// How to start the local control plane, quoted in every "cannot reach" error.
pub const START_HINT: &str = "start the local control plane with `cargo xtask cluster up` \
     (or set KUBECONFIG to a reachable cluster)";

/// Where the cluster configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// The `KUBECONFIG` environment variable (possibly several paths).
    Env(OsString),
    /// The local control plane's kubeconfig.
    Local(std::path::PathBuf),
}

impl KubeconfigSource {
    /// The value to pass as `KUBECONFIG` to child processes (kubectl, the project's binaries).
    #[must_use]
    pub fn as_env_value(&self) -> OsString {
        match self {
            Self::Env(value) => value.clone(),
            Self::Local(path) => path.clone().into_os_string(),
        }
    }

    /// `KUBECONFIG` when set, else the local control plane's kubeconfig path.
    #[must_use]
    pub fn from_env() -> Self {
        match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            Some(value) => Self::Env(value),
            None => Self::Local(DevPaths::from_env().kubeconfig()),
        }
    }
}

impl std::fmt::Display for KubeconfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Env(value) => write!(f, "KUBECONFIG={}", value.to_string_lossy()),
            Self::Local(path) => write!(f, "local control plane kubeconfig {}", path.display()),
        }
    }
}

/// A resolved cluster: its client configuration and where it came from.
#[derive(Clone)]
pub struct Target {
    /// Client configuration (plain data; build one `Client` per tokio runtime from it).
    pub config: Config,
    /// Where it came from.
    pub source: KubeconfigSource,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.config.cluster_url)
            .field("source", &self.source)
            .finish()
    }
}

impl Target {
    /// Resolves the configuration without contacting the server.
    ///
    /// # Errors
    /// When the kubeconfig is missing or unreadable.
    pub async fn resolve() -> anyhow::Result<Self> {
        Self::resolve_from(KubeconfigSource::from_env()).await
    }

    /// Resolves the configuration from a given source without contacting the server.
    ///
    /// # Errors
    /// When the kubeconfig is missing or unreadable.
    pub async fn resolve_from(source: KubeconfigSource) -> anyhow::Result<Self> {
        let kubeconfig = match &source {
            KubeconfigSource::Env(_) => Kubeconfig::read().with_context(|| format!("reading {source}"))?,
            KubeconfigSource::Local(path) => {
                if !path.exists() {
                    bail!(
                        "no cluster: KUBECONFIG is not set and {} does not exist; {START_HINT}",
                        path.display()
                    );
                }
                Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?
            }
        };
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading {source}"))?;
        Ok(Self { config, source })
    }

    /// A client for this cluster, bound to the current tokio runtime.
    ///
    /// # Errors
    /// When the client cannot be built (bad TLS material).
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::try_from(self.config.clone()).context("building a Kubernetes client")
    }

    /// A client after proving the server answers (`/version`) within 10 s.
    ///
    /// # Errors
    /// When the server does not answer; the message says how to start the local control plane.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        let client = self.client()?;
        match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
            Ok(Ok(_)) => Ok(client),
            Ok(Err(err)) => bail!(
                "cannot reach the cluster at {} ({}): {err}; {START_HINT}",
                self.config.cluster_url,
                self.source
            ),
            Err(_) => bail!(
                "the cluster at {} ({}) did not answer within 10 s; {START_HINT}",
                self.config.cluster_url,
                self.source
            ),
        }
    }
}

/// Parsed server version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version (20, 28, ...).
    pub minor: u32,
}

impl ServerVersion {
    /// Parses `major`/`minor` as the server reports them (`"28+"` on some distributions), falling back to
    /// `gitVersion` (`v1.20.2`). `None` when neither parses.
    #[must_use]
    pub fn parse(info: &k8s_openapi::apimachinery::pkg::version::Info) -> Option<Self> {
        fn number(s: &str) -> Option<u32> {
            let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        }
        if let (Some(major), Some(minor)) = (number(&info.major), number(&info.minor)) {
            return Some(Self { major, minor });
        }
        let mut parts = info.git_version.trim_start_matches('v').split('.');
        Some(Self {
            major: number(parts.next()?)?,
            minor: number(parts.next()?)?,
        })
    }

    /// Asks the server.
    ///
    /// # Errors
    /// When the server does not answer or reports an unparseable version.
    pub async fn of(client: &Client) -> anyhow::Result<Self> {
        let info = client.apiserver_version().await.context("GET /version")?;
        Self::parse(&info).with_context(|| format!("unparseable server version {info:?}"))
    }

    /// True from the given minor version of Kubernetes 1.x on.
    #[must_use]
    pub fn at_least(self, minor: u32) -> bool {
        self >= Self { major: 1, minor }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::version::Info;

    use super::*;

    #[tokio::test]
    async fn a_missing_local_kubeconfig_says_how_to_start_the_cluster() {
        let source = KubeconfigSource::Local("/nonexistent/kai-dev/cluster/kubeconfig".into());
        let err = Target::resolve_from(source).await.expect_err("no kubeconfig");
        assert!(err.to_string().contains("cargo xtask cluster up"), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_fails_with_the_start_hint() {
        // Port 1 on loopback: nothing listens, the connection is refused at once.
        let dir = std::env::temp_dir().join(format!("e2e-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1', \
             insecure-skip-tls-verify: true}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n\
             users:\n- name: u\n  user: {token: t}\ncurrent-context: c\n",
        )
        .expect("write");
        let target = Target::resolve_from(KubeconfigSource::Local(path))
            .await
            .expect("resolves");
        let Err(err) = target.connect().await else {
            panic!("connected to nothing")
        };
        assert!(err.to_string().contains("cargo xtask cluster up"), "{err}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    fn info(major: &str, minor: &str, git: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: git.into(),
            ..Info::default()
        }
    }

    #[test]
    fn parses_versions_as_servers_report_them() {
        assert_eq!(
            ServerVersion::parse(&info("1", "20", "v1.20.2")),
            Some(ServerVersion { major: 1, minor: 20 })
        );
        assert_eq!(
            ServerVersion::parse(&info("1", "28+", "v1.28.3-eks")),
            Some(ServerVersion { major: 1, minor: 28 })
        );
        assert_eq!(
            ServerVersion::parse(&info("", "", "v1.20.2")),
            Some(ServerVersion { major: 1, minor: 20 })
        );
        assert_eq!(
            ServerVersion::parse(&info("", "", "v0.0.0-master")),
            Some(ServerVersion { major: 0, minor: 0 })
        );
        assert_eq!(ServerVersion::parse(&info("", "", "")), None);
        assert!(ServerVersion { major: 1, minor: 25 }.at_least(25));
        assert!(!ServerVersion { major: 1, minor: 20 }.at_least(25));
    }
}
