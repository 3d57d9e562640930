//! The I/O edge that executes decisions: binds through `pods/binding` (concurrently, under the client's
//! QPS budget), evictions through the Eviction API (so PodDisruptionBudgets hold), PodGroup and queue
//! statuses with server-side apply, pod conditions, and events.
//!
//! Results come back to the model as watch events, not as trusted local state; only failures are
//! reported back ([`Feedback`]) so the loop can drop what it assumed. Every write checks leadership
//! right before it is sent: a deposed leader stops writing at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::coalesce::Coalescer;
use crate::loop_state::Feedback;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, MicroTime, ObjectMeta, Preconditions};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use runtime::discovery::{self, EvictOutcome, EvictionVersion};
use runtime::lease::LeaderGuard;
use serde_json::json;
use tokio::sync::{Notify, Semaphore, mpsc};
use tracing::{debug, warn};

use scheduler_core::config::GpuSharingArgs;
use scheduler_core::framework::decisions::{
    Bind, Decisions, Event, EventObject, EventType, Evict, GroupAnnotations, GroupStatus, PodCondition,
    QueueStatus, ReservationChange, reservation_pod_name,
};
use scheduler_core::model::{GpuRequest, GroupKey, GroupKind};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictLabel {
    action: &'static str,
    result: &'static str,
}

/// Counters of writes.
#[derive(Clone, Debug, Default)]
pub struct ApplyMetrics {
    binds: Family<ResultLabel, Counter>,
    evictions: Family<EvictLabel, Counter>,
    status_writes: Family<ResultLabel, Counter>,
}

impl ApplyMetrics {
    /// Registers the counters.
    pub fn register(&self, registry: &mut Registry) {
        registry.register("binds", "Pod binds by result", self.binds.clone());
        registry.register(
            "evictions",
            "Pod evictions by action and result",
            self.evictions.clone(),
        );
        registry.register(
            "status_writes",
            "PodGroup, queue and pod status writes by result",
            self.status_writes.clone(),
        );
    }
}

/// How long a status, annotation, pod condition or event may wait for binds to drain. Binds go first
/// because the API server's write path is the bottleneck and a bound pod is what users wait for; the
/// cap keeps a continuous stream of binds from starving the explanations.
pub const MAX_WRITE_DEFERRAL: Duration = Duration::from_secs(10);

/// Binds submitted and not finished; dropping the last one wakes the writes deferred behind them.
struct BindsInFlight {
    count: AtomicUsize,
    drained: Notify,
}

/// One submitted bind, counted until it is dropped (sent, refused or abandoned).
struct BindTicket(Arc<BindsInFlight>);

impl Drop for BindTicket {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Executes decisions.
pub struct Applier {
    client: Client,
    eviction: EvictionVersion,
    events: EventSeries,
    guard: LeaderGuard,
    feedback: mpsc::UnboundedSender<Feedback>,
    binds: Arc<Semaphore>,
    binds_in_flight: Arc<BindsInFlight>,
    writes: Arc<Semaphore>,
    sharing: GpuSharingArgs,
    metrics: ApplyMetrics,
    // One write per object in flight, so statuses land in the order they were decided.
    group_statuses: Coalescer<GroupKey, GroupStatus>,
    pod_conditions: Coalescer<Arc<str>, PodCondition>,
    queue_statuses: Coalescer<Arc<str>, QueueStatus>,
}

/// How the applier works.
#[derive(Clone, Debug)]
pub struct ApplierOptions {
    /// This replica's identity (events' reporting instance).
    pub identity: String,
    /// Binds in flight at most.
    pub bind_concurrency: usize,
    /// Other writes in flight at most.
    pub write_concurrency: usize,
    /// GPU sharing settings (reservation pods).
    pub gpu_sharing: GpuSharingArgs,
}

fn quantity_text(milli: u32) -> String {
    scheduler_core::model::resources::format_decimal_milli(i64::from(milli))
}

impl Applier {
    /// An applier.
    #[must_use]
    pub fn new(
        client: Client,
        eviction: EvictionVersion,
        guard: LeaderGuard,
        feedback: mpsc::UnboundedSender<Feedback>,
        options: ApplierOptions,
        metrics: ApplyMetrics,
    ) -> Self {
        Self {
            events: EventSeries::new(options.identity.clone()),
            client,
            eviction,
            guard,
            feedback,
            binds: Arc::new(Semaphore::new(options.bind_concurrency.max(1))),
            binds_in_flight: Arc::new(BindsInFlight {
                count: AtomicUsize::new(0),
                drained: Notify::new(),
            }),
            writes: Arc::new(Semaphore::new(options.write_concurrency.max(1))),
            sharing: options.gpu_sharing,
            metrics,
            group_statuses: Coalescer::default(),
            pod_conditions: Coalescer::default(),
            queue_statuses: Coalescer::default(),
        }
    }

    /// Binds submitted and not yet finished.
    #[must_use]
    pub fn binds_in_flight(&self) -> usize {
        self.binds_in_flight.count.load(Ordering::Acquire)
    }

    /// Waits until no bind is in flight, at most [`MAX_WRITE_DEFERRAL`].
    async fn after_binds(&self) {
        let deadline = tokio::time::Instant::now() + MAX_WRITE_DEFERRAL;
        loop {
            let drained = self.binds_in_flight.drained.notified();
            if self.binds_in_flight() == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                return;
            }
        }
    }

    /// Starts executing a cycle's decisions without waiting for them. Binds and evictions are sent at
    /// once; statuses, annotations, pod conditions and events wait for the binds in flight to finish
    /// (see [`MAX_WRITE_DEFERRAL`]), and a status decided again meanwhile replaces the one waiting.
    pub fn submit(self: &Arc<Self>, d: Decisions) {
        // Binds of one gang share a flag: after one fails, the gang's binds not yet sent are dropped (the
        // pods go back to pending) instead of binding more of a gang that is no longer whole.
        let mut gangs: HashMap<Option<GroupKey>, Arc<AtomicBool>> = HashMap::new();
        self.binds_in_flight
            .count
            .fetch_add(d.binds.len(), Ordering::AcqRel);
        for b in d.binds {
            let failed = gangs
                .entry(b.group.clone())
                .or_insert_with(|| Arc::new(AtomicBool::new(false)))
                .clone();
            let this = self.clone();
            let ticket = BindTicket(self.binds_in_flight.clone());
            tokio::spawn(async move {
                this.bind(b, &failed).await;
                drop(ticket);
            });
        }
        for e in d.evictions {
            let this = self.clone();
            tokio::spawn(async move { this.evict(e).await });
        }
        for s in d.group_statuses {
            self.write_latest(
                |a| &a.group_statuses,
                s.key.clone(),
                s,
                |a, s| async move {
                    a.group_status(s).await;
                },
            );
        }
        for a in d.group_annotations {
            let this = self.clone();
            tokio::spawn(async move {
                this.after_binds().await;
                this.group_annotations(a).await;
            });
        }
        for c in d.pod_conditions {
            self.write_latest(
                |a| &a.pod_conditions,
                c.uid.clone(),
                c,
                |a, c| async move {
                    a.pod_condition(c).await;
                },
            );
        }
        for q in d.queue_statuses {
            self.write_latest(
                |a| &a.queue_statuses,
                q.name.clone(),
                q,
                |a, q| async move {
                    a.queue_status(q).await;
                },
            );
        }
        for r in d.reservations {
            let this = self.clone();
            tokio::spawn(async move { this.reservation(r).await });
        }
        for e in d.events {
            let this = self.clone();
            tokio::spawn(async move {
                this.after_binds().await;
                this.event(e).await;
            });
        }
    }

    /// Writes `value` of `key` through its coalescer (`pick`): after the binds in flight, the newest
    /// value offered by then, and each newer one offered while a write is in flight, one at a time.
    fn write_latest<K, V, W, F>(
        self: &Arc<Self>,
        pick: fn(&Self) -> &Coalescer<K, V>,
        key: K,
        value: V,
        write: W,
    ) where
        K: Eq + std::hash::Hash + Clone + Send + 'static,
        V: Send + 'static,
        W: Fn(Arc<Self>, V) -> F + Send + 'static,
        F: Future<Output = ()> + Send,
    {
        let Some(mut value) = pick(self).offer(key.clone(), value) else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            this.after_binds().await;
            if let Some(newer) = pick(&this).take_queued(&key) {
                value = newer;
            }
            loop {
                write(this.clone(), value).await;
                match pick(&this).next(&key) {
                    Some(newer) => value = newer,
                    None => break,
                }
            }
        });
    }

    fn leading(&self) -> bool {
        self.guard.check().is_ok()
    }

    async fn bind(&self, b: Bind, gang_failed: &AtomicBool) {
        let Ok(_permit) = self.binds.acquire().await else {
            return;
        };
        if !self.leading() || (b.group.is_some() && gang_failed.load(Ordering::Acquire)) {
            let _ = self.feedback.send(Feedback::BindFailed { uid: b.uid.clone() });
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &b.namespace);
        // Shared GPUs: label the pod with its device groups before it lands, so a restart rebuilds
        // occupancy from the labels.
        if b.gpu.is_shared()
            && let Err(why) = self.prepare_shared(&pods, &b).await
        {
            warn!(pod = %format!("{}/{}", b.namespace, b.name), error = %why, "preparing shared-GPU pod failed");
            gang_failed.store(true, Ordering::Release);
            self.metrics
                .binds
                .get_or_create(&ResultLabel { result: "error" })
                .inc();
            let _ = self.feedback.send(Feedback::BindFailed { uid: b.uid.clone() });
            self.event(Event {
                object: EventObject::Pod {
                    namespace: b.namespace.clone(),
                    name: b.name.clone(),
                    uid: b.uid.clone(),
                },
                type_: EventType::Warning,
                reason: "FailedBinding",
                message: why,
            })
            .await;
            return;
        }
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(b.name.to_string()),
                uid: Some(b.uid.to_string()),
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                kind: Some("Node".to_owned()),
                name: Some(b.node.to_string()),
                ..ObjectReference::default()
            },
        };
        match pods
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                &b.name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => {
                self.metrics
                    .binds
                    .get_or_create(&ResultLabel { result: "ok" })
                    .inc();
                debug!(pod = %format!("{}/{}", b.namespace, b.name), node = %b.node, "bound");
            }
            Err(e) => {
                gang_failed.store(true, Ordering::Release);
                self.metrics
                    .binds
                    .get_or_create(&ResultLabel { result: "error" })
                    .inc();
                warn!(pod = %format!("{}/{}", b.namespace, b.name), node = %b.node, error = %e, "bind failed");
                let _ = self.feedback.send(Feedback::BindFailed { uid: b.uid.clone() });
                self.event(Event {
                    object: EventObject::Pod {
                        namespace: b.namespace.clone(),
                        name: b.name.clone(),
                        uid: b.uid.clone(),
                    },
                    type_: EventType::Warning,
                    reason: "FailedBinding",
                    message: format!("binding to node {} failed: {e}", b.node),
                })
                .await;
            }
        }
    }

    /// Points a sharing pod at its device(s) before it is bound: waits for each group's reservation
    /// pod to report the device it holds (creating the pod if needed), then labels the pod with its
    /// groups and annotates the fraction, the resource type and the device UUIDs.
    async fn prepare_shared(&self, pods: &Api<Pod>, b: &Bind) -> Result<(), String> {
        let mut devices = Vec::with_capacity(b.gpu_groups.len());
        for (i, group) in b.gpu_groups.iter().enumerate() {
            let known = b.devices.get(i).cloned().flatten();
            let device = match known {
                Some(d) => Some(d),
                None if self.sharing.reservation_pods => Some(self.reserved_device(&b.node, group).await?),
                None => None,
            };
            devices.extend(device);
        }
        let mut labels = serde_json::Map::new();
        match b.gpu_groups.as_slice() {
            [one] => {
                labels.insert(api::keys::GPU_GROUP.to_owned(), json!(one.as_ref()));
            }
            many => {
                for g in many {
                    labels.insert(format!("{}/{g}", api::keys::GPU_GROUP), json!(g.as_ref()));
                }
            }
        }
        let mut annotations = serde_json::Map::new();
        annotations.insert(api::keys::RECEIVED_RESOURCE_TYPE.to_owned(), json!("Fraction"));
        if let GpuRequest::Fraction { milli, .. } = b.gpu {
            annotations.insert(api::keys::GPU_FRACTION.to_owned(), json!(quantity_text(milli)));
        }
        if !devices.is_empty() {
            let list: Vec<&str> = devices.iter().map(AsRef::as_ref).collect();
            annotations.insert(api::keys::GPU_DEVICE.to_owned(), json!(list.join(",")));
        }
        let patch =
            json!({ "metadata": { "uid": b.uid.as_ref(), "labels": labels, "annotations": annotations } });
        pods.patch(&b.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| format!("labelling the pod for its shared GPU failed: {e}"))
    }

    /// The device a group's reservation pod holds, creating the pod if it does not exist and waiting
    /// (up to the configured timeout) for it to report the device.
    async fn reserved_device(&self, node: &str, group: &str) -> Result<Arc<str>, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), api::keys::RESERVATION_NAMESPACE);
        let name = reservation_pod_name(node, group);
        let deadline = tokio::time::Instant::now() + self.sharing.reservation_timeout;
        let mut created = false;
        loop {
            match pods.get_opt(&name).await {
                Ok(Some(pod)) => {
                    let device = pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(api::keys::RESERVED_GPU_INDEX))
                        .filter(|d| !d.is_empty());
                    if let Some(d) = device {
                        return Ok(d.as_str().into());
                    }
                }
                Ok(None) if !created => {
                    self.create_reservation(node, group).await?;
                    created = true;
                }
                Ok(None) => {}
                Err(e) => debug!(error = %e, "reading reservation pod"),
            }
            if tokio::time::Instant::now() >= deadline {
                // Give the device back rather than leave a reservation nobody uses.
                let _ = pods.delete(&name, &kube::api::DeleteParams::default()).await;
                return Err(format!(
                    "reservation pod {}/{name} did not report its GPU within {}s",
                    api::keys::RESERVATION_NAMESPACE,
                    self.sharing.reservation_timeout.as_secs()
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Creates the reservation pod of a group (idempotent: an existing pod of that name is fine).
    async fn create_reservation(&self, node: &str, group: &str) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), api::keys::RESERVATION_NAMESPACE);
        let pod: Pod = serde_json::from_value(reservation_pod(node, group, &self.sharing.reservation_image))
            .map_err(|e| format!("building the reservation pod: {e}"))?;
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(format!(
                "creating reservation pod for GPU group {group} on {node}: {e}"
            )),
        }
    }

    async fn reservation(&self, change: ReservationChange) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        match change {
            ReservationChange::Create { node, group } => {
                if let Err(e) = self.create_reservation(&node, &group).await {
                    warn!(error = %e, "reservation pod");
                }
            }
            ReservationChange::Delete { uid, name } => {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), api::keys::RESERVATION_NAMESPACE);
                let params = kube::api::DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        uid: Some(uid.to_string()),
                        resource_version: None,
                    }),
                    ..kube::api::DeleteParams::default()
                };
                if let Err(e) = pods.delete(&name, &params).await {
                    debug!(pod = %name, error = %e, "deleting reservation pod");
                }
            }
        }
    }

    async fn evict(&self, e: Evict) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            let _ = self.feedback.send(Feedback::EvictFailed { uid: e.uid.clone() });
            return;
        }
        let options = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(e.uid.to_string()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        };
        let outcome = discovery::evict(&self.client, self.eviction, &e.namespace, &e.name, &options).await;
        let action = e.cause.as_str();
        let result = match &outcome {
            Ok(EvictOutcome::Evicted) => "ok",
            Ok(EvictOutcome::NotFound) => "gone",
            Ok(EvictOutcome::Blocked { .. }) => "blocked",
            Err(_) => "error",
        };
        self.metrics
            .evictions
            .get_or_create(&EvictLabel { action, result })
            .inc();
        let pod = EventObject::Pod {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            uid: e.uid.clone(),
        };
        match outcome {
            Ok(EvictOutcome::Evicted) => {
                self.event(Event {
                    object: pod,
                    type_: EventType::Normal,
                    reason: api::keys::EVENT_EVICT,
                    message: e.message.clone(),
                })
                .await;
            }
            Ok(EvictOutcome::NotFound) => {}
            Ok(EvictOutcome::Blocked { message, .. }) => {
                let _ = self.feedback.send(Feedback::EvictFailed { uid: e.uid.clone() });
                self.event(Event {
                    object: pod,
                    type_: EventType::Warning,
                    reason: "EvictionBlocked",
                    message: format!("eviction by {action} blocked by a PodDisruptionBudget: {message}"),
                })
                .await;
            }
            Err(err) => {
                warn!(pod = %format!("{}/{}", e.namespace, e.name), error = %err, "eviction failed");
                let _ = self.feedback.send(Feedback::EvictFailed { uid: e.uid.clone() });
            }
        }
    }

    async fn group_status(&self, s: GroupStatus) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        let params = PatchParams::apply(api::keys::FIELD_MANAGER_SCHEDULER).force();
        let result = match s.key.kind {
            GroupKind::Kai => {
                let api: Api<api::PodGroup> = Api::namespaced(self.client.clone(), &s.key.namespace);
                let patch = json!({
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "status": s.status,
                });
                api.patch_status(&s.key.name, &params, &Patch::Apply(&patch))
                    .await
                    .map(drop)
            }
            GroupKind::Volcano => {
                let api: Api<api::VolcanoPodGroup> = Api::namespaced(self.client.clone(), &s.key.namespace);
                let patch = json!({
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "PodGroup",
                    "status": volcano_status(&s.status),
                });
                api.patch_status(&s.key.name, &params, &Patch::Apply(&patch))
                    .await
                    .map(drop)
            }
        };
        self.count_status(result.is_ok());
        if let Err(e) = result {
            debug!(group = %s.key, error = %e, "status write failed");
            let _ = self.feedback.send(Feedback::StatusFailed { key: s.key });
        }
    }

    async fn group_annotations(&self, a: GroupAnnotations) {
        if a.key.kind != GroupKind::Kai || !self.leading() {
            return;
        }
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        let mut annotations = serde_json::Map::new();
        if let Some(t) = a.last_start {
            annotations.insert(
                api::keys::LAST_START_TIMESTAMP.to_owned(),
                json!(scheduler_core::framework::report::status::rfc3339(t)),
            );
        }
        if let Some(t) = a.stale_since {
            annotations.insert(
                api::keys::STALE_TIMESTAMP.to_owned(),
                json!(scheduler_core::framework::report::status::rfc3339(t)),
            );
        }
        let api: Api<api::PodGroup> = Api::namespaced(self.client.clone(), &a.key.namespace);
        let patch = json!({
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": { "name": a.key.name.as_ref(), "annotations": annotations },
        });
        let params = PatchParams::apply(api::keys::FIELD_MANAGER_SCHEDULER_ANNOTATIONS).force();
        let result = api.patch(&a.key.name, &params, &Patch::Apply(&patch)).await;
        self.count_status(result.is_ok());
    }

    async fn pod_condition(&self, c: PodCondition) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &c.namespace);
        let written = self.write_unschedulable_condition(&pods, &c).await;
        self.count_status(written.is_ok());
        if written.is_err() {
            let _ = self.feedback.send(Feedback::PodConditionFailed { uid: c.uid });
        }
    }

    /// Writes `PodScheduled=False` on a pod that is still unbound. The message was decided a cycle ago and a
    /// bind may have landed since (the API server then set `PodScheduled=True`), so the patch is conditional
    /// on the resourceVersion read here: a pod bound in between is left alone.
    async fn write_unschedulable_condition(
        &self,
        pods: &Api<Pod>,
        c: &PodCondition,
    ) -> Result<(), kube::Error> {
        const ATTEMPTS: usize = 3;
        let mut last = Ok(());
        for _ in 0..ATTEMPTS {
            let current = match pods.get_opt(&c.name).await? {
                Some(p) if p.metadata.uid.as_deref() == Some(c.uid.as_ref()) => p,
                // Deleted or replaced by a namesake: nothing to explain.
                _ => return Ok(()),
            };
            if current.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                return Ok(());
            }
            let now = scheduler_core::framework::report::status::rfc3339(
                k8s_openapi::jiff::Timestamp::now().as_millisecond(),
            );
            // Strategic merge keyed by condition type: the kubelet's conditions are left alone.
            let patch = json!({
                "metadata": { "uid": c.uid.as_ref(), "resourceVersion": current.metadata.resource_version },
                "status": { "conditions": [{
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": c.message,
                    "lastTransitionTime": now,
                }]},
            });
            last = pods
                .patch_status(&c.name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .map(drop);
            match &last {
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                _ => return last,
            }
        }
        last
    }

    async fn queue_status(&self, q: QueueStatus) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        let api: Api<api::Queue> = Api::all(self.client.clone());
        let patch = json!({ "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "status": q.status });
        let params = PatchParams::apply(api::keys::FIELD_MANAGER_SCHEDULER).force();
        let result = api.patch_status(&q.name, &params, &Patch::Apply(&patch)).await;
        match &result {
            Ok(_) => tracing::debug!(queue = %q.name, status = ?q.status, "queue status written"),
            Err(error) => tracing::warn!(queue = %q.name, %error, "writing the queue status failed"),
        }
        self.count_status(result.is_ok());
        if result.is_err() {
            let _ = self.feedback.send(Feedback::QueueStatusFailed { name: q.name });
        }
    }

    fn count_status(&self, ok: bool) {
        self.metrics
            .status_writes
            .get_or_create(&ResultLabel {
                result: if ok { "ok" } else { "error" },
            })
            .inc();
    }

    async fn event(&self, e: Event) {
        if !self.leading() {
            return;
        }
        let reference = match &e.object {
            EventObject::PodGroup {
                namespace,
                name,
                uid,
                volcano,
            } => ObjectReference {
                api_version: Some(
                    if *volcano {
                        "scheduling.volcano.sh/v1beta1"
                    } else {
                        "scheduling.run.ai/v2alpha2"
                    }
                    .to_owned(),
                ),
                kind: Some("PodGroup".to_owned()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                uid: Some(uid.to_string()).filter(|u| !u.is_empty()),
                ..ObjectReference::default()
            },
            EventObject::Pod { namespace, name, uid } => ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                uid: Some(uid.to_string()),
                ..ObjectReference::default()
            },
            EventObject::Queue { name } => ObjectReference {
                api_version: Some("scheduling.run.ai/v2".to_owned()),
                kind: Some("Queue".to_owned()),
                name: Some(name.to_string()),
                ..ObjectReference::default()
            },
        };
        let note = truncate(&e.message, 1000);
        let type_ = match e.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let key = EventKey::of(type_, e.reason, &reference, &note);
        let result = match self.events.repeat(&key, now) {
            Some((name, count)) => {
                let patch = json!({ "series": { "count": count, "lastObservedTime": MicroTime(now) } });
                events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| name)
            }
            None => {
                let event = self.events.new_event(type_, e.reason, reference, note, now);
                events
                    .create(&PostParams::default(), &event)
                    .await
                    .map(|_| event.metadata.name.unwrap_or_default())
            }
        };
        match result {
            Ok(name) => self.events.record(key, name, now),
            Err(err) => debug!(error = %err, reason = e.reason, "event not recorded"),
        }
    }
}

/// What makes two events the same occurrence: client-go's correlator folds repeats of one message into
/// a series. kube's `Recorder` leaves the message out of its key, so a gang's second `Unschedulable`
/// reason (e.g. over its queue limit after "waiting for pods") became a repeat of the first and its text
/// was never shown; the message is part of the key here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    type_: &'static str,
    reason: &'static str,
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
    note: String,
}

impl EventKey {
    fn of(type_: &'static str, reason: &'static str, regarding: &ObjectReference, note: &str) -> Self {
        Self {
            type_,
            reason,
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
            note: note.to_owned(),
        }
    }
}

/// How long a published event can be continued as a series (client-go and kube use 6 minutes).
const SERIES_TTL_MS: i64 = 6 * 60 * 1000;

/// The events published recently, to continue a repeat as a series instead of creating another.
struct EventSeries {
    instance: String,
    recent: std::sync::Mutex<HashMap<EventKey, (String, i32, i64)>>,
}

impl EventSeries {
    fn new(instance: String) -> Self {
        Self {
            instance,
            recent: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The event to continue and its next count, when the same event was published within the TTL.
    fn repeat(&self, key: &EventKey, now: k8s_openapi::jiff::Timestamp) -> Option<(String, i32)> {
        let now = now.as_millisecond();
        let mut recent = self.recent.lock().ok()?;
        recent.retain(|_, (_, _, last)| now - *last < SERIES_TTL_MS);
        recent.get(key).map(|(name, count, _)| (name.clone(), count + 1))
    }

    /// Remembers a published event (or the continuation of one).
    fn record(&self, key: EventKey, name: String, now: k8s_openapi::jiff::Timestamp) {
        if let Ok(mut recent) = self.recent.lock() {
            let entry = recent.entry(key).or_insert((name, 0, 0));
            entry.1 += 1;
            entry.2 = now.as_millisecond();
        }
    }

    fn new_event(
        &self,
        type_: &str,
        reason: &str,
        regarding: ObjectReference,
        note: String,
        now: k8s_openapi::jiff::Timestamp,
    ) -> K8sEvent {
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(api::keys::SCHEDULER_NAME),
            now.as_nanosecond()
        );
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some("Scheduling".to_owned()),
            reason: Some(reason.to_owned()),
            type_: Some(type_.to_owned()),
            note: Some(note),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_controller: Some(api::keys::SCHEDULER_NAME.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..K8sEvent::default()
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Our status in Volcano's words (phases Pending, Inqueue, Running, Completed).
fn volcano_status(s: &api::PodGroupStatus) -> serde_json::Value {
    use api::PodGroupPhase as P;
    let phase = match s.phase {
        Some(P::Running) => "Running",
        Some(P::Scheduled | P::PreScheduling) => "Inqueue",
        Some(P::Finished) => "Completed",
        _ => "Pending",
    };
    json!({
        "phase": phase,
        "conditions": s.conditions,
        "running": s.running,
        "succeeded": s.succeeded,
        "failed": s.failed,
    })
}

/// The reservation pod of a shared-GPU group: pinned to the node, asking for one whole GPU, labelled with
/// the group, tolerating every taint (it must land where its sharers run), running `kai-gpu-reservation`,
/// which reports the device the device plugin gave it.
fn reservation_pod(node: &str, group: &str, image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_pod_name(node, group),
            "namespace": api::keys::RESERVATION_NAMESPACE,
            "labels": { "app": api::keys::RESERVATION_APP, api::keys::GPU_GROUP: group },
            "annotations": { "karpenter.sh/do-not-disrupt": "true" },
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": api::keys::RESERVATION_APP,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{ "operator": "Exists" }],
            "containers": [{
                "name": "reservation",
                "image": image,
                "command": ["/kai-gpu-reservation"],
                "env": [
                    { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                    { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                ],
                "resources": {
                    "limits": { "nvidia.com/gpu": "1", "cpu": "10m", "memory": "32Mi" },
                    "requests": { "nvidia.com/gpu": "1", "cpu": "1m", "memory": "16Mi" },
                },
                "securityContext": {
                    "runAsNonRoot": true,
                    "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": { "drop": ["ALL"] },
                },
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_message_continues_a_series() {
        let series = EventSeries::new("replica-a".to_owned());
        let pg = ObjectReference {
            kind: Some("PodGroup".to_owned()),
            namespace: Some("ns".to_owned()),
            name: Some("big".to_owned()),
            uid: Some("u1".to_owned()),
            ..ObjectReference::default()
        };
        let t0 = k8s_openapi::jiff::Timestamp::from_millisecond(1_000_000).unwrap();
        let waiting = EventKey::of("Warning", "Unschedulable", &pg, "waiting for pods");
        assert_eq!(series.repeat(&waiting, t0), None);
        series.record(waiting.clone(), "big.1".to_owned(), t0);
        assert_eq!(series.repeat(&waiting, t0), Some(("big.1".to_owned(), 2)));
        // Same object and reason, another message: a new event, so its text is shown.
        let over_limit = EventKey::of("Warning", "Unschedulable", &pg, "queue q at its limit");
        assert_eq!(series.repeat(&over_limit, t0), None);
        // Past the TTL a repeat starts a new event.
        let later = k8s_openapi::jiff::Timestamp::from_millisecond(1_000_000 + SERIES_TTL_MS).unwrap();
        assert_eq!(series.repeat(&waiting, later), None);
    }
}
