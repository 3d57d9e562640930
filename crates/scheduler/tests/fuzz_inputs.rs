//! Property tests: whatever users write into pods, nodes, PodGroups, Queues and the configuration file,
//! the scheduler reads it without panicking, and a scheduling cycle over the result keeps the model's
//! invariants. Annotation and label values are drawn from the well-known keys with arbitrary text.

use std::time::Duration;

use api::keys;
use k8s_openapi::api::core::v1::{Node, Pod};
use kai_scheduler::cache::convert;
use proptest::prelude::*;
use scheduler_core::config::{Config, format_duration, parse_duration};
use scheduler_core::model::Cluster;
use scheduler_core::model::resources::ResourceNames;
use serde_json::{Map, Value, json};

/// Names shared across objects, so references sometimes resolve and sometimes do not.
const NAMES: [&str; 4] = ["a", "b", "c", "default-queue"];

/// Text users put in annotations and labels: numbers, quantities, near misses and anything at all.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[-+]?[0-9]{0,22}(\\.[0-9]{0,6})?([eE][-+]?[0-9]{1,3}|m|k|Ki|Gi|ms|s|h)?",
        "[a-c]|default-queue|[a-z0-9./-]{1,12}",
        any::<String>(),
        extreme_quantity(),
    ]
}

/// Quantities the API server accepts whose sums (two containers, overhead, a node's pods) do not fit in
/// 64 bits, and their neighbours.
fn extreme_quantity() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "5Ei",
        "8Ei",
        "7Ei",
        "9223372036854775807",
        "9223372036854775806",
        "9223372036854775807m",
        "9223372036854775",
        "9.2e18",
        "1e18",
        "4611686018427387904",
    ])
    .prop_map(str::to_owned)
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES.to_vec()).prop_map(str::to_owned)
}

/// Every key the scheduler reads from pods and nodes, with arbitrary values.
fn pod_annotations() -> impl Strategy<Value = Map<String, Value>> {
    let keys = [
        keys::POD_GROUP_NAME,
        keys::POD_GROUP_SEED,
        keys::VOLCANO_GROUP_NAME,
        keys::GPU_FRACTION,
        keys::GPU_MEMORY,
        keys::GPU_FRACTION_NUM_DEVICES,
        keys::GPU_FRACTION_CONTAINER_NAME,
        keys::GPU_DEVICE,
        keys::RECEIVED_RESOURCE_TYPE,
        keys::RESERVED_GPU_INDEX,
    ];
    string_map(keys.to_vec())
}

fn pod_labels() -> impl Strategy<Value = Map<String, Value>> {
    string_map(vec![
        keys::SUBGROUP_NAME,
        keys::TASK_PRIORITY_LABEL,
        keys::GPU_GROUP,
        keys::NODE_POOL,
        keys::QUEUE_LABEL,
        "ray.io/node-type",
        keys::KUBEFLOW_JOB_ROLE,
        keys::KUBEFLOW_REPLICA_TYPE,
    ])
}

/// A map holding a random subset of `keys`, each with an arbitrary value.
fn string_map(keys: Vec<&'static str>) -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((prop::sample::select(keys), text()), 0..6).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v)))
            .collect()
    })
}

fn resources() -> impl Strategy<Value = Value> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["cpu", "memory", keys::GPU_RESOURCE, "pods", "example.com/x"]),
            text(),
        ),
        0..4,
    )
    .prop_map(|pairs| {
        Value::Object(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), Value::String(v)))
                .collect(),
        )
    })
}

fn pod(i: usize) -> impl Strategy<Value = Value> {
    (
        pod_annotations(),
        pod_labels(),
        resources(),
        resources(),
        prop::sample::select(vec!["Pending", "Running", "Succeeded", "Failed", "Unknown", ""]),
        prop::option::of(name()),
        any::<bool>(),
        // More containers, init containers (some of them sidecars), an overhead and pod-level requests:
        // sums that can overflow.
        prop::collection::vec((resources(), resources()), 0..4),
        prop::collection::vec((resources(), any::<bool>()), 0..3),
        prop::option::of(resources()),
        prop::option::of(resources()),
    )
        .prop_map(
            move |(
                annotations,
                labels,
                requests,
                limits,
                phase,
                node,
                ours,
                more,
                init,
                overhead,
                pod_level,
            )| {
                let mut containers =
                    vec![json!({ "name": "c", "resources": { "requests": requests, "limits": limits } })];
                containers.extend(more.into_iter().enumerate().map(|(k, (requests, limits))| {
                json!({ "name": format!("c{k}"), "resources": { "requests": requests, "limits": limits } })
            }));
                let init_containers: Vec<Value> = init
                    .into_iter()
                    .enumerate()
                    .map(|(k, (requests, sidecar))| {
                        json!({ "name": format!("i{k}"), "resources": { "requests": requests },
                            "restartPolicy": sidecar.then_some("Always") })
                    })
                    .collect();
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": { "name": format!("p{i}"), "namespace": "ns", "uid": format!("uid-p{i}"),
                                  "annotations": annotations, "labels": labels },
                    "spec": {
                        "schedulerName": if ours { keys::SCHEDULER_NAME } else { "other" },
                        "nodeName": node.map(|n| format!("node-{n}")),
                        "containers": containers,
                        "initContainers": init_containers,
                        "overhead": overhead,
                        "resources": pod_level.map(|requests| json!({ "requests": requests })),
                    },
                    "status": { "phase": phase },
                })
            },
        )
}

fn node(n: &'static str) -> impl Strategy<Value = Value> {
    (
        string_map(vec![
            keys::NODE_GPU_MEMORY,
            keys::NODE_GPU_COUNT,
            keys::NODE_POOL,
            "zone",
        ]),
        resources(),
        any::<bool>(),
    )
        .prop_map(move |(labels, allocatable, unschedulable)| {
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": { "name": format!("node-{n}"), "uid": format!("uid-node-{n}"), "labels": labels },
                "spec": { "unschedulable": unschedulable },
                "status": { "allocatable": allocatable, "capacity": allocatable },
            })
        })
}

fn pod_group(n: &'static str) -> impl Strategy<Value = Value> {
    (
        (
            any::<Option<i32>>(),
            any::<Option<i32>>(),
            prop::option::of(name()),
        ),
        (
            prop::option::of(name()),
            any::<Option<i32>>(),
            any::<Option<i64>>(),
            prop::option::of(name()),
        ),
        // Many sub-groups, as LeaderWorkerSets and segmented jobs make.
        prop::collection::vec((name(), prop::option::of(name()), any::<Option<i32>>()), 0..40),
        string_map(vec![keys::LAST_START_TIMESTAMP, keys::STALE_TIMESTAMP]),
        prop::option::of((name(), prop::option::of(text()), prop::option::of(text()))),
    )
        .prop_map(
            move |((min, max, queue), (class, priority, timeout, parent), subs, annotations, topology)| {
                let sub_groups: Vec<Value> = subs
                    .into_iter()
                    .map(|(name, parent, min)| json!({ "name": name, "parent": parent, "minMember": min }))
                    .collect();
                json!({
                    "apiVersion": "scheduling.run.ai/v2", "kind": "PodGroup",
                    "metadata": { "name": n, "namespace": "ns", "uid": format!("uid-pg-{n}"),
                                  "annotations": annotations },
                    "spec": {
                        "minMember": min, "maxMember": max, "queue": queue,
                        "priorityClassName": class, "priority": priority,
                        "scheduleTimeoutSeconds": timeout, "parentPodGroup": parent,
                        "subGroups": sub_groups,
                        "topologyConstraint": topology.map(|(t, r, p)| json!({
                            "topology": t, "requiredTopologyLevel": r, "preferredTopologyLevel": p,
                        })),
                    },
                })
            },
        )
}

fn queue(n: &'static str) -> impl Strategy<Value = Value> {
    (
        prop::option::of(name()),
        prop::option::of(text()),
        prop::option::of(text()),
        prop::collection::vec(-2.0e18f64..2.0e18, 3),
        any::<Option<i32>>(),
    )
        .prop_map(move |(parent, preempt, reclaim, numbers, priority)| {
            let quota = json!({ "quota": numbers[0], "limit": numbers[1], "overQuotaWeight": numbers[2] });
            json!({
                "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                "metadata": { "name": n, "uid": format!("uid-q-{n}") },
                "spec": {
                    "parentQueue": parent, "priority": priority,
                    "preemptMinRuntime": preempt, "reclaimMinRuntime": reclaim,
                    "resources": { "gpu": quota, "cpu": quota, "memory": quota },
                },
            })
        })
}

/// The JSON as the typed object, when the API server could have stored it (the schema's types hold).
fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Option<T> {
    serde_json::from_value(value).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_objects_are_read_and_scheduled_without_panic(
        nodes in (node("a"), node("b")),
        pods in (pod(0), pod(1), pod(2), pod(3)),
        groups in (pod_group("a"), pod_group("b"), pod_group("c")),
        queues in (queue("a"), queue("b"), queue("c")),
    ) {
        let mut names = ResourceNames::default();
        let mut cluster = Cluster::default();
        for q in [queues.0, queues.1, queues.2] {
            if let Some(q) = typed::<api::Queue>(q) {
                cluster.apply_queue(convert::queue(&mut names, &q));
            }
        }
        for n in [nodes.0, nodes.1] {
            if let Some(n) = typed::<Node>(n) {
                cluster.apply_node(convert::node(&mut names, &n));
            }
        }
        for g in [groups.0, groups.1, groups.2] {
            if let Some(g) = typed::<api::PodGroup>(g) {
                cluster.apply_group(convert::pod_group(&g, keys::DEFAULT_QUEUE));
            }
        }
        for p in [pods.0, pods.1, pods.2, pods.3] {
            if let Some(p) = typed::<Pod>(p) {
                cluster.apply_pod(convert::pod(&mut names, &p, keys::SCHEDULER_NAME));
            }
        }
        let config = Config::default();
        for cycle in 0..2 {
            let _ = scheduler_core::cycle::run(&mut cluster, &config, 1_767_225_600_000 + cycle * 1000);
        }
        prop_assert_eq!(cluster.check_invariants(), Ok(()));
    }

    #[test]
    fn configuration_text_never_panics(text in any::<String>()) {
        let _ = Config::from_yaml(&text);
    }

    #[test]
    fn configuration_shaped_yaml_never_panics(
        actions in prop::collection::vec(
            prop::sample::select(vec!["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction", "backfill"]),
            0..7,
        ),
        values in prop::collection::vec(text(), 8),
    ) {
        let yaml = format!(
            "actions: [{}]\nplugins:\n  nodeplacement: {{gpu: {:?}, cpu: {:?}}}\n  proportion: {{kValue: {}, reclaimerSaturationMultiplier: {}}}\n  minruntime: {{defaultPreemptMinRuntime: {:?}}}\n  stalegangeviction: {{gracePeriod: {:?}}}\n  consolidation: {{maxPreemptees: {}}}\n  pipelining: {{reservationTtl: {:?}}}\n",
            actions.join(", "),
            values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7],
        );
        if let Ok(config) = Config::from_yaml(&yaml) {
            // What loads, saves and loads again the same.
            let saved = serde_yaml::to_string(&config).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(Config::from_yaml(&saved).ok(), Some(config));
        }
    }

    #[test]
    fn durations_never_panic(text in any::<String>()) {
        let _ = parse_duration(&text);
    }

    #[test]
    fn durations_shaped_text_never_panics(text in "([0-9]{0,25}(\\.[0-9]{0,12})?(ms|s|m|h|)){0,4}") {
        let _ = parse_duration(&text);
    }

    #[test]
    fn formatted_durations_read_back(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }
}
