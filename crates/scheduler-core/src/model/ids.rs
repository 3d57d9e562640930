//! Dense ids into the model's arenas. Ids are stable while the object exists; a freed slot may be reused
//! by a later object, so ids are never kept across the object's deletion.

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            /// The arena index.
            #[must_use]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id!(
    /// A node.
    NodeId
);
id!(
    /// A task (pod).
    TaskId
);
id!(
    /// A gang (PodGroup or Volcano PodGroup).
    GroupId
);
id!(
    /// A queue.
    QueueId
);

/// A slab arena: `Vec<Option<T>>` with a free list, so ids stay small and dense.
///
/// Every slot carries a change stamp: the arena's clock ticks on each insert, removal and mutable
/// access, and the slot takes the new value. A slot whose stamp is not above a clock read earlier has
/// not been changed since (nor has a new object taken it), so work derived from it then still holds.
/// Values are reached mutably only through [`Arena::get_mut`], so no change escapes the stamps, but
/// for the one named exception ([`Arena::get_mut_unstamped`]).
#[derive(Clone, Debug)]
pub struct Arena<T> {
    slots: Vec<Option<T>>,
    stamps: Vec<u64>,
    clock: u64,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            stamps: Vec::new(),
            clock: 0,
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Arena<T> {
    fn touch(&mut self, i: usize) {
        self.clock += 1;
        if let Some(stamp) = self.stamps.get_mut(i) {
            *stamp = self.clock;
        }
    }

    /// Inserts and returns the slot index.
    pub fn insert(&mut self, value: T) -> u32 {
        self.len += 1;
        let i = if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(value);
            i
        } else {
            self.slots.push(Some(value));
            self.stamps.push(0);
            u32::try_from(self.slots.len() - 1).expect("invariant: fewer than 2^32 objects")
        };
        self.touch(i as usize);
        i
    }

    /// Removes and returns the value.
    pub fn remove(&mut self, i: u32) -> Option<T> {
        let value = self.slots.get_mut(i as usize)?.take();
        if value.is_some() {
            self.free.push(i);
            self.len -= 1;
            self.touch(i as usize);
        }
        value
    }

    /// The arena's clock: the latest stamp handed out.
    #[must_use]
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// When the slot last changed (see the type's doc); `u64::MAX` for a slot never used.
    #[must_use]
    pub fn stamp(&self, i: u32) -> u64 {
        self.stamps.get(i as usize).copied().unwrap_or(u64::MAX)
    }

    /// The value at a slot.
    #[must_use]
    pub fn get(&self, i: u32) -> Option<&T> {
        self.slots.get(i as usize)?.as_ref()
    }

    /// The value at a slot, mutably (stamping it changed).
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        if self.slots.get(i as usize).is_some_and(Option::is_some) {
            self.touch(i as usize);
        }
        self.slots.get_mut(i as usize)?.as_mut()
    }

    /// The value at a slot, mutably, without stamping it. Only for fields that nothing checked by
    /// stamps derives from, or whose every reader compares them itself (a PodGroup's observed status
    /// echoing back: see `Cluster::apply_group`).
    pub fn get_mut_unstamped(&mut self, i: u32) -> Option<&mut T> {
        self.slots.get_mut(i as usize)?.as_mut()
    }

    /// Live values with their slot index.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().map(|v| (i as u32, v)))
    }

    /// Number of live values.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One past the highest slot ever used (for dense side tables indexed by id).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// A hasher for small integer keys (ids, gang indexes): one multiply per word, no per-process seed.
/// Only for maps keyed by numbers the scheduler itself hands out (never by user-controlled strings),
/// and only where the iteration order does not decide anything.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A `HashMap` keyed by ids or indexes, hashed with [`IdHasher`].
pub type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// A hasher that takes a word at a time (bytes eight at a time) with a full 64-bit mix per word, and no
/// seed: several times cheaper than SipHash on many small fields. For fingerprints (a group report's
/// inputs) and for maps keyed by wide numeric keys (a node's free room), not by user-controlled strings.
#[derive(Clone, Copy, Debug, Default)]
pub struct WordHasher(u64);

impl WordHasher {
    fn mix(&mut self, word: u64) {
        let mut h = (self.0 ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
        self.0 = h.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32);
    }
}

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        // murmur3's finaliser.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        // The length tells "ab" from "ab\0".
        self.mix(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
    }

    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_removals_and_every_mutable_access_stamp_their_slot() {
        let mut arena: Arena<u32> = Arena::default();
        let a = arena.insert(1);
        let b = arena.insert(2);
        let seen = arena.clock();
        assert!(arena.stamp(a) <= seen && arena.stamp(b) <= seen);
        // Reading stamps nothing.
        assert_eq!(arena.get(a), Some(&1));
        assert_eq!(arena.clock(), seen);
        // A mutable access does, write or not (stamps are conservative), and only its slot.
        let _ = arena.get_mut(a);
        assert!(arena.stamp(a) > seen);
        assert!(arena.stamp(b) <= seen);
        // The named exception does not.
        let seen = arena.clock();
        *arena.get_mut_unstamped(b).expect("b is live") = 3;
        assert_eq!(arena.clock(), seen);
        assert!(arena.stamp(b) <= seen);
        // A removal is a change, and so is a new object in the freed slot.
        assert_eq!(arena.remove(b), Some(3));
        assert!(arena.stamp(b) > seen);
        let seen = arena.clock();
        let c = arena.insert(4);
        assert_eq!(c, b);
        assert!(arena.stamp(c) > seen);
        // A slot never used reads as changed.
        assert_eq!(arena.stamp(99), u64::MAX);
    }
}
