//! Binds through `pods/binding`. A pod on a shared GPU is first labelled with its GPU groups and
//! annotated with its fraction and devices, so a restarted scheduler rebuilds the GPUs' occupancy from
//! the pods themselves.

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::{debug, warn};

use scheduler_core::framework::decisions::{Bind, Event, EventObject, EventType};
use scheduler_core::model::GpuRequest;

use super::{Applier, LOG_TARGET, ResultLabel};
use crate::loop_state::Feedback;

impl Applier {
    pub(super) async fn bind(&self, b: Bind, gang_failed: &AtomicBool) {
        let Ok(_permit) = self.binds.acquire().await else {
            return;
        };
        if !self.leading() {
            let _ = self.feedback.send(Feedback::BindDropped { uid: b.uid.clone() });
            return;
        }
        if b.group.is_some() && gang_failed.load(Ordering::Acquire) {
            let _ = self.feedback.send(Feedback::BindFailed {
                uid: b.uid.clone(),
                reason: "another pod of its gang failed to bind".into(),
            });
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &b.namespace);
        // Shared GPUs: label the pod with its device groups before it lands, so a restart rebuilds
        // occupancy from the labels.
        if b.gpu.is_shared()
            && let Err(why) = self.prepare_shared(&pods, &b).await
        {
            warn!(target: LOG_TARGET, pod = %format!("{}/{}", b.namespace, b.name), error = %why, "preparing shared-GPU pod failed");
            self.bind_failed(&b, gang_failed, why).await;
            return;
        }
        // The API server copies a binding's annotations onto the pod with its node: a pod that joined
        // the PodGroup made for it gets the group's name in the same write, not in a patch of its own.
        let annotations = b.group.as_ref().filter(|_| b.name_group_on_pod).map(|g| {
            std::collections::BTreeMap::from([(api::keys::POD_GROUP_NAME.to_owned(), g.name.to_string())])
        });
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(b.name.to_string()),
                uid: Some(b.uid.to_string()),
                annotations,
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                kind: Some("Node".to_owned()),
                name: Some(b.node.to_string()),
                ..ObjectReference::default()
            },
        };
        match pods
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                &b.name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => {
                self.metrics
                    .binds
                    .get_or_create(&ResultLabel { result: "ok" })
                    .inc();
                debug!(target: LOG_TARGET, pod = %format!("{}/{}", b.namespace, b.name), node = %b.node, "bound");
            }
            Err(e) => {
                warn!(target: LOG_TARGET, pod = %format!("{}/{}", b.namespace, b.name), node = %b.node, error = %e, "bind failed");
                let message = format!("binding to node {} failed: {e}", b.node);
                self.bind_failed(&b, gang_failed, message).await;
            }
        }
    }

    /// A bind that did not happen: the rest of its gang stops, the loop drops the assumption, and the
    /// pod gets a `FailedBinding` event saying why.
    pub(super) async fn bind_failed(&self, b: &Bind, gang_failed: &AtomicBool, message: String) {
        gang_failed.store(true, Ordering::Release);
        self.metrics
            .binds
            .get_or_create(&ResultLabel { result: "error" })
            .inc();
        let _ = self.feedback.send(Feedback::BindFailed {
            uid: b.uid.clone(),
            reason: message.as_str().into(),
        });
        self.event(Event {
            object: EventObject::Pod {
                namespace: b.namespace.clone(),
                name: b.name.clone(),
                uid: b.uid.clone(),
            },
            type_: EventType::Warning,
            reason: "FailedBinding",
            message,
        })
        .await;
    }

    /// Points a sharing pod at its device(s) before it is bound: waits for each group's reservation
    /// pod to report the device it holds (creating the pod if needed), labels the pod with its groups,
    /// annotates the fraction, the resource type and the device UUIDs, and, for a pod the admission
    /// webhook prepared, writes the devices and the portion into its GPU-sharing ConfigMaps
    /// (`gpu_env`). Such a pod is never bound while a device is unknown.
    async fn prepare_shared(&self, pods: &Api<Pod>, b: &Bind) -> Result<(), String> {
        let mut devices = Vec::with_capacity(b.gpu_groups.len());
        for (i, group) in b.gpu_groups.iter().enumerate() {
            let known = b.devices.get(i).cloned().flatten();
            let device = match known {
                Some(d) => Some(d),
                None if self.sharing.reservation_pods => Some(self.reserved_device(&b.node, group).await?),
                None => None,
            };
            devices.extend(device);
        }
        let mut labels = serde_json::Map::new();
        match b.gpu_groups.as_slice() {
            [one] => {
                labels.insert(api::keys::GPU_GROUP.to_owned(), json!(one.as_ref()));
            }
            many => {
                for g in many {
                    labels.insert(format!("{}/{g}", api::keys::GPU_GROUP), json!(g.as_ref()));
                }
            }
        }
        let mut annotations = serde_json::Map::new();
        annotations.insert(api::keys::RECEIVED_RESOURCE_TYPE.to_owned(), json!("Fraction"));
        if let GpuRequest::Fraction { milli, .. } = b.gpu {
            annotations.insert(api::keys::GPU_FRACTION.to_owned(), json!(quantity_text(milli)));
        }
        if !devices.is_empty() {
            let list: Vec<&str> = devices.iter().map(AsRef::as_ref).collect();
            annotations.insert(api::keys::GPU_DEVICE.to_owned(), json!(list.join(",")));
        }
        let patch =
            json!({ "metadata": { "uid": b.uid.as_ref(), "labels": labels, "annotations": annotations } });
        let pod = pods
            .patch(&b.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("labelling the pod for its shared GPU failed: {e}"))?;
        match crate::gpu_env::device_sources(&pod) {
            Some(configmaps) => self.write_gpu_env(b, &configmaps, &devices).await,
            None => Ok(()),
        }
    }
}

fn quantity_text(milli: u32) -> String {
    scheduler_core::model::resources::format_decimal_milli(i64::from(milli))
}
