//! The `kai` CLI against a real API server, with the scheduler serving the test's node pool: `kai explain
//! pg` says why a gang waits and what would let it run, `kai queues` shows the tree with quota and
//! allocation, `kai top nodes` the GPUs per node, `-o json` parses, and `kubectl kai` works as a plugin.
//!
//! Run: `cargo test -p e2e --test cli`.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use e2e::TestEnv;
use e2e::component::Component;
use e2e::workloads::{apply, bound, job, pod_group, pods, pool_nodes, queue, queue_name, start};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs a built binary of the workspace with the test cluster's kubeconfig; its stdout, or an error with
/// stderr when it fails.
fn run(t: &TestEnv, program: OsString, args: &[&str], path: Option<OsString>) -> anyhow::Result<String> {
    let mut command = Command::new(&program);
    command
        .args(args)
        .env("KUBECONFIG", t.kubeconfig_env())
        .stdin(Stdio::null());
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let out = command
        .output()
        .with_context(|| format!("running {}", program.to_string_lossy()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{stdout}\n{}",
        program.to_string_lossy(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

fn kai(t: &TestEnv, args: &[&str]) -> anyhow::Result<String> {
    run(t, Component::binary_path("kai").into(), args, None)
}

#[tokio::test]
async fn explain_queues_and_top_describe_the_cluster_as_the_scheduler_sees_it() -> anyhow::Result<()> {
    tokio::task::spawn_blocking(|| {
        Component::build("kai")?;
        Component::build("kubectl-kai")
    })
    .await??;
    let t = start("cli", &[]).await?;
    let ns = t.namespace().to_owned();
    let pool = ["--node-pool", ns.as_str()];
    let nodes = t.create_nodes(pool_nodes(&t, "cli").count(2).gpus(2)).await?;
    let team = queue_name(&t, "team");
    apply(&t, &[queue(&team, None, (4, -1, 1))]).await?;

    // A 2-pod gang that fits, and an 8-pod gang that cannot (4 GPUs in the pool).
    apply(
        &t,
        &[
            pod_group(
                &t,
                "small",
                json!({ "minMember": 2, "queue": team, "priorityClassName": "train" }),
            ),
            job(&t, "small", "small", 2, 1, json!({})),
            pod_group(
                &t,
                "big",
                json!({ "minMember": 8, "queue": team, "priorityClassName": "train" }),
            ),
            job(&t, "big", "big", 8, 1, json!({})),
        ],
    )
    .await?;
    t.wait_for_pods("the small gang bound", "job-name=small", TIMEOUT, |p| {
        p.len() == 2 && bound(p) == 2
    })
    .await?;
    t.wait_for_pods("the big gang's pods", "job-name=big", TIMEOUT, |p| p.len() == 8)
        .await?;

    // explain: the shortfall in numbers, and what would have to change.
    let mut args = vec!["explain", "pg", "big", "-n", ns.as_str()];
    args.extend_from_slice(&pool);
    let explained = kai(&t, &args)?;
    assert!(explained.contains("PodGroup"), "{explained}");
    assert!(explained.contains("waits"), "the verdict: {explained}");
    assert!(
        explained.contains("8 pods need 8 nvidia.com/gpu, 2 free"),
        "the shortfall: {explained}"
    );
    assert!(explained.contains(&team), "the gang's queue: {explained}");
    args.extend_from_slice(&["-o", "json"]);
    let json_out: Value = serde_json::from_str(&kai(&t, &args)?).context("explain -o json")?;
    assert!(json_out.is_object(), "{json_out}");
    assert_eq!(
        bound(&pods(&t, "job-name=big").await?),
        0,
        "explain writes nothing and the gang stays whole"
    );

    // queues: the test's queue with its quota and the 2 GPUs allocated.
    let mut args = vec!["queues"];
    args.extend_from_slice(&pool);
    let queues = kai(&t, &args)?;
    let line = queues
        .lines()
        .find(|l| l.contains(&team))
        .with_context(|| format!("{team} in:\n{queues}"))?;
    assert!(line.contains('4'), "quota 4 GPUs: {line}");
    assert!(line.contains('2'), "2 GPUs allocated: {line}");
    args.extend_from_slice(&["-o", "json"]);
    let queues_json: Value = serde_json::from_str(&kai(&t, &args)?).context("queues -o json")?;
    assert!(
        queues_json.to_string().contains(&team),
        "the queue in JSON: {queues_json}"
    );

    // top: both nodes of the pool, 2 of 4 GPUs used in all.
    let mut args = vec!["top", "nodes"];
    args.extend_from_slice(&pool);
    let top = kai(&t, &args)?;
    for node in &nodes {
        assert!(top.contains(node.as_str()), "{node} in:\n{top}");
    }

    // As a kubectl plugin: kubectl finds kubectl-kai on PATH.
    let kubectl = t.kubectl()?;
    let bin_dir = Component::binary_path("kubectl-kai")
        .parent()
        .context("the binaries' directory")?
        .to_owned();
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let mut args = vec!["kai", "queues"];
    args.extend_from_slice(&pool);
    let plugin = run(&t, kubectl.path().as_os_str().to_owned(), &args, Some(path))?;
    assert!(plugin.contains(&team), "kubectl kai queues:\n{plugin}");

    let queues_api: kube::Api<api::Queue> = kube::Api::all(t.client().clone());
    let _ = queues_api.delete(&team, &Default::default()).await;
    t.finish().await
}
