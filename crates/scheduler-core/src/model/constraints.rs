//! Where a pod may go: node selector, required node affinity and tolerations, interned so that the many
//! pods of one template share one entry (and one cached answer per node).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Id of an interned [`Constraints`]. `ConstraintsId(0)` is "no constraints".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ConstraintsId(pub u32);

/// A label requirement operator (`matchExpressions[].operator`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// Label value in the set.
    In(Vec<String>),
    /// Label absent or value not in the set.
    NotIn(Vec<String>),
    /// Label present.
    Exists,
    /// Label absent.
    DoesNotExist,
    /// Label value, as an integer, greater than.
    Gt(i64),
    /// Label value, as an integer, less than.
    Lt(i64),
}

/// One requirement of a node selector term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// Label key, or `metadata.name` for a field requirement.
    pub key: String,
    /// Whether this is a `matchFields` requirement (only `metadata.name` exists).
    pub field: bool,
    /// Operator and values.
    pub op: Operator,
}

impl Requirement {
    /// Whether a node (its name and labels) meets the requirement.
    #[must_use]
    pub fn matches_node(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.matches(node_name, labels)
    }

    fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        let value = if self.field {
            (self.key == "metadata.name").then_some(node_name)
        } else {
            labels.get(&self.key).map(String::as_str)
        };
        match (&self.op, value) {
            (Operator::In(values), Some(v)) => values.iter().any(|x| x == v),
            (Operator::In(_), None) => false,
            (Operator::NotIn(values), Some(v)) => !values.iter().any(|x| x == v),
            (Operator::NotIn(_), None) | (Operator::DoesNotExist, None) | (Operator::Exists, Some(_)) => true,
            (Operator::Exists, None) | (Operator::DoesNotExist, Some(_)) => false,
            (Operator::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
            (Operator::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
            (Operator::Gt(_) | Operator::Lt(_), None) => false,
        }
    }
}

/// Taint effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// New pods without a toleration are not placed.
    NoSchedule,
    /// A preference only; ignored by predicates.
    PreferNoSchedule,
    /// Like NoSchedule (and evicts running pods, which is the kubelet's business).
    NoExecute,
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// A pod toleration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Key; empty with `Exists` tolerates everything.
    pub key: String,
    /// `Exists` (true) or `Equal` (false).
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates all effects.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        self.key == taint.key && (self.exists || self.value == taint.value)
    }
}

/// The placement constraints of a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Constraints {
    /// `spec.nodeSelector`, sorted.
    pub node_selector: Vec<(String, String)>,
    /// Required node affinity: OR of terms, each an AND of requirements. Empty means none.
    pub affinity_terms: Vec<Vec<Requirement>>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Preferred node affinity: (weight 1-100, AND of requirements); a preference, never a filter.
    pub preferred: Vec<(i32, Vec<Requirement>)>,
}

/// Why a node is not eligible for a pod regardless of free resources.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StaticMiss {
    /// The node is not Ready.
    NotReady,
    /// The node is cordoned (`spec.unschedulable`).
    Unschedulable,
    /// A `nodeSelector` label does not match.
    NodeSelector(String),
    /// No required node-affinity term matches.
    NodeAffinity,
    /// A taint the pod does not tolerate.
    Taint(String),
}

impl fmt::Display for StaticMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotReady => write!(f, "node not ready"),
            Self::Unschedulable => write!(f, "node cordoned (unschedulable)"),
            Self::NodeSelector(key) => write!(f, "node selector {key} does not match"),
            Self::NodeAffinity => write!(f, "required node affinity does not match"),
            Self::Taint(taint) => write!(f, "untolerated taint {taint}"),
        }
    }
}

/// What the static predicate needs to know about a node.
#[derive(Clone, Copy, Debug)]
pub struct NodeFacts<'a> {
    /// Node name.
    pub name: &'a str,
    /// Labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Taints.
    pub taints: &'a [Taint],
    /// Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
}

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

impl Constraints {
    /// Whether the node selector and required node affinity admit the node (what a spread constraint's
    /// `nodeAffinityPolicy: Honor` counts).
    #[must_use]
    pub fn admits_by_affinity(&self, node: NodeFacts<'_>) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
            && (self.affinity_terms.is_empty()
                || self
                    .affinity_terms
                    .iter()
                    .any(|term| term.iter().all(|r| r.matches(node.name, node.labels))))
    }

    /// Whether every `NoSchedule` and `NoExecute` taint is tolerated (`nodeTaintsPolicy: Honor`).
    #[must_use]
    pub fn tolerates_hard_taints(&self, taints: &[Taint]) -> bool {
        taints
            .iter()
            .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
            .all(|t| self.tolerations.iter().any(|tol| tol.tolerates(t)))
    }

    /// `PreferNoSchedule` taints not tolerated (kube-scheduler prefers nodes with fewer).
    #[must_use]
    pub fn untolerated_soft_taints(&self, taints: &[Taint]) -> usize {
        taints
            .iter()
            .filter(|t| t.effect == TaintEffect::PreferNoSchedule)
            .filter(|t| !self.tolerations.iter().any(|tol| tol.tolerates(t)))
            .count()
    }

    /// Sum of the weights of the preferred node-affinity terms the node meets.
    #[must_use]
    pub fn preference_weight(&self, node: NodeFacts<'_>) -> i64 {
        self.preferred
            .iter()
            .filter(|(_, term)| term.iter().all(|r| r.matches(node.name, node.labels)))
            .map(|(w, _)| i64::from(*w))
            .sum()
    }

    /// Checks everything about a node that does not depend on free resources.
    ///
    /// # Errors
    /// The first reason the node is not eligible.
    pub fn check(&self, node: NodeFacts<'_>) -> Result<(), StaticMiss> {
        if !node.ready {
            return Err(StaticMiss::NotReady);
        }
        if node.unschedulable {
            let tolerated = self.tolerations.iter().any(|t| {
                t.tolerates(&Taint {
                    key: UNSCHEDULABLE_TAINT.to_owned(),
                    value: String::new(),
                    effect: TaintEffect::NoSchedule,
                })
            });
            if !tolerated {
                return Err(StaticMiss::Unschedulable);
            }
        }
        for (key, value) in &self.node_selector {
            if node.labels.get(key) != Some(value) {
                return Err(StaticMiss::NodeSelector(format!("{key}={value}")));
            }
        }
        if !self.affinity_terms.is_empty()
            && !self
                .affinity_terms
                .iter()
                .any(|term| term.iter().all(|r| r.matches(node.name, node.labels)))
        {
            return Err(StaticMiss::NodeAffinity);
        }
        for taint in node.taints {
            if taint.effect == TaintEffect::PreferNoSchedule {
                continue;
            }
            if !self.tolerations.iter().any(|t| t.tolerates(taint)) {
                let shown = if taint.value.is_empty() {
                    format!("{}:{:?}", taint.key, taint.effect)
                } else {
                    format!("{}={}:{:?}", taint.key, taint.value, taint.effect)
                };
                return Err(StaticMiss::Taint(shown));
            }
        }
        Ok(())
    }
}

/// Interning table for constraints.
#[derive(Clone, Debug)]
pub struct ConstraintsTable {
    entries: Vec<Constraints>,
    index: HashMap<Constraints, ConstraintsId>,
}

impl Default for ConstraintsTable {
    fn default() -> Self {
        let none = Constraints::default();
        Self {
            entries: vec![none.clone()],
            index: HashMap::from([(none, ConstraintsId(0))]),
        }
    }
}

impl ConstraintsTable {
    /// The id for these constraints, interning them if new. Entries are never removed: the number of
    /// distinct pod templates is small next to the number of pods.
    pub fn intern(&mut self, c: Constraints) -> ConstraintsId {
        if let Some(id) = self.index.get(&c) {
            return *id;
        }
        let id = ConstraintsId(u32::try_from(self.entries.len()).expect("invariant: < 2^32 templates"));
        self.entries.push(c.clone());
        self.index.insert(c, id);
        id
    }

    /// The constraints of an id.
    #[must_use]
    pub fn get(&self, id: ConstraintsId) -> &Constraints {
        &self.entries[id.0 as usize]
    }

    /// Number of interned entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Never empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn facts<'a>(labels: &'a BTreeMap<String, String>, taints: &'a [Taint]) -> NodeFacts<'a> {
        NodeFacts {
            name: "n1",
            labels,
            taints,
            ready: true,
            unschedulable: false,
        }
    }

    fn req(key: &str, op: Operator) -> Requirement {
        Requirement {
            key: key.to_owned(),
            field: false,
            op,
        }
    }

    #[test]
    fn selector_affinity_and_taints() {
        let l = labels(&[("zone", "a"), ("gpu", "a100"), ("cores", "64")]);
        let gpu_taint = [Taint {
            key: "nvidia.com/gpu".into(),
            value: "present".into(),
            effect: TaintEffect::NoSchedule,
        }];
        let none = Constraints::default();
        assert_eq!(none.check(facts(&l, &[])), Ok(()));
        assert_eq!(
            none.check(facts(&l, &gpu_taint)),
            Err(StaticMiss::Taint("nvidia.com/gpu=present:NoSchedule".into()))
        );

        let selector = Constraints {
            node_selector: vec![("zone".into(), "b".into())],
            ..Default::default()
        };
        assert_eq!(
            selector.check(facts(&l, &[])),
            Err(StaticMiss::NodeSelector("zone=b".into()))
        );

        let affinity = Constraints {
            affinity_terms: vec![
                vec![req("zone", Operator::In(vec!["b".into()]))],
                vec![req("gpu", Operator::Exists), req("cores", Operator::Gt(32))],
            ],
            ..Default::default()
        };
        assert_eq!(affinity.check(facts(&l, &[])), Ok(()));
        let strict = Constraints {
            affinity_terms: vec![vec![
                req("cores", Operator::Lt(32)),
                req("gpu", Operator::NotIn(vec!["h100".into()])),
            ]],
            ..Default::default()
        };
        assert_eq!(strict.check(facts(&l, &[])), Err(StaticMiss::NodeAffinity));
        let by_name = Constraints {
            affinity_terms: vec![vec![Requirement {
                key: "metadata.name".into(),
                field: true,
                op: Operator::In(vec!["n1".into()]),
            }]],
            ..Default::default()
        };
        assert_eq!(by_name.check(facts(&l, &[])), Ok(()));

        let tolerant = Constraints {
            tolerations: vec![Toleration {
                key: "nvidia.com/gpu".into(),
                exists: true,
                value: String::new(),
                effect: None,
            }],
            ..Default::default()
        };
        assert_eq!(tolerant.check(facts(&l, &gpu_taint)), Ok(()));
        let soft = [Taint {
            key: "x".into(),
            value: String::new(),
            effect: TaintEffect::PreferNoSchedule,
        }];
        assert_eq!(none.check(facts(&l, &soft)), Ok(()));
    }

    #[test]
    fn readiness_and_cordon() {
        let l = labels(&[]);
        let none = Constraints::default();
        let mut f = facts(&l, &[]);
        f.ready = false;
        assert_eq!(none.check(f), Err(StaticMiss::NotReady));
        f.ready = true;
        f.unschedulable = true;
        assert_eq!(none.check(f), Err(StaticMiss::Unschedulable));
        let tolerate_all = Constraints {
            tolerations: vec![Toleration {
                key: String::new(),
                exists: true,
                value: String::new(),
                effect: None,
            }],
            ..Default::default()
        };
        assert_eq!(tolerate_all.check(f), Ok(()));
    }

    #[test]
    fn interning_shares_entries() {
        let mut t = ConstraintsTable::default();
        let a = Constraints {
            node_selector: vec![("a".into(), "1".into())],
            ..Default::default()
        };
        let id1 = t.intern(a.clone());
        let id2 = t.intern(a);
        assert_eq!(id1, id2);
        assert_eq!(t.intern(Constraints::default()), ConstraintsId(0));
        assert_eq!(t.len(), 2);
    }
}
