//! What a pod asks of the pods around it: inter-pod affinity and anti-affinity, topology spread and host
//! ports, with the counts that answer them kept current as pods come, move and go.
//!
//! Semantics follow kube-scheduler's InterPodAffinity, PodTopologySpread and NodePorts plugins:
//! - a term selects pods by labels in a set of namespaces (its pod's own namespace unless it lists
//!   others or selects them by label) and groups nodes by the value of its `topologyKey`;
//! - an affinity term is met on a node when a selected pod runs in the node's domain; anti-affinity
//!   when none does; and a placed pod's required anti-affinity keeps matching newcomers out of its
//!   domain (the symmetric rule);
//! - a spread constraint counts selected pods per domain over the nodes the pod could use, terminating
//!   pods left out;
//! - two host ports conflict on the same port and protocol when either binds every address or both bind
//!   the same one.
//!
//! Rules are interned (`PodRulesId`), their terms too (`TermId`), reference-counted by the pods that
//! carry them and dropped with the last one, so per-job selectors do not pile up. For each live term the
//! book counts, per node and per domain, the pods it selects and the pods that carry it as required
//! anti-affinity. [`RuleBook::contribute`] is called from the one place a pod's placement changes
//! (`Cluster::contribute`), so the counts are exact at every step of a session, rollbacks included.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use super::ids::NodeId;

/// Pod or namespace labels.
pub type Labels = BTreeMap<String, String>;

/// Pods' labels, one shared copy per distinct set: the pods of a Job, a ReplicaSet or a gang usually
/// carry the same labels, and a copy per pod was a third of the model at 50,000 pods. A set is dropped
/// with the last pod that carries it ([`LabelBook::release`]).
#[derive(Clone, Debug, Default)]
pub struct LabelBook {
    sets: HashSet<Arc<Labels>>,
    /// Size at which sets no pod holds any more are swept out (see [`LabelBook::intern`]).
    sweep_at: usize,
}

impl LabelBook {
    /// The shared copy of `labels`.
    pub fn intern(&mut self, labels: Labels) -> Arc<Labels> {
        if let Some(shared) = self.sets.get(&labels) {
            return Arc::clone(shared);
        }
        // A set released while another reference was alive (a clone of the model) stays behind; sweep
        // such sets whenever the book has doubled.
        if self.sets.len() >= self.sweep_at {
            self.sets.retain(|set| Arc::strong_count(set) > 1);
            self.sweep_at = (2 * self.sets.len()).max(1024);
        }
        let shared = Arc::new(labels);
        self.sets.insert(Arc::clone(&shared));
        shared
    }

    /// A pod's labels dropped: the set goes with its last holder.
    pub fn release(&mut self, labels: Arc<Labels>) {
        // Held here and by `labels` alone: no pod carries it any more.
        if Arc::strong_count(&labels) <= 2 {
            self.sets.remove(&*labels);
        }
    }

    /// Whether `labels` is this book's shared copy.
    #[must_use]
    pub fn holds(&self, labels: &Arc<Labels>) -> bool {
        self.sets
            .get(&**labels)
            .is_some_and(|shared| Arc::ptr_eq(shared, labels))
    }

    /// Sets held here alone that no pointer of `carried` is (sets no pod carries any more).
    #[must_use]
    pub fn orphans(&self, carried: &HashSet<*const Labels>) -> usize {
        self.sets
            .iter()
            .filter(|set| Arc::strong_count(set) == 1 && !carried.contains(&Arc::as_ptr(set)))
            .count()
    }

    /// Distinct label sets held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// Whether no set is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}

/// The topology key of a node's own name, where a domain is one node.
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";

/// A label selector operator.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOp {
    /// Value in the set.
    In(Vec<String>),
    /// Label absent or value not in the set.
    NotIn(Vec<String>),
    /// Label present.
    Exists,
    /// Label absent.
    DoesNotExist,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorRequirement {
    /// Label key.
    pub key: String,
    /// Operator and values.
    pub op: SelectorOp,
}

impl SelectorRequirement {
    /// `key In (value)`, as `matchLabels` reads.
    #[must_use]
    pub fn equals(key: &str, value: &str) -> Self {
        Self {
            key: key.to_owned(),
            op: SelectorOp::In(vec![value.to_owned()]),
        }
    }

    fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match (&self.op, value) {
            (SelectorOp::In(values), Some(v)) => values.contains(v),
            (SelectorOp::NotIn(values), Some(v)) => !values.contains(v),
            (SelectorOp::Exists, Some(_))
            | (SelectorOp::NotIn(_), None)
            | (SelectorOp::DoesNotExist, None) => true,
            (SelectorOp::In(_) | SelectorOp::Exists, None) | (SelectorOp::DoesNotExist, Some(_)) => false,
        }
    }
}

/// A label selector: every requirement holds. An empty selector selects everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct LabelSelector {
    /// Requirements, sorted.
    pub requirements: Vec<SelectorRequirement>,
}

impl LabelSelector {
    /// A selector of these requirements (sorted, so equal selectors intern once).
    #[must_use]
    pub fn new(mut requirements: Vec<SelectorRequirement>) -> Self {
        requirements.sort();
        requirements.dedup();
        Self { requirements }
    }

    /// Whether the labels satisfy every requirement.
    #[must_use]
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// A `key = value` every selected pod carries, to index the selector by.
    fn equality(&self) -> Option<(&str, &str)> {
        self.requirements.iter().find_map(|r| match &r.op {
            SelectorOp::In(values) if values.len() == 1 => Some((r.key.as_str(), values[0].as_str())),
            _ => None,
        })
    }
}

/// The namespaces a term looks in, resolved against its pod's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespaceScope {
    /// Listed namespaces, sorted (the pod's own when it names none and selects none).
    pub names: Vec<String>,
    /// Namespaces selected by their labels (`namespaceSelector`; empty selects all).
    pub selector: Option<LabelSelector>,
}

impl NamespaceScope {
    /// Only this namespace.
    #[must_use]
    pub fn only(namespace: &str) -> Self {
        Self {
            names: vec![namespace.to_owned()],
            selector: None,
        }
    }

    fn contains(&self, namespace: &str, namespace_labels: Option<&Labels>) -> bool {
        self.names.iter().any(|n| n == namespace)
            || self.selector.as_ref().is_some_and(|s| {
                let empty = Labels::new();
                s.matches(namespace_labels.unwrap_or(&empty))
            })
    }
}

/// A selection of pods: by labels, in namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Selection {
    /// Pod selector; `None` (a term without `labelSelector`) selects no pod.
    pub selector: Option<LabelSelector>,
    /// Namespaces of the selected pods.
    pub namespaces: NamespaceScope,
}

impl Selection {
    fn selects(&self, namespace: &str, labels: &Labels, namespace_labels: Option<&Labels>) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
            && self.namespaces.contains(namespace, namespace_labels)
    }
}

/// Which pods a term selects and how it groups nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodTerm {
    /// Pod selector; `None` (a term without `labelSelector`) selects no pod.
    pub selector: Option<LabelSelector>,
    /// Namespaces of the selected pods.
    pub namespaces: NamespaceScope,
    /// Node label whose value is the domain.
    pub topology_key: String,
    /// Selections a pod must also be in to count: the other terms of a pod's required affinity
    /// (kube-scheduler counts a pod for required affinity only where it matches every term).
    pub also: Vec<Selection>,
}

impl PodTerm {
    /// A term of one selection.
    #[must_use]
    pub fn new(selector: Option<LabelSelector>, namespaces: NamespaceScope, topology_key: &str) -> Self {
        Self {
            selector,
            namespaces,
            topology_key: topology_key.to_owned(),
            also: Vec::new(),
        }
    }

    /// Whether a pod with these labels in this namespace is selected.
    #[must_use]
    pub fn selects(&self, namespace: &str, labels: &Labels, namespace_labels: Option<&Labels>) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
            && self.namespaces.contains(namespace, namespace_labels)
            && self
                .also
                .iter()
                .all(|a| a.selects(namespace, labels, namespace_labels))
    }

    /// Whether some selection of the term selects namespaces by label.
    fn selects_namespaces_by_label(&self) -> bool {
        self.namespaces.selector.is_some() || self.also.iter().any(|a| a.namespaces.selector.is_some())
    }
}

/// Makes a pod's required affinity terms count only pods that match all of them, as kube-scheduler
/// counts them: each term carries the others' selections.
pub fn conjoin(terms: &mut [PodTerm]) {
    let selections: Vec<Selection> = terms
        .iter()
        .map(|t| Selection {
            selector: t.selector.clone(),
            namespaces: t.namespaces.clone(),
        })
        .collect();
    for (i, t) in terms.iter_mut().enumerate() {
        t.also = selections
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| s.clone())
            .collect();
    }
}

/// Id of an interned [`PodTerm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TermId(pub u32);

/// Whether a spread constraint's node filter is applied when counting domains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Inclusion {
    /// Only nodes that pass the filter count.
    Honor,
    /// Every node counts.
    Ignore,
}

/// A topology spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Spread<T> {
    /// The pods counted and the domains (the pod's own namespace).
    pub term: T,
    /// Largest allowed difference between a domain's count and the smallest.
    pub max_skew: u32,
    /// `DoNotSchedule` (a filter) rather than `ScheduleAnyway` (a preference).
    pub hard: bool,
    /// With fewer eligible domains than this, the smallest count is taken as zero.
    pub min_domains: Option<u32>,
    /// `nodeAffinityPolicy` (default Honor): count only nodes the pod's node selector and affinity admit.
    pub node_affinity: Inclusion,
    /// `nodeTaintsPolicy` (default Ignore): count only nodes whose taints the pod tolerates.
    pub node_taints: Inclusion,
}

/// A transport protocol of a host port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP (the default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

/// A port a pod binds on its node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// Address; `None` binds every address (`hostIP` empty or `0.0.0.0`).
    pub ip: Option<String>,
    /// Protocol.
    pub protocol: Protocol,
    /// Port, 1-65535.
    pub port: u16,
}

impl HostPort {
    /// Whether two pods binding these could not share a node.
    #[must_use]
    pub fn conflicts(&self, other: &Self) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip.is_none() || other.ip.is_none() || self.ip == other.ip)
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let protocol = match self.protocol {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        };
        match &self.ip {
            Some(ip) => write!(f, "{ip}:{}/{protocol}", self.port),
            None => write!(f, "{}/{protocol}", self.port),
        }
    }
}

/// A pod's rules about other pods; `T` is a [`PodTerm`] as declared, a [`TermId`] once interned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rules<T> {
    /// Required pod affinity: every term met.
    pub affinity: Vec<T>,
    /// Required pod anti-affinity: no term's pods in the domain.
    pub anti_affinity: Vec<T>,
    /// Preferred pod affinity, with weights 1-100.
    pub preferred_affinity: Vec<(i32, T)>,
    /// Preferred pod anti-affinity, with weights 1-100.
    pub preferred_anti_affinity: Vec<(i32, T)>,
    /// Topology spread constraints.
    pub spread: Vec<Spread<T>>,
    /// Host ports.
    pub host_ports: Vec<HostPort>,
}

impl<T> Default for Rules<T> {
    fn default() -> Self {
        Self {
            affinity: Vec::new(),
            anti_affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            preferred_anti_affinity: Vec::new(),
            spread: Vec::new(),
            host_ports: Vec::new(),
        }
    }
}

impl<T> Rules<T> {
    /// No rule at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.affinity.is_empty()
            && self.anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
            && self.spread.is_empty()
            && self.host_ports.is_empty()
    }

    /// Has a preference (a score, not a filter).
    #[must_use]
    pub fn has_preferences(&self) -> bool {
        !self.preferred_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
            || self.spread.iter().any(|s| !s.hard)
    }

    /// Every term, in any role.
    fn terms(&self) -> impl Iterator<Item = &T> {
        self.affinity
            .iter()
            .chain(&self.anti_affinity)
            .chain(self.preferred_affinity.iter().map(|(_, t)| t))
            .chain(self.preferred_anti_affinity.iter().map(|(_, t)| t))
            .chain(self.spread.iter().map(|s| &s.term))
    }
}

/// Rules as a pod declares them.
pub type RulesSpec = Rules<PodTerm>;
/// Rules as the model keeps them.
pub type PodRules = Rules<TermId>;

/// Id of an interned [`PodRules`]. `PodRulesId(0)` is "no rules" and never goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PodRulesId(pub u32);

/// Pods present in a place: all of them, and those of them on their way out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Pods holding or reserving room there, terminating ones included.
    pub present: i32,
    /// Of those, terminating.
    pub releasing: i32,
}

impl Count {
    /// Pods that stay (present and not terminating).
    #[must_use]
    pub fn staying(self) -> i32 {
        self.present - self.releasing
    }

    fn add(&mut self, releasing: bool, sign: i32) {
        self.present += sign;
        if releasing {
            self.releasing += sign;
        }
    }
}

/// Pods counted per node and per domain of one term.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// By node (only nodes with a pod counted).
    pub per_node: HashMap<NodeId, Count>,
    /// By domain (the node's value of the term's topology key; nodes without it are not in a domain).
    pub per_domain: HashMap<String, Count>,
    /// Over every domain.
    pub in_domains: Count,
}

impl Counts {
    fn add(&mut self, node: NodeId, domain: Option<&str>, releasing: bool, sign: i32) {
        let entry = self.per_node.entry(node).or_default();
        entry.add(releasing, sign);
        if entry.present == 0 {
            self.per_node.remove(&node);
        }
        if let Some(domain) = domain {
            let entry = self.per_domain.entry(domain.to_owned()).or_default();
            entry.add(releasing, sign);
            if entry.present == 0 {
                self.per_domain.remove(domain);
            }
            self.in_domains.add(releasing, sign);
        }
    }

    /// The count in a domain.
    #[must_use]
    pub fn in_domain(&self, domain: &str) -> Count {
        self.per_domain.get(domain).copied().unwrap_or_default()
    }

    /// The count on a node.
    #[must_use]
    pub fn on_node(&self, node: NodeId) -> Count {
        self.per_node.get(&node).copied().unwrap_or_default()
    }
}

/// One interned term and its counts.
#[derive(Clone, Debug)]
pub struct TermEntry {
    /// The term.
    pub term: PodTerm,
    /// Interned rules that use it.
    users: u32,
    /// Pods the term selects.
    pub selected: Counts,
    /// Pods carrying it as required anti-affinity.
    pub carriers: Counts,
    /// Nodes whose selected count changed since [`RuleBook::start_session`] (in order, repeats
    /// allowed), so a view restricted to some nodes catches up without a full recount.
    log: Vec<NodeId>,
    /// Bumped whenever `log` is cut short; a view built at another generation rebuilds.
    generation: u64,
}

/// Longest a term's change log grows before it is cut (views then rebuild).
const MAX_LOG: usize = 100_000;

impl TermEntry {
    /// The change log and its generation.
    #[must_use]
    pub fn changes(&self) -> (u64, &[NodeId]) {
        (self.generation, &self.log)
    }

    fn record(&mut self, node: NodeId) {
        if self.log.len() >= MAX_LOG {
            self.log.clear();
            self.generation += 1;
        }
        self.log.push(node);
    }
}

#[derive(Clone, Debug)]
struct RulesEntry {
    rules: PodRules,
    /// Pods with these rules.
    users: u32,
}

/// What [`RuleBook::contribute`] needs to know about a pod.
#[derive(Clone, Copy, Debug)]
pub struct PodFacts<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Labels.
    pub labels: &'a Labels,
    /// Rules.
    pub rules: PodRulesId,
}

/// Interned rules and terms with their counts.
#[derive(Clone, Debug)]
pub struct RuleBook {
    rules: Vec<Option<RulesEntry>>,
    rules_index: HashMap<PodRules, PodRulesId>,
    free_rules: Vec<PodRulesId>,
    terms: Vec<Option<TermEntry>>,
    term_index: HashMap<PodTerm, TermId>,
    free_terms: Vec<TermId>,
    /// Live terms by a `key = value` their selector requires (key, then value), so a pod is checked only
    /// against terms it could match.
    by_label: HashMap<String, HashMap<String, Vec<TermId>>>,
    /// Live terms without such a requirement.
    unindexed: Vec<TermId>,
    /// Namespace labels, for namespace selectors.
    namespace_labels: HashMap<String, Labels>,
    /// Live terms with a namespace selector (their counts depend on namespace labels).
    namespace_selecting: usize,
}

impl Default for RuleBook {
    fn default() -> Self {
        let none = PodRules::default();
        Self {
            rules: vec![Some(RulesEntry {
                rules: none.clone(),
                users: 0,
            })],
            rules_index: HashMap::from([(none, PodRulesId(0))]),
            free_rules: Vec::new(),
            terms: Vec::new(),
            term_index: HashMap::new(),
            free_terms: Vec::new(),
            by_label: HashMap::new(),
            unindexed: Vec::new(),
            namespace_labels: HashMap::new(),
            namespace_selecting: 0,
        }
    }
}

impl RuleBook {
    /// The rules of an id.
    #[must_use]
    pub fn rules(&self, id: PodRulesId) -> &PodRules {
        &self
            .rules
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .expect("invariant: rules ids held by pods are live")
            .rules
    }

    /// A live term.
    #[must_use]
    pub fn term(&self, id: TermId) -> &TermEntry {
        self.terms
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .expect("invariant: term ids held by rules are live")
    }

    /// The rules of an id as a pod would declare them.
    #[must_use]
    pub fn declared(&self, id: PodRulesId) -> RulesSpec {
        let r = self.rules(id);
        let t = |id: &TermId| self.term(*id).term.clone();
        RulesSpec {
            affinity: r.affinity.iter().map(t).collect(),
            anti_affinity: r.anti_affinity.iter().map(t).collect(),
            preferred_affinity: r.preferred_affinity.iter().map(|(w, id)| (*w, t(id))).collect(),
            preferred_anti_affinity: r
                .preferred_anti_affinity
                .iter()
                .map(|(w, id)| (*w, t(id)))
                .collect(),
            spread: r
                .spread
                .iter()
                .map(|s| Spread {
                    term: t(&s.term),
                    max_skew: s.max_skew,
                    hard: s.hard,
                    min_domains: s.min_domains,
                    node_affinity: s.node_affinity,
                    node_taints: s.node_taints,
                })
                .collect(),
            host_ports: r.host_ports.clone(),
        }
    }

    /// Whether some live pod requires an anti-affinity term (one the symmetric rule looks at).
    #[must_use]
    pub fn has_anti_affinity_terms(&self) -> bool {
        self.rules
            .iter()
            .flatten()
            .any(|r| !r.rules.anti_affinity.is_empty())
    }

    /// Terms some live pod requires as anti-affinity (the ones the symmetric rule looks at).
    #[must_use]
    pub fn anti_affinity_terms(&self) -> Vec<TermId> {
        let mut terms: Vec<TermId> = self
            .rules
            .iter()
            .flatten()
            .flat_map(|r| r.rules.anti_affinity.iter().copied())
            .collect();
        terms.sort_unstable();
        terms.dedup();
        terms
    }

    /// Live terms with their ids.
    pub fn live_terms(&self) -> impl Iterator<Item = (TermId, &TermEntry)> {
        self.terms.iter().enumerate().filter_map(|(i, t)| {
            t.as_ref()
                .map(|t| (TermId(u32::try_from(i).expect("invariant: < 2^32 terms")), t))
        })
    }

    /// Number of live interned rules (the empty one included) and live terms.
    #[must_use]
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.rules.iter().filter(|r| r.is_some()).count(),
            self.terms.iter().filter(|t| t.is_some()).count(),
        )
    }

    /// Namespaces whose labels are known.
    #[must_use]
    pub fn namespace_names(&self) -> Vec<String> {
        self.namespace_labels.keys().cloned().collect()
    }

    /// Labels of a namespace, when known.
    #[must_use]
    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespace_labels.get(namespace)
    }

    /// Whether a term selects a pod.
    #[must_use]
    pub fn selects(&self, term: TermId, namespace: &str, labels: &Labels) -> bool {
        self.term(term)
            .term
            .selects(namespace, labels, self.namespace_labels.get(namespace))
    }

    /// Interns a pod's declared rules and takes a reference on them; returns the id and the terms
    /// that are new (their counts must be filled from the pods already placed).
    pub fn acquire(&mut self, spec: RulesSpec) -> (PodRulesId, Vec<TermId>) {
        if spec.is_empty() {
            return (PodRulesId(0), Vec::new());
        }
        let mut fresh = Vec::new();
        let mut intern = |book: &mut Self, term: PodTerm| -> TermId {
            let (id, new) = book.intern_term(term);
            if new {
                fresh.push(id);
            }
            id
        };
        let rules = PodRules {
            affinity: spec.affinity.into_iter().map(|t| intern(self, t)).collect(),
            anti_affinity: spec.anti_affinity.into_iter().map(|t| intern(self, t)).collect(),
            preferred_affinity: spec
                .preferred_affinity
                .into_iter()
                .map(|(w, t)| (w, intern(self, t)))
                .collect(),
            preferred_anti_affinity: spec
                .preferred_anti_affinity
                .into_iter()
                .map(|(w, t)| (w, intern(self, t)))
                .collect(),
            spread: spec
                .spread
                .into_iter()
                .map(|s| Spread {
                    term: intern(self, s.term),
                    max_skew: s.max_skew,
                    hard: s.hard,
                    min_domains: s.min_domains,
                    node_affinity: s.node_affinity,
                    node_taints: s.node_taints,
                })
                .collect(),
            host_ports: spec.host_ports,
        };
        if let Some(id) = self.rules_index.get(&rules).copied() {
            // The terms were referenced again while interning; an existing entry holds them once.
            for t in rules.terms() {
                self.release_term(*t);
            }
            self.entry_mut(id).users += 1;
            return (id, fresh);
        }
        let entry = RulesEntry {
            rules: rules.clone(),
            users: 1,
        };
        let slot = store(
            &mut self.rules,
            self.free_rules.pop().map(|i| i.0 as usize),
            entry,
        );
        let id = PodRulesId(u32::try_from(slot).expect("invariant: < 2^32 rule sets"));
        self.rules_index.insert(rules, id);
        (id, fresh)
    }

    /// Drops a pod's reference on its rules; the last reference frees them and terms no rule uses.
    pub fn release(&mut self, id: PodRulesId) {
        if id == PodRulesId(0) {
            return;
        }
        let entry = self.entry_mut(id);
        entry.users -= 1;
        if entry.users > 0 {
            return;
        }
        let Some(entry) = self.rules[id.0 as usize].take() else {
            return;
        };
        self.rules_index.remove(&entry.rules);
        self.free_rules.push(id);
        for t in entry.rules.terms() {
            self.release_term(*t);
        }
    }

    fn entry_mut(&mut self, id: PodRulesId) -> &mut RulesEntry {
        self.rules
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .expect("invariant: rules ids held by pods are live")
    }

    fn intern_term(&mut self, term: PodTerm) -> (TermId, bool) {
        if let Some(id) = self.term_index.get(&term).copied() {
            if let Some(entry) = self.terms[id.0 as usize].as_mut() {
                entry.users += 1;
            }
            return (id, false);
        }
        let entry = TermEntry {
            term: term.clone(),
            users: 1,
            selected: Counts::default(),
            carriers: Counts::default(),
            log: Vec::new(),
            generation: 0,
        };
        let slot = store(
            &mut self.terms,
            self.free_terms.pop().map(|i| i.0 as usize),
            entry,
        );
        let id = TermId(u32::try_from(slot).expect("invariant: < 2^32 terms"));
        match term.selector.as_ref().and_then(LabelSelector::equality) {
            Some((k, v)) => self
                .by_label
                .entry(k.to_owned())
                .or_default()
                .entry(v.to_owned())
                .or_default()
                .push(id),
            None => self.unindexed.push(id),
        }
        if term.selects_namespaces_by_label() {
            self.namespace_selecting += 1;
        }
        self.term_index.insert(term, id);
        (id, true)
    }

    fn release_term(&mut self, id: TermId) {
        let Some(entry) = self.terms.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        entry.users -= 1;
        if entry.users > 0 {
            return;
        }
        let Some(entry) = self.terms[id.0 as usize].take() else {
            return;
        };
        match entry.term.selector.as_ref().and_then(LabelSelector::equality) {
            Some((k, v)) => {
                if let Some(values) = self.by_label.get_mut(k) {
                    if let Some(list) = values.get_mut(v) {
                        list.retain(|t| *t != id);
                        if list.is_empty() {
                            values.remove(v);
                        }
                    }
                    if values.is_empty() {
                        self.by_label.remove(k);
                    }
                }
            }
            None => self.unindexed.retain(|t| *t != id),
        }
        if entry.term.selects_namespaces_by_label() {
            self.namespace_selecting -= 1;
        }
        self.term_index.remove(&entry.term);
        self.free_terms.push(id);
    }

    /// Live terms that may select a pod with these labels (a superset; [`Self::selects`] decides).
    pub fn candidate_terms<'a>(&'a self, labels: &'a Labels) -> impl Iterator<Item = TermId> + 'a {
        labels
            .iter()
            .filter_map(|(k, v)| self.by_label.get(k).and_then(|values| values.get(v)))
            .flatten()
            .chain(&self.unindexed)
            .copied()
    }

    /// Adds (`sign = 1`) or removes (`-1`) a pod placed on a node to the counts of every term that
    /// selects it and of the anti-affinity terms it carries. Returns whether some term selects it (its
    /// arrival may satisfy a waiting pod's affinity or change a spread).
    pub fn contribute(
        &mut self,
        pod: PodFacts<'_>,
        node: NodeId,
        node_labels: &Labels,
        releasing: bool,
        sign: i32,
    ) -> bool {
        if self.term_index.is_empty() {
            return false;
        }
        let ns_labels = self.namespace_labels.get(pod.namespace);
        let selected: Vec<TermId> = self
            .candidate_terms(pod.labels)
            .filter(|t| self.term(*t).term.selects(pod.namespace, pod.labels, ns_labels))
            .collect();
        for t in &selected {
            if let Some(entry) = self.terms[t.0 as usize].as_mut() {
                let domain = node_labels.get(&entry.term.topology_key).map(String::as_str);
                entry.selected.add(node, domain, releasing, sign);
                entry.record(node);
            }
        }
        if pod.rules != PodRulesId(0) {
            let carried = self.rules(pod.rules).anti_affinity.clone();
            for t in carried {
                if let Some(entry) = self.terms[t.0 as usize].as_mut() {
                    let domain = node_labels.get(&entry.term.topology_key).map(String::as_str);
                    entry.carriers.add(node, domain, releasing, sign);
                }
            }
        }
        !selected.is_empty()
    }

    /// Counts a placed pod into the selected-pod counts of new terms only (filling them after
    /// [`Self::acquire`]).
    pub fn count_into(
        &mut self,
        terms: &[TermId],
        pod: PodFacts<'_>,
        node: NodeId,
        node_labels: &Labels,
        releasing: bool,
    ) {
        let ns_labels = self.namespace_labels.get(pod.namespace).cloned();
        for t in terms {
            if let Some(entry) = self.terms.get_mut(t.0 as usize).and_then(Option::as_mut)
                && entry.term.selects(pod.namespace, pod.labels, ns_labels.as_ref())
            {
                let domain = node_labels.get(&entry.term.topology_key).map(String::as_str);
                entry.selected.add(node, domain, releasing, 1);
                entry.record(node);
            }
        }
    }

    /// Starts a scheduling session: change logs restart empty (views are built per session).
    pub fn start_session(&mut self) {
        for entry in self.terms.iter_mut().flatten() {
            if !entry.log.is_empty() {
                entry.log.clear();
                entry.generation += 1;
            }
        }
    }

    /// Records a namespace's labels; returns whether counts must be rebuilt (some live term selects
    /// namespaces by label and the labels changed).
    pub fn set_namespace_labels(&mut self, namespace: &str, labels: Option<Labels>) -> bool {
        let changed = match &labels {
            Some(l) => self.namespace_labels.get(namespace) != Some(l),
            None => self.namespace_labels.contains_key(namespace),
        };
        match labels {
            Some(l) => {
                self.namespace_labels.insert(namespace.to_owned(), l);
            }
            None => {
                self.namespace_labels.remove(namespace);
            }
        }
        changed && self.namespace_selecting > 0
    }

    /// Zeroes every count (before recounting from the pods).
    pub fn clear_counts(&mut self) {
        for entry in self.terms.iter_mut().flatten() {
            entry.selected = Counts::default();
            entry.carriers = Counts::default();
            entry.log.clear();
            entry.generation += 1;
        }
    }
}

/// Puts `entry` in the freed slot if there is one, else in a new one; returns its index.
fn store<T>(slots: &mut Vec<Option<T>>, freed: Option<usize>, entry: T) -> usize {
    match freed {
        Some(i) => {
            slots[i] = Some(entry);
            i
        }
        None => {
            slots.push(Some(entry));
            slots.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_label_sets_are_one_copy_dropped_with_the_last_holder() {
        let mut book = LabelBook::default();
        let job = |name: &str| Labels::from([("job-name".to_owned(), name.to_owned())]);
        let a = book.intern(job("a"));
        let a2 = book.intern(job("a"));
        let b = book.intern(job("b"));
        assert!(Arc::ptr_eq(&a, &a2));
        assert!(book.holds(&a) && book.holds(&b));
        assert!(
            !book.holds(&Arc::new(job("a"))),
            "an equal set that is not the shared copy"
        );
        assert_eq!(book.len(), 2);
        book.release(a);
        assert_eq!(book.len(), 2, "a2 still carries it");
        book.release(a2);
        book.release(b);
        assert!(book.is_empty());
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn term(app: &str, key: &str) -> PodTerm {
        PodTerm::new(
            Some(LabelSelector::new(vec![SelectorRequirement::equals("app", app)])),
            NamespaceScope::only("ns"),
            key,
        )
    }

    #[test]
    fn selectors_follow_label_selector_semantics() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases = [
            (SelectorOp::In(vec!["web".into(), "db".into()]), "app", true),
            (SelectorOp::In(vec!["db".into()]), "app", false),
            (SelectorOp::NotIn(vec!["db".into()]), "app", true),
            (SelectorOp::NotIn(vec!["db".into()]), "missing", true),
            (SelectorOp::Exists, "tier", true),
            (SelectorOp::Exists, "missing", false),
            (SelectorOp::DoesNotExist, "missing", true),
            (SelectorOp::DoesNotExist, "tier", false),
        ];
        for (op, key, expected) in cases {
            let s = LabelSelector::new(vec![SelectorRequirement {
                key: key.into(),
                op: op.clone(),
            }]);
            assert_eq!(s.matches(&l), expected, "{key} {op:?}");
        }
        assert!(LabelSelector::default().matches(&l), "empty selects all");
        let no_selector = PodTerm {
            selector: None,
            ..term("web", HOSTNAME_KEY)
        };
        assert!(
            !no_selector.selects("ns", &l, None),
            "no selector selects nothing"
        );
        assert!(term("web", HOSTNAME_KEY).selects("ns", &l, None));
        assert!(!term("web", HOSTNAME_KEY).selects("other", &l, None));
        let by_label = PodTerm {
            namespaces: NamespaceScope {
                names: Vec::new(),
                selector: Some(LabelSelector::new(vec![SelectorRequirement::equals("team", "a")])),
            },
            ..term("web", HOSTNAME_KEY)
        };
        assert!(by_label.selects("x", &l, Some(&labels(&[("team", "a")]))));
        assert!(!by_label.selects("x", &l, Some(&labels(&[("team", "b")]))));
        assert!(!by_label.selects("x", &l, None));
    }

    #[test]
    fn host_ports_conflict_on_port_protocol_and_overlapping_address() {
        let p = |ip: Option<&str>, protocol, port| HostPort {
            ip: ip.map(str::to_owned),
            protocol,
            port,
        };
        assert!(p(None, Protocol::Tcp, 80).conflicts(&p(Some("10.0.0.1"), Protocol::Tcp, 80)));
        assert!(p(Some("10.0.0.1"), Protocol::Tcp, 80).conflicts(&p(Some("10.0.0.1"), Protocol::Tcp, 80)));
        assert!(!p(Some("10.0.0.1"), Protocol::Tcp, 80).conflicts(&p(Some("10.0.0.2"), Protocol::Tcp, 80)));
        assert!(!p(None, Protocol::Tcp, 80).conflicts(&p(None, Protocol::Udp, 80)));
        assert!(!p(None, Protocol::Tcp, 80).conflicts(&p(None, Protocol::Tcp, 81)));
        assert_eq!(p(None, Protocol::Udp, 53).to_string(), "53/UDP");
    }

    #[test]
    fn rules_and_terms_are_shared_and_freed_with_their_last_pod() {
        let mut book = RuleBook::default();
        let spec = RulesSpec {
            anti_affinity: vec![term("web", HOSTNAME_KEY)],
            spread: vec![Spread {
                term: term("web", "zone"),
                max_skew: 1,
                hard: true,
                min_domains: None,
                node_affinity: Inclusion::Honor,
                node_taints: Inclusion::Ignore,
            }],
            ..RulesSpec::default()
        };
        let (a, fresh) = book.acquire(spec.clone());
        assert_eq!(fresh.len(), 2);
        let (b, fresh) = book.acquire(spec);
        assert_eq!((a, fresh.len()), (b, 0));
        let (c, fresh) = book.acquire(RulesSpec {
            anti_affinity: vec![term("web", HOSTNAME_KEY)],
            ..RulesSpec::default()
        });
        assert_ne!(a, c);
        assert!(fresh.is_empty(), "the term is shared");
        assert_eq!(book.sizes(), (3, 2));
        book.release(a);
        assert_eq!(book.sizes(), (3, 2), "one pod still uses the rules");
        book.release(b);
        assert_eq!(book.sizes(), (2, 1), "the zone term went with its last rules");
        book.release(c);
        assert_eq!(book.sizes(), (1, 0));
        assert_eq!(book.acquire(RulesSpec::default()).0, PodRulesId(0));
    }

    #[test]
    fn counts_follow_pods_per_node_and_domain() {
        let mut book = RuleBook::default();
        let (carrier, _) = book.acquire(RulesSpec {
            anti_affinity: vec![term("web", "zone")],
            ..RulesSpec::default()
        });
        let zone_a = labels(&[("zone", "a")]);
        let web = labels(&[("app", "web")]);
        let pod = PodFacts {
            namespace: "ns",
            labels: &web,
            rules: carrier,
        };
        assert!(book.contribute(pod, NodeId(1), &zone_a, false, 1));
        assert!(book.contribute(pod, NodeId(2), &zone_a, true, 1));
        let t = book.term(book.rules(carrier).anti_affinity[0]);
        assert_eq!(
            t.selected.in_domain("a"),
            Count {
                present: 2,
                releasing: 1
            }
        );
        assert_eq!(
            t.carriers.on_node(NodeId(2)),
            Count {
                present: 1,
                releasing: 1
            }
        );
        let other = labels(&[("app", "db")]);
        let db = PodFacts {
            namespace: "ns",
            labels: &other,
            rules: PodRulesId(0),
        };
        assert!(!book.contribute(db, NodeId(1), &zone_a, false, 1), "not selected");
        book.contribute(pod, NodeId(1), &zone_a, false, -1);
        book.contribute(pod, NodeId(2), &zone_a, true, -1);
        let t = book.term(book.rules(carrier).anti_affinity[0]);
        assert_eq!(t.selected.in_domains, Count::default());
        assert!(t.selected.per_node.is_empty() && t.selected.per_domain.is_empty());
    }
}
