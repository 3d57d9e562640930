//! A small fixed-size resource vector: the unit of every capacity and request in the model.
//!
//! Slots: [`CPU`] in millicores, [`MEMORY`] in bytes, [`GPU`] in milli-GPUs (a whole device is 1000, so
//! fractions add up exactly), [`PODS`] as a count, then extended resources (`example.com/foo`,
//! `ephemeral-storage`, hugepages, ...) in their own units at slots interned by [`ResourceNames`].
//! Fixed size keeps the vectors `Copy`, allocation-free and cheap to compare in the hot loop.

use std::collections::HashMap;
use std::fmt;

/// Number of slots in a [`Resources`] vector.
pub const MAX_RESOURCES: usize = 16;
/// CPU, millicores.
pub const CPU: usize = 0;
/// Memory, bytes.
pub const MEMORY: usize = 1;
/// GPUs (`nvidia.com/gpu`), milli-GPUs.
pub const GPU: usize = 2;
/// Pod slots on a node; a pod requests 1.
pub const PODS: usize = 3;
/// First slot for extended resources.
pub const FIRST_EXTENDED: usize = 4;

/// A resource vector. Negative values never appear in a consistent model.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Resources(pub [i64; MAX_RESOURCES]);

impl Resources {
    /// Nothing.
    pub const ZERO: Self = Self([0; MAX_RESOURCES]);

    /// CPU millicores, memory bytes and milli-GPUs; no pod slot.
    #[must_use]
    pub fn new(cpu_milli: i64, memory_bytes: i64, gpu_milli: i64) -> Self {
        let mut r = Self::ZERO;
        r.0[CPU] = cpu_milli;
        r.0[MEMORY] = memory_bytes;
        r.0[GPU] = gpu_milli;
        r
    }

    /// The slots folded into one word, for a hasher to mix once rather than sixteen times (equal
    /// vectors fold alike; a rare collision of unequal ones costs a comparison). Only for hashing in
    /// this process: the fold may change between versions.
    #[must_use]
    pub fn folded(&self) -> u64 {
        let mut folded = 0u64;
        for (slot, amount) in (0u32..).zip(self.0) {
            folded ^= amount
                .cast_unsigned()
                .rotate_left(slot.wrapping_mul(5).wrapping_add(7));
        }
        folded
    }

    /// CPU millicores.
    #[must_use]
    pub fn cpu(&self) -> i64 {
        self.0[CPU]
    }
    /// Memory bytes.
    #[must_use]
    pub fn memory(&self) -> i64 {
        self.0[MEMORY]
    }
    /// Milli-GPUs.
    #[must_use]
    pub fn gpu(&self) -> i64 {
        self.0[GPU]
    }
    /// Pod slots.
    #[must_use]
    pub fn pods(&self) -> i64 {
        self.0[PODS]
    }

    /// Sets one slot, returning the vector (builder style).
    #[must_use]
    pub fn with(mut self, slot: usize, value: i64) -> Self {
        self.0[slot] = value;
        self
    }

    /// `self + other`, slot by slot.
    #[must_use]
    pub fn plus(&self, other: &Self) -> Self {
        let mut r = *self;
        r.add(other);
        r
    }

    /// `self - other`, slot by slot (may go negative; callers check [`Self::fits_in`] first).
    #[must_use]
    pub fn minus(&self, other: &Self) -> Self {
        let mut r = *self;
        r.sub(other);
        r
    }

    /// Adds in place, saturating at the slot's bounds.
    ///
    /// Saturating, never wrapping: quantities come from users (the API server accepts `memory: 5Ei` in
    /// two containers), and a wrapped sum would turn negative and "fit" anywhere, corrupting node and
    /// queue accounting for everyone. Reading a pod refuses one whose own requests overflow
    /// (`cache::convert` in the scheduler crate), so the sums the model keeps for placed pods stay exact; saturation
    /// only caps absurd totals, such as a queue's demand over many huge pending pods.
    pub fn add(&mut self, other: &Self) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// Subtracts in place, saturating at the slot's bounds (see [`Self::add`]).
    pub fn sub(&mut self, other: &Self) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a = a.saturating_sub(*b);
        }
    }

    /// Multiplies every slot, saturating (see [`Self::add`]).
    #[must_use]
    pub fn times(&self, n: i64) -> Self {
        let mut r = *self;
        for a in &mut r.0 {
            *a = a.saturating_mul(n);
        }
        r
    }

    /// True when every slot `self` needs is at most the same slot of `capacity`. A slot not needed
    /// (zero) always fits, even where `capacity` is negative (a node whose allocatable shrank below
    /// what its pods use): as in kube-scheduler, a pod is never refused for a resource it does not ask
    /// for.
    #[must_use]
    pub fn fits_in(&self, capacity: &Self) -> bool {
        self.0
            .iter()
            .zip(capacity.0.iter())
            .all(|(need, have)| *need <= 0 || need <= have)
    }

    /// Slots where `self` needs more than `capacity` (see [`Self::fits_in`]).
    pub fn shortfalls<'a>(&'a self, capacity: &'a Self) -> impl Iterator<Item = usize> + 'a {
        (0..MAX_RESOURCES).filter(move |&i| self.0[i] > 0 && self.0[i] > capacity.0[i])
    }

    /// True when every slot is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|v| *v == 0)
    }

    /// Slot by slot minimum.
    #[must_use]
    pub fn least(&self, other: &Self) -> Self {
        let mut r = *self;
        for (a, b) in r.0.iter_mut().zip(other.0.iter()) {
            *a = (*a).min(*b);
        }
        r
    }

    /// Slot by slot maximum.
    #[must_use]
    pub fn max(&self, other: &Self) -> Self {
        let mut r = *self;
        for (a, b) in r.0.iter_mut().zip(other.0.iter()) {
            *a = (*a).max(*b);
        }
        r
    }

    /// Non-zero slots, for display.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, i64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .map(|(i, v)| (i, *v))
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (i, v) in self.nonzero() {
            match i {
                CPU => m.entry(&"cpu_m", &v),
                MEMORY => m.entry(&"mem", &v),
                GPU => m.entry(&"gpu_m", &v),
                PODS => m.entry(&"pods", &v),
                _ => m.entry(&i, &v),
            };
        }
        m.finish()
    }
}

/// Interns resource names to slots. CPU, memory, GPU and pods are fixed; other names get the next free
/// slot the first time they are seen. Names beyond the last slot are reported as `None` (callers treat
/// a request for such a resource as unsatisfiable and say so).
#[derive(Clone, Debug)]
pub struct ResourceNames {
    slots: HashMap<String, usize>,
    names: Vec<String>,
    /// Slots of MIG profiles (`nvidia.com/mig-<g>g.<mem>gb`) and their compute slices `g`, which queue
    /// accounting counts as `g` GPUs each, as KAI does.
    mig: Vec<(usize, i64)>,
}

impl Default for ResourceNames {
    fn default() -> Self {
        let names: Vec<String> = ["cpu", "memory", api::keys::GPU_RESOURCE, "pods"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let slots = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        Self {
            slots,
            names,
            mig: Vec::new(),
        }
    }
}

/// The compute slices `g` of a MIG profile name `nvidia.com/mig-<g>g.<mem>gb` (KAI's pattern, exactly:
/// other spellings are not MIG profiles to it and count as plain extended resources here too).
#[must_use]
pub fn mig_slices(name: &str) -> Option<i64> {
    let profile = name.strip_prefix("nvidia.com/mig-")?;
    let (slices, memory) = profile.split_once("g.")?;
    let memory = memory.strip_suffix("gb")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(slices) || !digits(memory) {
        return None;
    }
    slices.parse().ok()
}

impl ResourceNames {
    /// The slot of a resource name, interning it if new.
    pub fn slot(&mut self, name: &str) -> Option<usize> {
        if let Some(slot) = self.slots.get(name) {
            return Some(*slot);
        }
        if self.names.len() >= MAX_RESOURCES {
            return None;
        }
        let slot = self.names.len();
        self.names.push(name.to_owned());
        self.slots.insert(name.to_owned(), slot);
        if let Some(slices) = mig_slices(name) {
            self.mig.push((slot, slices));
        }
        Some(slot)
    }

    /// `r` as queues count it: MIG profiles added to the GPU slot at their compute slices each (a
    /// `nvidia.com/mig-3g.20gb` counts 3 GPUs), as KAI's quota, fair share and queue figures count them.
    /// The profiles keep their own slots too, for placement and for quotas set on them by name.
    #[must_use]
    pub fn with_mig_as_gpus(&self, mut r: Resources) -> Resources {
        for &(slot, slices) in &self.mig {
            let count = r.0[slot];
            if count > 0 {
                let milli = count.saturating_mul(slices).saturating_mul(1000);
                r.0[GPU] = r.0[GPU].saturating_add(milli);
            }
        }
        r
    }

    /// The slot of a known name, without interning.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<usize> {
        self.slots.get(name).copied()
    }

    /// The name of a slot.
    #[must_use]
    pub fn name(&self, slot: usize) -> &str {
        self.names.get(slot).map_or("unknown", String::as_str)
    }

    /// Number of slots in use.
    #[must_use]
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Never empty (the four fixed slots); here for clippy's `len_without_is_empty`.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Human form of one slot's amount: `2`, `1.5` GPUs, `500m` CPU, `8Gi` memory, ephemeral storage or
    /// hugepages.
    #[must_use]
    pub fn format_amount(&self, slot: usize, amount: i64) -> String {
        match slot {
            CPU => api::quantity::format_milli(amount),
            GPU => format_decimal_milli(amount),
            MEMORY => format_bytes(amount),
            _ if counts_bytes(self.name(slot)) => format_bytes(amount),
            _ => amount.to_string(),
        }
    }

    /// An amount and what of: `8 nvidia.com/gpu`, `10Gi ephemeral-storage`, `2 pod slots`.
    #[must_use]
    pub fn amount_of(&self, slot: usize, amount: i64) -> String {
        match slot {
            PODS if amount == 1 => "1 pod slot".to_owned(),
            PODS => format!("{amount} pod slots"),
            _ => format!("{} {}", self.format_amount(slot, amount), self.name(slot)),
        }
    }

    /// Human form of a vector: `cpu 2, memory 8Gi, nvidia.com/gpu 1`.
    #[must_use]
    pub fn format(&self, r: &Resources) -> String {
        let parts: Vec<String> = r
            .nonzero()
            .filter(|(slot, _)| *slot != PODS)
            .map(|(slot, v)| format!("{} {}", self.name(slot), self.format_amount(slot, v)))
            .collect();
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Whether a resource other than memory is counted in bytes.
fn counts_bytes(name: &str) -> bool {
    name == "ephemeral-storage" || name.starts_with("hugepages-")
}

/// Milli-units as a decimal number: 500 → `0.5`, 2000 → `2`, 1250 → `1.25`.
pub use api::quantity::format_decimal_milli;

/// Bytes in the largest binary unit that divides them exactly (`8Gi`, `1536Mi`, `100`).
#[must_use]
pub fn format_bytes(bytes: i64) -> String {
    for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if bytes != 0 && bytes % (1i64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_saturate_instead_of_wrapping() {
        let huge = Resources::ZERO.with(MEMORY, i64::MAX - 1);
        let more = Resources::ZERO.with(MEMORY, 5);
        assert_eq!(huge.plus(&more).memory(), i64::MAX, "saturates, never negative");
        assert_eq!(
            Resources::ZERO.with(MEMORY, i64::MIN + 1).minus(&more).memory(),
            i64::MIN
        );
        assert_eq!(huge.times(3).memory(), i64::MAX);
        assert_eq!(
            more.plus(&more),
            Resources::ZERO.with(MEMORY, 10),
            "exact below the bounds"
        );
    }

    #[test]
    fn arithmetic_and_fit() {
        let node = Resources::new(4000, 16 << 30, 8000).with(PODS, 110);
        let pod = Resources::new(500, 1 << 30, 1000).with(PODS, 1);
        assert!(pod.fits_in(&node));
        assert!(!pod.times(9).fits_in(&node));
        assert_eq!(pod.times(9).shortfalls(&node).collect::<Vec<_>>(), vec![CPU, GPU]);
        assert_eq!(node.minus(&pod).plus(&pod), node);
    }

    #[test]
    fn a_resource_not_asked_for_never_blocks() {
        // The node's GPUs were taken away while pods still use them: its free GPU count is negative.
        let free = Resources::new(4000, 16 << 30, -2000).with(PODS, 10);
        let cpu_only = Resources::new(500, 1 << 30, 0).with(PODS, 1);
        assert!(cpu_only.fits_in(&free));
        assert_eq!(cpu_only.shortfalls(&free).count(), 0);
        let gpu = Resources::new(500, 1 << 30, 1000).with(PODS, 1);
        assert!(!gpu.fits_in(&free));
        assert_eq!(gpu.shortfalls(&free).collect::<Vec<_>>(), vec![GPU]);
        // Room for no more pods: every pod needs a slot.
        assert!(!cpu_only.fits_in(&free.with(PODS, 0)));
    }

    #[test]
    fn names_intern_and_format() {
        let mut names = ResourceNames::default();
        assert_eq!(names.slot("cpu"), Some(CPU));
        assert_eq!(names.slot("nvidia.com/gpu"), Some(GPU));
        assert_eq!(names.slot("example.com/fpga"), Some(FIRST_EXTENDED));
        assert_eq!(names.slot("example.com/fpga"), Some(FIRST_EXTENDED));
        for i in 0..20 {
            let _ = names.slot(&format!("x/{i}"));
        }
        assert_eq!(names.len(), MAX_RESOURCES);
        assert_eq!(names.slot("one-too-many"), None);
        let r = Resources::new(1500, 8 << 30, 500);
        assert_eq!(names.format(&r), "cpu 1500m, memory 8Gi, nvidia.com/gpu 0.5");
        assert_eq!(format_decimal_milli(1250), "1.25");
        assert_eq!(format_decimal_milli(-2000), "-2");
    }

    #[test]
    fn byte_resources_are_formatted_in_bytes() {
        let mut names = ResourceNames::default();
        let storage = names.slot("ephemeral-storage").unwrap();
        let hugepages = names.slot("hugepages-2Mi").unwrap();
        let fpga = names.slot("example.com/fpga").unwrap();
        let r = Resources::ZERO
            .with(storage, 10 << 30)
            .with(hugepages, 4 << 20)
            .with(fpga, 2);
        assert_eq!(
            names.format(&r),
            "ephemeral-storage 10Gi, hugepages-2Mi 4Mi, example.com/fpga 2"
        );
        assert_eq!(names.amount_of(storage, 10 << 30), "10Gi ephemeral-storage");
        assert_eq!(names.amount_of(PODS, 1), "1 pod slot");
        assert_eq!(names.amount_of(PODS, 2), "2 pod slots");
    }
}
