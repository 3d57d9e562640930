//! The owner chain, read from caches: one reflector per owner kind met at run time, metadata-only for
//! kinds whose spec the rules do not read, full objects for the others. A reconcile does not GET each
//! owner level; it GETs only on a cache miss that the watch does not fill within half a second (an owner
//! newer than its watch usually arrives sooner) or for a gang-annotated Deployment/ReplicaSet whose
//! `spec.replicas` the metadata cache lacks.
//!
//! Also keeps which pods hang below which owner, so a changed owner (spec, labels or annotations)
//! re-reconciles its pods without waiting for a pod event. Objects the rules read besides the chain
//! ([`Related`], Grove's PodGang) are cached and read the same way, and recorded by name, so their
//! creation re-reconciles the pods waiting for them too.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta, TypeMeta};
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiCapabilities, ApiResource, Scope};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use runtime::liveness::Liveness;
use serde_json::Value;
use tracing::{debug, error, info, warn};

use crate::grouping::{BreakReason, ChainBreak, Object, Related, pod_as_object};

/// How long a kind found unreadable (RBAC) or unserved (no CRD) is not retried.
const UNAVAILABLE_FOR: Duration = Duration::from_secs(300);
/// How long a reconcile waits for a new kind's cache to fill.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest chain followed (a guard against reference cycles).
const MAX_DEPTH: usize = 16;
/// How long a reconcile waits for an owner missing from its cache to arrive through the watch before
/// it reads it from the API server, and how often it looks.
const ECHO_WAIT: Duration = Duration::from_millis(500);
const ECHO_POLL: Duration = Duration::from_millis(25);

/// Errors reading owners that are worth a retry (a broken chain is not an error: it is reported).
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// The API server failed a request.
    #[error("reading owner {kind} {name}: {source}")]
    Api {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// A new kind's cache did not fill in time.
    #[error("cache of {0} not synced yet")]
    NotSynced(String),
}

/// Kinds whose spec the grouping rules read; the rest are cached as metadata only.
fn needs_spec(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("batch", "Job")
            | ("apps", "StatefulSet")
            | ("jobset.x-k8s.io", "JobSet")
            | ("ray.io", "RayCluster" | "RayJob")
            | ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")
            | ("amlarc.azureml.com", "AmlJob")
            | ("scheduler.grove.io", "PodGang")
    ) || (group == "kubeflow.org" && kind.ends_with("Job"))
}

#[derive(Clone)]
enum Cache {
    Metadata(Store<PartialObjectMeta<DynamicObject>>),
    Full(Store<DynamicObject>),
}

struct KindCache {
    resource: ApiResource,
    namespaced: bool,
    cache: Cache,
}

#[derive(Clone)]
enum KindState {
    Ready(Arc<KindCache>),
    Unavailable { reason: BreakReason, until: Instant },
}

/// Outcome of following one reference.
enum Lookup {
    Found(Object),
    Broken(BreakReason),
}

/// The owner caches and the owner -> pods index.
pub struct Owners {
    client: Client,
    pods: Store<Pod>,
    kinds: RwLock<HashMap<GroupVersionKind, KindState>>,
    starting: tokio::sync::Mutex<()>,
    below: Arc<Mutex<OwnerIndex>>,
    trigger: UnboundedSender<ObjectRef<Pod>>,
    liveness: Liveness,
}

impl Owners {
    /// Owner caches over `client`; pods come from the controller's pod cache; re-reconcile requests go
    /// to `trigger`. Each owner kind's watch is a task of `liveness`.
    #[must_use]
    pub fn new(
        client: Client,
        pods: Store<Pod>,
        trigger: UnboundedSender<ObjectRef<Pod>>,
        liveness: Liveness,
    ) -> Self {
        Self {
            client,
            pods,
            kinds: RwLock::default(),
            starting: tokio::sync::Mutex::new(()),
            below: Arc::default(),
            trigger,
            liveness,
        }
    }

    /// The pod's owners, nearest first, and where the chain broke if it did. Records the pod under
    /// each owner for owner-change triggers.
    ///
    /// # Errors
    /// A failed API request or a cache that does not sync in time.
    pub async fn chain(&self, pod: &Pod) -> Result<(Vec<Object>, Option<ChainBreak>), OwnerError> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let mut owners: Vec<Object> = Vec::new();
        let mut next = controller_ref(pod.metadata.owner_references.as_deref());
        while let Some(reference) = next {
            if owners.len() >= MAX_DEPTH {
                break;
            }
            match self.lookup(&reference, &namespace).await? {
                Lookup::Found(owner) => {
                    next = controller_ref(owner.metadata.owner_references.as_deref());
                    owners.push(owner);
                }
                Lookup::Broken(reason) => {
                    let brk = ChainBreak {
                        api_version: reference.api_version.clone(),
                        kind: reference.kind.clone(),
                        name: reference.name.clone(),
                        reason,
                    };
                    self.remember(pod, &owners);
                    return Ok((owners, Some(brk)));
                }
            }
        }
        self.remember(pod, &owners);
        Ok((owners, None))
    }

    fn remember(&self, pod: &Pod, owners: &[Object]) {
        let uids = owners.iter().filter_map(|o| o.metadata.uid.clone()).collect();
        self.below
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(ObjectRef::from_obj(pod), uids);
    }

    /// The objects the rules will read for `pod` besides its chain, from their kinds' caches (started on
    /// first use) or, on a miss the watch does not fill within [`ECHO_WAIT`], from the API server. Objects
    /// that do not exist or may not be read are left out. Records the pod under each object's name, so
    /// the object's creation or change re-reconciles it; call after [`Self::chain`], which replaces what
    /// was recorded for the pod.
    ///
    /// # Errors
    /// A failed API request or a cache that does not sync in time.
    pub async fn related(&self, pod: &Pod, related: &[Related]) -> Result<Vec<Object>, OwnerError> {
        if related.is_empty() {
            return Ok(Vec::new());
        }
        let keys = related
            .iter()
            .map(|r| {
                let gvk = gvk_of(r.api_version, r.kind);
                name_key(&gvk.group, &gvk.kind, &r.namespace, &r.name)
            })
            .collect();
        // Recorded before the read: an object created meanwhile then still triggers the pod.
        self.below
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .add(ObjectRef::from_obj(pod), keys);
        let mut found = Vec::with_capacity(related.len());
        for r in related {
            match self
                .find(&gvk_of(r.api_version, r.kind), &r.namespace, &r.name, None)
                .await?
            {
                Lookup::Found(o) => found.push(o),
                Lookup::Broken(reason) => {
                    debug!(kind = r.kind, name = %r.name, ?reason, "related object not readable");
                }
            }
        }
        Ok(found)
    }

    /// Forgets a pod that is gone.
    pub fn forget(&self, pod: &ObjectRef<Pod>) {
        self.below
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .forget(pod);
    }

    /// A cached object of a kind already met, for the rules' lookups (never a request).
    #[must_use]
    pub fn cached(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Object> {
        let gvk = gvk_of(api_version, kind);
        let kinds = self
            .kinds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let KindState::Ready(cache) = kinds.get(&gvk)? else {
            return None;
        };
        cache.get(namespace, name)
    }

    async fn lookup(&self, reference: &OwnerReference, namespace: &str) -> Result<Lookup, OwnerError> {
        if reference.api_version == "v1" && reference.kind == "Pod" {
            return self.lookup_pod(reference, namespace).await;
        }
        let gvk = gvk_of(&reference.api_version, &reference.kind);
        self.find(&gvk, namespace, &reference.name, Some(&reference.uid))
            .await
    }

    /// An object of kind `gvk` by name (and uid, when given): from its kind's cache, else the API server.
    async fn find(
        &self,
        gvk: &GroupVersionKind,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<Lookup, OwnerError> {
        let kind = match self.kind(gvk).await? {
            KindState::Ready(kind) => kind,
            KindState::Unavailable { reason, .. } => return Ok(Lookup::Broken(reason)),
        };
        let wanted = |o: &Object| uid_matches(o, uid);
        if let Some(found) = kind.get(namespace, name).filter(wanted) {
            return self.with_spec_if_needed(&kind, namespace, found).await;
        }
        // A cache miss: the owner is likely newer than our watch (a ReplicaSet or Job whose controller
        // made the pods right after it). Its watch event is usually a moment away: wait for it rather
        // than read every new workload's owner again; a GET settles what does not arrive.
        let deadline = tokio::time::Instant::now() + ECHO_WAIT;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(ECHO_POLL).await;
            if let Some(found) = kind.get(namespace, name).filter(wanted) {
                return self.with_spec_if_needed(&kind, namespace, found).await;
            }
        }
        debug!(kind = %gvk.kind, %name, "owner not cached; reading it");
        let api = kind.api(self.client.clone(), namespace);
        let fetched = match &kind.cache {
            Cache::Metadata(_) => api
                .get_metadata_opt(name)
                .await
                .map(|o| o.map(|m| kind.object_of(m))),
            Cache::Full(_) => api.get_opt(name).await.map(|o| o.map(|o| kind.typed(o))),
        };
        match fetched {
            Ok(Some(o)) if uid_matches(&o, uid) => {
                self.with_spec_if_needed(&kind, namespace, Arc::new(o)).await
            }
            Ok(_) => Ok(Lookup::Broken(BreakReason::Missing)),
            Err(e) if status_code(&e) == Some(403) => Ok(Lookup::Broken(BreakReason::Forbidden)),
            Err(e) if status_code(&e) == Some(404) => Ok(Lookup::Broken(BreakReason::Missing)),
            Err(source) => Err(OwnerError::Api {
                kind: gvk.kind.clone(),
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// Deployments and ReplicaSets are cached as metadata; one that opts into a gang needs its
    /// `spec.replicas`, read on demand.
    async fn with_spec_if_needed(
        &self,
        kind: &KindCache,
        namespace: &str,
        found: Object,
    ) -> Result<Lookup, OwnerError> {
        let gang = found
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(api::keys::GANG_SCHEDULING));
        if !gang || !matches!(kind.cache, Cache::Metadata(_)) {
            return Ok(Lookup::Found(found));
        }
        let name = found.metadata.name.clone().unwrap_or_default();
        match kind.api(self.client.clone(), namespace).get_opt(&name).await {
            Ok(Some(full)) => Ok(Lookup::Found(Arc::new(kind.typed(full)))),
            Ok(None) => Ok(Lookup::Broken(BreakReason::Missing)),
            Err(e) if status_code(&e) == Some(403) => Ok(Lookup::Found(found)),
            Err(source) => Err(OwnerError::Api {
                kind: kind.resource.kind.clone(),
                name,
                source,
            }),
        }
    }

    /// Pods owning pods (LeaderWorkerSet leaders, Spark drivers) are usually scheduler pods: read them
    /// from the pod cache, else GET their metadata.
    async fn lookup_pod(&self, reference: &OwnerReference, namespace: &str) -> Result<Lookup, OwnerError> {
        let key = ObjectRef::<Pod>::new(&reference.name).within(namespace);
        if let Some(p) = self
            .pods
            .get(&key)
            .filter(|p| p.metadata.uid.as_deref() == Some(&reference.uid))
        {
            return Ok(Lookup::Found(Arc::new(pod_as_object(&p))));
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match api.get_metadata_opt(&reference.name).await {
            Ok(Some(m)) if m.metadata.uid.as_deref() == Some(&reference.uid) => {
                Ok(Lookup::Found(Arc::new(DynamicObject {
                    types: Some(TypeMeta {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                    }),
                    metadata: m.metadata,
                    data: Value::Null,
                })))
            }
            Ok(_) => Ok(Lookup::Broken(BreakReason::Missing)),
            Err(e) if status_code(&e) == Some(403) => Ok(Lookup::Broken(BreakReason::Forbidden)),
            Err(source) => Err(OwnerError::Api {
                kind: "Pod".into(),
                name: reference.name.clone(),
                source,
            }),
        }
    }

    /// The cache of a kind, started on first use.
    async fn kind(&self, gvk: &GroupVersionKind) -> Result<KindState, OwnerError> {
        let known = self
            .kinds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(gvk)
            .cloned();
        let state = match known {
            Some(KindState::Unavailable { until, .. }) if until <= Instant::now() => None,
            other => other,
        };
        let state = match state {
            Some(s) => s,
            None => {
                let _one_at_a_time = self.starting.lock().await;
                let again = self
                    .kinds
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get(gvk)
                    .cloned();
                match again {
                    Some(s @ KindState::Ready(_)) => s,
                    Some(s @ KindState::Unavailable { until, .. }) if until > Instant::now() => s,
                    _ => {
                        let s = self.start(gvk).await?;
                        self.kinds
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .insert(gvk.clone(), s.clone());
                        s
                    }
                }
            }
        };
        if let KindState::Ready(kind) = &state {
            let ready = match &kind.cache {
                Cache::Metadata(s) => tokio::time::timeout(SYNC_TIMEOUT, store_ready(s)).await.is_ok(),
                Cache::Full(s) => tokio::time::timeout(SYNC_TIMEOUT, store_ready(s)).await.is_ok(),
            };
            if !ready {
                return Err(OwnerError::NotSynced(gvk.kind.clone()));
            }
        }
        Ok(state)
    }

    /// Discovers a kind, checks the podgrouper may list it, and starts its reflector.
    async fn start(&self, gvk: &GroupVersionKind) -> Result<KindState, OwnerError> {
        let unavailable = |reason| KindState::Unavailable {
            reason,
            until: Instant::now() + UNAVAILABLE_FOR,
        };
        let (resource, caps): (ApiResource, ApiCapabilities) = match discovery::pinned_kind(&self.client, gvk)
            .await
        {
            Ok(found) => found,
            Err(e) => {
                warn!(kind = %gvk.kind, group = %gvk.group, error = %e, "owner kind not served; grouping falls back below it");
                return Ok(unavailable(BreakReason::NotServed));
            }
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(403) => {
                warn!(kind = %gvk.kind, group = %gvk.group, "may not list owner kind (RBAC); grouping falls back below it");
                return Ok(unavailable(BreakReason::Forbidden));
            }
            Err(source) => {
                return Err(OwnerError::Api {
                    kind: gvk.kind.clone(),
                    name: String::new(),
                    source,
                });
            }
        }
        let full = needs_spec(&gvk.group, &gvk.kind);
        info!(kind = %gvk.kind, group = %gvk.group, version = %gvk.version, full, "watching owner kind");
        let types = TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        };
        let cache = if full {
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            let reader = writer.as_reader();
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(move |o: &mut DynamicObject| {
                    o.metadata.managed_fields = None;
                    if let Some(a) = o.metadata.annotations.as_mut() {
                        a.remove(api::keys::LAST_APPLIED_CONFIGURATION);
                    }
                    o.types = Some(types.clone());
                })
                .reflect(writer);
            self.spawn_trigger(stream, gvk, |o: &DynamicObject| {
                fingerprint(&o.metadata, Some(&o.data))
            });
            Cache::Full(reader)
        } else {
            let writer = reflector::store::Writer::<PartialObjectMeta<DynamicObject>>::new(resource.clone());
            let reader = writer.as_reader();
            let meta_api: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(self.client.clone(), &resource);
            let stream = watcher(meta_api, watcher::Config::default())
                .default_backoff()
                .modify(|o: &mut PartialObjectMeta<DynamicObject>| {
                    o.metadata.managed_fields = None;
                    if let Some(a) = o.metadata.annotations.as_mut() {
                        a.remove(api::keys::LAST_APPLIED_CONFIGURATION);
                    }
                })
                .reflect(writer);
            self.spawn_trigger(stream, gvk, |o: &PartialObjectMeta<DynamicObject>| {
                fingerprint(&o.metadata, None)
            });
            Cache::Metadata(reader)
        };
        Ok(KindState::Ready(Arc::new(KindCache {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
            cache,
        })))
    }

    /// Drives a kind's reflector; on a change that matters (spec, labels, annotations) re-queues the pods
    /// recorded below that owner. Its end marks the process not live (the cache would go stale), unless
    /// the controller has gone.
    fn spawn_trigger<K, S>(&self, stream: S, gvk: &GroupVersionKind, fingerprint: fn(&K) -> u64)
    where
        K: kube::Resource + Send + Sync + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let below = Arc::clone(&self.below);
        let trigger = self.trigger.clone();
        let kind = gvk.kind.clone();
        let group = gvk.group.clone();
        let task = self
            .liveness
            .task(format!("owner cache {}/{}", gvk.group, gvk.kind));
        tokio::spawn(async move {
            let mut seen: HashMap<String, u64> = HashMap::new();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => {
                        warn!(%kind, error = %e, "owner watch failed; retrying");
                        continue;
                    }
                };
                let (obj, initial) = match event {
                    watcher::Event::Apply(o) => (o, false),
                    watcher::Event::InitApply(o) => (o, true),
                    watcher::Event::Delete(o) => {
                        if let Some(uid) = o.meta().uid.as_ref() {
                            seen.remove(uid);
                        }
                        continue;
                    }
                    watcher::Event::Init | watcher::Event::InitDone => continue,
                };
                let Some(uid) = obj.meta().uid.clone() else {
                    continue;
                };
                let print = fingerprint(&obj);
                let previous = seen.insert(uid.clone(), print);
                if initial || previous == Some(print) {
                    continue;
                }
                let pods = {
                    let below = below.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Pods recorded by uid were grouped with this object already: only a change
                    // concerns them. Pods awaiting it by name (a related object) hear of it new too.
                    let mut pods = if previous.is_some() {
                        below.pods_below(&uid)
                    } else {
                        Vec::new()
                    };
                    let meta = obj.meta();
                    let key = name_key(
                        &group,
                        &kind,
                        meta.namespace.as_deref().unwrap_or_default(),
                        meta.name.as_deref().unwrap_or_default(),
                    );
                    pods.extend(below.pods_below(&key));
                    pods
                };
                debug!(%kind, name = ?obj.meta().name, pods = pods.len(), "owner or related object changed; re-grouping its pods");
                for pod in pods {
                    if trigger.unbounded_send(pod).is_err() {
                        // The controller has gone: the process is stopping.
                        task.finish();
                        return;
                    }
                }
            }
            error!(%kind, "owner watch ended");
            drop(task);
        });
    }
}

impl KindCache {
    fn get(&self, namespace: &str, name: &str) -> Option<Object> {
        let mut key = ObjectRef::<DynamicObject>::new_with(name, self.resource.clone());
        if self.namespaced {
            key = key.within(namespace);
        }
        match &self.cache {
            Cache::Full(store) => store.get(&key),
            Cache::Metadata(store) => {
                let mut meta_key =
                    ObjectRef::<PartialObjectMeta<DynamicObject>>::new_with(name, self.resource.clone());
                if self.namespaced {
                    meta_key = meta_key.within(namespace);
                }
                store
                    .get(&meta_key)
                    .map(|m| Arc::new(self.object_of((*m).clone())))
            }
        }
    }

    fn api(&self, client: Client, namespace: &str) -> Api<DynamicObject> {
        if self.namespaced {
            Api::namespaced_with(client, namespace, &self.resource)
        } else {
            Api::all_with(client, &self.resource)
        }
    }

    fn types(&self) -> TypeMeta {
        TypeMeta {
            api_version: self.resource.api_version.clone(),
            kind: self.resource.kind.clone(),
        }
    }

    fn object_of(&self, m: PartialObjectMeta<DynamicObject>) -> DynamicObject {
        DynamicObject {
            types: Some(self.types()),
            metadata: m.metadata,
            data: Value::Null,
        }
    }

    fn typed(&self, mut o: DynamicObject) -> DynamicObject {
        o.types = Some(self.types());
        o
    }
}

/// Which pods hang below which owner (by uid), both ways so a pod is forgotten without a scan.
#[derive(Debug, Default)]
pub(crate) struct OwnerIndex {
    by_owner: HashMap<String, HashSet<ObjectRef<Pod>>>,
    by_pod: HashMap<ObjectRef<Pod>, Vec<String>>,
}

impl OwnerIndex {
    /// Records the pod's current owners (replacing what was recorded for it).
    pub(crate) fn record(&mut self, pod: ObjectRef<Pod>, owner_uids: Vec<String>) {
        self.forget(&pod);
        for uid in &owner_uids {
            self.by_owner.entry(uid.clone()).or_default().insert(pod.clone());
        }
        self.by_pod.insert(pod, owner_uids);
    }

    /// Records the pod under more keys, keeping what was recorded for it.
    pub(crate) fn add(&mut self, pod: ObjectRef<Pod>, keys: Vec<String>) {
        let recorded = self.by_pod.entry(pod.clone()).or_default();
        for key in keys {
            if recorded.contains(&key) {
                continue;
            }
            self.by_owner.entry(key.clone()).or_default().insert(pod.clone());
            recorded.push(key);
        }
    }

    pub(crate) fn forget(&mut self, pod: &ObjectRef<Pod>) {
        for uid in self.by_pod.remove(pod).unwrap_or_default() {
            if let Some(pods) = self.by_owner.get_mut(&uid) {
                pods.remove(pod);
                if pods.is_empty() {
                    self.by_owner.remove(&uid);
                }
            }
        }
    }

    pub(crate) fn pods_below(&self, owner_uid: &str) -> Vec<ObjectRef<Pod>> {
        self.by_owner
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Waits until `store` is filled. `Store::wait_until_ready` wakes only its latest waiter (a oneshot
/// underneath), so concurrent reconciles waiting on one new kind would sleep until a timeout; polling
/// in short rounds re-registers each waiter.
pub(crate) async fn store_ready<K>(store: &Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    while tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready())
        .await
        .is_err()
    {}
}

/// The reference to follow: the controller reference if one is marked, else the first (KAI follows
/// only the first).
fn controller_ref(refs: Option<&[OwnerReference]>) -> Option<OwnerReference> {
    let refs = refs?;
    refs.iter()
        .find(|r| r.controller == Some(true))
        .or_else(|| refs.first())
        .cloned()
}

/// Whether `o` has the uid asked for (any uid when none is).
fn uid_matches(o: &DynamicObject, uid: Option<&str>) -> bool {
    uid.is_none_or(|uid| o.metadata.uid.as_deref() == Some(uid))
}

/// The key a [`Related`] object's pods are recorded under in the [`OwnerIndex`] (owners are recorded
/// by uid; a related object is awaited by name before it exists).
fn name_key(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    format!("{group}/{kind}/{namespace}/{name}")
}

fn gvk_of(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// HTTP status of an API error.
pub(crate) fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// What of an owner matters to grouping: generation (spec), labels, annotations; and for full objects
/// without a generation bump on spec changes, the spec itself.
fn fingerprint(meta: &kube::api::ObjectMeta, data: Option<&Value>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    if let Some(data) = data {
        data.get("spec").map(ToString::to_string).hash(&mut h);
        // A RayJob names its cluster in its status.
        data.pointer("/status/rayClusterName")
            .map(ToString::to_string)
            .hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_records_replaces_and_forgets() {
        let mut index = OwnerIndex::default();
        let a = ObjectRef::<Pod>::new("a").within("ns");
        let b = ObjectRef::<Pod>::new("b").within("ns");
        index.record(a.clone(), vec!["rs".into(), "deploy".into()]);
        index.record(b.clone(), vec!["rs".into()]);
        assert_eq!(index.pods_below("deploy"), vec![a.clone()]);
        assert_eq!(index.pods_below("rs").len(), 2);
        index.record(a.clone(), vec!["other".into()]);
        assert!(index.pods_below("deploy").is_empty());
        index.forget(&b);
        index.forget(&a);
        assert!(index.by_owner.is_empty() && index.by_pod.is_empty());
    }

    #[test]
    fn related_objects_are_added_by_name_until_the_chain_is_recorded_again() {
        let mut index = OwnerIndex::default();
        let a = ObjectRef::<Pod>::new("a").within("ns");
        let gang = name_key("scheduler.grove.io", "PodGang", "ns", "g");
        index.record(a.clone(), vec!["clique".into(), "set".into()]);
        index.add(a.clone(), vec![gang.clone()]);
        index.add(a.clone(), vec![gang.clone()]);
        assert_eq!(index.pods_below(&gang), vec![a.clone()]);
        assert_eq!(index.pods_below("set"), vec![a.clone()]);
        assert_eq!(index.by_pod[&a].len(), 3, "no key twice");
        index.record(a.clone(), vec!["set".into()]);
        assert!(index.pods_below(&gang).is_empty());
        index.add(a.clone(), vec![gang.clone()]);
        index.forget(&a);
        assert!(index.by_owner.is_empty() && index.by_pod.is_empty());
    }

    #[test]
    fn follows_the_controller_reference_first() {
        let r = |name: &str, controller: Option<bool>| OwnerReference {
            name: name.into(),
            controller,
            ..OwnerReference::default()
        };
        let refs = [r("plain", None), r("ctrl", Some(true))];
        assert_eq!(
            controller_ref(Some(&refs)).map(|r| r.name),
            Some("ctrl".to_owned())
        );
        assert_eq!(
            controller_ref(Some(&refs[..1])).map(|r| r.name),
            Some("plain".to_owned())
        );
        assert_eq!(controller_ref(None), None);
    }

    #[test]
    fn fingerprint_ignores_status_but_not_spec_labels_or_cluster_name() {
        let meta = kube::api::ObjectMeta {
            generation: Some(1),
            ..Default::default()
        };
        let base = serde_json::json!({"spec": {"replicas": 1}, "status": {"ready": 0}});
        let status_only = serde_json::json!({"spec": {"replicas": 1}, "status": {"ready": 1}});
        let spec = serde_json::json!({"spec": {"replicas": 2}, "status": {"ready": 0}});
        let named = serde_json::json!({"spec": {"replicas": 1}, "status": {"rayClusterName": "c"}});
        let print = |m: &kube::api::ObjectMeta, d: &Value| fingerprint(m, Some(d));
        assert_eq!(print(&meta, &base), print(&meta, &status_only));
        assert_ne!(print(&meta, &base), print(&meta, &spec));
        assert_ne!(print(&meta, &base), print(&meta, &named));
        let labelled = kube::api::ObjectMeta {
            labels: Some([("a".into(), "b".into())].into()),
            ..meta.clone()
        };
        assert_ne!(fingerprint(&meta, None), fingerprint(&labelled, None));
    }

    #[test]
    fn spec_is_cached_only_for_kinds_the_rules_read() {
        assert!(needs_spec("batch", "Job"));
        assert!(needs_spec("kubeflow.org", "PyTorchJob"));
        assert!(needs_spec("ray.io", "RayCluster"));
        assert!(needs_spec("scheduler.grove.io", "PodGang"));
        assert!(!needs_spec("grove.io", "PodCliqueSet"));
        assert!(!needs_spec("apps", "ReplicaSet"));
        assert!(!needs_spec("trainer.kubeflow.org", "TrainJob"));
        assert!(!needs_spec("serving.knative.dev", "Revision"));
    }
}
