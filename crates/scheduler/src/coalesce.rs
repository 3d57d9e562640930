//! One writer per object, latest value wins.
//!
//! Status writes are decided each cycle and sent without waiting. Two writes of one object in flight at
//! once may land in either order, leaving an older status on the object while the model believes the newer
//! one was written. A [`Coalescer`] keeps at most one write per key in flight; a value offered meanwhile
//! replaces any queued one and is written when the current write finishes.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

/// Writes in flight and the value queued behind each.
#[derive(Debug)]
pub struct Coalescer<K, V> {
    /// Keys with a write in flight, and the latest value offered since it started.
    in_flight: Mutex<HashMap<K, Option<V>>>,
}

impl<K, V> Default for Coalescer<K, V> {
    fn default() -> Self {
        Self {
            in_flight: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V> Coalescer<K, V> {
    /// Offers a value. `Some` means no write of this key is in flight: the caller now owns the key's writer
    /// and must write the value, then call [`Coalescer::next`] until it returns `None`. `None` means the
    /// value was queued behind the write in flight (replacing any value queued before it).
    pub fn offer(&self, key: K, value: V) -> Option<V> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        match in_flight.get_mut(&key) {
            Some(queued) => {
                *queued = Some(value);
                None
            }
            None => {
                in_flight.insert(key, None);
                Some(value)
            }
        }
    }

    /// After a write: the value queued meanwhile, to write next, or `None`, releasing the key.
    pub fn next(&self, key: &K) -> Option<V> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        let queued = in_flight.get_mut(key).and_then(Option::take);
        if queued.is_none() {
            in_flight.remove(key);
        }
        queued
    }

    /// Before a write that waited: the value queued meanwhile, which supersedes the one about to be
    /// written, keeping the key's writer (unlike [`Coalescer::next`]).
    pub fn take_queued(&self, key: &K) -> Option<V> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        in_flight.get_mut(key).and_then(Option::take)
    }

    /// Keys with a write in flight.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::Coalescer;

    #[test]
    fn the_first_offer_writes_later_ones_queue_and_only_the_latest_is_written_next() {
        let c = Coalescer::default();
        assert_eq!(c.offer("pod-a", 1), Some(1));
        assert_eq!(c.offer("pod-a", 2), None);
        assert_eq!(c.offer("pod-a", 3), None, "replaces 2, which is never written");
        assert_eq!(c.offer("pod-b", 10), Some(10), "other keys are independent");
        assert_eq!(
            c.take_queued(&"pod-a"),
            Some(3),
            "a writer that waited writes the latest"
        );
        assert_eq!(c.take_queued(&"pod-a"), None);
        assert_eq!(c.offer("pod-a", 3), None, "the key is still being written");
        assert_eq!(c.next(&"pod-a"), Some(3));
        assert_eq!(c.next(&"pod-a"), None, "nothing queued: the key is released");
        assert_eq!(c.offer("pod-a", 4), Some(4), "a released key is written at once");
        assert_eq!(c.next(&"pod-a"), None);
        assert_eq!(c.next(&"pod-b"), None);
        assert_eq!(c.in_flight(), 0);
    }
}
