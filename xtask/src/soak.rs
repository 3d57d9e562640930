//! `cargo xtask soak`: churn for minutes at thousands of pods, and check the scheduler holds steady.
//!
//! Gangs of 1, 4 and 8 pods (explicit PodGroups, bare pods that run a few seconds on fake nodes) are
//! created and deleted continuously in a node pool of the soak's own, keeping about `--pods` pods alive.
//! A third of the gangs (all of 1 or 4 pods) share GPUs (`gpu-fraction: 0.5`, through the chart's GPU-sharing
//! webhook registered for the soak's namespace, served by the scheduler): at the end, once every pod is
//! gone, no pod's GPU-sharing ConfigMap and no GPU reservation pod may be left.
//! Every sample records the scheduler's resident memory (/proc) and its mean cycle time and binds (from
//! /metrics). It fails when memory or cycle time grows between the first and the last third of the run,
//! when nothing is bound, or when the scheduler stops answering. Refused binds are reported (a gang deleted
//! while its binds are in flight makes some; a pod bound twice would too, as the API server refuses it).
//! Not part of `cargo xtask ci`: it runs for minutes by design.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use api::keys;
use e2e::component::{Component, free_port, http_get, http_status};
use e2e::{DevPaths, FakeNodes, NodeAgent, RUN_SECONDS_ANNOTATION};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::cluster;

const POOL: &str = "kai-soak";
const NODE_OWNER: &str = "xtask-soak";
const GANG_SIZES: [u32; 3] = [1, 4, 8];

/// Options of `cargo xtask soak`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SoakArgs {
    /// How long to churn.
    #[arg(long, default_value_t = 5)]
    minutes: u64,
    /// Pods kept alive at once (about).
    #[arg(long, default_value_t = 2000)]
    pods: usize,
    /// Fake nodes (8 GPUs each).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Seconds between samples.
    #[arg(long, default_value_t = 15)]
    sample_seconds: u64,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    cycles: f64,
    cycle_seconds: f64,
    binds_ok: f64,
    binds_failed: f64,
    live_pods: usize,
}

pub(crate) fn run(args: &SoakArgs) -> anyhow::Result<()> {
    cluster::up()?;
    Component::build("kai-scheduler")?;
    crate::async_runtime()?.block_on(soak(args))
}

async fn soak(args: &SoakArgs) -> anyhow::Result<()> {
    let client = cluster::connect().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(POOL).await?.is_none() {
        let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": POOL } }))?;
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    let selector = e2e::nodes::owner_selector(NODE_OWNER);
    e2e::nodes::delete(&client, &selector).await?;
    let nodes = FakeNodes::new("soak")
        .owned_by(NODE_OWNER)
        .count(args.nodes)
        .gpus(8)
        .label(keys::NODE_POOL, POOL);
    e2e::nodes::create(&client, &nodes).await?;
    let agent = NodeAgent::start(client.clone(), &selector);

    let port = free_port()?;
    let log_dir = DevPaths::from_env().home().join("soak");
    std::fs::create_dir_all(&log_dir)?;
    // The chart's ServiceAccount and its permissions, as in the e2e tier.
    let rbac = e2e::chart_rbac::install(&client).await?;
    let source = e2e::Target::resolve().await?.source;
    let kubeconfig = rbac.write_kubeconfig("kai-scheduler", &source, &log_dir)?;
    // GPU sharing as the chart sets it up, its webhook sent only the soak namespace's pods.
    let webhook = e2e::webhook::LocalWebhook::register(&client, &rbac, POOL).await?;
    e2e::workloads::reservation_service_account(&client).await?;
    let config = log_dir.join("scheduler.yaml");
    std::fs::write(
        &config,
        "plugins:\n  gpusharing:\n    enabled: true\n    requireWebhook: true\n",
    )?;
    let mut scheduler_args = vec![
        "--node-pool".to_owned(),
        POOL.to_owned(),
        "--admin-address".to_owned(),
        format!("127.0.0.1:{port}"),
        "--log-level".to_owned(),
        "info".to_owned(),
        // Alone on its pool: no Lease (the binary elects by default).
        "--leader-elect=false".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
    ];
    scheduler_args.extend(webhook.scheduler_args());
    let mut scheduler = Component::start(
        "scheduler",
        "kai-scheduler",
        &scheduler_args,
        kubeconfig.as_os_str(),
        &log_dir,
    )?;
    let ready_by = Instant::now() + Duration::from_secs(60);
    while http_status(port, "/readyz") != Some(200) {
        if Instant::now() > ready_by {
            bail!(
                "the scheduler was not ready within 60 s; log: {}",
                scheduler.log_path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    webhook
        .wait_until_serving(&client, Duration::from_secs(60))
        .await?;
    let outcome = churn(&client, args, port, scheduler.pid()).await;
    // Everything goes, with the scheduler still running (it removes reservation pods without sharers).
    let pods: Api<Pod> = Api::namespaced(client.clone(), POOL);
    let _ = pods
        .delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
        .await;
    let groups: Api<api::PodGroup> = Api::namespaced(client.clone(), POOL);
    let _ = groups
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let leaks = leftovers(&client, &selector).await;
    let _ = scheduler.terminate(Duration::from_secs(5));
    agent.stop().await;
    let _ = webhook.remove(&client).await;
    e2e::nodes::delete(&client, &selector).await?;
    let samples = outcome.with_context(|| format!("scheduler log: {}", scheduler.log_path().display()))?;
    let leaks = leaks?;
    verdict(&samples)?;
    anyhow::ensure!(leaks.is_empty(), "soak failed: left behind: {}", leaks.join("; "));
    println!("nothing left behind: no GPU-sharing ConfigMap, no GPU reservation pod");
    Ok(())
}

/// What the churn left once every pod was deleted: pods' GPU-sharing ConfigMaps (owned by their pods,
/// collected with them) and GPU reservation pods on the soak's nodes (removed after their last sharer,
/// at least 30 s after they were made). Waits up to 2 minutes for both to go.
async fn leftovers(client: &Client, node_selector: &str) -> anyhow::Result<Vec<String>> {
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), POOL);
    let reservations: Api<Pod> = Api::namespaced(client.clone(), keys::RESERVATION_NAMESPACE);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ours: Vec<String> = nodes
            .list_metadata(&ListParams::default().labels(node_selector))
            .await?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        let maps: Vec<String> = configmaps
            .list_metadata(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .filter(|n| n.ends_with("-shared-gpu"))
            .collect();
        let held: Vec<String> = reservations
            .list(&ListParams::default().labels(&format!("app={}", keys::RESERVATION_APP)))
            .await?
            .items
            .into_iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| ours.contains(n))
            })
            .filter_map(|p| p.metadata.name)
            .collect();
        if maps.is_empty() && held.is_empty() {
            return Ok(Vec::new());
        }
        if Instant::now() >= deadline {
            let mut leaks = Vec::new();
            if !maps.is_empty() {
                leaks.push(format!(
                    "{} GPU-sharing ConfigMaps ({:?}...)",
                    maps.len(),
                    maps.first()
                ));
            }
            if !held.is_empty() {
                leaks.push(format!("{} reservation pods ({:?}...)", held.len(), held.first()));
            }
            return Ok(leaks);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Creates and deletes gangs until the time is up; samples as it goes.
async fn churn(client: &Client, args: &SoakArgs, port: u16, pid: u32) -> anyhow::Result<Vec<Sample>> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.minutes * 60);
    let pods: Api<Pod> = Api::namespaced(client.clone(), POOL);
    let groups: Api<api::PodGroup> = Api::namespaced(client.clone(), POOL);
    let mut live: VecDeque<(String, u32)> = VecDeque::new();
    let mut live_pods = 0usize;
    let mut serial = 0u64;
    let mut samples = Vec::new();
    let mut next_sample = started;
    println!(
        "{:>7} {:>10} {:>8} {:>14} {:>10} {:>8}",
        "t (s)", "RSS (MiB)", "cycles", "mean cycle ms", "binds ok", "live"
    );
    while Instant::now() < deadline {
        // Keep the pool at about `pods` pods: delete the oldest gangs (finished or not), add new ones.
        while live_pods > args.pods {
            let Some((name, size)) = live.pop_front() else {
                break;
            };
            let _ = groups.delete(&name, &DeleteParams::default()).await;
            let _ = pods
                .delete_collection(
                    &DeleteParams::default().grace_period(0),
                    &ListParams::default().labels(&format!("soak-gang={name}")),
                )
                .await;
            live_pods -= size as usize;
        }
        // New gangs, created concurrently (one at a time would make the client the bottleneck).
        let mut creating = tokio::task::JoinSet::new();
        while live_pods < args.pods + 64 && creating.len() < 32 {
            serial += 1;
            let size = GANG_SIZES[usize::try_from(serial).unwrap_or_default() % GANG_SIZES.len()];
            // Unique per run: a previous run's leftovers in the namespace never collide.
            let name = format!("gang-{}-{serial}", std::process::id());
            let (groups, pods, gang) = (groups.clone(), pods.clone(), name.clone());
            // A third of the gangs, all of 1 or 4 pods, share GPUs: half a GPU per pod.
            let sharing = size < 8 && serial % 4 < 2;
            creating.spawn(async move {
                create_gang(&groups, &pods, &gang, size, 3 + serial % 15, sharing).await
            });
            live.push_back((name, size));
            live_pods += size as usize;
        }
        while let Some(created) = creating.join_next().await {
            created??;
        }
        if Instant::now() >= next_sample {
            let sample = sample(port, pid, started.elapsed(), live_pods)?;
            println!(
                "{:>7.0} {:>10.1} {:>8.0} {:>14.2} {:>10.0} {:>8}",
                sample.at.as_secs_f64(),
                sample.rss_kib as f64 / 1024.0,
                sample.cycles,
                mean_ms(sample.cycle_seconds, sample.cycles),
                sample.binds_ok,
                sample.live_pods
            );
            samples.push(sample);
            next_sample += Duration::from_secs(args.sample_seconds);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    samples.push(sample(port, pid, started.elapsed(), live_pods)?);
    Ok(samples)
}

async fn create_gang(
    groups: &Api<api::PodGroup>,
    pods: &Api<Pod>,
    name: &str,
    size: u32,
    run_seconds: u64,
    sharing: bool,
) -> anyhow::Result<()> {
    let group: api::PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.run.ai/v2", "kind": "PodGroup",
        "metadata": { "name": name, "labels": { keys::NODE_POOL: POOL } },
        "spec": { "minMember": size, "queue": keys::DEFAULT_QUEUE },
    }))?;
    groups.create(&PostParams::default(), &group).await?;
    for i in 0..size {
        let mut pod = json!({
            "metadata": {
                "name": format!("{name}-{i}"),
                "labels": { keys::NODE_POOL: POOL, "soak-gang": name },
                "annotations": { keys::POD_GROUP_NAME: name, RUN_SECONDS_ANNOTATION: run_seconds.to_string() },
            },
            "spec": {
                "schedulerName": keys::SCHEDULER_NAME,
                "restartPolicy": "Never",
                "containers": [{ "name": "c", "image": "example.com/c:1",
                                 "resources": { "limits": { keys::GPU_RESOURCE: "1" } } }],
            },
        });
        if sharing {
            pod["metadata"]["annotations"][keys::GPU_FRACTION] = json!("0.5");
            pod["spec"]["containers"][0]["resources"] = json!({});
        }
        let pod: Pod = serde_json::from_value(pod)?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    Ok(())
}

fn mean_ms(seconds: f64, count: f64) -> f64 {
    if count > 0.0 { seconds / count * 1e3 } else { 0.0 }
}

fn sample(port: u16, pid: u32, at: Duration, live_pods: usize) -> anyhow::Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context("the scheduler exited (see its log)")?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_default();
    anyhow::ensure!(
        http_status(port, "/livez") == Some(200),
        "the scheduler's /livez fails"
    );
    let metrics = metrics_text(port)?;
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, |a, b| a + b)
    };
    Ok(Sample {
        at,
        rss_kib,
        cycles: value("kai_scheduler_cycle_duration_seconds_count"),
        cycle_seconds: value("kai_scheduler_cycle_duration_seconds_sum"),
        binds_ok: value("kai_scheduler_binds_total{result=\"ok\"}"),
        binds_failed: value("kai_scheduler_binds_total{result=\"error\"}"),
        live_pods,
    })
}

fn metrics_text(port: u16) -> anyhow::Result<String> {
    http_get(port, "/metrics")
        .map(|(_, text)| text)
        .context("the scheduler's /metrics does not answer")
}

/// Steady when, after the pool filled (the first quarter of the run), the last third's memory and
/// per-cycle time stay within bounds of the first third's.
fn verdict(samples: &[Sample]) -> anyhow::Result<()> {
    let steady = &samples[samples.len() / 4..];
    anyhow::ensure!(
        steady.len() >= 6,
        "too few samples ({}): run longer",
        samples.len()
    );
    let third = steady.len() / 3;
    let (first, last) = (&steady[..third], &steady[steady.len() - third..]);
    let median_rss = |s: &[Sample]| {
        let mut v: Vec<u64> = s.iter().map(|x| x.rss_kib).collect();
        v.sort_unstable();
        v[v.len() / 2] as f64 / 1024.0
    };
    // Mean cycle time within each third, from the counters' differences.
    let window_ms = |s: &[Sample]| {
        let (a, b) = (s[0], s[s.len() - 1]);
        mean_ms(b.cycle_seconds - a.cycle_seconds, b.cycles - a.cycles)
    };
    let (rss_first, rss_last) = (median_rss(first), median_rss(last));
    let (cycle_first, cycle_last) = (window_ms(first), window_ms(last));
    let end = samples[samples.len() - 1];
    println!(
        "\nmemory: {rss_first:.1} MiB (median, first third after the pool filled) -> {rss_last:.1} MiB (last third)\n\
         mean cycle: {cycle_first:.2} ms -> {cycle_last:.2} ms\n\
         binds: {:.0} ok, {:.0} refused",
        end.binds_ok, end.binds_failed
    );
    let mut problems = Vec::new();
    if rss_last > rss_first * 1.25 + 16.0 {
        problems.push(format!("memory grew {rss_first:.1} -> {rss_last:.1} MiB"));
    }
    if cycle_last > cycle_first * 2.0 + 5.0 {
        problems.push(format!("cycle time grew {cycle_first:.2} -> {cycle_last:.2} ms"));
    }
    if end.binds_ok == 0.0 {
        problems.push("nothing was bound".to_owned());
    }
    if !problems.is_empty() {
        bail!("soak failed: {}", problems.join("; "));
    }
    println!("soak clean");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Sample, verdict};
    use std::time::Duration;

    fn samples(rss: &[u64], cycle_ms: f64) -> Vec<Sample> {
        rss.iter()
            .enumerate()
            .map(|(i, r)| Sample {
                at: Duration::from_secs(i as u64 * 15),
                rss_kib: r * 1024,
                cycles: i as f64 * 100.0,
                cycle_seconds: i as f64 * 100.0 * cycle_ms / 1e3,
                binds_ok: i as f64 * 50.0,
                binds_failed: 0.0,
                live_pods: 2000,
            })
            .collect()
    }

    #[test]
    fn flat_memory_and_cycle_time_pass_and_growth_fails() {
        verdict(&samples(&[60, 62, 61, 63, 62, 61, 62, 63, 62], 3.0)).expect("steady");
        let err = verdict(&samples(&[60, 62, 70, 90, 120, 150, 180, 210, 240], 3.0)).expect_err("leak");
        assert!(err.to_string().contains("memory grew"), "{err}");
    }
}
