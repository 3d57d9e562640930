//! Whether a node suits a pod given the pods around it: required pod affinity and anti-affinity (the
//! pod's own and, symmetrically, those of the pods already there), `DoNotSchedule` topology spread and
//! host ports as filters; preferred affinity, `ScheduleAnyway` spread and preferred node affinity as a
//! score. The counts come from the model (`model::pod_rules`), current at every step of the session, so
//! the pods of one gang placed in one attempt see each other.
//!
//! Filters answer for now and for once terminating pods are gone, as resources do: a node blocked only
//! by a pod on its way out can be reserved (pipelined), which is what lets an eviction clear the way.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::rc::Rc;

use crate::model::constraints::ConstraintsId;
use crate::model::pod_rules::{HostPort, Inclusion, PodRulesId, Spread, TermId};
use crate::model::{Cluster, NodeId, Task, TaskId};

/// Why a node does not suit a pod because of the pods around it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleMiss {
    /// A required pod-affinity term has no selected pod in the node's domain.
    PodAffinity,
    /// A pod the pod's required anti-affinity selects is in the node's domain.
    PodAntiAffinity,
    /// A pod in the node's domain has a required anti-affinity that selects this pod.
    ExistingAntiAffinity,
    /// Placing the pod here would exceed a spread constraint's `maxSkew` on this topology key.
    TopologySpread(String),
    /// The node lacks a spread constraint's topology key.
    SpreadMissingLabel(String),
    /// A host port the pod binds is taken on the node.
    HostPort(HostPort),
}

impl fmt::Display for RuleMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PodAffinity => write!(f, "pod affinity not met"),
            Self::PodAntiAffinity => write!(f, "pod anti-affinity"),
            Self::ExistingAntiAffinity => write!(f, "anti-affinity of a pod already there"),
            Self::TopologySpread(key) => write!(f, "topology spread ({key}) would exceed maxSkew"),
            Self::SpreadMissingLabel(key) => write!(f, "no {key} label (topology spread)"),
            Self::HostPort(port) => write!(f, "host port {port} in use"),
        }
    }
}

/// A node's answer to a pod's rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleFit {
    /// Suits it now.
    Now,
    /// Suits it once the terminating pods in the way are gone.
    Later,
    /// Does not suit it.
    No(RuleMiss),
}

/// What a restricted spread view counts: the term, and which nodes the pod could use (its constraints,
/// per the constraint's node policies, and every topology key of its constraints present).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ViewKey {
    term: TermId,
    constraints: ConstraintsId,
    honor_affinity: bool,
    honor_taints: bool,
    keys: Vec<String>,
}

/// Selected pods per domain over the nodes a pod could use, with the domains ordered by count so the
/// smallest is at hand; caught up from the term's change log when read.
#[derive(Clone, Debug, Default)]
struct SpreadView {
    /// Change-log generation and position this view has caught up to.
    generation: u64,
    seen: usize,
    /// Domain of each counted node.
    domain_of: HashMap<NodeId, String>,
    /// What each counted node contributes now.
    on_node: HashMap<NodeId, i32>,
    /// Count per domain.
    per_domain: HashMap<String, i32>,
    /// Number of domains per count.
    by_count: BTreeMap<i32, u32>,
}

impl SpreadView {
    fn build(cluster: &Cluster, key: &ViewKey) -> Self {
        let term = cluster.rules.term(key.term);
        let (generation, log) = term.changes();
        let mut view = Self {
            generation,
            seen: log.len(),
            ..Self::default()
        };
        let constraints = cluster.constraints.get(key.constraints);
        let topology_key = &term.term.topology_key;
        for (i, node) in cluster.nodes.iter() {
            let id = NodeId(i);
            if key.honor_affinity && !constraints.admits_by_affinity(node.facts()) {
                continue;
            }
            if key.honor_taints && !constraints.tolerates_hard_taints(&node.taints) {
                continue;
            }
            if !key.keys.iter().all(|k| node.labels.contains_key(k)) {
                continue;
            }
            let Some(domain) = node.labels.get(topology_key) else {
                continue;
            };
            let count = term.selected.on_node(id).staying();
            *view.per_domain.entry(domain.clone()).or_default() += count;
            view.domain_of.insert(id, domain.clone());
            view.on_node.insert(id, count);
        }
        for count in view.per_domain.values() {
            *view.by_count.entry(*count).or_default() += 1;
        }
        view
    }

    /// Catches up with the term's changes since the view was built or last read.
    fn refresh(&mut self, cluster: &Cluster, key: &ViewKey) {
        let term = cluster.rules.term(key.term);
        let (generation, log) = term.changes();
        if generation != self.generation {
            *self = Self::build(cluster, key);
            return;
        }
        for node in &log[self.seen.min(log.len())..] {
            self.update(term.selected.on_node(*node).staying(), *node);
        }
        self.seen = log.len();
    }

    fn update(&mut self, now: i32, node: NodeId) {
        let Some(domain) = self.domain_of.get(&node) else {
            return;
        };
        let before = self.on_node.insert(node, now).unwrap_or(0);
        if now == before {
            return;
        }
        let count = self.per_domain.entry(domain.clone()).or_default();
        let old = *count;
        *count += now - before;
        let new = *count;
        if let Some(n) = self.by_count.get_mut(&old) {
            *n -= 1;
            if *n == 0 {
                self.by_count.remove(&old);
            }
        }
        *self.by_count.entry(new).or_default() += 1;
    }
}

/// How a spread constraint of a pod is counted.
#[derive(Clone, Debug)]
enum Counting {
    /// Over every node with the key: the term's own per-domain counts, against the domains of the key.
    AllNodes,
    /// Over the nodes the pod could use: a view (index into `RuleLookups::views`).
    View(usize),
}

/// What a pod's checks need, worked out once per pod and session.
#[derive(Clone, Debug, Default)]
struct PodContext {
    /// Anti-affinity terms of live pods that select this pod (the symmetric rule).
    selecting: Vec<TermId>,
    /// For each spread constraint of the pod, in order: how it is counted.
    counting: Vec<Counting>,
}

/// The domains and counts a spread constraint is judged against.
struct SpreadCounts {
    /// Selected pods in a domain.
    in_domain: i32,
    /// The smallest count over the domains (0 with fewer than `minDomains`).
    min: i32,
    /// The largest count over the domains.
    max: i32,
}

/// Per-session lookups for pod rules: each pod's context and the restricted spread views.
#[derive(Clone, Debug, Default)]
pub struct RuleLookups {
    /// Terms some live pod requires as anti-affinity (fixed for a session: rules change only between
    /// cycles).
    anti_terms: std::collections::HashSet<TermId>,
    contexts: HashMap<TaskId, Rc<PodContext>>,
    views: Vec<(ViewKey, SpreadView)>,
    view_index: HashMap<ViewKey, usize>,
    /// Distinct values of a node label over all nodes (the domains of a key).
    domains: HashMap<String, usize>,
    /// Some node has a `PreferNoSchedule` taint.
    pub soft_taints: bool,
}

impl RuleLookups {
    /// Lookups for a session over this model.
    #[must_use]
    pub fn new(cluster: &Cluster) -> Self {
        Self {
            anti_terms: cluster.rules.anti_affinity_terms().into_iter().collect(),
            soft_taints: cluster.nodes.iter().any(|(_, n)| {
                n.taints
                    .iter()
                    .any(|t| t.effect == crate::model::constraints::TaintEffect::PreferNoSchedule)
            }),
            ..Self::default()
        }
    }

    /// Whether the answer of some pod of a set can depend on other pods: one of them has rules of its
    /// own (`with_rules`), or some pod's anti-affinity may select it.
    #[must_use]
    pub fn relevant_to_any(&self, with_rules: bool) -> bool {
        with_rules || !self.anti_terms.is_empty()
    }

    /// Whether a pod's answer on a node can depend on other pods at all.
    #[must_use]
    pub fn relevant(&self, task: &Task) -> bool {
        task.rules != PodRulesId(0) || !self.anti_terms.is_empty()
    }

    fn context(&mut self, cluster: &Cluster, id: TaskId, task: &Task) -> Rc<PodContext> {
        if let Some(c) = self.contexts.get(&id) {
            return Rc::clone(c);
        }
        let book = &cluster.rules;
        let mut selecting: Vec<TermId> = if self.anti_terms.is_empty() {
            Vec::new()
        } else {
            book.candidate_terms(&task.labels)
                .filter(|t| self.anti_terms.contains(t) && book.selects(*t, &task.namespace, &task.labels))
                .collect()
        };
        selecting.sort_unstable();
        selecting.dedup();
        let rules = book.rules(task.rules);
        let constraints = cluster.constraints.get(task.constraints);
        let narrowing_constraints =
            !constraints.node_selector.is_empty() || !constraints.affinity_terms.is_empty();
        let counting = rules
            .spread
            .iter()
            .map(|spread| {
                let key = &book.term(spread.term).term.topology_key;
                let mut keys: Vec<String> = rules
                    .spread
                    .iter()
                    .filter(|s| s.hard == spread.hard)
                    .map(|s| book.term(s.term).term.topology_key.clone())
                    .collect();
                keys.sort();
                keys.dedup();
                let honor_affinity = spread.node_affinity == Inclusion::Honor && narrowing_constraints;
                let honor_taints = spread.node_taints == Inclusion::Honor;
                if !honor_affinity && !honor_taints && keys.iter().all(|k| k == key) {
                    return Counting::AllNodes;
                }
                let view = ViewKey {
                    term: spread.term,
                    constraints: task.constraints,
                    honor_affinity,
                    honor_taints,
                    keys,
                };
                let next = self.views.len();
                let index = *self.view_index.entry(view.clone()).or_insert(next);
                if index == next {
                    let built = SpreadView::build(cluster, &view);
                    self.views.push((view, built));
                }
                Counting::View(index)
            })
            .collect();
        let context = Rc::new(PodContext { selecting, counting });
        self.contexts.insert(id, Rc::clone(&context));
        context
    }

    /// The counts a spread constraint is judged by on a node in `domain`.
    fn spread_counts(
        &mut self,
        cluster: &Cluster,
        spread: &Spread<TermId>,
        counting: &Counting,
        domain: &str,
    ) -> SpreadCounts {
        let term = cluster.rules.term(spread.term);
        match counting {
            Counting::AllNodes => {
                let key = &term.term.topology_key;
                let domains = *self.domains.entry(key.clone()).or_insert_with(|| {
                    let values: std::collections::HashSet<&String> = cluster
                        .nodes
                        .iter()
                        .filter_map(|(_, n)| n.labels.get(key))
                        .collect();
                    values.len()
                });
                let counts = &term.selected.per_domain;
                let too_few = spread.min_domains.is_some_and(|m| domains < m as usize);
                // Domains without any selected pod count 0; the map holds only domains with some.
                let some_empty = counts.len() < domains;
                let staying = counts.values().map(|c| c.staying());
                let min = if too_few || some_empty {
                    0
                } else {
                    staying.clone().min().unwrap_or(0)
                };
                let max = staying.max().unwrap_or(0).max(0);
                SpreadCounts {
                    in_domain: term.selected.in_domain(domain).staying(),
                    min,
                    max,
                }
            }
            Counting::View(index) => {
                let (key, view) = &mut self.views[*index];
                view.refresh(cluster, key);
                let too_few = spread
                    .min_domains
                    .is_some_and(|m| view.per_domain.len() < m as usize);
                SpreadCounts {
                    in_domain: view.per_domain.get(domain).copied().unwrap_or(0),
                    min: if too_few {
                        0
                    } else {
                        view.by_count.keys().next().copied().unwrap_or(0)
                    },
                    max: view.by_count.keys().next_back().copied().unwrap_or(0),
                }
            }
        }
    }

    /// The filters: whether `node` suits `task` (pod `id`) given the pods around it.
    pub fn check(&mut self, cluster: &Cluster, id: TaskId, task: &Task, node_id: NodeId) -> RuleFit {
        let node = cluster.node(node_id);
        let book = &cluster.rules;
        let rules = book.rules(task.rules);
        let mut later = false;
        // Host ports.
        for port in &rules.host_ports {
            for used in node
                .host_ports
                .iter()
                .filter(|u| u.task != id && u.port.conflicts(port))
            {
                if !used.releasing {
                    return RuleFit::No(RuleMiss::HostPort(port.clone()));
                }
                later = true;
            }
        }
        // The pod's own required anti-affinity.
        for t in &rules.anti_affinity {
            let term = book.term(*t);
            if let Some(domain) = node.labels.get(&term.term.topology_key) {
                let count = term.selected.in_domain(domain);
                if count.staying() > 0 {
                    return RuleFit::No(RuleMiss::PodAntiAffinity);
                }
                later |= count.present > 0;
            }
        }
        let context = self.context(cluster, id, task);
        // Placed pods' required anti-affinity against this pod.
        for t in &context.selecting {
            let term = book.term(*t);
            if let Some(domain) = node.labels.get(&term.term.topology_key) {
                let count = term.carriers.in_domain(domain);
                if count.staying() > 0 {
                    return RuleFit::No(RuleMiss::ExistingAntiAffinity);
                }
                later |= count.present > 0;
            }
        }
        // Required affinity: the node has every term's topology key, and each term has a pod in the
        // node's domain that matches all the terms; unless no such pod runs anywhere and the pod matches
        // them all itself (the first of a group that wants to be together).
        if !rules.affinity.is_empty() {
            let mut met = true;
            for t in &rules.affinity {
                let term = book.term(*t);
                let Some(domain) = node.labels.get(&term.term.topology_key) else {
                    return RuleFit::No(RuleMiss::PodAffinity);
                };
                met &= term.selected.in_domain(domain).staying() > 0;
            }
            if !met {
                let none_anywhere = rules
                    .affinity
                    .iter()
                    .all(|t| book.term(*t).selected.in_domains.present == 0);
                let selects_itself = rules
                    .affinity
                    .iter()
                    .all(|t| book.selects(*t, &task.namespace, &task.labels));
                if !(none_anywhere && selects_itself) {
                    return RuleFit::No(RuleMiss::PodAffinity);
                }
            }
        }
        // DoNotSchedule topology spread.
        for (spread, counting) in rules.spread.iter().zip(&context.counting) {
            if !spread.hard {
                continue;
            }
            let key = &book.term(spread.term).term.topology_key;
            let Some(domain) = node.labels.get(key) else {
                return RuleFit::No(RuleMiss::SpreadMissingLabel(key.clone()));
            };
            let selects_itself = i32::from(book.selects(spread.term, &task.namespace, &task.labels));
            let counts = self.spread_counts(cluster, spread, counting, domain);
            let skew = i64::from(counts.in_domain) + i64::from(selects_itself) - i64::from(counts.min);
            if skew > i64::from(spread.max_skew) {
                return RuleFit::No(RuleMiss::TopologySpread(key.clone()));
            }
        }
        if later { RuleFit::Later } else { RuleFit::Now }
    }

    /// The preferences: a score per candidate node (higher is better), each preference normalised to
    /// 0-100 over the candidates and weighted as kube-scheduler's default profile weighs its plugins
    /// (node affinity 1, inter-pod affinity 1, topology spread 2, taint toleration 1).
    pub fn scores(&mut self, cluster: &Cluster, id: TaskId, task: &Task, nodes: &[NodeId]) -> Vec<i64> {
        let book = &cluster.rules;
        let rules = book.rules(task.rules);
        let constraints = cluster.constraints.get(task.constraints);
        let context = self.context(cluster, id, task);
        let mut node_affinity = Vec::with_capacity(nodes.len());
        let mut inter_pod = Vec::with_capacity(nodes.len());
        let mut spread = Vec::with_capacity(nodes.len());
        let mut taints = Vec::with_capacity(nodes.len());
        for n in nodes {
            let node = cluster.node(*n);
            node_affinity.push(constraints.preference_weight(node.facts()));
            taints.push(i64::try_from(constraints.untolerated_soft_taints(&node.taints)).unwrap_or(i64::MAX));
            let in_domain = |t: TermId| {
                let term = book.term(t);
                node.labels
                    .get(&term.term.topology_key)
                    .map_or(0, |d| i64::from(term.selected.in_domain(d).staying()))
            };
            let mut pod_score = 0i64;
            for (w, t) in &rules.preferred_affinity {
                pod_score = pod_score.saturating_add(i64::from(*w).saturating_mul(in_domain(*t)));
            }
            for (w, t) in &rules.preferred_anti_affinity {
                pod_score = pod_score.saturating_sub(i64::from(*w).saturating_mul(in_domain(*t)));
            }
            inter_pod.push(pod_score);
            let mut crowd = 0i64;
            for (s, counting) in rules.spread.iter().zip(&context.counting) {
                if s.hard {
                    continue;
                }
                let key = &book.term(s.term).term.topology_key;
                // A node without the key is the worst place for a soft constraint.
                let count = match node.labels.get(key) {
                    Some(d) => i64::from(self.spread_counts(cluster, s, counting, d).in_domain),
                    None => i64::from(self.spread_counts(cluster, s, counting, "").max) + 1,
                };
                crowd = crowd.saturating_add(count);
            }
            spread.push(crowd);
        }
        let node_affinity = normalise(&node_affinity, false);
        let inter_pod = normalise(&inter_pod, false);
        let spread = normalise(&spread, true);
        let taints = normalise(&taints, true);
        (0..nodes.len())
            .map(|i| node_affinity[i] + inter_pod[i] + 2 * spread[i] + taints[i])
            .collect()
    }
}

/// Scales raw scores to 0-100 over the candidates (`lower_is_better` reverses them); all equal scores
/// give 0 (the preference does not tell the candidates apart).
fn normalise(raw: &[i64], lower_is_better: bool) -> Vec<i64> {
    let (Some(min), Some(max)) = (raw.iter().min().copied(), raw.iter().max().copied()) else {
        return Vec::new();
    };
    if min == max {
        return vec![0; raw.len()];
    }
    let span = i128::from(max) - i128::from(min);
    raw.iter()
        .map(|v| {
            let above = if lower_is_better {
                i128::from(max) - i128::from(*v)
            } else {
                i128::from(*v) - i128::from(min)
            };
            i64::try_from(above * 100 / span).unwrap_or(0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_spreads_scores_over_zero_to_a_hundred() {
        assert_eq!(normalise(&[0, 5, 10], false), vec![0, 50, 100]);
        assert_eq!(normalise(&[0, 5, 10], true), vec![100, 50, 0]);
        assert_eq!(normalise(&[3, 3], false), vec![0, 0]);
        assert_eq!(normalise(&[i64::MIN, i64::MAX], false), vec![0, 100]);
        assert!(normalise(&[], false).is_empty());
    }
}
