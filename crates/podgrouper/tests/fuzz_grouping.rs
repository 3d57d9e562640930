//! Property tests: whatever the pod and its top owner carry (every annotation and label the podgrouper
//! reads, with arbitrary values, and specs of any shape for every workload kind it knows), grouping
//! never panics, never makes more than `MAX_SUB_GROUPS` sub-groups, and what it decides can be written:
//! the PodGroup manifest and the pod patch are built without panicking too.

use std::sync::Arc;

use api::{PodGroup, keys};
use k8s_openapi::api::core::v1::Pod;
use kai_podgrouper::grouping::{
    ClusterView, Decision, Input, MAX_SUB_GROUPS, Object, Settings, group, pod_group_manifest, pod_patch,
};
use kube::api::DynamicObject;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Every key the podgrouper reads from pods and workloads.
const KEYS: [&str; 36] = [
    keys::POD_GROUP_NAME,
    keys::POD_GROUP_SEED,
    keys::VOLCANO_GROUP_NAME,
    keys::SUBGROUP_NAME,
    keys::QUEUE_LABEL,
    keys::QUEUE_LABEL_LEGACY,
    keys::PRIORITY_CLASS_LABEL,
    keys::RAY_PRIORITY_CLASS_LABEL,
    keys::PREEMPTIBILITY_LABEL,
    keys::GANG_SCHEDULING,
    keys::MIN_MEMBER_OVERRIDE,
    keys::NODE_POOL,
    keys::TOPOLOGY,
    keys::TOPOLOGY_REQUIRED,
    keys::TOPOLOGY_PREFERRED,
    keys::SEGMENT_SIZE,
    keys::SEGMENT_TOPOLOGY_REQUIRED,
    keys::SEGMENT_TOPOLOGY_PREFERRED,
    keys::RAY_GROUP,
    keys::JOBSET_REPLICATED_JOB,
    keys::KUBEFLOW_REPLICA_TYPE,
    keys::KUBEFLOW_REPLICA_INDEX,
    keys::KUBEFLOW_JOB_NAME,
    keys::KUBEFLOW_JOB_ROLE,
    keys::LWS_NAME,
    keys::LWS_GROUP_INDEX,
    keys::LWS_WORKER_INDEX,
    keys::LWS_SIZE,
    keys::KNATIVE_MIN_SCALE,
    keys::GROVE_PODGANG,
    keys::GROVE_TOPOLOGY_NAME,
    keys::SPARK_APP_NAME,
    keys::SPARK_APP_SELECTOR,
    keys::LAST_APPLIED_CONFIGURATION,
    "ray.io/node-type",
    "batch.kubernetes.io/job-completion-index",
];

/// Field names the workload rules look for in specs.
const FIELDS: [&str; 42] = [
    "replicas",
    "minReplicas",
    "maxReplicas",
    "parallelism",
    "completions",
    "workerGroupSpecs",
    "headGroupSpec",
    "pytorchReplicaSpecs",
    "mpiReplicaSpecs",
    "tfReplicaSpecs",
    "Master",
    "Worker",
    "Launcher",
    "replicatedJobs",
    "template",
    "spec",
    "metadata",
    "annotations",
    "labels",
    "leaderWorkerTemplate",
    "size",
    "groupName",
    "name",
    "rayClusterSpec",
    "runPolicy",
    "schedulingPolicy",
    "minAvailable",
    "numNodes",
    "startupPolicy",
    "podGroupPolicy",
    "subGroupPolicy",
    "subGroupSize",
    "podgroups",
    "podReferences",
    "namespace",
    "topologyConstraintGroupConfigs",
    "podGroupNames",
    "topologyConstraint",
    "packConstraint",
    "required",
    "preferred",
    "priorityClassName",
];

/// Workload kinds with rules of their own, plus wrappers and an unknown kind.
const KINDS: [(&str, &str); 18] = [
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    ("ray.io/v1", "RayCluster"),
    ("ray.io/v1", "RayJob"),
    ("ray.io/v1", "RayService"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v2beta1", "MPIJob"),
    ("kubeflow.org/v1beta1", "Notebook"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("serving.knative.dev/v1", "Revision"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("grove.io/v1alpha1", "PodCliqueSet"),
    ("scheduler.grove.io/v1alpha1", "PodGang"),
    ("example.com/v1", "Unknown"),
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[-+]?[0-9]{1,20}",
        "true|false|preemptible|non-preemptible|[a-z]{1,8}|headgroup|worker|master|launcher|0|1",
        any::<String>(),
    ]
}

fn string_map() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((prop::sample::select(KEYS.to_vec()), text()), 0..8).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v)))
            .collect()
    })
}

/// JSON of any shape built from the rules' field names, with numbers, text, booleans and nulls.
fn spec() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::from),
        (-3i64..10).prop_map(Value::from),
        text().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS.to_vec()), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

fn owner() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(KINDS.to_vec()),
        string_map(),
        string_map(),
        spec(),
        spec(),
    )
        .prop_map(|((api_version, kind), labels, annotations, spec, status)| {
            json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": { "name": "w", "namespace": "ns", "uid": "uid-w",
                              "labels": labels, "annotations": annotations },
                "spec": spec, "status": status,
            })
        })
}

/// A view with nothing in it, or with every lookup answering yes.
struct View {
    everything_exists: bool,
}

impl ClusterView for View {
    fn object(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Object> {
        None
    }
    fn pods(&self, _: &str, _: &[(&str, &str)]) -> Vec<Arc<Pod>> {
        Vec::new()
    }
    fn priority_class_exists(&self, _: &str) -> Option<bool> {
        Some(self.everything_exists)
    }
    fn queue_exists(&self, _: &str) -> Option<bool> {
        Some(self.everything_exists)
    }
    fn pod_group(&self, _: &str, _: &str) -> Option<Arc<PodGroup>> {
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn grouping_any_pod_and_owner_never_panics(
        pod_labels in string_map(),
        pod_annotations in string_map(),
        owner in prop::option::of(owner()),
        everything_exists in any::<bool>(),
    ) {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "p", "namespace": "ns", "uid": "uid-p",
                          "labels": pod_labels, "annotations": pod_annotations },
            "spec": { "schedulerName": keys::SCHEDULER_NAME, "containers": [] },
        });
        let owners: Vec<Object> = match owner {
            Some(o) => {
                pod["metadata"]["ownerReferences"] = json!([{
                    "apiVersion": o["apiVersion"], "kind": o["kind"], "name": "w", "uid": "uid-w",
                    "controller": true,
                }]);
                let o: DynamicObject = serde_json::from_value(o).map_err(|e| TestCaseError::fail(e.to_string()))?;
                vec![Arc::new(o)]
            }
            None => Vec::new(),
        };
        let pod: Pod = serde_json::from_value(pod).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let settings = Settings::default();
        let input = Input { pod: &pod, owners: &owners, chain_break: None };
        if let Ok(outcome) = group(&input, &settings, &View { everything_exists }) {
            // Every warning can be told to the user.
            for w in &outcome.warnings {
                prop_assert!(!w.to_string().is_empty());
            }
            if let Decision::Apply(grouping) = &outcome.decision {
                let pg = pod_group_manifest(grouping, "ns");
                prop_assert!(pg.spec.min_member.unwrap_or(1) >= 1, "{:?}", pg.spec.min_member);
                prop_assert!(grouping.sub_groups.len() <= MAX_SUB_GROUPS, "{} sub-groups", grouping.sub_groups.len());
            }
            let _ = pod_patch(&pod, &outcome.decision, &settings);
        }
    }
}
