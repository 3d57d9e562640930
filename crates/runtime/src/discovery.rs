//! Asking the API server what it offers instead of assuming a Kubernetes version: the server version,
//! whether a resource (e.g. an optional CRD) is served, and which `Eviction` version the `pods/eviction`
//! subresource takes (`policy/v1` from 1.22, `policy/v1beta1` before), plus the eviction call itself.
//!
//! Owns: discovery requests and their interpretation (pure functions over the discovery documents).
//! Must not: cache answers across calls (callers decide when to ask again) or decide what to evict.

use std::{fmt, time::Duration};

use http::{Request, header::CONTENT_TYPE};
use k8s_openapi::apimachinery::pkg::{
    apis::meta::v1::{APIResourceList, DeleteOptions},
    version::Info,
};
use kube::Client;

/// Why a discovery or eviction request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server could not be asked.
    #[error("{what}: {source}")]
    Request {
        /// What was being asked.
        what: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// `/version` did not contain a parseable `major.minor`.
    #[error("cannot parse the server version (major {major:?}, minor {minor:?}, gitVersion {git_version:?})")]
    UnparseableVersion {
        /// `major` as served.
        major: String,
        /// `minor` as served.
        minor: String,
        /// `gitVersion` as served.
        git_version: String,
    },
    /// The core API does not list `pods/eviction`.
    #[error("the API server does not serve the pods/eviction subresource")]
    EvictionUnsupported,
    /// `pods/eviction` takes an Eviction of a group/version this code does not know.
    #[error(
        "pods/eviction takes {group}/{version}, which is not supported (expected policy/v1 or policy/v1beta1)"
    )]
    UnknownEvictionVersion {
        /// Group the server declares.
        group: String,
        /// Version the server declares.
        version: String,
    },
    /// A namespace or pod name that cannot be a single URL path segment.
    #[error("invalid object name {0:?}")]
    InvalidName(String),
    /// The eviction body or request could not be built.
    #[error("cannot build the eviction request: {0}")]
    BuildRequest(#[source] http::Error),
    /// The eviction failed for a reason other than "gone" or "blocked by a disruption budget".
    #[error("evicting pod {namespace}/{name}: {source}")]
    Evict {
        /// Pod namespace.
        namespace: String,
        /// Pod name.
        name: String,
        /// The client's error (for API errors, the server's `Status`).
        #[source]
        source: kube::Error,
    },
}

/// A Kubernetes server version, `major.minor` as served by `/version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version (e.g. 20 for v1.20.2).
    pub minor: u32,
    /// The full version string, e.g. `v1.28.3-eks-4f4795d`.
    pub git_version: String,
}

impl ServerVersion {
    /// Whether the server is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// Reads `major`/`minor`, tolerating vendor suffixes (`20+`) and falling back to `gitVersion`.
    fn from_info(info: &Info) -> Result<Self, Error> {
        let from_fields = leading_number(&info.major).zip(leading_number(&info.minor));
        let from_git = || {
            let mut parts = info.git_version.trim_start_matches('v').split('.');
            leading_number(parts.next()?).zip(leading_number(parts.next()?))
        };
        let (major, minor) = from_fields
            .or_else(from_git)
            .ok_or_else(|| Error::UnparseableVersion {
                major: info.major.clone(),
                minor: info.minor.clone(),
                git_version: info.git_version.clone(),
            })?;
        Ok(Self {
            major,
            minor,
            git_version: info.git_version.clone(),
        })
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.git_version.is_empty() {
            write!(f, "v{}.{}", self.major, self.minor)
        } else {
            f.write_str(&self.git_version)
        }
    }
}

fn leading_number(text: &str) -> Option<u32> {
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    text[..digits].parse().ok()
}

/// The server's version from `/version`.
pub async fn server_version(client: &Client) -> Result<ServerVersion, Error> {
    let info = client
        .apiserver_version()
        .await
        .map_err(|source| Error::Request {
            what: "reading the server version",
            source,
        })?;
    ServerVersion::from_info(&info)
}

/// Whether the server serves `plural` in `group/version` (`group` empty for the core API), e.g.
/// `api_resource_exists(&client, "scheduling.volcano.sh", "v1beta1", "podgroups")`.
///
/// A group/version the server does not know is `false`, not an error. CRDs appear in discovery a moment
/// after they are established.
pub async fn api_resource_exists(
    client: &Client,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<bool, Error> {
    let listed = if group.is_empty() {
        client.list_core_api_resources(version).await
    } else {
        client
            .list_api_group_resources(&format!("{group}/{version}"))
            .await
    };
    match listed {
        Ok(list) => Ok(lists_resource(&list, plural)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(Error::Request {
            what: "listing served resources",
            source,
        }),
    }
}

fn lists_resource(list: &APIResourceList, plural: &str) -> bool {
    list.resources.iter().any(|resource| resource.name == plural)
}

/// The `Eviction` API version the server's `pods/eviction` subresource takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvictionVersion {
    /// `policy/v1` (Kubernetes 1.22 and later).
    V1,
    /// `policy/v1beta1` (before 1.22; removed as a request body in later releases).
    V1Beta1,
}

impl EvictionVersion {
    /// The `apiVersion` of the Eviction body.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1 => "policy/v1",
            Self::V1Beta1 => "policy/v1beta1",
        }
    }
}

/// Asks the server which Eviction version `pods/eviction` takes (from the core `v1` resource list, where
/// the subresource names its kind's group and version).
pub async fn eviction_version(client: &Client) -> Result<EvictionVersion, Error> {
    let core = client
        .list_core_api_resources("v1")
        .await
        .map_err(|source| Error::Request {
            what: "listing core v1 resources",
            source,
        })?;
    eviction_version_in(&core)
}

fn eviction_version_in(core_v1: &APIResourceList) -> Result<EvictionVersion, Error> {
    let eviction = core_v1
        .resources
        .iter()
        .find(|resource| resource.name == "pods/eviction")
        .ok_or(Error::EvictionUnsupported)?;
    let group = eviction.group.as_deref().unwrap_or("policy");
    match (group, eviction.version.as_deref()) {
        ("policy", Some("v1")) => Ok(EvictionVersion::V1),
        // Servers too old to name the version (before 1.10) only knew v1beta1.
        ("policy", Some("v1beta1") | None) => Ok(EvictionVersion::V1Beta1),
        (group, version) => Err(Error::UnknownEvictionVersion {
            group: group.to_owned(),
            version: version.unwrap_or_default().to_owned(),
        }),
    }
}

/// What an eviction request achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictOutcome {
    /// The server accepted the eviction; the pod is being deleted.
    Evicted,
    /// The pod (or its namespace) no longer exists.
    NotFound,
    /// A PodDisruptionBudget does not allow the disruption now (HTTP 429); try again later.
    Blocked {
        /// The server's explanation.
        message: String,
        /// The server's suggested delay, when it gives one.
        retry_after: Option<Duration>,
    },
}

/// Evicts `namespace/name` through `pods/eviction` with an Eviction body of `version`, honouring
/// PodDisruptionBudgets. `delete_options` carries e.g. a UID precondition or a grace period.
///
/// kube's `Api::evict` always sends a version-less body; this sends the version the server takes (see
/// [`eviction_version`]), so it also works on 1.20 servers.
pub async fn evict(
    client: &Client,
    version: EvictionVersion,
    namespace: &str,
    name: &str,
    delete_options: &DeleteOptions,
) -> Result<EvictOutcome, Error> {
    let mut request = eviction_request(version, namespace, name, delete_options)?;
    request.extensions_mut().insert("evict");
    let result = client.request_text(request).await.map(drop);
    classify_eviction(result).map_err(|source| Error::Evict {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    })
}

fn eviction_request(
    version: EvictionVersion,
    namespace: &str,
    name: &str,
    delete_options: &DeleteOptions,
) -> Result<Request<Vec<u8>>, Error> {
    for segment in [namespace, name] {
        if segment.is_empty() || segment.contains(['/', '?', '#', '%']) || segment == "." || segment == ".." {
            return Err(Error::InvalidName(segment.to_owned()));
        }
    }
    let body = serde_json::json!({
        "apiVersion": version.api_version(),
        "kind": "Eviction",
        "metadata": { "name": name, "namespace": namespace },
        "deleteOptions": delete_options,
    });
    Request::post(format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction"))
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(Error::BuildRequest)
}

fn classify_eviction(result: Result<(), kube::Error>) -> Result<EvictOutcome, kube::Error> {
    match result {
        Ok(()) => Ok(EvictOutcome::Evicted),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(EvictOutcome::NotFound),
        Err(kube::Error::Api(status)) if status.code == 429 => Ok(EvictOutcome::Blocked {
            retry_after: status
                .details
                .as_ref()
                .map(|details| details.retry_after_seconds)
                .filter(|&secs| secs > 0)
                .map(|secs| Duration::from_secs(u64::from(secs))),
            message: status.message,
        }),
        Err(other) => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Preconditions;
    use kube::core::{Status, response::StatusDetails};

    use super::*;

    fn info(major: &str, minor: &str, git_version: &str) -> Info {
        Info {
            major: major.to_owned(),
            minor: minor.to_owned(),
            git_version: git_version.to_owned(),
            ..Info::default()
        }
    }

    #[test]
    fn server_version_parses_plain_and_vendor_versions() {
        let v = ServerVersion::from_info(&info("1", "20", "v1.20.2")).expect("parse");
        assert_eq!((v.major, v.minor), (1, 20));
        assert_eq!(v.to_string(), "v1.20.2");
        let v = ServerVersion::from_info(&info("1", "28+", "v1.28.3-eks-4f4795d")).expect("parse");
        assert_eq!((v.major, v.minor), (1, 28));
        let v = ServerVersion::from_info(&info("", "", "v1.31.0")).expect("falls back to gitVersion");
        assert_eq!((v.major, v.minor), (1, 31));
        assert!(matches!(
            ServerVersion::from_info(&info("", "", "unknown")),
            Err(Error::UnparseableVersion { .. })
        ));
    }

    #[test]
    fn server_version_comparison() {
        let v = ServerVersion {
            major: 1,
            minor: 20,
            git_version: String::new(),
        };
        assert!(v.at_least(1, 20));
        assert!(v.at_least(1, 9));
        assert!(!v.at_least(1, 22));
        assert!(!v.at_least(2, 0));
        assert_eq!(v.to_string(), "v1.20");
    }

    fn core_v1(json: serde_json::Value) -> APIResourceList {
        serde_json::from_value(json).expect("APIResourceList")
    }

    /// Shaped like `GET /api/v1` on a 1.20 server (trimmed).
    fn core_v1_120() -> APIResourceList {
        core_v1(serde_json::json!({
            "kind": "APIResourceList", "groupVersion": "v1",
            "resources": [
                {"name": "pods", "singularName": "", "namespaced": true, "kind": "Pod",
                 "verbs": ["create", "delete", "get", "list", "watch"]},
                {"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding",
                 "verbs": ["create"]},
                {"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy",
                 "version": "v1beta1", "kind": "Eviction", "verbs": ["create"]}
            ]
        }))
    }

    /// Shaped like `GET /api/v1` on a 1.28 server (trimmed).
    fn core_v1_128() -> APIResourceList {
        core_v1(serde_json::json!({
            "kind": "APIResourceList", "groupVersion": "v1",
            "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                 "verbs": ["create", "delete", "get", "list", "watch"]},
                {"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy",
                 "version": "v1", "kind": "Eviction", "verbs": ["create"]}
            ]
        }))
    }

    #[test]
    fn eviction_version_follows_the_subresource_declaration() {
        assert_eq!(
            eviction_version_in(&core_v1_120()).expect("1.20"),
            EvictionVersion::V1Beta1
        );
        assert_eq!(
            eviction_version_in(&core_v1_128()).expect("1.28"),
            EvictionVersion::V1
        );
    }

    #[test]
    fn eviction_version_without_declared_version_is_v1beta1() {
        let list = core_v1(serde_json::json!({
            "groupVersion": "v1",
            "resources": [{"name": "pods/eviction", "singularName": "", "namespaced": true,
                           "kind": "Eviction", "verbs": ["create"]}]
        }));
        assert_eq!(
            eviction_version_in(&list).expect("old server"),
            EvictionVersion::V1Beta1
        );
    }

    #[test]
    fn eviction_version_errors_when_missing_or_unknown() {
        let list = core_v1(serde_json::json!({"groupVersion": "v1", "resources": []}));
        assert!(matches!(
            eviction_version_in(&list),
            Err(Error::EvictionUnsupported)
        ));
        let list = core_v1(serde_json::json!({
            "groupVersion": "v1",
            "resources": [{"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy",
                           "version": "v2", "kind": "Eviction", "verbs": ["create"]}]
        }));
        assert!(matches!(
            eviction_version_in(&list),
            Err(Error::UnknownEvictionVersion { group, version }) if group == "policy" && version == "v2"
        ));
    }

    #[test]
    fn resource_lookup_matches_plural_names_exactly() {
        let list = core_v1_120();
        assert!(lists_resource(&list, "pods"));
        assert!(lists_resource(&list, "pods/eviction"));
        assert!(!lists_resource(&list, "pod"));
        assert!(!lists_resource(&list, "nodes"));
    }

    #[test]
    fn eviction_request_carries_the_discovered_version() {
        let options = DeleteOptions {
            grace_period_seconds: Some(30),
            preconditions: Some(Preconditions {
                uid: Some("uid-1".to_owned()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        };
        for (version, api_version) in [
            (EvictionVersion::V1, "policy/v1"),
            (EvictionVersion::V1Beta1, "policy/v1beta1"),
        ] {
            let request = eviction_request(version, "team-a", "train-0", &options).expect("request");
            assert_eq!(request.method(), http::Method::POST);
            assert_eq!(request.uri(), "/api/v1/namespaces/team-a/pods/train-0/eviction");
            assert_eq!(request.headers()[CONTENT_TYPE], "application/json");
            let body: serde_json::Value = serde_json::from_slice(request.body()).expect("json body");
            assert_eq!(
                body,
                serde_json::json!({
                    "apiVersion": api_version,
                    "kind": "Eviction",
                    "metadata": {"name": "train-0", "namespace": "team-a"},
                    "deleteOptions": {"gracePeriodSeconds": 30, "preconditions": {"uid": "uid-1"}},
                })
            );
        }
    }

    #[test]
    fn eviction_request_rejects_names_that_would_change_the_path() {
        let options = DeleteOptions::default();
        for (namespace, name) in [
            ("", "p"),
            ("ns", ""),
            ("ns", "a/b"),
            ("ns/x", "p"),
            ("ns", ".."),
            ("ns", "p?x"),
        ] {
            assert!(
                matches!(
                    eviction_request(EvictionVersion::V1, namespace, name, &options),
                    Err(Error::InvalidName(_))
                ),
                "{namespace}/{name}"
            );
        }
    }

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    #[test]
    fn eviction_results_are_classified() {
        assert_eq!(classify_eviction(Ok(())).expect("ok"), EvictOutcome::Evicted);
        assert_eq!(
            classify_eviction(Err(api_error(404, "NotFound", "pods \"p\" not found"))).expect("gone"),
            EvictOutcome::NotFound
        );
        let budget = "Cannot evict pod as it would violate the pod's disruption budget.";
        assert_eq!(
            classify_eviction(Err(api_error(429, "TooManyRequests", budget))).expect("blocked"),
            EvictOutcome::Blocked {
                message: budget.to_owned(),
                retry_after: None
            }
        );
        let details: StatusDetails =
            serde_json::from_value(serde_json::json!({"retryAfterSeconds": 10})).expect("details");
        let with_retry = kube::Error::Api(
            Status::failure(budget, "TooManyRequests")
                .with_code(429)
                .with_details(details)
                .boxed(),
        );
        assert_eq!(
            classify_eviction(Err(with_retry)).expect("blocked"),
            EvictOutcome::Blocked {
                message: budget.to_owned(),
                retry_after: Some(Duration::from_secs(10))
            }
        );
        for code in [400, 403, 409, 500] {
            assert!(
                classify_eviction(Err(api_error(code, "", "no"))).is_err(),
                "{code}"
            );
        }
    }

    // The thin I/O functions, against a fake server.

    use http::StatusCode;

    use crate::test_support::{fake_client, status};

    #[tokio::test]
    async fn evict_posts_the_versioned_body_and_classifies_the_answer() {
        let (client, log) = fake_client(|seen| match seen.path.rsplit('/').nth(1) {
            Some("gone") => status(StatusCode::NOT_FOUND, "NotFound", "pods \"gone\" not found"),
            Some("guarded") => status(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                "disruption budget",
            ),
            Some("broken") => status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "more than one PDB",
            ),
            _ => (
                StatusCode::CREATED,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
            ),
        });
        let options = DeleteOptions::default();
        let outcome = evict(&client, EvictionVersion::V1Beta1, "ns", "p", &options)
            .await
            .expect("evicted");
        assert_eq!(outcome, EvictOutcome::Evicted);
        assert_eq!(
            evict(&client, EvictionVersion::V1, "ns", "gone", &options)
                .await
                .expect("gone"),
            EvictOutcome::NotFound
        );
        assert_eq!(
            evict(&client, EvictionVersion::V1, "ns", "guarded", &options)
                .await
                .expect("blocked"),
            EvictOutcome::Blocked {
                message: "disruption budget".to_owned(),
                retry_after: None
            }
        );
        let error = evict(&client, EvictionVersion::V1, "ns", "broken", &options)
            .await
            .expect_err("500");
        assert!(
            matches!(&error, Error::Evict { namespace, name, .. } if namespace == "ns" && name == "broken")
        );

        let log = log.lock().expect("log");
        assert_eq!(log[0].method, http::Method::POST);
        assert_eq!(log[0].path, "/api/v1/namespaces/ns/pods/p/eviction");
        assert_eq!(log[0].body["apiVersion"], "policy/v1beta1");
        assert_eq!(log[1].body["apiVersion"], "policy/v1");
    }

    #[tokio::test]
    async fn resource_existence_and_eviction_version_come_from_discovery() {
        let (client, _log) = fake_client(|seen| match seen.path.as_str() {
            "/api/v1" => (StatusCode::OK, serde_json::to_value(core_v1_120()).expect("json")),
            "/apis/scheduling.run.ai/v2" => (
                StatusCode::OK,
                serde_json::json!({"groupVersion": "scheduling.run.ai/v2", "resources": [
                    {"name": "podgroups", "singularName": "podgroup", "namespaced": true, "kind": "PodGroup",
                     "verbs": ["get", "list", "watch"]}
                ]}),
            ),
            "/version" => (
                StatusCode::OK,
                serde_json::json!({
                    "major": "1", "minor": "20", "gitVersion": "v1.20.2", "gitCommit": "", "gitTreeState": "",
                    "buildDate": "", "goVersion": "", "compiler": "", "platform": ""
                }),
            ),
            _ => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            ),
        });
        assert!(
            api_resource_exists(&client, "scheduling.run.ai", "v2", "podgroups")
                .await
                .expect("ok")
        );
        assert!(
            !api_resource_exists(&client, "scheduling.run.ai", "v2", "queues")
                .await
                .expect("ok")
        );
        assert!(
            !api_resource_exists(&client, "scheduling.volcano.sh", "v1beta1", "podgroups")
                .await
                .expect("ok")
        );
        assert!(api_resource_exists(&client, "", "v1", "pods").await.expect("ok"));
        assert_eq!(
            eviction_version(&client).await.expect("version"),
            EvictionVersion::V1Beta1
        );
        let version = server_version(&client).await.expect("version");
        assert_eq!((version.major, version.minor), (1, 20));
    }

    #[tokio::test]
    async fn discovery_errors_other_than_not_found_are_errors() {
        let (client, _log) = fake_client(|_| status(StatusCode::FORBIDDEN, "Forbidden", "no"));
        assert!(matches!(
            api_resource_exists(&client, "scheduling.run.ai", "v2", "podgroups").await,
            Err(Error::Request { .. })
        ));
    }
}
