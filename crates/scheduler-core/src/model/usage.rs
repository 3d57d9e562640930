//! Queues' normalised historical usage, as the cache or the scheduling loop last set it: per queue, the
//! share of the cluster's capacity it used over the usage window (GPU, CPU, memory), decayed by the
//! half-life. Empty unless usage-based fair share is on (`usageDBConfig`); empty means no queue has
//! any usage, which is exactly fair share without history.

use std::collections::HashMap;
use std::sync::Arc;

/// One queue's normalised usage per resource: used amount-seconds over capacity-seconds in the window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UsageShares {
    /// GPUs.
    pub gpu: f64,
    /// CPU.
    pub cpu: f64,
    /// Memory.
    pub memory: f64,
}

/// Normalised usage by queue name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistoricalUsage {
    by_queue: HashMap<Arc<str>, UsageShares>,
}

impl HistoricalUsage {
    /// From `(queue name, shares)` pairs; values that are not finite or are negative count as 0.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (Arc<str>, UsageShares)>) -> Self {
        let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        Self {
            by_queue: pairs
                .into_iter()
                .map(|(q, s)| {
                    (
                        q,
                        UsageShares {
                            gpu: clean(s.gpu),
                            cpu: clean(s.cpu),
                            memory: clean(s.memory),
                        },
                    )
                })
                .collect(),
        }
    }

    /// A queue's usage (zero when it has none).
    #[must_use]
    pub fn get(&self, queue: &str) -> UsageShares {
        self.by_queue.get(queue).copied().unwrap_or_default()
    }

    /// True when no queue has usage.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }

    /// Every queue with usage.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &UsageShares)> {
        self.by_queue.iter()
    }
}
