//! Evictions the scheduler decides without a higher-priority gang asking: consolidation (moving a
//! running pod so a waiting gang fits) and stale-gang eviction (a gang running below its minimum), against
//! a real API server. As in `tests/scheduler.rs`, each test has its own namespace and node pool served by
//! its own scheduler process; the node agent plays the kubelet (it confirms the deletions evictions start,
//! and completes a pod when the test annotates it) and kube-controller-manager's Job controller replaces
//! evicted pods.
//!
//! Run one: `cargo test -p e2e --test evictions consolidation`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use api::keys;
use e2e::TestEnv;
use e2e::workloads::{apply, bound, condition, events_with_reason, job, pod_group, pods, pool_nodes, start};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

/// Generous: a loaded 2-core machine runs the control plane, the scheduler and other tests.
const TIMEOUT: Duration = Duration::from_secs(90);
/// The stale-gang grace period the stale tests configure.
const GRACE: Duration = Duration::from_secs(3);

/// A PodGroup of `min` members with the preemptible priority class `train`, in the default queue.
fn train_group(t: &TestEnv, name: &str, min: u32) -> Value {
    pod_group(t, name, json!({ "minMember": min, "priorityClassName": "train" }))
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn name_of(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn uid_of(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

fn phase_of(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Evict events on the test's pods.
async fn evict_events(t: &TestEnv) -> anyhow::Result<Vec<Event>> {
    let mut events = events_with_reason(t, keys::EVENT_EVICT).await?;
    events.retain(|e| e.involved_object.kind.as_deref() == Some("Pod"));
    Ok(events)
}

/// The Evict events on the pods named, once each of them has one.
async fn evictions_of(t: &TestEnv, names: &BTreeSet<String>) -> anyhow::Result<Option<Vec<Event>>> {
    let events = evict_events(t).await?;
    let evicted: BTreeSet<String> = events
        .iter()
        .filter_map(|e| e.involved_object.name.clone())
        .collect();
    Ok(names.is_subset(&evicted).then_some(events))
}

/// Who reported an event (events.k8s.io's reportingController, or core/v1's source).
fn reporter(e: &Event) -> String {
    e.reporting_component
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
        .unwrap_or_default()
}

/// Sets a Job's parallelism; lowering it makes the Job controller delete running pods without
/// replacing them.
async fn scale_job(t: &TestEnv, name: &str, parallelism: u32) -> anyhow::Result<()> {
    let patch = json!({ "spec": { "parallelism": parallelism } });
    t.api::<Job>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Makes the node agent complete a running pod (exit code 0: Succeeded) now.
async fn complete_pod(t: &TestEnv, name: &str) -> anyhow::Result<()> {
    let patch = json!({ "metadata": { "annotations": { e2e::EXIT_CODE_ANNOTATION: "0" } } });
    t.api::<Pod>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// A test environment whose scheduler evicts stale gangs after [`GRACE`], set through its configuration
/// file as the chart passes it.
async fn start_with_short_grace(test: &str) -> anyhow::Result<TestEnv> {
    let config = e2e::paths::test_file(
        test,
        "scheduler.yaml",
        &format!(
            "plugins:\n  stalegangeviction:\n    gracePeriod: {}s\n",
            GRACE.as_secs()
        ),
    )?;
    start(test, &["--config", &config.to_string_lossy()]).await
}

/// Consolidation (KAI scenario 45 on a real API server): two nodes of 2 GPUs, a 1-GPU `train` pod running
/// on each, and a waiting `train` gang of one 2-GPU pod. It fits only if one running pod moves: the
/// scheduler evicts that pod through the Eviction API (an `Evict` event saying consolidation), the Job
/// controller recreates it, the replacement is bound on the other node, and the waiting gang is bound on
/// the node the moved pod left. The pod that was not moved keeps running, untouched.
#[tokio::test]
async fn consolidation_moves_a_running_pod_so_a_waiting_gang_fits() -> anyhow::Result<()> {
    let started = Instant::now();
    let t = start("consolidation", &[]).await?;
    // The first node alone, filled by `a` and a filler, so that `b` can only go to the second node
    // (placement packs, and would otherwise put `a` and `b` together).
    let first = t.create_nodes(pool_nodes(&t, "c0").count(1).gpus(2)).await?;
    apply(
        &t,
        &[
            train_group(&t, "a", 1),
            job(&t, "a", "a", 1, 1, json!({})),
            train_group(&t, "filler", 1),
            job(&t, "filler", "filler", 1, 1, json!({})),
        ],
    )
    .await?;
    t.wait_for_pods(
        "a and the filler bound on the first node",
        "job-name in (a,filler)",
        TIMEOUT,
        |p| p.len() == 2 && p.iter().all(|p| node_of(p) == Some(first[0].as_str())),
    )
    .await?;
    let second = t.create_nodes(pool_nodes(&t, "c1").count(1).gpus(2)).await?;
    apply(&t, &[train_group(&t, "b", 1), job(&t, "b", "b", 1, 1, json!({}))]).await?;
    t.wait_for_pods("b bound on the second node", "job-name=b", TIMEOUT, |p| {
        p.len() == 1 && node_of(&p[0]) == Some(second[0].as_str())
    })
    .await?;
    // The filler goes: one GPU free on each node, two in all, never two on one node.
    t.api::<Job>()
        .delete("filler", &DeleteParams::background())
        .await?;
    t.wait_for_pods("the filler gone", "job-name=filler", TIMEOUT, <[Pod]>::is_empty)
        .await?;
    let before = pods(&t, "job-name in (a,b)").await?;
    assert_eq!(before.len(), 2, "{before:?}");

    apply(
        &t,
        &[train_group(&t, "big", 1), job(&t, "big", "big", 1, 2, json!({}))],
    )
    .await?;
    let big = t
        .wait_for_pods("the waiting gang bound", "job-name=big", TIMEOUT, |p| {
            p.len() == 1 && bound(p) == 1
        })
        .await?;
    let big_node = node_of(&big[0]).unwrap_or_default().to_owned();
    // The pod that ran where the gang now runs is the one that moved.
    let (moved, stayed): (Vec<&Pod>, Vec<&Pod>) = before.iter().partition(|p| node_of(p) == Some(&big_node));
    let (moved, stayed) = match (moved.as_slice(), stayed.as_slice()) {
        ([m], [s]) => (*m, *s),
        _ => anyhow::bail!("the gang's node {big_node} held one of a and b before: {before:#?}"),
    };
    let moved_job = moved
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("job-name"))
        .cloned()
        .unwrap_or_default();
    let other_node = node_of(stayed).unwrap_or_default().to_owned();
    let replacement = t
        .wait_for_pods(
            &format!("{moved_job}'s replacement bound on {other_node}"),
            &format!("job-name={moved_job}"),
            TIMEOUT,
            |p| p.len() == 1 && uid_of(&p[0]) != uid_of(moved) && node_of(&p[0]) == Some(other_node.as_str()),
        )
        .await?;
    // Evicted through the Eviction API, with the reason; nothing else was evicted.
    let moved_name = name_of(moved);
    let events = t
        .wait_until("the Evict event on the moved pod", TIMEOUT, async || {
            evictions_of(&t, &BTreeSet::from([moved_name.clone()])).await
        })
        .await?;
    assert_eq!(events.len(), 1, "one pod moved: {events:#?}");
    assert_eq!(
        events[0].message.as_deref().unwrap_or_default(),
        format!(
            "moved to make room for {}/big (consolidation); it is recreated elsewhere",
            t.namespace()
        ),
        "{events:#?}"
    );
    assert_eq!(reporter(&events[0]), keys::SCHEDULER_NAME, "{events:#?}");
    // The waiting gang's PodGroup event names consolidation as what made its room.
    let scheduled = t
        .wait_until(
            "a PodGroupScheduled event naming consolidation",
            TIMEOUT,
            async || {
                let events = events_with_reason(&t, keys::EVENT_POD_GROUP_SCHEDULED).await?;
                Ok(events.into_iter().find(|e| {
                    e.involved_object.name.as_deref() == Some("big")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("by consolidation"))
                }))
            },
        )
        .await?;
    // The pod that stayed is the same pod on the same node.
    let now = pods(&t, "job-name in (a,b)").await?;
    let kept = now
        .iter()
        .find(|p| uid_of(p) == uid_of(stayed))
        .ok_or_else(|| anyhow::anyhow!("the pod that was not moved is gone: {now:#?}"))?;
    assert_eq!(node_of(kept), Some(other_node.as_str()));
    println!(
        "consolidation: {moved_name} moved from {big_node} to {other_node} (now {}); big bound on \
         {big_node}; PodGroup event: {:?}; took {:?}",
        name_of(&replacement[0]),
        scheduled.message.unwrap_or_default(),
        started.elapsed()
    );
    t.finish().await
}

/// Stale-gang eviction: a Job of 3 pods with minMember 3 runs; lowering the Job's parallelism makes the
/// Job controller delete one pod and not replace it, so the gang runs below its minimum. After the grace
/// period (3 s, from the configuration file) and not before, the scheduler evicts the 2 remaining pods
/// whole through the Eviction API, each with an `Evict` event giving the reason. The Job controller's
/// replacements wait (2 of the 3 the gang needs); once the Job asks for 3 again the gang starts again whole.
#[tokio::test]
async fn a_gang_running_below_its_minimum_is_evicted_whole_after_the_grace_period() -> anyhow::Result<()> {
    let started = Instant::now();
    let t = start_with_short_grace("stale-gang").await?;
    t.create_nodes(pool_nodes(&t, "sg").count(1).gpus(4)).await?;
    apply(
        &t,
        &[
            train_group(&t, "gang", 3),
            job(&t, "gang", "gang", 3, 1, json!({})),
        ],
    )
    .await?;
    let running = t
        .wait_for_pods("the gang running", "job-name=gang", TIMEOUT, |p| {
            p.len() == 3 && p.iter().all(|p| phase_of(p) == "Running")
        })
        .await?;
    let original: BTreeSet<String> = running.iter().map(name_of).collect();

    // The gang cannot be stale before this, so nothing may be evicted sooner than GRACE after it.
    let scaled_down = Instant::now();
    scale_job(&t, "gang", 2).await?;
    let left = t
        .wait_for_pods(
            "one member gone and not replaced",
            "job-name=gang",
            TIMEOUT,
            |p| p.len() == 2 && p.iter().all(|p| original.contains(&name_of(p))),
        )
        .await?;
    let below_since = Instant::now();
    let remaining: BTreeSet<String> = left.iter().map(name_of).collect();

    let events = t
        .wait_until("an Evict event on each remaining member", TIMEOUT, async || {
            evictions_of(&t, &remaining).await
        })
        .await?;
    let waited = below_since.elapsed();
    let since_scale_down = scaled_down.elapsed();
    assert!(
        since_scale_down >= GRACE,
        "evicted {since_scale_down:?} after the Job was scaled down, before the {GRACE:?} grace period"
    );
    assert_eq!(
        events.len(),
        2,
        "the remaining members, nothing else: {events:#?}"
    );
    for e in &events {
        assert_eq!(
            e.message.as_deref().unwrap_or_default(),
            format!(
                "gang {}/gang ran below its minimum (2 of 3 pods active) for longer than the 3s grace \
                 period; evicting it whole so it can start again as a gang",
                t.namespace()
            ),
            "{e:#?}"
        );
        assert_eq!(reporter(e), keys::SCHEDULER_NAME, "{e:#?}");
    }
    // The evicted pods are gone; the Job controller's 2 replacements wait for the third member.
    t.wait_for_pods(
        "the evicted pods replaced, none bound",
        "job-name=gang",
        TIMEOUT,
        |p| p.len() == 2 && p.iter().all(|p| !original.contains(&name_of(p))) && bound(p) == 0,
    )
    .await?;
    // The group first says 1 replacement exists, until a cycle sees the second one.
    t.wait_until(
        "the PodGroup to say it waits for its third member",
        TIMEOUT,
        async || {
            Ok(condition(&t, "gang", "Unschedulable")
                .await?
                .filter(|why| why.contains("the gang needs 3, 2 exist so far")))
        },
    )
    .await?;
    assert_eq!(
        bound(&pods(&t, "job-name=gang").await?),
        0,
        "no pod started alone"
    );

    // The Job asks for 3 again: the gang starts again, whole.
    scale_job(&t, "gang", 3).await?;
    t.wait_for_pods("the gang bound again, whole", "job-name=gang", TIMEOUT, |p| {
        p.len() == 3 && bound(p) == 3
    })
    .await?;
    assert_eq!(evict_events(&t).await?.len(), 2, "no further eviction");
    println!(
        "stale gang: evicted {since_scale_down:?} after the scale-down, {waited:?} after this test saw \
         the member gone (grace {GRACE:?}); took {:?}",
        started.elapsed()
    );
    t.finish().await
}

/// A gang that finishes pod by pod is not stale: a Job of 4 pods with minMember 4 runs, 2 of its pods
/// complete (Succeeded) and the 2 others run on, below the minimum. A control gang made stale after that
/// is evicted once its grace period has passed, which shows the finishing gang has been below its minimum
/// for longer than the grace period by then; the finishing gang's pods were not evicted, and it completes.
#[tokio::test]
async fn a_gang_whose_pods_complete_at_different_times_is_not_evicted_as_stale() -> anyhow::Result<()> {
    let started = Instant::now();
    let t = start_with_short_grace("finishing-gang").await?;
    t.create_nodes(pool_nodes(&t, "fg").count(1).gpus(6)).await?;
    apply(
        &t,
        &[
            train_group(&t, "finishing", 4),
            job(&t, "finishing", "finishing", 4, 1, json!({})),
            train_group(&t, "control", 2),
            job(&t, "control", "control", 2, 1, json!({})),
        ],
    )
    .await?;
    let running = t
        .wait_for_pods(
            "both gangs running",
            "job-name in (finishing,control)",
            TIMEOUT,
            |p| p.len() == 6 && p.iter().all(|p| phase_of(p) == "Running"),
        )
        .await?;
    let finishing: Vec<&Pod> = running
        .iter()
        .filter(|p| name_of(p).starts_with("finishing-"))
        .collect();
    let (done, still): (Vec<String>, Vec<String>) = (
        finishing[..2].iter().map(|p| name_of(p)).collect(),
        finishing[2..].iter().map(|p| name_of(p)).collect(),
    );
    for name in &done {
        complete_pod(&t, name).await?;
    }
    t.wait_for_pods(
        "2 of the finishing gang's pods Succeeded, 2 running",
        "job-name=finishing",
        TIMEOUT,
        |p| {
            p.len() == 4
                && p.iter().all(|p| {
                    phase_of(p)
                        == if done.contains(&name_of(p)) {
                            "Succeeded"
                        } else {
                            "Running"
                        }
                })
        },
    )
    .await?;

    // The control gang falls below its minimum now, after the finishing gang did.
    scale_job(&t, "control", 1).await?;
    let control = t
        .wait_for_pods(
            "the control gang down to 1 pod",
            "job-name=control",
            TIMEOUT,
            |p| p.len() == 1,
        )
        .await?;
    let control_pod = name_of(&control[0]);
    t.wait_until("the control gang evicted as stale", TIMEOUT, async || {
        evictions_of(&t, &BTreeSet::from([control_pod.clone()])).await
    })
    .await?;
    t.wait_for_pods("the control pod gone", "job-name=control", TIMEOUT, |p| {
        p.iter().all(|p| name_of(p) != control_pod)
    })
    .await?;
    let evicted: Vec<String> = evict_events(&t)
        .await?
        .iter()
        .filter_map(|e| e.involved_object.name.clone())
        .collect();
    assert_eq!(
        evicted,
        vec![control_pod.clone()],
        "only the control gang was stale"
    );
    let now = pods(&t, "job-name=finishing").await?;
    for p in &now {
        let name = name_of(p);
        let expected = if done.contains(&name) {
            "Succeeded"
        } else {
            "Running"
        };
        assert_eq!(phase_of(p), expected, "{name}");
        assert!(p.metadata.deletion_timestamp.is_none(), "{name} is being deleted");
    }
    assert_eq!(now.len(), 4, "{now:#?}");

    // The last two finish: the Job completes.
    for name in &still {
        complete_pod(&t, name).await?;
    }
    t.wait_until("the finishing Job complete", TIMEOUT, async || {
        let job = t.api::<Job>().get("finishing").await?;
        Ok((job.status.and_then(|s| s.succeeded) == Some(4)).then_some(()))
    })
    .await?;
    assert_eq!(evict_events(&t).await?.len(), 1, "no further eviction");
    println!("finishing gang: not evicted; took {:?}", started.elapsed());
    t.finish().await
}
