//! A node's capacity and what holds it: used, releasing, reserved for nominated gangs, and the shared
//! GPU devices split into fractions.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::constraints::{NodeFacts, Taint};
use super::ids::TaskId;
use super::pod_rules::HostPort;
use super::resources::{GPU, Resources};

/// A GPU device split among fractional pods, named by its `runai-gpu-group` id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedGpu {
    /// The group id (label value shared by the sharing pods and the reservation pod).
    pub group: Arc<str>,
    /// Thousandths held by tasks that hold the node (binding, bound, running, releasing).
    pub used_milli: u32,
    /// Thousandths of `used_milli` held by releasing tasks.
    pub releasing_milli: u32,
    /// Thousandths reserved by pipelined tasks.
    pub nominated_milli: u32,
    /// Tasks holding the device (any status above).
    pub holders: u32,
    /// Of `holders`, those only reserving (pipelined).
    pub nominated_holders: u32,
    /// Of `holders`, those releasing.
    pub releasing_holders: u32,
    /// The reservation pod holding the physical device (UID), once it exists. While it does, the
    /// device is accounted through that pod's own `nvidia.com/gpu` request instead.
    pub reservation: Option<Arc<str>>,
    /// The device the reservation pod reported (`run.ai/reserve_for_gpu_index`).
    pub device: Option<Arc<str>>,
}

impl SharedGpu {
    /// Thousandths a new sharer can take now.
    #[must_use]
    pub fn free_now(&self) -> u32 {
        1000u32.saturating_sub(self.used_milli + self.nominated_milli)
    }

    /// Thousandths a new sharer can take once releasing sharers are gone.
    #[must_use]
    pub fn free_later(&self) -> u32 {
        1000u32.saturating_sub(self.used_milli - self.releasing_milli + self.nominated_milli)
    }

    /// Every sharer still on the device is leaving: the node counts it as released whole
    /// ([`Self::device_contribution`]), room a waiting gang may already hold.
    #[must_use]
    pub fn leaving(&self) -> bool {
        let active = self.holders - self.nominated_holders;
        active > 0
            && active == self.releasing_holders
            && (self.reservation.is_none() || self.nominated_holders == 0)
    }

    /// How the whole device counts on the node: (used, releasing, nominated) in milli-GPUs.
    #[must_use]
    pub fn device_contribution(&self) -> (i64, i64, i64) {
        let active = self.holders - self.nominated_holders;
        if self.reservation.is_some() {
            // The reservation pod's own request counts the device as used; once every sharer is
            // leaving, the device is on its way out too (the reservation pod goes with the last sharer).
            let leaving = active > 0 && active == self.releasing_holders && self.nominated_holders == 0;
            return (0, if leaving { 1000 } else { 0 }, 0);
        }
        if active > 0 {
            let releasing = if active == self.releasing_holders { 1000 } else { 0 };
            (1000, releasing, 0)
        } else if self.nominated_holders > 0 {
            (0, 0, 1000)
        } else {
            (0, 0, 0)
        }
    }
}

/// A node in the model.
#[derive(Clone, Debug)]
pub struct Node {
    /// Name.
    pub name: Arc<str>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Ready condition is True.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// Allocatable resources (`status.allocatable`; GPUs in milli).
    pub allocatable: Resources,
    /// Held by tasks on the node, this scheduler's and others' (releasing included).
    pub used: Resources,
    /// Of `used`, held by tasks that are going away.
    pub releasing: Resources,
    /// Reserved for pipelined tasks of nominated gangs.
    pub nominated: Resources,
    /// Memory per GPU in MiB (`nvidia.com/gpu.memory` label), for `gpu-memory` requests.
    pub gpu_memory_mib: Option<u32>,
    /// GPU devices split into fractions.
    pub shared_gpus: Vec<SharedGpu>,
    /// Tasks holding or reserving resources here.
    pub tasks: Vec<TaskId>,
    /// Host ports bound by the tasks here.
    pub host_ports: Vec<PortUse>,
}

/// A host port bound on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortUse {
    /// The port.
    pub port: HostPort,
    /// The task binding it.
    pub task: TaskId,
    /// The task is terminating (the port is free once it is gone).
    pub releasing: bool,
}

impl Node {
    /// A node with capacity and nothing on it.
    #[must_use]
    pub fn new(name: &str, allocatable: Resources) -> Self {
        Self {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            ready: true,
            unschedulable: false,
            allocatable,
            used: Resources::ZERO,
            releasing: Resources::ZERO,
            nominated: Resources::ZERO,
            gpu_memory_mib: None,
            shared_gpus: Vec::new(),
            tasks: Vec::new(),
            host_ports: Vec::new(),
        }
    }

    /// The facts the static predicate reads.
    #[must_use]
    pub fn facts(&self) -> NodeFacts<'_> {
        NodeFacts {
            name: &self.name,
            labels: &self.labels,
            taints: &self.taints,
            ready: self.ready,
            unschedulable: self.unschedulable,
        }
    }

    /// What a task of a gang holding `own_nominated` here can use now, and once releasing tasks are
    /// gone. Reservations of other gangs are set aside: first from what is being released, then from
    /// what is free.
    #[must_use]
    pub fn available(&self, own_nominated: &Resources) -> (Resources, Resources) {
        let mut now = Resources::ZERO;
        let mut later = Resources::ZERO;
        for i in 0..now.0.len() {
            let free_now = self.allocatable.0[i] - self.used.0[i];
            let others = self.nominated.0[i] - own_nominated.0[i];
            now.0[i] = free_now - (others - self.releasing.0[i]).max(0);
            later.0[i] = free_now + self.releasing.0[i] - others;
        }
        (now, later)
    }

    /// The GPUs (milli) of [`Node::available`]'s "later" for a gang with nothing reserved here.
    #[must_use]
    pub fn gpu_later(&self) -> i64 {
        self.allocatable.0[GPU]
            .saturating_sub(self.used.0[GPU])
            .saturating_add(self.releasing.0[GPU])
            .saturating_sub(self.nominated.0[GPU])
    }

    /// Whole GPU devices neither used nor reserved.
    #[must_use]
    pub fn idle_gpus(&self) -> i64 {
        (self.allocatable.0[GPU] - self.used.0[GPU] - self.nominated.0[GPU]).max(0) / 1000
    }

    /// Total GPU devices.
    #[must_use]
    pub fn gpu_devices(&self) -> i64 {
        self.allocatable.0[GPU] / 1000
    }

    /// Index of a shared device by group id.
    #[must_use]
    pub fn shared_gpu(&self, group: &str) -> Option<usize> {
        self.shared_gpus.iter().position(|g| &*g.group == group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_of_others_come_out_of_releasing_first() {
        let mut n = Node::new("n", Resources::new(0, 0, 8000));
        n.used = Resources::new(0, 0, 8000);
        n.releasing = Resources::new(0, 0, 4000);
        n.nominated = Resources::new(0, 0, 4000);
        // Another gang: nothing now, nothing later (the reservation takes the releasing 4).
        let (now, later) = n.available(&Resources::ZERO);
        assert_eq!((now.gpu(), later.gpu()), (0, 0));
        // The nominated gang itself: nothing now, 4 later.
        let (now, later) = n.available(&Resources::new(0, 0, 4000));
        assert_eq!((now.gpu(), later.gpu()), (0, 4000));
        // Victims gone: 4 free now, still reserved for the nominee.
        n.used = Resources::new(0, 0, 4000);
        n.releasing = Resources::ZERO;
        assert_eq!(n.available(&Resources::ZERO).0.gpu(), 0);
        assert_eq!(n.available(&Resources::new(0, 0, 4000)).0.gpu(), 4000);
    }

    #[test]
    fn shared_device_counts_once() {
        let mut g = SharedGpu {
            group: "g".into(),
            used_milli: 500,
            releasing_milli: 0,
            nominated_milli: 0,
            holders: 1,
            nominated_holders: 0,
            releasing_holders: 0,
            reservation: None,
            device: None,
        };
        assert_eq!(g.device_contribution(), (1000, 0, 0));
        assert_eq!(g.free_now(), 500);
        g.releasing_holders = 1;
        g.releasing_milli = 500;
        assert_eq!(g.device_contribution(), (1000, 1000, 0));
        assert_eq!(g.free_later(), 1000);
    }
}
