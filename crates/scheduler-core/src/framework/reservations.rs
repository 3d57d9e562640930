//! GPU reservation pods: one per shared device, holding the physical GPU for the pods that share it
//! (the device plugin only hands out whole GPUs). Decided from the model each cycle: a device with
//! sharers and no reservation pod gets one; a reservation pod whose device has no sharer left is
//! deleted after a short grace period (so a pod bound a moment ago is not left without its device).

use std::sync::Arc;

use crate::framework::Session;
use crate::framework::decisions::{Decisions, ReservationChange};
use crate::model::Millis;

/// How long a reservation pod may stand without sharers before it is deleted.
const IDLE_GRACE_MS: Millis = 30_000;
/// How long a requested reservation pod may take to show up before it is requested again.
const PENDING_RETRY_MS: Millis = 60_000;

/// Adds the reservation pods to create and delete.
pub fn reconcile(ssn: &mut Session<'_>, decisions: &mut Decisions) {
    let sharing = &ssn.config.plugins.gpusharing;
    if !sharing.enabled || !sharing.reservation_pods {
        return;
    }
    let now = ssn.now;
    let cluster = &mut *ssn.cluster;
    let mut create = Vec::new();
    let mut delete = Vec::new();
    let mut live_groups: Vec<Arc<str>> = Vec::new();
    // When a retry or an idle reservation's release falls due (recorded on the session at the end).
    let mut wake: Vec<Millis> = Vec::new();
    for (_, node) in cluster.nodes.iter() {
        for d in &node.shared_gpus {
            live_groups.push(d.group.clone());
            let active = d.holders - d.nominated_holders;
            match (&d.reservation, active > 0) {
                (None, true) => {
                    let pending = cluster
                        .reservations_pending
                        .get(&d.group)
                        .filter(|t| now - **t < PENDING_RETRY_MS);
                    if let Some(asked) = pending {
                        wake.push(asked + PENDING_RETRY_MS);
                    } else {
                        create.push((node.name.clone(), d.group.clone()));
                    }
                }
                (Some(uid), false) => delete.push(uid.clone()),
                _ => {}
            }
        }
    }
    for (node, group) in create {
        cluster.reservations_pending.insert(group.clone(), now);
        decisions
            .reservations
            .push(ReservationChange::Create { node, group });
    }
    for uid in delete {
        let Some(t) = cluster.task_id(&uid) else { continue };
        let task = cluster.task(t);
        if now - task.created < IDLE_GRACE_MS {
            wake.push(task.created + IDLE_GRACE_MS);
        }
        if now - task.created >= IDLE_GRACE_MS && task.assumed == crate::model::Assumed::None {
            decisions.reservations.push(ReservationChange::Delete {
                uid: task.uid.clone(),
                name: task.name.clone(),
            });
        }
    }
    // Forget requests whose pod arrived or whose device is gone.
    cluster
        .reservations_pending
        .retain(|group, _| live_groups.contains(group));
    let reserved: Vec<Arc<str>> = cluster
        .nodes
        .iter()
        .flat_map(|(_, n)| {
            n.shared_gpus
                .iter()
                .filter(|d| d.reservation.is_some())
                .map(|d| d.group.clone())
        })
        .collect();
    cluster
        .reservations_pending
        .retain(|group, _| !reserved.contains(group));
    for at in wake {
        ssn.wake_at(at);
    }
}
