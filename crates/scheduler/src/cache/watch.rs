//! Watch streams that forward raw object changes to the scheduling loop over one bounded channel.
//!
//! Each stream reports `Apply`/`Delete` as they come, and after every (re)list the set of keys it saw,
//! so the loop can drop objects that vanished while the watch was down. The channel is bounded: a busy
//! loop slows the watches instead of buffering the cluster in memory.

use std::collections::HashSet;
use std::fmt::Debug;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::{Instrument, info_span, warn};

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

/// Runs one watch until the channel closes, forwarding changes wrapped by `wrap`.
async fn run<K>(
    api: Api<K>,
    config: watcher::Config,
    tx: mpsc::Sender<Event>,
    kind: Kind,
    wrap: fn(Change<K>) -> Event,
    key_of: fn(&K) -> String,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut stream = watcher(api, config).boxed();
    let mut listing: Option<HashSet<String>> = None;
    loop {
        let event = match stream.try_next().await {
            Ok(Some(e)) => e,
            Ok(None) => return,
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
                Change::Apply(obj)
            }
            watcher::Event::InitDone => Change::Listed(listing.take().unwrap_or_default()),
            watcher::Event::Apply(obj) => Change::Apply(obj),
            watcher::Event::Delete(obj) => Change::Delete(obj),
        };
        if tx.send(wrap(change)).await.is_err() {
            return;
        }
    }
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
/// model is complete.
pub fn start(client: &Client, offered: Offered, capacity: usize) -> (mpsc::Receiver<Event>, Vec<Kind>) {
    let (tx, rx) = mpsc::channel(capacity);
    let mut kinds = vec![
        Kind::Pod,
        Kind::Node,
        Kind::PodGroup,
        Kind::Queue,
        Kind::PriorityClass,
    ];
    let cfg = || watcher::Config::default().page_size(500);
    tokio::spawn(
        run(
            Api::<Pod>::all(client.clone()),
            cfg(),
            tx.clone(),
            Kind::Pod,
            |c| Event::Pod(Box::new(c)),
            pod_key,
        )
        .instrument(info_span!("watch", kind = "pods")),
    );
    tokio::spawn(
        run(
            Api::<Node>::all(client.clone()),
            cfg(),
            tx.clone(),
            Kind::Node,
            |c| Event::Node(Box::new(c)),
            key::<Node>,
        )
        .instrument(info_span!("watch", kind = "nodes")),
    );
    tokio::spawn(
        run(
            Api::<api::PodGroup>::all(client.clone()),
            cfg(),
            tx.clone(),
            Kind::PodGroup,
            Event::PodGroup,
            key::<api::PodGroup>,
        )
        .instrument(info_span!("watch", kind = "podgroups")),
    );
    tokio::spawn(
        run(
            Api::<api::Queue>::all(client.clone()),
            cfg(),
            tx.clone(),
            Kind::Queue,
            Event::Queue,
            key::<api::Queue>,
        )
        .instrument(info_span!("watch", kind = "queues")),
    );
    tokio::spawn(
        run(
            Api::<PriorityClass>::all(client.clone()),
            cfg(),
            tx.clone(),
            Kind::PriorityClass,
            Event::PriorityClass,
            key::<PriorityClass>,
        )
        .instrument(info_span!("watch", kind = "priorityclasses")),
    );
    if offered.volcano {
        kinds.push(Kind::VolcanoPodGroup);
        tokio::spawn(
            run(
                Api::<api::VolcanoPodGroup>::all(client.clone()),
                cfg(),
                tx.clone(),
                Kind::VolcanoPodGroup,
                Event::VolcanoPodGroup,
                key::<api::VolcanoPodGroup>,
            )
            .instrument(info_span!("watch", kind = "volcano-podgroups")),
        );
    }
    if offered.topology {
        kinds.push(Kind::Topology);
        tokio::spawn(
            run(
                Api::<api::Topology>::all(client.clone()),
                cfg(),
                tx,
                Kind::Topology,
                Event::Topology,
                key::<api::Topology>,
            )
            .instrument(info_span!("watch", kind = "topologies")),
        );
    }
    (rx, kinds)
}
