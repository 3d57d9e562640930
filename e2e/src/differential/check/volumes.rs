//! The volume rules, as kube-scheduler v1.20.2 applies them (the VolumeBinding and VolumeZone plugins,
//! `pkg/controller/volume/scheduling/scheduler_binder.go` and `FindMatchingVolume` of
//! `pkg/controller/volume/persistentvolume/util`), and what must hold of a probe's claims once its
//! scheduler decided.
//!
//! Per pod (PreFilter): a claim that does not exist or is being deleted, a claim not fully bound
//! (`spec.volumeName` and the `pv.kubernetes.io/bind-completed` annotation) whose class is not
//! `WaitForFirstConsumer` or already names a volume, a class that does not exist, or a bound claim
//! whose volume does not exist: no node can take the pod ([`Rule::Claims`]).
//!
//! Per node (Filter):
//! - a bound claim's volume: its required node affinity must match the node's labels
//!   ([`Rule::VolumeNodeAffinity`]); each zone or region label it carries (values joined by `__`) must
//!   hold the node's value, unless the node has none of those labels ([`Rule::VolumeZone`]);
//! - the unbound `WaitForFirstConsumer` claims ([`Rule::VolumeBinding`]): a claim whose
//!   `volume.kubernetes.io/selected-node` names another node fails; the others, by increasing request,
//!   each take the volume `FindMatchingVolume` finds (one reserved for the claim, else the smallest
//!   available one of the claim's class with enough capacity, the same volume mode, the claim's access
//!   modes, a matching selector and node affinity, not taken by an earlier claim of the pod); a claim
//!   left without one needs a class that provisions (not `kubernetes.io/no-provisioner`) whose allowed
//!   topologies admit the node.
//!
//! After the decision ([`binding_faults`], [`Rule::ClaimBinding`]): a bound pod's claims are bound
//! (`status.phase: Bound`) to volumes whose `claimRef` names them, that satisfy them (class, capacity,
//! access and volume modes) and admit the node (node affinity and zone labels); a claim bound before
//! keeps its volume; no volume is the volume of two claims. A pending pod's unbound claims stay
//! untouched (no volume reserved for them, no node selected).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Rule, label_selector_matches, labels_of_node, milli, namespace_of, node_term_matches};

/// The annotation the PV controller sets on a claim it finished binding.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// The annotation asking for a volume to be provisioned on a node.
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner of classes whose volumes are made by hand.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The claim class annotation older clients set (it wins over `spec.storageClassName`).
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The labels VolumeZone compares.
const ZONE_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// One side's storage objects, as the server returned them.
#[derive(Clone, Debug, Default)]
pub struct Storage {
    /// PersistentVolumeClaims.
    pub claims: Vec<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Vec<PersistentVolume>,
    /// StorageClasses.
    pub classes: Vec<StorageClass>,
}

/// No storage at all.
pub(super) static NONE: Storage = Storage {
    claims: Vec::new(),
    volumes: Vec::new(),
    classes: Vec::new(),
};

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

impl Storage {
    fn claim(&self, namespace: &str, claim: &str) -> Option<&PersistentVolumeClaim> {
        self.claims
            .iter()
            .find(|c| c.metadata.namespace.as_deref() == Some(namespace) && name(&c.metadata) == claim)
    }

    fn volume(&self, volume: &str) -> Option<&PersistentVolume> {
        self.volumes.iter().find(|v| name(&v.metadata) == volume)
    }

    fn class(&self, class: &str) -> Option<&StorageClass> {
        self.classes.iter().find(|c| name(&c.metadata) == class)
    }
}

/// The claim names of a pod's `persistentVolumeClaim` volumes, in order.
#[must_use]
pub fn pod_claims(pod: &Pod) -> Vec<&str> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
        .collect()
}

/// `v1helper.GetPersistentVolumeClaimClass`.
fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    annotation(&claim.metadata, BETA_CLASS)
        .or_else(|| claim.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()))
        .unwrap_or_default()
}

fn volume_class(volume: &PersistentVolume) -> &str {
    annotation(&volume.metadata, BETA_CLASS)
        .or_else(|| volume.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()))
        .unwrap_or_default()
}

fn request(claim: &PersistentVolumeClaim) -> anyhow::Result<i128> {
    let q = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    q.map_or(Ok(0), |q| milli(&q.0))
}

fn capacity(volume: &PersistentVolume) -> anyhow::Result<i128> {
    let q = volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    q.map_or(Ok(0), |q| milli(&q.0))
}

fn claim_mode(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem")
}

fn volume_mode(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem")
}

/// `CheckAccessModes`: every mode the claim asks for is one the volume offers.
fn access_modes_fit(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered: BTreeSet<&str> = volume
        .spec
        .iter()
        .flat_map(|s| s.access_modes.iter().flatten())
        .map(String::as_str)
        .collect();
    claim
        .spec
        .iter()
        .flat_map(|s| s.access_modes.iter().flatten())
        .all(|m| offered.contains(m.as_str()))
}

/// `IsVolumeBoundToClaim`: the volume's `claimRef` names the claim (and its UID, when it has one).
fn reserved_for(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| {
            r.name.as_deref() == claim.metadata.name.as_deref()
                && r.namespace.as_deref() == claim.metadata.namespace.as_deref()
                && r.uid
                    .as_deref()
                    .is_none_or(|u| u.is_empty() || Some(u) == claim.metadata.uid.as_deref())
        })
}

/// `CheckNodeAffinity`: the volume's required node affinity matches the node's labels (only the
/// labels: a `matchFields` term matches no node).
fn affinity_admits(volume: &PersistentVolume, node: &Node) -> bool {
    let Some(required) = volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    let labels_only = Node {
        metadata: ObjectMeta {
            labels: node.metadata.labels.clone(),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    required
        .node_selector_terms
        .iter()
        .any(|t| node_term_matches(t, &labels_only))
}

/// VolumeZone for one bound volume.
fn zone_admits(volume: &PersistentVolume, node: &Node) -> bool {
    let node_labels = labels_of_node(node);
    if !ZONE_LABELS.iter().any(|k| node_labels.contains_key(*k)) {
        return true;
    }
    volume.metadata.labels.iter().flatten().all(|(k, v)| {
        if !ZONE_LABELS.contains(&k.as_str()) {
            return true;
        }
        let here = node_labels.get(k).map_or("", String::as_str);
        v.split("__").any(|z| z == here)
    })
}

/// What a pod's claims ask of the nodes.
#[derive(Debug)]
pub(super) enum Needs<'a> {
    /// The pod names no claim.
    Nothing,
    /// No node can take the pod (see the module doc).
    Unusable,
    /// Each node must suit the bound claims' volumes and find volumes for the unbound claims.
    Nodes {
        /// Volumes of the fully bound claims.
        bound: Vec<&'a PersistentVolume>,
        /// Unbound `WaitForFirstConsumer` claims, by increasing request.
        to_bind: Vec<&'a PersistentVolumeClaim>,
    },
}

/// VolumeBinding's PreFilter (and the lookups VolumeZone makes) for `pod`.
///
/// # Errors
/// When a quantity cannot be read.
pub(super) fn needs<'a>(pod: &Pod, storage: &'a Storage) -> anyhow::Result<Needs<'a>> {
    let names = pod_claims(pod);
    if names.is_empty() {
        return Ok(Needs::Nothing);
    }
    let namespace = namespace_of(pod);
    let mut bound = Vec::new();
    let mut to_bind = Vec::new();
    for claim_name in names {
        let Some(claim) = storage.claim(namespace, claim_name) else {
            return Ok(Needs::Unusable);
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(Needs::Unusable);
        }
        let volume_name = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        if let Some(v) = volume_name
            && annotation(&claim.metadata, BIND_COMPLETED).is_some()
        {
            let Some(volume) = storage.volume(v) else {
                return Ok(Needs::Unusable);
            };
            bound.push(volume);
            continue;
        }
        let class = claim_class(claim);
        let waits = !class.is_empty()
            && match storage.class(class) {
                None => return Ok(Needs::Unusable),
                Some(c) => c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
            };
        if !waits || volume_name.is_some() {
            return Ok(Needs::Unusable);
        }
        to_bind.push(claim);
    }
    let mut sized = Vec::with_capacity(to_bind.len());
    for c in to_bind {
        sized.push((request(c)?, c));
    }
    // `sort.Sort(byPVCSize)`: for the few claims of a pod Go's sort is an insertion sort, stable.
    sized.sort_by_key(|(size, _)| *size);
    Ok(Needs::Nodes {
        bound,
        to_bind: sized.into_iter().map(|(_, c)| c).collect(),
    })
}

/// The volume rules `node` fails for a pod needing `needs`.
///
/// # Errors
/// When a quantity cannot be read.
pub(super) fn node_failures(
    needs: &Needs<'_>,
    node: &Node,
    storage: &Storage,
) -> anyhow::Result<BTreeSet<Rule>> {
    let mut fails = BTreeSet::new();
    let (bound, to_bind) = match needs {
        Needs::Nothing => return Ok(fails),
        Needs::Unusable => {
            fails.insert(Rule::Claims);
            return Ok(fails);
        }
        Needs::Nodes { bound, to_bind } => (bound, to_bind),
    };
    if bound.iter().any(|v| !affinity_admits(v, node)) {
        fails.insert(Rule::VolumeNodeAffinity);
    }
    if bound.iter().any(|v| !zone_admits(v, node)) {
        fails.insert(Rule::VolumeZone);
    }
    if !unbound_fit(to_bind, node, storage)? {
        fails.insert(Rule::VolumeBinding);
    }
    Ok(fails)
}

/// Whether the unbound claims find volumes on `node` (or may be provisioned there).
fn unbound_fit(to_bind: &[&PersistentVolumeClaim], node: &Node, storage: &Storage) -> anyhow::Result<bool> {
    let node_name = super::name_of(node);
    if to_bind
        .iter()
        .any(|c| annotation(&c.metadata, SELECTED_NODE).is_some_and(|n| n != node_name))
    {
        return Ok(false);
    }
    let mut chosen: BTreeSet<&str> = BTreeSet::new();
    let mut to_provision = Vec::new();
    for claim in to_bind {
        if annotation(&claim.metadata, SELECTED_NODE).is_some() {
            to_provision.push(*claim);
            continue;
        }
        match find_matching_volume(claim, node, storage, &chosen)? {
            Some(v) => {
                chosen.insert(name(&v.metadata));
            }
            None => to_provision.push(*claim),
        }
    }
    Ok(to_provision.iter().all(|claim| {
        storage.class(claim_class(claim)).is_some_and(|class| {
            class.provisioner != NO_PROVISIONER
                && !class.provisioner.is_empty()
                && topology_admits(class, node)
        })
    }))
}

/// `MatchTopologySelectorTerms` of a class's `allowedTopologies` (none admits every node).
fn topology_admits(class: &StorageClass, node: &Node) -> bool {
    let labels = labels_of_node(node);
    let terms = class.allowed_topologies.as_deref().unwrap_or_default();
    terms.is_empty()
        || terms.iter().any(|t| {
            t.match_label_expressions.iter().flatten().all(|r| {
                labels
                    .get(&r.key)
                    .is_some_and(|v| r.values.iter().any(|x| x == v))
            })
        })
}

/// `FindMatchingVolume` on the scheduler's path (a node given, binding delayed).
fn find_matching_volume<'s>(
    claim: &PersistentVolumeClaim,
    node: &Node,
    storage: &'s Storage,
    excluded: &BTreeSet<&str>,
) -> anyhow::Result<Option<&'s PersistentVolume>> {
    let requested = request(claim)?;
    let class = claim_class(claim);
    let selector = claim.spec.as_ref().and_then(|s| s.selector.as_ref());
    let mut smallest: Option<(i128, &PersistentVolume)> = None;
    // `ListPVs(class)`: the volumes of the claim's class.
    for volume in storage.volumes.iter().filter(|v| volume_class(v) == class) {
        if excluded.contains(name(&volume.metadata)) {
            continue;
        }
        let has_claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
        let for_this_claim = reserved_for(volume, claim);
        if has_claim_ref && !for_this_claim {
            continue;
        }
        let size = capacity(volume)?;
        if size < requested
            || claim_mode(claim) != volume_mode(volume)
            || volume.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let affinity_ok = affinity_admits(volume, node);
        if for_this_claim {
            return Ok(affinity_ok.then_some(volume));
        }
        let available = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available");
        let labels = volume.metadata.labels.clone().unwrap_or_default();
        if !available
            || selector.is_some_and(|s| !label_selector_matches(Some(s), &labels))
            || !affinity_ok
            || !access_modes_fit(claim, volume)
        {
            continue;
        }
        if smallest.is_none_or(|(s, _)| s > size) {
            smallest = Some((size, volume));
        }
    }
    Ok(smallest.map(|(_, v)| v))
}

/// What is wrong with a decided probe's claims: `node` is where its scheduler bound it (`None`: left
/// pending), `before` and `after` the side's storage when the probe was created and once it was
/// decided. Empty when all is well (see the module doc).
///
/// # Errors
/// When a quantity cannot be read.
pub fn binding_faults(
    pod: &Pod,
    node: Option<&Node>,
    before: &Storage,
    after: &Storage,
) -> anyhow::Result<Vec<String>> {
    let namespace = namespace_of(pod);
    let mut faults = Vec::new();
    // Every claim each volume is the volume of, and every volume reserved for each claim.
    let mut claims_of_volume: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in &after.claims {
        if let Some(v) = c
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty())
        {
            claims_of_volume.entry(v).or_default().push(name(&c.metadata));
        }
    }
    for claim_name in pod_claims(pod) {
        let was = before.claim(namespace, claim_name);
        let Some(claim) = after.claim(namespace, claim_name) else {
            if node.is_some() {
                faults.push(format!("claim {claim_name} does not exist"));
            }
            continue;
        };
        let volume_name = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        let reserved: Vec<&str> = after
            .volumes
            .iter()
            .filter(|v| reserved_for(v, claim))
            .map(|v| name(&v.metadata))
            .collect();
        let was_volume = was
            .and_then(|c| c.spec.as_ref())
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        let Some(node) = node else {
            let selected = annotation(&claim.metadata, SELECTED_NODE);
            if was_volume.is_none() && (volume_name.is_some() || !reserved.is_empty() || selected.is_some()) {
                faults.push(format!(
                    "claim {claim_name} of a pod left pending was bound to {volume_name:?}, reserved by \
                     volumes {reserved:?} or given node {selected:?}"
                ));
            }
            continue;
        };
        let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
        let Some(v) = volume_name.filter(|_| phase == Some("Bound")) else {
            faults.push(format!("claim {claim_name} is not bound (phase {phase:?})"));
            continue;
        };
        if was_volume.is_some_and(|w| w != v) {
            faults.push(format!(
                "claim {claim_name} was bound to {} and is now bound to {v}",
                was_volume.unwrap_or_default()
            ));
        }
        if claims_of_volume.get(v).is_some_and(|c| c.len() > 1) {
            faults.push(format!(
                "volume {v} is the volume of claims {:?}",
                claims_of_volume[v]
            ));
        }
        if reserved != [v] {
            faults.push(format!(
                "claim {claim_name} is bound to {v} but reserved by volumes {reserved:?}"
            ));
        }
        let Some(volume) = after.volume(v) else {
            faults.push(format!("claim {claim_name}'s volume {v} does not exist"));
            continue;
        };
        let mut unmet = Vec::new();
        if capacity(volume)? < request(claim)? {
            unmet.push("capacity");
        }
        if volume_class(volume) != claim_class(claim) {
            unmet.push("class");
        }
        if !access_modes_fit(claim, volume) {
            unmet.push("access modes");
        }
        if volume_mode(volume) != claim_mode(claim) {
            unmet.push("volume mode");
        }
        if !affinity_admits(volume, node) {
            unmet.push("node affinity");
        }
        if !zone_admits(volume, node) {
            unmet.push("zone");
        }
        if !unmet.is_empty() {
            faults.push(format!(
                "claim {claim_name}'s volume {v} does not suit it or the node: {}",
                unmet.join(", ")
            ));
        }
    }
    Ok(faults)
}
