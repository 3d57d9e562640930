//! A snapshot of the objects the scheduler reads, and the scheduler's model built from it.
//!
//! Owns: the raw object lists (from the API server or from YAML such as `kubectl get -o yaml` output) and
//! turning them into a [`Cluster`] through the scheduler's own ingestion (`cache::ingest`, which calls
//! `cache::convert` and `Cluster::apply_*`), so the CLI sees exactly the model the scheduler would.
//!
//! Must not: do I/O (the `app` module lists the objects) or interpret the model (the reports do).

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use scheduler::cache::ingest::{Ingest, Partition};
use scheduler::cache::watch::{Change, Event};
use scheduler::usage;
use scheduler_core::config::UsageSettings;
use scheduler_core::model::{Cluster, GroupKey, GroupKind, Millis};
use serde::Deserialize;

/// Why YAML could not be read as a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Not YAML, or a document without `apiVersion`/`kind`.
    #[error("document {index}: {message}")]
    Document {
        /// Position of the document in the stream, from 1.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// The objects of a cluster that scheduling depends on.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Pods of every namespace.
    pub pods: Vec<Pod>,
    /// `scheduling.run.ai` PodGroups.
    pub pod_groups: Vec<api::PodGroup>,
    /// `scheduling.volcano.sh` PodGroups (empty where the API is not served).
    pub volcano_pod_groups: Vec<api::VolcanoPodGroup>,
    /// Queues.
    pub queues: Vec<api::Queue>,
    /// Priority classes.
    pub priority_classes: Vec<PriorityClass>,
    /// Topologies (empty where the API is not served).
    pub topologies: Vec<api::Topology>,
    /// Namespaces (their labels, for pod affinity terms with a namespace selector).
    pub namespaces: Vec<Namespace>,
    /// PersistentVolumeClaims of every namespace.
    pub claims: Vec<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Vec<PersistentVolume>,
    /// StorageClasses.
    pub storage_classes: Vec<StorageClass>,
    /// CSINodes (per-node attach limits).
    pub csi_nodes: Vec<CSINode>,
    /// ConfigMaps holding a usage record for usage-based fair share (those with its data key).
    pub usage_records: Vec<ConfigMap>,
}

/// What the model's usage-based fair share was taken from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageOrigin {
    /// The configuration has no `usageDBConfig`: fair share ignores usage, as the scheduler does.
    Off,
    /// The record in this ConfigMap (`namespace/name`).
    Record(String),
    /// No such ConfigMap (the scheduler has not stored one yet): every queue's usage is 0, as for a
    /// scheduler starting from an empty record.
    Missing(String),
    /// The ConfigMap holds no valid record; used as empty, as the scheduler would.
    Unreadable {
        /// `namespace/name`.
        configmap: String,
        /// Why.
        error: String,
    },
}

/// What the model needs to know that is not in the objects: the scheduler's settings.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// `spec.schedulerName` of the pods the scheduler places.
    pub scheduler_name: String,
    /// Queue of PodGroups that name none.
    pub default_queue: String,
    /// The node pool the scheduler serves (KAI's scheduling shards).
    pub partition: Partition,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            scheduler_name: api::keys::SCHEDULER_NAME.to_owned(),
            default_queue: api::keys::DEFAULT_QUEUE.to_owned(),
            partition: Partition::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

impl Snapshot {
    /// Reads objects from a YAML stream: any number of documents, each an object or a `List` of objects
    /// (what `kubectl get ... -o yaml` prints, or manifests as written: pods without a UID get
    /// `namespace/name`). Kinds scheduling does not read are skipped.
    ///
    /// # Errors
    /// A document that is not YAML or an object of a known kind that does not match its schema.
    pub fn from_yaml(text: &str) -> Result<Self, SnapshotError> {
        let mut snapshot = Self::default();
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let index = i + 1;
            let value = serde_yaml::Value::deserialize(doc).map_err(|e| SnapshotError::Document {
                index,
                message: e.to_string(),
            })?;
            if value.is_null() {
                continue;
            }
            snapshot.add_value(value, index)?;
        }
        Ok(snapshot)
    }

    fn add_value(&mut self, value: serde_yaml::Value, index: usize) -> Result<(), SnapshotError> {
        let bad = |message: String| SnapshotError::Document { index, message };
        let meta: TypeMeta = serde_yaml::from_value(value.clone()).map_err(|e| bad(e.to_string()))?;
        let group = meta.api_version.split_once('/').map_or("", |(g, _)| g);
        fn parse<T: serde::de::DeserializeOwned>(
            value: serde_yaml::Value,
            kind: &str,
            index: usize,
        ) -> Result<T, SnapshotError> {
            serde_yaml::from_value(value).map_err(|e| SnapshotError::Document {
                index,
                message: format!("{kind}: {e}"),
            })
        }
        match (group, meta.kind.as_str()) {
            (_, "List") => {
                let items = value
                    .get("items")
                    .and_then(serde_yaml::Value::as_sequence)
                    .cloned()
                    .unwrap_or_default();
                for item in items {
                    self.add_value(item, index)?;
                }
            }
            ("", "Node") => self.nodes.push(parse(value, "Node", index)?),
            ("", "Pod") => {
                let mut pod: Pod = parse(value, "Pod", index)?;
                // Manifests as written have no UID, and the model keys pods by it.
                if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
                    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                    let name = pod.metadata.name.as_deref().unwrap_or_default();
                    pod.metadata.uid = Some(format!("{ns}/{name}"));
                }
                self.pods.push(pod);
            }
            ("scheduling.run.ai", "PodGroup") => self.pod_groups.push(parse(value, "PodGroup", index)?),
            ("scheduling.volcano.sh", "PodGroup") => {
                self.volcano_pod_groups
                    .push(parse(value, "PodGroup (volcano)", index)?);
            }
            ("scheduling.run.ai", "Queue") => self.queues.push(parse(value, "Queue", index)?),
            ("scheduling.k8s.io", "PriorityClass") => {
                self.priority_classes.push(parse(value, "PriorityClass", index)?);
            }
            ("kai.scheduler", "Topology") => self.topologies.push(parse(value, "Topology", index)?),
            ("", "Namespace") => self.namespaces.push(parse(value, "Namespace", index)?),
            ("", "PersistentVolumeClaim") => {
                self.claims.push(parse(value, "PersistentVolumeClaim", index)?);
            }
            ("", "PersistentVolume") => self.volumes.push(parse(value, "PersistentVolume", index)?),
            ("storage.k8s.io", "StorageClass") => {
                self.storage_classes.push(parse(value, "StorageClass", index)?);
            }
            ("storage.k8s.io", "CSINode") => self.csi_nodes.push(parse(value, "CSINode", index)?),
            ("", "ConfigMap") => {
                let cm: ConfigMap = parse(value, "ConfigMap", index)?;
                if cm.data.as_ref().is_some_and(|d| d.contains_key(usage::DATA_KEY)) {
                    self.usage_records.push(cm);
                }
            }
            ("", "") => return Err(bad("missing apiVersion and kind".to_owned())),
            _ => {}
        }
        Ok(())
    }

    /// The scheduler's model of these objects, built through the scheduler's own ingestion path.
    #[must_use]
    pub fn model(&self, options: &ModelOptions) -> Cluster {
        let mut ingest = Ingest::new(
            &options.scheduler_name,
            &options.default_queue,
            options.partition.clone(),
        );
        let mut cluster = Cluster::default();
        cluster.node_pool = options.partition.value.as_deref().map(Into::into);
        // References first (priority classes, topologies, queues) so gangs resolve once.
        for pc in &self.priority_classes {
            ingest.apply(&mut cluster, Event::PriorityClass(Change::Apply(pc.clone())));
        }
        for t in &self.topologies {
            ingest.apply(&mut cluster, Event::Topology(Change::Apply(t.clone())));
        }
        for q in &self.queues {
            ingest.apply(&mut cluster, Event::Queue(Change::Apply(q.clone())));
        }
        for ns in &self.namespaces {
            ingest.apply(&mut cluster, Event::Namespace(Change::Apply(ns.clone())));
        }
        // Storage before pods, so each pod's claims are read once.
        for sc in &self.storage_classes {
            ingest.apply(&mut cluster, Event::StorageClass(Change::Apply(sc.clone())));
        }
        for pv in &self.volumes {
            ingest.apply(&mut cluster, Event::Volume(Box::new(Change::Apply(pv.clone()))));
        }
        for pvc in &self.claims {
            ingest.apply(&mut cluster, Event::Claim(Box::new(Change::Apply(pvc.clone()))));
        }
        for csi in &self.csi_nodes {
            ingest.apply(&mut cluster, Event::CsiNode(Change::Apply(csi.clone())));
        }
        for n in &self.nodes {
            ingest.apply(&mut cluster, Event::Node(Box::new(Change::Apply(n.clone()))));
        }
        for pg in &self.pod_groups {
            ingest.apply(&mut cluster, Event::PodGroup(Change::Apply(pg.clone())));
        }
        for pg in &self.volcano_pod_groups {
            ingest.apply(&mut cluster, Event::VolcanoPodGroup(Change::Apply(pg.clone())));
        }
        for p in &self.pods {
            ingest.apply(&mut cluster, Event::Pod(Box::new(Change::Apply(p.clone()))));
        }
        cluster
    }

    /// Sets the model's historical usage from the record in ConfigMap `namespace/name`, as the
    /// scheduler with these settings reads it at `now` (usage-based fair share); without settings,
    /// leaves it empty.
    pub fn apply_usage(
        &self,
        cluster: &mut Cluster,
        settings: Option<&UsageSettings>,
        namespace: &str,
        name: &str,
        now: Millis,
    ) -> UsageOrigin {
        let Some(settings) = settings else {
            return UsageOrigin::Off;
        };
        let id = format!("{namespace}/{name}");
        let found = self.usage_records.iter().find(|cm| {
            cm.metadata.name.as_deref() == Some(name)
                && cm.metadata.namespace.as_deref().unwrap_or("default") == namespace
        });
        let Some(cm) = found else {
            return UsageOrigin::Missing(id);
        };
        match usage::decode_configmap(name, cm) {
            Ok(record) => {
                cluster.set_historical_usage(record.normalized(&settings.params, now));
                UsageOrigin::Record(id)
            }
            Err(e) => UsageOrigin::Unreadable {
                configmap: id,
                error: e.to_string(),
            },
        }
    }

    /// The PodGroup named `namespace/name`: KAI's if it exists, else Volcano's.
    #[must_use]
    pub fn find_pod_group(&self, namespace: &str, name: &str) -> Option<GroupKey> {
        let matches = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.name.as_deref() == Some(name) && m.namespace.as_deref().unwrap_or("default") == namespace
        };
        let kind = if self.pod_groups.iter().any(|pg| matches(&pg.metadata)) {
            GroupKind::Kai
        } else if self.volcano_pod_groups.iter().any(|pg| matches(&pg.metadata)) {
            GroupKind::Volcano
        } else {
            return None;
        };
        Some(GroupKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    /// Names of the PodGroups (both kinds) in a namespace, sorted, for "did you mean" hints.
    #[must_use]
    pub fn pod_group_names(&self, namespace: &str) -> Vec<String> {
        let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            (m.namespace.as_deref().unwrap_or("default") == namespace)
                .then(|| m.name.clone())
                .flatten()
        };
        let mut names: Vec<String> = self
            .pod_groups
            .iter()
            .filter_map(|pg| in_ns(&pg.metadata))
            .chain(
                self.volcano_pod_groups
                    .iter()
                    .filter_map(|pg| in_ns(&pg.metadata)),
            )
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The status of a PodGroup as the scheduler wrote it (KAI PodGroups only; Volcano's status has
    /// another shape).
    #[must_use]
    pub fn pod_group_status(&self, key: &GroupKey) -> Option<&api::PodGroupStatus> {
        if key.kind != GroupKind::Kai {
            return None;
        }
        self.pod_groups
            .iter()
            .find(|pg| {
                pg.metadata.name.as_deref() == Some(&*key.name)
                    && pg.metadata.namespace.as_deref().unwrap_or("default") == &*key.namespace
            })
            .and_then(|pg| pg.status.as_ref())
    }

    /// A Queue's status as written, by name.
    #[must_use]
    pub fn queue_status(&self, name: &str) -> Option<&api::QueueStatus> {
        self.queues
            .iter()
            .find(|q| q.metadata.name.as_deref() == Some(name))
            .and_then(|q| q.status.as_ref())
    }
}
