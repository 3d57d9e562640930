//! The controller around [`crate::grouping`]: watches the scheduler's pods, reads owners and the rest
//! through caches, server-side applies the PodGroup, puts the pod in it, and reports warnings as events
//! on the pod and a condition on the PodGroup.
//!
//! Liveness: the loop that drives the controller beats a heartbeat on every finished reconcile and, every
//! [`HEARTBEAT_PERIOD`], while no reconcile runs; each cache's watch is a task that must not end.
//!
//! Must not: hold grouping rules (they live in `grouping`), or write anything but PodGroups it owns,
//! their `PodGrouperWarning` condition, the pod's group annotation and sub-group label, and events.

mod applied;
mod owners;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use api::{PodGroup, Queue, keys};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use runtime::lease::LeaderGuard;
use runtime::liveness::{Heartbeat, Liveness};
use serde_json::json;
use tracing::{Instrument, debug, error, info, info_span, warn};

pub use owners::{OwnerError, Owners};

use crate::grouping::kind_defaults::KindDefaults;
use crate::grouping::{self, ClusterView, Decision, GroupingError, Input, Object, Settings, Warning};
use crate::metrics::Metrics;

/// Condition type the podgrouper sets on a PodGroup while grouping has warnings.
pub const WARNING_CONDITION: &str = keys::EVENT_PODGROUPER_WARNING;

/// How often the controller's heartbeat is beaten while no reconcile runs: the loop period the liveness
/// timeout is derived from (`--liveness-timeout`, default max(10 x this, 60 s)).
pub const HEARTBEAT_PERIOD: Duration = Duration::from_secs(1);

/// Controller settings (from the binary's flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// Pods with this `spec.schedulerName` are grouped.
    pub scheduler_name: String,
    /// Grouping rule settings.
    pub settings: Settings,
    /// Reconciles run at once.
    pub concurrency: u16,
    /// Instance name reported on events (the pod name in a cluster).
    pub instance: String,
    /// Only pods of this namespace are grouped (all namespaces when `None`).
    pub namespace: Option<String>,
    /// KAI's per-kind defaults ConfigMap, `(namespace, name)`, when one is configured.
    pub kind_defaults: Option<(String, String)>,
}

/// A reconcile failed; the pod is retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the owner chain failed.
    #[error(transparent)]
    Owner(#[from] OwnerError),
    /// The workload is not ready to be grouped.
    #[error(transparent)]
    Grouping(#[from] GroupingError),
    /// Applying the PodGroup failed.
    #[error("applying PodGroup {name}: {source}")]
    ApplyPodGroup {
        /// PodGroup name.
        name: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// Writing the PodGroup's warning condition failed.
    #[error("updating the condition of PodGroup {name}: {source}")]
    Condition {
        /// PodGroup name.
        name: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// Annotating the pod failed.
    #[error("annotating pod: {0}")]
    PatchPod(#[source] kube::Error),
    /// This process does not hold the lease; it must not write.
    #[error("not the leader")]
    NotLeader,
}

impl ReconcileError {
    /// Stable, low-cardinality category (metric label).
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Owner(OwnerError::Api { .. }) => "owner_api",
            Self::Owner(OwnerError::NotSynced(_)) => "owner_cache_not_synced",
            Self::Grouping(e) => e.category(),
            Self::ApplyPodGroup { .. } => "apply_podgroup",
            Self::Condition { .. } => "podgroup_condition",
            Self::PatchPod(_) => "patch_pod",
            Self::NotLeader => "not_leader",
        }
    }
}

/// The cached state the rules may read.
pub struct Caches {
    pods: Store<Pod>,
    owners: Arc<Owners>,
    priority_classes: Store<PriorityClass>,
    priority_classes_synced: Arc<AtomicBool>,
    queues: Store<Queue>,
    queues_synced: Arc<AtomicBool>,
    pod_groups: Store<PodGroup>,
    kind_defaults: KindDefaultsCache,
}

/// The per-kind defaults as last read from their ConfigMap (`None`: none configured, missing, or
/// unreadable).
type KindDefaultsCache = Arc<RwLock<Option<Arc<KindDefaults>>>>;

impl ClusterView for Caches {
    fn object(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Object> {
        self.owners.cached(api_version, kind, namespace, name)
    }

    fn pods(&self, namespace: &str, labels: &[(&str, &str)]) -> Vec<Arc<Pod>> {
        self.pods.state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && labels
                    .iter()
                    .all(|(k, v)| p.labels().get(*k).map(String::as_str) == Some(*v))
        })
    }

    fn priority_class_exists(&self, name: &str) -> Option<bool> {
        self.priority_classes_synced
            .load(Ordering::Relaxed)
            .then(|| self.priority_classes.get(&ObjectRef::new(name)).is_some())
    }

    fn queue_exists(&self, name: &str) -> Option<bool> {
        self.queues_synced
            .load(Ordering::Relaxed)
            .then(|| self.queues.get(&ObjectRef::new(name)).is_some())
    }

    fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>> {
        self.pod_groups.get(&ObjectRef::new(name).within(namespace))
    }

    fn kind_defaults(&self) -> Option<Arc<KindDefaults>> {
        self.kind_defaults
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The caches, plus the related objects this reconcile read (from the caches or, when the watch had not
/// delivered them yet, from the API server).
struct WithRelated<'a> {
    caches: &'a Caches,
    related: &'a [Object],
}

impl ClusterView for WithRelated<'_> {
    fn object(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Object> {
        self.related
            .iter()
            .find(|o| {
                o.types
                    .as_ref()
                    .is_some_and(|t| t.api_version == api_version && t.kind == kind)
                    && o.metadata.namespace.as_deref() == Some(namespace)
                    && o.metadata.name.as_deref() == Some(name)
            })
            .cloned()
            .or_else(|| self.caches.object(api_version, kind, namespace, name))
    }

    fn pods(&self, namespace: &str, labels: &[(&str, &str)]) -> Vec<Arc<Pod>> {
        self.caches.pods(namespace, labels)
    }

    fn priority_class_exists(&self, name: &str) -> Option<bool> {
        self.caches.priority_class_exists(name)
    }

    fn queue_exists(&self, name: &str) -> Option<bool> {
        self.caches.queue_exists(name)
    }

    fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>> {
        self.caches.pod_group(namespace, name)
    }

    fn kind_defaults(&self) -> Option<Arc<KindDefaults>> {
        self.caches.kind_defaults()
    }
}

struct Context {
    client: Client,
    leader: LeaderGuard,
    config: Config,
    caches: Caches,
    metrics: Metrics,
    recorder: Recorder,
    /// Warning messages already reported per pod uid, so each is an event once, not once per reconcile.
    reported: Arc<Mutex<HashMap<String, BTreeSet<String>>>>,
    /// Reconciles started and not yet finished (see [`drive`]).
    running: Arc<AtomicUsize>,
    /// PodGroups applied whose echo the cache may not show yet (see [`applied`]).
    applied: Arc<applied::Applied>,
}

/// Counts one reconcile as running until dropped (finished, failed or cancelled).
struct RunningReconcile(Arc<AtomicUsize>);

impl RunningReconcile {
    fn start(running: &Arc<AtomicUsize>) -> Self {
        running.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(running))
    }
}

impl Drop for RunningReconcile {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Context {
    /// Fails unless this process holds the lease right now.
    fn may_write(&self) -> Result<(), ReconcileError> {
        self.leader
            .check()
            .map(drop)
            .map_err(|_| ReconcileError::NotLeader)
    }
}

/// Runs the podgrouper until `shutdown` resolves. `ready` is set once the pod and PodGroup caches are
/// filled; `leader` is checked right before every write, so a process that lost its lease stops writing
/// at once (the caller stops the controller and exits). The controller's heartbeat and its caches'
/// watches are parts of `liveness`.
pub async fn run(
    client: Client,
    config: Config,
    metrics: Metrics,
    ready: runtime::admin::ReadinessGate,
    leader: LeaderGuard,
    liveness: &Liveness,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger_tx, trigger_rx) = futures::channel::mpsc::unbounded::<ObjectRef<Pod>>();
    let reported: Arc<Mutex<HashMap<String, BTreeSet<String>>>> = Arc::default();

    // Pods of the scheduler, trimmed to what grouping reads.
    let pod_writer = reflector::store::Writer::<Pod>::default();
    let pods = pod_writer.as_reader();
    let owners = Arc::new(Owners::new(
        client.clone(),
        pods.clone(),
        trigger_tx.clone(),
        liveness.clone(),
    ));
    let pod_selector = format!("spec.schedulerName={}", config.scheduler_name);
    let manager = config.settings.field_manager.clone();
    let forget = (Arc::clone(&owners), Arc::clone(&reported));
    // `--namespace`: only that namespace's pods are grouped (and its PodGroups cached).
    let pod_api: Api<Pod> = match &config.namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let pod_group_api: Api<PodGroup> = match &config.namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let pod_stream = watcher(pod_api, watcher::Config::default().fields(&pod_selector))
        .default_backoff()
        .modify(move |p: &mut Pod| trim_pod(p, &manager))
        .map_ok(move |event| {
            if let watcher::Event::Delete(p) = &event {
                forget.0.forget(&ObjectRef::from_obj(p));
                if let Some(uid) = p.metadata.uid.as_ref() {
                    forget
                        .1
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(uid);
                }
            }
            event
        })
        .reflect(pod_writer)
        .applied_objects();

    let (priority_classes, priority_classes_synced) = spawn_cache(
        Api::<PriorityClass>::all(client.clone()),
        "priorityclasses",
        None,
        liveness,
    );
    let (queues, queues_synced) = spawn_cache(Api::<Queue>::all(client.clone()), "queues", None, liveness);
    // A deleted PodGroup is re-made: its pods are re-queued, and what was applied to it is forgotten.
    let applied = Arc::new(applied::Applied::default());
    let (pod_groups, _) = spawn_cache(
        pod_group_api,
        "podgroups",
        Some((pods.clone(), trigger_tx.clone(), Arc::clone(&applied))),
        liveness,
    );

    let kind_defaults = KindDefaultsCache::default();
    if let Some((namespace, name)) = &config.kind_defaults {
        let mut listed = spawn_kind_defaults(
            Api::namespaced(client.clone(), namespace),
            name.clone(),
            Arc::clone(&kind_defaults),
            liveness,
        );
        // Pods grouped before the defaults are read would get the kinds' own priorities; wait for the
        // first listing, but not forever (an unreadable ConfigMap is logged by its watch).
        if tokio::time::timeout(KIND_DEFAULTS_WAIT, listed.wait_for(|l| *l))
            .await
            .is_err()
        {
            warn!(
                configmap = %format!("{namespace}/{name}"),
                "per-kind defaults not read within {KIND_DEFAULTS_WAIT:?}; grouping with the kinds' own defaults until they are"
            );
        }
    }

    let readiness = (pods.clone(), pod_groups.clone());
    tokio::spawn(async move {
        let (pods, pod_groups) = readiness;
        owners::store_ready(&pods).await;
        owners::store_ready(&pod_groups).await;
        info!("caches synced; ready");
        ready.set_ready();
    });

    let reporter = Reporter {
        controller: keys::FIELD_MANAGER_PODGROUPER.to_owned(),
        instance: Some(config.instance.clone()),
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        leader,
        caches: Caches {
            pods: pods.clone(),
            owners,
            priority_classes,
            priority_classes_synced,
            queues,
            queues_synced,
            pod_groups,
            kind_defaults,
        },
        metrics,
        reported,
        config,
        running: Arc::default(),
        applied,
    });
    let concurrency = ctx.config.concurrency;
    let running = Arc::clone(&ctx.running);
    let results = Controller::for_stream(pod_stream, pods)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .reconcile_on(trigger_rx)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx);
    let heartbeat = liveness.heartbeat("controller");
    drive(results, running, heartbeat, HEARTBEAT_PERIOD, |result| {
        if let Err(e) = result {
            debug!(error = %e, "reconcile round ended with an error");
        }
    })
    .await;
}

/// Polls the controller's `results` until they end, handing each to `each`. Beats `heartbeat` on every
/// result and, every `period`, when no reconcile is `running`: an idle controller is live, and so is a
/// busy one whose reconciles finish; one whose reconciles all hang, or whose loop is no longer polled,
/// is not.
async fn drive<T>(
    results: impl futures::Stream<Item = T>,
    running: Arc<AtomicUsize>,
    heartbeat: Heartbeat,
    period: Duration,
    mut each: impl FnMut(T),
) {
    let mut results = std::pin::pin!(results);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            result = results.next() => match result {
                Some(result) => {
                    heartbeat.beat();
                    each(result);
                }
                None => return,
            },
            _ = tick.tick() => {
                if running.load(Ordering::Acquire) == 0 {
                    heartbeat.beat();
                }
            }
        }
    }
}

/// Keeps only what grouping reads: metadata (with only the podgrouper's managed-fields entries),
/// scheduler name, node, priority class; drops containers, volumes and status details.
fn trim_pod(pod: &mut Pod, manager: &str) {
    if let Some(fields) = pod.metadata.managed_fields.as_mut() {
        fields.retain(|f| f.manager.as_deref() == Some(manager));
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.clear();
        spec.init_containers = None;
        spec.volumes = None;
        spec.affinity = None;
        spec.tolerations = None;
    }
    if let Some(status) = pod.status.as_mut() {
        // The phase, and whether the scheduler reported the pod unschedulable (`naming_wait_ms`).
        let unschedulable = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False");
        *status = k8s_openapi::api::core::v1::PodStatus {
            phase: status.phase.take(),
            conditions: unschedulable.then(|| {
                vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "PodScheduled".to_owned(),
                    status: "False".to_owned(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        };
    }
}

/// What a deleted PodGroup touches: the pods that name it are re-queued (from the pod cache, through
/// the trigger) and what was applied to it is forgotten.
type OnDelete = (
    Store<Pod>,
    futures::channel::mpsc::UnboundedSender<ObjectRef<Pod>>,
    Arc<applied::Applied>,
);

/// Starts a cluster-wide cache; the flag turns true once it is filled. With `requeue_on_delete`, a
/// deleted PodGroup re-queues the pods that name it. The cache's watch is a task of `liveness`.
/// How long grouping waits at start for the per-kind defaults' first listing.
const KIND_DEFAULTS_WAIT: Duration = Duration::from_secs(30);

/// Keeps `cache` filled from the ConfigMap `name`: what it holds now, `None` when it is deleted or cannot
/// be read (logged: the kinds' own defaults apply meanwhile). Entries it cannot use are logged and
/// skipped. The returned flag turns true once the first listing is done.
fn spawn_kind_defaults(
    api: Api<ConfigMap>,
    name: String,
    cache: KindDefaultsCache,
    liveness: &Liveness,
) -> tokio::sync::watch::Receiver<bool> {
    let (listed_tx, listed_rx) = tokio::sync::watch::channel(false);
    let task = liveness.task("kind defaults".to_owned());
    tokio::spawn(async move {
        let _task = task;
        let selector = format!("metadata.name={name}");
        let mut stream =
            std::pin::pin!(watcher(api, watcher::Config::default().fields(&selector)).default_backoff());
        let set = |value: Option<Arc<KindDefaults>>| {
            *cache.write().unwrap_or_else(std::sync::PoisonError::into_inner) = value;
        };
        let read = |cm: ConfigMap| match KindDefaults::from_data(&cm.data.unwrap_or_default()) {
            Ok((defaults, problems)) => {
                for problem in problems {
                    warn!(configmap = %name, %problem, "per-kind defaults: entry skipped");
                }
                info!(configmap = %name, kinds = defaults.len(), "per-kind defaults read");
                Some(Arc::new(defaults))
            }
            Err(e) => {
                warn!(configmap = %name, error = %e, "per-kind defaults unreadable; the kinds' own defaults apply");
                None
            }
        };
        // Whether the ConfigMap was seen in the listing under way: a relist without it means it is gone.
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => listed = false,
                Ok(watcher::Event::InitApply(cm)) => {
                    listed = true;
                    set(read(cm));
                }
                Ok(watcher::Event::InitDone) => {
                    if !listed {
                        info!(configmap = %name, "no per-kind defaults ConfigMap; the kinds' own defaults apply");
                        set(None);
                    }
                    listed_tx.send_replace(true);
                }
                Ok(watcher::Event::Apply(cm)) => set(read(cm)),
                Ok(watcher::Event::Delete(_)) => set(None),
                Err(e) => warn!(configmap = %name, error = %e, "watching the per-kind defaults ConfigMap"),
            }
        }
    });
    listed_rx
}

fn spawn_cache<K>(
    api: Api<K>,
    what: &'static str,
    requeue_on_delete: Option<OnDelete>,
    liveness: &Liveness,
) -> (Store<K>, Arc<AtomicBool>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::<K>::default();
    let reader = writer.as_reader();
    let synced = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&synced);
    let store = reader.clone();
    tokio::spawn(async move {
        owners::store_ready(&store).await;
        flag.store(true, Ordering::Relaxed);
    });
    // Dropped when the watch below ends (it never should) or panics: the cache would go stale.
    let task = liveness.task(format!("cache {what}"));
    tokio::spawn(
        async move {
            let _task = task;
            let mut stream = std::pin::pin!(
                watcher(api, watcher::Config::default())
                    .default_backoff()
                    .reflect(writer)
            );
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Delete(obj)) => {
                        let Some((pods, tx, applied)) = requeue_on_delete.as_ref() else {
                            continue;
                        };
                        let (ns, name) = (obj.meta().namespace.clone(), obj.meta().name.clone());
                        applied.forget(
                            ns.as_deref().unwrap_or_default(),
                            name.as_deref().unwrap_or_default(),
                        );
                        for pod in pods.state_filter(|p| {
                            p.metadata.namespace == ns
                                && p.annotations().get(keys::POD_GROUP_NAME) == name.as_ref()
                        }) {
                            let _ = tx.unbounded_send(ObjectRef::from_obj(&*pod));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "watch failed; retrying"),
                }
            }
            error!("cache watch ended");
        }
        .instrument(info_span!("cache", what)),
    );
    (reader, synced)
}

#[tracing::instrument(skip_all, fields(pod = %pod.name_any(), namespace = pod.namespace().unwrap_or_default()))]
async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let _running = RunningReconcile::start(&ctx.running);
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = reconcile_inner(&pod, &ctx).await;
    ctx.metrics.duration.observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(pod: &Pod, ctx: &Context) -> Result<Action, ReconcileError> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.scheduler_name.as_deref()) != Some(ctx.config.scheduler_name.as_str()) {
        return Ok(Action::await_change());
    }
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    if pod.metadata.deletion_timestamp.is_some() || finished {
        return Ok(Action::await_change());
    }
    ctx.may_write()?;
    let namespace = pod.namespace().unwrap_or_default();
    let (owners, chain_break) = ctx.caches.owners.chain(pod).await?;
    let input = Input {
        pod,
        owners: &owners,
        chain_break: chain_break.as_ref(),
    };
    let related = ctx.caches.owners.related(pod, &grouping::related(&input)).await?;
    let view = WithRelated {
        caches: &ctx.caches,
        related: &related,
    };
    let outcome = grouping::group(&input, &ctx.config.settings, &view)?;

    // The PodGroup and the pod's annotation are independent writes: sent together, a pod costs one
    // round trip of latency, not two (a scheduler that sees the annotation first waits for the group).
    let group_write = async {
        if let Decision::Apply(grouping) = &outcome.decision {
            let api: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &namespace);
            let current = ensure_pod_group(ctx, &api, grouping, &namespace).await?;
            if let Err(source) = set_warning_condition(&api, &current, &outcome.warnings).await {
                return Ok(Some(ReconcileError::Condition {
                    name: grouping.name.clone(),
                    source,
                }));
            }
        }
        Ok::<_, ReconcileError>(None)
    };
    // A pod its group was made for alone is found by the scheduler without the name, and bound pods
    // get it from their binding: it is written here only once the pod is reported unschedulable or
    // still waits after the delay.
    let naming_wait = grouping::naming_wait_ms(
        pod,
        &outcome.decision,
        &ctx.config.settings,
        k8s_openapi::jiff::Timestamp::now().as_millisecond(),
    );
    let pod_write = async {
        if naming_wait.is_some() {
            return Ok(());
        }
        if let Some(patch) = grouping::pod_patch(pod, &outcome.decision, &ctx.config.settings) {
            ctx.may_write()?;
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
            let params = PatchParams::apply(&ctx.config.settings.field_manager).force();
            api.patch(&pod.name_any(), &params, &Patch::Apply(&patch.0))
                .await
                .map_err(ReconcileError::PatchPod)?;
            ctx.metrics.pods_patched.inc();
        }
        Ok::<_, ReconcileError>(())
    };
    let (group_result, pod_result) = futures::join!(group_write, pod_write);
    let condition_error = group_result?;
    pod_result?;
    report(ctx, pod, &outcome.warnings).await;
    match (condition_error, naming_wait) {
        (Some(e), _) => Err(e),
        (None, Some(ms)) => Ok(Action::requeue(Duration::from_millis(
            u64::try_from(ms).unwrap_or(0).saturating_add(1),
        ))),
        (None, None) => Ok(Action::await_change()),
    }
}

/// The PodGroup of `grouping`, applied unless the cache, or an apply of the same manifest by another
/// reconcile whose echo the cache does not show yet, says it is up to date: one apply per group, not
/// one per pod.
async fn ensure_pod_group(
    ctx: &Context,
    api: &Api<PodGroup>,
    grouping: &grouping::Grouping,
    namespace: &str,
) -> Result<Arc<PodGroup>, ReconcileError> {
    let desired = grouping::pod_group_manifest(grouping, namespace);
    let manager = &ctx.config.settings.field_manager;
    let cached = || {
        ctx.caches
            .pod_group(namespace, &grouping.name)
            .filter(|pg| grouping::pod_group_up_to_date(pg, &desired, manager))
    };
    if let Some(pg) = cached() {
        ctx.applied.forget(namespace, &grouping.name);
        ctx.metrics.pod_groups_unchanged.inc();
        return Ok(pg);
    }
    let fingerprint = applied::fingerprint(&desired);
    let slot = ctx.applied.slot(namespace, &grouping.name);
    let mut entry = slot.lock().await;
    // Another reconcile of this group may have applied it while this one waited for the slot.
    let in_cache = ctx.caches.pod_group(namespace, &grouping.name);
    if let Some(done) = entry
        .as_ref()
        .filter(|e| e.covers(fingerprint, in_cache.as_deref(), Instant::now()))
    {
        ctx.metrics.pod_groups_unchanged.inc();
        return Ok(Arc::clone(&done.object));
    }
    if let Some(pg) = cached() {
        ctx.metrics.pod_groups_unchanged.inc();
        return Ok(pg);
    }
    ctx.may_write()?;
    let params = PatchParams::apply(manager).force();
    let applied = api
        .patch(&grouping.name, &params, &Patch::Apply(&desired))
        .await
        .map_err(|source| ReconcileError::ApplyPodGroup {
            name: grouping.name.clone(),
            source,
        })?;
    ctx.metrics.pod_groups_applied.inc();
    debug!(podgroup = %grouping.name, min_member = grouping.min_member, queue = %grouping.queue, "applied PodGroup");
    let applied = Arc::new(applied);
    *entry = Some(applied::Entry {
        fingerprint,
        object: Arc::clone(&applied),
        at: Instant::now(),
    });
    Ok(applied)
}

/// Events on the pod for warnings not yet reported for it.
async fn report(ctx: &Context, pod: &Pod, warnings: &[Warning]) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let fresh: Vec<&Warning> = {
        let mut reported = ctx
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = reported.entry(uid).or_default();
        warnings.iter().filter(|w| seen.insert(w.to_string())).collect()
    };
    let reference = pod.object_ref(&());
    for warning in fresh {
        ctx.metrics
            .warnings
            .get_or_create(&crate::metrics::Reason {
                reason: warning.reason(),
            })
            .inc();
        warn!(reason = warning.reason(), "{warning}");
        let event = Event {
            type_: EventType::Warning,
            reason: keys::EVENT_PODGROUPER_WARNING.to_owned(),
            note: Some(warning.to_string()),
            action: warning.reason().to_owned(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            warn!(error = %e, "could not publish event");
        }
    }
}

/// Sets or clears the `PodGrouperWarning` condition. The status is shared with the scheduler, so the
/// write is a merge patch guarded by the resourceVersion read that keeps every other condition. (Where
/// the server honours the CRD's list-map on `conditions`, the scheduler's applies leave this condition
/// alone too; servers that treat the list as atomic, such as 1.20, let its applies drop it until the
/// next reconcile puts it back.)
async fn set_warning_condition(
    api: &Api<PodGroup>,
    pg: &PodGroup,
    warnings: &[Warning],
) -> Result<(), kube::Error> {
    let conditions = pg
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let mine = conditions.iter().find(|c| c.type_ == WARNING_CONDITION);
    let desired = (!warnings.is_empty()).then(|| {
        let message: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        (warnings[0].reason().to_owned(), message.join("; "))
    });
    let current = mine.map(|c| {
        (
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        )
    });
    if current == desired {
        return Ok(());
    }
    let mut next: Vec<_> = conditions
        .iter()
        .filter(|c| c.type_ != WARNING_CONDITION)
        .cloned()
        .collect();
    if let Some((reason, message)) = desired {
        next.push(api::podgroup::PodGroupCondition {
            type_: WARNING_CONDITION.to_owned(),
            status: "True".to_owned(),
            transition_id: None,
            last_transition_time: Some(k8s_openapi::jiff::Timestamp::now().to_string()),
            reason: Some(reason),
            message: Some(message),
        });
    }
    let patch = json!({
        "metadata": { "resourceVersion": pg.metadata.resource_version },
        "status": { "conditions": next },
    });
    api.patch_status(&pg.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

fn error_policy(pod: Arc<Pod>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .failures
        .get_or_create(&crate::metrics::Category {
            category: error.category(),
        })
        .inc();
    let wait = match error {
        ReconcileError::Grouping(GroupingError::NotReady { .. }) => {
            debug!(pod = %pod.name_any(), %error, "not ready to group yet");
            Duration::from_secs(15)
        }
        ReconcileError::NotLeader => Duration::from_secs(5),
        // Sibling pods of one group race to write its condition; the loser retries at once.
        ReconcileError::Condition { source, .. } if owners::status_code(source) == Some(409) => {
            debug!(pod = %pod.name_any(), "condition write lost a race; retrying");
            Duration::from_secs(1)
        }
        _ => {
            warn!(pod = %pod.name_any(), %error, category = error.category(), "reconcile failed");
            Duration::from_secs(5)
        }
    };
    Action::requeue(wait)
}

#[cfg(test)]
mod tests {
    use runtime::liveness::{Failure, LivenessStatus};

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(60);

    /// Drives `results` in a task, as `run` does, with the default timeout.
    fn driven(
        results: impl futures::Stream<Item = ()> + Send + 'static,
        running: usize,
    ) -> (Liveness, Arc<AtomicUsize>) {
        let liveness = Liveness::new(TIMEOUT);
        let count = Arc::new(AtomicUsize::new(running));
        let heartbeat = liveness.heartbeat("controller");
        tokio::spawn(drive(
            results,
            Arc::clone(&count),
            heartbeat,
            HEARTBEAT_PERIOD,
            drop,
        ));
        (liveness, count)
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_controller_stays_live() {
        let (liveness, _) = driven(futures::stream::pending(), 0);
        tokio::time::sleep(TIMEOUT * 3).await;
        assert_eq!(liveness.status(), LivenessStatus::Live);
    }

    #[tokio::test(start_paused = true)]
    async fn a_controller_whose_reconciles_hang_is_not_live() {
        let (liveness, running) = driven(futures::stream::pending(), 1);
        tokio::time::sleep(TIMEOUT).await;
        assert_eq!(liveness.status(), LivenessStatus::Live, "within the timeout");
        tokio::time::sleep(HEARTBEAT_PERIOD * 2).await;
        let LivenessStatus::NotLive(failures) = liveness.status() else {
            panic!("a reconcile that never ends is no progress");
        };
        assert!(
            matches!(&failures[..], [Failure::Stale { part, .. }] if part == "controller"),
            "{failures:?}"
        );
        running.store(0, Ordering::Release);
        tokio::time::sleep(HEARTBEAT_PERIOD * 2).await;
        assert_eq!(liveness.status(), LivenessStatus::Live, "idle again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_controller_whose_reconciles_finish_stays_live() {
        // Always a reconcile running, one finishing every 10 s.
        let results = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Some(((), ()))
        });
        let (liveness, _) = driven(results, 1);
        tokio::time::sleep(TIMEOUT * 3).await;
        assert_eq!(liveness.status(), LivenessStatus::Live);
    }

    #[test]
    fn a_reconcile_counts_as_running_until_its_guard_is_dropped() {
        let running = Arc::new(AtomicUsize::new(0));
        let first = RunningReconcile::start(&running);
        let second = RunningReconcile::start(&running);
        assert_eq!(running.load(Ordering::Acquire), 2);
        drop(first);
        drop(second);
        assert_eq!(running.load(Ordering::Acquire), 0);
    }

    /// One request the fake API server answered.
    #[derive(Debug, Clone)]
    struct Seen {
        method: http::Method,
        path: String,
    }

    /// A client whose requests are answered like an API server that accepts every write (the object
    /// comes back with resourceVersion 100) and logged; nothing else (no watch) is served.
    fn fake_client() -> (Client, Arc<Mutex<Vec<Seen>>>) {
        let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let seen = Arc::clone(&log);
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let seen = Arc::clone(&seen);
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.expect("request body");
                let mut object: serde_json::Value = if bytes.is_empty() {
                    json!({})
                } else {
                    serde_json::from_slice(&bytes).expect("json")
                };
                let path = parts.uri.path().to_owned();
                let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                object["metadata"]["name"] = json!(name);
                object["metadata"]["resourceVersion"] = json!("100");
                seen.lock().expect("log").push(Seen {
                    method: parts.method,
                    path,
                });
                let response = http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(object.to_string().into_bytes()))
                    .expect("response");
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (Client::new(service, "default"), log)
    }

    /// A controller context over `client` with empty caches (as right after a burst of new pods, whose
    /// PodGroups the watch has not brought back yet).
    fn context(client: Client) -> Context {
        let (trigger, _) = futures::channel::mpsc::unbounded();
        let pods = reflector::store::Writer::<Pod>::default().as_reader();
        let owners = Arc::new(Owners::new(
            client.clone(),
            pods.clone(),
            trigger,
            Liveness::new(TIMEOUT),
        ));
        let (_elector, leadership) =
            runtime::lease::Elector::new(client.clone(), runtime::lease::LeaderElection::Disabled);
        let reporter = Reporter {
            controller: keys::FIELD_MANAGER_PODGROUPER.to_owned(),
            instance: None,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            leader: leadership.guard(),
            config: Config {
                scheduler_name: keys::SCHEDULER_NAME.to_owned(),
                settings: Settings::default(),
                concurrency: 10,
                instance: "test".to_owned(),
                namespace: None,
                kind_defaults: None,
            },
            caches: Caches {
                pods,
                owners,
                priority_classes: reflector::store::Writer::default().as_reader(),
                // Not synced: existence is not judged, so no warning (and no condition write) follows.
                priority_classes_synced: Arc::new(AtomicBool::new(false)),
                queues: reflector::store::Writer::default().as_reader(),
                queues_synced: Arc::new(AtomicBool::new(false)),
                pod_groups: reflector::store::Writer::default().as_reader(),
                kind_defaults: KindDefaultsCache::default(),
            },
            metrics: Metrics::register(&mut prometheus_client::registry::Registry::default()),
            reported: Arc::default(),
            running: Arc::default(),
            applied: Arc::default(),
        }
    }

    fn bare_pod(name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": "ns", "uid": format!("uid-{name}") },
            "spec": { "schedulerName": keys::SCHEDULER_NAME, "containers": [] },
        }))
        .expect("pod")
    }

    fn requests(log: &Mutex<Vec<Seen>>) -> Vec<String> {
        log.lock()
            .expect("log")
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    #[tokio::test]
    async fn a_bare_pod_costs_one_podgroup_apply_and_one_pod_patch_and_no_read() {
        let (client, log) = fake_client();
        let ctx = context(client);
        let pod = bare_pod("p");
        reconcile_inner(&pod, &ctx).await.expect("reconcile");
        let seen = requests(&log);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[0].starts_with("PATCH /apis/scheduling.run.ai/") && seen[0].contains("/podgroups/"));
        assert_eq!(seen[1], "PATCH /api/v1/namespaces/ns/pods/p");

        // The pod's own patch brings it back annotated before the PodGroup cache has the group: the
        // second reconcile writes nothing (the apply it made stands in for the cache).
        let mut annotated = pod.clone();
        let group = ctx
            .applied
            .slots_for_test()
            .into_iter()
            .next()
            .expect("the applied group");
        annotated.metadata.annotations = Some([(keys::POD_GROUP_NAME.to_owned(), group.clone())].into());
        annotated.metadata.managed_fields = Some(vec![
            serde_json::from_value(json!({
                "manager": keys::FIELD_MANAGER_PODGROUPER, "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": { "f:metadata": { "f:annotations": { format!("f:{}", keys::POD_GROUP_NAME): {} } } },
            }))
            .expect("managed fields"),
        ]);
        reconcile_inner(&annotated, &ctx).await.expect("reconcile");
        assert_eq!(requests(&log).len(), 2, "{:?}", requests(&log));
    }

    /// A bare pod just created: its group is made for it alone, so the scheduler finds it by owner and
    /// its binding names it; the pod is not patched now but looked at again when the delay is up, and
    /// patched then only if still unbound and unnamed, or at once when reported unschedulable.
    #[tokio::test]
    async fn a_fresh_bare_pod_costs_one_podgroup_apply_and_is_named_only_if_still_unbound() {
        let (client, log) = fake_client();
        let ctx = context(client);
        let mut pod = bare_pod("p");
        let now = k8s_openapi::jiff::Timestamp::now();
        pod.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        let action = reconcile_inner(&pod, &ctx).await.expect("reconcile");
        let seen = requests(&log);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(seen[0].contains("/podgroups/"), "{seen:?}");
        let requeued = format!("{action:?}");
        assert!(requeued.contains("requeue_after: Some("), "{requeued}");

        // Bound in the meantime, with the name its binding wrote: nothing to do.
        let group = ctx
            .applied
            .slots_for_test()
            .into_iter()
            .next()
            .expect("the applied group");
        let mut bound = pod.clone();
        bound.metadata.annotations = Some([(keys::POD_GROUP_NAME.to_owned(), group)].into());
        if let Some(spec) = bound.spec.as_mut() {
            spec.node_name = Some("n1".to_owned());
        }
        reconcile_inner(&bound, &ctx).await.expect("reconcile");
        assert_eq!(requests(&log).len(), 1, "{:?}", requests(&log));

        // Still waiting after the delay: named.
        let mut waiting = pod.clone();
        waiting.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            now - k8s_openapi::jiff::SignedDuration::from_millis(grouping::NAMING_DELAY_MS),
        ));
        reconcile_inner(&waiting, &ctx).await.expect("reconcile");
        let seen = requests(&log);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[1], "PATCH /api/v1/namespaces/ns/pods/p", "{seen:?}");

        // Reported unschedulable by the scheduler before the delay: named at once.
        let mut reported = pod.clone();
        reported.status = Some(
            serde_json::from_value(json!({ "conditions": [{ "type": "PodScheduled", "status": "False" }] }))
                .expect("status"),
        );
        reconcile_inner(&reported, &ctx).await.expect("reconcile");
        let seen = requests(&log);
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(seen[2], "PATCH /api/v1/namespaces/ns/pods/p", "{seen:?}");
    }

    #[tokio::test]
    async fn pods_of_one_group_reconciled_at_once_apply_it_once() {
        let (client, log) = fake_client();
        let ctx = Arc::new(context(client));
        let grouping = grouping::Grouping {
            name: "pg-job".to_owned(),
            owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "batch/v1".to_owned(),
                kind: "Job".to_owned(),
                name: "job".to_owned(),
                uid: "uid-job".to_owned(),
                ..Default::default()
            },
            min_member: 8,
            sub_groups: Vec::new(),
            pod_sub_group: None,
            queue: keys::DEFAULT_QUEUE.to_owned(),
            priority_class_name: "train".to_owned(),
            preemptibility: None,
            topology: None,
            labels: std::collections::BTreeMap::new(),
            annotations: std::collections::BTreeMap::new(),
        };
        let api: Api<PodGroup> = Api::namespaced(ctx.client.clone(), "ns");
        let reconciles = (0..8).map(|_| ensure_pod_group(&ctx, &api, &grouping, "ns"));
        for result in futures::future::join_all(reconciles).await {
            assert_eq!(result.expect("ensured").metadata.name.as_deref(), Some("pg-job"));
        }
        assert_eq!(requests(&log).len(), 1, "{:?}", requests(&log));

        // Someone changed the group since (a newer version in the cache that is not what the podgrouper
        // wants): it is applied again.
        let mut changed = grouping::pod_group_manifest(&grouping, "ns");
        changed.spec.min_member = Some(1);
        changed.metadata.resource_version = Some("200".to_owned());
        let (reader, mut writer) = reflector::store::<PodGroup>();
        writer.apply_watcher_event(&watcher::Event::Apply(changed));
        let ctx = Context {
            caches: Caches {
                pod_groups: reader,
                ..context(ctx.client.clone()).caches
            },
            applied: Arc::clone(&ctx.applied),
            ..context(ctx.client.clone())
        };
        ensure_pod_group(&ctx, &api, &grouping, "ns")
            .await
            .expect("ensured");
        assert_eq!(requests(&log).len(), 2, "{:?}", requests(&log));
    }

    #[test]
    fn trimmed_pods_keep_what_grouping_reads() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [
                {"manager": "kai-podgrouper", "operation": "Apply"},
                {"manager": "kubectl", "operation": "Update"}]},
            "spec": {"schedulerName": "kai-scheduler", "nodeName": "n1", "priorityClassName": "train",
                     "containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "v"}]},
            "status": {"phase": "Pending", "podIP": "10.0.0.1", "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "long"}]},
        }))
        .expect("pod");
        trim_pod(&mut pod, "kai-podgrouper");
        let managers: Vec<_> = pod
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.clone())
            .collect();
        assert_eq!(managers, ["kai-podgrouper"]);
        let spec = pod.spec.as_ref().expect("spec");
        assert!(spec.containers.is_empty() && spec.volumes.is_none());
        assert_eq!(
            (
                spec.scheduler_name.as_deref(),
                spec.node_name.as_deref(),
                spec.priority_class_name.as_deref()
            ),
            (Some("kai-scheduler"), Some("n1"), Some("train"))
        );
        let status = pod.status.as_ref().expect("status");
        assert_eq!(
            (status.phase.as_deref(), status.pod_ip.as_deref()),
            (Some("Pending"), None)
        );
        // Only that the scheduler reported it unschedulable, which decides when it is named.
        let conditions: Vec<(&str, &str, Option<&str>)> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.message.as_deref()))
            .collect();
        assert_eq!(conditions, [("PodScheduled", "False", None)]);
        assert_eq!(pod.labels().get("a").map(String::as_str), Some("b"));
    }
}
