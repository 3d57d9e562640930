//! The scheduler against a real API server: the binary runs as a local process serving a node pool of
//! the test's own (its nodes, PodGroups and pods carry `kai.scheduler/node-pool=<namespace>`), so tests
//! run side by side without seeing each other's work. The node agent plays the kubelet.
//!
//! Run one: `cargo test -p e2e --test scheduler seed_003`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use api::keys;
use e2e::kube_scheduler::KubeScheduler;
use e2e::workloads::{
    apply, bound, build, condition, events_with_reason, job, pod_group, podgroup, pods, pool_labels,
    pool_nodes, start, start_scheduler, wait_for_phase,
};
use e2e::{FakeNodes, TestEnv};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Seed 003: 3 nodes with 2 GPUs each and an 8-pod job needing all 8: this scheduler binds none and says
/// why, then binds all 8 in the cycle after two more GPUs join. kube-scheduler, built from the same
/// source, binds 6 and leaves 2 pending: the partial start the gang prevents. Both outcomes are printed.
#[tokio::test]
async fn seed_003_gang_waits_whole_then_binds_when_room_appears_while_kube_scheduler_starts_six()
-> anyhow::Result<()> {
    let t = start("seed-003", &[]).await?;
    t.create_nodes(pool_nodes(&t, "s3").count(3).gpus(2)).await?;
    apply(
        &t,
        &[
            pod_group(
                &t,
                "training-job-pg",
                json!({ "minMember": 8, "queue": keys::DEFAULT_QUEUE }),
            ),
            job(&t, "train", "training-job-pg", 8, 1, json!({})),
        ],
    )
    .await?;
    let selector = "job-name=train";
    t.wait_for_pods("8 pods of the job", selector, TIMEOUT, |p| p.len() == 8)
        .await?;
    let message = t
        .wait_until(
            "the PodGroup's Unschedulable condition to name the GPU shortfall",
            TIMEOUT,
            // Until all 8 pods are seen the condition says the gang is still forming.
            async || {
                Ok(condition(&t, "training-job-pg", "Unschedulable")
                    .await?
                    .filter(|m| !m.starts_with("waiting for pods")))
            },
        )
        .await?;
    assert!(
        message.starts_with("8 pods need 8 nvidia.com/gpu, 6 free on 3 nodes"),
        "{message}"
    );
    // Several cycles later, still not a single pod bound.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        bound(&pods(&t, selector).await?),
        0,
        "no pod of a gang that cannot start whole"
    );
    let waiting = events_with_reason(&t, keys::EVENT_UNSCHEDULABLE).await?;
    assert!(!waiting.is_empty(), "an Unschedulable event explains the wait");

    // Two more GPUs: the whole gang is bound.
    t.create_nodes(pool_nodes(&t, "s3b").count(1).gpus(2)).await?;
    let placed = t
        .wait_for_pods("all 8 pods bound", selector, TIMEOUT, |p| bound(p) == 8)
        .await?;
    let scheduled = t
        .wait_until("a PodGroupScheduled event", TIMEOUT, async || {
            let e = events_with_reason(&t, keys::EVENT_POD_GROUP_SCHEDULED).await?;
            Ok((!e.is_empty()).then_some(e))
        })
        .await?;
    // Placed: nothing on the PodGroup still says it waits.
    t.wait_until("the waiting explanations cleared", TIMEOUT, async || {
        let status = podgroup(&t, "training-job-pg").await?.status.unwrap_or_default();
        let unschedulable = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Unschedulable" && c.status == "True");
        Ok((!unschedulable && status.scheduling_conditions.is_empty()).then_some(()))
    })
    .await?;

    // kube-scheduler on the same kind of cluster and job.
    let (kube_bound, kube_pending) = kube_scheduler_outcome(&t).await?;
    println!(
        "\nseed 003 (8 one-GPU pods, 3 nodes x 2 GPUs):\n\
         | scheduler | bound | pending |\n| --- | --- | --- |\n\
         | kube-scheduler v1.20.2 | {kube_bound} | {kube_pending} |\n\
         | kai-scheduler (this) | 0 | 8 (then 8 bound once 2 GPUs joined; event: {:?}) |\n",
        scheduled[0].message.as_deref().unwrap_or_default()
    );
    assert_eq!(
        (kube_bound, kube_pending),
        (6, 2),
        "kube-scheduler's partial start"
    );
    assert_eq!(placed.len(), 8);
    t.finish().await
}

/// A waiting gang's message quotes what is free; on a real API server, when only that changes (a pod
/// that held a GPU is deleted, still too little for the gang), the status keeps its figures and no
/// second event is raised, and the figures are refreshed about 30 s after the status was written,
/// still without an event.
#[tokio::test]
async fn a_waiting_gangs_figures_are_refreshed_not_rewritten_at_every_change() -> anyhow::Result<()> {
    let t = start("figures", &[]).await?;
    t.create_nodes(pool_nodes(&t, "f").count(1).gpus(3)).await?;
    // A one-GPU pod first, then a gang of two 2-GPU pods: 2 GPUs free for 4 needed.
    let filler = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "filler", "namespace": t.namespace(), "labels": pool_labels(&t),
            "annotations": { keys::POD_GROUP_SEED: "filler" },
        },
        "spec": {
            "schedulerName": keys::SCHEDULER_NAME,
            "containers": [{
                "name": "c", "image": "example.com/c:1",
                "resources": { "limits": { "nvidia.com/gpu": "1" } },
            }],
        },
    });
    apply(
        &t,
        &[
            pod_group(
                &t,
                "filler",
                json!({ "minMember": 1, "queue": keys::DEFAULT_QUEUE }),
            ),
            filler,
        ],
    )
    .await?;
    t.wait_for_pods("the filler bound", "!job-name", TIMEOUT, |p| bound(p) == 1)
        .await?;
    // No status of the gang can be written before this.
    let applied = std::time::Instant::now();
    apply(
        &t,
        &[
            pod_group(
                &t,
                "pair",
                json!({ "minMember": 2, "queue": keys::DEFAULT_QUEUE }),
            ),
            job(&t, "pair", "pair", 2, 2, json!({})),
        ],
    )
    .await?;
    let first = t
        .wait_until("the gang's first reason", TIMEOUT, async || {
            Ok(condition(&t, "pair", "Unschedulable")
                .await?
                .filter(|m| !m.starts_with("waiting for pods")))
        })
        .await?;
    let told = std::time::Instant::now();
    assert!(
        first.starts_with("2 pods need 4 nvidia.com/gpu, 2 free on 1 node"),
        "{first}"
    );
    // The PodGroup's own Unschedulable events, with how many times each was emitted.
    let events = async || -> anyhow::Result<Vec<(String, i32)>> {
        Ok(events_with_reason(&t, keys::EVENT_UNSCHEDULABLE)
            .await?
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("pair"))
            .filter(|e| e.involved_object.kind.as_deref() == Some("PodGroup"))
            .map(|e| (e.message.unwrap_or_default(), e.count.unwrap_or(1)))
            .collect())
    };
    t.wait_until("the Unschedulable event", TIMEOUT, async || {
        Ok((!events().await?.is_empty()).then_some(()))
    })
    .await?;
    // The filler goes: 3 free on 1 node, still too little. The status keeps its figures for now.
    t.api::<Pod>()
        .delete("filler", &kube::api::DeleteParams::default())
        .await?;
    t.wait_for_pods("the filler gone", "!job-name", TIMEOUT, |p| p.is_empty())
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    if told.elapsed() < Duration::from_secs(25) {
        let now = condition(&t, "pair", "Unschedulable").await?.unwrap_or_default();
        assert_eq!(now, first, "held back: only the figures changed");
    }
    // Refreshed about 30 s after the first status (a minute allowed for a loaded machine).
    let refreshed = t
        .wait_until("the figures refreshed", TIMEOUT, async || {
            Ok(condition(&t, "pair", "Unschedulable")
                .await?
                .filter(|m| m.starts_with("2 pods need 4 nvidia.com/gpu, 3 free on 1 node")))
        })
        .await?;
    // Its first status was written after `applied`, and the refresh comes 30 s after that.
    assert!(
        applied.elapsed() >= Duration::from_secs(29),
        "refreshed {:?} after the gang was made, before its time: {refreshed}",
        applied.elapsed()
    );
    // One event for one reason: the first text, emitted once.
    let events = events().await?;
    assert_eq!(events, [(first, 1)]);
    assert_eq!(bound(&pods(&t, "job-name=pair").await?), 0);
    t.finish().await
}

/// kube-scheduler v1.20.2 (from the local control plane's build) on 3 nodes x 2 GPUs of its own and an
/// 8-pod job: how many pods it binds and how many it leaves pending.
async fn kube_scheduler_outcome(t: &TestEnv) -> anyhow::Result<(usize, usize)> {
    let name = format!("kube-{}", t.namespace());
    let nodes = t
        .create_nodes(
            FakeNodes::new("ks")
                .count(3)
                .gpus(2)
                .label("e2e.kai.dev/kube-scheduler", &name),
        )
        .await?;
    anyhow::ensure!(nodes.len() == 3);
    let kubeconfig: PathBuf = t.kubeconfig_env().into();
    let _kube_scheduler = KubeScheduler::start(&kubeconfig, &name, 50, &std::env::temp_dir().join(&name))?;
    let mut job = job(t, "kube-train", "none", 8, 1, json!({}));
    let spec = &mut job["spec"]["template"]["spec"];
    spec["schedulerName"] = json!(name);
    spec["nodeSelector"] = json!({ "e2e.kai.dev/kube-scheduler": name });
    job["spec"]["template"]["metadata"] = json!({});
    apply(t, &[job]).await?;
    let selector = "job-name=kube-train";
    t.wait_for_pods("kube-scheduler binds 6", selector, TIMEOUT, |p| {
        p.len() == 8 && bound(p) >= 6
    })
    .await?;
    // It stays that way: the remaining two have nowhere to go.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = pods(t, selector).await?;
    Ok((bound(&pods), pods.len() - bound(&pods)))
}

/// Seed 000, step 3: the PyTorch DDP job with its explicit PodGroup (minMember 4, 2 GPUs per pod) is
/// placed whole; the PodGroup reaches Running and the seed's event query finds PodGroupScheduled.
#[tokio::test]
async fn seed_000_pytorch_ddp_job_with_its_explicit_podgroup_runs() -> anyhow::Result<()> {
    let t = start("seed-000-ddp", &[]).await?;
    t.create_nodes(pool_nodes(&t, "ddp").count(2).gpus(4)).await?;
    let training = json!({
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": { "name": "training" },
        "spec": { "resources": {
            "gpu": { "quota": -1, "limit": -1, "overQuotaWeight": 1 },
            "cpu": { "quota": -1, "limit": -1, "overQuotaWeight": 1 },
            "memory": { "quota": -1, "limit": -1, "overQuotaWeight": 1 } } },
    });
    apply(&t, &[training]).await?;
    let text = std::fs::read_to_string(
        e2e::paths::fixtures_dir().join("seeds/000-pytorch-distributed-training.yaml"),
    )?;
    for mut doc in e2e::apply::split_documents(&text)? {
        doc["metadata"]["namespace"] = json!(t.namespace());
        match doc["kind"].as_str() {
            Some("PodGroup") => doc["metadata"]["labels"] = pool_labels(&t),
            Some("Job") => {
                doc["spec"]["template"]["metadata"]["labels"][keys::NODE_POOL] = json!(t.namespace());
            }
            _ => {}
        }
        apply(&t, &[doc]).await?;
    }
    let selector = "job-name=pytorch-ddp";
    t.wait_for_pods("4 bound workers", selector, TIMEOUT, |p| {
        p.len() == 4 && bound(p) == 4
    })
    .await?;
    wait_for_phase(&t, "pytorch-ddp-training", api::PodGroupPhase::Running, TIMEOUT).await?;
    // The seed's own query: kubectl get events --field-selector reason=PodGroupScheduled.
    let out = t
        .kubectl()?
        .run_ok(
            &[
                "get",
                "events",
                "-n",
                t.namespace(),
                "--field-selector",
                "reason=PodGroupScheduled",
            ],
            None,
        )
        .await?;
    assert!(out.contains("PodGroupScheduled"), "{out}");
    // The seed's phase query. This dev cluster also has Volcano's PodGroup CRD (seed 003), and with both
    // kubectl resolves the bare `podgroup` to Volcano's: the troubleshooting guide says to use `pg` then.
    let out = t
        .kubectl()?
        .run_ok(
            &[
                "get",
                "pg",
                "pytorch-ddp-training",
                "-n",
                t.namespace(),
                "-o",
                "jsonpath={.status.phase}",
            ],
            None,
        )
        .await?;
    assert_eq!(out.trim(), "Running");
    t.finish().await
}

/// A job whose pods finish frees its GPUs, and a gang waiting for them is then placed.
#[tokio::test]
async fn completed_pods_free_room_for_a_waiting_gang() -> anyhow::Result<()> {
    let t = start("frees-room", &[]).await?;
    t.create_nodes(pool_nodes(&t, "fr").count(1).gpus(4)).await?;
    apply(
        &t,
        &[
            pod_group(&t, "short", json!({ "minMember": 2 })),
            job(
                &t,
                "short",
                "short",
                2,
                2,
                // Long enough to outlast the Job controller making the waiting gang under load.
                json!({ e2e::RUN_SECONDS_ANNOTATION: "40" }),
            ),
        ],
    )
    .await?;
    t.wait_for_pods("the short job bound", "job-name=short", TIMEOUT, |p| {
        p.len() == 2 && bound(p) == 2
    })
    .await?;
    apply(
        &t,
        &[
            pod_group(&t, "waiting", json!({ "minMember": 4 })),
            job(&t, "waiting", "waiting", 4, 1, json!({})),
        ],
    )
    .await?;
    t.wait_for_pods("the gang created", "job-name=waiting", TIMEOUT, |p| p.len() == 4)
        .await?;
    assert_eq!(
        bound(&pods(&t, "job-name=waiting").await?),
        0,
        "no room while the short job runs"
    );
    t.wait_for_pods(
        "the gang bound once the short job finished",
        "job-name=waiting",
        TIMEOUT + Duration::from_secs(40),
        |p| bound(p) == 4,
    )
    .await?;
    t.finish().await
}

/// Seed 000, step 8: a PodGroup that cannot be placed within scheduleTimeoutSeconds moves to Failed,
/// with a condition that says so, and nothing of it is bound.
#[tokio::test]
async fn schedule_timeout_moves_the_podgroup_to_failed_with_a_reason() -> anyhow::Result<()> {
    let t = start("timeout", &[]).await?;
    t.create_nodes(pool_nodes(&t, "to").count(1).gpus(2)).await?;
    apply(
        &t,
        &[
            pod_group(
                &t,
                "training-with-timeout",
                json!({ "minMember": 8, "scheduleTimeoutSeconds": 3, "priority": 50 }),
            ),
            job(&t, "slow", "training-with-timeout", 8, 1, json!({})),
        ],
    )
    .await?;
    let message = t
        .wait_until("the TimedOut condition", TIMEOUT, async || {
            condition(&t, "training-with-timeout", "TimedOut").await
        })
        .await?;
    assert!(message.contains("scheduleTimeoutSeconds (3s)"), "{message}");
    let pg = podgroup(&t, "training-with-timeout").await?;
    assert_eq!(pg.status.and_then(|s| s.phase), Some(api::PodGroupPhase::Failed));
    assert_eq!(bound(&pods(&t, "job-name=slow").await?), 0);
    t.finish().await
}

/// `schedulingBackoff: 1` (KAI's field): a gang found unschedulable on its node pool is not tried there
/// again, its status keeps the record naming the pool (and why), and it is tried again once that record
/// is removed. A gang without back-off, waiting beside it, is placed as soon as room appears.
#[tokio::test]
async fn scheduling_backoff_tries_a_gang_once_per_node_pool() -> anyhow::Result<()> {
    let t = start("backoff", &[]).await?;
    t.create_nodes(pool_nodes(&t, "bo").count(1).gpus(2)).await?;
    apply(
        &t,
        &[
            pod_group(&t, "once", json!({ "minMember": 1, "schedulingBackoff": 1 })),
            job(&t, "once", "once", 1, 4, json!({})),
            pod_group(&t, "again", json!({ "minMember": 1 })),
            job(&t, "again", "again", 1, 4, json!({})),
        ],
    )
    .await?;
    let pool = t.namespace().to_owned();
    let record = t
        .wait_until("the backed-off gang's pool record", TIMEOUT, async || {
            let pg = podgroup(&t, "once").await?;
            Ok(pg.status.and_then(|s| s.scheduling_conditions.into_iter().next()))
        })
        .await?;
    assert_eq!(record.node_pool.as_deref(), Some(pool.as_str()));
    let message = record.message.clone().unwrap_or_default();
    assert!(message.starts_with(&format!("Node-Pool '{pool}': ")), "{message}");
    // Room for both: only the gang without back-off is placed.
    t.create_nodes(pool_nodes(&t, "bo-big").count(1).gpus(8)).await?;
    t.wait_for_pods(
        "the gang without back-off bound",
        "job-name=again",
        TIMEOUT,
        |p| bound(p) == 1,
    )
    .await?;
    // A few more cycles' time: the backed-off gang is still not tried, and its record is untouched.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(bound(&pods(&t, "job-name=once").await?), 0);
    let kept = podgroup(&t, "once")
        .await?
        .status
        .map(|s| s.scheduling_conditions);
    assert_eq!(kept, Some(vec![record]), "the record is kept as it was");
    // Removing the record (as a user or a controller moving the gang would) lets it be tried again.
    t.api::<api::PodGroup>()
        .patch_status(
            "once",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "status": { "schedulingConditions": null } })),
        )
        .await?;
    t.wait_for_pods(
        "the gang bound once its record is gone",
        "job-name=once",
        TIMEOUT,
        |p| bound(p) == 1,
    )
    .await?;
    t.finish().await
}

/// Node selectors and taints are respected, and a pod that fits nowhere says which rule stopped it.
#[tokio::test]
async fn selectors_and_taints_are_respected_and_explained() -> anyhow::Result<()> {
    let t = start("selectors", &[]).await?;
    t.create_nodes(pool_nodes(&t, "za").count(1).gpus(2).label("zone", "a"))
        .await?;
    t.create_nodes(pool_nodes(&t, "zb").count(1).gpus(2).label("zone", "b").taint(
        "dedicated",
        "ml",
        "NoSchedule",
    ))
    .await?;
    let pod = |name: &str, selector: Value, tolerations: Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": t.namespace(), "labels": pool_labels(&t),
                          "annotations": { keys::POD_GROUP_NAME: name } },
            "spec": { "schedulerName": keys::SCHEDULER_NAME, "nodeSelector": selector, "tolerations": tolerations,
                      "containers": [{ "name": "c", "image": "example.com/c:1",
                                       "resources": { "limits": { "nvidia.com/gpu": "1" } } }] },
        })
    };
    apply(
        &t,
        &[
            pod_group(&t, "wants-c", json!({ "minMember": 1 })),
            pod("wants-c", json!({ "zone": "c" }), json!([])),
            pod_group(&t, "wants-b", json!({ "minMember": 1 })),
            pod("wants-b", json!({ "zone": "b" }), json!([])),
            pod_group(&t, "tolerates-b", json!({ "minMember": 1 })),
            pod(
                "tolerates-b",
                json!({ "zone": "b" }),
                json!([{ "key": "dedicated", "operator": "Exists" }]),
            ),
        ],
    )
    .await?;
    let node = t
        .wait_until("the tolerating pod bound", TIMEOUT, async || {
            let p = t.api::<Pod>().get("tolerates-b").await?;
            Ok(p.spec.and_then(|s| s.node_name))
        })
        .await?;
    assert!(node.contains("-zb-"), "{node}");
    let message = t
        .wait_until("why wants-c waits", TIMEOUT, async || {
            condition(&t, "wants-c", "Unschedulable").await
        })
        .await?;
    assert!(
        message.contains("2 node selector zone=c does not match"),
        "{message}"
    );
    let message = t
        .wait_until("why wants-b waits", TIMEOUT, async || {
            condition(&t, "wants-b", "Unschedulable").await
        })
        .await?;
    assert!(
        message.contains("untolerated taint dedicated=ml:NoSchedule"),
        "{message}"
    );
    for p in ["wants-c", "wants-b"] {
        let pod = t.api::<Pod>().get(p).await?;
        assert!(
            pod.spec.and_then(|s| s.node_name).is_none(),
            "{p} must not be bound"
        );
    }
    t.finish().await
}

fn count_binds_in_log(path: Option<PathBuf>) -> usize {
    let Some(path) = path else { return 0 };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split("binds=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
        .sum()
}

/// Two replicas with leader election: only the leader binds; when it is killed the other takes over
/// within the lease duration and binds new work.
#[tokio::test]
async fn two_replicas_only_the_leader_binds_and_a_follower_takes_over() -> anyhow::Result<()> {
    build().await?;
    let t = TestEnv::start("two-replicas").await?;
    // The chart's lease permissions, for a lease in the test's namespace.
    let mut election = t.leader_election_flags("kai-scheduler").await?;
    election.extend(
        [
            "--lease-duration=4s",
            "--renew-deadline=3s",
            "--retry-period=500ms",
        ]
        .map(str::to_owned),
    );
    let election: Vec<&str> = election.iter().map(String::as_str).collect();
    start_scheduler(&t, "replica-a", &election)?;
    start_scheduler(&t, "replica-b", &election)?;
    t.create_nodes(pool_nodes(&t, "le").count(2).gpus(4)).await?;
    apply(
        &t,
        &[
            pod_group(&t, "first", json!({ "minMember": 4 })),
            job(&t, "first", "first", 4, 1, json!({})),
        ],
    )
    .await?;
    t.wait_for_pods("first gang bound", "job-name=first", TIMEOUT, |p| {
        p.len() == 4 && bound(p) == 4
    })
    .await?;
    let (a, b) = (
        count_binds_in_log(t.component_log("replica-a")),
        count_binds_in_log(t.component_log("replica-b")),
    );
    assert_eq!(a + b, 4, "each pod bound once: a={a} b={b}");
    assert!(a == 0 || b == 0, "only one replica binds: a={a} b={b}");
    let leader = if a > 0 { "replica-a" } else { "replica-b" };
    let follower = if a > 0 { "replica-b" } else { "replica-a" };
    // Kill the leader without letting it release the lease: the follower waits out the lease.
    t.stop_component(leader, Duration::ZERO)?;
    apply(
        &t,
        &[
            pod_group(&t, "second", json!({ "minMember": 4 })),
            job(&t, "second", "second", 4, 1, json!({})),
        ],
    )
    .await?;
    t.wait_for_pods(
        "second gang bound by the new leader",
        "job-name=second",
        Duration::from_secs(30),
        |p| p.len() == 4 && bound(p) == 4,
    )
    .await?;
    assert_eq!(count_binds_in_log(t.component_log(follower)), 4);
    t.finish().await
}

/// The scheduler is killed (SIGKILL) while it binds a large gang at a low client rate; after a restart
/// every pod ends bound exactly once and no node holds more GPUs than it has.
#[tokio::test]
async fn killed_mid_bind_restarts_without_double_binding() -> anyhow::Result<()> {
    let slow = ["--kube-qps", "15", "--kube-burst", "1"];
    let t = start("restart", &slow).await?;
    let nodes = t.create_nodes(pool_nodes(&t, "rs").count(5).gpus(8)).await?;
    apply(
        &t,
        &[
            pod_group(&t, "big", json!({ "minMember": 40 })),
            job(&t, "big", "big", 40, 1, json!({})),
        ],
    )
    .await?;
    t.wait_for_pods("binding under way", "job-name=big", TIMEOUT, |p| {
        p.len() == 40 && bound(p) >= 3
    })
    .await?;
    t.stop_component("scheduler", Duration::ZERO)?;
    let partial = bound(&pods(&t, "job-name=big").await?);
    start_scheduler(&t, "scheduler-restarted", &[])?;
    let pods = t
        .wait_for_pods("all 40 bound", "job-name=big", TIMEOUT, |p| bound(p) == 40)
        .await?;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in &pods {
        *per_node
            .entry(
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    for n in &nodes {
        assert!(
            per_node.get(n).copied().unwrap_or(0) <= 8,
            "{n} over capacity: {per_node:?}"
        );
    }
    println!("killed after {partial} of 40 binds; the restarted scheduler completed the gang: {per_node:?}");
    t.finish().await
}
