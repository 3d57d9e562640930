//! What a failing test prints: the state of its namespace and nodes, so the failure explains itself.
//!
//! Best effort: a part that cannot be read says so and the rest is still printed.

use std::fmt::Write as _;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt as _};

/// A plain-text report of pods (node, phase, conditions), PodGroups (both APIs), Jobs, events and the
/// nodes matching `node_selector`.
pub async fn namespace_report(client: &Client, namespace: &str, node_selector: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "==== namespace {namespace} ====");
    pods(client, namespace, &mut out).await;
    podgroups(client, namespace, &mut out).await;
    volcano_podgroups(client, namespace, &mut out).await;
    jobs(client, namespace, &mut out).await;
    events(client, namespace, &mut out).await;
    if let Some(selector) = node_selector {
        nodes(client, selector, &mut out).await;
    }
    out
}

async fn pods(client: &Client, namespace: &str, out: &mut String) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let _ = writeln!(out, "-- pods");
    match api.list(&ListParams::default()).await {
        Ok(list) if list.items.is_empty() => {
            let _ = writeln!(out, "   (none)");
        }
        Ok(list) => {
            for pod in list.items {
                let spec = pod.spec.clone().unwrap_or_default();
                let status = pod.status.clone().unwrap_or_default();
                let conditions: Vec<String> = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .map(|c| {
                        let mut text = format!("{}={}", c.type_, c.status);
                        if let Some(reason) = &c.reason {
                            let _ = write!(text, "({reason}");
                            if let Some(message) = &c.message {
                                let _ = write!(text, ": {message}");
                            }
                            text.push(')');
                        }
                        text
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "   {} phase={} node={} scheduler={} deleting={} conditions=[{}]",
                    pod.name_any(),
                    status.phase.as_deref().unwrap_or("-"),
                    spec.node_name.as_deref().unwrap_or("-"),
                    spec.scheduler_name.as_deref().unwrap_or("-"),
                    pod.metadata.deletion_timestamp.is_some(),
                    conditions.join(", "),
                );
            }
        }
        Err(err) => {
            let _ = writeln!(out, "   cannot list: {err}");
        }
    }
}

fn number(value: Option<i32>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

async fn podgroups(client: &Client, namespace: &str, out: &mut String) {
    let api: Api<api::PodGroup> = Api::namespaced(client.clone(), namespace);
    let _ = writeln!(out, "-- podgroups.scheduling.run.ai");
    match api.list(&ListParams::default()).await {
        Ok(list) if list.items.is_empty() => {
            let _ = writeln!(out, "   (none)");
        }
        Ok(list) => {
            for group in list.items {
                let status = group.status.clone().unwrap_or_default();
                let _ = writeln!(
                    out,
                    "   {} minMember={} queue={} phase={} running={} pending={}",
                    group.name_any(),
                    number(group.spec.min_member),
                    group.spec.queue.as_deref().unwrap_or("-"),
                    status.phase.map_or("-", api::PodGroupPhase::as_str),
                    number(status.running),
                    number(status.pending),
                );
                for condition in &status.conditions {
                    let _ = writeln!(
                        out,
                        "      condition {}={} {}: {}",
                        condition.type_,
                        condition.status,
                        condition.reason.as_deref().unwrap_or(""),
                        condition.message.as_deref().unwrap_or("")
                    );
                }
                for condition in &status.scheduling_conditions {
                    let _ = writeln!(
                        out,
                        "      scheduling {} pool={}: {}",
                        condition.type_,
                        condition.node_pool.as_deref().unwrap_or("-"),
                        condition.message.as_deref().unwrap_or("")
                    );
                }
            }
        }
        Err(err) => {
            let _ = writeln!(out, "   cannot list: {err}");
        }
    }
}

async fn volcano_podgroups(client: &Client, namespace: &str, out: &mut String) {
    let gvk = GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup");
    let Ok((resource, _)) = kube::discovery::pinned_kind(client, &gvk).await else {
        return;
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    if let Ok(list) = api.list(&ListParams::default()).await
        && !list.items.is_empty()
    {
        let _ = writeln!(out, "-- podgroups.scheduling.volcano.sh");
        for group in list.items {
            let _ = writeln!(
                out,
                "   {} spec={} status={}",
                group.name_any(),
                group
                    .data
                    .get("spec")
                    .map_or_else(String::new, ToString::to_string),
                group
                    .data
                    .get("status")
                    .map_or_else(String::new, ToString::to_string),
            );
        }
    }
}

async fn jobs(client: &Client, namespace: &str, out: &mut String) {
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = api.list(&ListParams::default()).await
        && !list.items.is_empty()
    {
        let _ = writeln!(out, "-- jobs");
        for job in list.items {
            let status = job.status.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "   {} active={} succeeded={} failed={}",
                job.name_any(),
                status.active.unwrap_or(0),
                status.succeeded.unwrap_or(0),
                status.failed.unwrap_or(0)
            );
        }
    }
}

async fn events(client: &Client, namespace: &str, out: &mut String) {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let _ = writeln!(out, "-- events (oldest first, last 40)");
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            let mut items = list.items;
            items.sort_by_key(|e| {
                e.last_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .or_else(|| e.event_time.as_ref().map(|t| t.0))
                    .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
            });
            let skip = items.len().saturating_sub(40);
            for event in items.into_iter().skip(skip) {
                let _ = writeln!(
                    out,
                    "   {} {} {}/{} x{}: {}",
                    event.type_.as_deref().unwrap_or("-"),
                    event.reason.as_deref().unwrap_or("-"),
                    event.involved_object.kind.as_deref().unwrap_or("-"),
                    event.involved_object.name.as_deref().unwrap_or("-"),
                    event.count.unwrap_or(1),
                    event.message.as_deref().unwrap_or("").trim(),
                );
            }
        }
        Err(err) => {
            let _ = writeln!(out, "   cannot list: {err}");
        }
    }
}

async fn nodes(client: &Client, selector: &str, out: &mut String) {
    let api: Api<Node> = Api::all(client.clone());
    let _ = writeln!(out, "-- nodes {selector}");
    match api.list(&ListParams::default().labels(selector)).await {
        Ok(list) => {
            for node in list.items {
                let allocatable = node
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.clone())
                    .unwrap_or_default();
                let allocatable: Vec<String> =
                    allocatable.iter().map(|(k, v)| format!("{k}={}", v.0)).collect();
                let taints: Vec<String> = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default()
                    .iter()
                    .map(|t| format!("{}={}:{}", t.key, t.value.as_deref().unwrap_or(""), t.effect))
                    .collect();
                let _ = writeln!(
                    out,
                    "   {} ready={} allocatable=[{}] taints=[{}]",
                    node.name_any(),
                    crate::nodes::is_ready(&node),
                    allocatable.join(" "),
                    taints.join(" ")
                );
            }
        }
        Err(err) => {
            let _ = writeln!(out, "   cannot list: {err}");
        }
    }
}
