//! Storage as the scheduler sees it: PersistentVolumeClaims, PersistentVolumes, StorageClasses and
//! per-node attach limits, and the answers kube-scheduler's volume plugins give about them
//! (VolumeBinding, VolumeZone, VolumeRestrictions' ReadWriteOncePod rule, NodeVolumeLimits for CSI).
//!
//! A pod names claims; whether it can run anywhere at all (the claim exists, is not being deleted, is
//! bound or may be bound later) is [`VolumeBook::wait_reason`], a property of the pod kept on the task
//! as `volume_wait`. Whether one node can take it is [`VolumeBook::check`]. A claim still unbound
//! whose class waits for its first consumer takes a volume (or a node to provision on) when a pod using
//! it is placed: [`VolumeBook::contribute`] records the choice, so no two claims are handed one volume,
//! and the session hands the choices to the binder with the pod's bind.
//!
//! Invariants (checked by `Cluster::check_invariants`): `placed_users` and `on_node` count exactly the
//! placed tasks (holding a node or reserved on one) using each claim; each chosen volume is taken by
//! exactly one claim, and a claim has a choice only while a placed task uses it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use super::constraints::Requirement;
use super::ids::{NodeId, TaskId};
use super::pod_rules::{LabelSelector, Labels};

/// A claim's identity: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Access modes of a claim or volume, as a set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AccessModes(u8);

impl AccessModes {
    /// `ReadWriteOnce`.
    pub const READ_WRITE_ONCE: Self = Self(1);
    /// `ReadOnlyMany`.
    pub const READ_ONLY_MANY: Self = Self(2);
    /// `ReadWriteMany`.
    pub const READ_WRITE_MANY: Self = Self(4);
    /// `ReadWriteOncePod`.
    pub const READ_WRITE_ONCE_POD: Self = Self(8);

    /// The set of the modes named (unknown names are ignored: the API server validates them).
    #[must_use]
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut set = Self::default();
        for name in names {
            set.0 |= match name {
                "ReadWriteOnce" => Self::READ_WRITE_ONCE.0,
                "ReadOnlyMany" => Self::READ_ONLY_MANY.0,
                "ReadWriteMany" => Self::READ_WRITE_MANY.0,
                "ReadWriteOncePod" => Self::READ_WRITE_ONCE_POD.0,
                _ => 0,
            };
        }
        set
    }

    /// Every mode of `other` is in `self`.
    #[must_use]
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets.
    #[must_use]
    pub fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// `volumeMode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum VolumeMode {
    /// A filesystem (the default).
    #[default]
    Filesystem,
    /// A raw block device.
    Block,
}

/// A claim a pod uses, from its `spec.volumes`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodClaim {
    /// Claim name (for a generic ephemeral volume, `<pod>-<volume>`).
    pub name: Arc<str>,
    /// A generic ephemeral volume: the claim is made for the pod by the ephemeral volume controller.
    pub ephemeral: bool,
}

/// A PersistentVolumeClaim as converted from the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimUpdate {
    /// Namespace and name.
    pub key: ClaimKey,
    /// UID.
    pub uid: Arc<str>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.volumeName`: the volume it is bound (or being bound) to.
    pub volume_name: Option<Arc<str>>,
    /// `spec.storageClassName` (`None` when unset; `Some("")` asks for no class).
    pub class: Option<Arc<str>>,
    /// `spec.resources.requests.storage`, bytes.
    pub request_bytes: u64,
    /// `spec.accessModes`.
    pub access_modes: AccessModes,
    /// `spec.volumeMode`.
    pub volume_mode: VolumeMode,
    /// `spec.selector` (a volume must carry matching labels).
    pub selector: Option<LabelSelector>,
    /// `volume.kubernetes.io/selected-node`: a node was already chosen for provisioning.
    pub selected_node: Option<Arc<str>>,
    /// UID of its controlling owner (a generic ephemeral volume's claim is owned by its pod).
    pub owner_uid: Option<Arc<str>>,
}

/// Where a PersistentVolume stands (`status.phase`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum VolumePhase {
    /// Not yet available.
    Pending,
    /// Free for a claim.
    #[default]
    Available,
    /// Bound to a claim.
    Bound,
    /// Its claim was deleted.
    Released,
    /// Reclamation failed.
    Failed,
}

/// The claim a volume is reserved for or bound to (`spec.claimRef`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    /// The claim.
    pub key: ClaimKey,
    /// The claim's UID, when the reference carries one.
    pub uid: Option<Arc<str>>,
}

/// A PersistentVolume as converted from the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeUpdate {
    /// Name.
    pub name: Arc<str>,
    /// `spec.claimRef`.
    pub claim_ref: Option<ClaimRef>,
    /// `status.phase`.
    pub phase: VolumePhase,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.storageClassName` (empty for none).
    pub class: Arc<str>,
    /// `spec.capacity.storage`, bytes.
    pub capacity_bytes: u64,
    /// `spec.accessModes`.
    pub access_modes: AccessModes,
    /// `spec.volumeMode`.
    pub volume_mode: VolumeMode,
    /// Labels (claim selectors and the zone labels VolumeZone reads).
    pub labels: Labels,
    /// `spec.nodeAffinity.required`: OR of terms, each an AND of requirements; `None` when unset.
    pub node_affinity: Option<Vec<Vec<Requirement>>>,
    /// CSI driver and volume handle, for attach limits.
    pub csi: Option<(Arc<str>, Arc<str>)>,
}

/// A StorageClass as converted from the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageClassUpdate {
    /// Name.
    pub name: Arc<str>,
    /// `provisioner`.
    pub provisioner: Arc<str>,
    /// `volumeBindingMode: WaitForFirstConsumer`.
    pub wait_for_first_consumer: bool,
    /// `allowedTopologies`: OR of terms, each an AND of (key, allowed values); empty allows every node.
    pub allowed_topologies: Vec<Vec<(String, Vec<String>)>>,
}

/// The provisioner of classes whose volumes are made by hand (local volumes): nothing is provisioned.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The zone and region labels VolumeZone compares between a volume and a node.
const ZONE_LABELS: [&str; 4] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// What the binder is to do for one claim before the pod is bound.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClaimChoice {
    /// Reserve this existing volume for the claim (`spec.claimRef`); the PV controller binds them.
    Volume(Arc<str>),
    /// Provision a volume on this node (the claim's `volume.kubernetes.io/selected-node`).
    Provision(Arc<str>),
}

/// One claim to bind before a pod is bound.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClaimBinding {
    /// The claim.
    pub claim: ClaimKey,
    /// Its UID (the volume's `claimRef` names it).
    pub claim_uid: Arc<str>,
    /// What to do.
    pub choice: ClaimChoice,
}

/// Why one node cannot take a pod because of its volumes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VolumeMiss {
    /// A bound volume's node affinity excludes the node.
    NodeAffinity,
    /// A bound volume's zone or region labels exclude the node.
    Zone,
    /// An unbound claim finds no volume here and cannot be provisioned here.
    NoVolumeToBind,
    /// Attaching the pod's volumes would exceed the node's limit for a CSI driver.
    MaxVolumeCount,
    /// A `ReadWriteOncePod` claim is used by another pod.
    ReadWriteOncePodInUse,
    /// The pod cannot run anywhere yet (its claims; see the pod's wait reason).
    Waiting,
}

impl fmt::Display for VolumeMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NodeAffinity => "volume node affinity conflict",
            Self::Zone => "no available volume zone",
            Self::NoVolumeToBind => "no available persistent volume to bind",
            Self::MaxVolumeCount => "max volume count exceeded",
            Self::ReadWriteOncePodInUse => "ReadWriteOncePod claim in use by another pod",
            Self::Waiting => "claims not usable yet",
        })
    }
}

#[derive(Clone, Debug)]
struct Claim {
    spec: ClaimUpdate,
}

#[derive(Clone, Debug)]
struct Volume {
    spec: VolumeUpdate,
}

/// A claim's choice and how many placed tasks rely on it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Chosen {
    choice: ClaimChoice,
    users: u32,
}

/// The node a check is about: its name and labels.
#[derive(Clone, Copy, Debug)]
pub struct NodeRef<'a> {
    /// Model id.
    pub id: NodeId,
    /// Name.
    pub name: &'a str,
    /// Labels.
    pub labels: &'a Labels,
}

/// Claims, volumes, classes and attach limits, and the placed pods' use of them.
#[derive(Clone, Debug, Default)]
pub struct VolumeBook {
    claims: HashMap<ClaimKey, Claim>,
    /// By name: iteration in name order keeps choices deterministic.
    volumes: BTreeMap<Arc<str>, Volume>,
    classes: HashMap<Arc<str>, StorageClassUpdate>,
    /// Per node name: CSI driver -> attachable volumes.
    attach_limits: HashMap<Arc<str>, HashMap<Arc<str>, u32>>,
    /// Every task naming each claim, placed or not (whose wait reason a claim change may change).
    users: HashMap<ClaimKey, Vec<TaskId>>,
    /// Placed tasks using each claim.
    placed_users: HashMap<ClaimKey, u32>,
    /// Per node: claims its placed tasks use, with how many tasks.
    on_node: HashMap<NodeId, HashMap<ClaimKey, u32>>,
    /// Choices for unbound claims of placed tasks.
    chosen: HashMap<ClaimKey, Chosen>,
    /// Volumes chosen, and by which claim.
    taken: HashMap<Arc<str>, ClaimKey>,
}

impl VolumeBook {
    // Objects
    // -----------------------------------------------------------------------------------------

    /// Adds or replaces a claim.
    pub fn set_claim(&mut self, spec: ClaimUpdate) {
        self.claims.insert(spec.key.clone(), Claim { spec });
    }

    /// Removes a claim.
    pub fn remove_claim(&mut self, key: &ClaimKey) {
        self.claims.remove(key);
    }

    /// Adds or replaces a volume.
    pub fn set_volume(&mut self, spec: VolumeUpdate) {
        self.volumes.insert(spec.name.clone(), Volume { spec });
    }

    /// Removes a volume.
    pub fn remove_volume(&mut self, name: &str) {
        self.volumes.remove(name);
    }

    /// Adds or replaces a storage class.
    pub fn set_class(&mut self, spec: StorageClassUpdate) {
        self.classes.insert(spec.name.clone(), spec);
    }

    /// Removes a storage class.
    pub fn remove_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// Sets a node's attach limits (from its CSINode; an empty list removes them).
    pub fn set_attach_limits(&mut self, node: Arc<str>, limits: Vec<(Arc<str>, u32)>) {
        if limits.is_empty() {
            self.attach_limits.remove(&node);
        } else {
            self.attach_limits.insert(node, limits.into_iter().collect());
        }
    }

    /// A claim as last applied.
    #[must_use]
    pub fn claim(&self, key: &ClaimKey) -> Option<&ClaimUpdate> {
        self.claims.get(key).map(|c| &c.spec)
    }

    /// A volume as last applied.
    #[must_use]
    pub fn volume(&self, name: &str) -> Option<&VolumeUpdate> {
        self.volumes.get(name).map(|v| &v.spec)
    }

    /// Every claim the book holds (a relist removes those it no longer sees).
    #[must_use]
    pub fn claim_keys(&self) -> Vec<ClaimKey> {
        self.claims.keys().cloned().collect()
    }

    /// Every volume's name.
    #[must_use]
    pub fn volume_names(&self) -> Vec<Arc<str>> {
        self.volumes.keys().cloned().collect()
    }

    /// Every storage class's name.
    #[must_use]
    pub fn class_names(&self) -> Vec<Arc<str>> {
        self.classes.keys().cloned().collect()
    }

    /// Every node with attach limits.
    #[must_use]
    pub fn nodes_with_attach_limits(&self) -> Vec<Arc<str>> {
        self.attach_limits.keys().cloned().collect()
    }

    /// The claim a volume is bound or reserved to, if the model knows one.
    #[must_use]
    pub fn claim_of_volume(&self, name: &str) -> Option<ClaimKey> {
        let volume = self.volumes.get(name)?;
        if let Some(r) = &volume.spec.claim_ref {
            return Some(r.key.clone());
        }
        self.taken.get(name).cloned()
    }

    /// Claims whose answers a volume change may change: the claim it names, the claim that chose it,
    /// and claims bound to it by name.
    #[must_use]
    pub fn claims_touching_volume(&self, name: &str) -> Vec<ClaimKey> {
        let mut out: Vec<ClaimKey> = Vec::new();
        if let Some(r) = self.volumes.get(name).and_then(|v| v.spec.claim_ref.as_ref()) {
            out.push(r.key.clone());
        }
        if let Some(k) = self.taken.get(name) {
            out.push(k.clone());
        }
        out.extend(
            self.claims
                .iter()
                .filter(|(_, c)| c.spec.volume_name.as_deref() == Some(name))
                .map(|(k, _)| k.clone()),
        );
        out.sort();
        out.dedup();
        out
    }

    /// Tasks naming a claim.
    #[must_use]
    pub fn users_of(&self, claim: &ClaimKey) -> &[TaskId] {
        self.users.get(claim).map_or(&[], Vec::as_slice)
    }

    /// Every claim some task names.
    #[must_use]
    pub fn all_claims_in_use(&self) -> Vec<ClaimKey> {
        self.users.keys().cloned().collect()
    }

    /// Every task naming any claim.
    #[must_use]
    pub fn all_users(&self) -> Vec<TaskId> {
        let mut all: Vec<TaskId> = self.users.values().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Records that `task` names these claims (`sign` 1) or no longer does (-1).
    pub fn link(&mut self, task: TaskId, namespace: &Arc<str>, claims: &[PodClaim], sign: i32) {
        for c in claims {
            let key = ClaimKey {
                namespace: namespace.clone(),
                name: c.name.clone(),
            };
            if sign > 0 {
                let list = self.users.entry(key).or_default();
                if !list.contains(&task) {
                    list.push(task);
                }
            } else if let Some(list) = self.users.get_mut(&key) {
                list.retain(|t| *t != task);
                if list.is_empty() {
                    self.users.remove(&key);
                }
            }
        }
    }

    // Whether a pod can run anywhere
    // -----------------------------------------------------------------------------------------

    /// Why a pod with these claims cannot be placed on any node yet, in kube-scheduler's words, or
    /// `None` when its claims leave the choice to the nodes.
    #[must_use]
    pub fn wait_reason(&self, namespace: &Arc<str>, pod_uid: &str, claims: &[PodClaim]) -> Option<String> {
        for c in claims {
            let key = ClaimKey {
                namespace: namespace.clone(),
                name: c.name.clone(),
            };
            let Some(claim) = self.claims.get(&key) else {
                return Some(if c.ephemeral {
                    format!(
                        "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{}\"",
                        c.name
                    )
                } else {
                    format!("persistentvolumeclaim \"{}\" not found", c.name)
                });
            };
            let spec = &claim.spec;
            if c.ephemeral && spec.owner_uid.as_deref() != Some(pod_uid) {
                return Some(format!(
                    "PVC {key} was not created for the pod (pod is not owner)"
                ));
            }
            if spec.deleting {
                return Some(format!("persistentvolumeclaim \"{}\" is being deleted", c.name));
            }
            if let Some(volume) = &spec.volume_name {
                if !self.volumes.contains_key(volume) {
                    return Some(format!(
                        "persistentvolumeclaim \"{}\" is bound to persistentvolume \"{volume}\", which does not exist",
                        c.name
                    ));
                }
                continue;
            }
            match self.class_of(spec) {
                Err(name) => {
                    return Some(format!("storageclass.storage.k8s.io \"{name}\" not found"));
                }
                Ok(None) => return Some("pod has unbound immediate PersistentVolumeClaims".to_owned()),
                Ok(Some(class)) if !class.wait_for_first_consumer => {
                    return Some("pod has unbound immediate PersistentVolumeClaims".to_owned());
                }
                Ok(Some(_)) => {}
            }
        }
        None
    }

    /// The class an unbound claim waits on: `Ok(None)` without one (bound only by the PV controller),
    /// `Err(name)` when it names a class that does not exist.
    fn class_of<'a>(&'a self, spec: &ClaimUpdate) -> Result<Option<&'a StorageClassUpdate>, Arc<str>> {
        match spec.class.as_deref() {
            // No class: the PV controller binds it (or the default class's admission set one).
            None | Some("") => Ok(None),
            Some(name) => self.classes.get(name).map(Some).ok_or_else(|| Arc::from(name)),
        }
    }

    // Whether one node can take a pod
    // -----------------------------------------------------------------------------------------

    /// A pod's claims in the order kube-scheduler matches them to volumes: by increasing request
    /// (`findMatchingVolumes` sorts them so; a stable sort here, as Go's is for a pod's few claims).
    /// Each takes the smallest volume that fits it, so the order decides whether all find one: a small
    /// claim taken first may take the only volume a larger claim's access modes allow.
    fn matching_order<'c>(&self, namespace: &Arc<str>, claims: &'c [PodClaim]) -> Vec<&'c PodClaim> {
        let mut ordered: Vec<&PodClaim> = claims.iter().collect();
        ordered.sort_by_key(|c| {
            let key = ClaimKey {
                namespace: namespace.clone(),
                name: c.name.clone(),
            };
            self.claims.get(&key).map_or(0, |claim| claim.spec.request_bytes)
        });
        ordered
    }

    /// Whether `node` can take a pod with these claims now, with the volumes other claims have taken.
    ///
    /// # Errors
    /// Why not.
    pub fn check(
        &self,
        namespace: &Arc<str>,
        claims: &[PodClaim],
        node: NodeRef<'_>,
        placed_here: bool,
    ) -> Result<(), VolumeMiss> {
        let mut picked: Vec<&str> = Vec::new();
        for c in self.matching_order(namespace, claims) {
            let key = ClaimKey {
                namespace: namespace.clone(),
                name: c.name.clone(),
            };
            let Some(claim) = self.claims.get(&key) else {
                return Err(VolumeMiss::Waiting);
            };
            let spec = &claim.spec;
            if spec.access_modes.contains(AccessModes::READ_WRITE_ONCE_POD) {
                // Placed users other than this task itself.
                let others = self
                    .placed_users
                    .get(&key)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(u32::from(placed_here));
                if others > 0 {
                    return Err(VolumeMiss::ReadWriteOncePodInUse);
                }
            }
            if let Some(name) = &spec.volume_name {
                let Some(volume) = self.volumes.get(name) else {
                    return Err(VolumeMiss::Waiting);
                };
                if !affinity_admits(&volume.spec, node) {
                    return Err(VolumeMiss::NodeAffinity);
                }
                if !zone_admits(&volume.spec.labels, node.labels) {
                    return Err(VolumeMiss::Zone);
                }
                continue;
            }
            // Unbound: another placed pod's choice holds for this claim too.
            if let Some(chosen) = self.chosen.get(&key) {
                let fits = match &chosen.choice {
                    ClaimChoice::Volume(v) => self
                        .volumes
                        .get(v)
                        .is_some_and(|v| affinity_admits(&v.spec, node)),
                    ClaimChoice::Provision(n) => n.as_ref() == node.name,
                };
                if !fits {
                    return Err(VolumeMiss::NoVolumeToBind);
                }
                continue;
            }
            let Ok(Some(class)) = self.class_of(spec) else {
                return Err(VolumeMiss::Waiting);
            };
            if !class.wait_for_first_consumer {
                return Err(VolumeMiss::Waiting);
            }
            if spec.selected_node.as_deref().is_some_and(|n| n != node.name) {
                return Err(VolumeMiss::NoVolumeToBind);
            }
            if let Some(v) = self.find_volume(&key, spec, node, &picked) {
                picked.push(v);
                continue;
            }
            if !may_provision(class, spec, node) {
                return Err(VolumeMiss::NoVolumeToBind);
            }
        }
        self.check_attach_limits(namespace, claims, node)
    }

    /// The volume kube-scheduler would choose for an unbound claim on a node: one reserved for the
    /// claim, else the smallest available one that fits (class, capacity, access and volume modes,
    /// selector, node affinity), not taken by another claim nor in `picked`.
    fn find_volume(
        &self,
        key: &ClaimKey,
        spec: &ClaimUpdate,
        node: NodeRef<'_>,
        picked: &[&str],
    ) -> Option<&str> {
        let class = spec.class.as_deref().unwrap_or("");
        let mut best: Option<(u64, &str)> = None;
        for (name, volume) in &self.volumes {
            let v = &volume.spec;
            if picked.contains(&name.as_ref()) || v.deleting || v.class.as_ref() != class {
                continue;
            }
            if self.taken.get(name).is_some_and(|k| k != key) {
                continue;
            }
            let reserved_for_claim = v
                .claim_ref
                .as_ref()
                .is_some_and(|r| r.key == *key && r.uid.as_deref().is_none_or(|u| u == spec.uid.as_ref()));
            if v.claim_ref.is_some() && !reserved_for_claim {
                continue;
            }
            if !reserved_for_claim && v.phase != VolumePhase::Available {
                continue;
            }
            if v.capacity_bytes < spec.request_bytes
                || v.volume_mode != spec.volume_mode
                || !v.access_modes.contains(spec.access_modes)
                || spec.selector.as_ref().is_some_and(|s| !s.matches(&v.labels))
                || !affinity_admits(v, node)
            {
                continue;
            }
            if reserved_for_claim {
                return Some(name);
            }
            if best.is_none_or(|(size, _)| v.capacity_bytes < size) {
                best = Some((v.capacity_bytes, name));
            }
        }
        best.map(|(_, name)| name)
    }

    /// NodeVolumeLimits for CSI drivers: the distinct claims on the node per driver, plus this pod's
    /// claims not already there, within the node's limit for each driver.
    fn check_attach_limits(
        &self,
        namespace: &Arc<str>,
        claims: &[PodClaim],
        node: NodeRef<'_>,
    ) -> Result<(), VolumeMiss> {
        let Some(limits) = self.attach_limits.get(node.name) else {
            return Ok(());
        };
        let here = self.on_node.get(&node.id);
        let mut new_per_driver: HashMap<Arc<str>, u32> = HashMap::new();
        for c in claims {
            let key = ClaimKey {
                namespace: namespace.clone(),
                name: c.name.clone(),
            };
            if here.is_some_and(|h| h.contains_key(&key)) {
                continue;
            }
            if let Some(driver) = self.driver_of(&key) {
                *new_per_driver.entry(driver).or_default() += 1;
            }
        }
        for (driver, new) in new_per_driver {
            let Some(limit) = limits.get(&driver) else {
                continue;
            };
            let existing = here.map_or(0, |h| {
                h.keys()
                    .filter(|k| self.driver_of(k).as_ref() == Some(&driver))
                    .count()
            });
            let existing = u32::try_from(existing).unwrap_or(u32::MAX);
            if existing.saturating_add(new) > *limit {
                return Err(VolumeMiss::MaxVolumeCount);
            }
        }
        Ok(())
    }

    /// The CSI driver that attaches a claim's volume: its bound volume's driver, else its class's
    /// provisioner (what will provision it).
    fn driver_of(&self, key: &ClaimKey) -> Option<Arc<str>> {
        let claim = self.claims.get(key)?;
        if let Some(v) = &claim.spec.volume_name {
            return self.volumes.get(v)?.spec.csi.as_ref().map(|(d, _)| d.clone());
        }
        if let Some(ClaimChoice::Volume(v)) = self.chosen.get(key).map(|c| &c.choice) {
            return self.volumes.get(v)?.spec.csi.as_ref().map(|(d, _)| d.clone());
        }
        let class = self.class_of(&claim.spec).ok().flatten()?;
        Some(class.provisioner.clone())
    }

    // Placed pods
    // -----------------------------------------------------------------------------------------

    /// Adds (`sign` 1) or removes (-1) a placed task's use of its claims on `node`; on adding, unbound
    /// claims waiting for their first consumer choose a volume or the node to provision on (the
    /// first placed user chooses; later users follow).
    pub fn contribute(&mut self, namespace: &Arc<str>, claims: &[PodClaim], node: NodeRef<'_>, sign: i32) {
        let mut picked: Vec<Arc<str>> = Vec::new();
        for c in self.matching_order(namespace, claims) {
            let key = ClaimKey {
                namespace: namespace.clone(),
                name: c.name.clone(),
            };
            if sign > 0 {
                *self.placed_users.entry(key.clone()).or_default() += 1;
                *self
                    .on_node
                    .entry(node.id)
                    .or_default()
                    .entry(key.clone())
                    .or_default() += 1;
                self.choose(&key, node, &mut picked);
            } else {
                decrement(&mut self.placed_users, &key);
                if let Some(here) = self.on_node.get_mut(&node.id) {
                    decrement(here, &key);
                    if here.is_empty() {
                        self.on_node.remove(&node.id);
                    }
                }
                if let Some(chosen) = self.chosen.get_mut(&key) {
                    chosen.users = chosen.users.saturating_sub(1);
                    if chosen.users == 0
                        && let Some(ClaimChoice::Volume(v)) = self.chosen.remove(&key).map(|c| c.choice)
                    {
                        self.taken.remove(&v);
                    }
                }
            }
        }
    }

    fn choose(&mut self, key: &ClaimKey, node: NodeRef<'_>, picked: &mut Vec<Arc<str>>) {
        if let Some(chosen) = self.chosen.get_mut(key) {
            chosen.users += 1;
            return;
        }
        let Some(claim) = self.claims.get(key) else {
            return;
        };
        let spec = &claim.spec;
        if spec.volume_name.is_some() || spec.deleting {
            return;
        }
        let Ok(Some(class)) = self.class_of(spec) else {
            return;
        };
        if !class.wait_for_first_consumer {
            return;
        }
        let picked_refs: Vec<&str> = picked.iter().map(AsRef::as_ref).collect();
        let choice = if let Some(v) = self.find_volume(key, spec, node, &picked_refs) {
            ClaimChoice::Volume(Arc::from(v))
        } else if may_provision(class, spec, node) {
            ClaimChoice::Provision(Arc::from(node.name))
        } else {
            // Placed where it does not fit (a pod bound by someone else): nothing to reserve.
            return;
        };
        if let ClaimChoice::Volume(v) = &choice {
            picked.push(v.clone());
            self.taken.insert(v.clone(), key.clone());
        }
        self.chosen.insert(key.clone(), Chosen { choice, users: 1 });
    }

    /// Forgets every placed task's use (before a recount).
    pub fn clear_counts(&mut self) {
        self.placed_users.clear();
        self.on_node.clear();
        self.chosen.clear();
        self.taken.clear();
    }

    /// What the binder must do for a placed pod's claims before binding it: the choices of its
    /// unbound claims.
    #[must_use]
    pub fn bindings(&self, namespace: &Arc<str>, claims: &[PodClaim]) -> Vec<ClaimBinding> {
        claims
            .iter()
            .filter_map(|c| {
                let key = ClaimKey {
                    namespace: namespace.clone(),
                    name: c.name.clone(),
                };
                let chosen = self.chosen.get(&key)?;
                let claim = self.claims.get(&key)?;
                Some(ClaimBinding {
                    claim_uid: claim.spec.uid.clone(),
                    claim: key,
                    choice: chosen.choice.clone(),
                })
            })
            .collect()
    }

    /// Checks the use counts against `expected` (claim -> placed users, node -> claim -> users),
    /// recomputed from the tasks, and the choices against each other.
    ///
    /// # Errors
    /// The first mismatch.
    pub fn check_counts(
        &self,
        placed_users: &HashMap<ClaimKey, u32>,
        on_node: &HashMap<NodeId, HashMap<ClaimKey, u32>>,
    ) -> Result<(), String> {
        if &self.placed_users != placed_users {
            return Err(format!(
                "claim users {:?} recomputed {:?}",
                self.placed_users, placed_users
            ));
        }
        if &self.on_node != on_node {
            return Err(format!(
                "claims per node {:?} recomputed {:?}",
                self.on_node, on_node
            ));
        }
        for (key, chosen) in &self.chosen {
            let users = placed_users.get(key).copied().unwrap_or(0);
            if chosen.users == 0 || chosen.users > users {
                return Err(format!("claim {key} chosen by {} of {users} users", chosen.users));
            }
            if let ClaimChoice::Volume(v) = &chosen.choice
                && self.taken.get(v) != Some(key)
            {
                return Err(format!("volume {v} chosen by {key} but not taken by it"));
            }
        }
        if self.taken.len()
            != self
                .chosen
                .values()
                .filter(|c| matches!(c.choice, ClaimChoice::Volume(_)))
                .count()
        {
            return Err("a volume is taken by no claim's choice".to_owned());
        }
        Ok(())
    }
}

fn decrement(map: &mut HashMap<ClaimKey, u32>, key: &ClaimKey) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// A volume's required node affinity admits the node (no affinity admits every node).
fn affinity_admits(volume: &VolumeUpdate, node: NodeRef<'_>) -> bool {
    volume.node_affinity.as_ref().is_none_or(|terms| {
        terms
            .iter()
            .any(|term| term.iter().all(|r| r.matches_node(node.name, node.labels)))
    })
}

/// VolumeZone: each zone or region label of the volume (values joined by `__` for several) must hold
/// the node's value of that label; a node with none of these labels is not constrained.
fn zone_admits(volume_labels: &Labels, node_labels: &Labels) -> bool {
    if !ZONE_LABELS.iter().any(|k| node_labels.contains_key(*k)) {
        return true;
    }
    ZONE_LABELS.iter().all(|k| {
        let Some(allowed) = volume_labels.get(*k) else {
            return true;
        };
        let node_value = node_labels.get(*k).map_or("", String::as_str);
        allowed.split("__").any(|v| v == node_value)
    })
}

/// Whether the class may provision a volume for the claim on the node: it has a provisioner and its
/// allowed topologies admit the node. (Storage capacity tracking is not modelled.)
fn may_provision(class: &StorageClassUpdate, spec: &ClaimUpdate, node: NodeRef<'_>) -> bool {
    if class.provisioner.as_ref() == NO_PROVISIONER || spec.selector.is_some() {
        // kube-scheduler never provisions for a claim with a selector.
        return false;
    }
    class.allowed_topologies.is_empty()
        || class.allowed_topologies.iter().any(|term| {
            term.iter().all(|(key, values)| {
                node.labels
                    .get(key)
                    .is_some_and(|v| values.iter().any(|x| x == v))
            })
        })
}
