//! A pod that names no gang joins the PodGroup a podgrouper made for it alone (owned by the pod, with
//! the podgrouper's top-owner annotation), whichever arrives first; its bind names the group on the pod.
//! Objects go through the watch ingestion (`cache`) into the model, then cycles run.

use k8s_openapi::api::core::v1::{Node, Pod};
use kai_scheduler::cache::ingest::{Ingest, Partition};
use kai_scheduler::cache::watch::{Change, Event};
use scheduler_core::config::Config;
use scheduler_core::framework::decisions::Decisions;
use scheduler_core::model::Cluster;

/// 2026-01-01T00:00:00Z.
const NOW: i64 = 1_767_225_600_000;

fn node(name: &str) -> Event {
    let n: Node = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}}}\nstatus: {{allocatable: {{cpu: \"4\", memory: 16Gi, pods: \"110\"}}, conditions: [{{type: Ready, status: \"True\"}}]}}"
    ))
    .expect("node yaml");
    Event::Node(Box::new(Change::Apply(n)))
}

/// A pending pod of this scheduler; `annotations` is a YAML flow mapping.
fn pod(name: &str, annotations: &str) -> Event {
    let p: Pod = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}, namespace: ns, uid: uid-{name}, annotations: {annotations}, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec: {{schedulerName: {}, containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]}}\nstatus: {{phase: Pending}}",
        api::keys::SCHEDULER_NAME
    ))
    .expect("pod yaml");
    Event::Pod(Box::new(Change::Apply(p)))
}

/// A PodGroup of one pod owned by pod `owner` (a UID); `by_podgrouper` adds the top-owner annotation.
fn owned_group(name: &str, owner: &str, by_podgrouper: bool) -> Event {
    let annotations = if by_podgrouper {
        format!("{{{}: \"kind: Pod\"}}", api::keys::TOP_OWNER_METADATA)
    } else {
        "{}".to_owned()
    };
    let pg: api::PodGroup = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}, namespace: ns, uid: pg-{name}, annotations: {annotations}, creationTimestamp: \"2026-01-01T00:00:00Z\", ownerReferences: [{{apiVersion: v1, kind: Pod, name: x, uid: {owner}}}]}}\nspec: {{minMember: 1}}"
    ))
    .expect("podgroup yaml");
    Event::PodGroup(Change::Apply(pg))
}

fn deleted_group(name: &str) -> Event {
    let pg: api::PodGroup = serde_yaml::from_str(&format!(
        "metadata: {{name: {name}, namespace: ns}}\nspec: {{minMember: 1}}"
    ))
    .expect("podgroup yaml");
    Event::PodGroup(Change::Delete(pg))
}

fn queue() -> Event {
    let q: api::Queue = serde_yaml::from_str(&format!(
        "metadata: {{name: {}}}\nspec: {{}}",
        api::keys::DEFAULT_QUEUE
    ))
    .expect("queue yaml");
    Event::Queue(Change::Apply(q))
}

struct World {
    ingest: Ingest,
    cluster: Cluster,
}

impl World {
    fn new() -> Self {
        let mut w = Self {
            ingest: Ingest::new(
                api::keys::SCHEDULER_NAME,
                api::keys::DEFAULT_QUEUE,
                Partition::default(),
            ),
            cluster: Cluster::default(),
        };
        w.apply(queue());
        w.apply(node("n1"));
        w
    }

    fn apply(&mut self, e: Event) {
        self.ingest.apply(&mut self.cluster, e);
    }

    fn cycle(&mut self) -> Decisions {
        let d = scheduler_core::cycle::run(&mut self.cluster, &Config::default(), NOW).decisions;
        self.cluster.check_invariants().expect("invariants");
        d
    }

    /// The group pod `name` is linked to, if any.
    fn group_of(&self, name: &str) -> Option<String> {
        let (_, t) = self.cluster.tasks.iter().find(|(_, t)| &*t.name == name)?;
        t.group.map(|g| self.cluster.group(g).key.name.to_string())
    }
}

/// (pod, group, whether the binding names the group on the pod) for each bind.
fn binds(d: &Decisions) -> Vec<(String, Option<String>, bool)> {
    d.binds
        .iter()
        .map(|b| {
            (
                b.name.to_string(),
                b.group.as_ref().map(|g| g.name.to_string()),
                b.name_group_on_pod,
            )
        })
        .collect()
}

#[test]
fn a_pod_joins_the_group_made_for_it_whichever_arrives_first_and_its_bind_names_it() {
    for group_first in [false, true] {
        let mut w = World::new();
        if group_first {
            w.apply(owned_group("pg-a", "uid-a", true));
            w.apply(pod("a", "{}"));
        } else {
            w.apply(pod("a", "{}"));
            assert_eq!(w.group_of("a"), None);
            w.apply(owned_group("pg-a", "uid-a", true));
        }
        assert_eq!(
            w.group_of("a").as_deref(),
            Some("pg-a"),
            "group first: {group_first}"
        );
        let d = w.cycle();
        assert_eq!(
            binds(&d),
            vec![("a".to_owned(), Some("pg-a".to_owned()), true)],
            "group first: {group_first}"
        );
    }
}

#[test]
fn a_pod_that_names_its_group_keeps_it_and_its_bind_adds_nothing() {
    let mut w = World::new();
    w.apply(pod("a", &format!("{{{}: named}}", api::keys::POD_GROUP_NAME)));
    w.apply(owned_group("named", "uid-other", true));
    w.apply(owned_group("pg-a", "uid-a", true));
    assert_eq!(w.group_of("a").as_deref(), Some("named"));
    let d = w.cycle();
    assert_eq!(binds(&d), vec![("a".to_owned(), Some("named".to_owned()), false)]);
}

#[test]
fn a_group_someone_else_hung_on_the_pod_does_not_capture_it() {
    let mut w = World::new();
    w.apply(pod("a", "{}"));
    w.apply(owned_group("theirs", "uid-a", false));
    assert_eq!(w.group_of("a"), None);
    let d = w.cycle();
    assert!(d.binds.is_empty(), "{:?}", binds(&d));
}

#[test]
fn a_deleted_group_lets_the_pod_go_and_a_second_one_made_for_it_takes_over() {
    let mut w = World::new();
    w.apply(pod("a", "{}"));
    w.apply(owned_group("pg-b", "uid-a", true));
    w.apply(owned_group("pg-a", "uid-a", true));
    // Two made for one pod: the first by key, on every replica alike.
    assert_eq!(w.group_of("a").as_deref(), Some("pg-a"));
    w.apply(deleted_group("pg-a"));
    assert_eq!(w.group_of("a").as_deref(), Some("pg-b"));
    w.apply(deleted_group("pg-b"));
    assert_eq!(w.group_of("a"), None);
    let d = w.cycle();
    assert!(d.binds.is_empty(), "{:?}", binds(&d));
    // Recreated by the podgrouper: linked again and placed.
    w.apply(owned_group("pg-a", "uid-a", true));
    let d = w.cycle();
    assert_eq!(binds(&d), vec![("a".to_owned(), Some("pg-a".to_owned()), true)]);
}

#[test]
fn a_pod_update_keeps_the_link_and_a_later_name_replaces_it() {
    let mut w = World::new();
    w.apply(owned_group("pg-a", "uid-a", true));
    w.apply(pod("a", "{}"));
    // An update that still names nothing (a label, a status) keeps the group made for it.
    w.apply(pod("a", "{note: x}"));
    assert_eq!(w.group_of("a").as_deref(), Some("pg-a"));
    // A name written later wins over the owner link.
    w.apply(owned_group("other", "uid-z", true));
    w.apply(pod("a", &format!("{{{}: other}}", api::keys::POD_GROUP_NAME)));
    assert_eq!(w.group_of("a").as_deref(), Some("other"));
    let d = w.cycle();
    assert_eq!(binds(&d), vec![("a".to_owned(), Some("other".to_owned()), false)]);
}
