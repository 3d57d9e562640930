//! Probes with storage (issue 14): the claims a probe names and the PersistentVolumes made for it, one
//! copy per side.
//!
//! Binding a claim consumes a volume, and the two schedulers may choose different volumes (or nodes), so
//! the sides never share storage: each side gets its own StorageClasses per round (`kubernetes.io/
//! no-provisioner`, one `WaitForFirstConsumer` and one `Immediate`), and each probe its own volumes
//! and claims in that side's classes. A probe's volumes are local volumes whose node affinity names
//! nodes (by `kubernetes.io/hostname`) or a zone of its own world, or host-path volumes carrying a zone
//! label (the VolumeZone rule); other worlds' nodes never match them, and the classes of earlier rounds
//! are not the round's, so a volume left over from another probe is never a candidate.
//!
//! What a probe's claims can be ([`ClaimKind`]): unbound in the `WaitForFirstConsumer` class (the
//! scheduler chooses a volume; often one fitting volume on one node, sometimes none, sometimes too
//! small or with other access modes, among distractors), already bound to a volume on one node or zone
//! (bound by the test as the PV controller leaves a pair it bound: the claim names the volume, the
//! volume's `claimRef` the claim and its UID, the claim is marked `pv.kubernetes.io/bind-completed`;
//! the controller then sets the phases), missing, unbound in the `Immediate` class (no volume:
//! it never binds), or in a class that does not exist. Either side's pod must stay pending in the last
//! three cases. No two volumes of a probe have the same capacity ([`VolumePlan::tie_breaker_mi`]).

use serde_json::{Value, json};

use super::generate::{PHASE_LABEL, Rng, Side, ZONE, phase};

/// Label on every cluster-scoped object of a run (value: the run's prefix), for cleaning up.
pub const RUN_LABEL: &str = "e2e.kai.dev/diff-run";
/// The provisioner of classes whose volumes are made by hand.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The annotation of a claim whose binding is complete.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// Storage sizes, GiB.
const SIZES: [u32; 4] = [1, 2, 5, 10];
/// Access modes claims ask for and volumes offer.
const MODES: [&[&str]; 6] = [
    &["ReadWriteOnce"],
    &["ReadWriteOnce"],
    &["ReadWriteMany"],
    &["ReadOnlyMany"],
    &["ReadWriteOnce", "ReadOnlyMany"],
    &["ReadWriteOnce", "ReadWriteMany"],
];

/// Which of a side's classes of the round an object names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `volumeBindingMode: WaitForFirstConsumer`, no provisioner.
    WaitForFirstConsumer,
    /// `volumeBindingMode: Immediate`, no provisioner (and no volume: its claims never bind).
    Immediate,
    /// A class no StorageClass object has, named by claims only (the PV controller treats their claims
    /// as binding at once, so no volume may be in it).
    Missing,
    /// A class no StorageClass object has, of volumes only: no claim asks for them.
    Other,
}

impl Class {
    fn suffix(self) -> &'static str {
        match self {
            Class::WaitForFirstConsumer => "wffc",
            Class::Immediate => "immediate",
            Class::Missing => "missing",
            Class::Other => "other",
        }
    }
}

/// Where a volume can be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// A local volume whose node affinity names these nodes (`kubernetes.io/hostname In`).
    Nodes(Vec<String>),
    /// A local volume whose node affinity names a zone (`topology.kubernetes.io/zone In`).
    Zone(String),
    /// A host-path volume without node affinity, labelled with a zone (VolumeZone's rule).
    ZoneLabel(String),
}

/// One PersistentVolume of a probe.
#[derive(Clone, Debug)]
pub struct VolumePlan {
    /// Name suffix (`v0`, ...).
    pub suffix: String,
    /// Its class.
    pub class: Class,
    /// `capacity.storage`, GiB, plus [`VolumePlan::tie_breaker_mi`] MiB.
    pub capacity_gi: u32,
    /// `accessModes`.
    pub access_modes: &'static [&'static str],
    /// `volumeMode: Block` (else `Filesystem`).
    pub block: bool,
    /// Where it can be used.
    pub place: Place,
    /// The claim (index into [`StoragePlan::claims`]) it is bound to before the probe.
    pub bound_to: Option<usize>,
}

/// What a claim of a probe is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimKind {
    /// Created unbound.
    Unbound,
    /// Bound, before the probe, to this volume (index into [`StoragePlan::volumes`]).
    Bound(usize),
    /// Named by the pod, never created.
    Missing,
}

/// One claim a probe names.
#[derive(Clone, Debug)]
pub struct ClaimPlan {
    /// Name suffix (`c0`, ...), also the pod's volume name.
    pub suffix: String,
    /// What it is.
    pub kind: ClaimKind,
    /// Its class.
    pub class: Class,
    /// `resources.requests.storage`, GiB.
    pub request_gi: u32,
    /// `accessModes`.
    pub access_modes: &'static [&'static str],
    /// `volumeMode: Block`.
    pub block: bool,
}

/// A probe's storage.
#[derive(Clone, Debug, Default)]
pub struct StoragePlan {
    /// Its volumes.
    pub volumes: Vec<VolumePlan>,
    /// The claims the pod names, in the pod's order.
    pub claims: Vec<ClaimPlan>,
}

/// The nodes and zones of a world, for placing volumes.
#[derive(Clone, Copy, Debug)]
pub struct Terrain<'a> {
    /// Node names (`kubernetes.io/hostname` values).
    pub nodes: &'a [String],
    /// Zone values.
    pub zones: &'a [String],
}

/// A probe's storage, drawn from `rng` (the generator's storage stream, separate from the one that draws
/// the rest, so a seed gives the same pods with or without storage).
pub fn generate(rng: &mut Rng, terrain: Terrain<'_>) -> StoragePlan {
    let mut s = StoragePlan::default();
    let claims = if rng.chance(35) { 2 } else { 1 };
    for i in 0..claims {
        let suffix = format!("c{i}");
        let request_gi = rng.pick(&SIZES);
        let access_modes = rng.pick(&MODES);
        let block = rng.chance(8);
        let mut claim = ClaimPlan {
            suffix,
            kind: ClaimKind::Unbound,
            class: Class::WaitForFirstConsumer,
            request_gi,
            access_modes,
            block,
        };
        match rng.below(100) {
            // Unbound, waiting for its first consumer: usually a volume that fits somewhere, sometimes two.
            0..65 => {
                let fitting = match rng.below(20) {
                    0..2 => 0,
                    2..10 => 1,
                    _ => 2,
                };
                for _ in 0..fitting {
                    let capacity_gi = rng.pick(&SIZES).max(request_gi);
                    let place = wide_place(rng, terrain);
                    push_volume(
                        &mut s,
                        Class::WaitForFirstConsumer,
                        capacity_gi,
                        access_modes,
                        block,
                        place,
                        None,
                    );
                }
            }
            // Bound before the probe to a volume on a node or in a zone.
            65..80 => {
                claim.block = false;
                let place = match rng.below(10) {
                    0..7 => Place::Nodes(vec![rng.pick(terrain.nodes)]),
                    7 => Place::Zone(rng.pick(terrain.zones)),
                    _ => Place::ZoneLabel(rng.pick(terrain.zones)),
                };
                let capacity_gi = rng.pick(&SIZES).max(request_gi);
                let v = push_volume(
                    &mut s,
                    Class::WaitForFirstConsumer,
                    capacity_gi,
                    access_modes,
                    false,
                    place,
                    Some(i),
                );
                claim.kind = ClaimKind::Bound(v);
            }
            80..88 => claim.kind = ClaimKind::Missing,
            88..93 => claim.class = Class::Immediate,
            93..95 => claim.class = Class::Missing,
            // Larger than every volume.
            _ => claim.request_gi = 50,
        }
        s.claims.push(claim);
    }
    // Distractors: volumes of the class that may or may not fit, and volumes of another class.
    for _ in 0..rng.below(3) {
        let class = if rng.chance(85) {
            Class::WaitForFirstConsumer
        } else {
            Class::Other
        };
        let capacity_gi = rng.pick(&[1, 2, 5, 10, 20]);
        let modes = rng.pick(&MODES);
        let block = rng.chance(10);
        let place = place(rng, terrain);
        push_volume(&mut s, class, capacity_gi, modes, block, place, None);
    }
    s
}

/// Where a volume meant to fit goes: one node, two or three nodes, or a zone.
fn wide_place(rng: &mut Rng, terrain: Terrain<'_>) -> Place {
    match rng.below(4) {
        0 | 1 => Place::Nodes(vec![rng.pick(terrain.nodes)]),
        2 => {
            let mut some: Vec<String> = (0..2 + rng.below(2)).map(|_| rng.pick(terrain.nodes)).collect();
            some.sort();
            some.dedup();
            Place::Nodes(some)
        }
        _ => Place::Zone(rng.pick(terrain.zones)),
    }
}

/// Where a distractor goes: mostly one node.
fn place(rng: &mut Rng, terrain: Terrain<'_>) -> Place {
    match rng.below(20) {
        0..15 => Place::Nodes(vec![rng.pick(terrain.nodes)]),
        15..17 => {
            let a = rng.pick(terrain.nodes);
            let b = rng.pick(terrain.nodes);
            let mut both = vec![a, b];
            both.dedup();
            Place::Nodes(both)
        }
        _ => Place::Zone(rng.pick(terrain.zones)),
    }
}

fn push_volume(
    s: &mut StoragePlan,
    class: Class,
    capacity_gi: u32,
    access_modes: &'static [&'static str],
    block: bool,
    place: Place,
    bound_to: Option<usize>,
) -> usize {
    s.volumes.push(VolumePlan {
        suffix: format!("v{}", s.volumes.len()),
        class,
        capacity_gi,
        access_modes,
        block,
        place,
        bound_to,
    });
    s.volumes.len() - 1
}

/// The names a side's storage objects of one probe get.
#[derive(Clone, Debug)]
pub struct Naming<'a> {
    /// The run's prefix (cluster-scoped names start with it).
    pub prefix: &'a str,
    /// The side.
    pub side: Side,
    /// The round.
    pub round: usize,
    /// The probe's name on that side (claims are named after it).
    pub probe: &'a str,
    /// The probe's namespace.
    pub namespace: &'a str,
}

/// The name of a side's class of a round.
#[must_use]
pub fn class_name(prefix: &str, side: Side, round: usize, class: Class) -> String {
    format!("{prefix}-{}-r{round}-{}", side.short(), class.suffix())
}

/// Labels of a side's storage objects of a round.
fn labels(prefix: &str, side: Side, round: usize) -> Value {
    json!({ PHASE_LABEL: phase(round, side), RUN_LABEL: prefix })
}

/// The StorageClasses of a side and round (those that exist: not [`Class::Missing`] nor [`Class::Other`]).
#[must_use]
pub fn classes(prefix: &str, side: Side, round: usize) -> Vec<Value> {
    [
        (Class::WaitForFirstConsumer, "WaitForFirstConsumer"),
        (Class::Immediate, "Immediate"),
    ]
    .into_iter()
    .map(|(class, mode)| {
        json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": { "name": class_name(prefix, side, round, class), "labels": labels(prefix, side, round) },
            "provisioner": NO_PROVISIONER,
            "volumeBindingMode": mode,
            "reclaimPolicy": "Retain",
        })
    })
    .collect()
}

/// The name of a probe's claim: the probe's name on the side and the claim's suffix.
#[must_use]
pub fn claim_name(probe: &str, suffix: &str) -> String {
    format!("{probe}-{suffix}")
}

impl Naming<'_> {
    /// A claim's name.
    #[must_use]
    pub fn claim(&self, suffix: &str) -> String {
        claim_name(self.probe, suffix)
    }

    /// A volume's name.
    #[must_use]
    pub fn volume(&self, suffix: &str) -> String {
        format!("{}-{}-{suffix}", self.prefix, self.probe)
    }

    fn class(&self, class: Class) -> String {
        class_name(self.prefix, self.side, self.round, class)
    }
}

impl VolumePlan {
    /// MiB added to the capacity: the volume's index, so no two volumes of a probe are the same size.
    /// kube-scheduler takes the first of equally small fitting volumes in the order of a Go map, so
    /// with two claims of a pod a tie can decide whether the pod fits, at random.
    #[must_use]
    pub fn tie_breaker_mi(&self) -> u32 {
        self.suffix.trim_start_matches('v').parse().unwrap_or(0)
    }

    /// `capacity.storage` as written.
    #[must_use]
    pub fn capacity(&self) -> String {
        format!("{}Mi", self.capacity_gi * 1024 + self.tie_breaker_mi())
    }
}

impl StoragePlan {
    /// Whether the probe has any claim.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    /// The pod's `volumes`, naming the claims by suffix (each side's names are put in by
    /// [`StoragePlan::pod_volumes`]).
    #[must_use]
    pub fn neutral_pod_volumes(&self) -> Value {
        self.claims
            .iter()
            .map(|c| json!({ "name": c.suffix, "persistentVolumeClaim": { "claimName": c.suffix } }))
            .collect()
    }

    /// The pod's `volumes` on one side, `probe` being the pod's name there.
    #[must_use]
    pub fn pod_volumes(&self, probe: &str) -> Value {
        self.claims
            .iter()
            .map(|c| json!({ "name": c.suffix, "persistentVolumeClaim": { "claimName": claim_name(probe, &c.suffix) } }))
            .collect()
    }

    /// The PersistentVolumes of one side.
    #[must_use]
    pub fn volumes(&self, naming: &Naming<'_>) -> Vec<Value> {
        self.volumes
            .iter()
            .map(|v| {
                let mut labels = labels(naming.prefix, naming.side, naming.round);
                let mut spec = json!({
                    "capacity": { "storage": v.capacity() },
                    "accessModes": v.access_modes,
                    "volumeMode": if v.block { "Block" } else { "Filesystem" },
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": naming.class(v.class),
                });
                let path = format!("/mnt/differential/{}", v.suffix);
                let affinity = |key: &str, values: &[String]| {
                    json!({ "required": { "nodeSelectorTerms": [
                        { "matchExpressions": [{ "key": key, "operator": "In", "values": values }] },
                    ] } })
                };
                match &v.place {
                    Place::Nodes(nodes) => {
                        spec["local"] = json!({ "path": path });
                        spec["nodeAffinity"] = affinity(super::check::HOSTNAME, nodes);
                    }
                    Place::Zone(zone) => {
                        spec["local"] = json!({ "path": path });
                        spec["nodeAffinity"] = affinity(ZONE, std::slice::from_ref(zone));
                    }
                    Place::ZoneLabel(zone) => {
                        spec["hostPath"] = json!({ "path": path });
                        labels[ZONE] = json!(zone);
                    }
                }
                if let Some(c) = v.bound_to {
                    spec["claimRef"] = json!({
                        "namespace": naming.namespace,
                        "name": naming.claim(&self.claims[c].suffix),
                    });
                }
                json!({
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": { "name": naming.volume(&v.suffix), "labels": labels },
                    "spec": spec,
                })
            })
            .collect()
    }

    /// The PersistentVolumeClaims of one side (the missing ones left out).
    #[must_use]
    pub fn claims(&self, naming: &Naming<'_>) -> Vec<Value> {
        self.claims
            .iter()
            .filter(|c| c.kind != ClaimKind::Missing)
            .map(|c| {
                let mut spec = json!({
                    "accessModes": c.access_modes,
                    "resources": { "requests": { "storage": format!("{}Gi", c.request_gi) } },
                    "storageClassName": naming.class(c.class),
                    "volumeMode": if c.block { "Block" } else { "Filesystem" },
                });
                let metadata = json!({
                    "name": naming.claim(&c.suffix),
                    "namespace": naming.namespace,
                    "labels": labels(naming.prefix, naming.side, naming.round),
                });
                if let ClaimKind::Bound(v) = c.kind {
                    // Bound by the test (see the module doc).
                    spec["volumeName"] = json!(naming.volume(&self.volumes[v].suffix));
                }
                json!({
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": metadata,
                    "spec": spec,
                })
            })
            .collect()
    }

    /// The claims bound before the probe, by name on one side (the test makes them before their
    /// volumes, whose `claimRef` needs their UID).
    #[must_use]
    pub fn prebound_claims(&self, naming: &Naming<'_>) -> Vec<String> {
        self.claims
            .iter()
            .filter(|c| matches!(c.kind, ClaimKind::Bound(_)))
            .map(|c| naming.claim(&c.suffix))
            .collect()
    }

    /// A one-line summary per claim and volume, for reports.
    #[must_use]
    pub fn describe(&self) -> Value {
        let claims: Vec<String> = self
            .claims
            .iter()
            .map(|c| {
                let kind = match c.kind {
                    ClaimKind::Unbound => "unbound".to_owned(),
                    ClaimKind::Bound(v) => format!("bound to {}", self.volumes[v].suffix),
                    ClaimKind::Missing => "missing".to_owned(),
                };
                format!(
                    "{}: {kind}, class {}, {}Gi, {}{}",
                    c.suffix,
                    c.class.suffix(),
                    c.request_gi,
                    c.access_modes.join("+"),
                    if c.block { ", block" } else { "" }
                )
            })
            .collect();
        let volumes: Vec<String> = self
            .volumes
            .iter()
            .map(|v| {
                let place = match &v.place {
                    Place::Nodes(n) => format!("nodes {}", n.join(",")),
                    Place::Zone(z) => format!("zone {z} (affinity)"),
                    Place::ZoneLabel(z) => format!("zone {z} (label)"),
                };
                format!(
                    "{}: class {}, {}, {}{}, {place}",
                    v.suffix,
                    v.class.suffix(),
                    v.capacity(),
                    v.access_modes.join("+"),
                    if v.block { ", block" } else { "" }
                )
            })
            .collect();
        json!({ "claims": claims, "volumes": volumes })
    }
}
