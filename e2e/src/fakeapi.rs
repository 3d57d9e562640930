//! A fake Kubernetes API server, for measuring a component on a cluster too large to load into the local
//! control plane in minutes (`cargo xtask bench --mode memory`).
//!
//! Serves over plain HTTP what the scheduler reads and writes, from objects held as serialized JSON:
//! - discovery (`/api/v1`, `/apis/<group>/<version>`, `/version`) and the CRD gate
//!   (`customresourcedefinitions/<name>`, whatever CRDs were inserted, Established);
//! - list in pages (`limit`, `continue`; every page carries the resourceVersion of the first) and watch
//!   (chunked JSON events after a resourceVersion, closed after `timeoutSeconds`; an ERROR event with
//!   `410 Gone` when the version is older than the kept history, so the client lists again);
//! - GET, POST (create), PUT (with the resourceVersion precondition), PATCH (merge, strategic merge with
//!   `conditions` merged by type, server-side apply approximated as a merge, a status subresource taking
//!   only `status`) and DELETE of any kind it holds, each change a watch event;
//! - `pods/binding` (the pod is bound, then started as a kubelet would: two watch events) and
//!   `pods/eviction` (deleted).
//!
//! Requests it does not know answer 404 and are counted under `unhandled`, so a benchmark can tell.
//! Must not: pretend to validate (no schemas, admission, defaulting or selectors).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header::CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use futures::{StreamExt as _, stream};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Watch events kept per kind for watches that start behind the present (older ones get `410 Gone`).
const HISTORY: usize = 20_000;
/// Longest a watch stays open when the client names no `timeoutSeconds`.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// A kind the server holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// Version served.
    pub version: &'static str,
    /// Plural resource name, as in the URL.
    pub plural: &'static str,
    /// `kind`.
    pub kind: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl Kind {
    fn api_version(self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Pods.
pub const PODS: Kind = Kind {
    group: "",
    version: "v1",
    plural: "pods",
    kind: "Pod",
    namespaced: true,
};
/// Nodes.
pub const NODES: Kind = Kind {
    group: "",
    version: "v1",
    plural: "nodes",
    kind: "Node",
    namespaced: false,
};
/// Namespaces.
pub const NAMESPACES: Kind = Kind {
    group: "",
    version: "v1",
    plural: "namespaces",
    kind: "Namespace",
    namespaced: false,
};
/// Events (`events.k8s.io/v1`, as the scheduler writes them).
pub const EVENTS: Kind = Kind {
    group: "events.k8s.io",
    version: "v1",
    plural: "events",
    kind: "Event",
    namespaced: true,
};
/// PriorityClasses.
pub const PRIORITY_CLASSES: Kind = Kind {
    group: "scheduling.k8s.io",
    version: "v1",
    plural: "priorityclasses",
    kind: "PriorityClass",
    namespaced: false,
};
/// Leases.
pub const LEASES: Kind = Kind {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
};
/// CustomResourceDefinitions.
pub const CRDS: Kind = Kind {
    group: "apiextensions.k8s.io",
    version: "v1",
    plural: "customresourcedefinitions",
    kind: "CustomResourceDefinition",
    namespaced: false,
};
/// KAI PodGroups (any version of the group is served from the same objects).
pub const POD_GROUPS: Kind = Kind {
    group: "scheduling.run.ai",
    version: "v2alpha2",
    plural: "podgroups",
    kind: "PodGroup",
    namespaced: true,
};
/// Queues.
pub const QUEUES: Kind = Kind {
    group: "scheduling.run.ai",
    version: "v2",
    plural: "queues",
    kind: "Queue",
    namespaced: false,
};
/// Topologies.
pub const TOPOLOGIES: Kind = Kind {
    group: "kai.scheduler",
    version: "v1alpha1",
    plural: "topologies",
    kind: "Topology",
    namespaced: false,
};

/// PersistentVolumeClaims.
pub const CLAIMS: Kind = Kind {
    group: "",
    version: "v1",
    plural: "persistentvolumeclaims",
    kind: "PersistentVolumeClaim",
    namespaced: true,
};
/// PersistentVolumes.
pub const VOLUMES: Kind = Kind {
    group: "",
    version: "v1",
    plural: "persistentvolumes",
    kind: "PersistentVolume",
    namespaced: false,
};
/// StorageClasses.
pub const STORAGE_CLASSES: Kind = Kind {
    group: "storage.k8s.io",
    version: "v1",
    plural: "storageclasses",
    kind: "StorageClass",
    namespaced: false,
};
/// CSINodes.
pub const CSI_NODES: Kind = Kind {
    group: "storage.k8s.io",
    version: "v1",
    plural: "csinodes",
    kind: "CSINode",
    namespaced: false,
};

/// Every kind the server knows.
const KINDS: [Kind; 14] = [
    PODS,
    NODES,
    NAMESPACES,
    EVENTS,
    PRIORITY_CLASSES,
    LEASES,
    CRDS,
    POD_GROUPS,
    QUEUES,
    TOPOLOGIES,
    CLAIMS,
    VOLUMES,
    STORAGE_CLASSES,
    CSI_NODES,
];

/// Objects of one kind and the recent watch events.
#[derive(Debug, Default)]
struct Collection {
    /// Serialized objects by `namespace/name` (`name` when cluster-scoped).
    objects: BTreeMap<String, Bytes>,
    /// Recent watch frames: (resourceVersion, namespace, frame).
    history: VecDeque<(u64, String, Bytes)>,
    /// Highest resourceVersion dropped from `history`.
    forgotten: u64,
    /// Open watches: namespace filter and where their frames go.
    watchers: Vec<(Option<String>, mpsc::UnboundedSender<Bytes>)>,
}

#[derive(Debug)]
struct Inner {
    revision: u64,
    collections: Vec<Collection>,
    requests: BTreeMap<String, u64>,
    binds: u64,
    last_bind: Option<Instant>,
    last_write: Option<Instant>,
    generated: u64,
}

/// What a request did not get.
#[derive(Debug)]
struct Reject {
    code: u16,
    reason: &'static str,
    message: String,
}

impl Reject {
    fn not_found(what: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("{what} not found"),
        }
    }

    fn conflict(message: String) -> Self {
        Self {
            code: 409,
            reason: "Conflict",
            message,
        }
    }

    fn bad(message: String) -> Self {
        Self {
            code: 400,
            reason: "BadRequest",
            message,
        }
    }
}

/// The server's state; cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
}

impl Default for FakeApi {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeApi {
    /// An empty server.
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                revision: 1,
                collections: KINDS.iter().map(|_| Collection::default()).collect(),
                requests: BTreeMap::new(),
                binds: 0,
                last_bind: None,
                last_write: None,
                generated: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic in a handler poisons nothing we rely on: the maps stay consistent between statements.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds (or replaces) an object, giving it a resourceVersion, a UID and a creation time where it has
    /// none; watchers see it added. Returns its serialized size.
    ///
    /// # Errors
    /// When the object has no `metadata.name`.
    pub fn insert(&self, kind: Kind, mut object: Value) -> anyhow::Result<usize> {
        let mut inner = self.lock();
        let key = object_key(kind, &object, None).ok_or_else(|| anyhow::anyhow!("object without a name"))?;
        inner.fill_metadata(&mut object);
        Ok(inner.store(kind, &key, object, "ADDED").len())
    }

    /// Removes an object (watchers see it deleted); false when there was none.
    pub fn remove(&self, kind: Kind, namespace: Option<&str>, name: &str) -> bool {
        let key = match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_owned(),
        };
        self.lock().delete(kind, &key).is_ok()
    }

    /// Objects of a kind.
    #[must_use]
    pub fn count(&self, kind: Kind) -> usize {
        self.lock().collection(kind).objects.len()
    }

    /// Successful `pods/binding` requests so far.
    #[must_use]
    pub fn binds(&self) -> u64 {
        self.lock().binds
    }

    /// When the last successful `pods/binding` arrived.
    #[must_use]
    pub fn last_bind(&self) -> Option<Instant> {
        self.lock().last_bind
    }

    /// When the last write other than to a Lease arrived.
    #[must_use]
    pub fn last_write(&self) -> Option<Instant> {
        self.lock().last_write
    }

    /// Requests so far by `METHOD resource[/subresource]` (`WATCH` for watches), and `unhandled ...` for
    /// those answered 404 because the server does not serve them.
    #[must_use]
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.lock().requests.clone()
    }

    /// Serves on `listener` until `shutdown` completes; open watches then end.
    ///
    /// # Errors
    /// When serving fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let api = self.clone();
        let router = Router::new().fallback(handle).with_state(self);
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                shutdown.await;
                // Graceful shutdown waits for open responses: end the watch streams.
                for collection in &mut api.lock().collections {
                    collection.watchers.clear();
                }
            })
            .await
    }
}

impl Inner {
    fn collection(&mut self, kind: Kind) -> &mut Collection {
        let i = KINDS
            .iter()
            .position(|k| *k == kind)
            .expect("invariant: every Kind the server is asked about is one of KINDS");
        &mut self.collections[i]
    }

    fn fill_metadata(&mut self, object: &mut Value) {
        self.generated += 1;
        let serial = self.generated;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.entry("uid")
                .or_insert_with(|| json!(format!("00000000-0000-4000-8000-{serial:012x}")));
            meta.entry("creationTimestamp")
                .or_insert_with(|| json!(crate::now()));
        }
    }

    /// Stores `object` under a new resourceVersion and tells the watchers (`event`: `ADDED` or
    /// `MODIFIED`). Returns the stored bytes.
    fn store(&mut self, kind: Kind, key: &str, mut object: Value, event: &str) -> Bytes {
        self.revision += 1;
        let revision = self.revision;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".to_owned(), json!(revision.to_string()));
        }
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".to_owned(), json!(kind.api_version()));
            map.insert("kind".to_owned(), json!(kind.kind));
        }
        let bytes = Bytes::from(serde_json::to_vec(&object).expect("invariant: JSON values serialize"));
        let namespace = key
            .split_once('/')
            .map(|(ns, _)| ns.to_owned())
            .unwrap_or_default();
        let collection = self.collection(kind);
        collection.objects.insert(key.to_owned(), bytes.clone());
        collection.emit(revision, namespace, event, &bytes);
        bytes
    }

    fn delete(&mut self, kind: Kind, key: &str) -> Result<Bytes, Reject> {
        let bytes = self
            .collection(kind)
            .objects
            .remove(key)
            .ok_or_else(|| Reject::not_found(key))?;
        self.revision += 1;
        let revision = self.revision;
        let mut object: Value = serde_json::from_slice(&bytes).map_err(|e| Reject::bad(e.to_string()))?;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".to_owned(), json!(revision.to_string()));
        }
        let bytes = Bytes::from(serde_json::to_vec(&object).expect("invariant: JSON values serialize"));
        let namespace = key
            .split_once('/')
            .map(|(ns, _)| ns.to_owned())
            .unwrap_or_default();
        self.collection(kind).emit(revision, namespace, "DELETED", &bytes);
        Ok(bytes)
    }

    /// Reads, changes and stores one object (a MODIFIED event).
    fn modify(
        &mut self,
        kind: Kind,
        key: &str,
        change: impl FnOnce(&mut Value) -> Result<(), Reject>,
    ) -> Result<Bytes, Reject> {
        let bytes = self
            .collection(kind)
            .objects
            .get(key)
            .ok_or_else(|| Reject::not_found(key))?;
        let mut object: Value = serde_json::from_slice(bytes).map_err(|e| Reject::bad(e.to_string()))?;
        change(&mut object)?;
        Ok(self.store(kind, key, object, "MODIFIED"))
    }

    fn count(&mut self, what: String) {
        *self.requests.entry(what).or_default() += 1;
    }
}

impl Collection {
    fn emit(&mut self, revision: u64, namespace: String, event: &str, object: &[u8]) {
        let mut frame = Vec::with_capacity(object.len() + 32);
        frame.extend_from_slice(format!("{{\"type\":\"{event}\",\"object\":").as_bytes());
        frame.extend_from_slice(object);
        frame.extend_from_slice(b"}\n");
        let frame = Bytes::from(frame);
        self.watchers.retain(|(filter, tx)| {
            if filter.as_deref().is_some_and(|ns| ns != namespace) {
                return !tx.is_closed();
            }
            tx.send(frame.clone()).is_ok()
        });
        self.history.push_back((revision, namespace, frame));
        while self.history.len() > HISTORY {
            if let Some((dropped, _, _)) = self.history.pop_front() {
                self.forgotten = dropped;
            }
        }
    }
}

/// The key an object is stored under.
fn object_key(kind: Kind, object: &Value, namespace: Option<&str>) -> Option<String> {
    let meta = object.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    if kind.namespaced {
        let ns = namespace
            .or_else(|| meta.get("namespace").and_then(Value::as_str))
            .unwrap_or("default");
        Some(format!("{ns}/{name}"))
    } else {
        Some(name.to_owned())
    }
}

/// A parsed request path.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `/api/v1` or `/apis/<group>/<version>`.
    Discovery { group: String, version: String },
    /// `/version`.
    Version,
    /// A collection, in a namespace or cluster-wide.
    Collection { kind: Kind, namespace: Option<String> },
    /// One object, maybe a subresource of it.
    Object {
        kind: Kind,
        namespace: Option<String>,
        name: String,
        sub: Option<String>,
    },
}

fn find_kind(group: &str, plural: &str) -> Option<Kind> {
    KINDS
        .iter()
        .copied()
        .find(|k| k.group == group && k.plural == plural)
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["version"] => return Some(Target::Version),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let object = |plural: &str, namespace: Option<&str>, name: &str, sub: Option<&str>| {
        find_kind(group, plural).map(|kind| Target::Object {
            kind,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            sub: sub.map(str::to_owned),
        })
    };
    match rest {
        [] => Some(Target::Discovery {
            group: group.to_owned(),
            version: version.to_owned(),
        }),
        [plural] => find_kind(group, plural).map(|kind| Target::Collection {
            kind,
            namespace: None,
        }),
        ["namespaces", ns, plural] => find_kind(group, plural).map(|kind| Target::Collection {
            kind,
            namespace: Some((*ns).to_owned()),
        }),
        ["namespaces", ns, plural, name] => object(plural, Some(ns), name, None),
        ["namespaces", ns, plural, name, sub] => object(plural, Some(ns), name, Some(sub)),
        [plural, name] => object(plural, None, name, None),
        [plural, name, sub] => object(plural, None, name, Some(sub)),
        _ => None,
    }
}

/// A query parameter, percent-decoded.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

fn json_response(code: u16, body: impl Into<Body>) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(CONTENT_TYPE, "application/json")], body.into()).into_response()
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "reason": reason, "message": message, "code": code,
    })
}

fn reject_response(r: &Reject) -> Response {
    json_response(r.code, status_body(r.code, r.reason, &r.message).to_string())
}

async fn handle(
    AxumState(api): AxumState<FakeApi>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = parse_path(uri.path());
    let query = uri.query();
    let label = match &target {
        Some(Target::Collection { kind, .. }) => format!("{method} {}", kind.plural),
        Some(Target::Object { kind, sub, .. }) => match sub {
            Some(sub) => format!("{method} {}/{sub}", kind.plural),
            None => format!("{method} {}", kind.plural),
        },
        Some(Target::Discovery { .. } | Target::Version) => format!("{method} discovery"),
        // The group and version say what is missing; names would make a line per object.
        None => {
            let head: Vec<&str> = uri.path().split('/').take(4).collect();
            format!("unhandled {method} {}", head.join("/"))
        }
    };
    let mut inner = api.lock();
    let label = if method == Method::GET
        && matches!(target, Some(Target::Collection { .. }))
        && query_param(query, "watch").is_some_and(|w| w == "true" || w == "1")
    {
        label.replacen("GET", "WATCH", 1)
    } else {
        label
    };
    inner.count(label);
    let writes_lease = matches!(&target, Some(Target::Object { kind, .. } | Target::Collection { kind, .. }) if *kind == LEASES);
    if method != Method::GET && !writes_lease {
        inner.last_write = Some(Instant::now());
    }
    let Some(target) = target else {
        return reject_response(&Reject::not_found(uri.path()));
    };
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let result = match (method, target) {
        (Method::GET, Target::Version) => Ok(json_response(
            200,
            json!({"major": "1", "minor": "20", "gitVersion": "v1.20.2-fake", "platform": "linux/amd64"})
                .to_string(),
        )),
        (Method::GET, Target::Discovery { group, version }) => discovery(&group, &version),
        (Method::GET, Target::Collection { kind, namespace }) => {
            if query_param(query, "watch").is_some_and(|w| w == "true" || w == "1") {
                Ok(watch(&mut inner, kind, namespace, query))
            } else {
                Ok(list(&mut inner, kind, namespace.as_deref(), query))
            }
        }
        (Method::POST, Target::Collection { kind, namespace }) => {
            create(&mut inner, kind, namespace.as_deref(), &body)
        }
        (
            Method::GET,
            Target::Object {
                kind,
                namespace,
                name,
                sub: None,
            },
        ) => {
            let key = key_of(namespace.as_deref(), &name);
            inner
                .collection(kind)
                .objects
                .get(&key)
                .map(|b| json_response(200, b.clone()))
                .ok_or_else(|| Reject::not_found(&key))
        }
        (
            Method::PUT,
            Target::Object {
                kind,
                namespace,
                name,
                sub,
            },
        ) => replace(
            &mut inner,
            kind,
            &key_of(namespace.as_deref(), &name),
            sub.as_deref(),
            &body,
        ),
        (
            Method::PATCH,
            Target::Object {
                kind,
                namespace,
                name,
                sub,
            },
        ) => patch(
            &mut inner,
            kind,
            &key_of(namespace.as_deref(), &name),
            sub.as_deref(),
            &content_type,
            &body,
        ),
        (
            Method::DELETE,
            Target::Object {
                kind,
                namespace,
                name,
                sub: None,
            },
        ) => inner
            .delete(kind, &key_of(namespace.as_deref(), &name))
            .map(|b| json_response(200, b)),
        (
            Method::POST,
            Target::Object {
                kind,
                namespace,
                name,
                sub: Some(sub),
            },
        ) if kind == PODS => {
            let key = key_of(namespace.as_deref(), &name);
            match sub.as_str() {
                "binding" => bind(&mut inner, &key, &body),
                "eviction" => inner
                    .delete(PODS, &key)
                    .map(|_| json_response(201, status_body(201, "", "").to_string())),
                _ => Err(Reject::not_found(&sub)),
            }
        }
        (method, target) => {
            inner.count(format!("unhandled {method}"));
            Err(Reject::not_found(&format!("{target:?}")))
        }
    };
    result.unwrap_or_else(|r| reject_response(&r))
}

fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

fn discovery(group: &str, version: &str) -> Result<Response, Reject> {
    let mut resources: Vec<Value> = KINDS
        .iter()
        .filter(|k| k.group == group && (k.version == version || k.group == POD_GROUPS.group))
        .map(|k| {
            json!({"name": k.plural, "singularName": "", "namespaced": k.namespaced, "kind": k.kind,
                   "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
        })
        .collect();
    if resources.is_empty() {
        return Err(Reject::not_found(&format!("{group}/{version}")));
    }
    if group.is_empty() {
        for (name, kind, group) in [
            ("pods/binding", "Binding", None),
            ("pods/status", "Pod", None),
            ("pods/eviction", "Eviction", Some("policy")),
        ] {
            let mut r = json!({"name": name, "singularName": "", "namespaced": true, "kind": kind,
                               "verbs": ["create", "get", "patch", "update"]});
            if let Some(g) = group {
                r["group"] = json!(g);
                r["version"] = json!("v1");
            }
            resources.push(r);
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Ok(json_response(
        200,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
               "resources": resources})
        .to_string(),
    ))
}

fn list(inner: &mut Inner, kind: Kind, namespace: Option<&str>, query: Option<&str>) -> Response {
    let limit = query_param(query, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    // `continue` carries the list's resourceVersion and the last key sent.
    let (revision, after) = query_param(query, "continue")
        .and_then(|c| {
            let (rv, key) = c.split_once('-')?;
            Some((rv.parse::<u64>().ok()?, unhex(key)?))
        })
        .map_or((inner.revision, None), |(rv, key)| (rv, Some(key)));
    let prefix = namespace.map(|ns| format!("{ns}/"));
    let collection = inner.collection(kind);
    let range = match &after {
        Some(key) => collection
            .objects
            .range::<String, _>((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded)),
        None => collection.objects.range::<String, _>(..),
    };
    let mut items = Vec::new();
    let mut last = None;
    let mut more = false;
    for (key, bytes) in range {
        if prefix.as_ref().is_some_and(|p| !key.starts_with(p.as_str())) {
            continue;
        }
        if items.len() == limit {
            more = true;
            break;
        }
        items.push(bytes.clone());
        last = Some(key.clone());
    }
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if more && let Some(last) = last {
        meta["continue"] = json!(format!("{revision}-{}", hex(&last)));
    }
    let head =
        json!({"apiVersion": kind.api_version(), "kind": format!("{}List", kind.kind), "metadata": meta});
    let mut body = serde_json::to_vec(&head).expect("invariant: JSON values serialize");
    body.pop(); // the closing brace
    body.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    json_response(200, body)
}

fn watch(inner: &mut Inner, kind: Kind, namespace: Option<String>, query: Option<&str>) -> Response {
    let since = query_param(query, "resourceVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(inner.revision);
    let timeout = query_param(query, "timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let collection = inner.collection(kind);
    if since < collection.forgotten {
        let gone = json!({"type": "ERROR", "object": status_body(410, "Expired",
            &format!("too old resource version: {since} ({})", collection.forgotten))});
        let mut frame = serde_json::to_vec(&gone).expect("invariant: JSON values serialize");
        frame.push(b'\n');
        return json_response(200, frame);
    }
    let backlog: Vec<Bytes> = collection
        .history
        .iter()
        .filter(|(rv, ns, _)| *rv > since && namespace.as_ref().is_none_or(|n| n == ns))
        .map(|(_, _, frame)| frame.clone())
        .collect();
    let (tx, rx) = mpsc::unbounded_channel();
    collection.watchers.push((namespace, tx));
    let live = stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|frame| (frame, rx)) },
    );
    let frames = stream::iter(backlog)
        .chain(live)
        .map(Ok::<_, Infallible>)
        .take_until(tokio::time::sleep(timeout));
    json_response(200, Body::from_stream(frames))
}

fn parse_body(body: &[u8]) -> Result<Value, Reject> {
    serde_json::from_slice(body).map_err(|e| Reject::bad(format!("body is not JSON: {e}")))
}

fn create(inner: &mut Inner, kind: Kind, namespace: Option<&str>, body: &[u8]) -> Result<Response, Reject> {
    let mut object = parse_body(body)?;
    if object.pointer("/metadata/name").is_none() {
        let prefix = object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .unwrap_or("object-")
            .to_owned();
        let name = format!("{prefix}{:x}", inner.generated + 1);
        object["metadata"]["name"] = json!(name);
    }
    if let (true, Some(ns)) = (kind.namespaced, namespace) {
        object["metadata"]["namespace"] = json!(ns);
    }
    let key = object_key(kind, &object, namespace).ok_or_else(|| Reject::bad("no name".to_owned()))?;
    if inner.collection(kind).objects.contains_key(&key) {
        return Err(Reject {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{key} already exists"),
        });
    }
    inner.fill_metadata(&mut object);
    let bytes = inner.store(kind, &key, object, "ADDED");
    Ok(json_response(201, bytes))
}

fn replace(
    inner: &mut Inner,
    kind: Kind,
    key: &str,
    sub: Option<&str>,
    body: &[u8],
) -> Result<Response, Reject> {
    let new = parse_body(body)?;
    let bytes = inner.modify(kind, key, |current| {
        check_version(current, &new)?;
        match sub {
            Some("status") => current["status"] = new.get("status").cloned().unwrap_or(Value::Null),
            Some(other) => return Err(Reject::not_found(other)),
            None => {
                let keep_uid = current.pointer("/metadata/uid").cloned();
                *current = new.clone();
                if let Some(uid) = keep_uid {
                    current["metadata"]["uid"] = uid;
                }
            }
        }
        Ok(())
    })?;
    Ok(json_response(200, bytes))
}

/// A write naming a resourceVersion must name the current one.
fn check_version(current: &Value, request: &Value) -> Result<(), Reject> {
    let wanted = request
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    let have = current
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    match wanted {
        Some(w) if !w.is_empty() && Some(w) != have => Err(Reject::conflict(format!(
            "the object has been modified (resourceVersion {w}, now {})",
            have.unwrap_or("")
        ))),
        _ => Ok(()),
    }
}

fn patch(
    inner: &mut Inner,
    kind: Kind,
    key: &str,
    sub: Option<&str>,
    content_type: &str,
    body: &[u8],
) -> Result<Response, Reject> {
    let mut patch = parse_body(body)?;
    let strategic = content_type.starts_with("application/strategic-merge-patch");
    if !(strategic
        || content_type.starts_with("application/merge-patch")
        || content_type.starts_with("application/apply-patch"))
    {
        return Err(Reject {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!("patch type {content_type:?} is not served"),
        });
    }
    let bytes = inner.modify(kind, key, |current| {
        check_version(current, &patch)?;
        if let Some(map) = patch.as_object_mut() {
            for field in ["apiVersion", "kind"] {
                map.remove(field);
            }
            if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                for field in ["resourceVersion", "uid", "name", "namespace"] {
                    meta.remove(field);
                }
            }
        }
        match sub {
            Some("status") => {
                if let Some(status) = patch.get("status") {
                    merge(&mut current["status"], status, strategic);
                }
            }
            Some(other) => return Err(Reject::not_found(other)),
            None => merge(current, &patch, strategic),
        }
        Ok(())
    })?;
    Ok(json_response(200, bytes))
}

/// JSON merge patch (RFC 7386); with `strategic`, lists named `conditions` are merged by `type`.
fn merge(target: &mut Value, patch: &Value, strategic: bool) {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(target_map) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else if strategic && key == "conditions" && value.is_array() {
            let entry = target_map.entry(key.clone()).or_insert_with(|| json!([]));
            merge_conditions(entry, value);
        } else {
            merge(
                target_map.entry(key.clone()).or_insert(Value::Null),
                value,
                strategic,
            );
        }
    }
}

fn merge_conditions(target: &mut Value, patch: &Value) {
    if !target.is_array() {
        *target = json!([]);
    }
    let (Some(list), Some(changes)) = (target.as_array_mut(), patch.as_array()) else {
        return;
    };
    for change in changes {
        let type_ = change.get("type");
        match list.iter_mut().find(|c| c.get("type") == type_) {
            Some(existing) => merge(existing, change, false),
            None => list.push(change.clone()),
        }
    }
}

/// `pods/binding`: the pod is bound (MODIFIED), then started on the node as a kubelet would (MODIFIED).
fn bind(inner: &mut Inner, key: &str, body: &[u8]) -> Result<Response, Reject> {
    let binding = parse_body(body)?;
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .ok_or_else(|| Reject::bad("binding without target.name".to_owned()))?
        .to_owned();
    let now = crate::now();
    inner.modify(PODS, key, |pod| {
        if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str)
            && pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
        {
            return Err(Reject::conflict(format!("pod {key} has another UID")));
        }
        if pod.pointer("/spec/nodeName").is_some_and(|n| !n.is_null()) {
            return Err(Reject::conflict(format!("pod {key} is already assigned")));
        }
        pod["spec"]["nodeName"] = json!(node);
        merge_conditions(
            &mut pod["status"]["conditions"],
            &json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                     "lastTransitionTime": now}]),
        );
        Ok(())
    })?;
    inner.modify(PODS, key, |pod| {
        let containers: Vec<Value> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        json!({"name": c.get("name"), "image": c.get("image"), "imageID": "",
                               "containerID": format!("fake://{}", c.get("name").and_then(Value::as_str).unwrap_or("")),
                               "ready": true, "restartCount": 0, "started": true,
                               "state": {"running": {"startedAt": now}}, "lastState": {}})
                    })
                    .collect()
            })
            .unwrap_or_default();
        let status = &mut pod["status"];
        status["phase"] = json!("Running");
        status["hostIP"] = json!("10.0.0.1");
        status["podIP"] = json!("10.1.0.1");
        status["podIPs"] = json!([{"ip": "10.1.0.1"}]);
        status["startTime"] = json!(now);
        status["containerStatuses"] = json!(containers);
        merge_conditions(
            &mut status["conditions"],
            &json!([
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": now},
            ]),
        );
        Ok(())
    })?;
    inner.binds += 1;
    inner.last_bind = Some(Instant::now());
    Ok(json_response(201, status_body(201, "", "").to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_collections_objects_and_subresources() {
        assert_eq!(
            parse_path("/api/v1/pods"),
            Some(Target::Collection {
                kind: PODS,
                namespace: None
            })
        );
        assert_eq!(
            parse_path("/api/v1/namespaces"),
            Some(Target::Collection {
                kind: NAMESPACES,
                namespace: None
            })
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/a"),
            Some(Target::Object {
                kind: NAMESPACES,
                namespace: None,
                name: "a".to_owned(),
                sub: None
            })
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/a/pods/p/binding"),
            Some(Target::Object {
                kind: PODS,
                namespace: Some("a".to_owned()),
                name: "p".to_owned(),
                sub: Some("binding".to_owned())
            })
        );
        assert_eq!(
            parse_path("/apis/scheduling.run.ai/v2/queues/q/status"),
            Some(Target::Object {
                kind: QUEUES,
                namespace: None,
                name: "q".to_owned(),
                sub: Some("status".to_owned())
            })
        );
        assert_eq!(parse_path("/apis/scheduling.volcano.sh/v1beta1/podgroups"), None);
    }

    #[test]
    fn strategic_merge_replaces_conditions_by_type() {
        let mut pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
        let patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}});
        merge(&mut pod, &patch, true);
        assert_eq!(
            pod,
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "False"}]}})
        );
        merge(&mut pod, &json!({"status": null}), false);
        assert_eq!(pod, json!({}));
    }

    #[test]
    fn continue_tokens_round_trip() {
        assert_eq!(unhex(&hex("ns/pod-1")).as_deref(), Some("ns/pod-1"));
        assert_eq!(percent_decode("a%2Fb+c"), "a/b c");
    }

    /// The kube client lists in pages, watches, binds and sees the pod bound and started.
    #[tokio::test]
    async fn a_kube_watcher_lists_pages_and_sees_a_bind() -> anyhow::Result<()> {
        use futures::TryStreamExt as _;
        use k8s_openapi::api::core::v1::Pod;
        use kube::runtime::watcher;

        let fake = FakeApi::new();
        for i in 0..5 {
            fake.insert(
                PODS,
                json!({"metadata": {"name": format!("p{i}"), "namespace": "ns"},
                       "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(fake.clone().serve(listener, async move {
            let _ = stopped.await;
        }));
        let config = kube::Config::new(format!("http://{address}").parse()?);
        let client = kube::Client::try_from(config)?;
        let pods: kube::Api<Pod> = kube::Api::all(client.clone());
        let mut events = watcher(pods, watcher::Config::default().page_size(2)).boxed();
        let mut listed = 0;
        while let Some(event) = events.try_next().await? {
            match event {
                watcher::Event::InitApply(_) => listed += 1,
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(listed, 5);
        assert_eq!(fake.requests().get("GET pods"), Some(&3), "{:?}", fake.requests());
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p3"},
                             "target": {"kind": "Node", "name": "n1"}});
        let ns: kube::Api<Pod> = kube::Api::namespaced(client, "ns");
        let _: Value = ns
            .create_subresource("binding", "p3", &kube::api::PostParams::default(), &binding)
            .await?;
        let mut seen = Vec::new();
        while seen.len() < 2 {
            if let Some(watcher::Event::Apply(pod)) = events.try_next().await? {
                let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
                seen.push((pod.spec.and_then(|s| s.node_name), phase));
            }
        }
        assert_eq!(
            seen,
            [
                (Some("n1".to_owned()), String::new()),
                (Some("n1".to_owned()), "Running".to_owned())
            ]
        );
        assert_eq!(fake.binds(), 1);
        let again = ns
            .create_subresource::<Value, Value>("binding", "p3", &kube::api::PostParams::default(), &binding)
            .await;
        assert!(
            matches!(again, Err(kube::Error::Api(ref s)) if s.code == 409),
            "{again:?}"
        );
        let _ = stop.send(());
        server.await??;
        Ok(())
    }
}
