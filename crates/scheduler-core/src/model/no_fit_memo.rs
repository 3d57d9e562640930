//! Gangs that did not fit, remembered across cycles so that an unchanged cluster costs nothing to
//! schedule again.
//!
//! Why it lives in the model and why its reasons are opaque here: the model is the only state that
//! outlives a cycle (`cycle::run(&mut Cluster, ..)` is the whole decision), and the model's own events
//! are what invalidate a memo (a gang removed, leadership lost). But the reason a gang did not fit is
//! the scheduling framework's explanation, a type the model must not name: the model sits below the
//! framework and the actions. So the model owns the validity check (the same capacity epoch and the
//! same gang version mean nothing the attempt read has changed) and stores the reason type-erased; the
//! caller reads it back as the type it stored. A reason of any other type reads as "not remembered",
//! which only costs a new attempt.

use std::any::Any;
use std::sync::Arc;

use super::ids::{GroupId, IdMap};

/// Gangs that did not fit, by root PodGroup, each valid while its capacity epoch and version hold.
#[derive(Clone, Debug, Default)]
pub struct NoFitMemo {
    by_root: IdMap<GroupId, NoFit>,
}

/// One gang that did not fit.
#[derive(Clone, Debug)]
struct NoFit {
    /// Capacity epoch at the start of the cycle it failed in.
    epoch: u64,
    /// Sum of its PodGroups' versions then.
    version: u64,
    /// Why it failed, as the caller stored it (shared, so cloning the model does not copy reasons).
    why: Arc<dyn Any + Send + Sync>,
}

impl NoFitMemo {
    /// Why the gang rooted at `root` did not fit, if it failed at this same capacity `epoch` and
    /// gang `version` (so trying it again would fail the same way) and the reason was stored as an `R`.
    #[must_use]
    pub fn still_failing<R: Any>(&self, root: GroupId, epoch: u64, version: u64) -> Option<&R> {
        self.by_root
            .get(&root)
            .filter(|no_fit| no_fit.epoch == epoch && no_fit.version == version)
            .and_then(|no_fit| no_fit.why.downcast_ref::<R>())
    }

    /// The reason last remembered for the gang rooted at `root`, whatever its epoch and version: a new
    /// reason that says the same may share its parts.
    #[must_use]
    pub fn last<R: Any>(&self, root: GroupId) -> Option<&R> {
        self.by_root
            .get(&root)
            .and_then(|no_fit| no_fit.why.downcast_ref::<R>())
    }

    /// Remembers that the gang rooted at `root` did not fit at capacity `epoch` and gang `version`,
    /// and why; replaces what was remembered for it before (only its epoch and version when the reason
    /// is the same: a backlog's gangs fail the same way cycle after cycle).
    pub fn remember<R: Any + Send + Sync + PartialEq>(
        &mut self,
        root: GroupId,
        epoch: u64,
        version: u64,
        why: R,
    ) {
        if let Some(no_fit) = self.by_root.get_mut(&root)
            && no_fit.why.downcast_ref::<R>() == Some(&why)
        {
            no_fit.epoch = epoch;
            no_fit.version = version;
            return;
        }
        let why = Arc::new(why);
        self.by_root.insert(root, NoFit { epoch, version, why });
    }

    /// Forgets the gang rooted at `root` (it fit, or it is gone).
    pub fn forget(&mut self, root: GroupId) {
        self.by_root.remove(&root);
    }

    /// Forgets every gang.
    pub fn clear(&mut self) {
        self.by_root.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_returned_only_for_the_same_epoch_version_and_type() {
        let mut memo = NoFitMemo::default();
        let root = GroupId(3);
        memo.remember(root, 7, 2, String::from("no room"));
        assert_eq!(
            memo.still_failing::<String>(root, 7, 2).map(String::as_str),
            Some("no room")
        );
        assert!(memo.still_failing::<String>(root, 8, 2).is_none());
        assert!(memo.still_failing::<String>(root, 7, 3).is_none());
        assert!(memo.still_failing::<u32>(root, 7, 2).is_none());
        assert!(memo.still_failing::<String>(GroupId(4), 7, 2).is_none());
        // The same reason again moves the epoch and version; the reason stays.
        memo.remember(root, 8, 3, String::from("no room"));
        assert!(memo.still_failing::<String>(root, 7, 2).is_none());
        assert_eq!(
            memo.still_failing::<String>(root, 8, 3).map(String::as_str),
            Some("no room")
        );
        memo.remember(root, 9, 3, String::from("a queue rule"));
        assert_eq!(
            memo.last::<String>(root).map(String::as_str),
            Some("a queue rule")
        );
        assert!(memo.last::<u32>(root).is_none());
        memo.forget(root);
        assert!(memo.still_failing::<String>(root, 7, 2).is_none());
    }
}
