//! PodGroups this process applied, for the time its PodGroup cache may not show them yet.
//!
//! The pods of one workload arrive together (a Job's 8 pods within milliseconds) and are reconciled at
//! once, before the watch brings back the PodGroup the first of them applied: each would apply it again.
//! Reconciles of one PodGroup take its slot in turn; the first applies and leaves what it applied (a
//! fingerprint of the manifest and the server's answer); the others find it and skip their apply. So a
//! group costs one apply however many pods it has. An entry stands in for the cache only while the cache
//! is behind it ([`Entry::covers`]): once the cache holds the applied version or a later one, the cache
//! decides again (a PodGroup someone changed since is applied again). A slot is dropped when the cache
//! shows the group up to date or the group is deleted, so the map holds only groups whose echo is still
//! on its way.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use api::PodGroup;

/// What was applied to one PodGroup.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// [`fingerprint`] of the manifest applied.
    pub(crate) fingerprint: u64,
    /// The server's answer to the apply.
    pub(crate) object: Arc<PodGroup>,
    /// When it was applied.
    pub(crate) at: Instant,
}

/// Longest a watch echo may lag before an entry is no longer trusted.
const ECHO_LAG: Duration = Duration::from_secs(30);

impl Entry {
    /// Whether this apply of manifest `fingerprint` still answers for the group, given what the cache
    /// holds: the same manifest, applied recently, and the cache has not yet caught up with it (no
    /// object, or an older resourceVersion; etcd's are increasing integers, and anything else counts as
    /// caught up).
    pub(crate) fn covers(&self, fingerprint: u64, cached: Option<&PodGroup>, now: Instant) -> bool {
        if self.fingerprint != fingerprint || now.duration_since(self.at) > ECHO_LAG {
            return false;
        }
        let Some(cached) = cached else {
            return true;
        };
        let version = |pg: &PodGroup| {
            pg.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        matches!((version(cached), version(&self.object)), (Some(c), Some(a)) if c < a)
    }
}

/// One PodGroup's slot: held by the reconcile deciding whether to apply it.
pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<Entry>>>;

/// The slots by (namespace, name).
#[derive(Debug, Default)]
pub(crate) struct Applied {
    slots: Mutex<HashMap<(String, String), Slot>>,
}

impl Applied {
    /// The PodGroup's slot (made on first use).
    pub(crate) fn slot(&self, namespace: &str, name: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(slots.entry((namespace.to_owned(), name.to_owned())).or_default())
    }

    /// Drops the PodGroup's slot: its cache entry is up to date, or it was deleted.
    pub(crate) fn forget(&self, namespace: &str, name: &str) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if !slots.is_empty() {
            slots.remove(&(namespace.to_owned(), name.to_owned()));
        }
    }

    /// Slots held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Names of the groups with a slot.
    #[cfg(test)]
    pub(crate) fn slots_for_test(&self) -> Vec<String> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .map(|(_, name)| name.clone())
            .collect()
    }
}

/// Fingerprint of a PodGroup manifest: equal manifests apply alike.
pub(crate) fn fingerprint(desired: &PodGroup) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(desired).unwrap_or_default().hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_slot_per_group_until_forgotten() {
        let applied = Applied::default();
        let a = applied.slot("ns", "pg");
        let b = applied.slot("ns", "pg");
        assert!(Arc::ptr_eq(&a, &b), "reconciles of one group share its slot");
        assert!(!Arc::ptr_eq(&a, &applied.slot("ns", "other")));
        *a.lock().await = Some(Entry {
            fingerprint: 1,
            object: Arc::new(PodGroup::new("pg", api::PodGroupSpec::default())),
            at: Instant::now(),
        });
        assert_eq!(b.lock().await.as_ref().map(|e| e.fingerprint), Some(1));
        applied.forget("ns", "pg");
        applied.forget("ns", "other");
        assert_eq!(applied.len(), 0);
        assert!(
            applied.slot("ns", "pg").lock().await.is_none(),
            "a new slot is empty"
        );
    }

    fn at_version(v: &str) -> PodGroup {
        let mut pg = PodGroup::new("pg", api::PodGroupSpec::default());
        pg.metadata.resource_version = Some(v.to_owned());
        pg
    }

    #[test]
    fn an_entry_answers_only_while_the_cache_is_behind_it() {
        let now = Instant::now();
        let entry = Entry {
            fingerprint: 7,
            object: Arc::new(at_version("100")),
            at: now,
        };
        assert!(entry.covers(7, None, now), "not cached yet");
        assert!(
            entry.covers(7, Some(&at_version("99")), now),
            "cache older than the apply"
        );
        assert!(!entry.covers(7, Some(&at_version("100")), now), "cache caught up");
        assert!(
            !entry.covers(7, Some(&at_version("101")), now),
            "changed since: decide again"
        );
        assert!(!entry.covers(8, None, now), "another manifest");
        assert!(!entry.covers(7, None, now + ECHO_LAG * 2), "too old to trust");
        assert!(
            !entry.covers(7, Some(&at_version("x")), now),
            "opaque versions count as caught up"
        );
    }

    #[test]
    fn fingerprints_follow_the_manifest() {
        let spec = |min| api::PodGroupSpec {
            min_member: Some(min),
            ..api::PodGroupSpec::default()
        };
        let one = PodGroup::new("pg", spec(1));
        assert_eq!(fingerprint(&one), fingerprint(&one.clone()));
        assert_ne!(fingerprint(&one), fingerprint(&PodGroup::new("pg", spec(8))));
    }
}
