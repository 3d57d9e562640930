//! The independent feasibility check: kube-scheduler v1.20.2's filter plugins written again from the
//! Kubernetes rules (`pkg/scheduler/framework/plugins/*` of that release), over the API objects as the
//! server returns them. It calls no code of the scheduler under test and shares no model with it.
//!
//! [`evaluate`] answers, for one pod and one cluster state, every node's failing [`Rule`]s: all of them,
//! not the first, so a disagreement can be attributed. The rules, as v1.20.2 applies them:
//!
//! - `NodeUnschedulable`: a node with `spec.unschedulable` takes only pods tolerating
//!   `node.kubernetes.io/unschedulable:NoSchedule`.
//! - `TaintToleration`: every `NoSchedule` and `NoExecute` taint must be tolerated.
//! - `NodeAffinity`: every `nodeSelector` pair, and one of the required node-affinity terms (a term with
//!   no requirement matches nothing; `matchFields` knows `metadata.name` with one value).
//! - `NodeResourcesFit`: the pod count, then (unless the pod asks for nothing) every requested resource
//!   against allocatable minus the requests of the pods bound to the node.
//! - `NodePorts`: a wanted `(hostIP, protocol, hostPort)` conflicts with a used one of the same protocol
//!   and port when either IP is `0.0.0.0` (the default) or both are equal.
//! - `PodTopologySpread` (`DoNotSchedule` only): the domains are the key's values on the nodes that pass
//!   the pod's node selector and required node affinity and carry every constraint's key (taints are
//!   not considered); a domain counts the matching pods (the pod's namespace, not terminating) of every
//!   node with that value, also nodes the pod could not use (later releases, with the node inclusion
//!   policies of 1.25 and their default `nodeAffinityPolicy: Honor`, count the eligible nodes' pods only:
//!   [`Release::Current`]); a node without the key fails; `matching pods in the node's
//!   domain + (1 if the pod matches its own selector) - the minimum over domains` may not exceed `maxSkew`.
//! - `InterPodAffinity`: (a) affinity: an existing pod counts only if it matches *all* required affinity
//!   terms; the node needs every term's key and a counted pod in its domain of every term, except that
//!   when no pod anywhere matches the terms and the pod matches them itself, any node having the keys
//!   passes (the first pod of a group); (b) anti-affinity: no pod matching a term in the node's domain
//!   of that term (a node without the key passes); (c) the symmetric rule: no existing pod whose required
//!   anti-affinity term matches this pod in the node's domain of that term. A term's `namespaces` default
//!   to its own pod's namespace.
//! - `VolumeBinding`, `VolumeZone` (issue 14), over one side's claims, volumes and classes
//!   ([`Storage`], given with [`State::with_storage`]): the pod's claims must exist and be bound or wait
//!   for their first consumer; a bound claim's volume must admit the node (node affinity, zone labels);
//!   the unbound claims, by increasing request, must each find an available volume that fits them on
//!   the node, none taken twice (the rules in full: the `volumes` submodule). [`binding_faults`] then
//!   judges what the scheduler wrote: the claims bound to such volumes, or left alone if the pod is
//!   pending.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinityTerm, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;

/// Hostname topology key (the node's name on the fake nodes).
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// The taint a cordon stands for.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// A placement rule: the filters (a node failing one is infeasible) and the preferences (scoring only,
/// counted where a pod carries them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Rule {
    /// cpu, memory, extended resources and the pod count.
    Resources,
    /// `spec.nodeSelector`.
    NodeSelector,
    /// Required node affinity.
    NodeAffinity,
    /// `NoSchedule`/`NoExecute` taints and tolerations.
    Taints,
    /// `spec.unschedulable` (a cordon).
    Cordon,
    /// Host ports.
    HostPorts,
    /// Required pod affinity.
    PodAffinity,
    /// Required pod anti-affinity of the pod.
    PodAntiAffinity,
    /// Required pod anti-affinity of pods already bound, against this pod (the symmetric rule).
    ExistingAntiAffinity,
    /// `DoNotSchedule` topology spread constraints.
    TopologySpread,
    /// Preferred pod affinity (scoring).
    PreferredPodAffinity,
    /// Preferred pod anti-affinity (scoring).
    PreferredPodAntiAffinity,
    /// `ScheduleAnyway` topology spread constraints (scoring).
    SpreadScheduleAnyway,
    /// The pod's claims exist, and each is bound or waits for its first consumer (VolumeBinding's
    /// PreFilter): when not, no node can take the pod.
    Claims,
    /// A bound claim's volume's node affinity.
    VolumeNodeAffinity,
    /// A bound claim's volume's zone labels (VolumeZone).
    VolumeZone,
    /// The unbound `WaitForFirstConsumer` claims find volumes on the node.
    VolumeBinding,
    /// Once decided, the claims are bound as the decision says, or left alone (not a filter: a check
    /// of what the scheduler wrote, [`binding_faults`]).
    ClaimBinding,
}

impl Rule {
    /// Every rule, in report order.
    pub const ALL: [Rule; 18] = [
        Rule::Resources,
        Rule::NodeSelector,
        Rule::NodeAffinity,
        Rule::Taints,
        Rule::Cordon,
        Rule::HostPorts,
        Rule::PodAffinity,
        Rule::PodAntiAffinity,
        Rule::ExistingAntiAffinity,
        Rule::TopologySpread,
        Rule::PreferredPodAffinity,
        Rule::PreferredPodAntiAffinity,
        Rule::SpreadScheduleAnyway,
        Rule::Claims,
        Rule::VolumeNodeAffinity,
        Rule::VolumeZone,
        Rule::VolumeBinding,
        Rule::ClaimBinding,
    ];

    /// The name in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Rule::Resources => "resources",
            Rule::NodeSelector => "nodeSelector",
            Rule::NodeAffinity => "required node affinity",
            Rule::Taints => "taints/tolerations",
            Rule::Cordon => "cordon",
            Rule::HostPorts => "host ports",
            Rule::PodAffinity => "required pod affinity",
            Rule::PodAntiAffinity => "required pod anti-affinity",
            Rule::ExistingAntiAffinity => "existing pods' anti-affinity (symmetric)",
            Rule::TopologySpread => "topology spread DoNotSchedule",
            Rule::PreferredPodAffinity => "preferred pod affinity",
            Rule::PreferredPodAntiAffinity => "preferred pod anti-affinity",
            Rule::SpreadScheduleAnyway => "topology spread ScheduleAnyway",
            Rule::Claims => "claims usable (exist, bound or waiting for a consumer)",
            Rule::VolumeNodeAffinity => "bound volume's node affinity",
            Rule::VolumeZone => "bound volume's zone",
            Rule::VolumeBinding => "unbound claims find volumes",
            Rule::ClaimBinding => "claims bound as decided (after the decision)",
        }
    }

    /// Whether the rule filters nodes (the others score them, or judge what was written afterwards).
    #[must_use]
    pub fn filters(self) -> bool {
        !matches!(
            self,
            Rule::PreferredPodAffinity
                | Rule::PreferredPodAntiAffinity
                | Rule::SpreadScheduleAnyway
                | Rule::ClaimBinding
        )
    }

    /// Whether the scheduler honoured the rule before issue 13 (resources, node selector, required node
    /// affinity, taints, cordons); issue 13 added pod affinity, topology spread and host ports, issue 14
    /// volumes.
    #[must_use]
    pub fn honoured_before_issue_13(self) -> bool {
        matches!(
            self,
            Rule::Resources | Rule::NodeSelector | Rule::NodeAffinity | Rule::Taints | Rule::Cordon
        )
    }

    /// Whether the rule is about volumes (issue 14).
    #[must_use]
    pub fn is_volume_rule(self) -> bool {
        matches!(
            self,
            Rule::Claims
                | Rule::VolumeNodeAffinity
                | Rule::VolumeZone
                | Rule::VolumeBinding
                | Rule::ClaimBinding
        )
    }
}

/// The cluster a pod is checked against: nodes, the live pods bound to them, and storage.
#[derive(Debug)]
pub struct State<'a> {
    nodes: Vec<&'a Node>,
    storage: &'a Storage,
    by_name: HashMap<&'a str, &'a Node>,
    /// Live pods bound to one of the nodes, with the node.
    bound: Vec<(&'a Pod, &'a Node)>,
    /// Indexes into `bound` per node name.
    on_node: HashMap<&'a str, Vec<usize>>,
}

fn name_of(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

fn labels_of_node(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn labels_of_pod(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

fn node_name_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

impl<'a> State<'a> {
    /// The state made of `nodes` and those of `pods` that are bound to one of them and not finished
    /// (kube-scheduler's cache leaves Succeeded and Failed pods out), leaving out the pod named
    /// `exclude` (`(namespace, name)`: the pod being checked, when it is already bound).
    #[must_use]
    pub fn new(nodes: &'a [Node], pods: &'a [Pod], exclude: Option<(&str, &str)>) -> Self {
        let by_name: HashMap<&str, &Node> = nodes.iter().map(|n| (name_of(n), n)).collect();
        let mut bound = Vec::new();
        let mut on_node: HashMap<&str, Vec<usize>> = HashMap::new();
        for pod in pods {
            let key = (
                namespace_of(pod),
                pod.metadata.name.as_deref().unwrap_or_default(),
            );
            if exclude == Some(key) {
                continue;
            }
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            let Some(node) = node_name_of(pod).and_then(|n| by_name.get(n).copied()) else {
                continue;
            };
            on_node.entry(name_of(node)).or_default().push(bound.len());
            bound.push((pod, node));
        }
        Self {
            nodes: nodes.iter().collect(),
            storage: &volumes::NONE,
            by_name,
            bound,
            on_node,
        }
    }

    /// The same state with `storage` (claims, volumes, classes; none by default).
    #[must_use]
    pub fn with_storage(mut self, storage: &'a Storage) -> Self {
        self.storage = storage;
        self
    }

    fn pods_on(&self, node: &str) -> impl Iterator<Item = &'a Pod> + '_ {
        self.on_node
            .get(node)
            .into_iter()
            .flatten()
            .map(|i| self.bound[*i].0)
    }

    /// A node by name.
    #[must_use]
    pub fn node(&self, name: &str) -> Option<&'a Node> {
        self.by_name.get(name).copied()
    }
}

/// Every node's failing rules for one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Node name -> the filter rules it fails (empty: feasible).
    pub nodes: BTreeMap<String, BTreeSet<Rule>>,
}

impl Verdict {
    /// The feasible nodes, by name.
    #[must_use]
    pub fn feasible(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(_, f)| f.is_empty())
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// The rules failing on `node` (`None`: no such node).
    #[must_use]
    pub fn failures(&self, node: &str) -> Option<&BTreeSet<Rule>> {
        self.nodes.get(node)
    }

    /// Rules that fail on at least one node.
    #[must_use]
    pub fn excluding(&self) -> BTreeSet<Rule> {
        self.nodes.values().flatten().copied().collect()
    }

    /// Rules that are the only failure of at least one node: without them that node would be feasible.
    #[must_use]
    pub fn decisive(&self) -> BTreeSet<Rule> {
        self.nodes
            .values()
            .filter(|f| f.len() == 1)
            .flatten()
            .copied()
            .collect()
    }
}

/// Which release's rules. They differ in one place only, for what the generator writes: which nodes'
/// pods a topology spread domain counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Release {
    /// kube-scheduler v1.20.2: the domains are those of the eligible nodes (passing the pod's node
    /// selector and required node affinity, carrying every key), but the matching pods of *every* node
    /// whose value is such a domain count, eligible or not.
    V1_20,
    /// Releases with the node inclusion policies (1.25 on, and what users run): with the default
    /// `nodeAffinityPolicy: Honor` only the eligible nodes' pods count.
    Current,
}

/// Checks `pod` against every node of `state` under `release`'s rules.
///
/// # Errors
/// When a quantity of the pod or of a node cannot be read.
pub fn evaluate(pod: &Pod, state: &State<'_>, release: Release) -> anyhow::Result<Verdict> {
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = namespace_of(pod);
    let request = pod_request(pod)?;
    let wanted_ports = host_ports(pod);
    let affinity = spec.affinity.clone().unwrap_or_default();
    let required = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<Term> {
        terms
            .into_iter()
            .flatten()
            .map(|t| Term::of(t, namespace))
            .collect()
    };
    let affinity_terms = required(
        affinity
            .pod_affinity
            .as_ref()
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
    );
    let anti_terms = required(
        affinity
            .pod_anti_affinity
            .as_ref()
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
    );

    // InterPodAffinity's pre-filter: topology pairs counted over every bound pod.
    let mut affinity_counts: HashMap<(String, String), i64> = HashMap::new();
    let mut anti_counts: HashMap<(String, String), i64> = HashMap::new();
    let mut existing_anti_counts: HashMap<(String, String), i64> = HashMap::new();
    for (existing, node) in &state.bound {
        let node_labels = labels_of_node(node);
        if !affinity_terms.is_empty() && affinity_terms.iter().all(|t| t.matches(existing)) {
            for t in &affinity_terms {
                if let Some(v) = node_labels.get(&t.key) {
                    *affinity_counts.entry((t.key.clone(), v.clone())).or_default() += 1;
                }
            }
        }
        for t in &anti_terms {
            if t.matches(existing)
                && let Some(v) = node_labels.get(&t.key)
            {
                *anti_counts.entry((t.key.clone(), v.clone())).or_default() += 1;
            }
        }
        let theirs = existing
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
        for term in theirs.into_iter().flatten() {
            let t = Term::of(term, namespace_of(existing));
            if t.matches(pod)
                && let Some(v) = node_labels.get(&t.key)
            {
                *existing_anti_counts
                    .entry((t.key.clone(), v.clone()))
                    .or_default() += 1;
            }
        }
    }
    let first_of_its_group = affinity_counts.is_empty() && affinity_terms.iter().all(|t| t.matches(pod));

    // PodTopologySpread's pre-filter (see `spread_counts`).
    let constraints: Vec<&TopologySpreadConstraint> = spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
        .collect();
    let domain_counts = spread_counts(pod, state, &constraints, release);

    // VolumeBinding's PreFilter.
    let claims = volumes::needs(pod, state.storage)?;

    let tolerations = spec.tolerations.clone().unwrap_or_default();
    let mut verdict = Verdict::default();
    for node in &state.nodes {
        let name = name_of(node);
        let labels = labels_of_node(node);
        let mut fails = BTreeSet::new();
        let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        if unschedulable && !tolerated(&tolerations, UNSCHEDULABLE_TAINT, "", "NoSchedule") {
            fails.insert(Rule::Cordon);
        }
        let untolerated = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|taints| {
                taints.iter().any(|t| {
                    matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                        && !tolerated(
                            &tolerations,
                            &t.key,
                            t.value.as_deref().unwrap_or_default(),
                            &t.effect,
                        )
                })
            });
        if untolerated {
            fails.insert(Rule::Taints);
        }
        if !selector_matches_node(pod, node) {
            fails.insert(Rule::NodeSelector);
        }
        if !affinity_matches_node(pod, node) {
            fails.insert(Rule::NodeAffinity);
        }
        if !fits(&request, node, state.pods_on(name))? {
            fails.insert(Rule::Resources);
        }
        if !wanted_ports.is_empty() {
            let used: Vec<HostPort> = state.pods_on(name).flat_map(host_ports).collect();
            if wanted_ports.iter().any(|w| used.iter().any(|u| w.conflicts(u))) {
                fails.insert(Rule::HostPorts);
            }
        }
        if !spread_allows(pod, node, &constraints, &domain_counts) {
            fails.insert(Rule::TopologySpread);
        }
        if !affinity_terms.is_empty() {
            let has_keys = affinity_terms.iter().all(|t| labels.contains_key(&t.key));
            let counted = affinity_terms.iter().all(|t| {
                labels.get(&t.key).is_some_and(|v| {
                    affinity_counts
                        .get(&(t.key.clone(), v.clone()))
                        .copied()
                        .unwrap_or(0)
                        > 0
                })
            });
            if !has_keys || !(counted || first_of_its_group) {
                fails.insert(Rule::PodAffinity);
            }
        }
        if anti_terms.iter().any(|t| {
            labels
                .get(&t.key)
                .is_some_and(|v| anti_counts.get(&(t.key.clone(), v.clone())).copied().unwrap_or(0) > 0)
        }) {
            fails.insert(Rule::PodAntiAffinity);
        }
        if labels.iter().any(|(k, v)| {
            existing_anti_counts
                .get(&(k.clone(), v.clone()))
                .copied()
                .unwrap_or(0)
                > 0
        }) {
            fails.insert(Rule::ExistingAntiAffinity);
        }
        fails.extend(volumes::node_failures(&claims, node, state.storage)?);
        verdict.nodes.insert(name.to_owned(), fails);
    }
    Ok(verdict)
}

/// Matching pods per topology pair, over the domains of the eligible nodes.
fn spread_counts(
    pod: &Pod,
    state: &State<'_>,
    constraints: &[&TopologySpreadConstraint],
    release: Release,
) -> HashMap<(String, String), i64> {
    let mut counts: HashMap<(String, String), i64> = HashMap::new();
    if constraints.is_empty() {
        return counts;
    }
    let eligible = |node: &Node| {
        let labels = labels_of_node(node);
        selector_matches_node(pod, node)
            && affinity_matches_node(pod, node)
            && constraints.iter().all(|c| labels.contains_key(&c.topology_key))
    };
    for node in &state.nodes {
        if eligible(node) {
            let labels = labels_of_node(node);
            for c in constraints {
                counts.insert((c.topology_key.clone(), labels[&c.topology_key].clone()), 0);
            }
        }
    }
    let namespace = namespace_of(pod);
    for node in &state.nodes {
        if release == Release::Current && !eligible(node) {
            continue;
        }
        let labels = labels_of_node(node);
        for c in constraints {
            // A node without the key is the pair (key, ""), which no eligible node has.
            let value = labels.get(&c.topology_key).cloned().unwrap_or_default();
            let Some(count) = counts.get_mut(&(c.topology_key.clone(), value)) else {
                continue;
            };
            let matching = state
                .pods_on(name_of(node))
                .filter(|p| {
                    namespace_of(p) == namespace
                        && p.metadata.deletion_timestamp.is_none()
                        && label_selector_matches(c.label_selector.as_ref(), labels_of_pod(p))
                })
                .count();
            *count += i64::try_from(matching).unwrap_or(i64::MAX);
        }
    }
    counts
}

/// The spread filter on one node: it needs every key, and `matching pods in its domain + (1 if the pod
/// matches the selector itself) - the minimum over domains` may not exceed `maxSkew`. With no eligible
/// domain at all the minimum stays at v1.20.2's initial `MaxInt32` and the node passes.
fn spread_allows(
    pod: &Pod,
    node: &Node,
    constraints: &[&TopologySpreadConstraint],
    counts: &HashMap<(String, String), i64>,
) -> bool {
    let labels = labels_of_node(node);
    constraints.iter().all(|c| {
        let Some(value) = labels.get(&c.topology_key) else {
            return false;
        };
        let own = i64::from(label_selector_matches(
            c.label_selector.as_ref(),
            labels_of_pod(pod),
        ));
        let here = counts
            .get(&(c.topology_key.clone(), value.clone()))
            .copied()
            .unwrap_or(0);
        let min = counts
            .iter()
            .filter(|((k, _), _)| *k == c.topology_key)
            .map(|(_, n)| *n)
            .min()
            .unwrap_or(i64::from(i32::MAX));
        here + own - min <= i64::from(c.max_skew)
    })
}

/// A pod affinity term with its namespaces resolved.
struct Term {
    namespaces: BTreeSet<String>,
    selector: Option<LabelSelector>,
    key: String,
}

impl Term {
    fn of(term: &PodAffinityTerm, own_namespace: &str) -> Self {
        let mut namespaces: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
        if namespaces.is_empty() {
            namespaces.insert(own_namespace.to_owned());
        }
        Self {
            namespaces,
            selector: term.label_selector.clone(),
            key: term.topology_key.clone(),
        }
    }

    fn matches(&self, pod: &Pod) -> bool {
        self.namespaces.contains(namespace_of(pod))
            && label_selector_matches(self.selector.as_ref(), labels_of_pod(pod))
    }
}

/// A `metav1.LabelSelector` against labels: no selector matches nothing, an empty one everything.
#[must_use]
pub fn label_selector_matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    pairs
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

fn selector_matches_node(pod: &Pod, node: &Node) -> bool {
    let labels = labels_of_node(node);
    pod.spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

fn affinity_matches_node(pod: &Pod, node: &Node) -> bool {
    let Some(required) = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    else {
        return true;
    };
    required
        .node_selector_terms
        .iter()
        .any(|t| node_term_matches(t, node))
}

fn node_term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = labels_of_node(node);
    expressions
        .iter()
        .all(|r| node_requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            // Only metadata.name, and only with one value.
            let values = r.values.as_deref().unwrap_or_default();
            r.key == "metadata.name"
                && values.len() == 1
                && match r.operator.as_str() {
                    "In" => values[0] == name_of(node),
                    "NotIn" => values[0] != name_of(node),
                    _ => false,
                }
        })
}

/// One node-selector requirement against the label's value (`None`: the node lacks the key).
#[must_use]
pub fn node_requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => !values.is_empty() && value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !values.is_empty() && value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => values.is_empty() && value.is_some(),
        "DoesNotExist" => values.is_empty() && value.is_none(),
        "Gt" | "Lt" => {
            let (Some(bound), true) = (values.first().and_then(|v| number(v)), values.len() == 1) else {
                return false;
            };
            match value.and_then(number) {
                Some(v) if r.operator == "Gt" => v > bound,
                Some(v) => v < bound,
                None => false,
            }
        }
        _ => false,
    }
}

/// `v1helper.TolerationsTolerateTaint`.
fn tolerated(tolerations: &[Toleration], key: &str, value: &str, effect: &str) -> bool {
    tolerations.iter().any(|t| {
        let t_effect = t.effect.as_deref().unwrap_or_default();
        let t_key = t.key.as_deref().unwrap_or_default();
        if !t_effect.is_empty() && t_effect != effect {
            return false;
        }
        if !t_key.is_empty() && t_key != key {
            return false;
        }
        match t.operator.as_deref().unwrap_or_default() {
            "" | "Equal" => t.value.as_deref().unwrap_or_default() == value,
            "Exists" => true,
            _ => false,
        }
    })
}

/// Resource amounts in milli-units (cpu in millicores, memory in millibytes), by resource name.
type Amounts = BTreeMap<String, i128>;

/// A pod's request: the sum over containers, at least each init container's, plus overhead.
fn pod_request(pod: &Pod) -> anyhow::Result<Amounts> {
    let mut sum = Amounts::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(sum);
    };
    let requests = |c: &k8s_openapi::api::core::v1::Container| -> anyhow::Result<Amounts> {
        let mut out = Amounts::new();
        if let Some(r) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
            for (k, q) in r {
                out.insert(
                    k.clone(),
                    milli(&q.0).with_context(|| format!("{k} of {}", c.name))?,
                );
            }
        }
        Ok(out)
    };
    for c in &spec.containers {
        for (k, v) in requests(c)? {
            *sum.entry(k).or_default() += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in requests(c)? {
            let e = sum.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    for (k, q) in spec.overhead.iter().flatten() {
        *sum.entry(k.clone()).or_default() += milli(&q.0)?;
    }
    Ok(sum)
}

fn fits<'p>(request: &Amounts, node: &Node, pods: impl Iterator<Item = &'p Pod>) -> anyhow::Result<bool> {
    let mut allocatable = Amounts::new();
    for (k, q) in node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .into_iter()
        .flatten()
    {
        allocatable.insert(k.clone(), milli(&q.0)?);
    }
    let mut used = Amounts::new();
    let mut count: i128 = 0;
    for p in pods {
        count += 1;
        for (k, v) in pod_request(p)? {
            *used.entry(k).or_default() += v;
        }
    }
    let allowed = allocatable.get("pods").copied().unwrap_or(0);
    if (count + 1) * 1000 > allowed {
        return Ok(false);
    }
    Ok(request
        .iter()
        .filter(|(_, v)| **v > 0)
        .all(|(k, v)| allocatable.get(k).copied().unwrap_or(0) >= v + used.get(k).copied().unwrap_or(0)))
}

/// A Kubernetes quantity in thousandths of its unit, rounded up (`"500m"` -> 500, `"2"` -> 2000,
/// `"1Gi"` -> 1024^3 * 1000).
///
/// # Errors
/// When it is not a plain decimal number with an optional binary or decimal suffix.
pub fn milli(quantity: &str) -> anyhow::Result<i128> {
    let split = quantity
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let (scale_num, scale_den): (i128, i128) = match suffix {
        "" => (1000, 1),
        "m" => (1, 1),
        "k" => (1000 * 1000, 1),
        "M" => (1000 * 1_000_000, 1),
        "G" => (1000 * 1_000_000_000, 1),
        "T" => (1000 * 1_000_000_000_000, 1),
        "Ki" => (1000 << 10, 1),
        "Mi" => (1000 << 20, 1),
        "Gi" => (1000 << 30, 1),
        "Ti" => (1000 << 40, 1),
        _ => bail!("quantity {quantity:?}: unknown suffix {suffix:?}"),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.len() > 9 {
        bail!("quantity {quantity:?} is not a number this checker reads");
    }
    let digits: i128 = format!("{whole}{fraction}")
        .parse()
        .with_context(|| format!("quantity {quantity:?}"))?;
    let den = 10_i128.pow(u32::try_from(fraction.len()).unwrap_or(0)) * scale_den;
    let num = digits * scale_num;
    Ok((num + den - 1) / den)
}

/// A host port a pod's container asks for, with the defaults applied (`0.0.0.0`, TCP).
#[derive(Clone, Debug, PartialEq, Eq)]
struct HostPort {
    ip: String,
    protocol: String,
    port: i32,
}

impl HostPort {
    /// `HostPortInfo.CheckConflict`.
    fn conflicts(&self, used: &HostPort) -> bool {
        self.port == used.port
            && self.protocol == used.protocol
            && (self.ip == "0.0.0.0" || used.ip == "0.0.0.0" || self.ip == used.ip)
    }
}

fn host_ports(pod: &Pod) -> Vec<HostPort> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            Some(HostPort {
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".to_owned()),
                protocol: p
                    .protocol
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "TCP".to_owned()),
                port,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
mod volumes;

pub use volumes::{Storage, binding_faults, pod_claims};
