//! The seeded generator: independent *worlds* (a few nodes each, see the module doc of
//! [`crate::differential`]) and, per round, the pods bound beforehand and one probe pod per world.
//!
//! Everything is a function of [`Config`] (the seed included) and [`Names`]: the same seed gives the same
//! nodes, pre-bound pods and probes. Only fields a v1.20 API server accepts are written. The storage
//! some probes get ([`super::storage`]) is drawn from a stream of its own, so a seed's pods are the
//! same with and without it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::check::{HOSTNAME, Rule};
use super::storage::{self, ClaimKind, Place, StoragePlan, Terrain};
use crate::FakeNodes;

/// Node and pod label: the world a node or pod belongs to.
pub const WORLD_LABEL: &str = "e2e.kai.dev/diff-world";
/// Probe label: which phase created it (`<round>-<side>`), for listing and deleting them together.
pub const PHASE_LABEL: &str = "e2e.kai.dev/diff-phase";
/// Pod label: `probe` or `bound` (pre-bound by the test).
pub const ROLE_LABEL: &str = "e2e.kai.dev/diff-role";
/// Taint on every node of the test (value: the namespace), tolerated by every pod of the test: no other
/// scheduler of the shared cluster puts its pods there.
pub const ISOLATION_TAINT: &str = "e2e.kai.dev/differential";
/// Zone topology key.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Region topology key.
pub const REGION: &str = "topology.kubernetes.io/region";
/// Custom node label with string values.
pub const TIER: &str = "e2e.kai.dev/diff-tier";
/// Custom node label with integer values (for `Gt`/`Lt`).
pub const GENERATION: &str = "e2e.kai.dev/diff-gen";
/// An extended resource some nodes have.
pub const WIDGET: &str = "e2e.kai.dev/widget";
/// `schedulerName` of the pods the test binds itself (no scheduler serves it).
pub const NO_SCHEDULER: &str = "e2e-differential-prebound";

/// Which rules the generator may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rules {
    /// Every rule of issues 13 and 14: every probe of a quarter of the rounds (3, 7, 11, ...) has
    /// storage. Gathered in a few rounds rather than spread over all, so only those rounds wait for
    /// kube-scheduler's volume binding, which checks the claims once a second; the test makes their
    /// storage while the three rounds before them are played.
    All,
    /// Every rule, and every probe has storage.
    Volumes,
    /// Every rule but volumes: the pods of `All` without their storage (the generator before issue 14).
    PodRules,
    /// Only the rules the scheduler honoured before issue 13: resources, node selector, required node
    /// affinity, taints and tolerations, cordons.
    Supported,
}

impl Rules {
    /// From `all`, `volumes`, `pod-rules` or `supported`.
    ///
    /// # Errors
    /// On any other value.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "all" => Ok(Rules::All),
            "volumes" => Ok(Rules::Volumes),
            "pod-rules" => Ok(Rules::PodRules),
            "supported" => Ok(Rules::Supported),
            _ => anyhow::bail!("rules must be `all`, `volumes`, `pod-rules` or `supported`, not {s:?}"),
        }
    }

    /// The name `parse` reads.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Rules::All => "all",
            Rules::Volumes => "volumes",
            Rules::PodRules => "pod-rules",
            Rules::Supported => "supported",
        }
    }

    fn new_rules(self) -> bool {
        self != Rules::Supported
    }

    /// Whether the probes of round `r` have storage.
    fn storage_in_round(self, r: usize) -> bool {
        match self {
            Rules::All => r % 4 == 3,
            Rules::Volumes => true,
            Rules::PodRules | Rules::Supported => false,
        }
    }
}

/// Mixed into the seed for the storage stream.
const STORAGE_STREAM: u64 = 0x766f_6c75_6d65_7321;

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The seed.
    pub seed: u64,
    /// Probes per scheduler (at least; rounded up to whole rounds).
    pub probes: usize,
    /// Independent worlds (probes per round).
    pub worlds: usize,
    /// Which rules.
    pub rules: Rules,
}

/// Names the generated objects depend on.
#[derive(Clone, Debug)]
pub struct Names {
    /// The two namespaces pods are spread over (pod affinity terms name them).
    pub namespaces: [String; 2],
    /// Node names start with it; also the isolation taint's value and the nodes' owner.
    pub prefix: String,
}

impl Names {
    /// The world label's value for world `w`, also the start of its zones and regions: unique to the run
    /// (the prefix's last part), so runs sharing a cluster never select each other's nodes or pods, nor
    /// share a topology domain (kube-scheduler counts a domain's pods on every node of it, tainted or
    /// not; two runs' worlds of one name once disagreed with the checker on spread).
    #[must_use]
    pub fn world_value(&self, w: usize) -> String {
        let run = self.prefix.rsplit('-').next().unwrap_or_default();
        format!("w{w}-{run}")
    }
}

/// One node to create.
#[derive(Clone, Debug)]
pub struct NodePlan {
    /// Its world.
    pub world: usize,
    /// Its name.
    pub name: String,
    /// Labels, capacity and taints (one node: the name is `<prefix>-0`).
    pub nodes: FakeNodes,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
}

/// A pod by namespace and name.
pub type PodRef = (String, String);

/// What happens in one round.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// Pre-bound pods deleted before the probes.
    pub remove: Vec<PodRef>,
    /// Pods created bound (`spec.nodeName` set) before the probes.
    pub add: Vec<Value>,
    /// One probe per world.
    pub probes: Vec<Probe>,
}

/// A pod given to each scheduler in turn, on the same cluster state.
#[derive(Clone, Debug)]
pub struct Probe {
    /// Its world.
    pub world: usize,
    /// Its round.
    pub round: usize,
    /// Its namespace.
    pub namespace: String,
    /// The rules in play: those its spec carries, taints and cordons when its world has such nodes or it
    /// tolerates them, the existing pods' anti-affinity when some pod of its world has such a term.
    pub carries: BTreeSet<Rule>,
    /// Labels.
    pub labels: Value,
    /// The pod spec, without `schedulerName`; its volumes name claims by suffix (`c0`), each side's pod
    /// names its own ([`Probe::pod`]).
    pub spec: Value,
    /// Its claims and volumes (empty: none).
    pub storage: StoragePlan,
}

/// Which scheduler a probe goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// kube-scheduler v1.20.2.
    Kube,
    /// The scheduler under test.
    Ours,
}

impl Side {
    /// Short name (pod name prefix, phase label).
    #[must_use]
    pub fn short(self) -> &'static str {
        match self {
            Side::Kube => "k",
            Side::Ours => "a",
        }
    }
}

impl Probe {
    /// The name without the side: `r<round>-w<world>`.
    #[must_use]
    pub fn id(&self) -> String {
        format!("r{}-w{}", self.round, self.world)
    }

    /// The pod's name on `side`.
    #[must_use]
    pub fn name(&self, side: Side) -> String {
        format!("{}-{}", side.short(), self.id())
    }

    /// The phase label value of `side` in this round.
    #[must_use]
    pub fn phase(&self, side: Side) -> String {
        phase(self.round, side)
    }

    /// The pod for `side`: identical for both but for name, `schedulerName`, phase label and (ours) the
    /// PodGroup annotation. `extra_labels` go on both (the scheduler's node-pool label).
    #[must_use]
    pub fn pod(&self, side: Side, scheduler_name: &str, extra_labels: &BTreeMap<String, String>) -> Value {
        let mut labels = self.labels.clone();
        for (k, v) in extra_labels {
            labels[k] = json!(v);
        }
        labels[PHASE_LABEL] = json!(self.phase(side));
        let mut spec = self.spec.clone();
        spec["schedulerName"] = json!(scheduler_name);
        if !self.storage.is_empty() {
            spec["volumes"] = self.storage.pod_volumes(&self.name(side));
        }
        let mut metadata = json!({ "name": self.name(side), "namespace": self.namespace, "labels": labels });
        if side == Side::Ours {
            metadata["annotations"] = json!({ api::keys::POD_GROUP_NAME: self.name(side) });
        }
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec })
    }

    /// The single-pod PodGroup of our side's pod (`minMember: 1`).
    #[must_use]
    pub fn pod_group(&self, labels: &BTreeMap<String, String>) -> Value {
        let mut labels = json!(labels);
        labels[PHASE_LABEL] = json!(self.phase(Side::Ours));
        json!({
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "PodGroup",
            "metadata": { "name": self.name(Side::Ours), "namespace": self.namespace, "labels": labels },
            "spec": { "minMember": 1, "queue": api::keys::DEFAULT_QUEUE },
        })
    }
}

/// The phase label value of `side` in `round`.
#[must_use]
pub fn phase(round: usize, side: Side) -> String {
    format!("{round}-{}", side.short())
}

/// The whole run.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Nodes, all worlds.
    pub nodes: Vec<NodePlan>,
    /// Rounds, in order.
    pub rounds: Vec<Round>,
}

impl Scenario {
    /// Probes per scheduler.
    #[must_use]
    pub fn probes(&self) -> usize {
        self.rounds.iter().map(|r| r.probes.len()).sum()
    }
}

/// SplitMix64: small, seedable, good enough to pick test cases.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next_u64() % u64::try_from(n.max(1)).unwrap_or(u64::MAX)).unwrap_or(0)
    }

    /// True with `percent`% probability.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (not empty).
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// A world's node, as the generator tracks it for placing pre-bound pods.
#[derive(Clone, Debug)]
struct NodeState {
    name: String,
    cpu_milli: i64,
    memory_mi: i64,
    gpus: i64,
    pods: i64,
    /// `(ip, protocol, port)` in use.
    ports: Vec<(String, String, i64)>,
}

/// A pre-bound pod, as the generator tracks it.
#[derive(Clone, Debug)]
struct Bound {
    namespace: String,
    name: String,
    node: usize,
    cpu_milli: i64,
    memory_mi: i64,
    gpus: i64,
    ports: Vec<(String, String, i64)>,
    anti_affinity: bool,
}

struct World {
    index: usize,
    /// Some node has a `NoSchedule` or `NoExecute` taint besides the isolation taint.
    tainted: bool,
    /// Some node is cordoned.
    cordoned: bool,
    nodes: Vec<NodeState>,
    bound: Vec<Bound>,
    zones: Vec<String>,
    next_pod: usize,
}

/// The label values pods carry and selectors ask for.
const APPS: [&str; 3] = ["web", "db", "cache"];
const TIERS: [&str; 2] = ["front", "back"];
const PORTS: [i64; 3] = [8080, 8081, 9090];
const HOST_IPS: [&str; 2] = ["127.0.0.1", "10.0.0.1"];

/// Generates the scenario.
#[must_use]
pub fn generate(config: &Config, names: &Names) -> Scenario {
    let mut rng = Rng::new(config.seed);
    let mut storage_rng = Rng::new(config.seed ^ STORAGE_STREAM);
    let worlds_count = config.worlds.max(1);
    let rounds = config.probes.div_ceil(worlds_count).max(1);
    let mut nodes = Vec::new();
    let mut worlds = Vec::new();
    for w in 0..worlds_count {
        let (plans, world) = world(&mut rng, w, names);
        nodes.extend(plans);
        worlds.push(world);
    }
    let mut out = Vec::new();
    for r in 0..rounds {
        let mut round = Round::default();
        for world in &mut worlds {
            let adds = if r == 0 {
                2 + rng.below(5)
            } else {
                rng.pick(&[0, 1, 1, 2])
            };
            if r > 0 && !world.bound.is_empty() && rng.chance(25) {
                let gone = world.bound.remove(rng.below(world.bound.len()));
                let node = &mut world.nodes[gone.node];
                node.cpu_milli += gone.cpu_milli;
                node.memory_mi += gone.memory_mi;
                node.gpus += gone.gpus;
                node.pods += 1;
                node.ports.retain(|p| !gone.ports.contains(p));
                round.remove.push((gone.namespace, gone.name));
            }
            for _ in 0..adds {
                if let Some(pod) = prebound(&mut rng, world, names, config.rules) {
                    round.add.push(pod);
                }
            }
            let mut probe = probe(&mut rng, world, r, names, config.rules);
            if config.rules.storage_in_round(r) {
                give_storage(&mut storage_rng, &mut probe, world);
            }
            round.probes.push(probe);
        }
        out.push(round);
    }
    Scenario { nodes, rounds: out }
}

fn node_name(prefix: &str, world: usize, node: usize) -> String {
    format!("{prefix}-w{world}n{node}-0")
}

fn world(rng: &mut Rng, w: usize, names: &Names) -> (Vec<NodePlan>, World) {
    let zones: Vec<String> = (0..2 + rng.below(2))
        .map(|z| format!("{}-z{}", names.world_value(w), ["a", "b", "c"][z]))
        .collect();
    let regions: Vec<String> = (0..1 + rng.below(2))
        .map(|r| format!("{}-r{r}", names.world_value(w)))
        .collect();
    let count = 3 + rng.below(4);
    let mut plans = Vec::new();
    let mut states = Vec::new();
    for i in 0..count {
        let name = node_name(&names.prefix, w, i);
        let cpus = rng.pick(&[2_i64, 4, 8]);
        let memory_gi = rng.pick(&[4_i64, 8, 16]);
        let gpus = rng.pick(&[0_i64, 0, 0, 2, 4]);
        let widgets = rng.pick(&[0_i64, 0, 0, 1, 3]);
        let pods = if rng.chance(15) { 3 + rng.below(3) } else { 110 };
        let mut fake = FakeNodes::new(format!("{}-w{w}n{i}", names.prefix))
            .owned_by(names.prefix.clone())
            .cpu(&cpus.to_string())
            .memory(&format!("{memory_gi}Gi"))
            .gpus(u32::try_from(gpus).unwrap_or(0))
            .pods(u32::try_from(pods).unwrap_or(110))
            .label(WORLD_LABEL, &names.world_value(w))
            .taint(ISOLATION_TAINT, &names.prefix, "NoSchedule");
        if widgets > 0 {
            fake = fake.resource(WIDGET, &widgets.to_string());
        }
        // Every node has a zone but an occasional one, so "missing key" cases happen.
        if !rng.chance(10) {
            fake = fake.label(ZONE, &rng.pick(&zones));
        }
        fake = fake.label(REGION, &rng.pick(&regions));
        if rng.chance(70) {
            fake = fake.label(TIER, rng.pick(&["gold", "silver"]));
        }
        if rng.chance(80) {
            fake = fake.label(GENERATION, &(1 + rng.below(5)).to_string());
        }
        if rng.chance(25) {
            fake = fake.taint("dedicated", "ml", "NoSchedule");
        }
        if rng.chance(10) {
            fake = fake.taint("maintenance", "soon", "NoExecute");
        }
        if rng.chance(15) {
            fake = fake.taint("flaky", "yes", "PreferNoSchedule");
        }
        let unschedulable = rng.chance(7);
        states.push(NodeState {
            name: name.clone(),
            cpu_milli: cpus * 1000,
            memory_mi: memory_gi * 1024,
            gpus,
            pods: i64::try_from(pods).unwrap_or(110),
            ports: Vec::new(),
        });
        plans.push(NodePlan {
            world: w,
            name,
            nodes: fake,
            unschedulable,
        });
    }
    let world = World {
        index: w,
        tainted: plans
            .iter()
            .flat_map(|p| &p.nodes.taints)
            .any(|t| t.key != ISOLATION_TAINT && t.effect != "PreferNoSchedule"),
        cordoned: plans.iter().any(|p| p.unschedulable),
        nodes: states,
        bound: Vec::new(),
        zones,
        next_pod: 0,
    };
    (plans, world)
}

/// Labels of a pod of world `w`: the world, usually an app, often a tier.
fn pod_labels(rng: &mut Rng, w: usize, names: &Names) -> Value {
    let mut labels = json!({ WORLD_LABEL: names.world_value(w) });
    if rng.chance(85) {
        labels["app"] = json!(rng.pick(&APPS));
    }
    if rng.chance(60) {
        labels["tier"] = json!(rng.pick(&TIERS));
    }
    labels
}

/// A label selector for pods of world `w`. Every selector names the world, so pods of other worlds never
/// match: worlds stay independent for kube-scheduler too, whose affinity pre-filter looks at every node.
fn selector(rng: &mut Rng, w: usize, names: &Names) -> Value {
    let mut match_labels = json!({ WORLD_LABEL: names.world_value(w) });
    let mut expressions = Vec::new();
    match rng.below(6) {
        0 | 1 => match_labels["app"] = json!(rng.pick(&APPS)),
        2 => expressions
            .push(json!({ "key": "app", "operator": "In", "values": [rng.pick(&APPS), rng.pick(&APPS)] })),
        3 => expressions.push(json!({ "key": "tier", "operator": "Exists" })),
        4 => expressions.push(json!({ "key": "app", "operator": "NotIn", "values": [rng.pick(&APPS)] })),
        _ => expressions.push(json!({ "key": "tier", "operator": "DoesNotExist" })),
    }
    let mut s = json!({ "matchLabels": match_labels });
    if !expressions.is_empty() {
        s["matchExpressions"] = json!(expressions);
    }
    s
}

fn affinity_term(rng: &mut Rng, w: usize, names: &Names) -> Value {
    let mut term = json!({
        "labelSelector": selector(rng, w, names),
        "topologyKey": if rng.chance(50) { HOSTNAME } else { ZONE },
    });
    match rng.below(6) {
        0 => term["namespaces"] = json!([names.namespaces[0]]),
        1 => term["namespaces"] = json!([names.namespaces[1]]),
        2 => term["namespaces"] = json!(names.namespaces),
        _ => {}
    }
    term
}

fn isolation_toleration(names: &Names) -> Value {
    json!({ "key": ISOLATION_TAINT, "operator": "Equal", "value": names.prefix, "effect": "NoSchedule" })
}

fn container(requests: &BTreeMap<&str, String>, ports: &[(String, String, i64)]) -> Value {
    let mut c = json!({
        "name": "c",
        "image": "example.com/differential:1",
        "resources": { "requests": requests, "limits": {} },
    });
    // Extended resources need limits equal to requests.
    for (k, v) in requests {
        if !matches!(*k, "cpu" | "memory") {
            c["resources"]["limits"][*k] = json!(v);
        }
    }
    if !ports.is_empty() {
        c["ports"] = ports
            .iter()
            .enumerate()
            .map(|(i, (ip, protocol, port))| {
                let mut p = json!({ "containerPort": 7000 + i, "hostPort": port, "protocol": protocol });
                if ip != "0.0.0.0" {
                    p["hostIP"] = json!(ip);
                }
                p
            })
            .collect();
    }
    c
}

fn random_ports(rng: &mut Rng) -> Vec<(String, String, i64)> {
    let mut ports: Vec<(String, String, i64)> = Vec::new();
    for _ in 0..1 + rng.below(2) {
        let protocol = if rng.chance(30) { "UDP" } else { "TCP" };
        let ip = if rng.chance(65) {
            "0.0.0.0"
        } else {
            rng.pick(&HOST_IPS)
        };
        let port = rng.pick(&PORTS);
        // One (port, protocol) per pod: the API server refuses duplicates.
        if !ports.iter().any(|(_, p, n)| p == protocol && *n == port) {
            ports.push((ip.to_owned(), protocol.to_owned(), port));
        }
    }
    ports
}

fn ports_conflict(wanted: &[(String, String, i64)], used: &[(String, String, i64)]) -> bool {
    wanted.iter().any(|(ip, protocol, port)| {
        used.iter().any(|(uip, uprotocol, uport)| {
            port == uport && protocol == uprotocol && (ip == "0.0.0.0" || uip == "0.0.0.0" || ip == uip)
        })
    })
}

/// A pod the test binds itself to a node of the world where its resources and ports fit (other rules
/// are not the binding API's business), or `None` when none has room.
fn prebound(rng: &mut Rng, world: &mut World, names: &Names, rules: Rules) -> Option<Value> {
    let cpu_milli = rng.pick(&[100_i64, 250, 500, 1000]);
    let memory_mi = rng.pick(&[64_i64, 256, 512, 1024]);
    let gpus = if rng.chance(15) { 1 } else { 0 };
    let ports = if rules.new_rules() && rng.chance(25) {
        random_ports(rng)
    } else {
        Vec::new()
    };
    let fits: Vec<usize> = (0..world.nodes.len())
        .filter(|i| {
            let n = &world.nodes[*i];
            n.cpu_milli >= cpu_milli
                && n.memory_mi >= memory_mi
                && n.gpus >= gpus
                && n.pods >= 1
                && !ports_conflict(&ports, &n.ports)
        })
        .collect();
    if fits.is_empty() {
        return None;
    }
    let node = rng.pick(&fits);
    let namespace = rng.pick(&names.namespaces);
    let name = format!("b-w{}-{}", world.index, world.next_pod);
    world.next_pod += 1;
    let mut labels = pod_labels(rng, world.index, names);
    labels[ROLE_LABEL] = json!("bound");
    let mut requests = BTreeMap::from([
        ("cpu", format!("{cpu_milli}m")),
        ("memory", format!("{memory_mi}Mi")),
    ]);
    if gpus > 0 {
        requests.insert(api::keys::GPU_RESOURCE, gpus.to_string());
    }
    let mut spec = json!({
        "schedulerName": NO_SCHEDULER,
        "nodeName": world.nodes[node].name,
        "containers": [container(&requests, &ports)],
        "tolerations": [isolation_toleration(names)],
        "terminationGracePeriodSeconds": 0,
    });
    let anti_affinity = rules.new_rules() && rng.chance(20);
    if anti_affinity {
        spec["affinity"] = json!({ "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [affinity_term(rng, world.index, names)],
        } });
    }
    let n = &mut world.nodes[node];
    n.cpu_milli -= cpu_milli;
    n.memory_mi -= memory_mi;
    n.gpus -= gpus;
    n.pods -= 1;
    n.ports.extend(ports.iter().cloned());
    world.bound.push(Bound {
        namespace: namespace.clone(),
        name: name.clone(),
        node,
        cpu_milli,
        memory_mi,
        gpus,
        ports,
        anti_affinity,
    });
    Some(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": namespace, "labels": labels },
        "spec": spec,
    }))
}

/// A node-selector requirement on one of the node labels the generator writes.
fn node_requirement(rng: &mut Rng, world: &World) -> Value {
    match rng.below(8) {
        0 => json!({ "key": ZONE, "operator": "In", "values": [rng.pick(&world.zones)] }),
        1 => json!({ "key": ZONE, "operator": "NotIn", "values": [rng.pick(&world.zones)] }),
        2 => json!({ "key": TIER, "operator": "In", "values": [rng.pick(&["gold", "silver"])] }),
        3 => json!({ "key": TIER, "operator": rng.pick(&["Exists", "DoesNotExist"]) }),
        4 => json!({ "key": GENERATION, "operator": "Gt", "values": [(1 + rng.below(4)).to_string()] }),
        5 => json!({ "key": GENERATION, "operator": "Lt", "values": [(2 + rng.below(4)).to_string()] }),
        6 => {
            let a = rng.pick(&world.nodes).name;
            let b = rng.pick(&world.nodes).name;
            json!({ "key": HOSTNAME, "operator": "In", "values": [a, b] })
        }
        _ => json!({ "key": ZONE, "operator": "Exists" }),
    }
}

fn probe(rng: &mut Rng, world: &World, round: usize, names: &Names, rules: Rules) -> Probe {
    let w = world.index;
    let mut carries = BTreeSet::from([Rule::Resources]);
    let mut labels = pod_labels(rng, w, names);
    labels[ROLE_LABEL] = json!("probe");
    let mut requests = BTreeMap::from([
        ("cpu", rng.pick(&["250m", "500m", "1", "2", "3"]).to_owned()),
        (
            "memory",
            rng.pick(&["256Mi", "512Mi", "1Gi", "2Gi", "6Gi"]).to_owned(),
        ),
    ]);
    if rng.chance(15) {
        requests.insert(api::keys::GPU_RESOURCE, rng.pick(&["1", "2"]).to_owned());
    }
    if rng.chance(10) {
        requests.insert(WIDGET, rng.pick(&["1", "2"]).to_owned());
    }
    let ports = if rules.new_rules() && rng.chance(25) {
        carries.insert(Rule::HostPorts);
        random_ports(rng)
    } else {
        Vec::new()
    };
    let mut node_selector = json!({ WORLD_LABEL: names.world_value(w) });
    if rng.chance(25) {
        carries.insert(Rule::NodeSelector);
        match rng.below(3) {
            0 => node_selector[ZONE] = json!(rng.pick(&world.zones)),
            1 => node_selector[TIER] = json!(rng.pick(&["gold", "silver"])),
            _ => node_selector[GENERATION] = json!((1 + rng.below(5)).to_string()),
        }
    }
    let mut tolerations = vec![isolation_toleration(names)];
    if world.tainted {
        carries.insert(Rule::Taints);
    }
    if world.cordoned {
        carries.insert(Rule::Cordon);
    }
    if rng.chance(45) {
        carries.insert(Rule::Taints);
        let choices = [
            json!({ "key": "dedicated", "operator": "Exists" }),
            json!({ "key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule" }),
            json!({ "key": "dedicated", "value": "web", "effect": "NoSchedule" }),
            json!({ "key": "maintenance", "operator": "Exists", "effect": "NoExecute" }),
            json!({ "key": "maintenance", "operator": "Exists", "effect": "NoSchedule" }),
            json!({ "key": "flaky", "operator": "Exists" }),
        ];
        for _ in 0..1 + rng.below(2) {
            tolerations.push(rng.pick(&choices));
        }
        if rng.chance(5) {
            tolerations.push(json!({ "operator": "Exists" }));
        }
    }
    if rng.chance(12) {
        carries.insert(Rule::Cordon);
        tolerations.push(json!({ "key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule" }));
    }
    let mut affinity = json!({});
    if rng.chance(30) {
        carries.insert(Rule::NodeAffinity);
        let terms: Vec<Value> = (0..1 + rng.below(2))
            .map(|_| {
                let mut term = json!({
                    "matchExpressions": (0..1 + rng.below(2)).map(|_| node_requirement(rng, world)).collect::<Vec<_>>(),
                });
                if rng.chance(10) {
                    term["matchFields"] = json!([{ "key": "metadata.name", "operator": rng.pick(&["In", "NotIn"]),
                                                   "values": [rng.pick(&world.nodes).name] }]);
                }
                term
            })
            .collect();
        affinity["nodeAffinity"] = json!({
            "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": terms },
        });
        if rng.chance(30) {
            affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json!([{ "weight": 1 + rng.below(100), "preference": { "matchExpressions": [node_requirement(rng, world)] } }]);
        }
    }
    let mut spread = Vec::new();
    if rules.new_rules() {
        let terms = |rng: &mut Rng, n: usize| -> Vec<Value> {
            (0..n).map(|_| affinity_term(rng, w, names)).collect()
        };
        if rng.chance(25) {
            carries.insert(Rule::PodAffinity);
            let n = 1 + rng.below(2);
            let t = terms(rng, n);
            affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!(t);
        }
        if rng.chance(15) {
            carries.insert(Rule::PreferredPodAffinity);
            let t = terms(rng, 1);
            affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
                json!([{ "weight": 1 + rng.below(100), "podAffinityTerm": t[0] }]);
        }
        if rng.chance(25) {
            carries.insert(Rule::PodAntiAffinity);
            let n = 1 + rng.below(2);
            let t = terms(rng, n);
            affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!(t);
        }
        if rng.chance(15) {
            carries.insert(Rule::PreferredPodAntiAffinity);
            let t = terms(rng, 1);
            affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
                json!([{ "weight": 1 + rng.below(100), "podAffinityTerm": t[0] }]);
        }
        if rng.chance(35) {
            let mut used = BTreeSet::new();
            for _ in 0..1 + rng.below(2) {
                let key = if rng.chance(50) { HOSTNAME } else { ZONE };
                let when = if rng.chance(65) {
                    "DoNotSchedule"
                } else {
                    "ScheduleAnyway"
                };
                // The API server refuses two constraints with the same key and action.
                if !used.insert((key, when)) {
                    continue;
                }
                carries.insert(if when == "DoNotSchedule" {
                    Rule::TopologySpread
                } else {
                    Rule::SpreadScheduleAnyway
                });
                spread.push(json!({
                    "maxSkew": 1 + rng.below(2),
                    "topologyKey": key,
                    "whenUnsatisfiable": when,
                    "labelSelector": selector(rng, w, names),
                }));
            }
        }
        if world.bound.iter().any(|b| b.anti_affinity) {
            carries.insert(Rule::ExistingAntiAffinity);
        }
    }
    let mut spec = json!({
        "containers": [container(&requests, &ports)],
        "nodeSelector": node_selector,
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": 0,
    });
    if affinity.as_object().is_some_and(|a| !a.is_empty()) {
        spec["affinity"] = affinity;
    }
    if !spread.is_empty() {
        spec["topologySpreadConstraints"] = json!(spread);
    }
    let namespace = rng.pick(&names.namespaces);
    Probe {
        world: w,
        round,
        namespace,
        carries,
        labels,
        spec,
        storage: StoragePlan::default(),
    }
}

/// Gives a probe claims and volumes on its world's nodes, and the volume rules they bring into play.
fn give_storage(rng: &mut Rng, probe: &mut Probe, world: &World) {
    let nodes: Vec<String> = world.nodes.iter().map(|n| n.name.clone()).collect();
    let s = storage::generate(
        rng,
        Terrain {
            nodes: &nodes,
            zones: &world.zones,
        },
    );
    probe.carries.extend([Rule::Claims, Rule::ClaimBinding]);
    for c in &s.claims {
        match c.kind {
            ClaimKind::Unbound if c.class == storage::Class::WaitForFirstConsumer => {
                probe.carries.insert(Rule::VolumeBinding);
            }
            ClaimKind::Bound(v) => {
                probe.carries.insert(match s.volumes[v].place {
                    Place::ZoneLabel(_) => Rule::VolumeZone,
                    _ => Rule::VolumeNodeAffinity,
                });
            }
            _ => {}
        }
    }
    probe.spec["volumes"] = s.neutral_pod_volumes();
    probe.storage = s;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names {
            namespaces: ["ns-a".to_owned(), "ns-b".to_owned()],
            prefix: "pre".to_owned(),
        }
    }

    fn config(rules: Rules) -> Config {
        Config {
            seed: 7,
            probes: 100,
            worlds: 10,
            rules,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_scenario_and_another_seed_another() {
        let a = generate(&config(Rules::All), &names());
        let b = generate(&config(Rules::All), &names());
        let text = |s: &Scenario| format!("{:?}", s);
        assert_eq!(text(&a), text(&b));
        let c = generate(
            &Config {
                seed: 8,
                ..config(Rules::All)
            },
            &names(),
        );
        assert_ne!(text(&a), text(&c));
        assert_eq!(a.probes(), 100);
        assert_eq!(a.rounds.len(), 10);
        assert!(a.nodes.len() >= 30 && a.nodes.len() <= 60);
    }

    #[test]
    fn every_rule_is_carried_and_supported_mode_leaves_the_new_ones_out() {
        let carried = |s: &Scenario| -> BTreeSet<Rule> {
            s.rounds
                .iter()
                .flat_map(|r| &r.probes)
                .flat_map(|p| p.carries.iter().copied())
                .collect()
        };
        let all = generate(
            &Config {
                probes: 500,
                ..config(Rules::All)
            },
            &names(),
        );
        assert_eq!(carried(&all), Rule::ALL.into_iter().collect());
        let supported = generate(
            &Config {
                probes: 500,
                ..config(Rules::Supported)
            },
            &names(),
        );
        let rules = carried(&supported);
        assert!(rules.iter().all(|r| r.honoured_before_issue_13()), "{rules:?}");
        assert_eq!(rules.len(), 5);
        let text = serde_json::to_string(
            &supported
                .rounds
                .iter()
                .map(|r| (&r.add, r.probes.iter().map(|p| &p.spec).collect::<Vec<_>>()))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        for field in [
            "podAffinity",
            "podAntiAffinity",
            "topologySpreadConstraints",
            "hostPort",
            "persistentVolumeClaim",
        ] {
            assert!(!text.contains(field), "{field} in supported mode");
        }
    }

    #[test]
    fn probes_differ_between_sides_only_in_name_scheduler_phase_group_and_claim_names() {
        let s = generate(&config(Rules::All), &names());
        let p = &s.rounds[3].probes[2];
        let extra = BTreeMap::from([("pool".to_owned(), "x".to_owned())]);
        let mut k = p.pod(Side::Kube, "kube", &extra);
        let mut a = p.pod(Side::Ours, "kai-scheduler", &extra);
        assert_eq!(a["metadata"]["annotations"][api::keys::POD_GROUP_NAME], "a-r3-w2");
        assert_eq!(k["metadata"]["labels"]["pool"], "x");
        for pod in [&mut k, &mut a] {
            let m = pod["metadata"].as_object_mut().unwrap();
            m.remove("name");
            m.remove("annotations");
            m["labels"].as_object_mut().unwrap().remove(PHASE_LABEL);
            pod["spec"].as_object_mut().unwrap().remove("schedulerName");
            for v in pod["spec"]["volumes"].as_array_mut().into_iter().flatten() {
                v["persistentVolumeClaim"]["claimName"] = v["name"].clone();
            }
        }
        assert_eq!(k, a);
        assert_eq!(p.pod_group(&extra)["spec"]["minMember"], 1);
        let with_claims = s
            .rounds
            .iter()
            .flat_map(|r| &r.probes)
            .find(|p| !p.storage.is_empty())
            .expect("a probe with claims");
        let k = with_claims.pod(Side::Kube, "kube", &extra);
        let a = with_claims.pod(Side::Ours, "kai-scheduler", &extra);
        let claim = |pod: &Value| pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"].clone();
        assert_eq!(claim(&k), format!("{}-c0", with_claims.name(Side::Kube)));
        assert_eq!(claim(&a), format!("{}-c0", with_claims.name(Side::Ours)));
    }

    #[test]
    fn storage_goes_to_some_probes_from_a_stream_of_its_own() {
        let config = |rules| Config {
            probes: 400,
            ..config(rules)
        };
        let all = generate(&config(Rules::All), &names());
        let volumes = generate(&config(Rules::Volumes), &names());
        let pod_rules = generate(&config(Rules::PodRules), &names());
        let probes = |s: &Scenario| s.rounds.iter().flat_map(|r| r.probes.clone()).collect::<Vec<_>>();
        let with = probes(&all).iter().filter(|p| !p.storage.is_empty()).count();
        assert!((60..=140).contains(&with), "{with} of 400 probes with claims");
        assert!(probes(&volumes).iter().all(|p| !p.storage.is_empty()));
        // Without their volumes, the pods are the same.
        let base = |s: &Scenario| {
            probes(s)
                .into_iter()
                .map(|p| {
                    let mut spec = p.spec;
                    spec.as_object_mut().unwrap().remove("volumes");
                    spec
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(base(&all), base(&volumes));
        assert_eq!(base(&all), base(&pod_rules));
        assert!(probes(&pod_rules).iter().all(|p| p.storage.is_empty()));
    }

    #[test]
    fn each_side_gets_its_own_storage_on_its_probes_world() {
        let s = generate(
            &Config {
                probes: 200,
                ..config(Rules::Volumes)
            },
            &names(),
        );
        let mut kinds = BTreeSet::new();
        for p in s.rounds.iter().flat_map(|r| &r.probes) {
            let world: BTreeSet<String> = s
                .nodes
                .iter()
                .filter(|n| n.world == p.world)
                .map(|n| n.name.clone())
                .collect();
            let objects = |side: Side| {
                let name = p.name(side);
                let n = storage::Naming {
                    prefix: "pre",
                    side,
                    round: p.round,
                    probe: &name,
                    namespace: &p.namespace,
                };
                (p.storage.volumes(&n), p.storage.claims(&n))
            };
            let (kube_volumes, kube_claims) = objects(Side::Kube);
            let (our_volumes, our_claims) = objects(Side::Ours);
            let text = serde_json::to_string(&(&kube_volumes, &kube_claims)).unwrap();
            assert!(!text.contains(&p.name(Side::Ours)), "{text}");
            let ours_text = serde_json::to_string(&(&our_volumes, &our_claims)).unwrap();
            let renamed = text
                .replace(&p.name(Side::Kube), &p.name(Side::Ours))
                .replace("pre-k-r", "pre-a-r")
                .replace(&phase(p.round, Side::Kube), &phase(p.round, Side::Ours));
            assert_eq!(renamed, ours_text);
            for v in &kube_volumes {
                let terms = &v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"];
                for value in terms[0]["matchExpressions"][0]["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let value = value.as_str().unwrap();
                    assert!(
                        world.contains(value)
                            || value.starts_with(&format!("{}-z", names().world_value(p.world))),
                        "{v}"
                    );
                }
            }
            // The PV controller binds claims of a class without a StorageClass object at once, to any
            // volume of that class: no volume may be in a class such a claim names.
            assert!(p.storage.volumes.iter().all(|v| matches!(
                v.class,
                storage::Class::WaitForFirstConsumer | storage::Class::Other
            )));
            for c in &p.storage.claims {
                assert_ne!(c.class, storage::Class::Other);
                kinds.insert(
                    format!("{:?}/{:?}", c.kind, c.class).replace(|ch: char| ch.is_ascii_digit(), ""),
                );
                if let ClaimKind::Bound(v) = c.kind {
                    let v = &p.storage.volumes[v];
                    assert!(v.capacity_gi >= c.request_gi && v.access_modes == c.access_modes && !v.block);
                    assert_eq!(v.class, storage::Class::WaitForFirstConsumer);
                }
            }
        }
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            [
                "Bound()/WaitForFirstConsumer",
                "Missing/WaitForFirstConsumer",
                "Unbound/Immediate",
                "Unbound/Missing",
                "Unbound/WaitForFirstConsumer",
            ]
        );
    }

    #[test]
    fn selectors_and_node_selectors_always_name_the_world() {
        let s = generate(&config(Rules::All), &names());
        for p in s.rounds.iter().flat_map(|r| &r.probes) {
            let world = names().world_value(p.world);
            assert_eq!(p.spec["nodeSelector"][WORLD_LABEL], world.as_str());
            let text = p.spec.to_string();
            let selectors = text.matches("labelSelector").count();
            let named = text
                .matches(&format!("\"matchLabels\":{{\"{WORLD_LABEL}\":\"{world}\""))
                .count()
                + text.matches(&format!("\"{WORLD_LABEL}\":\"{world}\"")).count();
            assert!(named >= selectors, "{text}");
        }
    }

    #[test]
    fn prebound_pods_fit_their_nodes_resources_and_ports() {
        let s = generate(
            &Config {
                probes: 400,
                ..config(Rules::All)
            },
            &names(),
        );
        // Replay adds and removes and check capacity per node.
        let mut used: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        let mut placed: BTreeMap<String, (String, i64, i64)> = BTreeMap::new();
        for r in &s.rounds {
            for (_, name) in &r.remove {
                let (node, cpu, mem) = placed.remove(name).expect("removed pod was placed");
                let u = used.get_mut(&node).expect("node");
                u.0 -= cpu;
                u.1 -= mem;
            }
            for pod in &r.add {
                let node = pod["spec"]["nodeName"].as_str().unwrap().to_owned();
                let req = &pod["spec"]["containers"][0]["resources"]["requests"];
                let cpu = req["cpu"]
                    .as_str()
                    .unwrap()
                    .trim_end_matches('m')
                    .parse::<i64>()
                    .unwrap();
                let mem = req["memory"]
                    .as_str()
                    .unwrap()
                    .trim_end_matches("Mi")
                    .parse::<i64>()
                    .unwrap();
                let u = used.entry(node.clone()).or_default();
                u.0 += cpu;
                u.1 += mem;
                placed.insert(
                    pod["metadata"]["name"].as_str().unwrap().to_owned(),
                    (node, cpu, mem),
                );
            }
            for (node, (cpu, mem)) in &used {
                let plan = s.nodes.iter().find(|n| &n.name == node).unwrap();
                let cap_cpu = plan.nodes.capacity["cpu"].parse::<i64>().unwrap() * 1000;
                let cap_mem = plan.nodes.capacity["memory"]
                    .trim_end_matches("Gi")
                    .parse::<i64>()
                    .unwrap()
                    * 1024;
                assert!(*cpu <= cap_cpu && *mem <= cap_mem, "{node}: {cpu}m {mem}Mi");
            }
        }
    }
}
