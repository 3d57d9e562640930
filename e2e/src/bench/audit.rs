//! API writes counted from the local control plane's audit log (`~/.cache/kai-dev/cluster/audit/`).
//!
//! The audit policy (`xtask/src/cluster/mod.rs`, `AUDIT_POLICY`) records the metadata of every request of
//! the components' ServiceAccounts: verb, resource, subresource, namespace, user. A benchmark run has a
//! namespace of its own, so the writes of its components are the audited writes in that namespace: exact,
//! and free for the run (the API server writes the log anyway). Cluster-scoped writes (queue statuses)
//! cannot be told from another run's and are left out.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::time::SystemTime;

use anyhow::Context as _;
use serde_json::Value;

/// Name prefix of a pipeline run's backlog pods (`bench::pipeline`): their writes, and those on their
/// PodGroups (`pg-<pod>-...`) and events (`<object>.<hex>`), are counted apart, as `backlog: <kind>`.
pub const BACKLOG_PREFIX: &str = "waiting-";

/// Whether an object named `name` belongs to the backlog (a pod, its PodGroup or an event of either).
pub fn is_backlog(name: &str) -> bool {
    name.strip_prefix("pg-")
        .unwrap_or(name)
        .starts_with(BACKLOG_PREFIX)
}

/// Requests of one run by kind (`"binding"`, `"PodGroup status"`, ...), in the run's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// Writes by kind.
    pub writes: BTreeMap<String, usize>,
    /// Reads (get, list) by component: requests the component could have answered from a cache.
    pub reads: BTreeMap<String, usize>,
}

impl Requests {
    /// All writes.
    #[must_use]
    pub fn total_writes(&self) -> usize {
        self.writes.values().sum()
    }
}

/// The component a ServiceAccount user name belongs to (`system:serviceaccount:<ns>:<name>`).
fn component(user: &str) -> &str {
    user.rsplit(':').next().unwrap_or(user)
}

/// The kind of a write, named for the table, from the audit event's fields.
#[must_use]
pub fn write_kind(user: &str, verb: &str, resource: &str, subresource: &str) -> String {
    let who = component(user);
    let podgrouper = who.contains("podgrouper");
    match (resource, subresource) {
        ("podgroups", "") if podgrouper => "PodGroup create/apply".to_owned(),
        ("podgroups", "") => "PodGroup annotations".to_owned(),
        ("podgroups", "status") if podgrouper => "PodGroup condition (podgrouper)".to_owned(),
        ("podgroups", "status") => "PodGroup status".to_owned(),
        ("pods", "") => "pod patch".to_owned(),
        ("pods", "binding") => "binding".to_owned(),
        ("pods", "status") => "pod status".to_owned(),
        ("events", _) => "event".to_owned(),
        _ if subresource.is_empty() => format!("{resource} {verb} ({who})"),
        _ => format!("{resource}/{subresource} {verb} ({who})"),
    }
}

/// Counts the audited requests in `namespace` received since `since`, from the audit logs in `dir`
/// modified since then (the current file and the backups rotated during the run).
///
/// # Errors
/// When the directory cannot be read.
pub fn count(dir: &Path, namespace: &str, since: SystemTime) -> anyhow::Result<Requests> {
    let mut requests = Requests::default();
    let needle = format!("\"namespace\":\"{namespace}\"");
    let received_since = jiff::Timestamp::try_from(since).context("the run's start as a timestamp")?;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("log") {
            continue;
        }
        if entry.metadata()?.modified()? < since {
            continue;
        }
        let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        for line in BufReader::new(file).lines() {
            let Ok(line) = line else { continue };
            if !line.contains(&needle) {
                continue;
            }
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let received = event
                .get("requestReceivedTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            // What was made before the run (a backlog) is not the run's.
            if received.is_some_and(|r| r >= received_since) {
                tally(&mut requests, &event, namespace);
            }
        }
    }
    Ok(requests)
}

/// Adds one audit event (stage `ResponseComplete`) to `requests` when it is in `namespace`.
pub fn tally(requests: &mut Requests, event: &Value, namespace: &str) {
    let s = |p: &str| event.pointer(p).and_then(Value::as_str).unwrap_or_default();
    if s("/stage") != "ResponseComplete" || s("/objectRef/namespace") != namespace {
        return;
    }
    let (verb, user) = (s("/verb"), s("/user/username"));
    match verb {
        "create" | "update" | "patch" | "delete" => {
            let mut kind = write_kind(user, verb, s("/objectRef/resource"), s("/objectRef/subresource"));
            if is_backlog(s("/objectRef/name")) {
                kind.insert_str(0, "backlog: ");
            }
            *requests.writes.entry(kind).or_default() += 1;
        }
        "get" | "list" => {
            *requests.reads.entry(component(user).to_owned()).or_default() += 1;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(user: &str, verb: &str, resource: &str, sub: Option<&str>, ns: &str) -> Value {
        named(user, verb, resource, sub, ns, "p-000001")
    }

    fn named(user: &str, verb: &str, resource: &str, sub: Option<&str>, ns: &str, name: &str) -> Value {
        let mut object = json!({ "resource": resource, "namespace": ns, "name": name });
        if let Some(sub) = sub {
            object["subresource"] = json!(sub);
        }
        json!({ "stage": "ResponseComplete", "verb": verb, "objectRef": object,
                "user": { "username": format!("system:serviceaccount:kai-scheduler:{user}") } })
    }

    #[test]
    fn writes_are_counted_by_kind_in_the_run_namespace_only() {
        let mut r = Requests::default();
        for e in [
            event("kai-podgrouper", "patch", "podgroups", None, "ns"),
            event("kai-podgrouper", "patch", "pods", None, "ns"),
            event("kai-podgrouper", "get", "jobs", None, "ns"),
            event("kai-scheduler", "create", "pods", Some("binding"), "ns"),
            event("kai-scheduler", "patch", "podgroups", Some("status"), "ns"),
            event("kai-scheduler", "patch", "podgroups", None, "ns"),
            event("kai-scheduler", "create", "events", None, "ns"),
            event("kai-scheduler", "create", "pods", Some("binding"), "other"),
            event("kai-scheduler", "watch", "pods", None, "ns"),
        ] {
            tally(&mut r, &e, "ns");
        }
        let writes: Vec<(&str, usize)> = r.writes.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            writes,
            [
                ("PodGroup annotations", 1),
                ("PodGroup create/apply", 1),
                ("PodGroup status", 1),
                ("binding", 1),
                ("event", 1),
                ("pod patch", 1),
            ]
        );
        assert_eq!(r.total_writes(), 6);
        assert_eq!(r.reads.get("kai-podgrouper"), Some(&1));
    }

    /// The writes counted of `events`, by kind.
    fn writes_of(events: &[Value]) -> Vec<(String, usize)> {
        let mut r = Requests::default();
        for e in events {
            tally(&mut r, e, "ns");
        }
        r.writes.into_iter().collect()
    }

    #[test]
    fn the_backlogs_writes_are_counted_apart() {
        let by_scheduler = |resource, sub, name| named("kai-scheduler", "patch", resource, sub, "ns", name);
        let writes = writes_of(&[
            by_scheduler("podgroups", Some("status"), "pg-waiting-00001-uid"),
            by_scheduler("podgroups", Some("status"), "pg-p-000001-uid"),
            by_scheduler("events", None, "pg-waiting-00001-uid.17a3f"),
            by_scheduler("pods", Some("status"), "waiting-00001"),
            by_scheduler("pods", Some("status"), "p-waiting-1"),
        ]);
        let expected = [
            ("PodGroup status", 1),
            ("backlog: PodGroup status", 1),
            ("backlog: event", 1),
            ("backlog: pod status", 1),
            ("pod status", 1),
        ];
        assert_eq!(writes, expected.map(|(k, n)| (k.to_owned(), n)));
    }

    #[test]
    fn requests_received_before_the_run_are_not_counted() {
        let dir = std::env::temp_dir().join(format!("kai-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let since = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let at = |secs: u64, name: &str| {
            let mut e = named("kai-scheduler", "patch", "podgroups", Some("status"), "ns", name);
            let t = jiff::Timestamp::from_second(i64::try_from(secs).expect("secs")).expect("timestamp");
            e["requestReceivedTimestamp"] = json!(t.to_string());
            e.to_string()
        };
        let lines = [
            at(1_699_999_999, "pg-waiting-00001-uid"),
            at(1_700_000_001, "pg-p-000001-uid"),
        ];
        std::fs::write(dir.join("audit.log"), lines.join("\n")).expect("write");
        let r = count(&dir, "ns", since).expect("count");
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(
            r.writes.into_iter().collect::<Vec<_>>(),
            [("PodGroup status".to_owned(), 1)]
        );
    }
}
