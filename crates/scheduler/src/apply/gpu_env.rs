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
