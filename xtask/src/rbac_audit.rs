//! `cargo xtask rbac-audit`: permissions the chart grants the components but nothing used. Reads the local
//! API server's audit log (`cargo xtask cluster up` writes request metadata of the `kai-scheduler`
//! namespace's ServiceAccounts: [`crate::cluster::AUDIT_POLICY`]), collects what each component did as
//! (user, verb, API group, resource[/subresource]), and compares it with the rules the chart grants it
//! (the rendered ClusterRoles and Roles, through their bindings, as the e2e tier installs them:
//! `e2e::chart_rbac`). A granted verb no request used fails, naming the rule, unless [`ALLOWED_UNUSED`]
//! says why the e2e tier cannot reach it; a request the authorizer refused fails too (a missing
//! permission). `cargo xtask ci` runs it after the e2e tier, the docs walkthroughs and the demo.
//!
//! The podgrouper's owner kinds (`podgrouper.ownerKinds` in the chart's values) are one [`Family`]: one
//! code path (controller/owners.rs) reads every kind with the same verbs, and which kinds is configuration
//! (the e2e cluster serves only some of them), so a verb used on any owner kind proves it for all of them;
//! a verb used on none fails like any other.
//!
//! Namespaces and resource names are not compared: a verb used on a resource anywhere counts for every
//! rule granting it (the tests keep their leases in their own namespaces, under copies of the chart's lease
//! Roles). An apply patch that creates its object (answered 201) was authorised as a `create` too, so it
//! counts as one.
//!
//! Must not: hold rules of its own: the grants are the chart's, the uses the audit log's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// One kind of request: who, what verb, on what.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Access {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub(crate) user: String,
    pub(crate) verb: String,
    /// `""` for the core group.
    pub(crate) group: String,
    /// `pods`, `pods/binding`, ...
    pub(crate) resource: String,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(
            f,
            "{} {} {group}/{}",
            short_user(&self.user),
            self.verb,
            self.resource
        )
    }
}

/// `kai-scheduler` of `system:serviceaccount:kai-scheduler:kai-scheduler`.
fn short_user(user: &str) -> &str {
    user.rsplit(':').next().unwrap_or(user)
}

/// What the audit log shows of the users under audit.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Observed {
    /// Requests the authorizer allowed.
    pub(crate) used: BTreeSet<Access>,
    /// Requests it refused (`authorization.k8s.io/decision: forbid`), with how often.
    pub(crate) denied: BTreeMap<Access, usize>,
    /// Events read (after the time filter), per user.
    pub(crate) events: BTreeMap<String, usize>,
}

/// Reads audit events (one JSON object a line, as `--audit-log-path` writes them) of users whose name
/// starts with `user_prefix`, received at or after `since` when given. Non-resource requests (discovery)
/// need no rule and are skipped.
///
/// # Errors
/// When a line is not an audit event.
pub(crate) fn observe<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    user_prefix: &str,
    since: Option<jiff::Timestamp>,
) -> anyhow::Result<Observed> {
    let mut observed = Observed::default();
    for (index, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: Value =
            serde_json::from_str(line).with_context(|| format!("audit line {} is not JSON", index + 1))?;
        let user = event
            .pointer("/user/username")
            .and_then(Value::as_str)
            .with_context(|| format!("audit line {} has no user", index + 1))?;
        if !user.starts_with(user_prefix) {
            continue;
        }
        if let Some(since) = since {
            let received = event
                .get("requestReceivedTimestamp")
                .and_then(Value::as_str)
                .with_context(|| format!("audit line {} has no requestReceivedTimestamp", index + 1))?;
            let received: jiff::Timestamp = received
                .parse()
                .with_context(|| format!("audit line {}: bad timestamp {received}", index + 1))?;
            if received < since {
                continue;
            }
        }
        *observed.events.entry(user.to_owned()).or_default() += 1;
        let Some(object) = event.get("objectRef") else {
            continue;
        };
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
        let mut resource = text(object.get("resource"));
        if let Some(sub) = object.get("subresource").and_then(Value::as_str) {
            resource = format!("{resource}/{sub}");
        }
        let access = Access {
            user: user.to_owned(),
            verb: text(event.get("verb")),
            group: text(object.get("apiGroup")),
            resource,
        };
        let decision = event
            .pointer("/annotations/authorization.k8s.io~1decision")
            .and_then(Value::as_str);
        if decision == Some("forbid") {
            *observed.denied.entry(access).or_default() += 1;
            continue;
        }
        let created = event.pointer("/responseStatus/code").and_then(Value::as_u64) == Some(201);
        if access.verb == "patch" && created {
            observed.used.insert(Access {
                verb: "create".to_owned(),
                ..access.clone()
            });
        }
        observed.used.insert(access);
    }
    Ok(observed)
}

/// One (verb, group, resource) a role grants a user, and the rule it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) access: Access,
    /// `ClusterRole kai-scheduler rule 3: [""] [pods] [get]`.
    pub(crate) rule: String,
}

/// Every grant of the rendered objects to ServiceAccounts whose user name starts with `user_prefix`:
/// each (Cluster)RoleBinding's subjects get every (group, resource, verb) of every rule of the role it
/// references. A binding to a role the objects lack grants nothing.
pub(crate) fn grants(objects: &[Value], user_prefix: &str) -> Vec<Grant> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let kind_of = |o: &Value| o["kind"].as_str().unwrap_or_default().to_owned();
    let name_of = |o: &Value| o["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let namespace_of = |o: &Value| o["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
    let mut out = Vec::new();
    for binding in objects
        .iter()
        .filter(|o| matches!(kind_of(o).as_str(), "ClusterRoleBinding" | "RoleBinding"))
    {
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let role = objects.iter().find(|o| {
            kind_of(o) == role_kind
                && name_of(o) == role_name
                && (role_kind == "ClusterRole" || namespace_of(o) == namespace_of(binding))
        });
        let Some(role) = role else { continue };
        for subject in binding["subjects"].as_array().into_iter().flatten() {
            if subject["kind"] != "ServiceAccount" {
                continue;
            }
            let namespace = subject["namespace"]
                .as_str()
                .map_or_else(|| namespace_of(binding), str::to_owned);
            let user = format!(
                "system:serviceaccount:{namespace}:{}",
                subject["name"].as_str().unwrap_or_default()
            );
            if !user.starts_with(user_prefix) {
                continue;
            }
            for (index, rule) in role["rules"].as_array().into_iter().flatten().enumerate() {
                let (groups, resources, verbs) = (
                    strings(&rule["apiGroups"]),
                    strings(&rule["resources"]),
                    strings(&rule["verbs"]),
                );
                let where_ = if role_kind == "Role" {
                    format!(" (namespace {})", namespace_of(role))
                } else {
                    String::new()
                };
                let described = format!(
                    "{role_kind} {role_name}{where_} rule {}: apiGroups {groups:?} resources {resources:?} verbs {verbs:?}",
                    index + 1
                );
                for group in &groups {
                    for resource in &resources {
                        for verb in &verbs {
                            out.push(Grant {
                                access: Access {
                                    user: user.clone(),
                                    verb: verb.clone(),
                                    group: group.clone(),
                                    resource: resource.clone(),
                                },
                                rule: described.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// A granted access the e2e tier cannot reach, and why. `group` and `resource` match exactly; `user` is
/// the ServiceAccount's name (`kai-scheduler`, `kai-podgrouper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreachable {
    pub(crate) user: &'static str,
    pub(crate) verb: &'static str,
    pub(crate) group: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) reason: &'static str,
}

impl Unreachable {
    fn covers(&self, access: &Access) -> bool {
        short_user(&access.user) == self.user
            && access.verb == self.verb
            && access.group == self.group
            && access.resource == self.resource
    }
}

/// Grants of one user proven together: one code path reads every member with the same verbs, so a verb
/// used on any member counts for each of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Family {
    /// The ServiceAccount's name.
    pub(crate) user: &'static str,
    /// What the family is, for the report.
    pub(crate) name: &'static str,
    /// `(group, resource)` of each member.
    pub(crate) members: BTreeSet<(String, String)>,
}

impl Family {
    fn has(&self, access: &Access) -> bool {
        short_user(&access.user) == self.user
            && self
                .members
                .contains(&(access.group.clone(), access.resource.clone()))
    }
}

/// The podgrouper's owner kinds: every `(apiGroup, resource)` of `podgrouper.ownerKinds` in the chart's
/// `values.yaml` text.
///
/// # Errors
/// When the text is not YAML or has no such list.
pub(crate) fn owner_kinds(values_yaml: &str) -> anyhow::Result<Family> {
    let values: Value = serde_yaml::from_str(values_yaml).context("values.yaml is not YAML")?;
    let kinds = values
        .pointer("/podgrouper/ownerKinds")
        .and_then(Value::as_array)
        .context("values.yaml has no podgrouper.ownerKinds")?;
    let mut members = BTreeSet::new();
    for kind in kinds {
        let group = kind["apiGroup"]
            .as_str()
            .context("an owner kind without apiGroup")?;
        for resource in kind["resources"].as_array().into_iter().flatten() {
            let resource = resource.as_str().context("a resource that is not a string")?;
            members.insert((group.to_owned(), resource.to_owned()));
        }
    }
    Ok(Family {
        user: "kai-podgrouper",
        name: "owner kinds (podgrouper.ownerKinds; controller/owners.rs reads them all alike)",
        members,
    })
}

/// Granted accesses no e2e run may use, each with the reason. Keep it short: everything else a
/// component is granted must show up in the audit log of `cargo xtask ci`.
pub(crate) const ALLOWED_UNUSED: &[Unreachable] = &[];

/// The comparison's outcome.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Granted, used.
    pub(crate) used: Vec<Grant>,
    /// Granted, unused, but listed in the allow-list (with its reason).
    pub(crate) allowed: Vec<(Grant, &'static str)>,
    /// Granted, unused itself, but its verb used on another member of its family (which one).
    pub(crate) by_family: Vec<(Grant, Access)>,
    /// Granted, unused, not allowed: the chart grants too much (or the tests miss a path).
    pub(crate) unused: Vec<Grant>,
    /// Refused by the authorizer: the chart grants too little.
    pub(crate) denied: Vec<(Access, usize)>,
    /// Used, allowed by a rule this comparison does not know (neither the chart's nor refused): a
    /// permission from elsewhere (e.g. `system:discovery`-like defaults).
    pub(crate) ungranted: Vec<Access>,
    /// Allow-list entries that cover nothing the chart grants: stale, remove them.
    pub(crate) stale: Vec<Unreachable>,
}

impl Verdict {
    /// Whether the chart grants exactly what was used (up to the allow-list).
    pub(crate) fn passes(&self) -> bool {
        self.unused.is_empty() && self.denied.is_empty() && self.stale.is_empty()
    }
}

/// Sorts every grant into used, proven by its family, allowed-unused and unused; carries the denied
/// requests over.
pub(crate) fn compare(
    grants: &[Grant],
    observed: &Observed,
    allowed: &[Unreachable],
    families: &[Family],
) -> Verdict {
    let mut verdict = Verdict::default();
    for grant in grants {
        let sibling = families.iter().filter(|f| f.has(&grant.access)).find_map(|f| {
            observed
                .used
                .iter()
                .find(|u| u.user == grant.access.user && u.verb == grant.access.verb && f.has(u))
        });
        if observed.used.contains(&grant.access) {
            verdict.used.push(grant.clone());
        } else if let Some(proof) = sibling {
            verdict.by_family.push((grant.clone(), proof.clone()));
        } else if let Some(entry) = allowed.iter().find(|a| a.covers(&grant.access)) {
            verdict.allowed.push((grant.clone(), entry.reason));
        } else {
            verdict.unused.push(grant.clone());
        }
    }
    verdict.denied = observed
        .denied
        .iter()
        .map(|(access, count)| (access.clone(), *count))
        .collect();
    verdict.stale = allowed
        .iter()
        .filter(|a| !grants.iter().any(|g| a.covers(&g.access)))
        .copied()
        .collect();
    verdict.ungranted = observed
        .used
        .iter()
        .filter(|used| !grants.iter().any(|g| &g.access == *used))
        .cloned()
        .collect();
    verdict
}

/// The audit log files under `dir` whose name starts with `audit` and ends with `.log` (the current one
/// and the rotated ones), oldest first.
fn log_files(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit") && n.ends_with(".log"))
        })
        .collect();
    // Rotated files carry their rotation time in the name; the live file (`audit.log`) sorts last.
    files.sort_by_key(|p| (p.file_name().is_some_and(|n| n == "audit.log"), p.clone()));
    Ok(files)
}

/// `cargo xtask rbac-audit`.
pub(crate) fn run(since: Option<jiff::Timestamp>) -> anyhow::Result<()> {
    let log = e2e::DevPaths::from_env().audit_log();
    let dir = log.parent().context("audit log without a directory")?;
    let hint = "the local kube-apiserver writes it when started by this branch's `cargo xtask cluster up` \
                (restart it: `cargo xtask cluster down && cargo xtask cluster up`)";
    if !log.is_file() {
        bail!("no audit log at {}; {hint}", log.display());
    }
    let user_prefix = format!("system:serviceaccount:{}:", e2e::chart::NAMESPACE);
    let mut observed = Observed::default();
    for file in log_files(dir)? {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let part = observe(text.lines(), &user_prefix, since)
            .with_context(|| format!("reading {}", file.display()))?;
        observed.used.extend(part.used);
        for (access, n) in part.denied {
            *observed.denied.entry(access).or_default() += n;
        }
        for (user, n) in part.events {
            *observed.events.entry(user).or_default() += n;
        }
    }
    let helm = e2e::helm::Helm::find_or_fetch()?;
    let rendered = e2e::chart::Rendered::render(
        &helm,
        e2e::chart::RELEASE,
        e2e::chart::NAMESPACE,
        &e2e::chart_rbac::E2E_VALUES,
    )?;
    let grants = grants(rendered.objects(), &user_prefix);
    let values = e2e::chart::chart_dir().join("values.yaml");
    let families = [owner_kinds(
        &std::fs::read_to_string(&values).with_context(|| format!("reading {}", values.display()))?,
    )?];
    let users: BTreeSet<&str> = grants.iter().map(|g| g.access.user.as_str()).collect();
    let silent: Vec<&str> = users
        .iter()
        .copied()
        .filter(|u| !observed.events.contains_key(*u))
        .collect();
    if !silent.is_empty() {
        bail!(
            "no audit events of {} {}in {}: nothing to compare (did the e2e tier run, with this branch's \
             harness? {hint})",
            silent.join(", "),
            since.map(|s| format!("since {s} ")).unwrap_or_default(),
            dir.display()
        );
    }
    let verdict = compare(&grants, &observed, ALLOWED_UNUSED, &families);
    print!("{}", report(&verdict, &observed, &families));
    if !verdict.passes() {
        bail!(
            "the chart's RBAC and what the components did differ: {} granted but unused, {} refused, {} stale \
             allow-list entries",
            verdict.unused.len(),
            verdict.denied.len(),
            verdict.stale.len()
        );
    }
    Ok(())
}

/// The verdict as text: counts per user, then every finding with its rule or reason.
fn report(verdict: &Verdict, observed: &Observed, families: &[Family]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (user, events) in &observed.events {
        let count = |list: &mut dyn Iterator<Item = &Grant>| list.filter(|g| &g.access.user == user).count();
        let _ = writeln!(
            out,
            "{}: {events} audit events; granted and used {}, proven by their family {}, allowed unused {}, \
             unused {}",
            short_user(user),
            count(&mut verdict.used.iter()),
            count(&mut verdict.by_family.iter().map(|(g, _)| g)),
            count(&mut verdict.allowed.iter().map(|(g, _)| g)),
            count(&mut verdict.unused.iter()),
        );
    }
    for family in families {
        let proofs: BTreeSet<String> = verdict
            .by_family
            .iter()
            .filter(|(g, _)| family.has(&g.access))
            .map(|(_, proof)| proof.to_string())
            .collect();
        let exercised: BTreeSet<&(String, String)> = family
            .members
            .iter()
            .filter(|m| {
                verdict
                    .used
                    .iter()
                    .any(|g| (&g.access.group, &g.access.resource) == (&m.0, &m.1))
            })
            .collect();
        let _ = writeln!(
            out,
            "  {} {}: {} of {} members used directly; the others' verbs proven by: {}",
            family.user,
            family.name,
            exercised.len(),
            family.members.len(),
            if proofs.is_empty() {
                "-".to_owned()
            } else {
                proofs.into_iter().collect::<Vec<_>>().join(", ")
            }
        );
    }
    for (grant, reason) in &verdict.allowed {
        let _ = writeln!(
            out,
            "  allowed unused: {} ({}): {reason}",
            grant.access, grant.rule
        );
    }
    for access in &verdict.ungranted {
        let _ = writeln!(out, "  used, granted elsewhere: {access}");
    }
    for grant in &verdict.unused {
        let _ = writeln!(out, "  UNUSED: {} granted by {}", grant.access, grant.rule);
    }
    for (access, count) in &verdict.denied {
        let _ = writeln!(out, "  REFUSED {count}x: {access} (missing from the chart)");
    }
    for entry in &verdict.stale {
        let _ = writeln!(
            out,
            "  STALE allow-list entry (the chart grants no such thing): {} {} {}/{}",
            entry.user, entry.verb, entry.group, entry.resource
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEDULER: &str = "system:serviceaccount:kai-scheduler:kai-scheduler";

    fn event(user: &str, verb: &str, group: &str, resource: &str, sub: Option<&str>, code: u16) -> String {
        let mut object = serde_json::json!({"resource": resource, "apiGroup": group, "apiVersion": "v1"});
        if let Some(sub) = sub {
            object["subresource"] = sub.into();
        }
        serde_json::json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete",
            "verb": verb, "user": {"username": user}, "objectRef": object,
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": "2026-11-23T22:52:23.345201Z",
            "annotations": {"authorization.k8s.io/decision": "allow"},
        })
        .to_string()
    }

    fn access(verb: &str, group: &str, resource: &str) -> Access {
        Access {
            user: SCHEDULER.to_owned(),
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
        }
    }

    #[test]
    fn the_log_gives_who_did_what_on_which_resource() {
        let denied = event(SCHEDULER, "delete", "", "nodes", None, 403).replace("\"allow\"", "\"forbid\"");
        let lines = [
            event(SCHEDULER, "create", "", "pods", Some("binding"), 201),
            event(SCHEDULER, "watch", "scheduling.run.ai", "queues", None, 200),
            // An apply patch that made its object was authorised as a create as well.
            event(SCHEDULER, "patch", "scheduling.run.ai", "podgroups", None, 201),
            event("system:serviceaccount:other:x", "get", "", "secrets", None, 200),
            denied.clone(),
            denied,
            r#"{"verb":"get","user":{"username":"system:serviceaccount:kai-scheduler:kai-scheduler"},"requestURI":"/apis","requestReceivedTimestamp":"2026-11-23T22:52:23Z"}"#.to_owned(),
            String::new(),
        ];
        let observed = observe(
            lines.iter().map(String::as_str),
            "system:serviceaccount:kai-scheduler:",
            None,
        )
        .expect("observe");
        let used: Vec<String> = observed.used.iter().map(ToString::to_string).collect();
        assert_eq!(
            used,
            [
                "kai-scheduler create core/pods/binding",
                "kai-scheduler create scheduling.run.ai/podgroups",
                "kai-scheduler patch scheduling.run.ai/podgroups",
                "kai-scheduler watch scheduling.run.ai/queues",
            ]
        );
        assert_eq!(observed.denied.get(&access("delete", "", "nodes")), Some(&2));
        assert_eq!(
            observed.events.get(SCHEDULER),
            Some(&6),
            "discovery counted, not compared"
        );
        assert_eq!(observed.events.len(), 1, "other users are skipped");

        let later = "2026-11-23T22:52:24Z".parse().expect("time");
        let none = observe(
            lines.iter().map(String::as_str),
            "system:serviceaccount:kai-scheduler:",
            Some(later),
        )
        .expect("observe");
        assert!(
            none.used.is_empty() && none.events.is_empty(),
            "older events are left out"
        );
        assert!(observe(["not json"], "", None).is_err());
    }

    const ROLES: &str = r#"[
        {"kind": "ClusterRole", "metadata": {"name": "kai-scheduler"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]},
                   {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "kai-scheduler"},
         "roleRef": {"kind": "ClusterRole", "name": "kai-scheduler"},
         "subjects": [{"kind": "ServiceAccount", "name": "kai-scheduler", "namespace": "kai-scheduler"}]},
        {"kind": "Role", "metadata": {"name": "lease", "namespace": "kai-scheduler"},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kai-scheduler"], "verbs": ["get", "update"]}]},
        {"kind": "Role", "metadata": {"name": "lease", "namespace": "elsewhere"},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["delete"]}]},
        {"kind": "RoleBinding", "metadata": {"name": "lease", "namespace": "kai-scheduler"},
         "roleRef": {"kind": "Role", "name": "lease"},
         "subjects": [{"kind": "ServiceAccount", "name": "kai-scheduler"}]},
        {"kind": "RoleBinding", "metadata": {"name": "reservation", "namespace": "kai-resource-reservation"},
         "roleRef": {"kind": "Role", "name": "missing"},
         "subjects": [{"kind": "ServiceAccount", "name": "kai-scheduler", "namespace": "kai-scheduler"}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "other"},
         "roleRef": {"kind": "ClusterRole", "name": "kai-scheduler"},
         "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": "other"},
                      {"kind": "User", "name": "alice"}]}
    ]"#;

    fn chart_grants() -> Vec<Grant> {
        let objects: Vec<Value> = serde_json::from_str(ROLES).expect("fixture");
        grants(&objects, "system:serviceaccount:kai-scheduler:")
    }

    #[test]
    fn bindings_give_their_subjects_every_verb_of_every_rule() {
        let grants = chart_grants();
        let shown: Vec<String> = grants.iter().map(|g| g.access.to_string()).collect();
        assert_eq!(
            shown,
            [
                "kai-scheduler list core/pods",
                "kai-scheduler watch core/pods",
                "kai-scheduler list core/nodes",
                "kai-scheduler watch core/nodes",
                "kai-scheduler create core/pods/binding",
                "kai-scheduler get coordination.k8s.io/leases",
                "kai-scheduler update coordination.k8s.io/leases",
            ],
            "the Role of another namespace and the missing role grant nothing; other subjects are not audited"
        );
        assert_eq!(
            grants[4].rule,
            r#"ClusterRole kai-scheduler rule 2: apiGroups [""] resources ["pods/binding"] verbs ["create"]"#
        );
        assert!(
            grants[5]
                .rule
                .starts_with("Role lease (namespace kai-scheduler) rule 1"),
            "{}",
            grants[5].rule
        );
    }

    #[test]
    fn an_unused_grant_fails_unless_allowed_and_a_refusal_fails() {
        let grants = chart_grants();
        let mut observed = Observed::default();
        for (verb, group, resource) in [
            ("list", "", "pods"),
            ("watch", "", "pods"),
            ("list", "", "nodes"),
            ("watch", "", "nodes"),
            ("create", "", "pods/binding"),
            ("get", "coordination.k8s.io", "leases"),
            ("get", "", "configmaps"),
        ] {
            observed.used.insert(access(verb, group, resource));
        }
        let verdict = compare(&grants, &observed, &[], &[]);
        assert!(!verdict.passes());
        let unused: Vec<String> = verdict.unused.iter().map(|g| g.access.to_string()).collect();
        assert_eq!(unused, ["kai-scheduler update coordination.k8s.io/leases"]);
        assert!(verdict.unused[0].rule.contains("Role lease"), "the rule is named");
        assert_eq!(verdict.ungranted, [access("get", "", "configmaps")]);

        let allowed = [Unreachable {
            user: "kai-scheduler",
            verb: "update",
            group: "coordination.k8s.io",
            resource: "leases",
            reason: "renewals take longer than a test",
        }];
        let verdict = compare(&grants, &observed, &allowed, &[]);
        assert!(verdict.passes(), "{verdict:?}");
        assert_eq!(verdict.allowed.len(), 1);
        assert_eq!(verdict.allowed[0].1, "renewals take longer than a test");
        assert_eq!(verdict.used.len(), 6);

        let stale = [Unreachable {
            resource: "leasez",
            ..allowed[0]
        }];
        let verdict = compare(&grants, &observed, &stale, &[]);
        assert_eq!(verdict.stale, stale, "an entry covering no grant is stale");
        assert!(!verdict.passes());

        observed.denied.insert(access("delete", "", "pods"), 1);
        let verdict = compare(&grants, &observed, &allowed, &[]);
        assert!(!verdict.passes(), "a refused request is a missing permission");
        assert!(report(&verdict, &observed, &[]).contains("REFUSED 1x: kai-scheduler delete core/pods"));
    }

    #[test]
    fn a_verb_used_on_one_member_of_a_family_proves_it_for_all() {
        let family = owner_kinds(
            "podgrouper:\n  ownerKinds:\n    - apiGroup: apps\n      resources: [deployments, replicasets]\n    \
             - apiGroup: ray.io\n      resources: [rayclusters]\n",
        )
        .expect("values");
        assert_eq!(family.members.len(), 3);
        assert!(owner_kinds("podgrouper: {}\n").is_err());
        let podgrouper = "system:serviceaccount:kai-scheduler:kai-podgrouper";
        let grant = |verb: &str, group: &str, resource: &str| Grant {
            access: Access {
                user: podgrouper.to_owned(),
                verb: verb.to_owned(),
                group: group.to_owned(),
                resource: resource.to_owned(),
            },
            rule: format!("rule for {group}"),
        };
        let grants = [
            grant("get", "apps", "deployments"),
            grant("get", "apps", "replicasets"),
            grant("get", "ray.io", "rayclusters"),
            grant("list", "apps", "deployments"),
            grant("list", "ray.io", "rayclusters"),
            grant("get", "", "pods"),
        ];
        let mut observed = Observed::default();
        observed.used.insert(grants[0].access.clone());
        // Another user's use proves nothing for the podgrouper.
        observed.used.insert(Access {
            user: SCHEDULER.to_owned(),
            ..grants[3].access.clone()
        });
        let verdict = compare(&grants, &observed, &[], std::slice::from_ref(&family));
        assert_eq!(verdict.used, [grants[0].clone()]);
        let proven: Vec<String> = verdict
            .by_family
            .iter()
            .map(|(g, _)| g.access.to_string())
            .collect();
        assert_eq!(
            proven,
            [
                "kai-podgrouper get apps/replicasets",
                "kai-podgrouper get ray.io/rayclusters"
            ]
        );
        assert_eq!(verdict.by_family[0].1, grants[0].access, "the use that proves it");
        let unused: Vec<String> = verdict.unused.iter().map(|g| g.access.to_string()).collect();
        assert_eq!(
            unused,
            [
                "kai-podgrouper list apps/deployments",
                "kai-podgrouper list ray.io/rayclusters",
                "kai-podgrouper get core/pods",
            ],
            "a verb used on no member fails for all; non-members are on their own"
        );
        let text = report(&verdict, &observed, &[family]);
        assert!(text.contains("1 of 3 members used directly"), "{text}");
    }

    #[test]
    fn the_chart_s_owner_kinds_are_one_family() {
        let values = std::fs::read_to_string(e2e::chart::chart_dir().join("values.yaml")).expect("values");
        let family = owner_kinds(&values).expect("owner kinds");
        for member in [
            ("apps", "deployments"),
            ("batch", "jobs"),
            ("ray.io", "rayclusters"),
        ] {
            assert!(
                family
                    .members
                    .contains(&(member.0.to_owned(), member.1.to_owned())),
                "{member:?}"
            );
        }
        assert!(
            !family.members.iter().any(|(g, _)| g.is_empty()),
            "no core kind is an owner kind: pods are the podgrouper's own rule"
        );
    }

    #[test]
    fn allowed_unused_entries_are_explained() {
        // That each covers a grant of the chart is checked against the render (`Verdict::stale`).
        for entry in ALLOWED_UNUSED {
            assert!(
                entry.reason.len() > 20,
                "{entry:?}: say why the e2e tier cannot reach it"
            );
            assert!(
                !format!("{}{}{}{}", entry.user, entry.verb, entry.group, entry.resource).contains('*'),
                "{entry:?}"
            );
        }
    }
}
