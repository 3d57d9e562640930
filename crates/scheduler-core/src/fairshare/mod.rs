//! Hierarchical fair share: KAI's proportion mathematics, pure and synchronous.
//!
//! Owns: the queue tree and its per-queue accounting ([`QueueTree`], [`Accounting`]), the fair-share
//! division ([`QueueTree::divide`], [`division`]), the capacity gates
//! ([`QueueTree::check_capacity`]), the queue order ([`QueueTree::compare_queues`]) and the
//! reclaim decisions ([`QueueTree::can_reclaim`], [`QueueTree::validate_reclaim`]).
//!
//! Must not: do I/O, know Kubernetes objects beyond the Queue CRD helper, or decide placement.
//! Every "no" is a value ([`CapacityViolation`], [`ReclaimRejection`]) that names the queue, the
//! resource and the amounts.
//!
//! Session lifecycle:
//! 1. [`QueueTree::new`] from [`QueueSpec`]s (built by the cache, e.g. with [`QueueSpec::from_api`]);
//! 2. [`QueueTree::record_running`] / [`QueueTree::record_pending`] for every task, then
//!    [`QueueTree::divide`] with the cluster capacity;
//! 3. during actions, [`QueueTree::allocate`] / [`QueueTree::deallocate`] (exact inverses) mirror
//!    the statement; [`QueueTree::snapshot`] / [`QueueTree::restore`] checkpoint the accounting,
//!    and a snapshot is the explicit baseline for reclaim validation.
//!
//! Usage-based (time-based) fair share: [`usage`] keeps each queue's historical usage; the session
//! sets it on the tree ([`QueueTree::set_usage`]) before [`QueueTree::divide`], where `kValue` weighs
//! it in the over-quota phase. Without it every usage is 0, which is fair share without history.
//!
//! Units are KAI's (see [`units`]); resources are generalised from KAI's three (CPU, memory, GPU)
//! to every slot of the model vector that some queue configures.
//!
//! Deliberate deviations from KAI, all invisible in KAI's own test numbers:
//! - accounting is integer (model units), so fractional GPU sums are exact and rollback is exact;
//! - queues are visited in age order rather than Go's random map order; ties in age are broken by
//!   UID then name, so distinct queues never compare equal; victim queues are validated in the
//!   order their chunks first appear (KAI: map order);
//! - the division has a round cap that only bounds a float fixed point where KAI would spin;
//! - a bad tree (unknown parent, cycle, duplicate) detaches the affected queues instead of failing;
//! - extended resources take part once some queue gives them a quota or a limit (KAI ignores
//!   them); CPU, memory and GPU always take part, as in KAI;
//! - opt-in only: [`OverUtilizedRule::AllHeld`] / [`OverUtilizedRule::Any`] instead of KAI's
//!   all-resources over-utilisation test, and newer KAI's `queuePriorityInQuotaReclaim`.

pub mod capacity;
pub mod division;
pub mod order;
pub mod reclaim;
pub mod tree;
pub mod units;
pub mod usage;

#[cfg(test)]
mod tests;

pub use capacity::{Bound, CapacityViolation, Shortfall};
pub use order::{OrderKey, OrderStep, OverUtilizedRule, QueueCandidate};
pub use reclaim::{
    ReclaimRejection, ReclaimScratch, Reclaimer, VictimChunk, VictimPodSet, VictimTask, push_victim_chunks,
};
pub use tree::{
    Accounting, DEFAULT_QUEUE_PRIORITY, Preemptibility, QueueId, QueueReport, QueueSpec, QueueTree,
    QueueUsage, TreeProblem,
};
pub use units::{ShareVec, SlotMask, UNLIMITED};
pub use usage::{UsageError, UsageParams, UsageRecord, UsageSample, WindowKind};

/// Errors of this module: plugin arguments that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FairShareError {
    /// A value that does not parse.
    #[error("proportion argument {key}={value:?} is not a valid {expected}")]
    InvalidArgument {
        /// The argument name.
        key: String,
        /// The value given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An argument the proportion plugin does not know.
    #[error("unknown proportion argument {0:?}")]
    UnknownArgument(String),
    /// Two spellings of the saturation multiplier with different values.
    #[error("proportion arguments {first} and {second} disagree")]
    ConflictingArguments {
        /// The first spelling seen.
        first: String,
        /// The second spelling seen.
        second: String,
    },
}

/// Tunables of the proportion plugin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FairShareConfig {
    /// Weight of historical usage in the over-quota phase (`kValue`, default 1; ≤ 0 becomes 0).
    pub k_value: f64,
    /// A reclaimer above its fair share must stay below `sibling ratio / multiplier`
    /// (`reclaimerSaturationMultiplier`, default 1; values below 1 become 1).
    pub reclaimer_saturation_multiplier: f64,
    /// When a queue is over-utilised in the queue order (KAI's rule by default).
    pub over_utilized: OverUtilizedRule,
    /// Newer KAI's `queuePriorityInQuotaReclaim` (default off): among queues within deserved quota,
    /// priority orders first and may reclaim from lower-priority in-quota queues.
    pub queue_priority_in_quota_reclaim: bool,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        Self {
            k_value: 1.0,
            reclaimer_saturation_multiplier: 1.0,
            over_utilized: OverUtilizedRule::AllTracked,
            queue_priority_in_quota_reclaim: false,
        }
    }
}

/// Spellings of the saturation multiplier: the intended one, the one KAI's code reads, and the one
/// KAI's documentation uses.
const MULTIPLIER_KEYS: [&str; 3] = [
    "reclaimerSaturationMultiplier",
    "relcaimerSaturationMultiplier",
    "reclaimerUtilizationMultiplier",
];

impl FairShareConfig {
    /// Clamps values as KAI does (`kValue` ≤ 0 → 0, multiplier < 1 → 1; NaN → the default).
    #[must_use]
    pub fn normalized(mut self) -> Self {
        self.k_value = if self.k_value.is_nan() {
            1.0
        } else {
            self.k_value.max(0.0)
        };
        self.reclaimer_saturation_multiplier = if self.reclaimer_saturation_multiplier.is_nan() {
            1.0
        } else {
            self.reclaimer_saturation_multiplier.max(1.0)
        };
        self
    }

    /// Reads the proportion plugin's arguments (KAI's string map): `kValue`,
    /// `reclaimerSaturationMultiplier` (also KAI's misspelling `relcaimerSaturationMultiplier` and
    /// the documented `reclaimerUtilizationMultiplier`), `queuePriorityInQuotaReclaim`, and this
    /// project's `overUtilizedRule` (`allTracked`, `allHeld`, `any`). Out-of-range numbers are
    /// clamped as KAI clamps them; values that do not parse and unknown keys are errors.
    pub fn from_arguments<'a>(
        args: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, FairShareError> {
        let mut config = Self::default();
        let mut multiplier_key: Option<&str> = None;
        for (key, value) in args {
            let invalid = |expected| FairShareError::InvalidArgument {
                key: key.to_owned(),
                value: value.to_owned(),
                expected,
            };
            let number = || value.trim().parse::<f64>().map_err(|_| invalid("number"));
            match key {
                "kValue" => config.k_value = number()?,
                k if MULTIPLIER_KEYS.contains(&k) => {
                    let parsed = number()?;
                    if let Some(first) = multiplier_key
                        && parsed != config.reclaimer_saturation_multiplier
                    {
                        return Err(FairShareError::ConflictingArguments {
                            first: first.to_owned(),
                            second: k.to_owned(),
                        });
                    }
                    multiplier_key = Some(k);
                    config.reclaimer_saturation_multiplier = parsed;
                }
                "queuePriorityInQuotaReclaim" => {
                    // Go's strconv.ParseBool spellings.
                    config.queue_priority_in_quota_reclaim = match value.trim() {
                        "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                        "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                        _ => return Err(invalid("boolean")),
                    }
                }
                "overUtilizedRule" => {
                    config.over_utilized = match value.trim() {
                        "allTracked" => OverUtilizedRule::AllTracked,
                        "allHeld" => OverUtilizedRule::AllHeld,
                        "any" => OverUtilizedRule::Any,
                        _ => return Err(invalid("rule (allTracked, allHeld, any)")),
                    }
                }
                other => return Err(FairShareError::UnknownArgument(other.to_owned())),
            }
        }
        Ok(config.normalized())
    }
}
