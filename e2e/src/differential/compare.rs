//! Comparing the two schedulers' outcomes probe by probe, with the checker's verdict as the third voice,
//! and the tallies the test prints (agreement overall and per rule).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::check::{Rule, Verdict};

/// What one scheduler did with a probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Bound to this node.
    Bound(String),
    /// Left pending with `PodScheduled=False` (reason `Unschedulable`) and this message.
    Unschedulable(String),
    /// Neither within the phase's time limit.
    Undecided,
}

impl Outcome {
    /// The node, when bound.
    #[must_use]
    pub fn node(&self) -> Option<&str> {
        match self {
            Outcome::Bound(n) => Some(n),
            _ => None,
        }
    }
}

/// One probe, both sides, and the checker.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeResult {
    /// `r<round>-w<world>`.
    pub id: String,
    /// Its world.
    pub world: usize,
    /// The rules in play for the probe ([`super::Probe::carries`]).
    pub carries: BTreeSet<Rule>,
    /// The pod as given to kube-scheduler.
    pub pod: Value,
    /// The checker (v1.20.2's rules) on the state kube-scheduler saw (every bound pod but the probe), for
    /// the nodes of the probe's world (the others fail its world selector).
    pub verdict: Verdict,
    /// The checker with the current releases' rules ([`super::Release::Current`]) on the state this
    /// scheduler saw: what this scheduler is held to. It differs from `verdict` only where v1.20's
    /// spread counting matters.
    pub current: Verdict,
    /// Whether the checker gives the same feasible nodes on the state this scheduler saw (it must: the
    /// pre-bound pods are the same; `false` means the test did not give both the same state).
    pub same_state: bool,
    /// kube-scheduler's outcome.
    pub kube: Outcome,
    /// This scheduler's outcome.
    pub ours: Outcome,
    /// The rules kube-scheduler's node fails in its final state (must be none).
    pub kube_breaks: BTreeSet<Rule>,
    /// The rules this scheduler's node fails in its final state under the current rules (must be none).
    pub ours_breaks: BTreeSet<Rule>,
    /// The probe's claims and volumes (null: none).
    pub storage: Value,
    /// What is wrong with the claims after kube-scheduler decided ([`super::binding_faults`]).
    pub kube_faults: Vec<String>,
    /// What is wrong with the claims after this scheduler decided.
    pub ours_faults: Vec<String>,
}

/// A way the two schedulers, or kube-scheduler and the checker, disagree on a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Disagreement {
    /// kube-scheduler bound it, this scheduler did not.
    BoundByKubeOnly,
    /// This scheduler bound it, kube-scheduler did not.
    BoundByOursOnly,
    /// One feasible node, and a scheduler bound it elsewhere.
    SingleNodeDiffers,
    /// This scheduler's placement fails the checker.
    OursBreaksRule,
    /// kube-scheduler's placement fails the checker: the checker is wrong.
    KubeBreaksRule,
    /// The checker finds feasible nodes and kube-scheduler left the pod pending, or the reverse: the
    /// checker is wrong.
    CheckerDisagreesWithKube,
    /// A scheduler decided nothing in time.
    Undecided,
    /// The two sides did not see the same state (a test fault).
    StateDiffers,
    /// v1.20.2 and the current releases count a spread domain differently here, so their feasible
    /// nodes differ: this scheduler is held to the current rules, and a different outcome from
    /// kube-scheduler is no fault (for information).
    SpreadCountedAsInV1_20,
}

impl Disagreement {
    /// Whether it fails the test (all but [`Disagreement::SpreadCountedAsInV1_20`]).
    #[must_use]
    pub fn fails(self) -> bool {
        self != Disagreement::SpreadCountedAsInV1_20
    }

    /// Whether it says the checker or the harness, not this scheduler, is wrong.
    #[must_use]
    pub fn is_test_fault(self) -> bool {
        matches!(
            self,
            Disagreement::KubeBreaksRule
                | Disagreement::CheckerDisagreesWithKube
                | Disagreement::StateDiffers
        )
    }
}

impl ProbeResult {
    /// Every disagreement on this probe. Where v1.20.2 and the current releases find the same feasible
    /// nodes (all but a few probes), the two schedulers are compared directly: bound by both or neither,
    /// and, with one feasible node, bound to it. Where they differ, this scheduler is compared with the
    /// current rules instead and the difference is noted.
    #[must_use]
    pub fn disagreements(&self) -> BTreeSet<Disagreement> {
        let mut out = BTreeSet::new();
        let feasible = self.verdict.feasible();
        let current = self.current.feasible();
        if feasible == current {
            match (&self.kube, &self.ours) {
                (Outcome::Undecided, _) | (_, Outcome::Undecided) => {
                    out.insert(Disagreement::Undecided);
                }
                (Outcome::Bound(_), Outcome::Unschedulable(_)) => {
                    out.insert(Disagreement::BoundByKubeOnly);
                }
                (Outcome::Unschedulable(_), Outcome::Bound(_)) => {
                    out.insert(Disagreement::BoundByOursOnly);
                }
                _ => {}
            }
        } else {
            out.insert(Disagreement::SpreadCountedAsInV1_20);
            match (&self.ours, current.is_empty()) {
                (Outcome::Undecided, _) => {
                    out.insert(Disagreement::Undecided);
                }
                (Outcome::Unschedulable(_), false) => {
                    out.insert(Disagreement::BoundByKubeOnly);
                }
                (Outcome::Bound(_), true) => {
                    out.insert(Disagreement::BoundByOursOnly);
                }
                _ => {}
            }
        }
        let single = |nodes: &[&str], o: &Outcome| match nodes {
            [only] => o.node().is_some_and(|n| n != *only),
            _ => false,
        };
        if single(&feasible, &self.kube) || single(&current, &self.ours) {
            out.insert(Disagreement::SingleNodeDiffers);
        }
        if !self.ours_breaks.is_empty() {
            out.insert(Disagreement::OursBreaksRule);
        }
        if !self.kube_breaks.is_empty() {
            out.insert(Disagreement::KubeBreaksRule);
        }
        match &self.kube {
            Outcome::Bound(_) if feasible.is_empty() => {
                out.insert(Disagreement::CheckerDisagreesWithKube);
            }
            Outcome::Unschedulable(_) if !feasible.is_empty() => {
                out.insert(Disagreement::CheckerDisagreesWithKube);
            }
            _ => {}
        }
        if !self.same_state {
            out.insert(Disagreement::StateDiffers);
        }
        out
    }

    /// The rules a disagreement on this probe is put down to: those this scheduler's node fails, and,
    /// when it left pending a pod that had a feasible node, every filter rule in play.
    #[must_use]
    pub fn blamed(&self) -> BTreeSet<Rule> {
        let mut rules = self.ours_breaks.clone();
        if self.ours.node().is_none() && !self.current.feasible().is_empty() {
            rules.extend(self.carries.iter().filter(|r| r.filters()));
        }
        rules
    }

    /// The disagreements that fail the test.
    #[must_use]
    pub fn failures(&self) -> BTreeSet<Disagreement> {
        self.disagreements().into_iter().filter(|d| d.fails()).collect()
    }
}

/// Tallies of one rule.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RuleTally {
    /// Probes for which it is in play.
    pub carried: usize,
    /// Probes for which it made at least one node infeasible (checker).
    pub excluded: usize,
    /// Probes for which it was the only reason at least one node was infeasible (checker).
    pub decisive: usize,
    /// Probes with it in play and no disagreement that fails the test.
    pub agreed: usize,
    /// Disagreements put down to it ([`ProbeResult::blamed`]).
    pub blamed: usize,
    /// Placements of this scheduler that break it.
    pub broken_by_ours: usize,
}

/// The figures of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Probes per scheduler.
    pub probes: usize,
    /// Bound by kube-scheduler.
    pub kube_bound: usize,
    /// Bound by this scheduler.
    pub ours_bound: usize,
    /// Bound by both or by neither.
    pub same_bound: usize,
    /// Probes with exactly one feasible node (checker, the same under both releases' rules).
    pub single_feasible: usize,
    /// Of those, bound by kube-scheduler to that node.
    pub single_kube_on_it: usize,
    /// Of those, bound by this scheduler to that node.
    pub single_ours_on_it: usize,
    /// Probes bound by both with more than one feasible node.
    pub multi_both_bound: usize,
    /// Of those, bound to the same node (scoring differs by design; for information).
    pub multi_same_node: usize,
    /// This scheduler's placements that pass the checker.
    pub ours_valid: usize,
    /// kube-scheduler's placements that pass the checker.
    pub kube_valid: usize,
    /// Probes where the checker's "some node is feasible" equals kube-scheduler's "bound".
    pub checker_agrees_with_kube: usize,
    /// Probes with no disagreement that fails the test.
    pub agreed: usize,
    /// Probes with claims.
    pub with_claims: usize,
    /// Of those, bound by kube-scheduler.
    pub with_claims_kube_bound: usize,
    /// Of those, bound by this scheduler.
    pub with_claims_ours_bound: usize,
    /// Of those, in full agreement.
    pub with_claims_agreed: usize,
    /// Probes whose feasible nodes differ between v1.20.2's and the current spread counting.
    pub spread_v1_20: usize,
    /// Of those, probes the two schedulers placed differently (bound or not, or the node).
    pub spread_v1_20_outcomes_differ: usize,
    /// Per rule.
    pub rules: BTreeMap<Rule, RuleTally>,
    /// Per kind of disagreement.
    pub disagreements: BTreeMap<Disagreement, usize>,
}

impl Summary {
    /// Tallies the results.
    #[must_use]
    pub fn of(results: &[ProbeResult]) -> Self {
        let mut s = Summary {
            probes: results.len(),
            ..Summary::default()
        };
        for rule in Rule::ALL {
            s.rules.insert(rule, RuleTally::default());
        }
        for r in results {
            let kube = r.kube.node();
            let ours = r.ours.node();
            let disagreements = r.disagreements();
            s.kube_bound += usize::from(kube.is_some());
            s.ours_bound += usize::from(ours.is_some());
            s.same_bound += usize::from(kube.is_some() == ours.is_some());
            let feasible = r.verdict.feasible();
            let same_rules = feasible == r.current.feasible();
            match feasible.as_slice() {
                [only] if same_rules => {
                    s.single_feasible += 1;
                    s.single_kube_on_it += usize::from(kube == Some(*only));
                    s.single_ours_on_it += usize::from(ours == Some(*only));
                }
                [_] => {}
                _ => {
                    if let (Some(k), Some(o)) = (kube, ours) {
                        s.multi_both_bound += 1;
                        s.multi_same_node += usize::from(k == o);
                    }
                }
            }
            if !same_rules {
                s.spread_v1_20 += 1;
                s.spread_v1_20_outcomes_differ += usize::from(kube != ours);
            }
            s.ours_valid += usize::from(ours.is_some() && r.ours_breaks.is_empty());
            s.kube_valid += usize::from(kube.is_some() && r.kube_breaks.is_empty());
            s.checker_agrees_with_kube += usize::from(
                !disagreements.contains(&Disagreement::CheckerDisagreesWithKube)
                    && r.kube != Outcome::Undecided,
            );
            let failing = disagreements.iter().any(|d| d.fails());
            s.agreed += usize::from(!failing);
            if r.carries.contains(&Rule::Claims) {
                s.with_claims += 1;
                s.with_claims_kube_bound += usize::from(kube.is_some());
                s.with_claims_ours_bound += usize::from(ours.is_some());
                s.with_claims_agreed += usize::from(!failing);
            }
            for d in &disagreements {
                *s.disagreements.entry(*d).or_default() += 1;
            }
            let excluding = r.verdict.excluding();
            let decisive = r.verdict.decisive();
            let blamed = if !failing { BTreeSet::new() } else { r.blamed() };
            for (rule, t) in &mut s.rules {
                let carried = r.carries.contains(rule);
                t.carried += usize::from(carried);
                t.agreed += usize::from(carried && !failing);
                t.excluded += usize::from(carried && excluding.contains(rule));
                t.decisive += usize::from(carried && decisive.contains(rule));
                t.blamed += usize::from(blamed.contains(rule));
                t.broken_by_ours += usize::from(r.ours_breaks.contains(rule));
            }
        }
        s
    }

    /// Whether every probe agrees.
    #[must_use]
    pub fn all_agree(&self) -> bool {
        self.agreed == self.probes
    }

    /// The figures as Markdown tables.
    #[must_use]
    pub fn render(&self) -> String {
        let pct = |n: usize, d: usize| {
            if d == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}%", 100.0 * n as f64 / d as f64)
            }
        };
        let mut out = String::new();
        let _ = writeln!(out, "| figure | value |\n| --- | --- |");
        let rows = [
            ("probes per scheduler".to_owned(), self.probes.to_string()),
            (
                "bound by kube-scheduler v1.20.2".to_owned(),
                self.kube_bound.to_string(),
            ),
            ("bound by kai-scheduler".to_owned(), self.ours_bound.to_string()),
            (
                "same bound/pending outcome".to_owned(),
                format!("{} ({})", self.same_bound, pct(self.same_bound, self.probes)),
            ),
            (
                "exactly one feasible node (checker, both releases)".to_owned(),
                self.single_feasible.to_string(),
            ),
            (
                "... kube-scheduler bound to it".to_owned(),
                format!(
                    "{} ({})",
                    self.single_kube_on_it,
                    pct(self.single_kube_on_it, self.single_feasible)
                ),
            ),
            (
                "... kai-scheduler bound to it".to_owned(),
                format!(
                    "{} ({})",
                    self.single_ours_on_it,
                    pct(self.single_ours_on_it, self.single_feasible)
                ),
            ),
            (
                "several feasible nodes, both bound: same node (scoring differs; information)".to_owned(),
                format!(
                    "{} of {} ({})",
                    self.multi_same_node,
                    self.multi_both_bound,
                    pct(self.multi_same_node, self.multi_both_bound)
                ),
            ),
            (
                "kai-scheduler placements passing the checker (current rules)".to_owned(),
                format!("{} of {}", self.ours_valid, self.ours_bound),
            ),
            (
                "kube-scheduler placements passing the checker (v1.20 rules)".to_owned(),
                format!("{} of {}", self.kube_valid, self.kube_bound),
            ),
            (
                "checker agrees with kube-scheduler (bound iff a feasible node)".to_owned(),
                format!(
                    "{} ({})",
                    self.checker_agrees_with_kube,
                    pct(self.checker_agrees_with_kube, self.probes)
                ),
            ),
            (
                "feasible nodes differ between v1.20's spread counting and the current one (kai held to the current)"
                    .to_owned(),
                format!(
                    "{} (placed differently: {})",
                    self.spread_v1_20, self.spread_v1_20_outcomes_differ
                ),
            ),
            (
                "probes in full agreement".to_owned(),
                format!("{} ({})", self.agreed, pct(self.agreed, self.probes)),
            ),
            (
                "probes with claims: bound by kube-scheduler / kai-scheduler, in full agreement".to_owned(),
                format!(
                    "{}: {} / {}, {} ({})",
                    self.with_claims,
                    self.with_claims_kube_bound,
                    self.with_claims_ours_bound,
                    self.with_claims_agreed,
                    pct(self.with_claims_agreed, self.with_claims)
                ),
            ),
        ];
        for (k, v) in rows {
            let _ = writeln!(out, "| {k} | {v} |");
        }
        let _ = writeln!(
            out,
            "\n| rule | probes where it is in play | it excluded a node | it alone excluded a node | full agreement | disagreements put down to it | kai placements breaking it |\n\
             | --- | --- | --- | --- | --- | --- | --- |"
        );
        for (rule, t) in &self.rules {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} ({}) | {} | {} |",
                rule.name(),
                t.carried,
                t.excluded,
                t.decisive,
                t.agreed,
                pct(t.agreed, t.carried),
                t.blamed,
                t.broken_by_ours
            );
        }
        if !self.disagreements.is_empty() {
            let _ = writeln!(out, "\n| disagreement | probes |\n| --- | --- |");
            for (d, n) in &self.disagreements {
                let _ = writeln!(out, "| {d:?} | {n} |");
            }
        }
        out
    }
}

/// A disagreeing probe in words: outcomes, the checker's nodes of its world (`prefix` cut off the node
/// names), and the pod.
#[must_use]
pub fn describe(r: &ProbeResult, prefix: &str) -> String {
    let short = |n: &str| {
        n.strip_prefix(prefix)
            .unwrap_or(n)
            .trim_start_matches('-')
            .to_owned()
    };
    let outcome = |o: &Outcome| match o {
        Outcome::Bound(n) => format!("bound to {}", short(n)),
        Outcome::Unschedulable(m) => format!("pending ({m})"),
        Outcome::Undecided => "undecided".to_owned(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "-- {} {:?}\n   kube-scheduler: {}\n   kai-scheduler:  {}",
        r.id,
        r.disagreements(),
        outcome(&r.kube),
        outcome(&r.ours)
    );
    let carries: Vec<&str> = r.carries.iter().map(|x| x.name()).collect();
    let _ = writeln!(out, "   carries: {}", carries.join(", "));
    if !r.ours_breaks.is_empty() {
        let broken: Vec<&str> = r.ours_breaks.iter().map(|x| x.name()).collect();
        let _ = writeln!(out, "   kai-scheduler's node breaks: {}", broken.join(", "));
    }
    for (who, faults) in [
        ("kube-scheduler", &r.kube_faults),
        ("kai-scheduler", &r.ours_faults),
    ] {
        for f in faults {
            let _ = writeln!(out, "   after {who}: {f}");
        }
    }
    let world = format!("w{}n", r.world);
    let _ = writeln!(out, "   checker, nodes of its world:");
    for (node, fails) in &r.verdict.nodes {
        let name = short(node);
        if !name.starts_with(&world) {
            continue;
        }
        let fails: Vec<&str> = fails.iter().map(|x| x.name()).collect();
        let _ = writeln!(
            out,
            "     {name}: {}",
            if fails.is_empty() {
                "feasible".to_owned()
            } else {
                fails.join(", ")
            }
        );
    }
    let _ = writeln!(out, "   pod: {}", r.pod);
    if !r.storage.is_null() {
        let _ = writeln!(
            out,
            "   storage (kube-scheduler's copy; kai-scheduler's is the same): {}",
            r.storage
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(kube: Outcome, ours: Outcome, feasible: &[&str], infeasible: &[(&str, Rule)]) -> ProbeResult {
        let mut verdict = Verdict::default();
        for n in feasible {
            verdict.nodes.insert((*n).to_owned(), BTreeSet::new());
        }
        for (n, r) in infeasible {
            verdict.nodes.insert((*n).to_owned(), BTreeSet::from([*r]));
        }
        ProbeResult {
            id: "r0-w0".into(),
            world: 0,
            carries: BTreeSet::from([Rule::Resources, Rule::PodAffinity, Rule::PreferredPodAffinity]),
            pod: Value::Null,
            current: verdict.clone(),
            verdict,
            same_state: true,
            kube,
            ours,
            kube_breaks: BTreeSet::new(),
            ours_breaks: BTreeSet::new(),
            storage: Value::Null,
            kube_faults: Vec::new(),
            ours_faults: Vec::new(),
        }
    }

    fn bound(n: &str) -> Outcome {
        Outcome::Bound(n.into())
    }

    fn pending() -> Outcome {
        Outcome::Unschedulable("no".into())
    }

    #[test]
    fn agreement_needs_the_same_outcome_and_the_single_feasible_node() {
        let ok = result(bound("a"), bound("b"), &["a", "b"], &[]);
        assert!(
            ok.disagreements().is_empty(),
            "several feasible nodes: any may be chosen"
        );
        let single = result(bound("a"), bound("b"), &["a"], &[("b", Rule::PodAffinity)]);
        assert!(single.disagreements().contains(&Disagreement::SingleNodeDiffers));
        let none = result(pending(), pending(), &[], &[("a", Rule::Resources)]);
        assert!(none.disagreements().is_empty());
        let kube_only = result(bound("a"), pending(), &["a"], &[]);
        assert_eq!(kube_only.disagreements(), [Disagreement::BoundByKubeOnly].into());
        assert_eq!(kube_only.blamed(), [Rule::Resources, Rule::PodAffinity].into());
        let mut ours_only = result(pending(), bound("a"), &[], &[("a", Rule::PodAffinity)]);
        ours_only.ours_breaks = [Rule::PodAffinity].into();
        assert_eq!(
            ours_only.disagreements(),
            [Disagreement::BoundByOursOnly, Disagreement::OursBreaksRule].into()
        );
        assert_eq!(ours_only.blamed(), [Rule::PodAffinity].into());
        let checker_wrong = result(pending(), pending(), &["a"], &[]);
        assert_eq!(
            checker_wrong.disagreements(),
            [Disagreement::CheckerDisagreesWithKube].into()
        );
        assert!(Disagreement::CheckerDisagreesWithKube.is_test_fault());
    }

    #[test]
    fn where_v1_20_counts_spread_differently_ours_is_held_to_the_current_rules() {
        let mut r = result(pending(), bound("b"), &[], &[("b", Rule::TopologySpread)]);
        r.current.nodes.insert("b".into(), BTreeSet::new());
        assert_eq!(r.disagreements(), [Disagreement::SpreadCountedAsInV1_20].into());
        assert!(r.failures().is_empty());
        r.ours = pending();
        assert_eq!(r.failures(), [Disagreement::BoundByKubeOnly].into());
        let s = Summary::of(&[r]);
        assert_eq!(
            (s.spread_v1_20, s.spread_v1_20_outcomes_differ, s.agreed),
            (1, 0, 0)
        );
    }

    #[test]
    fn the_summary_counts_per_rule_and_renders() {
        let results = [
            result(bound("a"), bound("a"), &["a"], &[("b", Rule::PodAffinity)]),
            result(bound("a"), pending(), &["a", "b"], &[]),
            result(pending(), pending(), &[], &[("a", Rule::Resources)]),
        ];
        let s = Summary::of(&results);
        assert_eq!((s.probes, s.kube_bound, s.ours_bound, s.same_bound), (3, 2, 1, 2));
        assert_eq!(
            (s.single_feasible, s.single_kube_on_it, s.single_ours_on_it),
            (1, 1, 1)
        );
        assert_eq!(s.agreed, 2);
        assert!(!s.all_agree());
        let affinity = s.rules[&Rule::PodAffinity];
        assert_eq!(
            (
                affinity.carried,
                affinity.excluded,
                affinity.agreed,
                affinity.blamed
            ),
            (3, 1, 2, 1)
        );
        assert_eq!(
            s.rules[&Rule::PreferredPodAffinity].blamed,
            0,
            "preferences never filter"
        );
        let text = s.render();
        assert!(
            text.contains("| required pod affinity | 3 | 1 | 1 | 2 (66.7%) | 1 | 0 |"),
            "{text}"
        );
        assert!(text.contains("| BoundByKubeOnly | 1 |"), "{text}");
    }
}
