//! Shared-GPU accounting: a fractional pod takes thousandths of a device named by its
//! `runai-gpu-group`, and the node counts each such device once, as 1000 milli-GPUs, whoever holds it
//! (the sharers, or the reservation pod once it exists).

use std::sync::Arc;

use super::Cluster;
use crate::model::node::{Node, SharedGpu};
use crate::model::resources::GPU;
use crate::model::task::{GpuRequest, Task, TaskStatus};

impl Cluster {
    /// The thousandths of one device a shared request takes on a node.
    #[must_use]
    pub fn share_milli(gpu: GpuRequest, node: &Node) -> u32 {
        match gpu {
            GpuRequest::Fraction { milli, .. } => milli,
            GpuRequest::Memory { mib, .. } => match node.gpu_memory_mib {
                Some(per_device) if per_device > 0 => {
                    u32::try_from((u64::from(mib) * 1000).div_ceil(u64::from(per_device)).min(1000))
                        .expect("invariant: at most 1000")
                }
                _ => 1000,
            },
            GpuRequest::None | GpuRequest::Whole(_) => 0,
        }
    }

    /// A reservation pod takes over (or gives back) the accounting of its shared device.
    pub(super) fn contribute_reservation(
        node: &mut Node,
        group: &Arc<str>,
        uid: Arc<str>,
        device: Option<Arc<str>>,
        present: bool,
    ) {
        change_device(node, group, present, |d| {
            if present {
                d.reservation = Some(uid);
                d.device = device;
            } else if d.reservation.as_ref() == Some(&uid) {
                d.reservation = None;
                d.device = None;
            }
        });
    }

    /// The shared devices a task holds. A fractional pod placed without a group label (placed by
    /// someone else, or its labels lost) counts on a device of its own rather than on none.
    pub(super) fn device_groups(task: &Task) -> Vec<Arc<str>> {
        if task.gpu.is_shared() && task.gpu_groups.is_empty() && task.status != TaskStatus::Pipelined {
            vec![format!("unlabelled-{}", task.uid).into()]
        } else {
            task.gpu_groups.clone()
        }
    }

    /// Adds (`sign = 1`) or removes (`-1`) one sharer holding `milli` thousandths of a shared device.
    pub(super) fn contribute_shared(
        node: &mut Node,
        group: &Arc<str>,
        milli: u32,
        status: TaskStatus,
        sign: i64,
    ) {
        change_device(node, group, sign > 0, |device| {
            let apply = |v: &mut u32, d: u32| {
                *v = if sign > 0 { *v + d } else { v.saturating_sub(d) };
            };
            apply(&mut device.holders, 1);
            match status {
                TaskStatus::Pipelined => {
                    apply(&mut device.nominated_milli, milli);
                    apply(&mut device.nominated_holders, 1);
                }
                TaskStatus::Releasing => {
                    apply(&mut device.used_milli, milli);
                    apply(&mut device.releasing_milli, milli);
                    apply(&mut device.releasing_holders, 1);
                }
                _ => apply(&mut device.used_milli, milli),
            }
        });
    }
}

/// The index of the shared device `group` on `node`. A missing one is created empty when a holder
/// arrives (`create`); a holder leaving a device that is already gone has nothing to undo (`None`).
fn find_or_create_device(node: &mut Node, group: &Arc<str>, create: bool) -> Option<usize> {
    if let Some(index) = node.shared_gpu(group) {
        return Some(index);
    }
    if !create {
        return None;
    }
    node.shared_gpus.push(SharedGpu {
        group: group.clone(),
        used_milli: 0,
        releasing_milli: 0,
        nominated_milli: 0,
        holders: 0,
        nominated_holders: 0,
        releasing_holders: 0,
        reservation: None,
        device: None,
    });
    Some(node.shared_gpus.len() - 1)
}

/// Applies `change` to the shared device `group` (see [`find_or_create_device`] for `create`), moves
/// the node's GPU totals by the difference in how the whole device counts, and drops the device once
/// neither a sharer nor a reservation pod holds it.
fn change_device(node: &mut Node, group: &Arc<str>, create: bool, change: impl FnOnce(&mut SharedGpu)) {
    let Some(index) = find_or_create_device(node, group, create) else {
        return;
    };
    let device = &mut node.shared_gpus[index];
    let before = device.device_contribution();
    change(device);
    let after = device.device_contribution();
    let remove = device.holders == 0 && device.reservation.is_none();
    // Saturating like every other sum of requests (`Resources::add`): a pod may ask for more than can
    // be counted (it is refused with a problem, but one bound by someone else still sits on the node).
    node.used.0[GPU] = node.used.0[GPU].saturating_add(after.0 - before.0);
    node.releasing.0[GPU] = node.releasing.0[GPU].saturating_add(after.1 - before.1);
    node.nominated.0[GPU] = node.nominated.0[GPU].saturating_add(after.2 - before.2);
    if remove {
        node.shared_gpus.swap_remove(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::Resources;

    #[test]
    fn sharers_and_the_reservation_pod_share_one_device_entry() {
        let mut node = Node::new("n", Resources::new(0, 0, 1000));
        let group: Arc<str> = "g".into();
        Cluster::contribute_shared(&mut node, &group, 500, TaskStatus::Running, 1);
        assert_eq!(node.used.gpu(), 1000);
        Cluster::contribute_reservation(&mut node, &group, "r".into(), Some("0".into()), true);
        assert_eq!(node.shared_gpus.len(), 1);
        // Held by the reservation pod, the device counts through that pod's own request instead.
        assert_eq!(node.used.gpu(), 0);
        Cluster::contribute_reservation(&mut node, &group, "r".into(), None, false);
        assert_eq!(node.used.gpu(), 1000);
        Cluster::contribute_shared(&mut node, &group, 500, TaskStatus::Running, -1);
        assert!(node.shared_gpus.is_empty());
        assert_eq!(node.used.gpu(), 0);
        // With the reservation pod holding the device, the device is on its way out once every sharer
        // is: it counts as releasing (the reservation pod goes with the last sharer).
        Cluster::contribute_shared(&mut node, &group, 500, TaskStatus::Running, 1);
        Cluster::contribute_reservation(&mut node, &group, "r".into(), Some("0".into()), true);
        assert_eq!((node.used.gpu(), node.releasing.gpu()), (0, 0));
        Cluster::contribute_shared(&mut node, &group, 500, TaskStatus::Running, -1);
        Cluster::contribute_shared(&mut node, &group, 500, TaskStatus::Releasing, 1);
        assert_eq!(node.releasing.gpu(), 1000);
        Cluster::contribute_shared(&mut node, &group, 500, TaskStatus::Releasing, -1);
        assert_eq!(
            node.releasing.gpu(),
            0,
            "no sharer left: the reservation pod alone holds it"
        );
        Cluster::contribute_reservation(&mut node, &group, "r".into(), None, false);
        assert!(node.shared_gpus.is_empty());
        // A holder leaving a device that is already gone changes nothing.
        Cluster::contribute_shared(&mut node, &group, 500, TaskStatus::Running, -1);
        assert!(node.shared_gpus.is_empty());
        assert_eq!(node.used.gpu(), 0);
    }
}
