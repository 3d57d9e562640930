//! Queue metrics under KAI's names, so KAI's dashboards and alerts keep working.
//!
//! KAI splits them between two processes, both with the metrics namespace `kai` by default:
//! - its scheduler (`pkg/scheduler/metrics/metrics.go`, set by the proportion plugin each cycle):
//!   `queue_fair_share_gpu` (devices), `queue_fair_share_cpu_cores`, `queue_fair_share_memory_gb`
//!   (10^9 bytes);
//! - its queue controller (`pkg/queuecontroller/metrics/metrics.go`, from each Queue's spec and
//!   status): `queue_info` (1), `queue_deserved_gpus` (the spec's GPU quota, devices),
//!   `queue_quota_cpu_cores`, `queue_quota_memory_bytes` (-1: unlimited), `queue_allocated_gpus`,
//!   `queue_allocated_cpu_cores`, `queue_allocated_memory_bytes` (rounded to 4 decimals).
//!
//! All carry the one label `queue_name`. This scheduler has no queue controller, so it exports both
//! sets from its own fair-share figures after each cycle. KAI has no limit metric; the limits are
//! exported under this scheduler's own prefix (`kai_scheduler_queue_limit_*`, -1: no limit).
//!
//! A queue that leaves the model loses its series at the next cycle.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use scheduler_core::fairshare::{ShareVec, UNLIMITED};
use scheduler_core::framework::report::queues::QueueFigures;
use scheduler_core::model::resources::{CPU, GPU, MEMORY};

/// KAI's only label on its queue metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue_name: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type PerQueue = Family<QueueLabel, FloatGauge>;

/// Millicores per core.
const MILLI_PER_CORE: f64 = 1000.0;
/// Bytes per GB as KAI counts it for `queue_fair_share_memory_gb` (`resource_info.MemoryToGB`).
const BYTES_PER_GB: f64 = 1_000_000_000.0;

/// The queue metrics; [`QueueMetrics::update`] after each cycle that ran.
#[derive(Clone, Debug, Default)]
pub struct QueueMetrics {
    info: Family<QueueLabel, Gauge>,
    deserved_gpus: PerQueue,
    quota_cpu_cores: PerQueue,
    quota_memory_bytes: PerQueue,
    allocated_gpus: PerQueue,
    allocated_cpu_cores: PerQueue,
    allocated_memory_bytes: PerQueue,
    fair_share_gpu: PerQueue,
    fair_share_cpu_cores: PerQueue,
    fair_share_memory_gb: PerQueue,
    limit_gpus: PerQueue,
    limit_cpu_cores: PerQueue,
    limit_memory_bytes: PerQueue,
    /// The queues that have series now.
    exported: Arc<Mutex<BTreeSet<String>>>,
}

/// A GPU amount: devices, as the core keeps them.
fn gpus(v: &ShareVec) -> f64 {
    v.get(GPU)
}

/// A CPU amount in cores; -1 stays -1.
fn cores(v: &ShareVec) -> f64 {
    let milli = v.get(CPU);
    if milli == UNLIMITED {
        UNLIMITED
    } else {
        milli / MILLI_PER_CORE
    }
}

/// A memory amount in bytes, as the core keeps it.
fn bytes(v: &ShareVec) -> f64 {
    v.get(MEMORY)
}

/// KAI's rounding of allocated amounts (`roundResourceQuantity`): 4 decimals.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

impl QueueMetrics {
    /// Registers KAI's metrics; `kai` is the registry prefixed `kai` (KAI's default metrics namespace).
    pub fn register_kai(&self, kai: &mut Registry) {
        kai.register("queue_info", "Queues info", self.info.clone());
        kai.register(
            "queue_deserved_gpus",
            "Queue deserved GPUs (the spec's GPU quota, devices; -1 unlimited)",
            self.deserved_gpus.clone(),
        );
        kai.register(
            "queue_quota_cpu_cores",
            "Queue quota CPU in cores (-1 unlimited)",
            self.quota_cpu_cores.clone(),
        );
        kai.register(
            "queue_quota_memory_bytes",
            "Queue quota memory in bytes (-1 unlimited)",
            self.quota_memory_bytes.clone(),
        );
        kai.register(
            "queue_allocated_gpus",
            "Queue allocated GPUs (devices, fractions included)",
            self.allocated_gpus.clone(),
        );
        kai.register(
            "queue_allocated_cpu_cores",
            "Queue allocated CPU in cores",
            self.allocated_cpu_cores.clone(),
        );
        kai.register(
            "queue_allocated_memory_bytes",
            "Queue allocated memory in bytes",
            self.allocated_memory_bytes.clone(),
        );
        kai.register(
            "queue_fair_share_gpu",
            "GPU fair share of queue, as a gauge. Values in GPU devices",
            self.fair_share_gpu.clone(),
        );
        kai.register(
            "queue_fair_share_cpu_cores",
            "CPU fair share of queue, as a gauge. Value is in cores",
            self.fair_share_cpu_cores.clone(),
        );
        kai.register(
            "queue_fair_share_memory_gb",
            "Memory fair share of queue, as a gauge. Value is in GB (10^9 bytes)",
            self.fair_share_memory_gb.clone(),
        );
    }

    /// Registers this scheduler's own queue metrics (KAI has none for limits); `scheduler` is the
    /// registry prefixed `kai_scheduler`.
    pub fn register_own(&self, scheduler: &mut Registry) {
        scheduler.register(
            "queue_limit_gpus",
            "Queue GPU limit in devices (-1 no limit)",
            self.limit_gpus.clone(),
        );
        scheduler.register(
            "queue_limit_cpu_cores",
            "Queue CPU limit in cores (-1 no limit)",
            self.limit_cpu_cores.clone(),
        );
        scheduler.register(
            "queue_limit_memory_bytes",
            "Queue memory limit in bytes (-1 no limit)",
            self.limit_memory_bytes.clone(),
        );
    }

    fn per_queue(&self) -> [&PerQueue; 12] {
        [
            &self.deserved_gpus,
            &self.quota_cpu_cores,
            &self.quota_memory_bytes,
            &self.allocated_gpus,
            &self.allocated_cpu_cores,
            &self.allocated_memory_bytes,
            &self.fair_share_gpu,
            &self.fair_share_cpu_cores,
            &self.fair_share_memory_gb,
            &self.limit_gpus,
            &self.limit_cpu_cores,
            &self.limit_memory_bytes,
        ]
    }

    /// Sets every queue's series from a cycle's figures and removes those of queues not in them.
    pub fn update(&self, queues: &[QueueFigures]) {
        let mut now = BTreeSet::new();
        for q in queues {
            let label = QueueLabel {
                queue_name: q.name.to_string(),
            };
            let set = |family: &PerQueue, value: f64| {
                family.get_or_create(&label).set(value);
            };
            self.info.get_or_create(&label).set(1);
            set(&self.deserved_gpus, gpus(&q.deserved));
            set(&self.quota_cpu_cores, cores(&q.deserved));
            set(&self.quota_memory_bytes, bytes(&q.deserved));
            set(&self.allocated_gpus, round4(gpus(&q.allocated)));
            set(&self.allocated_cpu_cores, round4(cores(&q.allocated)));
            set(&self.allocated_memory_bytes, round4(bytes(&q.allocated)));
            set(&self.fair_share_gpu, gpus(&q.fair_share));
            set(&self.fair_share_cpu_cores, cores(&q.fair_share));
            set(&self.fair_share_memory_gb, bytes(&q.fair_share) / BYTES_PER_GB);
            set(&self.limit_gpus, gpus(&q.limit));
            set(&self.limit_cpu_cores, cores(&q.limit));
            set(&self.limit_memory_bytes, bytes(&q.limit));
            now.insert(label.queue_name);
        }
        // A panic while the set was held leaves it as it was: still a set of exported names.
        let mut exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in exported.difference(&now) {
            let label = QueueLabel {
                queue_name: gone.clone(),
            };
            self.info.remove(&label);
            for family in self.per_queue() {
                family.remove(&label);
            }
        }
        *exported = now;
    }
}
