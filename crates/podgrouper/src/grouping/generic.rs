//! Bare pods (and Spark pods without an operator) and every kind without a rule of its own: one group
//! per top owner.

use api::keys;

use super::common::{labels, name, owner_ref, uid};
use super::names::pg_name;
use super::{Shape, Workload};

/// Labels naming a priority class on the top owner, for most kinds.
pub(crate) const PRIORITY_LABELS: &[&str] = &[keys::PRIORITY_CLASS_LABEL];

/// One group for the whole top owner.
pub(crate) fn whole(w: &Workload<'_>, min_member: i32, default_priority: &'static str) -> Shape {
    let top = w.top.as_ref();
    Shape {
        name: pg_name(name(top), uid(top), None),
        owner: owner_ref(top),
        min_member,
        sub_groups: Vec::new(),
        pod_sub_group: None,
        default_priority,
        priority_label_keys: PRIORITY_LABELS,
        spec_priority_class: None,
        topology: None,
        gang: min_member > 1,
        template_labels: Vec::new(),
    }
}

/// One group per pod, owned by `owner` and named after the pod.
pub(crate) fn per_pod(
    w: &Workload<'_>,
    owner_uid: &str,
    owner: &kube::api::DynamicObject,
    default_priority: &'static str,
) -> Shape {
    let pod_name = w.pod.metadata.name.as_deref().unwrap_or_default();
    Shape {
        name: pg_name(pod_name, owner_uid, None),
        owner: owner_ref(owner),
        min_member: 1,
        sub_groups: Vec::new(),
        pod_sub_group: None,
        default_priority,
        priority_label_keys: PRIORITY_LABELS,
        spec_priority_class: None,
        topology: None,
        gang: false,
        template_labels: Vec::new(),
    }
}

/// A pod at the top of its chain (bare, or owning the pod). A Spark driver (labels `spark-app-name`
/// and `spark-app-selector`) groups itself and its executors under the application id.
pub(crate) fn pod(w: &Workload<'_>) -> Shape {
    let top = w.top.as_ref();
    let l = labels(top);
    let mut shape = whole(w, 1, "train");
    if let (Some(_), Some(selector)) = (l.get(keys::SPARK_APP_NAME), l.get(keys::SPARK_APP_SELECTOR))
        && !selector.is_empty()
    {
        shape.name.clone_from(selector);
    }
    shape
}

/// A Run:ai job (`run.ai` `RunaiJob`): KAI's default rule on the job, one group per pod named after the
/// pod without its last `-` suffix (`pg-<pod prefix>-<job uid>`), so a pod recreated under the same
/// prefix finds its group again.
pub(crate) fn runai_job(w: &Workload<'_>) -> Shape {
    let pod_name = w.pod.metadata.name.as_deref().unwrap_or_default();
    let prefix = pod_name.rsplit_once('-').map_or(pod_name, |(head, _)| head);
    let mut shape = whole(w, 1, "train");
    shape.name = pg_name(prefix, uid(&w.top), None);
    shape
}

/// An Azure ML job (`amlarc.azureml.com` `AmlJob`): one gang of its node count,
/// `spec.job.options.envs.AZUREML_NODE_COUNT`, as KAI groups it. Without a usable count the group is
/// one pod's, and the user is told.
pub(crate) fn aml_job(w: &Workload<'_>, warnings: &mut Vec<super::Warning>) -> Shape {
    let count = super::json::int_at(
        &w.top.data,
        &["spec", "job", "options", "envs", "AZUREML_NODE_COUNT"],
    );
    match count.filter(|c| *c > 0) {
        Some(count) => whole(w, super::json::clamp_i32(count), "train"),
        None => {
            warnings.push(super::Warning::Workload {
                detail: "AmlJob without a positive spec.job.options.envs.AZUREML_NODE_COUNT; grouped with minMember 1"
                    .to_owned(),
            });
            whole(w, 1, "train")
        }
    }
}
