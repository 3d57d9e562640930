//! Groups the user names on the pod: KAI's `pod-group-name` (when the user, not the podgrouper, wrote
//! it), the seed documents' `scheduling.run.ai/pod-group` and Volcano's `scheduling.k8s.io/group-name`.
//! Such a pod joins that group and no other is made for it.

use api::keys;
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;

use super::{ClusterView, Grouping, Join, Settings, Warning};

/// Group names on the pod in precedence order, with the key each came from.
pub(crate) fn named_groups(pod: &Pod, settings: &Settings) -> Vec<(&'static str, String)> {
    let Some(annotations) = pod.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    let mut named = Vec::new();
    for key in [
        keys::POD_GROUP_NAME,
        keys::POD_GROUP_SEED,
        keys::VOLCANO_GROUP_NAME,
    ] {
        let Some(value) = annotations.get(key).filter(|v| !v.is_empty()) else {
            continue;
        };
        if key == keys::POD_GROUP_NAME && managed_by(pod, &settings.field_manager, "f:annotations", key) {
            continue; // The podgrouper's own earlier write, not the user's choice.
        }
        named.push((key, value.clone()));
    }
    named
}

/// The group the pod joins, if it names one. A `pod-group-name` equal to the computed group (for
/// example written by KAI's own podgrouper before a migration) is not treated as the user's choice,
/// so the PodGroup keeps being maintained.
pub(crate) fn choose(
    pod: &Pod,
    named: &[(&'static str, String)],
    computed: Option<&Grouping>,
    view: &dyn ClusterView,
    warnings: &mut Vec<Warning>,
) -> Option<Join> {
    let (key, group) = named.first()?;
    if let ([(keys::POD_GROUP_NAME, only)], Some(computed)) = (named, computed)
        && *only == computed.name
    {
        return None;
    }
    if named.iter().any(|(_, g)| g != group) {
        warnings.push(Warning::ConflictingGroupNames {
            names: named.to_vec(),
        });
    }
    let volcano = *key == keys::VOLCANO_GROUP_NAME;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    if !volcano && view.pod_group(namespace, group).is_none() {
        warnings.push(Warning::NamedGroupMissing { group: group.clone() });
    }
    Some(Join {
        group: group.clone(),
        key,
        annotate: !volcano,
    })
}

/// Whether `manager` owns `f:metadata.<section>.f:<key>` of the pod (server-side-apply bookkeeping).
#[must_use]
pub fn managed_by(pod: &Pod, manager: &str, section: &str, key: &str) -> bool {
    managed_keys(&pod.metadata, manager, section).contains(key)
}

/// The keys of `metadata.<section>` (`f:labels`, `f:annotations`) that `manager` owns.
#[must_use]
pub fn managed_keys(meta: &ObjectMeta, manager: &str, section: &str) -> BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter_map(|m| {
            m.fields_v1
                .as_ref()?
                .0
                .get("f:metadata")?
                .get(section)?
                .as_object()
        })
        .flat_map(|fields| {
            fields
                .keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_owned)
        })
        .collect()
}
