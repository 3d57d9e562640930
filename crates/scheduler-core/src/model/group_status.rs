//! A PodGroup's status as the scheduler decides it ([`DecidedStatus`]) and as it last saw one
//! ([`SeenStatus`]).
//!
//! A full cycle decides a status for every PodGroup, tens of thousands at once. Built as the API object,
//! each cost some fifty allocations (condition strings, three quantity maps); in the model's terms
//! (counts, [`Resources`], static reasons, one shared time stamp) it costs a few. The API object is
//! rendered only where the status is written, and a status replaced before its write is never rendered.
//! [`DecidedStatus::fingerprint`] equals [`status_fingerprint`] of the rendered object, so the echo of a
//! write reads as unchanged.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use api::podgroup::{
    PodGroupCondition, PodGroupResourcesStatus, SchedulingCondition, UnschedulableExplanation,
};
use api::{PodGroupPhase, PodGroupStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::ids::WordHasher;
use super::resources::{GPU, MAX_RESOURCES, PODS, Resources};

/// Type of the per-pool scheduling condition.
const POOL_CONDITION_TYPE: &str = "UnschedulableOnNodePool";
/// The PodGroup condition that says why a gang waits.
pub const UNSCHEDULABLE_CONDITION_TYPE: &str = "Unschedulable";
/// Reason of the per-pool scheduling condition.
const POOL_CONDITION_REASON: &str = "Unschedulable";

/// Slot names of a cycle's statuses, shared by all of them (rendering quantities needs them), with the
/// slots in name order (the API map's order), sorted once per cycle rather than once per status.
#[derive(Debug, PartialEq, Eq)]
pub struct SlotNames {
    /// By slot; slots beyond it are named `unknown`.
    names: Vec<Arc<str>>,
    /// Every slot, in name order.
    by_name: Vec<usize>,
}

impl SlotNames {
    /// The names of the first slots (the model's resource names).
    #[must_use]
    pub fn new(names: Vec<Arc<str>>) -> Arc<Self> {
        let mut by_name: Vec<usize> = (0..MAX_RESOURCES).collect();
        let name = |slot: usize| names.get(slot).map_or("unknown", |n| &**n);
        by_name.sort_by(|a, b| name(*a).cmp(name(*b)));
        Arc::new(Self { names, by_name })
    }

    fn name(&self, slot: usize) -> &str {
        self.names.get(slot).map_or("unknown", |n| &**n)
    }
}

/// A status as a cycle decided it.
#[derive(Clone, Debug, PartialEq)]
pub struct DecidedStatus {
    /// Phase.
    pub phase: PodGroupPhase,
    /// Running pods.
    pub running: i32,
    /// Succeeded pods.
    pub succeeded: i32,
    /// Failed pods.
    pub failed: i32,
    /// Waiting pods.
    pub pending: i32,
    /// Conditions the scheduler owns, in order.
    pub conditions: Vec<DecidedCondition>,
    /// Why the gang waits on this node pool (KAI's `schedulingConditions`), when it does.
    pub pool: Option<PoolCondition>,
    /// Conditions other components own, kept as last seen.
    pub foreign: Vec<PodGroupCondition>,
    /// Allocated (placed pods).
    pub allocated: Resources,
    /// Requested (placed and waiting pods).
    pub requested: Resources,
    /// Whether the allocation counts as non-preemptible too.
    pub non_preemptible: bool,
    /// Names of the resource slots.
    pub names: Arc<SlotNames>,
}

/// A condition the scheduler owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecidedCondition {
    /// Type.
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Message (shared: many groups of a cycle say the same).
    pub message: Arc<str>,
    /// Last transition (RFC 3339).
    pub last_transition_time: Option<Arc<str>>,
}

/// KAI's `UnschedulableOnNodePool` scheduling condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolCondition {
    /// Node pool.
    pub node_pool: Arc<str>,
    /// Message (the first reason's, with the pool named when the gang backs off per pool).
    pub message: Arc<str>,
    /// Every reason, with its message.
    pub reasons: Vec<(&'static str, Arc<str>)>,
    /// Last transition (RFC 3339).
    pub last_transition_time: Option<Arc<str>>,
}

impl DecidedCondition {
    fn status_text(&self) -> &'static str {
        if self.status { "True" } else { "False" }
    }

    fn render(&self) -> PodGroupCondition {
        PodGroupCondition {
            type_: self.type_.to_owned(),
            status: self.status_text().to_owned(),
            transition_id: None,
            last_transition_time: self.last_transition_time.as_deref().map(str::to_owned),
            reason: Some(self.reason.to_owned()),
            message: Some(self.message.to_string()),
        }
    }
}

impl DecidedStatus {
    /// The API object.
    #[must_use]
    pub fn render(&self) -> PodGroupStatus {
        let mut conditions: Vec<PodGroupCondition> =
            self.conditions.iter().map(DecidedCondition::render).collect();
        conditions.extend(self.foreign.iter().cloned());
        let scheduling_conditions = self
            .pool
            .iter()
            .map(|p| SchedulingCondition {
                type_: POOL_CONDITION_TYPE.to_owned(),
                node_pool: Some(p.node_pool.to_string()),
                reason: Some(POOL_CONDITION_REASON.to_owned()),
                message: Some(p.message.to_string()),
                reasons: p
                    .reasons
                    .iter()
                    .map(|(reason, message)| UnschedulableExplanation {
                        reason: Some((*reason).to_owned()),
                        message: Some(message.to_string()),
                        details: None,
                    })
                    .collect(),
                transition_id: Some("0".to_owned()),
                last_transition_time: p.last_transition_time.as_deref().map(str::to_owned),
                status: Some("True".to_owned()),
            })
            .collect();
        let allocated = self.quantities(&self.allocated);
        PodGroupStatus {
            phase: Some(self.phase),
            conditions,
            scheduling_conditions,
            running: Some(self.running),
            succeeded: Some(self.succeeded),
            failed: Some(self.failed),
            pending: Some(self.pending),
            resources_status: Some(PodGroupResourcesStatus {
                allocated_non_preemptible: if self.non_preemptible {
                    allocated.clone()
                } else {
                    BTreeMap::new()
                },
                allocated,
                requested: self.quantities(&self.requested),
            }),
        }
    }

    /// [`status_fingerprint`] of [`Self::render`], without rendering.
    #[must_use]
    pub fn fingerprint(&self) -> u64 {
        self.hashed(None)
    }

    /// The fingerprint with the texts that quote why the gang waits (the `Unschedulable` condition's
    /// message, the pool record's message and reasons' messages) replaced by `reasons_gist`, a
    /// fingerprint of those reasons without their live figures: two statuses that differ only in "6 free
    /// on 3 nodes" against "5 free on 3 nodes" have the same gist.
    #[must_use]
    pub fn gist(&self, reasons_gist: u64) -> u64 {
        self.hashed(Some(reasons_gist))
    }

    fn hashed(&self, reasons_gist: Option<u64>) -> u64 {
        let mut h = WordHasher::default();
        Some(self.phase.as_str()).hash(&mut h);
        (
            Some(self.running),
            Some(self.succeeded),
            Some(self.failed),
            Some(self.pending),
        )
            .hash(&mut h);
        for c in &self.conditions {
            match reasons_gist {
                Some(gist) if c.type_ == UNSCHEDULABLE_CONDITION_TYPE => {
                    (c.type_, c.status_text(), Some(c.reason), gist).hash(&mut h);
                }
                _ => (c.type_, c.status_text(), Some(c.reason), Some(&*c.message)).hash(&mut h),
            }
        }
        for c in &self.foreign {
            (&c.type_, &c.status, &c.reason, &c.message).hash(&mut h);
        }
        if let Some(p) = &self.pool {
            match reasons_gist {
                Some(gist) => {
                    (POOL_CONDITION_TYPE, Some(&*p.node_pool), gist).hash(&mut h);
                    for (reason, _) in &p.reasons {
                        Some(*reason).hash(&mut h);
                    }
                }
                None => {
                    (
                        POOL_CONDITION_TYPE,
                        Some(&*p.node_pool),
                        Some(POOL_CONDITION_REASON),
                        Some(&*p.message),
                        Some("True"),
                    )
                        .hash(&mut h);
                    for (reason, message) in &p.reasons {
                        (Some(*reason), Some(&**message)).hash(&mut h);
                    }
                }
            }
        }
        let mut text = String::new();
        for r in [&self.allocated, &self.requested] {
            0xa11c_u16.hash(&mut h);
            for (name, slot, v) in self.named(r).iter().flatten() {
                name.hash(&mut h);
                match canonical_milli(*slot, *v) {
                    Some(milli) => milli.hash(&mut h),
                    None => {
                        // Out of range in milli-units: the text is fingerprinted, as the API side does.
                        text.clear();
                        push_quantity(&mut text, *slot, *v);
                        text.as_str().hash(&mut h);
                    }
                }
            }
        }
        h.finish()
    }

    /// The status condition of a type, if the scheduler decided one: whether it is `True`, and since when.
    fn condition(&self, type_: &str) -> Option<(&str, Option<&str>)> {
        if let Some(c) = self.conditions.iter().find(|c| c.type_ == type_) {
            return Some((c.status_text(), c.last_transition_time.as_deref()));
        }
        self.foreign
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.as_str(), c.last_transition_time.as_deref()))
    }

    /// The quantities of `r`, as the API map.
    fn quantities(&self, r: &Resources) -> BTreeMap<String, Quantity> {
        let mut map = BTreeMap::new();
        for (name, slot, v) in self.named(r).iter().flatten() {
            let mut text = String::with_capacity(12);
            push_quantity(&mut text, *slot, *v);
            map.insert((*name).to_owned(), Quantity(text));
        }
        map
    }

    /// The non-zero slots of `r` but pods, with their names, in name order (the API map's order).
    fn named<'a>(&'a self, r: &Resources) -> [Option<(&'a str, usize, i64)>; MAX_RESOURCES] {
        let mut named = [None; MAX_RESOURCES];
        let mut len = 0;
        for &slot in &self.names.by_name {
            let v = r.0[slot];
            if v != 0 && slot != PODS {
                named[len] = Some((self.names.name(slot), slot, v));
                len += 1;
            }
        }
        named
    }
}

/// A status quantity in milli-units, as [`api::quantity::milli_value`] reads its text back: CPU and GPUs
/// are counted in milli-units already, every other slot in units. `None` where that overflows.
fn canonical_milli(slot: usize, v: i64) -> Option<i64> {
    match slot {
        0 | GPU => Some(v),
        _ => v.checked_mul(1000),
    }
}

/// A quantity as statuses write it: CPU in milli-units (`500m`, `2`), GPUs as decimals (`0.5`),
/// everything else whole.
fn push_quantity(text: &mut String, slot: usize, v: i64) {
    match slot {
        0 => api::quantity::push_milli(text, v),
        GPU => api::quantity::push_decimal_milli(text, v),
        _ => api::quantity::push_integer(text, v),
    }
}

/// The status as last seen: as read from the API server, or as this scheduler last decided it (until
/// the write's echo replaces it).
#[derive(Clone, Debug, PartialEq)]
pub enum SeenStatus {
    /// Read from the API server.
    Api(Arc<PodGroupStatus>),
    /// Decided by this scheduler.
    Decided(Arc<DecidedStatus>),
}

impl SeenStatus {
    /// The API object.
    #[must_use]
    pub fn render(&self) -> PodGroupStatus {
        match self {
            Self::Api(s) => (**s).clone(),
            Self::Decided(s) => s.render(),
        }
    }

    /// The condition of a type: its status (`True`, `False`, ...) and last transition.
    #[must_use]
    pub fn condition(&self, type_: &str) -> Option<(&str, Option<&str>)> {
        match self {
            Self::Api(s) => s
                .conditions
                .iter()
                .find(|c| c.type_ == type_)
                .map(|c| (c.status.as_str(), c.last_transition_time.as_deref())),
            Self::Decided(s) => s.condition(type_),
        }
    }

    /// Message and last transition of the first scheduling condition.
    #[must_use]
    pub fn first_scheduling_condition(&self) -> Option<(Option<&str>, Option<&str>)> {
        match self {
            Self::Api(s) => s
                .scheduling_conditions
                .first()
                .map(|c| (c.message.as_deref(), c.last_transition_time.as_deref())),
            Self::Decided(s) => s
                .pool
                .as_ref()
                .map(|p| (Some(&*p.message), p.last_transition_time.as_deref())),
        }
    }

    /// The pool of the last scheduling condition as KAI reads them (highest `transitionID`; one that
    /// does not parse counts as -1; the first of equals wins), if there is one.
    #[must_use]
    pub fn last_scheduling_pool(&self) -> Option<&str> {
        match self {
            Self::Api(s) => {
                let id = |c: &SchedulingCondition| {
                    c.transition_id
                        .as_deref()
                        .and_then(|t| t.parse::<i64>().ok())
                        .unwrap_or(-1)
                };
                let mut last: Option<&SchedulingCondition> = None;
                for c in &s.scheduling_conditions {
                    if last.is_none_or(|l| id(c) > id(l)) {
                        last = Some(c);
                    }
                }
                last.map(|c| c.node_pool.as_deref().unwrap_or(""))
            }
            Self::Decided(s) => s.pool.as_ref().map(|p| &*p.node_pool),
        }
    }

    /// Conditions whose type is not in `ours`, as they are.
    #[must_use]
    pub fn conditions_not_in(&self, ours: &[&str]) -> Vec<PodGroupCondition> {
        let foreign = |c: &&PodGroupCondition| !ours.contains(&c.type_.as_str());
        match self {
            Self::Api(s) => s.conditions.iter().filter(foreign).cloned().collect(),
            Self::Decided(s) => s
                .conditions
                .iter()
                .filter(|c| !ours.contains(&c.type_))
                .map(DecidedCondition::render)
                .chain(s.foreign.iter().filter(foreign).cloned())
                .collect(),
        }
    }
}

/// Fingerprint of a status, timestamps and transition ids excluded.
#[must_use]
pub fn status_fingerprint(s: &PodGroupStatus) -> u64 {
    let mut h = WordHasher::default();
    s.phase.map(PodGroupPhase::as_str).hash(&mut h);
    (s.running, s.succeeded, s.failed, s.pending).hash(&mut h);
    for c in &s.conditions {
        (&c.type_, &c.status, &c.reason, &c.message).hash(&mut h);
    }
    for c in &s.scheduling_conditions {
        // The pool too: `schedulingBackoff` reads it, so a record moved to another pool is news.
        (&c.type_, &c.node_pool, &c.reason, &c.message, &c.status).hash(&mut h);
        for r in &c.reasons {
            (&r.reason, &r.message).hash(&mut h);
        }
    }
    if let Some(r) = &s.resources_status {
        for map in [&r.allocated, &r.requested] {
            0xa11c_u16.hash(&mut h);
            for (k, v) in map {
                k.as_str().hash(&mut h);
                // By value, not text: the decided side fingerprints numbers without writing them out.
                match api::quantity::milli_value(&v.0) {
                    Ok(milli) => milli.hash(&mut h),
                    Err(_) => v.0.as_str().hash(&mut h),
                }
            }
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::{CPU, MEMORY};

    fn names() -> Arc<SlotNames> {
        SlotNames::new(
            ["cpu", "memory", "nvidia.com/gpu", "pods", "example.com/fpga"]
                .iter()
                .map(|n| Arc::from(*n))
                .collect(),
        )
    }

    fn resources(values: &[(usize, i64)]) -> Resources {
        let mut r = Resources::ZERO;
        for (slot, v) in values {
            r.0[*slot] = *v;
        }
        r
    }

    fn condition(type_: &'static str, status: bool, time: Option<&str>) -> DecidedCondition {
        DecidedCondition {
            type_,
            status,
            reason: "Because",
            message: Arc::from(format!("{type_} is {status}")),
            last_transition_time: time.map(Arc::from),
        }
    }

    /// Statuses that differ in every field the fingerprint reads, and some only in what it does not.
    fn statuses() -> Vec<DecidedStatus> {
        let base = DecidedStatus {
            phase: PodGroupPhase::Pending,
            running: 0,
            succeeded: 0,
            failed: 0,
            pending: 2,
            conditions: vec![condition("Scheduled", false, Some("2026-01-01T00:00:00Z"))],
            pool: None,
            foreign: Vec::new(),
            allocated: Resources::ZERO,
            requested: resources(&[(CPU, 1500), (MEMORY, 1 << 30), (GPU, 500), (PODS, 2)]),
            non_preemptible: false,
            names: names(),
        };
        let mut all = vec![base.clone()];
        let mut s = base.clone();
        s.phase = PodGroupPhase::Running;
        s.running = 2;
        s.pending = 0;
        s.allocated = s.requested;
        s.non_preemptible = true;
        s.conditions = vec![condition("Scheduled", true, None)];
        all.push(s);
        let mut s = base.clone();
        s.conditions
            .push(condition("Unschedulable", true, Some("2026-01-01T00:00:01Z")));
        s.pool = Some(PoolCondition {
            node_pool: Arc::from("default"),
            message: Arc::from("no node fits"),
            reasons: vec![
                ("NoFit", Arc::from("no node fits")),
                ("OverLimit", Arc::from("over")),
            ],
            last_transition_time: None,
        });
        s.foreign.push(PodGroupCondition {
            type_: "PodGrouperWarning".to_owned(),
            status: "True".to_owned(),
            transition_id: None,
            last_transition_time: None,
            reason: Some("Odd".to_owned()),
            message: None,
        });
        all.push(s.clone());
        // Other quantities: whole GPUs, a fraction with leading zeros, an extended resource, negative.
        s.requested = resources(&[(CPU, 2000), (GPU, 3005), (4, 7), (MEMORY, -5)]);
        all.push(s.clone());
        // Only the time differs: the same fingerprint.
        s.conditions[0].last_transition_time = Some(Arc::from("2027-01-01T00:00:00Z"));
        all.push(s);
        all
    }

    #[test]
    fn the_fingerprint_is_that_of_the_rendered_status() {
        let all = statuses();
        for s in &all {
            assert_eq!(s.fingerprint(), status_fingerprint(&s.render()), "{s:?}");
        }
        let prints: Vec<u64> = all.iter().map(DecidedStatus::fingerprint).collect();
        assert_eq!(prints[3], prints[4], "times are not fingerprinted");
        let mut distinct = prints[..4].to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "every other difference is");
    }

    #[test]
    fn quantities_are_fingerprinted_by_value() {
        let mut s = statuses()[3].clone();
        // Beyond milli-units in an i64: the text is fingerprinted on both sides.
        s.allocated = resources(&[(MEMORY, i64::MAX), (4, i64::MAX / 10)]);
        assert_eq!(s.fingerprint(), status_fingerprint(&s.render()));
        // Another writer's spelling of the same amounts reads as the same status; another amount does not.
        let mut api = s.render();
        let requested = &mut api.resources_status.as_mut().expect("resources").requested;
        requested.insert("cpu".to_owned(), Quantity("2000m".to_owned()));
        requested.insert("nvidia.com/gpu".to_owned(), Quantity("3005m".to_owned()));
        assert_eq!(s.fingerprint(), status_fingerprint(&api));
        let requested = &mut api.resources_status.as_mut().expect("resources").requested;
        requested.insert("cpu".to_owned(), Quantity("2001m".to_owned()));
        assert_ne!(s.fingerprint(), status_fingerprint(&api));
        // A quantity moved from requested to allocated is a change.
        let mut moved = statuses()[3].clone();
        std::mem::swap(&mut moved.allocated, &mut moved.requested);
        assert_ne!(moved.fingerprint(), statuses()[3].fingerprint());
    }

    #[test]
    fn renders_quantities_as_the_api_writes_them() {
        let status = statuses()[3].render();
        let resources = status.resources_status.expect("resources");
        let text: Vec<(&str, &str)> = resources
            .requested
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect();
        assert_eq!(
            text,
            vec![
                ("cpu", "2"),
                ("example.com/fpga", "7"),
                ("memory", "-5"),
                ("nvidia.com/gpu", "3.005")
            ]
        );
        let running = statuses()[1].render().resources_status.expect("resources");
        assert_eq!(running.allocated_non_preemptible, running.allocated);
        assert_eq!(running.allocated["cpu"].0, "1500m");
        assert_eq!(running.allocated["nvidia.com/gpu"].0, "0.5");
        assert!(!running.allocated.contains_key("pods"));
    }

    #[test]
    fn a_decided_status_reads_as_its_rendering_does() {
        for s in statuses() {
            let decided = SeenStatus::Decided(Arc::new(s.clone()));
            let api = SeenStatus::Api(Arc::new(s.render()));
            for type_ in ["Scheduled", "Unschedulable", "PodGrouperWarning", "TimedOut"] {
                assert_eq!(decided.condition(type_), api.condition(type_), "{type_}");
            }
            assert_eq!(
                decided.first_scheduling_condition(),
                api.first_scheduling_condition()
            );
            assert_eq!(decided.last_scheduling_pool(), api.last_scheduling_pool());
            for ours in [&["Scheduled", "Unschedulable"][..], &["Unschedulable"][..]] {
                assert_eq!(decided.conditions_not_in(ours), api.conditions_not_in(ours));
            }
            assert_eq!(decided.render(), api.render());
        }
    }
}
