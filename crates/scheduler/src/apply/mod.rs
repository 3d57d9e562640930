//! The I/O edge that executes decisions: binds through `pods/binding` (concurrently, under the client's
//! QPS budget), claims bound before the pods that use them, evictions through the Eviction API (so
//! PodDisruptionBudgets hold), PodGroup and queue statuses with server-side apply, pod conditions, and
//! events.
//!
//! Results come back to the model as watch events, not as trusted local state; only failures are
//! reported back ([`Feedback`]) so the loop can drop what it assumed. Every write checks leadership
//! right before it is sent: a deposed leader stops writing at once.
//!
//! This file holds the [`Applier`], its options and counters, and the dispatch of a cycle's decisions
//! (binds first, the other writes deferred behind them) into work queues (`queue`: a queued write
//! costs its data, not a task). Each kind of write is in its own file: `bind` (binds, including
//! labelling a shared-GPU pod with its devices), `gpu_env` (a shared-GPU pod's ConfigMaps with its
//! devices, before its bind), `volumes` (a gang's claims, bound before its pods),
//! `reservation` (GPU reservation pods), `evict`, `status` (PodGroup and queue statuses, PodGroup
//! annotations, pod conditions) and `events`.

mod bind;
mod events;
mod evict;
mod gpu_env;
mod queue;
mod reservation;
mod status;
#[cfg(test)]
mod test_api;
mod volumes;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::coalesce::Coalescer;
use crate::loop_state::Feedback;
use kube::Client;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use runtime::discovery::EvictionVersion;
use runtime::lease::LeaderGuard;
use tokio::sync::{Notify, Semaphore, mpsc};

use scheduler_core::config::GpuSharingArgs;
use scheduler_core::framework::decisions::{
    Bind, Decisions, Event, Evict, GroupStatus, PodCondition, QueueStatus,
};
use scheduler_core::model::GroupKey;

use events::EventSeries;
use queue::{Job, WorkQueue};
pub use volumes::CLAIM_BIND_TIMEOUT;

/// The tracing target of every applier log line, whichever file it is written in: log filters
/// (`RUST_LOG=kai_scheduler::apply=debug`) and e2e/tests/reliability.rs, which counts the
/// `kai_scheduler::apply: bound ` lines, name this target.
const LOG_TARGET: &str = "kai_scheduler::apply";

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
    claim_bindings: Family<ResultLabel, Counter>,
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
        registry.register(
            "claim_bindings",
            "Gangs whose claims were bound before their pods, by result",
            self.claim_bindings.clone(),
        );
    }
}

#[cfg(test)]
impl ApplyMetrics {
    /// One child in every family, so that the text encoder shows each (it leaves out empty families).
    pub(crate) fn touch_every_family(&self) {
        let ok = ResultLabel { result: "ok" };
        let _ = self.binds.get_or_create(&ok);
        let _ = self.status_writes.get_or_create(&ok);
        let _ = self.claim_bindings.get_or_create(&ok);
        let _ = self.evictions.get_or_create(&EvictLabel {
            action: "reclaim",
            result: "ok",
        });
    }
}

/// How long a status, annotation, pod condition or event may wait for binds to drain. Binds go first
/// because the API server's write path is the bottleneck and a bound pod is what users wait for; the
/// cap keeps a continuous stream of binds from starving the explanations.
pub const MAX_WRITE_DEFERRAL: Duration = Duration::from_secs(10);

/// Binds submitted and not finished; dropping the last one wakes the writes deferred behind them.
#[derive(Debug)]
struct BindsInFlight {
    count: AtomicUsize,
    drained: Notify,
}

/// One submitted bind, counted until it is dropped (sent, refused or abandoned).
#[derive(Debug)]
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
    // Decided writes waiting for a worker: binds (`bind_concurrency` at once), evictions and the
    // deferred statuses, annotations and conditions (`write_concurrency`), events (as wide as binds:
    // they wait for the binds, and are many and small).
    bind_queue: Arc<WorkQueue<QueuedBind>>,
    eviction_queue: Arc<WorkQueue<Evict>>,
    write_queue: Arc<WorkQueue<Deferred<Write>>>,
    event_queue: Arc<WorkQueue<Deferred<Event>>>,
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
            bind_queue: Arc::new(WorkQueue::new(options.bind_concurrency)),
            eviction_queue: Arc::new(WorkQueue::new(options.write_concurrency)),
            write_queue: Arc::new(WorkQueue::new(options.write_concurrency)),
            event_queue: Arc::new(WorkQueue::new(options.bind_concurrency)),
        }
    }

    /// Binds submitted and not yet finished.
    #[must_use]
    pub fn binds_in_flight(&self) -> usize {
        self.binds_in_flight.count.load(Ordering::Acquire)
    }

    /// Waits until no bind is in flight, at most until `deadline` (a write's decision time plus
    /// [`MAX_WRITE_DEFERRAL`]).
    async fn after_binds(&self, deadline: tokio::time::Instant) {
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
    /// once (as many as their concurrency allows, the rest queued in order); statuses, annotations, pod
    /// conditions and events wait for the binds in flight to finish (see [`MAX_WRITE_DEFERRAL`]), and a
    /// status decided again meanwhile replaces the one waiting.
    pub fn submit(self: &Arc<Self>, d: Decisions) {
        // A gang with claims to bind first waits for them apart (not counted as binds in flight, so the
        // other writes do not wait behind a provisioner); every other bind is queued at once.
        let (plain, with_claims) = volumes::split_by_claims(d.binds);
        self.queue_binds(plain);
        for gang in with_claims {
            let this = self.clone();
            tokio::spawn(async move { this.bind_with_claims(gang).await });
        }
        self.eviction_queue.push(self, d.evictions);
        let deadline = tokio::time::Instant::now() + MAX_WRITE_DEFERRAL;
        let mut writes = Vec::new();
        for s in d.group_statuses {
            if let Some(s) = self.group_statuses.offer(s.key.clone(), s) {
                writes.push(Write::GroupStatus(s));
            }
        }
        for c in d.pod_conditions {
            if let Some(c) = self.pod_conditions.offer(c.uid.clone(), c) {
                writes.push(Write::PodCondition(c));
            }
        }
        for q in d.queue_statuses {
            if let Some(q) = self.queue_statuses.offer(q.name.clone(), q) {
                writes.push(Write::QueueStatus(q));
            }
        }
        self.write_queue
            .push(self, writes.into_iter().map(|write| Deferred { write, deadline }));
        for r in d.reservations {
            let this = self.clone();
            tokio::spawn(async move { this.reservation(r).await });
        }
        self.event_queue.push(
            self,
            d.events.into_iter().map(|write| Deferred { write, deadline }),
        );
    }

    /// Queues binds, each counted in flight until it is done. Binds of one gang share a flag: after one
    /// fails, the gang's binds not yet sent are dropped (the pods go back to pending) instead of binding
    /// more of a gang that is no longer whole.
    fn queue_binds(self: &Arc<Self>, binds: Vec<Bind>) {
        let mut gangs: HashMap<Option<GroupKey>, Arc<AtomicBool>> = HashMap::new();
        self.binds_in_flight
            .count
            .fetch_add(binds.len(), Ordering::AcqRel);
        let queued = binds.into_iter().map(|bind| QueuedBind {
            gang_failed: gangs
                .entry(bind.group.clone())
                .or_insert_with(|| Arc::new(AtomicBool::new(false)))
                .clone(),
            bind,
            _ticket: BindTicket(self.binds_in_flight.clone()),
        });
        self.bind_queue.push(self, queued);
    }

    /// Writes `value` of `key`, whose writer the caller holds (its coalescer, `pick`, offered it): the
    /// newest value offered by then, and each newer one offered while a write is in flight, one at a
    /// time.
    async fn write_latest<K, V, W, F>(
        self: &Arc<Self>,
        pick: fn(&Self) -> &Coalescer<K, V>,
        key: K,
        mut value: V,
        write: W,
    ) where
        K: Eq + std::hash::Hash + Clone,
        W: Fn(Arc<Self>, V) -> F,
        F: Future<Output = ()>,
    {
        if let Some(newer) = pick(self).take_queued(&key) {
            value = newer;
        }
        loop {
            write(self.clone(), value).await;
            match pick(self).next(&key) {
                Some(newer) => value = newer,
                None => break,
            }
        }
    }

    fn leading(&self) -> bool {
        self.guard.check().is_ok()
    }
}

/// A bind waiting for a worker, counted in flight (its ticket) from the cycle that decided it.
#[derive(Debug)]
struct QueuedBind {
    bind: Bind,
    gang_failed: Arc<AtomicBool>,
    _ticket: BindTicket,
}

impl Job<Applier> for QueuedBind {
    async fn run(self, applier: Arc<Applier>) {
        applier.bind(self.bind, &self.gang_failed).await;
    }
}

impl Job<Applier> for Evict {
    async fn run(self, applier: Arc<Applier>) {
        applier.evict(self).await;
    }
}

/// A write that waits for the binds in flight, at most until `deadline`.
#[derive(Debug)]
struct Deferred<W> {
    write: W,
    deadline: tokio::time::Instant,
}

/// The writes deferred behind binds, other than events. Those of one object go through its coalescer:
/// one in flight, the latest queued.
#[derive(Debug)]
enum Write {
    GroupStatus(GroupStatus),
    PodCondition(PodCondition),
    QueueStatus(QueueStatus),
}

impl Job<Applier> for Deferred<Write> {
    async fn run(self, applier: Arc<Applier>) {
        applier.after_binds(self.deadline).await;
        match self.write {
            Write::GroupStatus(s) => {
                let key = s.key.clone();
                applier
                    .write_latest(
                        |a| &a.group_statuses,
                        key,
                        s,
                        |a, s| async move {
                            a.group_status(s).await;
                        },
                    )
                    .await;
            }
            Write::PodCondition(c) => {
                let key = c.uid.clone();
                applier
                    .write_latest(
                        |a| &a.pod_conditions,
                        key,
                        c,
                        |a, c| async move {
                            a.pod_condition(c).await;
                        },
                    )
                    .await;
            }
            Write::QueueStatus(q) => {
                let key = q.name.clone();
                applier
                    .write_latest(
                        |a| &a.queue_statuses,
                        key,
                        q,
                        |a, q| async move {
                            a.queue_status(q).await;
                        },
                    )
                    .await;
            }
        }
    }
}

impl Job<Applier> for Deferred<Event> {
    async fn run(self, applier: Arc<Applier>) {
        applier.after_binds(self.deadline).await;
        applier.event(self.write).await;
    }
}

#[cfg(test)]
mod tests {
    use super::LOG_TARGET;

    #[test]
    fn log_target_is_the_module_path() {
        assert_eq!(format!("{LOG_TARGET}::tests"), module_path!());
    }
}
