//! A pod's rules about other pods, read from its spec: `affinity.podAffinity` and `podAntiAffinity`
//! (required and preferred terms with `namespaces`, `namespaceSelector`, `matchLabelKeys` and
//! `mismatchLabelKeys`), `topologySpreadConstraints` (with `minDomains`, the node policies and
//! `matchLabelKeys`) and the host ports of its containers and sidecars. Pure functions; what cannot be
//! honoured becomes a problem on the pod, never a silently dropped rule.

use k8s_openapi::api::core::v1::{PodAffinityTerm, PodSpec, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiSelector;

use scheduler_core::model::pod_rules::{
    HostPort, Inclusion, LabelSelector, Labels, NamespaceScope, PodTerm, Protocol, RulesSpec, SelectorOp,
    SelectorRequirement, Spread, conjoin,
};

/// Reads a pod's rules; problems are appended to `problems`.
#[must_use]
pub fn rules(spec: &PodSpec, namespace: &str, labels: &Labels, problems: &mut Vec<String>) -> RulesSpec {
    let mut rules = RulesSpec::default();
    let affinity = spec.affinity.as_ref();
    let term =
        |t: &PodAffinityTerm, problems: &mut Vec<String>| affinity_term(t, namespace, labels, problems);
    if let Some(pa) = affinity.and_then(|a| a.pod_affinity.as_ref()) {
        for t in pa
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            rules.affinity.extend(term(t, problems));
        }
        // kube-scheduler counts a pod for required affinity only where it matches every term.
        conjoin(&mut rules.affinity);
        for w in pa
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            rules
                .preferred_affinity
                .extend(term(&w.pod_affinity_term, problems).map(|t| (w.weight, t)));
        }
    }
    if let Some(pa) = affinity.and_then(|a| a.pod_anti_affinity.as_ref()) {
        for t in pa
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            rules.anti_affinity.extend(term(t, problems));
        }
        for w in pa
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            rules
                .preferred_anti_affinity
                .extend(term(&w.pod_affinity_term, problems).map(|t| (w.weight, t)));
        }
    }
    for c in spec.topology_spread_constraints.iter().flatten() {
        rules.spread.extend(spread(c, namespace, labels, problems));
    }
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for container in spec.containers.iter().chain(sidecars) {
        for p in container.ports.iter().flatten() {
            let Some(port) = p.host_port.filter(|p| *p != 0) else {
                continue;
            };
            let Ok(port) = u16::try_from(port) else {
                problems.push(format!("hostPort {port} is not a port number"));
                continue;
            };
            let protocol = match p.protocol.as_deref() {
                None | Some("TCP") => Protocol::Tcp,
                Some("UDP") => Protocol::Udp,
                Some("SCTP") => Protocol::Sctp,
                Some(other) => {
                    problems.push(format!("hostPort {port}: unknown protocol {other}"));
                    continue;
                }
            };
            let ip = p
                .host_ip
                .as_deref()
                .filter(|ip| !ip.is_empty() && *ip != "0.0.0.0")
                .map(str::to_owned);
            rules.host_ports.push(HostPort { ip, protocol, port });
        }
    }
    rules.host_ports.sort();
    rules.host_ports.dedup();
    rules
}

/// A label selector; `None` for an absent one. Unknown operators are a problem (the API server rejects
/// them, so this only guards against a newer server's additions).
pub(super) fn selector(s: Option<&ApiSelector>, problems: &mut Vec<String>) -> Option<LabelSelector> {
    let s = s?;
    let mut requirements: Vec<SelectorRequirement> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| SelectorRequirement::equals(k, v))
        .collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default();
        let op = match e.operator.as_str() {
            "In" => SelectorOp::In(values),
            "NotIn" => SelectorOp::NotIn(values),
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            other => {
                problems.push(format!("label selector operator {other} is not supported"));
                // Selects nothing rather than everything.
                SelectorOp::In(Vec::new())
            }
        };
        requirements.push(SelectorRequirement {
            key: e.key.clone(),
            op,
        });
    }
    Some(LabelSelector::new(requirements))
}

/// Adds `matchLabelKeys` (key In own value) and `mismatchLabelKeys` (key NotIn own value) to a selector,
/// for the keys the pod carries.
fn with_label_keys(
    selector: Option<LabelSelector>,
    labels: &Labels,
    matching: &[String],
    mismatching: &[String],
) -> Option<LabelSelector> {
    if matching.is_empty() && mismatching.is_empty() {
        return selector;
    }
    let mut selector = selector?;
    for key in matching {
        if let Some(v) = labels.get(key) {
            selector.requirements.push(SelectorRequirement::equals(key, v));
        }
    }
    for key in mismatching {
        if let Some(v) = labels.get(key) {
            selector.requirements.push(SelectorRequirement {
                key: key.clone(),
                op: SelectorOp::NotIn(vec![v.clone()]),
            });
        }
    }
    Some(LabelSelector::new(selector.requirements))
}

fn affinity_term(
    t: &PodAffinityTerm,
    namespace: &str,
    labels: &Labels,
    problems: &mut Vec<String>,
) -> Option<PodTerm> {
    if t.topology_key.is_empty() {
        problems.push("a pod affinity term has an empty topologyKey".to_owned());
        return None;
    }
    let selector = with_label_keys(
        selector(t.label_selector.as_ref(), problems),
        labels,
        t.match_label_keys.as_deref().unwrap_or_default(),
        t.mismatch_label_keys.as_deref().unwrap_or_default(),
    );
    let mut names = t.namespaces.clone().unwrap_or_default();
    let namespace_selector = selector_of_namespaces(t, problems);
    if names.is_empty() && namespace_selector.is_none() {
        names.push(namespace.to_owned());
    }
    names.sort();
    names.dedup();
    Some(PodTerm::new(
        selector,
        NamespaceScope {
            names,
            selector: namespace_selector,
        },
        &t.topology_key,
    ))
}

fn selector_of_namespaces(t: &PodAffinityTerm, problems: &mut Vec<String>) -> Option<LabelSelector> {
    selector(t.namespace_selector.as_ref(), problems)
}

fn spread(
    c: &TopologySpreadConstraint,
    namespace: &str,
    labels: &Labels,
    problems: &mut Vec<String>,
) -> Option<Spread<PodTerm>> {
    let Ok(max_skew) = u32::try_from(c.max_skew).map(|s| s.max(1)) else {
        problems.push(format!(
            "topology spread maxSkew {} must be at least 1",
            c.max_skew
        ));
        return None;
    };
    let hard = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => true,
        "ScheduleAnyway" => false,
        other => {
            problems.push(format!(
                "topology spread whenUnsatisfiable {other} is not supported"
            ));
            return None;
        }
    };
    let policy = |p: Option<&str>, default: Inclusion, what: &str, problems: &mut Vec<String>| match p {
        None => Some(default),
        Some("Honor") => Some(Inclusion::Honor),
        Some("Ignore") => Some(Inclusion::Ignore),
        Some(other) => {
            problems.push(format!("topology spread {what} {other} is not supported"));
            None
        }
    };
    let node_affinity = policy(
        c.node_affinity_policy.as_deref(),
        Inclusion::Honor,
        "nodeAffinityPolicy",
        problems,
    )?;
    let node_taints = policy(
        c.node_taints_policy.as_deref(),
        Inclusion::Ignore,
        "nodeTaintsPolicy",
        problems,
    )?;
    let min_domains = match c.min_domains {
        None => None,
        Some(m) if m >= 1 && hard => u32::try_from(m).ok(),
        Some(m) => {
            problems.push(format!(
                "topology spread minDomains {m} needs a value of at least 1 and whenUnsatisfiable: DoNotSchedule"
            ));
            return None;
        }
    };
    let selector = with_label_keys(
        selector(c.label_selector.as_ref(), problems),
        labels,
        c.match_label_keys.as_deref().unwrap_or_default(),
        &[],
    );
    Some(Spread {
        term: PodTerm::new(selector, NamespaceScope::only(namespace), &c.topology_key),
        max_skew,
        hard,
        min_domains,
        node_affinity,
        node_taints,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        serde_yaml::from_str(yaml).expect("valid pod spec")
    }

    fn read(yaml: &str) -> (RulesSpec, Vec<String>) {
        let mut problems = Vec::new();
        let labels: Labels = [
            ("app".to_owned(), "web".to_owned()),
            ("rev".to_owned(), "7".to_owned()),
        ]
        .into_iter()
        .collect();
        let r = rules(&spec(yaml), "ns", &labels, &mut problems);
        (r, problems)
    }

    #[test]
    fn affinity_terms_resolve_namespaces_and_label_keys() {
        let (r, problems) = read(
            r"
containers: [{name: c}]
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: db}}
      topologyKey: zone
    - labelSelector: {matchExpressions: [{key: tier, operator: NotIn, values: [x]}]}
      namespaces: [b, a]
      topologyKey: kubernetes.io/hostname
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchLabels: {app: web}}
      matchLabelKeys: [rev]
      mismatchLabelKeys: [missing]
      namespaceSelector: {}
      topologyKey: kubernetes.io/hostname
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 30
      podAffinityTerm:
        labelSelector: {matchLabels: {app: web}}
        topologyKey: zone
",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(r.affinity.len(), 2);
        assert_eq!(
            r.affinity[0].also[0].namespaces.names,
            vec!["a".to_owned(), "b".to_owned()],
            "each required term counts only pods matching the other too"
        );
        assert_eq!(r.affinity[0].namespaces, NamespaceScope::only("ns"));
        assert_eq!(
            r.affinity[1].namespaces.names,
            vec!["a".to_owned(), "b".to_owned()]
        );
        let anti = &r.anti_affinity[0];
        assert!(anti.namespaces.names.is_empty());
        assert_eq!(
            anti.namespaces.selector,
            Some(LabelSelector::default()),
            "{{}} selects all"
        );
        assert_eq!(
            anti.selector.as_ref().map(|s| s.requirements.clone()),
            Some(vec![
                SelectorRequirement::equals("app", "web"),
                SelectorRequirement::equals("rev", "7"),
            ])
        );
        assert_eq!(r.preferred_anti_affinity[0].0, 30);
    }

    #[test]
    fn spread_constraints_take_kube_scheduler_defaults() {
        let (r, problems) = read(
            r"
containers: [{name: c}]
topologySpreadConstraints:
- maxSkew: 2
  topologyKey: zone
  whenUnsatisfiable: DoNotSchedule
  labelSelector: {matchLabels: {app: web}}
  matchLabelKeys: [rev]
  minDomains: 3
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  nodeAffinityPolicy: Ignore
  nodeTaintsPolicy: Honor
",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let hard = &r.spread[0];
        assert_eq!(
            (
                hard.max_skew,
                hard.hard,
                hard.min_domains,
                hard.node_affinity,
                hard.node_taints
            ),
            (2, true, Some(3), Inclusion::Honor, Inclusion::Ignore)
        );
        assert_eq!(hard.term.selector.as_ref().map(|s| s.requirements.len()), Some(2));
        let soft = &r.spread[1];
        assert!(!soft.hard);
        assert_eq!(soft.term.selector, None, "no labelSelector counts no pod");
        assert_eq!(
            (soft.node_affinity, soft.node_taints),
            (Inclusion::Ignore, Inclusion::Honor)
        );
    }

    #[test]
    fn host_ports_of_containers_and_sidecars() {
        let (r, problems) = read(
            r"
initContainers:
- name: setup
  ports: [{containerPort: 1, hostPort: 1111}]
- name: proxy
  restartPolicy: Always
  ports: [{containerPort: 15001, hostPort: 15001}]
containers:
- name: c
  ports:
  - {containerPort: 80, hostPort: 8080}
  - {containerPort: 53, hostPort: 53, protocol: UDP, hostIP: 10.0.0.1}
  - {containerPort: 9000}
  - {containerPort: 81, hostPort: 8081, hostIP: 0.0.0.0}
",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let shown: Vec<String> = r.host_ports.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            vec!["8080/TCP", "8081/TCP", "15001/TCP", "10.0.0.1:53/UDP"]
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_a_problem() {
        let (r, problems) = read(
            r"
containers: [{name: c}]
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - labelSelector: {matchExpressions: [{key: a, operator: Sometimes}]}
      topologyKey: zone
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Maybe}
- {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2}
",
        );
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(r.spread.is_empty());
        assert_eq!(
            r.affinity[0]
                .selector
                .as_ref()
                .map(|s| s.requirements[0].op.clone()),
            Some(SelectorOp::In(Vec::new())),
            "an unknown operator selects nothing"
        );
    }
}
