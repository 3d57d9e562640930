//! The GPU-sharing ConfigMaps of a pod (the source its containers' `NVIDIA_VISIBLE_DEVICES` and
//! `GPU_PORTION` come from, see `crate::gpu_env`): written before the pod is bound, with server-side
//! apply under `kai-scheduler-gpu-sharing`, owned by the pod so they go with it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::debug;

use scheduler_core::framework::decisions::Bind;

use super::{Applier, LOG_TARGET};

impl Applier {
    /// Fills each of `configmaps` with the pod's `devices` (one per GPU group, in order) and its portion.
    ///
    /// # Errors
    /// When a device is unknown, the portion cannot be told (a `gpu-memory` request on a node without
    /// the `nvidia.com/gpu.memory` label), or a write fails: the pod is then not bound.
    pub(super) async fn write_gpu_env(
        &self,
        b: &Bind,
        configmaps: &[String],
        devices: &[Arc<str>],
    ) -> Result<(), String> {
        if devices.len() != b.gpu_groups.len() || devices.is_empty() {
            return Err(format!(
                "the device of {} of its {} shared GPUs is not known (reservation pods are off); a pod \
                 sharing a GPU is bound only with its device",
                b.gpu_groups.len() - devices.len().min(b.gpu_groups.len()),
                b.gpu_groups.len()
            ));
        }
        let portion = b.gpu.portion_text(b.gpu_memory_mib).ok_or_else(|| {
            format!(
                "the pod's share of a GPU on node {} cannot be told (no {} label on the node)",
                b.node,
                api::keys::NODE_GPU_MEMORY
            )
        })?;
        let devices: Vec<&str> = devices.iter().map(AsRef::as_ref).collect();
        let data = crate::gpu_env::configmap_data(&devices, &portion);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &b.namespace);
        let params = PatchParams::apply(api::keys::FIELD_MANAGER_GPU_SHARING).force();
        for name in configmaps {
            let body = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": b.namespace.as_ref(),
                    "ownerReferences": [{
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": b.name.as_ref(),
                        "uid": b.uid.as_ref(),
                    }],
                },
                "data": data,
            });
            api.patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(|e| format!("writing the pod's GPU-sharing ConfigMap {name}: {e}"))?;
        }
        debug!(
            target: LOG_TARGET,
            pod = %format!("{}/{}", b.namespace, b.name),
            devices = %devices.join(","),
            %portion,
            "GPU-sharing ConfigMaps written"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use http::{Method, StatusCode};
    use scheduler_core::config::GpuSharingArgs;
    use scheduler_core::framework::decisions::Bind;
    use scheduler_core::model::GpuRequest;
    use serde_json::{Value, json};
    use tokio::sync::mpsc;

    use super::super::Applier;
    use super::super::test_api::{self, Log};
    use crate::loop_state::Feedback;

    /// A sharing pod the webhook prepared, as the API server returns it after the binder's label patch.
    fn prepared_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "w", "namespace": "team", "uid": "pod-uid",
                          "annotations": { api::keys::GPU_FRACTION: "0.5", api::keys::GPU_SHARING_CONFIGMAP: "w-abc-shared-gpu" } },
            "spec": { "containers": [{ "name": "c", "env": [
                { "name": api::keys::NVIDIA_VISIBLE_DEVICES, "valueFrom": { "configMapKeyRef": {
                    "name": "w-abc-shared-gpu", "key": api::keys::NVIDIA_VISIBLE_DEVICES } } },
            ] }] },
        })
    }

    /// An applier whose API server answers every request with `prepared_pod` (or the body it was sent),
    /// with reservation pods on or off; returns its request log and feedback.
    fn applier(reservation_pods: bool) -> (Applier, Log, mpsc::UnboundedReceiver<Feedback>) {
        let sharing = GpuSharingArgs {
            enabled: true,
            reservation_pods,
            ..GpuSharingArgs::default()
        };
        test_api::applier(1, sharing, |seen| {
            let answer = if seen.path.contains("/pods/") && seen.method == Method::PATCH {
                prepared_pod()
            } else {
                seen.body.clone()
            };
            (StatusCode::OK, answer)
        })
    }

    fn bind(device: Option<&str>) -> Bind {
        Bind {
            uid: "pod-uid".into(),
            namespace: "team".into(),
            name: "w".into(),
            node: "node-a".into(),
            gpu_groups: vec!["group-1".into()],
            devices: vec![device.map(Into::into)],
            gpu: GpuRequest::Fraction {
                milli: 500,
                devices: 1,
            },
            gpu_memory_mib: None,
            group: None,
            name_group_on_pod: false,
            volumes: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_prepared_pod_gets_its_device_in_its_configmap_before_its_binding() {
        let (applier, log, _feedback) = applier(true);
        applier
            .bind(bind(Some("GPU-1234")), &AtomicBool::new(false))
            .await;
        let log = log.lock().expect("log").clone();
        let configmap = log
            .iter()
            .position(|s| s.path.ends_with("/configmaps/w-abc-shared-gpu"))
            .expect("the ConfigMap was written");
        let binding = log
            .iter()
            .position(|s| s.path.ends_with("/pods/w/binding"))
            .expect("the pod was bound");
        assert!(configmap < binding, "{log:?}");
        let body = &log[configmap].body;
        assert_eq!(log[configmap].method, Method::PATCH, "server-side apply");
        assert_eq!(body["data"][api::keys::NVIDIA_VISIBLE_DEVICES], "GPU-1234");
        assert_eq!(body["data"][api::keys::GPU_PORTION], "0.50");
        assert_eq!(body["data"][api::keys::RUNAI_NUM_OF_GPUS], "0.50");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "pod-uid");
        assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "Pod");
    }

    #[tokio::test]
    async fn a_prepared_pod_whose_device_is_unknown_is_not_bound() {
        let (applier, log, mut feedback) = applier(false);
        applier.bind(bind(None), &AtomicBool::new(false)).await;
        let log = log.lock().expect("log").clone();
        assert!(
            !log.iter().any(|s| s.path.ends_with("/binding")),
            "never bound without its device: {log:?}"
        );
        assert!(!log.iter().any(|s| s.path.contains("/configmaps/")), "{log:?}");
        match feedback.try_recv() {
            Ok(Feedback::BindFailed { reason, .. }) => {
                assert!(reason.contains("is not known"), "{reason}");
            }
            other => panic!("expected a failed bind, got {other:?}"),
        }
    }
}
