//! The start-up gate "are our CRDs installed and Established?", with an error that names what is missing
//! and how to install it, instead of watches failing later with 404s.
//!
//! Owns: reading CustomResourceDefinition conditions. Must not: install or change CRDs.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};

/// How to install the CRDs, shown when some are missing.
pub const INSTALL_HINT: &str =
    "install the CRDs first: `kubectl apply --server-side -f crds/` (or install the Helm chart)";

/// How often the CRDs are re-read while waiting.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Why the CRDs are not usable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Some CRDs did not exist or were not Established in time.
    #[error(
        "CRDs not ready after {timeout:?}: {}; {INSTALL_HINT}",
        describe(missing, not_established)
    )]
    NotReady {
        /// How long was waited.
        timeout: Duration,
        /// CRDs that do not exist.
        missing: Vec<String>,
        /// CRDs that exist but are not Established, with the condition's message where there is one.
        not_established: Vec<(String, String)>,
    },
    /// Reading a CRD failed for another reason (e.g. RBAC forbids `get` on customresourcedefinitions).
    #[error("reading CRD {name}: {source}")]
    Read {
        /// The CRD's name.
        name: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

fn describe(missing: &[String], not_established: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing {}", missing.join(", ")));
    }
    if !not_established.is_empty() {
        let listed: Vec<_> = not_established
            .iter()
            .map(|(name, why)| {
                if why.is_empty() {
                    name.clone()
                } else {
                    format!("{name} ({why})")
                }
            })
            .collect();
        parts.push(format!("not established {}", listed.join(", ")));
    }
    parts.join("; ")
}

/// The state of one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CrdState {
    Missing,
    /// Exists but is not yet (or no longer) serving; the condition's message, if any.
    NotEstablished(String),
    Established,
}

fn crd_state(crd: Option<&CustomResourceDefinition>) -> CrdState {
    let Some(crd) = crd else { return CrdState::Missing };
    let conditions = crd
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True")
    {
        return CrdState::Established;
    }
    // A name conflict is the usual reason a CRD never becomes Established; say so.
    let why = conditions
        .iter()
        .find(|c| c.type_ == "NamesAccepted" && c.status == "False")
        .or_else(|| conditions.iter().find(|c| c.type_ == "Established"))
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    CrdState::NotEstablished(why)
}

/// Waits until every CRD in `names` (full names, e.g. `podgroups.scheduling.run.ai`) exists and is
/// Established, re-reading them every second for at most `timeout`.
pub async fn wait_for_crds(client: &Client, names: &[&str], timeout: Duration) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut missing = Vec::new();
        let mut not_established = Vec::new();
        for &name in names {
            let crd = api.get_opt(name).await.map_err(|source| Error::Read {
                name: name.to_owned(),
                source,
            })?;
            match crd_state(crd.as_ref()) {
                CrdState::Established => {}
                CrdState::Missing => missing.push(name.to_owned()),
                CrdState::NotEstablished(why) => not_established.push((name.to_owned(), why)),
            }
        }
        if missing.is_empty() && not_established.is_empty() {
            tracing::info!(crds = ?names, "CRDs established");
            return Ok(());
        }
        if tokio::time::Instant::now() + POLL_INTERVAL > deadline {
            return Err(Error::NotReady {
                timeout,
                missing,
                not_established,
            });
        }
        tracing::info!(?missing, ?not_established, "waiting for CRDs");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(conditions: serde_json::Value) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "queues.scheduling.run.ai"},
            "spec": {
                "group": "scheduling.run.ai",
                "names": {"kind": "Queue", "plural": "queues"},
                "scope": "Cluster",
                "versions": []
            },
            "status": {"conditions": conditions}
        }))
        .expect("CRD")
    }

    #[test]
    fn missing_crd() {
        assert_eq!(crd_state(None), CrdState::Missing);
    }

    #[test]
    fn established_crd() {
        let established = crd(serde_json::json!([
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True"}
        ]));
        assert_eq!(crd_state(Some(&established)), CrdState::Established);
    }

    #[test]
    fn crd_without_status_is_not_established() {
        let mut fresh = crd(serde_json::json!([]));
        fresh.status = None;
        assert_eq!(crd_state(Some(&fresh)), CrdState::NotEstablished(String::new()));
    }

    #[test]
    fn names_conflict_is_reported() {
        let conflicting = crd(serde_json::json!([
            {"type": "NamesAccepted", "status": "False", "message": "\"queues\" is already in use"},
            {"type": "Established", "status": "False", "message": "not all names are accepted"}
        ]));
        assert_eq!(
            crd_state(Some(&conflicting)),
            CrdState::NotEstablished("\"queues\" is already in use".to_owned())
        );
    }

    #[test]
    fn establishing_crd_reports_the_established_condition() {
        let establishing = crd(serde_json::json!([
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "False", "message": "installing"}
        ]));
        assert_eq!(
            crd_state(Some(&establishing)),
            CrdState::NotEstablished("installing".to_owned())
        );
    }

    #[test]
    fn error_lists_what_is_missing_and_the_hint() {
        let error = Error::NotReady {
            timeout: Duration::from_secs(30),
            missing: vec![
                "queues.scheduling.run.ai".to_owned(),
                "podgroups.scheduling.run.ai".to_owned(),
            ],
            not_established: vec![("topologies.kai.scheduler".to_owned(), "installing".to_owned())],
        };
        assert_eq!(
            error.to_string(),
            "CRDs not ready after 30s: missing queues.scheduling.run.ai, podgroups.scheduling.run.ai; \
             not established topologies.kai.scheduler (installing); \
             install the CRDs first: `kubectl apply --server-side -f crds/` (or install the Helm chart)"
        );
    }

    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use http::StatusCode;

    use crate::test_support::{fake_client, status};

    #[tokio::test(start_paused = true)]
    async fn waits_until_every_crd_is_established() {
        let reads = Arc::new(AtomicUsize::new(0));
        let counter = reads.clone();
        let (client, log) = fake_client(move |seen| {
            // queues appears on the third read of it; podgroups is there from the start.
            if seen.path.ends_with("/queues.scheduling.run.ai") && counter.fetch_add(1, Ordering::SeqCst) < 2
            {
                return status(StatusCode::NOT_FOUND, "NotFound", "not found");
            }
            let established = serde_json::json!([{"type": "Established", "status": "True"}]);
            (
                StatusCode::OK,
                serde_json::to_value(crd(established)).expect("json"),
            )
        });
        let names = ["podgroups.scheduling.run.ai", "queues.scheduling.run.ai"];
        wait_for_crds(&client, &names, Duration::from_secs(30))
            .await
            .expect("established");
        assert_eq!(reads.load(Ordering::SeqCst), 3);
        let log = log.lock().expect("log");
        assert_eq!(
            log[0].path,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.run.ai"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_the_timeout_naming_what_is_missing() {
        let (client, _log) = fake_client(|seen| {
            if seen.path.ends_with("/queues.scheduling.run.ai") {
                status(StatusCode::NOT_FOUND, "NotFound", "not found")
            } else {
                let establishing =
                    serde_json::json!([{"type": "Established", "status": "False", "message": "installing"}]);
                (
                    StatusCode::OK,
                    serde_json::to_value(crd(establishing)).expect("json"),
                )
            }
        });
        let start = tokio::time::Instant::now();
        let error = wait_for_crds(
            &client,
            &["podgroups.scheduling.run.ai", "queues.scheduling.run.ai"],
            Duration::from_secs(5),
        )
        .await
        .expect_err("never ready");
        assert!(start.elapsed() <= Duration::from_secs(5));
        let Error::NotReady {
            missing,
            not_established,
            ..
        } = error
        else {
            panic!("not ready")
        };
        assert_eq!(missing, ["queues.scheduling.run.ai"]);
        assert_eq!(
            not_established,
            [("podgroups.scheduling.run.ai".to_owned(), "installing".to_owned())]
        );
    }

    #[tokio::test]
    async fn read_errors_are_reported_at_once() {
        let (client, _log) = fake_client(|_| status(StatusCode::FORBIDDEN, "Forbidden", "rbac"));
        let error = wait_for_crds(&client, &["queues.scheduling.run.ai"], Duration::from_secs(30)).await;
        assert!(matches!(error, Err(Error::Read { name, .. }) if name == "queues.scheduling.run.ai"));
    }
}
