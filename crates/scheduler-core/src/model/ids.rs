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
#[derive(Clone, Debug)]
pub struct Arena<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Arena<T> {
    /// Inserts and returns the slot index.
    pub fn insert(&mut self, value: T) -> u32 {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(value);
            i
        } else {
            self.slots.push(Some(value));
            u32::try_from(self.slots.len() - 1).expect("invariant: fewer than 2^32 objects")
        }
    }

    /// Removes and returns the value.
    pub fn remove(&mut self, i: u32) -> Option<T> {
        let value = self.slots.get_mut(i as usize)?.take();
        if value.is_some() {
            self.free.push(i);
            self.len -= 1;
        }
        value
    }

    /// The value at a slot.
    #[must_use]
    pub fn get(&self, i: u32) -> Option<&T> {
        self.slots.get(i as usize)?.as_ref()
    }

    /// The value at a slot, mutably.
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
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
