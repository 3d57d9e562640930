//! `cargo xtask cluster up | down | status`: a real Kubernetes v1.20.2 control plane (etcd,
//! kube-apiserver, kube-controller-manager) on loopback, built from Debian's packages.
//!
//! State lives in `$KAI_DEV_HOME` (default `~/.cache/kai-dev`) so every worktree shares one cluster:
//! `k8s/v1.20.2/bin/` holds the cached binaries, `cluster/` the runtime state (etcd data, pki, token
//! file, pid files, logs, kubeconfig). `up` is idempotent; each step is named so a failure says which
//! step failed and why.

mod apt;
mod build;
mod daemon;
mod pki;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use e2e::DevPaths;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use self::daemon::Daemon;
use self::pki::Pki;

/// Environment variable shifting every port by the same amount, for machines where the defaults are
/// taken. Everything sharing one state directory must use the same value.
pub(crate) const ENV_PORT_OFFSET: &str = "KAI_DEV_PORT_OFFSET";

/// The API server's audit policy: request metadata (user, verb, resource, response code, the
/// authorizer's decision; no bodies) of every ServiceAccount of the components' namespace, nothing else.
/// `cargo xtask rbac-audit` compares what the components did with what the chart grants them.
pub(crate) const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: [\"system:serviceaccounts:kai-scheduler\"]
  - level: None
";

/// Loopback ports of the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ports {
    /// etcd client port (default 12379).
    pub(crate) etcd_client: u16,
    /// etcd peer port (default 12380).
    pub(crate) etcd_peer: u16,
    /// kube-apiserver secure port (default 16443).
    pub(crate) apiserver: u16,
    /// kube-controller-manager secure port, for health checks (default 16257).
    pub(crate) controller_manager: u16,
}

impl Ports {
    pub(crate) const DEFAULT: Self = Self {
        etcd_client: 12379,
        etcd_peer: 12380,
        apiserver: 16443,
        controller_manager: 16257,
    };

    /// The defaults shifted by `$KAI_DEV_PORT_OFFSET`.
    pub(crate) fn from_env() -> anyhow::Result<Self> {
        let offset: u16 = match std::env::var(ENV_PORT_OFFSET) {
            Ok(value) if !value.trim().is_empty() => value
                .trim()
                .parse()
                .with_context(|| format!("{ENV_PORT_OFFSET}={value} is not a port offset"))?,
            _ => 0,
        };
        let shift = |port: u16| {
            port.checked_add(offset)
                .with_context(|| format!("{ENV_PORT_OFFSET}={offset} is too large"))
        };
        let d = Self::DEFAULT;
        Ok(Self {
            etcd_client: shift(d.etcd_client)?,
            etcd_peer: shift(d.etcd_peer)?,
            apiserver: shift(d.apiserver)?,
            controller_manager: shift(d.controller_manager)?,
        })
    }
}

/// Runs a command, failing with its output when it exits non-zero.
pub(crate) fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {what}"))?;
    if !output.status.success() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        bail!(
            "{what} failed ({}):\n{}\n{}",
            output.status,
            last_lines(&stdout, 20),
            last_lines(&stderr, 20)
        );
    }
    Ok(())
}

/// Runs a command appending its output to `log`, failing with the log's tail.
pub(crate) fn run_logged(command: &mut Command, log: &Path, what: &str) -> anyhow::Result<()> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let status = command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .with_context(|| format!("starting {what}"))?;
    if !status.success() {
        bail!(
            "{what} failed ({status}); last lines of {}:\n{}",
            log.display(),
            e2e::component::tail(log, 30)
        );
    }
    Ok(())
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs one named step, printing it and its duration; a failure names the step.
fn step<T>(name: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    println!("==> {name}");
    let started = Instant::now();
    let value = f().with_context(|| format!("step `{name}` failed"))?;
    println!("    ok ({:.1}s)", started.elapsed().as_secs_f64());
    Ok(value)
}

/// The three processes and where their files go.
struct Layout {
    paths: DevPaths,
    pki: Pki,
    ports: Ports,
}

impl Layout {
    /// The ports are `$KAI_DEV_PORT_OFFSET`'s, unless a cluster runs: then the ones it was started with.
    fn new() -> anyhow::Result<Self> {
        let paths = DevPaths::from_env();
        let pki = Pki::at(&paths.cluster_dir());
        let wanted = Ports::from_env()?;
        let mut layout = Self {
            paths,
            pki,
            ports: wanted,
        };
        if let Some(recorded) = layout.recorded_ports() {
            layout.ports = recorded;
            if layout.daemons().iter().any(|d| d.running_pid().is_some()) {
                if recorded != wanted && std::env::var_os(ENV_PORT_OFFSET).is_some() {
                    println!(
                        "note: the running cluster keeps its ports (apiserver {}); {ENV_PORT_OFFSET} applies after \
                         `cargo xtask cluster down`",
                        recorded.apiserver
                    );
                }
            } else {
                layout.ports = wanted;
            }
        }
        Ok(layout)
    }

    fn ports_file(&self) -> std::path::PathBuf {
        self.dir().join("ports")
    }

    fn recorded_ports(&self) -> Option<Ports> {
        let text = std::fs::read_to_string(self.ports_file()).ok()?;
        let numbers: Vec<u16> = text.split_whitespace().filter_map(|n| n.parse().ok()).collect();
        match numbers[..] {
            [etcd_client, etcd_peer, apiserver, controller_manager] => Some(Ports {
                etcd_client,
                etcd_peer,
                apiserver,
                controller_manager,
            }),
            _ => None,
        }
    }

    fn record_ports(&self) -> anyhow::Result<()> {
        let p = self.ports;
        std::fs::create_dir_all(self.dir())?;
        std::fs::write(
            self.ports_file(),
            format!(
                "{} {} {} {}\n",
                p.etcd_client, p.etcd_peer, p.apiserver, p.controller_manager
            ),
        )
        .context("recording the ports")
    }

    fn dir(&self) -> std::path::PathBuf {
        self.paths.cluster_dir()
    }

    fn audit_policy(&self) -> std::path::PathBuf {
        self.dir().join("audit-policy.yaml")
    }

    /// Writes [`AUDIT_POLICY`] (when it differs) and makes the audit log's directory.
    fn write_audit_policy(&self) -> anyhow::Result<()> {
        let path = self.audit_policy();
        if std::fs::read_to_string(&path).ok().as_deref() != Some(AUDIT_POLICY) {
            std::fs::write(&path, AUDIT_POLICY).with_context(|| format!("writing {}", path.display()))?;
        }
        let log = self.paths.audit_log();
        let dir = log.parent().context("audit log without a directory")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        println!("    {} -> {}", path.display(), log.display());
        Ok(())
    }

    fn controller_manager_kubeconfig(&self) -> std::path::PathBuf {
        self.dir().join("controller-manager.kubeconfig")
    }

    fn daemon(
        &self,
        name: &'static str,
        binary: std::path::PathBuf,
        args: Vec<String>,
        ports: Vec<u16>,
    ) -> Daemon {
        Daemon {
            name,
            binary,
            args,
            ports,
            run_dir: self.dir().join("run"),
            log_dir: self.dir().join("logs"),
        }
    }

    fn etcd(&self) -> Daemon {
        let client = format!("http://127.0.0.1:{}", self.ports.etcd_client);
        let peer = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        let args = vec![
            "--name=kai-dev".to_owned(),
            format!("--data-dir={}", self.dir().join("etcd").display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=kai-dev={peer}"),
            "--quota-backend-bytes=4294967296".to_owned(),
        ];
        self.daemon(
            "etcd",
            "/usr/bin/etcd".into(),
            args,
            vec![self.ports.etcd_client, self.ports.etcd_peer],
        )
    }

    fn apiserver(&self) -> Daemon {
        let p = |path: &Path| path.display().to_string();
        let args = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.ports.etcd_client),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", self.ports.apiserver),
            "--insecure-port=0".to_owned(),
            format!("--cert-dir={}", self.dir().join("apiserver").display()),
            format!("--tls-cert-file={}", p(&self.pki.serving_cert)),
            format!("--tls-private-key-file={}", p(&self.pki.serving_key)),
            format!("--client-ca-file={}", p(&self.pki.ca_cert)),
            format!("--token-auth-file={}", p(&self.pki.token_file)),
            "--authorization-mode=RBAC".to_owned(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            format!("--service-account-key-file={}", p(&self.pki.sa_pub)),
            format!("--service-account-signing-key-file={}", p(&self.pki.sa_key)),
            "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
            // The endpoint reconciler rejects a loopback advertise address every 10 s.
            "--endpoint-reconciler-type=none".to_owned(),
            "--allow-privileged=true".to_owned(),
            "--max-requests-inflight=1000".to_owned(),
            "--max-mutating-requests-inflight=500".to_owned(),
            "--profiling=false".to_owned(),
            // What the components' ServiceAccounts do, for `cargo xtask rbac-audit` (AUDIT_POLICY).
            format!("--audit-policy-file={}", p(&self.audit_policy())),
            format!("--audit-log-path={}", p(&self.paths.audit_log())),
            "--audit-log-maxsize=100".to_owned(),
            "--audit-log-maxbackup=5".to_owned(),
            "--v=1".to_owned(),
        ];
        self.daemon(
            "kube-apiserver",
            self.paths.k8s_bin("kube-apiserver"),
            args,
            vec![self.ports.apiserver],
        )
    }

    fn controller_manager(&self) -> Daemon {
        let p = |path: &Path| path.display().to_string();
        let args = vec![
            format!("--kubeconfig={}", p(&self.controller_manager_kubeconfig())),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", self.ports.controller_manager),
            "--port=0".to_owned(),
            format!("--tls-cert-file={}", p(&self.pki.serving_cert)),
            format!("--tls-private-key-file={}", p(&self.pki.serving_key)),
            // Without a kubelet the node lifecycle controller would taint and evict every fake node.
            "--controllers=*,-nodelifecycle".to_owned(),
            format!("--service-account-private-key-file={}", p(&self.pki.sa_key)),
            format!("--root-ca-file={}", p(&self.pki.ca_cert)),
            format!("--cluster-signing-cert-file={}", p(&self.pki.ca_cert)),
            format!("--cluster-signing-key-file={}", p(&self.pki.ca_key)),
            "--leader-elect=false".to_owned(),
            "--kube-api-qps=200".to_owned(),
            "--kube-api-burst=400".to_owned(),
            "--profiling=false".to_owned(),
            "--v=1".to_owned(),
        ];
        self.daemon(
            "kube-controller-manager",
            self.paths.k8s_bin("kube-controller-manager"),
            args,
            vec![self.ports.controller_manager],
        )
    }

    /// In start order.
    fn daemons(&self) -> [Daemon; 3] {
        [self.etcd(), self.apiserver(), self.controller_manager()]
    }
}

/// Serializes `up`/`down` across worktrees sharing one state directory.
fn lock(paths: &DevPaths) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(paths.home()).with_context(|| format!("creating {}", paths.home().display()))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(paths.home().join(".lock"))
        .context("opening the lock file")?;
    if file.try_lock().is_err() {
        println!("    waiting for another `cargo xtask cluster` to finish ...");
        file.lock().context("locking")?;
    }
    Ok(file)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")
}

/// `cargo xtask cluster up`.
pub(crate) fn up() -> anyhow::Result<()> {
    let started = Instant::now();
    let layout = Layout::new()?;
    let _lock = step("lock state directory", || lock(&layout.paths))?;
    let daemons = layout.daemons();
    let all_running = daemons.iter().all(|d| d.running_pid().is_some());
    let cached = build::is_cached(&layout.paths);

    // One apt session, so `apt-get update` runs at most as often as needed across both steps.
    let mut apt = None;
    step("apt packages", || {
        let mut needed = vec!["etcd-server"];
        if !layout.pki.is_complete() {
            needed.push("openssl");
        }
        if !cached {
            needed.extend(build::BUILD_PACKAGES);
        }
        if needed.iter().all(|p| already_there(p)) && all_running {
            println!("    nothing to install");
            return Ok(());
        }
        apt.insert(apt::Apt::new()?).ensure_packages(&needed)
    })?;

    if cached {
        println!(
            "==> kubernetes {} binaries: cached in {}",
            e2e::paths::K8S_VERSION,
            layout.paths.k8s_bin_dir().display()
        );
    } else {
        let dsc = step("fetch kubernetes source package", || {
            let apt = match &mut apt {
                Some(apt) => apt,
                None => apt.insert(apt::Apt::new()?),
            };
            build::ensure_source(apt, &layout.paths)
        })?;
        step(
            &format!(
                "build kubernetes {} (several minutes on 2 cores)",
                e2e::paths::K8S_VERSION
            ),
            || build::build(&layout.paths, &dsc),
        )?;
    }

    step("certificates, keys and admin token", || layout.pki.ensure())?;
    layout.record_ports()?;
    step("kubeconfig", || write_kubeconfigs(&layout))?;
    step("audit policy", || layout.write_audit_policy())?;

    let [etcd, apiserver, controller_manager] = daemons;
    step("etcd", || {
        report_start(&etcd, etcd.ensure_started()?);
        wait_for(&etcd, Duration::from_secs(30), || {
            etcd_healthy(layout.ports.etcd_client)
        })
    })?;
    let rt = runtime()?;
    let client = step("kube-apiserver", || {
        report_start(&apiserver, apiserver.ensure_started()?);
        rt.block_on(wait_apiserver(&layout, &apiserver))
    })?;
    step("kube-controller-manager", || {
        report_start(&controller_manager, controller_manager.ensure_started()?);
        rt.block_on(wait_controller_manager(&layout, &client, &controller_manager))
    })?;
    step("project CRDs, priority classes, queues, namespaces", || {
        let report = rt.block_on(e2e::install::install_project(&client, &e2e::paths::crds_dir()))?;
        println!("    {report}");
        Ok(())
    })?;
    println!(
        "cluster up in {:.1}s\n  kubeconfig: {}\n  use it:     export KUBECONFIG={}",
        started.elapsed().as_secs_f64(),
        layout.paths.kubeconfig().display(),
        layout.paths.kubeconfig().display()
    );
    Ok(())
}

fn already_there(package: &str) -> bool {
    match package {
        "etcd-server" => Path::new("/usr/bin/etcd").exists(),
        "openssl" => Path::new("/usr/bin/openssl").exists(),
        _ => false,
    }
}

fn report_start(daemon: &Daemon, (pid, started): (u32, bool)) {
    if started {
        println!("    started (pid {pid}, log {})", daemon.log_file().display());
    } else {
        println!("    already running (pid {pid})");
    }
}

fn write_kubeconfigs(layout: &Layout) -> anyhow::Result<()> {
    let ca = std::fs::read_to_string(&layout.pki.ca_cert).context("reading the CA certificate")?;
    let token = layout.pki.admin_token()?;
    let text = pki::kubeconfig(
        &format!("https://127.0.0.1:{}", layout.ports.apiserver),
        &ca,
        &token,
    )?;
    for path in [layout.paths.kubeconfig(), layout.controller_manager_kubeconfig()] {
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            pki::write_private(&path, &text)?;
        }
    }
    println!("    {}", layout.paths.kubeconfig().display());
    Ok(())
}

/// Polls `healthy` until true, failing with the daemon's log tail when it dies or times out.
fn wait_for(daemon: &Daemon, timeout: Duration, mut healthy: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if healthy() {
            return Ok(());
        }
        if daemon.running_pid().is_none() {
            bail!(
                "{} exited; last log lines ({}):\n{}",
                daemon.name,
                daemon.log_file().display(),
                daemon.log_tail(30)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "{} not healthy after {timeout:?}; last log lines:\n{}",
                daemon.name,
                daemon.log_tail(30)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// etcd's `/health` over plain HTTP/1.0 on loopback.
fn etcd_healthy(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

async fn client_from(path: &Path) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Client::try_from(config).context("building a client")
}

async fn get_text(client: &Client, path: &str) -> anyhow::Result<String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .context("building a request")?;
    Ok(client.request_text(request).await?)
}

async fn wait_apiserver(layout: &Layout, daemon: &Daemon) -> anyhow::Result<Client> {
    let client = client_from(&layout.paths.kubeconfig()).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last;
    loop {
        match get_text(&client, "/readyz").await {
            Ok(body) if body.trim() == "ok" => break,
            Ok(body) => last = body,
            Err(err) => last = format!("{err:#}"),
        }
        if daemon.running_pid().is_none() {
            bail!(
                "kube-apiserver exited; last log lines ({}):\n{}",
                daemon.log_file().display(),
                daemon.log_tail(30)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "kube-apiserver not ready after 120 s ({last}); last log lines:\n{}",
                daemon.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let version = client.apiserver_version().await?;
    println!(
        "    ready: {} at https://127.0.0.1:{}",
        version.git_version, layout.ports.apiserver
    );
    Ok(client)
}

/// Healthy (`/healthz`) and the token controller at work (the `default` ServiceAccount has its token
/// secret), which is what pods need before they can be created.
async fn wait_controller_manager(layout: &Layout, client: &Client, daemon: &Daemon) -> anyhow::Result<()> {
    let health = {
        let kubeconfig = Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kcm\n  cluster:\n    server: https://127.0.0.1:{}\n    \
             certificate-authority: {}\ncontexts:\n- name: kcm\n  context: {{cluster: kcm, user: anonymous}}\n\
             users:\n- name: anonymous\n  user: {{}}\ncurrent-context: kcm\n",
            layout.ports.controller_manager,
            layout.pki.ca_cert.display()
        ))?;
        Client::try_from(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)?
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::new();
    loop {
        let healthy = match get_text(&health, "/healthz").await {
            Ok(body) => body.trim() == "ok",
            Err(err) => {
                last = format!("{err:#}");
                false
            }
        };
        if healthy {
            match accounts.get_opt("default").await {
                Ok(Some(sa)) if sa.secrets.as_ref().is_some_and(|s| !s.is_empty()) => return Ok(()),
                Ok(_) => last = "healthy; waiting for the default ServiceAccount's token".to_owned(),
                Err(err) => last = format!("{err:#}"),
            }
        }
        if daemon.running_pid().is_none() {
            bail!(
                "kube-controller-manager exited; last log lines ({}):\n{}",
                daemon.log_file().display(),
                daemon.log_tail(30)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "kube-controller-manager not ready after 120 s ({last}); last log lines:\n{}",
                daemon.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `cargo xtask cluster down [--purge]`.
pub(crate) fn down(purge: bool) -> anyhow::Result<()> {
    let layout = Layout::new()?;
    let _lock = lock(&layout.paths)?;
    for daemon in layout.daemons().iter().rev() {
        step(&format!("stop {}", daemon.name), || {
            if daemon.stop(Duration::from_secs(20))? {
                println!("    stopped");
            } else {
                println!("    not running");
            }
            Ok(())
        })?;
    }
    if purge {
        step("remove cluster state", || {
            let dir = layout.dir();
            if dir.exists() {
                std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
                println!(
                    "    removed {} (cached binaries kept in {})",
                    dir.display(),
                    layout.paths.k8s_bin_dir().display()
                );
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// `cargo xtask cluster status`.
pub(crate) fn status() -> anyhow::Result<()> {
    let layout = Layout::new()?;
    println!("state directory: {}", layout.paths.home().display());
    let cached = build::is_cached(&layout.paths);
    println!(
        "binaries {}: {}",
        e2e::paths::K8S_VERSION,
        if cached {
            layout.paths.k8s_bin_dir().display().to_string()
        } else {
            "not built".to_owned()
        }
    );
    let mut all = true;
    for daemon in layout.daemons() {
        let ports: Vec<String> = daemon.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        match daemon.running_pid() {
            Some(pid) => println!(
                "  {:<24} running  pid {pid:<8} {}  log {}",
                daemon.name,
                ports.join(" "),
                daemon.log_file().display()
            ),
            None => {
                all = false;
                println!("  {:<24} stopped           {}", daemon.name, ports.join(" "));
            }
        }
    }
    println!("kubeconfig: {}", layout.paths.kubeconfig().display());
    println!("kubectl:    {}", layout.paths.k8s_bin("kubectl").display());
    if all {
        let rt = runtime()?;
        match rt.block_on(async {
            let client = client_from(&layout.paths.kubeconfig()).await?;
            anyhow::Ok(client.apiserver_version().await?)
        }) {
            Ok(version) => println!("server version: {}", version.git_version),
            Err(err) => println!("server not answering: {err:#}"),
        }
    } else {
        println!("start it with: cargo xtask cluster up");
    }
    Ok(())
}

/// A client for the cluster the tests would use (`KUBECONFIG`, else the local control plane).
pub(crate) async fn connect() -> anyhow::Result<Client> {
    e2e::Target::resolve().await?.connect().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_policy_records_the_components_service_accounts_only() {
        let policy: serde_json::Value = serde_yaml::from_str(AUDIT_POLICY).expect("YAML");
        assert_eq!(policy["apiVersion"], "audit.k8s.io/v1");
        let rules = policy["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0]["level"], "Metadata");
        assert_eq!(
            rules[0]["userGroups"],
            serde_json::json!([format!("system:serviceaccounts:{}", e2e::chart::NAMESPACE)]),
            "the chart's release namespace"
        );
        assert_eq!(rules[1], serde_json::json!({"level": "None"}), "nothing else");
    }
}
