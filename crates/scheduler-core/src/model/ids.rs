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
///
/// The arena also keeps a log of the slots it stamped, in stamp order, so that what changed since a
/// clock is found without visiting every slot ([`Arena::changed_since`]). The log holds at least the
/// last [`MIN_LOG`] stamps and at most twice the larger of that and the slot count; a clock older than
/// what it still holds gets `None`, and the caller looks at every slot instead.
#[derive(Clone, Debug)]
pub struct Arena<T> {
    slots: Vec<Option<T>>,
    stamps: Vec<u64>,
    clock: u64,
    free: Vec<u32>,
    len: usize,
    /// Slots stamped, in order: `log[k]` at clock `log_start + k + 1`.
    log: Vec<u32>,
    log_start: u64,
}

/// The fewest stamps the change log holds (see [`Arena`]).
pub const MIN_LOG: usize = 4096;

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            stamps: Vec::new(),
            clock: 0,
            free: Vec::new(),
            len: 0,
            log: Vec::new(),
            log_start: 0,
        }
    }
}

impl<T> Arena<T> {
    fn touch(&mut self, i: usize) {
        self.clock += 1;
        if let Some(stamp) = self.stamps.get_mut(i) {
            *stamp = self.clock;
        }
        self.log
            .push(u32::try_from(i).expect("invariant: fewer than 2^32 objects"));
        if self.log.len() > 2 * MIN_LOG.max(self.slots.len()) {
            // Keep the newer half: older clocks fall back to a full look.
            let drop = self.log.len() / 2;
            self.log.drain(..drop);
            self.log_start += drop as u64;
        }
    }

    /// The slots stamped after clock `since`, in stamp order, a slot once per stamp (so possibly more
    /// than once); `None` when the log no longer reaches back to `since` (look at every slot's
    /// [`Arena::stamp`] instead).
    #[must_use]
    pub fn changed_since(&self, since: u64) -> Option<&[u32]> {
        let from = usize::try_from(since.checked_sub(self.log_start)?).ok()?;
        self.log.get(from..)
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

/// The slots of one [`Arena`] whose values pass one test, brought up to date from the arena's change
/// log when read ([`TrackedSlots::sync`]): for the passes a cycle makes over a few of tens of
/// thousands of values (the pods holding a reservation, say), which would otherwise visit every slot.
/// A value's passing may depend on nothing but the value itself, and each `TrackedSlots` must always
/// be synced against the same arena with the same test.
#[derive(Clone, Debug, Default)]
pub struct TrackedSlots {
    /// The arena's clock at the last sync (`None`: never synced).
    synced: Option<u64>,
    members: std::collections::BTreeSet<u32>,
}

impl TrackedSlots {
    /// Brings the set up to date with `arena` (every slot changed since the last sync is tested again;
    /// all are when the log no longer reaches back) and returns it, in slot order.
    pub fn sync<T>(
        &mut self,
        arena: &Arena<T>,
        passes: impl Fn(&T) -> bool,
    ) -> &std::collections::BTreeSet<u32> {
        match self.synced.and_then(|clock| arena.changed_since(clock)) {
            Some(changed) => {
                for &slot in changed {
                    if arena.get(slot).is_some_and(&passes) {
                        self.members.insert(slot);
                    } else {
                        self.members.remove(&slot);
                    }
                }
            }
            None => {
                self.members = arena.iter().filter(|(_, v)| passes(v)).map(|(i, _)| i).collect();
            }
        }
        self.synced = Some(arena.clock());
        &self.members
    }
}

/// A mark per slot of an [`Arena`], one bit each: a cycle marks a few of tens of thousands of slots,
/// and a fresh set costs zeroing its words (a flag per slot was eight times the memory to zero, at every
/// session's open and report).
#[derive(Clone, Debug, Default)]
pub struct SlotBits {
    words: Vec<u64>,
    slots: usize,
}

impl SlotBits {
    /// No slot marked, of `slots`.
    #[must_use]
    pub fn with_slots(slots: usize) -> Self {
        Self {
            words: vec![0; slots.div_ceil(64)],
            slots,
        }
    }

    /// Marks `slot`; whether it was not marked before (`false` beyond the slots, which are not marked).
    pub fn insert(&mut self, slot: usize) -> bool {
        if slot >= self.slots {
            return false;
        }
        let bit = 1u64 << (slot % 64);
        self.words.get_mut(slot / 64).is_some_and(|word| {
            let fresh = *word & bit == 0;
            *word |= bit;
            fresh
        })
    }

    /// Whether `slot` is marked (`None` beyond the slots).
    #[must_use]
    pub fn get(&self, slot: usize) -> Option<bool> {
        if slot >= self.slots {
            return None;
        }
        self.words
            .get(slot / 64)
            .map(|word| word & (1u64 << (slot % 64)) != 0)
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

/// A key of a [`DenseMap`]: an arena id or an index.
pub trait DenseKey: Copy {
    /// The slot.
    fn slot(self) -> usize;
    /// The key of a slot.
    fn of_slot(slot: usize) -> Self;
}

macro_rules! dense_key {
    ($($name:ident),*) => {
        $(impl DenseKey for $name {
            fn slot(self) -> usize {
                self.index()
            }

            fn of_slot(slot: usize) -> Self {
                Self(u32::try_from(slot).expect("invariant: arena slots fit in u32"))
            }
        })*
    };
}

dense_key!(NodeId, TaskId, GroupId, QueueId);

impl DenseKey for usize {
    fn slot(self) -> usize {
        self
    }

    fn of_slot(slot: usize) -> Self {
        slot
    }
}

/// A map keyed by arena ids or indexes, held as a vector by slot: for the maps a cycle fills for
/// every gang or group (tens of thousands), where hashing each key costs more than the vector's
/// empty slots. Iterates in slot order.
#[derive(Clone, Debug)]
pub struct DenseMap<K, V> {
    slots: Vec<Option<V>>,
    len: usize,
    key: std::marker::PhantomData<K>,
}

impl<K, V> Default for DenseMap<K, V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
            key: std::marker::PhantomData,
        }
    }
}

impl<K: DenseKey, V> DenseMap<K, V> {
    /// An empty map with room for keys below `slots`.
    #[must_use]
    pub fn with_slots(slots: usize) -> Self {
        let mut map = Self::default();
        map.slots.resize_with(slots, || None);
        map
    }

    /// The value of a key.
    #[must_use]
    pub fn get(&self, key: &K) -> Option<&V> {
        self.slots.get(key.slot()).and_then(Option::as_ref)
    }

    /// The value of a key, mutably.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.slots.get_mut(key.slot()).and_then(Option::as_mut)
    }

    /// Whether the key has a value.
    #[must_use]
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Sets a key's value, returning the old one.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let slot = key.slot();
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        let old = self.slots[slot].replace(value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes a key's value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let old = self.slots.get_mut(key.slot()).and_then(Option::take);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// The key's value, made with `make` if it has none.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let slot = key.slot();
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        let entry = &mut self.slots[slot];
        if entry.is_none() {
            self.len += 1;
        }
        entry.get_or_insert_with(make)
    }

    /// Keys and values, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (K, &V)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().map(|v| (K::of_slot(i), v)))
    }

    /// Keys with a value, in slot order.
    pub fn keys(&self) -> impl Iterator<Item = K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Values, in slot order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.slots.iter().flatten()
    }

    /// Keys with a value.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key has a value.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<K: DenseKey, V> DenseMap<K, V> {
    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(K, &mut V) -> bool) {
        for (i, entry) in self.slots.iter_mut().enumerate() {
            if let Some(v) = entry
                && !keep(K::of_slot(i), v)
            {
                *entry = None;
                self.len -= 1;
            }
        }
    }
}

impl<K: DenseKey, V> FromIterator<(K, V)> for DenseMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = Self::default();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

impl<K: DenseKey, V: Default> DenseMap<K, V> {
    /// The key's value, the default if it has none.
    pub fn get_or_default(&mut self, key: K) -> &mut V {
        self.get_or_insert_with(key, V::default)
    }
}

impl<K: DenseKey, V: PartialEq> PartialEq for DenseMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .iter()
                .zip(other.iter())
                .all(|((a, x), (b, y))| a.slot() == b.slot() && x == y)
    }
}

/// A `HashMap` keyed by ids or indexes, hashed with [`IdHasher`].
pub type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// A `HashMap` hashed with [`WordHasher`] (keys of many small fields: attempt shapes, classes).
pub type WordMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<WordHasher>>;

/// A `HashSet` hashed with [`WordHasher`].
pub type WordSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<WordHasher>>;

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
    fn slot_bits_mark_each_slot_once_and_nothing_beyond() {
        let mut bits = SlotBits::with_slots(130);
        // Slots either side of word boundaries, and the last.
        for slot in [0, 63, 64, 65, 127, 128, 129] {
            assert_eq!(bits.get(slot), Some(false), "{slot} starts unmarked");
            assert!(bits.insert(slot), "{slot} is new");
            assert!(!bits.insert(slot), "{slot} was marked");
            assert_eq!(bits.get(slot), Some(true));
        }
        let marked: Vec<usize> = (0..130).filter(|s| bits.get(*s) == Some(true)).collect();
        assert_eq!(marked, [0, 63, 64, 65, 127, 128, 129]);
        // Beyond the slots (the words hold room up to 191): never marked, not even after an insert.
        for slot in [130, 191, 192, 10_000] {
            assert!(!bits.insert(slot));
            assert_eq!(bits.get(slot), None);
        }
        assert_eq!(SlotBits::with_slots(0).get(0), None);
    }

    #[test]
    fn a_dense_map_behaves_as_a_map_in_slot_order() {
        let mut map: DenseMap<GroupId, &str> = DenseMap::with_slots(2);
        assert!(map.is_empty());
        assert_eq!(map.insert(GroupId(5), "five"), None);
        assert_eq!(map.insert(GroupId(1), "one"), None);
        assert_eq!(map.insert(GroupId(5), "FIVE"), Some("five"));
        assert_eq!(map.len(), 2);
        assert_eq!(map.get(&GroupId(5)), Some(&"FIVE"));
        assert_eq!(map.get(&GroupId(9)), None);
        assert!(map.contains_key(&GroupId(1)) && !map.contains_key(&GroupId(0)));
        let keys: Vec<u32> = map.iter().map(|(k, _)| k.0).collect();
        assert_eq!(keys, vec![1, 5]);
        assert_eq!(map.remove(&GroupId(1)), Some("one"));
        assert_eq!(map.remove(&GroupId(1)), None);
        assert_eq!(map.len(), 1);
        *map.get_or_insert_with(GroupId(7), || "seven") = "SEVEN";
        assert_eq!(map.values().copied().collect::<Vec<_>>(), vec!["FIVE", "SEVEN"]);
        let mut counts: DenseMap<usize, u32> = DenseMap::default();
        *counts.get_or_default(3) += 2;
        *counts.get_or_default(3) += 1;
        assert_eq!(counts.get(&3), Some(&3));
        let mut evens: DenseMap<usize, usize> = (0..6).map(|i| (i, i)).collect();
        evens.retain(|k, _| k % 2 == 0);
        assert_eq!(evens.iter().map(|(k, _)| k).collect::<Vec<_>>(), vec![0, 2, 4]);
        assert_eq!(evens.len(), 3);
        assert_eq!(counts, {
            let mut other = DenseMap::with_slots(10);
            other.insert(3, 3);
            other
        });
    }

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

    #[test]
    fn the_change_log_names_what_changed_since_a_clock_while_it_reaches_back() {
        let mut arena: Arena<u32> = Arena::default();
        let a = arena.insert(1);
        let seen = arena.clock();
        assert_eq!(arena.changed_since(seen), Some(&[][..]));
        let b = arena.insert(2);
        let _ = arena.get_mut(a);
        let _ = arena.get_mut_unstamped(b);
        assert_eq!(arena.changed_since(seen), Some(&[b, a][..]));
        assert_eq!(arena.changed_since(0), Some(&[a, b, a][..]));
        // Every slot the log names since a clock is exactly every slot stamped after it.
        for _ in 0..3 * MIN_LOG {
            let _ = arena.get_mut(b);
        }
        assert_eq!(arena.changed_since(0), None, "the oldest stamps are dropped");
        let seen = arena.clock();
        let _ = arena.get_mut(a);
        let _ = arena.remove(b);
        assert_eq!(arena.changed_since(seen), Some(&[a, b][..]));
        assert_eq!(
            arena.changed_since(arena.clock() + 1),
            None,
            "a clock from the future"
        );
        for slot in [a, b] {
            let named = arena.changed_since(seen).is_some_and(|c| c.contains(&slot));
            assert_eq!(named, arena.stamp(slot) > seen);
        }
    }

    #[test]
    fn tracked_slots_are_exactly_the_passing_values_after_every_kind_of_change() {
        let mut arena: Arena<u32> = Arena::default();
        let mut even = TrackedSlots::default();
        let passes = |v: &u32| v.is_multiple_of(2);
        let full = |arena: &Arena<u32>| -> Vec<u32> {
            arena.iter().filter(|(_, v)| passes(v)).map(|(i, _)| i).collect()
        };
        let synced = |t: &mut TrackedSlots, arena: &Arena<u32>| -> Vec<u32> {
            t.sync(arena, passes).iter().copied().collect()
        };
        let a = arena.insert(2);
        let b = arena.insert(3);
        assert_eq!(synced(&mut even, &arena), vec![a]);
        // A value that starts passing, one that stops, a removal, and a new value in the freed slot.
        *arena.get_mut(b).expect("live") = 4;
        assert_eq!(synced(&mut even, &arena), vec![a, b]);
        *arena.get_mut(a).expect("live") = 5;
        assert_eq!(synced(&mut even, &arena), vec![b]);
        let _ = arena.remove(b);
        assert_eq!(synced(&mut even, &arena), Vec::<u32>::new());
        let c = arena.insert(6);
        assert_eq!(c, b);
        assert_eq!(synced(&mut even, &arena), vec![c]);
        // More changes than the log keeps between two syncs: the full look finds the same.
        let at_sync = arena.clock();
        for i in 0..3 * MIN_LOG as u32 {
            let slot = arena.insert(i);
            if i.is_multiple_of(3) {
                let _ = arena.remove(slot);
            }
        }
        for i in 0..5 * MIN_LOG as u32 {
            *arena.get_mut(c).expect("live") = i;
        }
        assert_eq!(
            arena.changed_since(at_sync),
            None,
            "the log no longer reaches the last sync"
        );
        assert_eq!(synced(&mut even, &arena), full(&arena));
        for slot in 0..50 {
            if let Some(v) = arena.get_mut(slot) {
                *v += 1;
            }
        }
        assert_eq!(synced(&mut even, &arena), full(&arena));
    }
}
