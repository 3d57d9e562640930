//! Grove (`grove.io` PodCliqueSet, formerly PodGangSet; Dynamo's DynamoGraphDeployment over it is a
//! wrapper): one group per PodGang (`scheduler.grove.io`), the gang Grove computes itself.
//!
//! Grove's pods hang below PodCliqueSet → PodClique; the PodGang is a sibling of the PodCliques (owned
//! by the set), not an owner of the pods. A pod names its gang in the label `grove.io/podgang`; the rules
//! read that PodGang from the caches ([`ClusterView::object`](super::ClusterView::object)), and the
//! controller keeps its kind cached and re-groups the pods when it changes (Grove fills its pod
//! references as the pods appear).
//!
//! The PodGroup is the one the default rule makes from the PodGang (`pg-<podgang>-<uid>`, owned by it,
//! its labels and annotations), with the top owner's labels and annotations where the PodGang lacks
//! them, its `spec.priorityClassName` after the `priorityClassName` label, its pack constraint, and
//! sub-groups: one parent per `spec.topologyConstraintGroupConfigs[]` entry that names pod groups, one
//! child per `spec.podgroups[]` entry of `minReplicas` pods (their sum is `minMember`). A pod belongs to
//! the child whose `podReferences` name it.
//!
//! Where KAI refuses the PodGang (a bad entry, a reference to another namespace, a pack constraint
//! without a topology name), the entry, reference or constraint is left out and the user is told.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use api::{SubGroup, keys, podgroup::TopologyConstraint};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use serde_json::Value;

use super::common::{annotations, inherit_metadata, name};
use super::generic::whole;
use super::json::{at, clamp_i32, group_kind, int_at, str_at};
use super::{GroupingError, Related, Shape, Warning, Workload};

/// `apiVersion` of the PodGang.
pub(crate) const PODGANG_API_VERSION: &str = "scheduler.grove.io/v1alpha1";
/// Kind of the PodGang.
pub(crate) const PODGANG_KIND: &str = "PodGang";

/// Whether a top owner is Grove's set (its current name or the older one).
fn is_grove_set(top: &DynamicObject) -> bool {
    matches!(group_kind(top), ("grove.io", "PodCliqueSet" | "PodGangSet"))
}

/// The PodGang the pod's label names, if any.
fn podgang_name(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::GROVE_PODGANG))
        .map(String::as_str)
        .filter(|n| !n.is_empty())
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

/// The PodGang the rules will read for a pod below `top`, for the controller to have it cached.
pub(crate) fn related(pod: &Pod, top: &DynamicObject) -> Option<Related> {
    if !is_grove_set(top) {
        return None;
    }
    Some(Related {
        api_version: PODGANG_API_VERSION,
        kind: PODGANG_KIND,
        namespace: namespace(pod).to_owned(),
        name: podgang_name(pod)?.to_owned(),
    })
}

/// For a pod below a Grove set: the workload with its PodGang as the top owner (carrying the set's
/// labels and annotations where it lacks them) and no owners below it, as KAI's default rule sees the
/// PodGang. Other workloads are returned as they are.
///
/// A pod without the `grove.io/podgang` label is grouped by the set alone (the default rule), with a
/// warning: it belongs to no gang Grove made.
///
/// # Errors
/// [`GroupingError::NotReady`] while the PodGang is not in the caches (Grove creates it after the pods).
pub(crate) fn retarget<'a>(
    w: Workload<'a>,
    warnings: &mut Vec<Warning>,
) -> Result<Workload<'a>, GroupingError> {
    if !is_grove_set(&w.top) {
        return Ok(w);
    }
    let (_, set_kind) = group_kind(&w.top);
    let Some(gang_name) = podgang_name(w.pod) else {
        warnings.push(Warning::Workload {
            detail: format!(
                "the pod belongs to {set_kind} {} but has no {} label naming its PodGang; grouped by the {set_kind} alone (minMember 1)",
                name(&w.top),
                keys::GROVE_PODGANG
            ),
        });
        return Ok(w);
    };
    let Some(gang) = w
        .view
        .object(PODGANG_API_VERSION, PODGANG_KIND, namespace(w.pod), gang_name)
    else {
        return Err(GroupingError::NotReady {
            kind: set_kind.to_owned(),
            name: name(&w.top).to_owned(),
            detail: format!(
                "its PodGang {gang_name} ({} on the pod) does not exist yet or cannot be read",
                keys::GROVE_PODGANG
            ),
        });
    };
    let mut top = (*gang).clone();
    inherit_metadata(&mut top, &w.top);
    Ok(Workload {
        top: Cow::Owned(top),
        below: &[],
        ..w
    })
}

/// The group of a PodGang (the top owner after [`retarget`]).
pub(crate) fn podgang(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let gang = w.top.as_ref();
    let gang_name = name(gang);
    let spec = at(&gang.data, &["spec"]).unwrap_or(&Value::Null);
    let a = annotations(gang);
    let topology = a
        .get(keys::GROVE_TOPOLOGY_NAME)
        .or_else(|| a.get(keys::TOPOLOGY))
        .map(String::as_str)
        .filter(|t| !t.is_empty());
    let what = |field: &str| format!("{field} of PodGang {gang_name}");

    let mut shape = whole(w, 1, "train");
    shape.gang = true;
    shape.spec_priority_class = str_at(spec, &["priorityClassName"])
        .filter(|c| !c.is_empty())
        .map(|c| (c.to_owned(), what("spec.priorityClassName")));
    shape.topology = pack_constraint(spec, topology, || what("spec.topologyConstraint"), warnings);

    // Sub-group names must be unique (a pod group named like a topology group included).
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut unique = |name: &str, field: &str, warnings: &mut Vec<Warning>| -> bool {
        if seen.insert(name.to_owned()) {
            return true;
        }
        warnings.push(Warning::Workload {
            detail: format!("{} names sub-group {name} a second time; left out", what(field)),
        });
        false
    };

    // Parents: the topology groups that name pod groups (the last one naming a pod group wins, as in
    // KAI).
    let mut sub_groups = Vec::new();
    let mut parent_of: BTreeMap<&str, &str> = BTreeMap::new();
    for (i, config) in list(spec, "topologyConstraintGroupConfigs").iter().enumerate() {
        let field = format!("spec.topologyConstraintGroupConfigs[{i}]");
        let members: Vec<&str> = list(config, "podGroupNames")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if members.is_empty() {
            continue;
        }
        let Some(parent) = str_at(config, &["name"]).filter(|n| !n.is_empty()) else {
            warnings.push(Warning::Workload {
                detail: format!("{} has no name; left out", what(&field)),
            });
            continue;
        };
        if !unique(parent, &field, warnings) {
            continue;
        }
        for member in members {
            parent_of.insert(member, parent);
        }
        sub_groups.push(SubGroup {
            name: parent.to_owned(),
            min_member: None,
            parent: None,
            topology_constraint: pack_constraint(config, topology, || what(&field), warnings),
        });
    }

    // Children: the pod groups, each of its `minReplicas`.
    let pod_name = w.pod.metadata.name.as_deref().unwrap_or_default();
    let pod_namespace = namespace(w.pod);
    let mut min_member: i32 = 0;
    let mut pod_sub_group = None;
    for (i, group) in list(spec, "podgroups").iter().enumerate() {
        let field = format!("spec.podgroups[{i}]");
        let Some(child) = str_at(group, &["name"]).filter(|n| !n.is_empty()) else {
            warnings.push(Warning::Workload {
                detail: format!("{} has no name; left out", what(&field)),
            });
            continue;
        };
        let min_replicas = match int_at(group, &["minReplicas"]) {
            Some(n) if n > 0 => clamp_i32(n),
            other => {
                let value = other.map_or_else(|| "no".to_owned(), |n| n.to_string());
                warnings.push(Warning::Workload {
                    detail: format!(
                        "{} ({child}) has {value} minReplicas, which must be above 0; left out",
                        what(&field)
                    ),
                });
                continue;
            }
        };
        if !unique(child, &field, warnings) {
            continue;
        }
        let mut elsewhere = 0_usize;
        for reference in list(group, "podReferences") {
            if str_at(reference, &["namespace"]) != Some(pod_namespace) {
                elsewhere += 1;
                continue;
            }
            if pod_sub_group.is_none() && str_at(reference, &["name"]) == Some(pod_name) {
                pod_sub_group = Some(child.to_owned());
            }
        }
        if elsewhere > 0 {
            warnings.push(Warning::Workload {
                detail: format!(
                    "{} ({child}) refers to {elsewhere} pod(s) outside namespace {pod_namespace}; those references are ignored",
                    what(&field)
                ),
            });
        }
        let parent = parent_of.get(child).copied();
        sub_groups.push(SubGroup {
            name: child.to_owned(),
            min_member: Some(min_replicas),
            parent: parent.map(str::to_owned),
            topology_constraint: pack_constraint(group, topology, || what(&field), warnings),
        });
        min_member = min_member.saturating_add(min_replicas);
    }
    shape.min_member = min_member;
    shape.sub_groups = sub_groups;
    shape.pod_sub_group = pod_sub_group;
    shape
}

/// The array at `key` of `value` (empty when absent or not an array).
fn list<'v>(value: &'v Value, key: &str) -> &'v [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `topologyConstraint.packConstraint.{required,preferred}` of `holder` as a constraint in the PodGang's
/// topology; without a topology name the constraint is left out with a warning (KAI refuses the gang).
fn pack_constraint(
    holder: &Value,
    topology: Option<&str>,
    what: impl FnOnce() -> String,
    warnings: &mut Vec<Warning>,
) -> Option<TopologyConstraint> {
    let pack = at(holder, &["topologyConstraint", "packConstraint"])?;
    let level = |key: &str| str_at(pack, &[key]).filter(|l| !l.is_empty()).map(str::to_owned);
    let (required, preferred) = (level("required"), level("preferred"));
    if required.is_none() && preferred.is_none() {
        return None;
    }
    let Some(topology) = topology else {
        warnings.push(Warning::Workload {
            detail: format!(
                "{} sets a pack constraint but the PodGang names no topology ({} or {} annotation); placement ignored",
                what(),
                keys::GROVE_TOPOLOGY_NAME,
                keys::TOPOLOGY
            ),
        });
        return None;
    };
    Some(TopologyConstraint {
        topology: Some(topology.to_owned()),
        required_topology_level: required,
        preferred_topology_level: preferred,
    })
}

#[cfg(test)]
mod tests {
    use api::keys;
    use serde_json::{Value, json};

    use super::super::testkit::{View, applied, obj, pod, run, with_annotations, with_labels};
    use super::super::{Decision, GroupingError, Input, Object, Settings, Warning, group, related};

    fn set() -> Object {
        with_labels(
            obj("grove.io/v1alpha1", "PodCliqueSet", "svc", "uid-svc", json!({})),
            &[("team", "set"), (keys::QUEUE_LABEL, "q-set")],
        )
    }

    fn clique(set: &Object, name: &str) -> Object {
        let mut c = (*obj(
            "grove.io/v1alpha1",
            "PodClique",
            name,
            &format!("uid-{name}"),
            json!({}),
        ))
        .clone();
        c.metadata.owner_references = Some(vec![super::super::common::owner_ref(set)]);
        std::sync::Arc::new(c)
    }

    fn refs(names: &[&str]) -> Value {
        names
            .iter()
            .map(|n| json!({"namespace": "ns", "name": n}))
            .collect()
    }

    /// Two pod groups (prefill of 2 pods, decode of 1) under one topology group, Grove's shape.
    fn gang(spec_extra: Value) -> Object {
        let mut spec = json!({
            "podgroups": [
                {"name": "svc-0-prefill", "minReplicas": 2, "podReferences": refs(&["svc-0-prefill-a", "svc-0-prefill-b"]),
                 "topologyConstraint": {"packConstraint": {"required": "rack"}}},
                {"name": "svc-0-decode", "minReplicas": 1, "podReferences": refs(&["svc-0-decode-a"])},
            ],
            "topologyConstraintGroupConfigs": [
                {"name": "svc-0-pd", "podGroupNames": ["svc-0-prefill", "svc-0-decode"],
                 "topologyConstraint": {"packConstraint": {"preferred": "block"}}},
                {"name": "unused", "podGroupNames": []},
            ],
            "topologyConstraint": {"packConstraint": {"required": "zone"}},
        });
        if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
            s.extend(extra.clone());
        }
        let g = obj(
            "scheduler.grove.io/v1alpha1",
            "PodGang",
            "svc-0",
            "uid-gang",
            spec,
        );
        let g = with_labels(g, &[("team", "gang")]);
        with_annotations(g, &[(keys::GROVE_TOPOLOGY_NAME, "topo")])
    }

    fn view_with(gang: Object) -> View {
        View {
            objects: vec![gang],
            ..View::chart().with_queue("q-set")
        }
    }

    fn grove_pod(name: &str, clique: &Object) -> super::super::testkit::PodB {
        pod(name).owned_by(clique).label(keys::GROVE_PODGANG, "svc-0")
    }

    fn try_group(
        p: &super::super::testkit::PodB,
        owners: &[Object],
        view: &View,
    ) -> Result<super::super::Outcome, GroupingError> {
        let p = p.build();
        group(
            &Input {
                pod: &p,
                owners,
                chain_break: None,
            },
            &Settings::default(),
            view,
        )
    }

    fn details(out: &super::super::Outcome) -> String {
        out.warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn a_podgang_becomes_the_group_with_its_pod_groups_as_sub_groups() {
        let set = set();
        let prefill = clique(&set, "svc-0-prefill");
        let decode = clique(&set, "svc-0-decode");
        let view = view_with(gang(json!({"priorityClassName": "inference"})));

        let out = run(
            &grove_pod("svc-0-prefill-b", &prefill),
            &[prefill.clone(), set.clone()],
            &view,
        );
        assert!(out.warnings.is_empty(), "{}", details(&out));
        let g = applied(&out);
        assert_eq!(g.name, "pg-svc-0-uid-gang");
        assert_eq!(
            (
                g.owner.api_version.as_str(),
                g.owner.kind.as_str(),
                g.owner.name.as_str(),
                g.owner.uid.as_str()
            ),
            ("scheduler.grove.io/v1alpha1", "PodGang", "svc-0", "uid-gang")
        );
        assert_eq!(g.min_member, 3, "the pod groups' minReplicas summed");
        let shape: Vec<(&str, Option<i32>, Option<&str>)> = g
            .sub_groups
            .iter()
            .map(|s| (s.name.as_str(), s.min_member, s.parent.as_deref()))
            .collect();
        assert_eq!(
            shape,
            [
                ("svc-0-pd", None, None),
                ("svc-0-prefill", Some(2), Some("svc-0-pd")),
                ("svc-0-decode", Some(1), Some("svc-0-pd")),
            ]
        );
        let topology = |name: &str| {
            g.sub_groups
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.topology_constraint.clone())
                .map(|c| (c.topology, c.required_topology_level, c.preferred_topology_level))
        };
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(topology("svc-0-pd"), Some((some("topo"), None, some("block"))));
        assert_eq!(
            topology("svc-0-prefill"),
            Some((some("topo"), some("rack"), None))
        );
        assert_eq!(topology("svc-0-decode"), None);
        let group_topology = g
            .topology
            .clone()
            .map(|c| (c.topology, c.required_topology_level));
        assert_eq!(group_topology, Some((some("topo"), some("zone"))));
        assert_eq!(g.pod_sub_group.as_deref(), Some("svc-0-prefill"));
        assert_eq!(g.priority_class_name, "inference", "spec.priorityClassName");
        // The PodGang's labels first, the set's where the PodGang lacks them; the queue with them.
        assert_eq!(g.labels.get("team").map(String::as_str), Some("gang"));
        assert_eq!(g.queue, "q-set");
        assert!(g.annotations[keys::TOP_OWNER_METADATA].contains("kind: PodGang"));

        // Every pod of the gang computes the same group; each finds its own sub-group.
        let decode_out = run(
            &grove_pod("svc-0-decode-a", &decode),
            &[decode.clone(), set.clone()],
            &view,
        );
        let mut other = applied(&decode_out).clone();
        assert_eq!(other.pod_sub_group.as_deref(), Some("svc-0-decode"));
        other.pod_sub_group.clone_from(&g.pod_sub_group);
        assert_eq!(&other, g);
        // A pod Grove has not referenced yet is in the gang but in no sub-group.
        let late = run(&grove_pod("svc-0-decode-new", &decode), &[decode, set], &view);
        assert_eq!(applied(&late).name, g.name);
        assert_eq!(applied(&late).pod_sub_group, None);
    }

    #[test]
    fn priority_label_beats_the_spec_and_annotations_fill_the_topology() {
        let set = with_annotations(
            with_labels(
                set(),
                &[
                    (keys::PRIORITY_CLASS_LABEL, "build"),
                    (keys::PREEMPTIBILITY_LABEL, "preemptible"),
                ],
            ),
            &[
                (keys::TOPOLOGY_PREFERRED, "rack"),
                (keys::TOPOLOGY_REQUIRED, "ignored"),
            ],
        );
        let c = clique(&set, "svc-0-decode");
        let view = view_with(gang(json!({"priorityClassName": "inference"})));
        let out = run(&grove_pod("svc-0-decode-a", &c), &[c.clone(), set.clone()], &view);
        let g = applied(&out);
        assert_eq!(
            g.priority_class_name, "build",
            "the priorityClassName label comes first, as in KAI"
        );
        assert_eq!(g.preemptibility, Some(api::Preemptibility::Preemptible));
        let t = g.topology.clone().expect("a constraint");
        assert_eq!(
            (
                t.topology.as_deref(),
                t.required_topology_level.as_deref(),
                t.preferred_topology_level.as_deref()
            ),
            (Some("topo"), Some("zone"), Some("rack")),
            "the spec's levels, the annotations' where the spec has none"
        );

        // Without a spec constraint, the annotations alone (the topology name from the PodGang).
        let mut plain = (*gang(json!({}))).clone();
        if let Some(spec) = plain.data["spec"].as_object_mut() {
            spec.remove("topologyConstraint");
        }
        let view = view_with(std::sync::Arc::new(plain));
        let set = with_annotations(set, &[(keys::TOPOLOGY, "other")]);
        let out = run(&grove_pod("svc-0-decode-a", &c), &[c, set], &view);
        let t = applied(&out).topology.clone().expect("a constraint");
        assert_eq!(
            (t.topology.as_deref(), t.required_topology_level.as_deref()),
            (Some("other"), Some("ignored")),
            "kai.scheduler/topology of the PodGang, else of the set (grove.io/topology-name serves the pack constraints only)"
        );
    }

    #[test]
    fn a_missing_podgang_is_not_ready_and_a_pod_without_the_label_is_grouped_by_the_set() {
        let set = set();
        let c = clique(&set, "svc-0-decode");
        let owners = [c.clone(), set.clone()];
        let err = try_group(&grove_pod("svc-0-decode-a", &c), &owners, &View::chart());
        assert!(matches!(err, Err(GroupingError::NotReady { .. })), "{err:?}");

        let out = run(&pod("stray").owned_by(&c), &owners, &view_with(gang(json!({}))));
        let g = applied(&out);
        assert_eq!(
            (g.name.as_str(), g.owner.kind.as_str(), g.min_member),
            ("pg-svc-uid-svc", "PodCliqueSet", 1)
        );
        assert!(details(&out).contains(keys::GROVE_PODGANG), "{}", details(&out));
    }

    #[test]
    fn bad_entries_are_left_out_and_reported() {
        let set = set();
        let c = clique(&set, "svc-0-decode");
        let spec = json!({
            "podgroups": [
                {"name": "zero", "minReplicas": 0, "podReferences": refs(&["p"])},
                {"name": "none", "podReferences": refs(&["p"])},
                {"name": "svc-0-decode", "minReplicas": 1,
                 "podReferences": [{"namespace": "other", "name": "svc-0-decode-a"}, {"namespace": "ns", "name": "x"}]},
                {"name": "svc-0-decode", "minReplicas": 4, "podReferences": refs(&["svc-0-decode-a"])},
                {"minReplicas": 4},
            ],
            "topologyConstraintGroupConfigs": [],
            "topologyConstraint": {"packConstraint": {"required": "zone"}},
        });
        let mut g = (*obj(
            "scheduler.grove.io/v1alpha1",
            "PodGang",
            "svc-0",
            "uid-gang",
            spec,
        ))
        .clone();
        g.metadata.annotations = None; // no topology name
        let out = run(
            &grove_pod("svc-0-decode-a", &c),
            &[c, set],
            &view_with(std::sync::Arc::new(g)),
        );
        let grouping = applied(&out);
        assert_eq!(grouping.min_member, 1);
        let names: Vec<&str> = grouping.sub_groups.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["svc-0-decode"]);
        assert_eq!(
            grouping.pod_sub_group, None,
            "a reference to another namespace is refused"
        );
        assert_eq!(
            grouping.topology, None,
            "a pack constraint without a topology name"
        );
        let text = details(&out);
        for expected in [
            "spec.podgroups[0] of PodGang svc-0 (zero) has 0 minReplicas",
            "spec.podgroups[1] of PodGang svc-0 (none) has no minReplicas",
            "refers to 1 pod(s) outside namespace ns",
            "names sub-group svc-0-decode a second time",
            "spec.podgroups[4] of PodGang svc-0 has no name",
            "spec.topologyConstraint of PodGang svc-0 sets a pack constraint but the PodGang names no topology",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert!(out.warnings.iter().all(|w| matches!(w, Warning::Workload { .. })));
    }

    #[test]
    fn a_dynamo_graph_deployment_over_the_set_is_skipped_and_lends_its_metadata() {
        let dgd = with_labels(
            obj(
                "nvidia.com/v1alpha1",
                "DynamoGraphDeployment",
                "dgd",
                "uid-dgd",
                json!({}),
            ),
            &[(keys::QUEUE_LABEL, "q-dgd"), ("team", "dgd"), ("from", "dgd")],
        );
        let mut set = (*set()).clone();
        set.metadata.owner_references = Some(vec![super::super::common::owner_ref(&dgd)]);
        let set = std::sync::Arc::new(set);
        let c = clique(&set, "svc-0-decode");
        let owners = [c.clone(), set, dgd];
        let p = grove_pod("svc-0-decode-a", &c);
        let built = p.build();
        let input = Input {
            pod: &built,
            owners: &owners,
            chain_break: None,
        };
        let wanted = related(&input);
        assert_eq!(
            wanted
                .iter()
                .map(|r| (r.api_version, r.kind, r.namespace.as_str(), r.name.as_str()))
                .collect::<Vec<_>>(),
            [("scheduler.grove.io/v1alpha1", "PodGang", "ns", "svc-0")]
        );
        let out = run(&p, &owners, &view_with(gang(json!({}))));
        let g = applied(&out);
        assert_eq!((g.name.as_str(), g.min_member), ("pg-svc-0-uid-gang", 3));
        assert_eq!(g.queue, "q-set", "the set's label before the wrapper's");
        assert_eq!(g.labels.get("from").map(String::as_str), Some("dgd"));
        assert_eq!(g.labels.get("team").map(String::as_str), Some("gang"));
        assert_eq!(g.priority_class_name, "train", "KAI's default for the PodGang");
        assert!(matches!(out.decision, Decision::Apply(_)));

        // Nothing is related for other kinds.
        let job = obj("batch/v1", "Job", "j", "uid-j", json!({}));
        let p = pod("j-x")
            .owned_by(&job)
            .label(keys::GROVE_PODGANG, "svc-0")
            .build();
        let owners = [job];
        let input = Input {
            pod: &p,
            owners: &owners,
            chain_break: None,
        };
        assert!(related(&input).is_empty());
    }
}
