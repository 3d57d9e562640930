//! Fair-share units: the `f64` vector the division works in, the slot mask, and KAI's comparisons.
//!
//! KAI divides in these units, and rounding (floor to whole units) happens in them, so they are part
//! of the behaviour, not a presentation choice:
//! - CPU in millicores (the model's unit);
//! - memory in **bytes** (the model's unit; KAI multiplies the queue's MB quota by 10^6 and divides
//!   bytes, so flooring happens in bytes);
//! - GPU in devices (the model keeps milli-GPUs; divided by 1000 here, fractions allowed);
//! - extended resources in their own units (the model's);
//! - pods never take part.

use std::cmp::Ordering;
use std::fmt;

use crate::model::resources::{CPU, GPU, MAX_RESOURCES, MEMORY, PODS, Resources};

/// The sentinel KAI uses for "unlimited" quota and "no" limit.
pub const UNLIMITED: f64 = -1.0;

/// KAI compares resource quantities with this absolute tolerance to ignore float noise.
pub const TOLERANCE: f64 = 1e-9;

/// Milli-GPUs per device.
const MILLI_PER_GPU: f64 = 1000.0;

/// Bytes per megabyte as KAI counts it (10^6, not 2^20).
pub const BYTES_PER_MEGABYTE: f64 = 1_000_000.0;

/// One amount per resource slot, in fair-share units.
#[derive(Clone, Copy, PartialEq, Default)]
pub struct ShareVec(pub [f64; MAX_RESOURCES]);

impl ShareVec {
    /// Nothing.
    pub const ZERO: Self = Self([0.0; MAX_RESOURCES]);
    /// Every slot [`UNLIMITED`].
    pub const UNLIMITED: Self = Self([UNLIMITED; MAX_RESOURCES]);

    /// Every slot set to `value`.
    #[must_use]
    pub const fn splat(value: f64) -> Self {
        Self([value; MAX_RESOURCES])
    }

    /// Converts a model vector (milli-GPUs, bytes, millicores) into fair-share units. Pods become 0.
    #[must_use]
    pub fn from_resources(r: &Resources) -> Self {
        let mut out = Self::ZERO;
        for (slot, value) in out.0.iter_mut().enumerate() {
            *value = to_share(slot, r.0[slot]);
        }
        out
    }

    /// Converts back to model units, rounding to the nearest unit (for reports and messages).
    /// [`UNLIMITED`] slots become -1 in model units too; callers that report limits keep the
    /// [`ShareVec`] instead.
    #[must_use]
    pub fn to_resources(&self) -> Resources {
        let mut out = Resources::ZERO;
        for (slot, value) in out.0.iter_mut().enumerate() {
            *value = if self.0[slot] == UNLIMITED {
                -1
            } else {
                to_raw(slot, self.0[slot])
            };
        }
        out
    }

    /// One slot.
    #[must_use]
    pub fn get(&self, slot: usize) -> f64 {
        self.0[slot]
    }

    /// Sets one slot, returning the vector (builder style).
    #[must_use]
    pub fn with(mut self, slot: usize, value: f64) -> Self {
        self.0[slot] = value;
        self
    }
}

impl fmt::Debug for ShareVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (slot, value) in self.0.iter().enumerate().filter(|(_, v)| **v != 0.0) {
            match slot {
                CPU => m.entry(&"cpu_m", value),
                MEMORY => m.entry(&"mem", value),
                GPU => m.entry(&"gpu", value),
                PODS => m.entry(&"pods", value),
                _ => m.entry(&slot, value),
            };
        }
        m.finish()
    }
}

/// A model amount of one slot in fair-share units.
#[must_use]
pub fn to_share(slot: usize, raw: i64) -> f64 {
    match slot {
        PODS => 0.0,
        // Exact for every integer below 2^53, which covers any real cluster.
        GPU => raw as f64 / MILLI_PER_GPU,
        _ => raw as f64,
    }
}

/// A fair-share amount of one slot in model units, rounded to the nearest unit.
#[must_use]
pub fn to_raw(slot: usize, share: f64) -> i64 {
    let scaled = if slot == GPU { share * MILLI_PER_GPU } else { share };
    // Saturating float-to-int conversion is the intent for absurd values.
    scaled.round() as i64
}

/// Which slots take part in fair share. CPU, memory and GPU always do (as in KAI); an extended slot
/// does when some queue configures a quota or a limit for it. Pods never do.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotMask(u16);

const _: () = assert!(MAX_RESOURCES <= 16, "SlotMask holds one bit per slot");

impl SlotMask {
    /// No slot.
    pub const EMPTY: Self = Self(0);
    /// CPU, memory and GPU: the three resources KAI tracks.
    pub const CORE: Self = Self((1 << CPU) | (1 << MEMORY) | (1 << GPU));

    /// True when `slot` takes part.
    #[must_use]
    pub fn contains(self, slot: usize) -> bool {
        slot < MAX_RESOURCES && self.0 & (1 << slot) != 0
    }

    /// Adds a slot. Pods are refused: they are never fair-shared.
    pub fn insert(&mut self, slot: usize) {
        if slot < MAX_RESOURCES && slot != PODS {
            self.0 |= 1 << slot;
        }
    }

    /// Both masks.
    #[must_use]
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// True when no slot is set.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Slots in ascending order, without allocating.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(slot)
        })
    }

    /// Slots of `mask` where `r` is strictly positive.
    #[must_use]
    pub fn positive_in(mask: Self, r: &Resources) -> Self {
        let mut out = Self::EMPTY;
        for slot in mask.iter() {
            if r.0[slot] > 0 {
                out.insert(slot);
            }
        }
        out
    }
}

impl fmt::Debug for SlotMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// `quantity <= limit`, ignoring float noise below [`TOLERANCE`] (KAI's `LessOrEqualWithTolerance`).
#[must_use]
pub fn le_tol(quantity: f64, limit: f64) -> bool {
    quantity <= limit || (quantity - limit).abs() <= TOLERANCE
}

/// KAI's `compareQuantities`: [`UNLIMITED`] is larger than anything but itself; otherwise values
/// within [`TOLERANCE`] are equal.
#[must_use]
pub fn cmp_quantity(quantity: f64, other: f64) -> Ordering {
    match (quantity == UNLIMITED, other == UNLIMITED) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => {
            if !le_tol(quantity, other) {
                Ordering::Greater
            } else if !le_tol(other, quantity) {
                Ordering::Less
            } else {
                Ordering::Equal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::FIRST_EXTENDED;

    #[test]
    fn units_round_trip() {
        let r = Resources::new(1500, 8_000_000_000, 2500)
            .with(PODS, 3)
            .with(FIRST_EXTENDED, 7);
        let s = ShareVec::from_resources(&r);
        assert_eq!(s.get(CPU), 1500.0);
        assert_eq!(s.get(MEMORY), 8e9);
        assert_eq!(s.get(GPU), 2.5);
        assert_eq!(s.get(PODS), 0.0);
        assert_eq!(s.get(FIRST_EXTENDED), 7.0);
        assert_eq!(s.to_resources(), r.with(PODS, 0));
        assert_eq!(to_share(GPU, 1650), 1.65);
        assert_eq!(to_raw(GPU, 0.1 + 0.2), 300);
    }

    #[test]
    fn mask_iterates_and_refuses_pods() {
        let mut m = SlotMask::CORE;
        m.insert(PODS);
        m.insert(FIRST_EXTENDED + 2);
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            vec![CPU, MEMORY, GPU, FIRST_EXTENDED + 2]
        );
        assert!(!m.contains(PODS));
        assert!(SlotMask::EMPTY.is_empty());
        let r = Resources::new(0, 5, 1000);
        assert_eq!(
            SlotMask::positive_in(m, &r).iter().collect::<Vec<_>>(),
            vec![MEMORY, GPU]
        );
    }

    #[test]
    fn comparisons_follow_kai() {
        let cases = [
            (1.0, 2.0, Ordering::Less),
            (2.0, 1.0, Ordering::Greater),
            (0.1 + 0.2, 0.3, Ordering::Equal),
            (UNLIMITED, 1e12, Ordering::Greater),
            (1e12, UNLIMITED, Ordering::Less),
            (UNLIMITED, UNLIMITED, Ordering::Equal),
        ];
        for (a, b, want) in cases {
            assert_eq!(cmp_quantity(a, b), want, "{a} vs {b}");
        }
        assert!(le_tol(0.1 + 0.2, 0.3));
        assert!(!le_tol(0.3 + 1e-6, 0.3));
    }
}
