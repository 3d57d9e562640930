//! Applies watch events to the model. Runs inside the scheduling loop, which owns the model, between
//! cycles; a (re)list is reconciled by deleting what the list no longer contains.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;

use super::watch::{Change, Event, Kind, key, pod_key};
use super::{convert, volumes};
use scheduler_core::model::volumes::ClaimKey;
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
            Event::Claim(c) => self.claim(cluster, *c),
            Event::Volume(c) => self.volume(cluster, *c),
            Event::StorageClass(c) => match c {
                Change::Apply(sc) => cluster.apply_storage_class(volumes::storage_class(&sc)),
                Change::Delete(sc) => cluster.remove_storage_class(&sc.name_any()),
                Change::Listed(keys) => {
                    for name in cluster.volumes.class_names() {
                        if !keys.contains(&*name) {
                            cluster.remove_storage_class(&name);
                        }
                    }
                    self.listed.insert(Kind::StorageClass);
                }
            },
            Event::CsiNode(c) => match c {
                Change::Apply(csi) => {
                    let (node, limits) = volumes::attach_limits(&csi);
                    cluster.apply_attach_limits(node, limits);
                }
                Change::Delete(csi) => cluster.apply_attach_limits(csi.name_any().into(), Vec::new()),
                Change::Listed(keys) => {
                    for node in cluster.volumes.nodes_with_attach_limits() {
                        if !keys.contains(&*node) {
                            cluster.apply_attach_limits(node, Vec::new());
                        }
                    }
                    self.listed.insert(Kind::CsiNode);
                }
            },
        }
    }

    fn claim(&mut self, cluster: &mut Cluster, change: Change<PersistentVolumeClaim>) {
        match change {
            Change::Apply(pvc) => {
                let (claim, faults) = volumes::claim(&pvc);
                if !faults.is_empty() {
                    tracing::warn!(
                        claim = %claim.key,
                        faults = %faults.join("; "),
                        "claim fields that cannot be read are read as fitting no volume"
                    );
                }
                cluster.apply_claim(claim);
            }
            Change::Delete(pvc) => cluster.remove_claim(&volumes::claim_key(&pvc)),
            Change::Listed(keys) => {
                let gone: Vec<ClaimKey> = cluster
                    .volumes
                    .claim_keys()
                    .into_iter()
                    .filter(|k| !keys.contains(&k.to_string()))
                    .collect();
                for k in gone {
                    cluster.remove_claim(&k);
                }
                self.listed.insert(Kind::Claim);
            }
        }
    }

    fn volume(&mut self, cluster: &mut Cluster, change: Change<PersistentVolume>) {
        match change {
            Change::Apply(pv) => {
                let (volume, faults) = volumes::volume(&pv);
                if !faults.is_empty() {
                    tracing::warn!(
                        volume = %volume.name,
                        faults = %faults.join("; "),
                        "volume fields that cannot be read are read as fitting no claim"
                    );
                }
                cluster.apply_volume(volume);
            }
            Change::Delete(pv) => cluster.remove_volume(&pv.name_any()),
            Change::Listed(keys) => {
                for name in cluster.volumes.volume_names() {
                    if !keys.contains(&*name) {
                        cluster.remove_volume(&name);
                    }
                }
                self.listed.insert(Kind::Volume);
            }
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
    use std::collections::HashSet;

    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
    use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
    use scheduler_core::model::Cluster;
    use scheduler_core::model::volumes::ClaimKey;

    use super::{Ingest, Partition};
    use crate::cache::watch::{Change, Event};

    fn yaml<T: serde::de::DeserializeOwned>(y: &str) -> T {
        serde_yaml::from_str(y).expect("yaml")
    }

    fn listed(keys: &[&str]) -> HashSet<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    fn claim(name: &str) -> PersistentVolumeClaim {
        yaml(&format!(
            "metadata: {{name: {name}, namespace: ml, uid: u-{name}}}\nspec: {{storageClassName: local}}"
        ))
    }

    #[test]
    fn storage_objects_reach_the_model_and_a_relist_drops_what_vanished() {
        let mut ingest = Ingest::new("kai-scheduler", "default-queue", Partition::default());
        let mut cluster = Cluster::default();
        for name in ["a", "b"] {
            ingest.apply(&mut cluster, Event::Claim(Box::new(Change::Apply(claim(name)))));
            let pv: PersistentVolume = yaml(&format!("metadata: {{name: pv-{name}}}\nspec: {{}}"));
            ingest.apply(&mut cluster, Event::Volume(Box::new(Change::Apply(pv))));
            let sc: StorageClass = yaml(&format!("metadata: {{name: sc-{name}}}\nprovisioner: x"));
            ingest.apply(&mut cluster, Event::StorageClass(Change::Apply(sc)));
            let csi: CSINode = yaml(&format!(
                "metadata: {{name: n-{name}}}\nspec: {{drivers: [{{name: d, nodeID: x, allocatable: {{count: 3}}}}]}}"
            ));
            ingest.apply(&mut cluster, Event::CsiNode(Change::Apply(csi)));
        }
        let key = |name: &str| ClaimKey {
            namespace: "ml".into(),
            name: name.into(),
        };
        assert!(cluster.volumes.claim(&key("a")).is_some());
        assert!(cluster.volumes.volume("pv-b").is_some());

        ingest.apply(
            &mut cluster,
            Event::Claim(Box::new(Change::Listed(listed(&["ml/b"])))),
        );
        ingest.apply(
            &mut cluster,
            Event::Volume(Box::new(Change::Listed(listed(&["pv-b"])))),
        );
        ingest.apply(
            &mut cluster,
            Event::StorageClass(Change::Listed(listed(&["sc-b"]))),
        );
        ingest.apply(&mut cluster, Event::CsiNode(Change::Listed(listed(&["n-b"]))));
        assert!(cluster.volumes.claim(&key("a")).is_none());
        assert!(cluster.volumes.claim(&key("b")).is_some());
        assert_eq!(cluster.volumes.volume_names(), [std::sync::Arc::from("pv-b")]);
        assert_eq!(cluster.volumes.class_names(), [std::sync::Arc::from("sc-b")]);
        assert_eq!(
            cluster.volumes.nodes_with_attach_limits(),
            [std::sync::Arc::from("n-b")]
        );

        // Deletes, one by one.
        ingest.apply(&mut cluster, Event::Claim(Box::new(Change::Delete(claim("b")))));
        assert!(cluster.volumes.claim(&key("b")).is_none());
        let csi: CSINode = yaml("metadata: {name: n-b}\nspec: {drivers: []}");
        ingest.apply(&mut cluster, Event::CsiNode(Change::Delete(csi)));
        assert!(cluster.volumes.nodes_with_attach_limits().is_empty());
        for kind in [
            super::Kind::Claim,
            super::Kind::Volume,
            super::Kind::StorageClass,
            super::Kind::CsiNode,
        ] {
            assert!(ingest.synced(&[kind]), "{kind:?} listed");
        }
    }

    #[test]
    fn a_pod_waits_for_its_missing_claim_until_the_claim_appears() {
        let mut ingest = Ingest::new("kai-scheduler", "default-queue", Partition::default());
        let mut cluster = Cluster::default();
        let pod: Pod = yaml(
            r#"
metadata: {name: w-0, namespace: ml, uid: p1, annotations: {pod-group-name: g}}
spec:
  schedulerName: kai-scheduler
  containers: [{name: c, image: x}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#,
        );
        ingest.apply(&mut cluster, Event::Pod(Box::new(Change::Apply(pod))));
        let task = cluster.task_id("p1").expect("pod in the model");
        assert_eq!(
            cluster.task(task).problem.as_deref(),
            Some("persistentvolumeclaim \"data\" not found")
        );
        let sc: StorageClass = yaml(
            "metadata: {name: local}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer",
        );
        ingest.apply(&mut cluster, Event::StorageClass(Change::Apply(sc)));
        ingest.apply(&mut cluster, Event::Claim(Box::new(Change::Apply(claim("data")))));
        assert_eq!(cluster.task(task).problem, None);
    }
}

#[cfg(test)]
mod gpu_webhook_tests {
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
