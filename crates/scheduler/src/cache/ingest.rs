//! Applies watch events to the model. Runs inside the scheduling loop, which owns the model, between
//! cycles; a (re)list is reconciled by deleting what the list no longer contains.

use std::collections::HashSet;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;

use super::convert;
use super::watch::{Change, Event, Kind, key, pod_key};
use scheduler_core::model::{Cluster, GroupKey, GroupKind};

/// Event ingestion state.
#[derive(Debug)]
pub struct Ingest {
    /// `spec.schedulerName` of our pods.
    pub scheduler_name: String,
    /// Queue of PodGroups that name none.
    pub default_queue: String,
    /// The node pool this scheduler serves.
    pub partition: Partition,
    /// Refuse to place a pod sharing a GPU that the admission webhook did not prepare
    /// (`gpusharing.requireWebhook`): it becomes the pod's problem.
    pub require_gpu_webhook: bool,
    listed: HashSet<Kind>,
}

/// A node pool (KAI's scheduling shard): the nodes, PodGroups and pods whose pool label equals the
/// value, or, without a value, those that carry no pool label. Several schedulers can so split one
/// cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Label key (KAI's `kai.scheduler/node-pool`).
    pub key: String,
    /// The pool served; `None` serves what carries no pool label.
    pub value: Option<String>,
}

impl Default for Partition {
    fn default() -> Self {
        Self {
            key: api::keys::NODE_POOL.to_owned(),
            value: None,
        }
    }
}

impl Partition {
    /// Whether an object with these labels belongs to the pool.
    #[must_use]
    pub fn admits(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        let value = labels.and_then(|l| l.get(&self.key));
        match &self.value {
            Some(pool) => value == Some(pool),
            None => value.is_none(),
        }
    }
}

impl Ingest {
    /// New ingestion for a scheduler name and default queue.
    #[must_use]
    pub fn new(scheduler_name: &str, default_queue: &str, partition: Partition) -> Self {
        Self {
            scheduler_name: scheduler_name.to_owned(),
            default_queue: default_queue.to_owned(),
            partition,
            require_gpu_webhook: false,
            listed: HashSet::new(),
        }
    }

    /// Whether every kind has been listed once (the model is complete).
    #[must_use]
    pub fn synced(&self, kinds: &[Kind]) -> bool {
        kinds.iter().all(|k| self.listed.contains(k))
    }

    /// Applies one event.
    pub fn apply(&mut self, cluster: &mut Cluster, event: Event) {
        match event {
            Event::Pod(c) => self.pod(cluster, *c),
            Event::Node(c) => match *c {
                Change::Apply(n) if !self.partition.admits(n.metadata.labels.as_ref()) => {
                    cluster.remove_node(&n.name_any());
                }
                Change::Apply(n) => {
                    let (u, faults) = convert::node_with_faults(&mut cluster.names, &n);
                    if !faults.is_empty() {
                        tracing::warn!(
                            node = %u.name,
                            faults = %faults.join("; "),
                            "allocatable that cannot be counted is treated as absent"
                        );
                    }
                    cluster.apply_node(u);
                }
                Change::Delete(n) => cluster.remove_node(&n.name_any()),
                Change::Listed(keys) => {
                    let gone: Vec<String> = cluster
                        .nodes
                        .iter()
                        .map(|(_, n)| n.name.to_string())
                        .filter(|n| !keys.contains(n))
                        .collect();
                    for n in gone {
                        cluster.remove_node(&n);
                    }
                    self.listed.insert(Kind::Node);
                }
            },
            Event::PodGroup(c) => match c {
                Change::Apply(pg) if !self.partition.admits(pg.metadata.labels.as_ref()) => {
                    cluster.remove_group(&group_key(GroupKind::Kai, &key(&pg)));
                }
                Change::Apply(pg) => cluster.apply_group(convert::pod_group(&pg, &self.default_queue)),
                Change::Delete(pg) => cluster.remove_group(&group_key(GroupKind::Kai, &key(&pg))),
                Change::Listed(keys) => {
                    remove_groups(cluster, GroupKind::Kai, &keys);
                    self.listed.insert(Kind::PodGroup);
                }
            },
            Event::VolcanoPodGroup(c) => match c {
                Change::Apply(pg) if !self.partition.admits(pg.metadata.labels.as_ref()) => {
                    cluster.remove_group(&group_key(GroupKind::Volcano, &key(&pg)));
                }
                Change::Apply(pg) => {
                    let g = convert::volcano_pod_group(&mut cluster.names, &pg, &self.default_queue);
                    cluster.apply_group(g);
                }
                Change::Delete(pg) => cluster.remove_group(&group_key(GroupKind::Volcano, &key(&pg))),
                Change::Listed(keys) => {
                    remove_groups(cluster, GroupKind::Volcano, &keys);
                    self.listed.insert(Kind::VolcanoPodGroup);
                }
            },
            Event::Queue(c) => match c {
                Change::Apply(q) => {
                    let q = convert::queue(&mut cluster.names, &q);
                    cluster.apply_queue(q);
                }
                Change::Delete(q) => cluster.remove_queue(&q.name_any()),
                Change::Listed(keys) => {
                    let gone: Vec<String> = cluster
                        .queues
                        .iter()
                        .map(|(_, q)| q.name.to_string())
                        .filter(|q| !keys.contains(q))
                        .collect();
                    for q in gone {
                        cluster.remove_queue(&q);
                    }
                    self.listed.insert(Kind::Queue);
                }
            },
            Event::PriorityClass(c) => match c {
                Change::Apply(pc) => priority_class(cluster, &pc),
                Change::Delete(pc) => cluster.remove_priority_class(&pc.name_any()),
                Change::Listed(keys) => {
                    for name in cluster.priority_class_names() {
                        if !keys.contains(&name) {
                            cluster.remove_priority_class(&name);
                        }
                    }
                    self.listed.insert(Kind::PriorityClass);
                }
            },
            Event::Namespace(c) => match c {
                Change::Apply(ns) => {
                    let labels = ns.metadata.labels.clone().unwrap_or_default();
                    cluster.apply_namespace(&ns.name_any(), Some(labels));
                }
                Change::Delete(ns) => cluster.apply_namespace(&ns.name_any(), None),
                Change::Listed(keys) => {
                    for name in cluster.rules.namespace_names() {
                        if !keys.contains(&name) {
                            cluster.apply_namespace(&name, None);
                        }
                    }
                    self.listed.insert(Kind::Namespace);
                }
            },
            Event::Topology(c) => match c {
                Change::Apply(t) => {
                    let levels = t.spec.levels.iter().map(|l| l.node_label.clone()).collect();
                    cluster.apply_topology(&t.name_any(), levels);
                }
                Change::Delete(t) => cluster.remove_topology(&t.name_any()),
                Change::Listed(keys) => {
                    for name in cluster.topology_names() {
                        if !keys.contains(&name) {
                            cluster.remove_topology(&name);
                        }
                    }
                    self.listed.insert(Kind::Topology);
                }
            },
        }
    }

    fn pod(&mut self, cluster: &mut Cluster, change: Change<k8s_openapi::api::core::v1::Pod>) {
        match change {
            Change::Apply(p) => {
                let mut u = convert::pod(&mut cluster.names, &p, &self.scheduler_name);
                u.ours &= self.partition.admits(p.metadata.labels.as_ref());
                if self.require_gpu_webhook && u.ours && u.api.node_name.is_none() {
                    not_prepared_problem(&mut u, &p);
                }
                // Pods of other schedulers matter only while they hold a node.
                if u.ours || convert::foreign_pod_holds_node(&u) {
                    cluster.apply_pod(u);
                } else {
                    cluster.remove_pod(&u.uid);
                }
            }
            Change::Delete(p) => cluster.remove_pod(&pod_key(&p)),
            Change::Listed(keys) => {
                let gone: Vec<String> = cluster
                    .tasks
                    .iter()
                    .map(|(_, t)| t.uid.to_string())
                    .filter(|uid| !keys.contains(uid))
                    .collect();
                for uid in gone {
                    cluster.remove_pod(&uid);
                }
                self.listed.insert(Kind::Pod);
            }
        }
    }
}

fn group_key(kind: GroupKind, key: &str) -> GroupKey {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    GroupKey {
        kind,
        namespace: ns.into(),
        name: name.into(),
    }
}

fn remove_groups(cluster: &mut Cluster, kind: GroupKind, keys: &HashSet<String>) {
    let gone: Vec<GroupKey> = cluster
        .groups
        .iter()
        .map(|(_, g)| g.key.clone())
        .filter(|k| k.kind == kind && !keys.contains(&format!("{}/{}", k.namespace, k.name)))
        .collect();
    for k in gone {
        cluster.remove_group(&k);
    }
}

fn priority_class(cluster: &mut Cluster, pc: &PriorityClass) {
    cluster.apply_priority_class(&pc.name_any(), pc.value, pc.global_default.unwrap_or(false));
}

/// A sharing pod the GPU-sharing webhook did not point at its device gets that as a problem: the
/// scheduler does not place it (its containers would see every GPU of the node).
fn not_prepared_problem(u: &mut scheduler_core::model::PodUpdate, pod: &k8s_openapi::api::core::v1::Pod) {
    if !crate::gpu_env::asks_for_share(pod.metadata.annotations.as_ref())
        || crate::gpu_env::device_sources(pod).is_some()
    {
        return;
    }
    let problem = crate::gpu_env::not_prepared_problem();
    u.problem = Some(match u.problem.take() {
        Some(other) => format!("{other}; {problem}").into(),
        None => problem.into(),
    });
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use scheduler_core::model::Cluster;
    use serde_json::json;

    use super::{Ingest, Partition};
    use crate::cache::watch::{Change, Event};

    fn sharing_pod(prepared: bool, node: Option<&str>) -> Pod {
        let mut annotations = json!({ api::keys::GPU_FRACTION: "0.5" });
        let mut env = json!([]);
        if prepared {
            annotations[api::keys::GPU_SHARING_CONFIGMAP] = json!("w-abc-shared-gpu");
            env = json!([{ "name": api::keys::NVIDIA_VISIBLE_DEVICES, "valueFrom": { "configMapKeyRef": {
                "name": "w-abc-shared-gpu", "key": api::keys::NVIDIA_VISIBLE_DEVICES } } }]);
        }
        serde_json::from_value(json!({
            "metadata": { "name": "w", "namespace": "n", "uid": "u1", "annotations": annotations },
            "spec": { "schedulerName": api::keys::SCHEDULER_NAME, "nodeName": node,
                      "containers": [{ "name": "c", "env": env }] },
        }))
        .expect("a pod")
    }

    fn problem(require: bool, pod: Pod) -> Option<String> {
        let mut ingest = Ingest::new(api::keys::SCHEDULER_NAME, "q", Partition::default());
        ingest.require_gpu_webhook = require;
        let mut cluster = Cluster::default();
        ingest.apply(&mut cluster, Event::Pod(Box::new(Change::Apply(pod))));
        let (_, task) = cluster.tasks.iter().next().expect("the pod");
        task.problem.as_deref().map(str::to_owned)
    }

    #[test]
    fn an_unprepared_sharing_pod_waits_only_when_the_webhook_is_required() {
        let why = problem(true, sharing_pod(false, None)).expect("a problem");
        assert!(why.contains("GPU-sharing admission webhook"), "{why}");
        assert_eq!(problem(true, sharing_pod(true, None)), None, "prepared");
        assert_eq!(problem(false, sharing_pod(false, None)), None, "not required");
        assert_eq!(
            problem(true, sharing_pod(false, Some("node-a"))),
            None,
            "a pod bound already is left as it runs"
        );
    }
}
