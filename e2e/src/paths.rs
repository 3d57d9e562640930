//! Where the local control plane keeps its binaries and state, and where the workspace is.
//!
//! Owns the path layout shared by `cargo xtask cluster` (which creates it) and the tests (which read the
//! kubeconfig and run the matching kubectl). Everything lives outside the repository so several worktrees
//! share one cluster: `$KAI_DEV_HOME`, by default `~/.cache/kai-dev`.

use std::path::{Path, PathBuf};

/// Kubernetes version of the local control plane.
pub const K8S_VERSION: &str = "v1.20.2";

/// Environment variable overriding the state directory.
pub const ENV_DEV_HOME: &str = "KAI_DEV_HOME";

/// Environment variable overriding the kubectl the tests run.
pub const ENV_KUBECTL: &str = "KAI_KUBECTL";

/// The layout of the state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevPaths {
    home: PathBuf,
}

impl DevPaths {
    /// `$KAI_DEV_HOME`, else `$HOME/.cache/kai-dev`.
    #[must_use]
    pub fn from_env() -> Self {
        let home = match std::env::var_os(ENV_DEV_HOME).filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => {
                let user_home =
                    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
                user_home.join(".cache").join("kai-dev")
            }
        };
        Self { home }
    }

    /// A layout rooted at `home` (tests of the layout itself).
    #[must_use]
    pub fn at(home: impl Into<PathBuf>) -> Self {
        Self { home: home.into() }
    }

    /// The state directory itself.
    #[must_use]
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Everything about one Kubernetes version: downloaded sources, build area, binaries.
    #[must_use]
    pub fn k8s_dir(&self) -> PathBuf {
        self.home.join("k8s").join(K8S_VERSION)
    }

    /// Cached binaries of [`K8S_VERSION`].
    #[must_use]
    pub fn k8s_bin_dir(&self) -> PathBuf {
        self.k8s_dir().join("bin")
    }

    /// One cached binary (`kube-apiserver`, `kube-controller-manager`, `kube-scheduler`, `kubectl`).
    #[must_use]
    pub fn k8s_bin(&self, name: &str) -> PathBuf {
        self.k8s_bin_dir().join(name)
    }

    /// Runtime state of the running cluster: etcd data, certificates, keys, token file, pid files, logs.
    #[must_use]
    pub fn cluster_dir(&self) -> PathBuf {
        self.home.join("cluster")
    }

    /// The admin kubeconfig of the local control plane.
    #[must_use]
    pub fn kubeconfig(&self) -> PathBuf {
        self.cluster_dir().join("kubeconfig")
    }

    /// The API server's audit log (`cluster/audit/audit.log`; rotated files beside it): what the
    /// components' ServiceAccounts did, for `cargo xtask rbac-audit`.
    #[must_use]
    pub fn audit_log(&self) -> PathBuf {
        self.cluster_dir().join("audit").join("audit.log")
    }

    /// The kubectl the tests run: `$KAI_KUBECTL`, else the one built with the control plane.
    #[must_use]
    pub fn kubectl(&self) -> PathBuf {
        std::env::var_os(ENV_KUBECTL)
            .filter(|v| !v.is_empty())
            .map_or_else(|| self.k8s_bin("kubectl"), PathBuf::from)
    }
}

/// The workspace root (the directory holding the top-level `Cargo.toml`).
#[must_use]
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Cargo's target directory: `$CARGO_TARGET_DIR`, else `<workspace>/target`.
#[must_use]
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// Writes a file a test hands to a component (a scheduler configuration, say) to
/// `<target>/e2e-logs/files/<test>-<pid>/<name>`, beside the logs of the run (kept for reading after a
/// failure, gone with `cargo clean`; never left in the system's temporary directory), and returns its
/// path.
///
/// # Errors
/// When the directory or the file cannot be written.
pub fn test_file(test: &str, name: &str, contents: &str) -> std::io::Result<PathBuf> {
    let dir = target_dir()
        .join("e2e-logs")
        .join("files")
        .join(format!("{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, contents)?;
    Ok(path)
}

/// The generated CRDs of the project (`crds/`).
#[must_use]
pub fn crds_dir() -> PathBuf {
    workspace_root().join("crds")
}

/// Test fixtures (`e2e/fixtures/`).
#[must_use]
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_stable() {
        let paths = DevPaths::at("/x");
        assert_eq!(paths.kubeconfig(), Path::new("/x/cluster/kubeconfig"));
        assert_eq!(paths.audit_log(), Path::new("/x/cluster/audit/audit.log"));
        assert_eq!(
            paths.k8s_bin("kube-apiserver"),
            Path::new("/x/k8s/v1.20.2/bin/kube-apiserver")
        );
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).expect("read manifest");
        assert!(manifest.contains("[workspace]"));
        assert!(fixtures_dir().join("seeds").is_dir());
    }
}
