//! Queues, fair share, preemption and reclaim against a real API server: the scheduler runs as a local
//! process serving the test's own node pool; the node agent plays the kubelet (it confirms the deletions
//! evictions start). Queues are cluster-scoped, so each test names its own with `queue_name` and deletes
//! them at the end.
//!
//! Run one: `cargo test -p e2e --test queues reclaim`.

use std::time::Duration;

use anyhow::Context as _;

use api::keys;
use e2e::TestEnv;
use e2e::workloads::{
    QueuesCleanup, apply, bound, condition, events_with_reason, job, pod_group, pods, pool_nodes, queue,
    queue_name, start,
};
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
const GPU: &str = "nvidia.com/gpu";

/// The Queue's status as the scheduler last wrote it.
async fn queue_status(t: &TestEnv, name: &str) -> anyhow::Result<api::QueueStatus> {
    let queues: Api<api::Queue> = Api::all(t.client().clone());
    Ok(queues.get(name).await?.status.unwrap_or_default())
}

/// The GPU amount of a status map, as the API returns it.
fn gpus(
    map: &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<String> {
    map.get(GPU).map(|q| q.0.clone())
}

/// A PodGroup of the test's pool in `queue`, with a priority class when given.
fn group_in(t: &TestEnv, name: &str, queue: &str, min: u32, priority_class: Option<&str>) -> Value {
    let mut spec = json!({ "minMember": min, "queue": queue });
    if let Some(pc) = priority_class {
        spec["priorityClassName"] = json!(pc);
    }
    pod_group(t, name, spec)
}

/// A Job of `n` pods with `gpus` GPUs each, joined to PodGroup `name` and carrying the queue label.
fn job_in(t: &TestEnv, name: &str, queue: &str, n: u32, gpus: u32) -> Value {
    let mut j = job(t, name, name, n, gpus, json!({}));
    j["spec"]["template"]["metadata"]["labels"][keys::QUEUE_LABEL] = json!(queue);
    j
}

/// Evict events on the test's pods, newest last.
async fn evictions(t: &TestEnv) -> anyhow::Result<Vec<Event>> {
    let mut events = events_with_reason(t, keys::EVENT_EVICT).await?;
    events.retain(|e| e.involved_object.kind.as_deref() == Some("Pod"));
    Ok(events)
}

/// Who reported an event (events.k8s.io's reportingController, or core/v1's source).
fn reporter(e: &Event) -> String {
    e.reporting_component
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
        .unwrap_or_default()
}

/// Seed 002: the parent `department-1` and the leaf `team-a` (same spec shape as the seed, unique
/// names) apply; a Job whose PodGroup names the leaf is bound, and the scheduler writes both queues'
/// status: the leaf's and the parent's allocated GPUs, and the leaf's fair share.
#[tokio::test]
async fn seed_002_queues_apply_route_work_and_report_allocation_and_fair_share() -> anyhow::Result<()> {
    let t = start("queues-seed-002", &[]).await?;
    let (department, team) = (queue_name(&t, "department-1"), queue_name(&t, "team-a"));
    let _cleanup = QueuesCleanup::new(&t, &[&team, &department])?;
    apply(
        &t,
        &[
            queue(&department, None, (-1, -1, 1)),
            queue(&team, Some(&department), (-1, -1, 1)),
        ],
    )
    .await?;
    t.create_nodes(pool_nodes(&t, "q2").count(2).gpus(2)).await?;
    apply(
        &t,
        &[
            group_in(&t, "team-a-job", &team, 3, None),
            job_in(&t, "team-a-job", &team, 3, 1),
        ],
    )
    .await?;
    t.wait_for_pods("3 bound pods of team-a", "job-name=team-a-job", TIMEOUT, |p| {
        p.len() == 3 && bound(p) == 3
    })
    .await?;
    // Every status the scheduler writes on the way, to show what it converges to.
    let mut seen: Vec<api::QueueStatus> = Vec::new();
    let status = t
        .wait_until(
            "team-a's status: 3 GPUs allocated within a fair share of 3 or more",
            TIMEOUT,
            async || {
                let s = queue_status(&t, &team).await?;
                if seen.last() != Some(&s) {
                    seen.push(s.clone());
                }
                let fair: f64 = gpus(&s.fair_share).and_then(|f| f.parse().ok()).unwrap_or(0.0);
                // The pool has 4 GPUs and team-a is the only queue asking for any.
                Ok((gpus(&s.allocated).as_deref() == Some("3") && fair >= 3.0).then_some(s))
            },
        )
        .await
        .with_context(|| format!("team-a's statuses seen: {seen:#?}"))?;
    assert_eq!(gpus(&status.requested).as_deref(), Some("3"), "{status:?}");
    let parent = t
        .wait_until(
            "department-1's status to count its child's GPUs",
            TIMEOUT,
            async || {
                let s = queue_status(&t, &department).await?;
                Ok((gpus(&s.allocated).as_deref() == Some("3")).then_some(s))
            },
        )
        .await?;
    assert_eq!(parent.child_queues, vec![team.clone()], "{parent:?}");
    t.finish().await
}

/// Preempt: in one queue on a full pool, an `inference` gang (priority 125) evicts the running `train`
/// gang (priority 50, preemptible) through the Eviction API, whole, with an event on each victim naming
/// the preemptor; the inference gang is bound in a later cycle, once the node agent confirmed the
/// deletions.
#[tokio::test]
async fn inference_gang_preempts_a_train_gang_in_the_same_queue() -> anyhow::Result<()> {
    let t = start("queues-preempt", &[]).await?;
    let q = queue_name(&t, "research");
    let _cleanup = QueuesCleanup::new(&t, &[&q])?;
    apply(&t, &[queue(&q, None, (-1, -1, 1))]).await?;
    t.create_nodes(pool_nodes(&t, "pr").count(2).gpus(2)).await?;
    apply(
        &t,
        &[
            group_in(&t, "train", &q, 4, Some("train")),
            job_in(&t, "train", &q, 4, 1),
        ],
    )
    .await?;
    let victims = t
        .wait_for_pods("the train gang bound", "job-name=train", TIMEOUT, |p| {
            p.len() == 4 && bound(p) == 4
        })
        .await?;
    let victim_names: Vec<String> = victims.iter().filter_map(|p| p.metadata.name.clone()).collect();
    apply(
        &t,
        &[
            group_in(&t, "serve", &q, 2, Some("inference")),
            job_in(&t, "serve", &q, 2, 1),
        ],
    )
    .await?;
    t.wait_for_pods("the inference gang bound", "job-name=serve", TIMEOUT, |p| {
        p.len() == 2 && bound(p) == 2
    })
    .await?;
    // Every train pod was evicted (a gang is never cut below its minimum), each with an event.
    let events = t
        .wait_until("an Evict event on each train pod", TIMEOUT, async || {
            let events = evictions(&t).await?;
            let all = victim_names
                .iter()
                .all(|v| events.iter().any(|e| e.involved_object.name.as_ref() == Some(v)));
            Ok(all.then_some(events))
        })
        .await?;
    let preemptor = format!("{}/serve", t.namespace());
    for e in &events {
        let message = e.message.as_deref().unwrap_or_default();
        assert_eq!(
            message,
            format!("preempted by higher priority workload {preemptor}"),
            "{e:?}"
        );
        assert_eq!(reporter(e), keys::SCHEDULER_NAME, "{e:?}");
    }
    let remaining = pods(&t, "job-name=train").await?;
    for p in &remaining {
        assert!(
            !victim_names.contains(p.metadata.name.as_ref().expect("pods have names")),
            "victim {:?} still exists",
            p.metadata.name
        );
    }
    // The train Job's replacement pods wait: 2 GPUs are free and the gang needs 4.
    assert_eq!(
        bound(&remaining),
        0,
        "no train pod bound while the gang cannot start whole"
    );
    t.finish().await
}

/// When the API server recorded the pod's binding (`PodScheduled=True`'s time).
fn bound_at(p: &k8s_openapi::api::core::v1::Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// Minimum runtime: in a queue with `preemptMinRuntime: 6s`, a running `train` gang is not preempted by an
/// `inference` gang until 6 s after its pods' bindings, as the API server recorded them (their
/// `PodScheduled=True` time), and then it is; no start annotation is written on its PodGroup.
#[tokio::test]
async fn a_preemption_waits_for_the_victims_minimum_runtime_from_its_bindings() -> anyhow::Result<()> {
    const MIN_RUNTIME_S: i64 = 6;
    let t = start("queues-min-runtime", &[]).await?;
    let q = queue_name(&t, "research");
    let _cleanup = QueuesCleanup::new(&t, &[&q])?;
    let mut spec = queue(&q, None, (-1, -1, 1));
    spec["spec"]["preemptMinRuntime"] = json!(format!("{MIN_RUNTIME_S}s"));
    apply(&t, &[spec]).await?;
    t.create_nodes(pool_nodes(&t, "mr").count(1).gpus(2)).await?;
    apply(
        &t,
        &[
            group_in(&t, "train", &q, 2, Some("train")),
            job_in(&t, "train", &q, 2, 1),
        ],
    )
    .await?;
    let victims = t
        .wait_for_pods("the train gang bound", "job-name=train", TIMEOUT, |p| {
            p.len() == 2 && p.iter().all(|p| bound_at(p).is_some())
        })
        .await?;
    // The gang's start: its first binding (second precision, so no later than the real one).
    let started = victims
        .iter()
        .filter_map(bound_at)
        .min()
        .context("a binding time")?;
    let protected_until = started + k8s_openapi::jiff::SignedDuration::from_secs(MIN_RUNTIME_S);
    apply(
        &t,
        &[
            group_in(&t, "serve", &q, 2, Some("inference")),
            job_in(&t, "serve", &q, 2, 1),
        ],
    )
    .await?;
    // Within the protection (a second short of its end, for the binding time's truncation) nothing is
    // evicted; without it the preemption comes within a cycle of the inference gang.
    let look_until = protected_until - k8s_openapi::jiff::SignedDuration::from_secs(1);
    let mut looked = 0;
    while k8s_openapi::jiff::Timestamp::now() < look_until {
        assert!(
            evictions(&t).await?.is_empty(),
            "evicted before the minimum runtime was up"
        );
        let train = pods(&t, "job-name=train").await?;
        assert!(
            train.len() == 2 && train.iter().all(|p| p.metadata.deletion_timestamp.is_none()),
            "a train pod went before the minimum runtime was up"
        );
        looked += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(looked > 0, "the inference gang came after the protection ended");
    t.wait_for_pods("the inference gang bound", "job-name=serve", TIMEOUT, |p| {
        p.len() == 2 && bound(p) == 2
    })
    .await?;
    assert_eq!(evictions(&t).await?.len(), 2, "the train gang, whole");
    let train = t.api::<api::PodGroup>().get("train").await?;
    assert!(
        !train
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(keys::LAST_START_TIMESTAMP),
        "a bind writes no start annotation"
    );
    t.finish().await
}

/// Reclaim: queue A (quota 2) runs on all 4 GPUs of the pool because B (quota 2) was idle; when B submits
/// a 2-GPU gang, the scheduler evicts one of A's preemptible gangs (A keeps its quota) and binds B's.
#[tokio::test]
async fn reclaim_takes_back_a_queues_quota_from_a_queue_over_its_own() -> anyhow::Result<()> {
    let t = start("queues-reclaim", &[]).await?;
    let (a, b) = (queue_name(&t, "a"), queue_name(&t, "b"));
    let _cleanup = QueuesCleanup::new(&t, &[&a, &b])?;
    apply(&t, &[queue(&a, None, (2, -1, 1)), queue(&b, None, (2, -1, 1))]).await?;
    t.create_nodes(pool_nodes(&t, "rc").count(2).gpus(2)).await?;
    apply(
        &t,
        &[
            group_in(&t, "a-first", &a, 2, Some("train")),
            job_in(&t, "a-first", &a, 2, 1),
            group_in(&t, "a-second", &a, 2, Some("train")),
            job_in(&t, "a-second", &a, 2, 1),
        ],
    )
    .await?;
    t.wait_for_pods(
        "A's two gangs bound on all 4 GPUs",
        &format!("{}={a}", keys::QUEUE_LABEL),
        TIMEOUT,
        |p| p.len() == 4 && bound(p) == 4,
    )
    .await?;
    t.wait_until("A's status to show its 4 GPUs", TIMEOUT, async || {
        let s = queue_status(&t, &a).await?;
        Ok((gpus(&s.allocated).as_deref() == Some("4")).then_some(()))
    })
    .await?;
    apply(
        &t,
        &[
            group_in(&t, "b-job", &b, 2, Some("train")),
            job_in(&t, "b-job", &b, 2, 1),
        ],
    )
    .await?;
    t.wait_for_pods("B's gang bound", "job-name=b-job", TIMEOUT, |p| {
        p.len() == 2 && bound(p) == 2
    })
    .await?;
    // Exactly one of A's gangs went, whole; the other kept running.
    let a_pods = pods(&t, &format!("{}={a}", keys::QUEUE_LABEL)).await?;
    assert_eq!(bound(&a_pods), 2, "A keeps its quota of 2 GPUs");
    let events = evictions(&t).await?;
    assert_eq!(events.len(), 2, "two of A's pods evicted: {events:#?}");
    let reclaimer = format!("{}/b-job", t.namespace());
    for e in &events {
        let message = e.message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with(&format!("reclaimed by workload {reclaimer} of queue {b}")),
            "{message}"
        );
        assert!(message.contains(&format!("victim queue {a}")), "{message}");
        assert_eq!(reporter(e), keys::SCHEDULER_NAME, "{e:?}");
    }
    let status = t
        .wait_until("B's status to show its 2 GPUs", TIMEOUT, async || {
            let s = queue_status(&t, &b).await?;
            Ok((gpus(&s.allocated).as_deref() == Some("2")).then_some(s))
        })
        .await?;
    assert_eq!(gpus(&status.fair_share).as_deref(), Some("2"), "{status:?}");
    t.finish().await
}

/// A leaf queue at its GPU limit: a 4-GPU gang in a queue limited to 2 waits on a pool with room, and the
/// PodGroup's Unschedulable condition and an event say the queue's limit is the reason.
#[tokio::test]
async fn a_gang_over_its_queue_limit_waits_and_says_so() -> anyhow::Result<()> {
    let t = start("queues-limit", &[]).await?;
    let q = queue_name(&t, "capped");
    let _cleanup = QueuesCleanup::new(&t, &[&q])?;
    apply(&t, &[queue(&q, None, (2, 2, 1))]).await?;
    t.create_nodes(pool_nodes(&t, "lm").count(2).gpus(4)).await?;
    apply(
        &t,
        &[group_in(&t, "big", &q, 4, None), job_in(&t, "big", &q, 4, 1)],
    )
    .await?;
    let message = t
        .wait_until(
            "the Unschedulable condition naming the queue limit",
            TIMEOUT,
            async || {
                Ok(condition(&t, "big", "Unschedulable")
                    .await?
                    .filter(|m| !m.starts_with("waiting for pods")))
            },
        )
        .await?;
    assert_eq!(
        message,
        format!("queue {q} at its nvidia.com/gpu limit 2: allocated 0, gang needs 4")
    );
    t.wait_until("an Unschedulable event with the same text", TIMEOUT, async || {
        let events = events_with_reason(&t, keys::EVENT_UNSCHEDULABLE).await?;
        Ok(events
            .into_iter()
            .find(|e| e.message.as_deref() == Some(message.as_str())))
    })
    .await?;
    assert_eq!(
        bound(&pods(&t, "job-name=big").await?),
        0,
        "8 GPUs free, none used"
    );
    t.finish().await
}

/// MIG profiles count against queues as their compute slices, as in KAI: with a queue limited to 4 GPUs
/// and a node offering two `mig-3g.20gb` profiles, one of two 3-slice pods is bound and the other waits
/// on the queue's GPU limit (3 + 3 > 4), not on the node; the queue's status counts 3 GPUs.
#[tokio::test]
async fn mig_profiles_count_as_gpus_against_the_queue_limit() -> anyhow::Result<()> {
    const MIG: &str = "nvidia.com/mig-3g.20gb";
    let t = start("queues-mig", &[]).await?;
    let q = queue_name(&t, "mig");
    let _cleanup = QueuesCleanup::new(&t, &[&q])?;
    apply(&t, &[queue(&q, None, (4, 4, 1))]).await?;
    t.create_nodes(pool_nodes(&t, "mig").count(1).resource(MIG, "2"))
        .await?;
    let mig_job = |name: &str| {
        let mut j = job_in(&t, name, &q, 1, 0);
        j["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({ "limits": { MIG: "1" } });
        j
    };
    apply(
        &t,
        &[
            group_in(&t, "mig-a", &q, 1, None),
            mig_job("mig-a"),
            group_in(&t, "mig-b", &q, 1, None),
            mig_job("mig-b"),
        ],
    )
    .await?;
    let waiting = t
        .wait_until(
            "one bound, the other waiting on the queue limit",
            TIMEOUT,
            async || {
                let a = bound(&pods(&t, "job-name=mig-a").await?);
                let b = bound(&pods(&t, "job-name=mig-b").await?);
                let waiting = match (a, b) {
                    (1, 0) => "mig-b",
                    (0, 1) => "mig-a",
                    _ => return Ok(None),
                };
                Ok(condition(&t, waiting, "Unschedulable")
                    .await?
                    .filter(|m| m.contains("limit"))
                    .map(|m| (waiting, m)))
            },
        )
        .await?;
    assert_eq!(
        waiting.1,
        format!("queue {q} at its nvidia.com/gpu limit 4: allocated 3, gang needs 3"),
        "{} waits",
        waiting.0
    );
    let status = t
        .wait_until("the queue's allocated GPUs", TIMEOUT, async || {
            let status = queue_status(&t, &q).await?;
            Ok(gpus(&status.allocated)
                .is_some_and(|g| g == "3")
                .then_some(status))
        })
        .await?;
    assert_eq!(gpus(&status.allocated).as_deref(), Some("3"), "{status:?}");
    t.finish().await
}

/// A PodGroup naming a queue that does not exist waits with a condition saying so (and how to fix it).
#[tokio::test]
async fn a_podgroup_naming_a_missing_queue_waits_and_says_so() -> anyhow::Result<()> {
    let t = start("queues-missing", &[]).await?;
    let missing = queue_name(&t, "no-such-queue");
    t.create_nodes(pool_nodes(&t, "mq").count(1).gpus(2)).await?;
    apply(
        &t,
        &[
            group_in(&t, "lost", &missing, 1, None),
            job_in(&t, "lost", &missing, 1, 1),
        ],
    )
    .await?;
    let message = t
        .wait_until("a condition naming the missing queue", TIMEOUT, async || {
            let pg = e2e::workloads::podgroup(&t, "lost").await?;
            Ok(pg.status.and_then(|s| {
                s.conditions.into_iter().find(|c| {
                    c.status == "True" && c.message.as_deref().is_some_and(|m| m.contains(&missing))
                })
            }))
        })
        .await?;
    assert_eq!(message.type_, "Invalid", "{message:?}");
    assert_eq!(
        message.reason.as_deref(),
        Some("QueueDoesNotExist"),
        "{message:?}"
    );
    assert_eq!(
        message.message.as_deref(),
        Some(
            format!(
                "queue {missing:?} does not exist; create it or set spec.queue to an existing leaf queue"
            )
            .as_str()
        )
    );
    // Several cycles later, still nothing bound.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound(&pods(&t, "job-name=lost").await?), 0);
    t.finish().await
}

/// Usage-based fair share (KAI's `usageDBConfig`, issue 19): the scheduler keeps the queues' usage in a
/// ConfigMap (server-side apply, under the permissions the chart grants when `usageDBConfig` is set:
/// `create`, and `get`/`patch` of that one name), with the queue that held a GPU in it; a new leader
/// reads it back.
#[tokio::test]
async fn usage_record_is_stored_in_a_configmap_and_read_back_by_the_next_leader() -> anyhow::Result<()> {
    e2e::workloads::build().await?;
    let t = TestEnv::start("queues-usage").await?;
    let config = e2e::paths::test_file(
        "queues-usage",
        "scheduler.yaml",
        "usageDBConfig:\n  clientType: scheduler\n  usageParams:\n    halfLifePeriod: 10m\n    windowSize: 1h\n",
    )?;
    let rbac = [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "usage"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["usage"],
                 "verbs": ["get", "patch"]},
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "usage"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "usage"},
            "subjects": [{"kind": "ServiceAccount", "name": "kai-scheduler", "namespace": keys::SYSTEM_NAMESPACE}],
        }),
    ];
    apply(&t, &rbac).await?;
    let config = config.to_string_lossy().into_owned();
    let args = [
        "--config",
        config.as_str(),
        "--usage-namespace",
        t.namespace(),
        "--usage-configmap",
        "usage",
    ];
    e2e::workloads::start_scheduler(&t, "scheduler", &args)?;
    let team = queue_name(&t, "usage");
    let _cleanup = QueuesCleanup::new(&t, &[&team])?;
    apply(&t, &[queue(&team, None, (-1, -1, 1))]).await?;
    t.create_nodes(pool_nodes(&t, "u").count(1).gpus(2)).await?;
    apply(
        &t,
        &[
            group_in(&t, "held", &team, 1, None),
            job_in(&t, "held", &team, 1, 1),
        ],
    )
    .await?;
    t.wait_for_pods("the bound pod", "job-name=held", TIMEOUT, |p| {
        p.len() == 1 && bound(p) == 1
    })
    .await?;
    // The record is written once a minute; the queue is in it once it held its GPU over a fold.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = t.api();
    let text = t
        .wait_until(
            "the usage record naming the queue",
            Duration::from_secs(150),
            async || {
                let text = configmaps
                    .get_opt("usage")
                    .await?
                    .and_then(|cm| cm.data)
                    .and_then(|d| d.get("usage.yaml").cloned());
                Ok(text.filter(|text| text.contains(team.as_str())))
            },
        )
        .await?;
    scheduler_core::fairshare::UsageRecord::decode(&text).context("the stored record reads back")?;

    t.stop_component("scheduler", Duration::from_secs(10))?;
    e2e::workloads::start_scheduler(&t, "scheduler-2", &args)?;
    t.wait_until("the new scheduler to read the record", TIMEOUT, async || {
        let log = t
            .component_log("scheduler-2")
            .map(std::fs::read_to_string)
            .transpose()?
            .unwrap_or_default();
        Ok(log.contains("usage record restored").then_some(()))
    })
    .await?;
    t.finish().await
}
