//! GPU reservation pods: one per shared-GPU group, holding a whole GPU through the device plugin and
//! reporting which device it got, so the pods sharing the group can be pointed at that device.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tracing::{debug, warn};

use scheduler_core::framework::decisions::{ReservationChange, reservation_pod_name};

use super::{Applier, LOG_TARGET};

impl Applier {
    /// The device a group's reservation pod holds, creating the pod if it does not exist and waiting
    /// (up to the configured timeout) for it to report the device.
    pub(super) async fn reserved_device(&self, node: &str, group: &str) -> Result<Arc<str>, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), api::keys::RESERVATION_NAMESPACE);
        let name = reservation_pod_name(node, group);
        let deadline = tokio::time::Instant::now() + self.sharing.reservation_timeout;
        let mut created = false;
        // The pod this wait saw last: only that one may be deleted on timeout, never a newer pod of the
        // same name that another cycle (or another leader) made meanwhile.
        let mut seen_uid: Option<String> = None;
        loop {
            match pods.get_opt(&name).await {
                Ok(Some(pod)) => {
                    seen_uid.clone_from(&pod.metadata.uid);
                    let device = pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(api::keys::RESERVED_GPU_INDEX))
                        .filter(|d| !d.is_empty());
                    if let Some(d) = device {
                        return Ok(d.as_str().into());
                    }
                }
                Ok(None) if !created => {
                    self.create_reservation(node, group).await?;
                    created = true;
                }
                Ok(None) => {}
                Err(e) => debug!(target: LOG_TARGET, error = %e, "reading reservation pod"),
            }
            if tokio::time::Instant::now() >= deadline {
                // Give the device back rather than leave a reservation nobody uses.
                if let Some(uid) = seen_uid {
                    self.delete_reservation(&name, &uid).await;
                }
                return Err(format!(
                    "reservation pod {}/{name} did not report its GPU within {}s",
                    api::keys::RESERVATION_NAMESPACE,
                    self.sharing.reservation_timeout.as_secs()
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Creates the reservation pod of a group (idempotent: an existing pod of that name is fine).
    async fn create_reservation(&self, node: &str, group: &str) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), api::keys::RESERVATION_NAMESPACE);
        let pod: Pod = serde_json::from_value(reservation_pod(node, group, &self.sharing.reservation_image))
            .map_err(|e| format!("building the reservation pod: {e}"))?;
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(format!(
                "creating reservation pod for GPU group {group} on {node}: {e}"
            )),
        }
    }

    pub(super) async fn reservation(&self, change: ReservationChange) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        match change {
            ReservationChange::Create { node, group } => {
                if let Err(e) = self.create_reservation(&node, &group).await {
                    warn!(target: LOG_TARGET, error = %e, "reservation pod");
                }
            }
            ReservationChange::Delete { uid, name } => self.delete_reservation(&name, &uid).await,
        }
    }

    /// Deletes the reservation pod `name` only if it is still the pod with `uid` (a precondition the API
    /// server checks), so a pod of the same name made since is never removed by mistake.
    async fn delete_reservation(&self, name: &str, uid: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), api::keys::RESERVATION_NAMESPACE);
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..kube::api::DeleteParams::default()
        };
        if let Err(e) = pods.delete(name, &params).await {
            debug!(target: LOG_TARGET, pod = %name, error = %e, "deleting reservation pod");
        }
    }
}

/// The reservation pod of a shared-GPU group: pinned to the node, asking for one whole GPU, labelled with
/// the group, tolerating every taint (it must land where its sharers run), running `kai-gpu-reservation`,
/// which reports the device the device plugin gave it. It meets Pod Security's `restricted` profile (the
/// chart enforces it on the reservation namespace): non-root, RuntimeDefault seccomp, no privilege
/// escalation, every capability dropped, no host namespaces or volumes.
fn reservation_pod(node: &str, group: &str, image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_pod_name(node, group),
            "namespace": api::keys::RESERVATION_NAMESPACE,
            "labels": { "app": api::keys::RESERVATION_APP, api::keys::GPU_GROUP: group },
            "annotations": { "karpenter.sh/do-not-disrupt": "true" },
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": api::keys::RESERVATION_APP,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{ "operator": "Exists" }],
            "securityContext": {
                "runAsNonRoot": true,
                "seccompProfile": { "type": "RuntimeDefault" },
            },
            "containers": [{
                "name": "reservation",
                "image": image,
                "command": ["/kai-gpu-reservation"],
                "env": [
                    { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                    { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                ],
                "resources": {
                    "limits": { "nvidia.com/gpu": "1", "cpu": "10m", "memory": "32Mi" },
                    "requests": { "nvidia.com/gpu": "1", "cpu": "1m", "memory": "16Mi" },
                },
                "securityContext": {
                    "runAsNonRoot": true,
                    "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": { "drop": ["ALL"] },
                },
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use http::{Method, StatusCode};
    use k8s_openapi::api::core::v1::Pod;
    use scheduler_core::config::GpuSharingArgs;
    use serde_json::{Value, json};

    use super::super::Applier;
    use super::super::test_api::{self, Log, Seen};
    use super::{reservation_pod, reservation_pod_name};

    /// An applier built as `main.rs` builds it, whose client is answered by `respond` instead of an API
    /// server; also returns the log of requests.
    fn applier(
        reservation_timeout: Duration,
        respond: impl Fn(&Seen) -> (StatusCode, Value) + Send + Sync + 'static,
    ) -> (Applier, Log) {
        let sharing = GpuSharingArgs {
            enabled: true,
            reservation_timeout,
            ..GpuSharingArgs::default()
        };
        let (applier, log, _feedback) = test_api::applier(1, sharing, respond);
        (applier, log)
    }

    fn not_found() -> (StatusCode, Value) {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "pods not found",
        });
        (StatusCode::NOT_FOUND, status)
    }

    /// A reservation pod of `uid` that has not reported its device.
    fn silent_pod(name: &str, uid: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": api::keys::RESERVATION_NAMESPACE, "uid": uid,
                "annotations": { "karpenter.sh/do-not-disrupt": "true" },
            },
        })
    }

    fn deletes(log: &Mutex<Vec<Seen>>) -> Vec<Seen> {
        let log = log.lock().expect("log");
        log.iter()
            .filter(|s| s.method == Method::DELETE)
            .cloned()
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_out_reservation_pod_is_deleted_only_if_it_is_still_the_pod_seen() {
        let name = reservation_pod_name("node-a", "group-1");
        let pod = silent_pod(&name, "u1");
        let (applier, log) = applier(Duration::from_secs(1), move |seen| match seen.method {
            Method::GET | Method::DELETE => (StatusCode::OK, pod.clone()),
            _ => (StatusCode::METHOD_NOT_ALLOWED, Value::Null),
        });

        let error = applier
            .reserved_device("node-a", "group-1")
            .await
            .expect_err("no device reported");
        assert!(error.contains("did not report its GPU"), "{error}");

        let deletes = deletes(&log);
        assert_eq!(deletes.len(), 1, "{deletes:?}");
        assert_eq!(
            deletes[0].path,
            format!(
                "/api/v1/namespaces/{}/pods/{name}",
                api::keys::RESERVATION_NAMESPACE
            )
        );
        assert_eq!(
            deletes[0].body["preconditions"]["uid"], "u1",
            "the delete names the pod the wait saw, so a newer pod of that name survives: {:?}",
            deletes[0].body
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_pod_never_seen_is_not_deleted() {
        let name = reservation_pod_name("node-a", "group-1");
        let made = silent_pod(&name, "u-created");
        // Created, but every read misses it (deleted at once by someone else, or never visible yet).
        let (applier, log) = applier(Duration::from_secs(1), move |seen| match seen.method {
            Method::GET => not_found(),
            Method::POST => (StatusCode::CREATED, made.clone()),
            _ => (StatusCode::OK, made.clone()),
        });

        let error = applier
            .reserved_device("node-a", "group-1")
            .await
            .expect_err("no device reported");
        assert!(error.contains("did not report its GPU"), "{error}");

        let methods: Vec<Method> = log
            .lock()
            .expect("log")
            .iter()
            .map(|s| s.method.clone())
            .collect();
        assert!(
            methods.contains(&Method::POST),
            "the pod was created: {methods:?}"
        );
        assert!(
            deletes(&log).is_empty(),
            "without a pod seen there is no UID to delete by, so nothing is deleted: {methods:?}"
        );
    }

    /// The checks of Pod Security's `restricted` profile (baseline's included) that a pod spec can fail,
    /// as the admission plugin reads them; the chart labels the reservation namespace `enforce: restricted`.
    #[test]
    fn reservation_pod_meets_the_restricted_pod_security_profile() {
        let pod: Pod =
            serde_json::from_value(reservation_pod("node-a", "group-1", "image:1")).expect("a Pod");
        let spec = pod.spec.expect("spec");
        let pod_security = spec.security_context.clone().unwrap_or_default();
        assert!(
            spec.host_network != Some(true) && spec.host_pid != Some(true) && spec.host_ipc != Some(true)
        );
        assert!(
            spec.volumes
                .unwrap_or_default()
                .iter()
                .all(|v| v.host_path.is_none()),
            "no hostPath volume"
        );
        assert_eq!(
            pod_security.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault"),
            "seccomp is set for the whole pod"
        );
        assert_ne!(pod_security.run_as_user, Some(0));
        for container in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let security = container.security_context.clone().unwrap_or_default();
            let non_root = security.run_as_non_root.or(pod_security.run_as_non_root);
            assert_eq!(non_root, Some(true), "{}: runAsNonRoot", container.name);
            assert_ne!(security.run_as_user, Some(0), "{}: runAsUser", container.name);
            assert_ne!(security.privileged, Some(true), "{}: privileged", container.name);
            assert_eq!(
                security.allow_privilege_escalation,
                Some(false),
                "{}: allowPrivilegeEscalation",
                container.name
            );
            let capabilities = security.capabilities.unwrap_or_default();
            assert!(
                capabilities.drop.unwrap_or_default().iter().any(|c| c == "ALL"),
                "{}: drops ALL capabilities",
                container.name
            );
            assert!(
                capabilities
                    .add
                    .unwrap_or_default()
                    .iter()
                    .all(|c| c == "NET_BIND_SERVICE"),
                "{}: adds no capability but NET_BIND_SERVICE",
                container.name
            );
            if let Some(profile) = security.seccomp_profile {
                assert!(["RuntimeDefault", "Localhost"].contains(&profile.type_.as_str()));
            }
            assert!(
                container.ports.iter().flatten().all(|p| p.host_port.is_none()),
                "{}: no host port",
                container.name
            );
        }
    }
}
