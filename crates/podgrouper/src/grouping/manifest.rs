//! From a decision to what is sent: the PodGroup to server-side apply, the pod's annotation and
//! sub-group label, and the checks that let the controller skip writes that would change nothing.

use std::collections::BTreeMap;

use api::keys;
use api::{PodGroup, PodGroupSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use super::explicit::{managed_by, managed_keys};
use super::{Decision, Grouping, Settings};

/// The PodGroup to apply for `grouping` in `namespace`. Only the fields the podgrouper owns are set,
/// so server-side apply leaves everything else (the scheduler's annotations, `markUnschedulable`,
/// `schedulingBackoff`, status) alone.
#[must_use]
pub fn pod_group_manifest(grouping: &Grouping, namespace: &str) -> PodGroup {
    let mut pg = PodGroup::new(
        &grouping.name,
        PodGroupSpec {
            min_member: Some(grouping.min_member),
            queue: Some(grouping.queue.clone()),
            priority_class_name: Some(grouping.priority_class_name.clone()),
            preemptibility: grouping.preemptibility,
            topology_constraint: grouping.topology.clone(),
            sub_groups: grouping.sub_groups.clone(),
            ..PodGroupSpec::default()
        },
    );
    pg.metadata = ObjectMeta {
        name: Some(grouping.name.clone()),
        namespace: Some(namespace.to_owned()),
        labels: Some(grouping.labels.clone()),
        annotations: Some(grouping.annotations.clone()),
        owner_references: Some(vec![grouping.owner.clone()]),
        ..ObjectMeta::default()
    };
    pg
}

/// Whether `existing` already carries everything `desired` sets (extra keys written by others are
/// fine, keys `manager` applied earlier and no longer wants are not), so an apply can be skipped.
#[must_use]
pub fn pod_group_up_to_date(existing: &PodGroup, desired: &PodGroup, manager: &str) -> bool {
    let no_stale = |section: &str, want: &Option<BTreeMap<String, String>>| {
        managed_keys(&existing.metadata, manager, section)
            .iter()
            .all(|k| want.as_ref().is_some_and(|w| w.contains_key(k)))
    };
    let subset = |want: &Option<BTreeMap<String, String>>, have: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let (e, d) = (&existing.spec, &desired.spec);
    e.min_member == d.min_member
        && e.queue == d.queue
        && e.priority_class_name == d.priority_class_name
        && e.preemptibility == d.preemptibility
        && e.topology_constraint == d.topology_constraint
        && e.sub_groups == d.sub_groups
        && existing.metadata.owner_references == desired.metadata.owner_references
        && subset(&desired.metadata.labels, &existing.metadata.labels)
        && subset(&desired.metadata.annotations, &existing.metadata.annotations)
        && no_stale("f:labels", &desired.metadata.labels)
        && no_stale("f:annotations", &desired.metadata.annotations)
}

/// A server-side-apply body for the pod's group annotation and sub-group label.
#[derive(Debug, Clone, PartialEq)]
pub struct PodPatch(pub Value);

/// The default of [`Settings::naming_delay_ms`]: how long a pod whose PodGroup is made for it alone may
/// wait unbound, and not reported unschedulable, without `pod-group-name`. The scheduler finds such a
/// pod's group by the group's owner reference and its binding writes the name onto the pod, so a pod
/// bound in time costs no patch of its own. A pod the scheduler reports unschedulable is named at once
/// (someone may be looking at it), one still waiting after the delay too.
pub const NAMING_DELAY_MS: i64 = 30_000;

/// Whether the pod's patch may wait, and for how long (milliseconds): it would only name the group
/// (no sub-group label), the group is made for this pod alone (owned by it, with the top-owner
/// annotation the scheduler looks for), the pod names no group, is unbound, carries no
/// `PodScheduled=False`, and was created less than `settings.naming_delay_ms` before `now_ms`.
#[must_use]
pub fn naming_wait_ms(pod: &Pod, decision: &Decision, settings: &Settings, now_ms: i64) -> Option<i64> {
    let Decision::Apply(g) = decision else {
        return None;
    };
    let uid = pod.metadata.uid.as_deref()?;
    let made_for_pod =
        api::podgroup::made_for_pod(std::slice::from_ref(&g.owner), Some(&g.annotations)) == Some(uid);
    let named = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(keys::POD_GROUP_NAME));
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    let reported = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"));
    if !made_for_pod || g.pod_sub_group.is_some() || named || bound || reported {
        return None;
    }
    let created = pod.metadata.creation_timestamp.as_ref()?.0.as_millisecond();
    let wait = created
        .saturating_add(settings.naming_delay_ms)
        .saturating_sub(now_ms);
    (wait > 0).then_some(wait)
}

/// The apply body that puts the pod in its group, or `None` when the pod already is exactly there.
/// A sub-group label the podgrouper set earlier and no longer wants is dropped by leaving it out.
#[must_use]
pub fn pod_patch(pod: &Pod, decision: &Decision, settings: &Settings) -> Option<PodPatch> {
    let (group, sub_group) = match decision {
        Decision::Join(join) => (join.annotate.then_some(join.group.as_str()), None),
        Decision::Apply(g) => (Some(g.name.as_str()), g.pod_sub_group.as_deref()),
    };
    let annotations = pod.metadata.annotations.as_ref();
    let labels = pod.metadata.labels.as_ref();
    let have_group = annotations
        .and_then(|a| a.get(keys::POD_GROUP_NAME))
        .map(String::as_str);
    let have_sub = labels
        .and_then(|l| l.get(keys::SUBGROUP_NAME))
        .map(String::as_str);
    let ours = |section: &str, key: &str| managed_by(pod, &settings.field_manager, section, key);
    let group_ok = match group {
        Some(g) => have_group == Some(g),
        None => !ours("f:annotations", keys::POD_GROUP_NAME),
    };
    let sub_ok = match sub_group {
        Some(s) => have_sub == Some(s),
        None => !ours("f:labels", keys::SUBGROUP_NAME),
    };
    if group_ok && sub_ok {
        return None;
    }
    let mut metadata = json!({
        "name": pod.metadata.name,
        "namespace": pod.metadata.namespace,
    });
    if let Some(g) = group {
        metadata["annotations"] = json!({ keys::POD_GROUP_NAME: g });
    }
    if let Some(s) = sub_group {
        metadata["labels"] = json!({ keys::SUBGROUP_NAME: s });
    }
    Some(PodPatch(
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata }),
    ))
}
