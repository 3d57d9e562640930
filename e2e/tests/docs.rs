//! The user walkthroughs in `docs/walkthroughs/` run as written: every ```sh block of a walkthrough, in
//! order, each in a bash of its own (`set -euo pipefail`; so a block never depends on a shell variable
//! of an earlier one and can be copied alone) from the workspace root, `KUBECONFIG` pointing at a copy of the
//! cluster's kubeconfig whose current namespace is a fresh test namespace and the project's kubectl first
//! on `PATH`. The podgrouper and the scheduler run with the arguments and configuration the chart renders
//! for `--set global.gpuSharing=true`, serving the whole cluster (no node pool; the GPU-sharing webhook is
//! registered for the test's namespace only, at the scheduler's loopback port), and the fake GPU nodes the
//! walkthrough's prerequisites ask for (`cargo xtask nodes create ...`) are created for the test with a
//! node agent playing their kubelet.
//!
//! Because the components serve the whole cluster, these tests are ignored by default; run them alone:
//! `cargo test -p e2e --test docs -- --ignored --test-threads=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use e2e::component::{Component, free_port, http_status};
use e2e::webhook::LocalWebhook;
use e2e::{DevPaths, FakeNodes, TestEnv};

/// What a walkthrough's prerequisites ask for: `cargo xtask nodes create --prefix P --count N --gpus G
/// --label K=V`, read from the walkthrough itself so the test creates the nodes its reader creates.
#[derive(Debug, PartialEq, Eq)]
struct NodeRequest {
    count: usize,
    gpus: u32,
    label: Option<(String, String)>,
}

fn node_request(markdown: &str) -> anyhow::Result<NodeRequest> {
    let line = markdown
        .lines()
        .find(|l| l.trim_start().starts_with("cargo xtask nodes create"))
        .context("the walkthrough names no `cargo xtask nodes create` command")?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let value = |flag: &str| {
        words
            .iter()
            .position(|w| *w == flag)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    let count = value("--count").unwrap_or("1").parse()?;
    let gpus = value("--gpus").unwrap_or("8").parse()?;
    let label = value("--label")
        .map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .with_context(|| format!("--label {l} is not KEY=VALUE"))
        })
        .transpose()?;
    Ok(NodeRequest { count, gpus, label })
}

/// The ```sh blocks of a Markdown text, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let fence = line.trim_start();
        match &mut current {
            None if fence.starts_with("```") => {
                current = (fence.trim_start_matches('`').trim() == "sh").then(String::new);
                if current.is_none() {
                    // Skip a non-sh block: mark it with a sentinel so its closing fence is consumed.
                    current = Some("\u{0}".to_owned());
                }
            }
            Some(block) if fence.starts_with("```") => {
                if !block.starts_with('\u{0}') {
                    blocks.push(std::mem::take(block));
                }
                current = None;
            }
            Some(block) if !block.starts_with('\u{0}') => {
                block.push_str(line);
                block.push('\n');
            }
            Some(_) | None => {}
        }
    }
    blocks
}

static BUILT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

async fn build() -> anyhow::Result<()> {
    BUILT
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(|| {
                for bin in ["kai-scheduler", "kai-podgrouper", "kai"] {
                    Component::build(bin)?;
                }
                anyhow::Ok(())
            })
            .await?
        })
        .await?;
    Ok(())
}

/// Starts the podgrouper and the scheduler as the chart renders them with GPU sharing on (as `cargo
/// xtask demo` does), serving the whole cluster, and waits until both are ready. Without leader
/// election: each test's processes are killed at its end without releasing a Lease, and the next
/// test's would wait it out.
fn start_components(t: &TestEnv, dir: &Path, webhook: &LocalWebhook) -> anyhow::Result<()> {
    let values = [("global.gpuSharing", "true"), ("global.logFormat", "plain")];
    for spec in e2e::chart::rendered_components(&values)? {
        let port = free_port()?;
        let mut overrides = vec![
            ("admin-address", format!("127.0.0.1:{port}")),
            ("leader-elect", "false".to_owned()),
        ];
        // The GPU-sharing webhook, called at this process's loopback port for the test's namespace.
        if spec.flag("webhook-address").is_some() {
            overrides.extend(webhook.scheduler_flags());
        }
        let overrides: Vec<(&str, &str)> = overrides.iter().map(|(f, v)| (*f, v.as_str())).collect();
        let args = spec.local_args(&dir.join(&spec.component), &overrides)?;
        t.start_component(&spec.component, &spec.binary, &args)?;
        let deadline = Instant::now() + Duration::from_secs(90);
        while http_status(port, "/readyz") != Some(200) {
            if Instant::now() > deadline {
                bail!("{} not ready after 90 s", spec.component);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// A copy of the cluster's kubeconfig whose current context's namespace is the test's.
fn kubeconfig_for(t: &TestEnv, dir: &Path) -> anyhow::Result<PathBuf> {
    let source = t.kubeconfig_env();
    let first = std::env::split_paths(&source)
        .next()
        .context("no kubeconfig path")?;
    let copy = dir.join("kubeconfig");
    std::fs::copy(&first, &copy)
        .with_context(|| format!("copying {} to {}", first.display(), copy.display()))?;
    let status = Command::new(DevPaths::from_env().kubectl())
        .arg("--kubeconfig")
        .arg(&copy)
        .args(["config", "set-context", "--current", "--namespace", t.namespace()])
        .status()?;
    if !status.success() {
        bail!("kubectl config set-context failed ({status})");
    }
    Ok(copy)
}

/// Runs one walkthrough: its nodes, the components, then every ```sh block in order.
async fn run_walkthrough(file: &str) -> anyhow::Result<()> {
    let root = e2e::paths::workspace_root();
    let path = root.join("docs/walkthroughs").join(file);
    let markdown = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let blocks = sh_blocks(&markdown);
    assert!(!blocks.is_empty(), "{file} has no ```sh block");
    let request = node_request(&markdown)?;

    build().await?;
    let t = TestEnv::start(&format!("docs-{file}")).await?;
    let mut nodes = FakeNodes::new("gpu").count(request.count).gpus(request.gpus);
    if let Some((key, value)) = &request.label {
        nodes = nodes.label(key, value);
    }
    t.create_nodes(nodes).await?;
    let dir = e2e::paths::target_dir().join("docs-tests").join(t.namespace());
    std::fs::create_dir_all(&dir)?;
    let webhook = t.register_gpu_webhook().await?;
    start_components(&t, &dir, &webhook)?;
    webhook
        .wait_until_serving(t.client(), Duration::from_secs(60))
        .await?;
    let kubeconfig = kubeconfig_for(&t, &dir)?;
    let path_env = std::env::join_paths(std::iter::once(DevPaths::from_env().k8s_bin_dir()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))?;

    for (i, block) in blocks.iter().enumerate() {
        let script = format!("set -euo pipefail\n{block}");
        let started = Instant::now();
        let mut command = tokio::process::Command::new("timeout");
        command
            .args(["180", "bash", "-c", &script])
            .current_dir(&root)
            .env("KUBECONFIG", &kubeconfig)
            .env("PATH", &path_env)
            .env_remove("RUST_LOG");
        // As a reader's shell: without the variables cargo sets for this test, which would make a
        // block's `cargo run` rebuild the TLS stack (ring's build script watches them; see
        // `Component::build`).
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
        let output = command.output().await.context("running bash")?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!(
            "--- {file} block {} ({:.1}s)\n{block}--- output\n{stdout}{stderr}",
            i + 1,
            started.elapsed().as_secs_f64()
        );
        if !output.status.success() {
            t.remove_webhook(&webhook).await?;
            bail!(
                "{file}: sh block {} failed ({}):\n{block}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n{}",
                i + 1,
                output.status,
                t.report().await
            );
        }
    }
    t.remove_webhook(&webhook).await?;
    t.finish().await
}

const IGNORED: &str =
    "serves the whole cluster; run alone: cargo test -p e2e --test docs -- --ignored --test-threads=1";

#[tokio::test]
#[ignore = "serves the whole cluster; run alone: cargo test -p e2e --test docs -- --ignored --test-threads=1"]
async fn walkthrough_seed_000_podgroups() -> anyhow::Result<()> {
    run_walkthrough("seed-000-podgroups.md").await
}

#[tokio::test]
#[ignore = "serves the whole cluster; run alone: cargo test -p e2e --test docs -- --ignored --test-threads=1"]
async fn walkthrough_seed_001_kubeflow_trainer() -> anyhow::Result<()> {
    run_walkthrough("seed-001-kubeflow-trainer.md").await
}

#[tokio::test]
#[ignore = "serves the whole cluster; run alone: cargo test -p e2e --test docs -- --ignored --test-threads=1"]
async fn walkthrough_seed_002_ray_queues_gpu_sharing() -> anyhow::Result<()> {
    run_walkthrough("seed-002-ray-queues-gpu-sharing.md").await
}

#[tokio::test]
#[ignore = "serves the whole cluster; run alone: cargo test -p e2e --test docs -- --ignored --test-threads=1"]
async fn walkthrough_seed_003_volcano_podgroup() -> anyhow::Result<()> {
    run_walkthrough("seed-003-volcano-podgroup.md").await
}

/// Every walkthrough in `docs/walkthroughs/` has a test above, and the parsing the tests rely on works.
#[test]
fn every_walkthrough_has_a_test_and_parses() -> anyhow::Result<()> {
    let source = include_str!("docs.rs");
    let dir = e2e::paths::workspace_root().join("docs/walkthroughs");
    let mut found = 0;
    for entry in std::fs::read_dir(&dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".md") {
            continue;
        }
        found += 1;
        assert!(
            source.contains(&format!("run_walkthrough(\"{name}\")")),
            "{name} has no test in e2e/tests/docs.rs"
        );
        let markdown = std::fs::read_to_string(dir.join(&name))?;
        assert!(!sh_blocks(&markdown).is_empty(), "{name} has no ```sh block");
        node_request(&markdown)?;
    }
    assert_eq!(found, 4, "one walkthrough per seed");
    assert!(
        source.matches(IGNORED).count() >= 5,
        "every walkthrough test is ignored with the same reason"
    );
    Ok(())
}

#[test]
fn sh_blocks_are_taken_in_order_and_other_fences_skipped() {
    let md = "a\n```sh\necho one\n```\n```text\nnot run\n```\n```console\n$ cargo xtask demo\n```\n```sh\necho two\n```\n";
    assert_eq!(sh_blocks(md), ["echo one\n", "echo two\n"]);
    let request =
        node_request("```console\ncargo xtask nodes create --prefix gpu --count 3 --gpus 2 --label a=b\n```")
            .unwrap();
    assert_eq!(
        request,
        NodeRequest {
            count: 3,
            gpus: 2,
            label: Some(("a".into(), "b".into()))
        }
    );
}
