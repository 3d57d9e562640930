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
/// which reports the device the device plugin gave it.
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
