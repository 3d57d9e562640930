//! Storage objects in the model: claims, volumes, classes and attach limits follow their watch events,
//! and every change re-derives what it can change: the wait reason of the pods naming an affected
//! claim, and the volume choices of the placed pods using it (their use is taken out before the change
//! and put back after, so the book's counts and choices stay exact).

use std::sync::Arc;

use super::Cluster;
use crate::model::ids::TaskId;
use crate::model::volumes::{ClaimKey, ClaimUpdate, StorageClassUpdate, VolumeUpdate};

impl Cluster {
    /// Adds or updates a PersistentVolumeClaim.
    pub fn apply_claim(&mut self, claim: ClaimUpdate) {
        let key = claim.key.clone();
        self.change_claims(&[key], |book| book.set_claim(claim));
    }

    /// Removes a PersistentVolumeClaim.
    pub fn remove_claim(&mut self, key: &ClaimKey) {
        let key = key.clone();
        self.change_claims(std::slice::from_ref(&key), |book| book.remove_claim(&key));
    }

    /// Adds or updates a PersistentVolume.
    pub fn apply_volume(&mut self, volume: VolumeUpdate) {
        let mut claims = self.volumes.claims_touching_volume(&volume.name);
        if let Some(r) = &volume.claim_ref {
            claims.push(r.key.clone());
        }
        // A volume that became available may be the better choice of a claim placed meanwhile, but a
        // choice stands once made (the binder may already have sent it): only the claims it names are
        // re-derived.
        self.change_claims(&claims, |book| book.set_volume(volume));
    }

    /// Removes a PersistentVolume.
    pub fn remove_volume(&mut self, name: &str) {
        let claims = self.volumes.claims_touching_volume(name);
        self.change_claims(&claims, |book| book.remove_volume(name));
    }

    /// Adds or updates a StorageClass.
    pub fn apply_storage_class(&mut self, class: StorageClassUpdate) {
        let all = self.volumes.all_claims_in_use();
        self.change_claims(&all, |book| book.set_class(class));
    }

    /// Removes a StorageClass.
    pub fn remove_storage_class(&mut self, name: &str) {
        let all = self.volumes.all_claims_in_use();
        self.change_claims(&all, |book| book.remove_class(name));
    }

    /// Sets a node's CSI attach limits (from its CSINode; empty when it has none or is gone).
    pub fn apply_attach_limits(&mut self, node: Arc<str>, limits: Vec<(Arc<str>, u32)>) {
        self.volumes.set_attach_limits(node, limits);
        self.epochs.capacity_changed();
    }

    /// Applies `change` to the book with the placed users of `claims` taken out around it, then
    /// re-derives the wait reasons of every pod naming them.
    fn change_claims(
        &mut self,
        claims: &[ClaimKey],
        change: impl FnOnce(&mut crate::model::volumes::VolumeBook),
    ) {
        let mut users: Vec<TaskId> = claims
            .iter()
            .flat_map(|k| self.volumes.users_of(k).iter().copied())
            .collect();
        users.sort_unstable();
        users.dedup();
        let placed: Vec<TaskId> = users
            .iter()
            .copied()
            .filter(|t| self.task(*t).node.is_some())
            .collect();
        for t in &placed {
            self.contribute(*t, -1);
        }
        change(&mut self.volumes);
        for t in &placed {
            self.contribute(*t, 1);
        }
        for t in users {
            self.refresh_problem(t);
        }
        // A claim bound, a volume freed or a class added may let a waiting gang fit.
        self.epochs.capacity_changed();
    }

    /// Re-derives a task's effective problem: its own definition's, else its claims' wait reason.
    pub(super) fn refresh_problem(&mut self, id: TaskId) {
        let task = self.task(id);
        let problem = task.spec_problem.clone().or_else(|| {
            if task.claims.is_empty() {
                None
            } else {
                self.volumes
                    .wait_reason(&task.namespace, &task.uid, &task.claims)
                    .map(Arc::from)
            }
        });
        if problem == task.problem {
            return;
        }
        let group = task.group;
        self.tasks.get_mut(id.0).expect("invariant: live task").problem = problem;
        self.epochs.changed();
        if let Some(g) = group {
            self.group_mut(g).version += 1;
        }
    }
}
