//! Watch streams that forward raw object changes to the scheduling loop over one bounded channel.
//!
//! Each stream reports `Apply`/`Delete` as they come, and after every (re)list the set of keys it saw,
//! so the loop can drop objects that vanished while the watch was down. The channel is bounded: a busy
//! loop slows the watches instead of buffering the cluster in memory. A watch that ends while the loop
//! still reads marks the process not live (`/livez`), so it is restarted rather than scheduling on a
//! model that no longer changes.

use std::collections::HashSet;
use std::fmt::Debug;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use runtime::liveness::{Liveness, TaskGuard};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::{Instrument, error, info_span, warn};

/// Kinds of watched objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Pods.
    Pod,
    /// Nodes.
    Node,
    /// KAI PodGroups.
    PodGroup,
    /// Volcano PodGroups.
    VolcanoPodGroup,
    /// Queues.
    Queue,
    /// Priority classes.
    PriorityClass,
    /// Topologies.
    Topology,
    /// Namespaces (their labels, for namespace selectors).
    Namespace,
    /// PersistentVolumeClaims.
    Claim,
    /// PersistentVolumes.
    Volume,
    /// StorageClasses.
    StorageClass,
    /// CSINodes (per-node attach limits).
    CsiNode,
}

/// One change.
#[derive(Debug)]
pub enum Change<K> {
    /// Added or modified.
    Apply(K),
    /// Deleted.
    Delete(K),
    /// A (re)list finished; these keys exist (see [`key`]).
    Listed(HashSet<String>),
}

/// A change of any watched kind.
#[derive(Debug)]
pub enum Event {
    /// Pod (boxed: pods are large and dominate the traffic).
    Pod(Box<Change<Pod>>),
    /// Node.
    Node(Box<Change<Node>>),
    /// KAI PodGroup.
    PodGroup(Change<api::PodGroup>),
    /// Volcano PodGroup.
    VolcanoPodGroup(Change<api::VolcanoPodGroup>),
    /// Queue.
    Queue(Change<api::Queue>),
    /// PriorityClass.
    PriorityClass(Change<PriorityClass>),
    /// Topology.
    Topology(Change<api::Topology>),
    /// Namespace.
    Namespace(Change<Namespace>),
    /// PersistentVolumeClaim (boxed: claims and volumes are large).
    Claim(Box<Change<PersistentVolumeClaim>>),
    /// PersistentVolume.
    Volume(Box<Change<PersistentVolume>>),
    /// StorageClass.
    StorageClass(Change<StorageClass>),
    /// CSINode.
    CsiNode(Change<CSINode>),
}

/// The key an object is tracked by: UID for pods, `namespace/name` for namespaced objects, name otherwise.
pub fn key<K: Resource>(obj: &K) -> String {
    match (obj.meta().namespace.as_deref(), obj.meta().name.as_deref()) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.to_owned(),
        _ => String::new(),
    }
}

/// Key of a pod.
#[must_use]
pub fn pod_key(pod: &Pod) -> String {
    pod.uid().unwrap_or_default()
}

/// Runs one watch until the channel closes, forwarding changes wrapped by `wrap`. `task` marks the
/// process not live if the watch ends any other way (the stream ended, or a panic): the model would never
/// change again.
async fn run<K>(
    api: Api<K>,
    config: watcher::Config,
    tx: mpsc::Sender<Event>,
    kind: Kind,
    wrap: fn(Change<K>) -> Event,
    key_of: fn(&K) -> String,
    task: TaskGuard,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut stream = watcher(api, config).boxed();
    let mut listing: Option<HashSet<String>> = None;
    loop {
        let event = match stream.try_next().await {
            Ok(Some(e)) => e,
            Ok(None) => {
                error!(?kind, "watch stream ended");
                return;
            }
            Err(e) => {
                // The watcher retries with backoff on its own; an error here is transient.
                warn!(?kind, error = %e, "watch error; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        let change = match event {
            watcher::Event::Init => {
                listing = Some(HashSet::new());
                continue;
            }
            watcher::Event::InitApply(obj) => {
                if let Some(l) = listing.as_mut() {
                    l.insert(key_of(&obj));
                }
                Change::Apply(trimmed(obj))
            }
            watcher::Event::InitDone => Change::Listed(listing.take().unwrap_or_default()),
            watcher::Event::Apply(obj) => Change::Apply(trimmed(obj)),
            watcher::Event::Delete(obj) => Change::Delete(trimmed(obj)),
        };
        if tx.send(wrap(change)).await.is_err() {
            // The loop has gone: the process is shutting down.
            task.finish();
            return;
        }
    }
}

/// `obj` without its managed fields, which nothing here reads and which are the bulk of a typical
/// object (a tree of field names per writer): it may wait in the channel while a cycle runs.
fn trimmed<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

/// Spawns [`run`] for one kind, named `name` in logs and in `/livez`.
fn spawn<K>(
    name: &'static str,
    api: Api<K>,
    tx: mpsc::Sender<Event>,
    kind: Kind,
    wrap: fn(Change<K>) -> Event,
    key_of: fn(&K) -> String,
    liveness: &Liveness,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default().page_size(500);
    let task = liveness.task(format!("watch {name}"));
    tokio::spawn(run(api, config, tx, kind, wrap, key_of, task).instrument(info_span!("watch", kind = name)));
}

/// Which optional kinds the server offers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Offered {
    /// `scheduling.volcano.sh` PodGroups.
    pub volcano: bool,
    /// `kai.scheduler` Topologies.
    pub topology: bool,
}

/// Starts every watch; returns the channel the loop reads and the kinds it must see listed before the
/// model is complete. Each watch is a task of `liveness`.
pub fn start(
    client: &Client,
    offered: Offered,
    capacity: usize,
    liveness: &Liveness,
) -> (mpsc::Receiver<Event>, Vec<Kind>) {
    let (tx, rx) = mpsc::channel(capacity);
    let mut kinds = vec![
        Kind::Pod,
        Kind::Node,
        Kind::PodGroup,
        Kind::Queue,
        Kind::PriorityClass,
        Kind::Namespace,
        Kind::Claim,
        Kind::Volume,
        Kind::StorageClass,
        Kind::CsiNode,
    ];
    spawn(
        "pods",
        Api::<Pod>::all(client.clone()),
        tx.clone(),
        Kind::Pod,
        |c| Event::Pod(Box::new(c)),
        pod_key,
        liveness,
    );
    spawn(
        "nodes",
        Api::<Node>::all(client.clone()),
        tx.clone(),
        Kind::Node,
        |c| Event::Node(Box::new(c)),
        key::<Node>,
        liveness,
    );
    spawn(
        "podgroups",
        Api::<api::PodGroup>::all(client.clone()),
        tx.clone(),
        Kind::PodGroup,
        Event::PodGroup,
        key::<api::PodGroup>,
        liveness,
    );
    spawn(
        "queues",
        Api::<api::Queue>::all(client.clone()),
        tx.clone(),
        Kind::Queue,
        Event::Queue,
        key::<api::Queue>,
        liveness,
    );
    spawn(
        "priorityclasses",
        Api::<PriorityClass>::all(client.clone()),
        tx.clone(),
        Kind::PriorityClass,
        Event::PriorityClass,
        key::<PriorityClass>,
        liveness,
    );
    spawn(
        "namespaces",
        Api::<Namespace>::all(client.clone()),
        tx.clone(),
        Kind::Namespace,
        Event::Namespace,
        key::<Namespace>,
        liveness,
    );
    spawn(
        "persistentvolumeclaims",
        Api::<PersistentVolumeClaim>::all(client.clone()),
        tx.clone(),
        Kind::Claim,
        |c| Event::Claim(Box::new(c)),
        key::<PersistentVolumeClaim>,
        liveness,
    );
    spawn(
        "persistentvolumes",
        Api::<PersistentVolume>::all(client.clone()),
        tx.clone(),
        Kind::Volume,
        |c| Event::Volume(Box::new(c)),
        key::<PersistentVolume>,
        liveness,
    );
    spawn(
        "storageclasses",
        Api::<StorageClass>::all(client.clone()),
        tx.clone(),
        Kind::StorageClass,
        Event::StorageClass,
        key::<StorageClass>,
        liveness,
    );
    spawn(
        "csinodes",
        Api::<CSINode>::all(client.clone()),
        tx.clone(),
        Kind::CsiNode,
        Event::CsiNode,
        key::<CSINode>,
        liveness,
    );
    if offered.volcano {
        kinds.push(Kind::VolcanoPodGroup);
        spawn(
            "volcano-podgroups",
            Api::<api::VolcanoPodGroup>::all(client.clone()),
            tx.clone(),
            Kind::VolcanoPodGroup,
            Event::VolcanoPodGroup,
            key::<api::VolcanoPodGroup>,
            liveness,
        );
    }
    if offered.topology {
        kinds.push(Kind::Topology);
        spawn(
            "topologies",
            Api::<api::Topology>::all(client.clone()),
            tx,
            Kind::Topology,
            Event::Topology,
            key::<api::Topology>,
            liveness,
        );
    }
    (rx, kinds)
}
