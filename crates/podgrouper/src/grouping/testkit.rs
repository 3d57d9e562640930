//! Test builders: pods, owner objects and a cluster view made of plain maps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::PodGroup;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::{ClusterView, Decision, Grouping, Input, Object, Outcome, Settings, group};

/// A workload object: `obj("ray.io/v1", "RayCluster", "rc", "uid-rc", json!({...spec...}))`.
pub(crate) fn obj(api_version: &str, kind: &str, name: &str, uid: &str, spec: Value) -> Object {
    Arc::new(
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": { "name": name, "namespace": "ns", "uid": uid },
            "spec": spec,
        }))
        .expect("valid object"),
    )
}

/// Sets labels on an object.
pub(crate) fn with_labels(o: Object, labels: &[(&str, &str)]) -> Object {
    let mut o = (*o).clone();
    o.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    Arc::new(o)
}

/// Sets annotations on an object.
pub(crate) fn with_annotations(o: Object, annotations: &[(&str, &str)]) -> Object {
    let mut o = (*o).clone();
    o.metadata.annotations.get_or_insert_with(BTreeMap::new).extend(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Arc::new(o)
}

/// Sets `status` on an object.
pub(crate) fn with_status(o: Object, status: Value) -> Object {
    let mut o = (*o).clone();
    o.data["status"] = status;
    Arc::new(o)
}

/// A pod builder.
#[derive(Clone)]
pub(crate) struct PodB(pub Value);

pub(crate) fn pod(name: &str) -> PodB {
    PodB(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": "ns", "uid": format!("uid-{name}") },
        "spec": { "schedulerName": "kai-scheduler", "containers": [] },
    }))
}

impl PodB {
    pub(crate) fn label(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["labels"][k] = json!(v);
        self
    }
    pub(crate) fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    pub(crate) fn owned_by(mut self, o: &Object) -> Self {
        let t = o.types.clone().expect("types");
        self.0["metadata"]["ownerReferences"] = json!([{
            "apiVersion": t.api_version, "kind": t.kind, "name": o.metadata.name, "uid": o.metadata.uid, "controller": true,
        }]);
        self
    }
    pub(crate) fn node(mut self, node: &str) -> Self {
        self.0["spec"]["nodeName"] = json!(node);
        self
    }
    pub(crate) fn priority_class(mut self, class: &str) -> Self {
        self.0["spec"]["priorityClassName"] = json!(class);
        self
    }
    /// Records that `manager` owns the pod's `pod-group-name` annotation.
    pub(crate) fn group_annotation_managed_by(mut self, manager: &str) -> Self {
        self.0["metadata"]["managedFields"] = json!([{
            "manager": manager, "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": { "f:metadata": { "f:annotations": { "f:pod-group-name": {} } } },
        }]);
        self
    }
    pub(crate) fn build(&self) -> Pod {
        serde_json::from_value(self.0.clone()).expect("valid pod")
    }
}

/// A cluster view made of maps. Priority classes and queues are "unknown" unless listed.
#[derive(Default)]
pub(crate) struct View {
    pub objects: Vec<Object>,
    pub pods: Vec<Arc<Pod>>,
    pub priority_classes: Option<BTreeSet<String>>,
    pub queues: Option<BTreeSet<String>>,
    pub pod_groups: Vec<Arc<PodGroup>>,
    pub kind_defaults: Option<Arc<super::kind_defaults::KindDefaults>>,
}

impl View {
    /// A view that knows the chart's priority classes and the default queues.
    pub(crate) fn chart() -> Self {
        Self {
            priority_classes: Some(
                ["train", "build-preemptible", "build", "inference"]
                    .map(str::to_owned)
                    .into(),
            ),
            queues: Some(
                ["default-queue", "default-parent-queue"]
                    .map(str::to_owned)
                    .into(),
            ),
            ..Self::default()
        }
    }
    pub(crate) fn with_priority_class(mut self, name: &str) -> Self {
        self.priority_classes
            .get_or_insert_with(BTreeSet::new)
            .insert(name.to_owned());
        self
    }
    /// A view with the defaults ConfigMap whose `types` is `json`.
    pub(crate) fn with_kind_defaults(mut self, json: &str) -> Self {
        let data =
            std::collections::BTreeMap::from([(super::kind_defaults::TYPES_KEY.to_owned(), json.to_owned())]);
        let (defaults, problems) =
            super::kind_defaults::KindDefaults::from_data(&data).expect("a defaults ConfigMap");
        assert!(problems.is_empty(), "{problems:?}");
        self.kind_defaults = Some(Arc::new(defaults));
        self
    }
    pub(crate) fn with_queue(mut self, name: &str) -> Self {
        self.queues
            .get_or_insert_with(BTreeSet::new)
            .insert(name.to_owned());
        self
    }
}

impl ClusterView for View {
    fn object(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Object> {
        self.objects
            .iter()
            .find(|o| {
                o.types
                    .as_ref()
                    .is_some_and(|t| t.api_version == api_version && t.kind == kind)
                    && o.metadata.namespace.as_deref() == Some(namespace)
                    && o.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }
    fn pods(&self, namespace: &str, labels: &[(&str, &str)]) -> Vec<Arc<Pod>> {
        self.pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| {
                let l = p.metadata.labels.clone().unwrap_or_default();
                labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .cloned()
            .collect()
    }
    fn priority_class_exists(&self, name: &str) -> Option<bool> {
        self.priority_classes.as_ref().map(|s| s.contains(name))
    }
    fn queue_exists(&self, name: &str) -> Option<bool> {
        self.queues.as_ref().map(|s| s.contains(name))
    }
    fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>> {
        self.pod_groups
            .iter()
            .find(|pg| {
                pg.metadata.namespace.as_deref() == Some(namespace)
                    && pg.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }
    fn kind_defaults(&self) -> Option<Arc<super::kind_defaults::KindDefaults>> {
        self.kind_defaults.clone()
    }
}

/// Groups `pod` with `owners` (nearest first) under default settings.
pub(crate) fn run(pod: &PodB, owners: &[Object], view: &View) -> Outcome {
    run_with(pod, owners, view, &Settings::default())
}

pub(crate) fn run_with(pod: &PodB, owners: &[Object], view: &View, settings: &Settings) -> Outcome {
    let pod = pod.build();
    group(
        &Input {
            pod: &pod,
            owners,
            chain_break: None,
        },
        settings,
        view,
    )
    .expect("grouping succeeds")
}

/// The computed PodGroup of an outcome.
pub(crate) fn applied(outcome: &Outcome) -> &Grouping {
    match &outcome.decision {
        Decision::Apply(g) => g,
        Decision::Join(j) => panic!("expected a computed group, got join {j:?}"),
    }
}

/// `(name, minMember)` of the sub-groups.
pub(crate) fn subs(g: &Grouping) -> Vec<(String, i32)> {
    g.sub_groups
        .iter()
        .map(|s| (s.name.clone(), s.min_member.unwrap_or(0)))
        .collect()
}

/// A PodGroup in namespace `ns`.
pub(crate) fn pg(name: &str, spec: api::PodGroupSpec) -> PodGroup {
    let mut pg = PodGroup::new(name, spec);
    pg.metadata.namespace = Some("ns".to_owned());
    pg
}
