//! Status writes: PodGroup status (KAI's and Volcano's), PodGroup annotations (last start, stale since),
//! the `PodScheduled=False` condition of unschedulable pods, and queue statuses.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::{debug, warn};

use scheduler_core::framework::decisions::{GroupStatus, PodCondition, QueueStatus};
use scheduler_core::model::GroupKind;

use super::{Applier, LOG_TARGET, ResultLabel};
use crate::loop_state::Feedback;

impl Applier {
    pub(super) async fn group_status(&self, s: GroupStatus) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        let params = PatchParams::apply(api::keys::FIELD_MANAGER_SCHEDULER).force();
        // Rendered here, at the write: a status replaced before its turn never is.
        let status = s.render();
        let result = match s.key.kind {
            GroupKind::Kai => {
                let api: Api<api::PodGroup> = Api::namespaced(self.client.clone(), &s.key.namespace);
                let patch = json!({
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "status": &status,
                });
                api.patch_status(&s.key.name, &params, &Patch::Apply(&patch))
                    .await
                    .map(drop)
            }
            GroupKind::Volcano => {
                let api: Api<api::VolcanoPodGroup> = Api::namespaced(self.client.clone(), &s.key.namespace);
                let patch = json!({
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "PodGroup",
                    "status": volcano_status(&status),
                });
                api.patch_status(&s.key.name, &params, &Patch::Apply(&patch))
                    .await
                    .map(drop)
            }
        };
        self.count_status(result.is_ok());
        if let Err(e) = result {
            debug!(target: LOG_TARGET, group = %s.key, error = %e, "status write failed");
            let _ = self.feedback.send(Feedback::StatusFailed { key: s.key });
        }
    }

    pub(super) async fn pod_condition(&self, c: PodCondition) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &c.namespace);
        let written = self.write_unschedulable_condition(&pods, &c).await;
        self.count_status(written.is_ok());
        if written.is_err() {
            let _ = self.feedback.send(Feedback::PodConditionFailed { uid: c.uid });
        }
    }

    /// Writes `PodScheduled=False` on a pod that is still unbound. The message was decided a cycle ago and a
    /// bind may have landed since (the API server then set `PodScheduled=True`), so the patch is conditional
    /// on the resourceVersion read here: a pod bound in between is left alone.
    async fn write_unschedulable_condition(
        &self,
        pods: &Api<Pod>,
        c: &PodCondition,
    ) -> Result<(), kube::Error> {
        const ATTEMPTS: usize = 3;
        let mut last = Ok(());
        for _ in 0..ATTEMPTS {
            let current = match pods.get_opt(&c.name).await? {
                Some(p) if p.metadata.uid.as_deref() == Some(c.uid.as_ref()) => p,
                // Deleted or replaced by a namesake: nothing to explain.
                _ => return Ok(()),
            };
            if current.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                return Ok(());
            }
            let now = scheduler_core::framework::report::status::rfc3339(
                k8s_openapi::jiff::Timestamp::now().as_millisecond(),
            );
            // Strategic merge keyed by condition type: the kubelet's conditions are left alone.
            let patch = json!({
                "metadata": { "uid": c.uid.as_ref(), "resourceVersion": current.metadata.resource_version },
                "status": { "conditions": [{
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": c.message,
                    "lastTransitionTime": now,
                }]},
            });
            last = pods
                .patch_status(&c.name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .map(drop);
            match &last {
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                _ => return last,
            }
        }
        last
    }

    pub(super) async fn queue_status(&self, q: QueueStatus) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            return;
        }
        let api: Api<api::Queue> = Api::all(self.client.clone());
        let patch = json!({ "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "status": q.status });
        let params = PatchParams::apply(api::keys::FIELD_MANAGER_SCHEDULER).force();
        let result = api.patch_status(&q.name, &params, &Patch::Apply(&patch)).await;
        match &result {
            Ok(_) => {
                debug!(target: LOG_TARGET, queue = %q.name, status = ?q.status, "queue status written")
            }
            Err(error) => {
                warn!(target: LOG_TARGET, queue = %q.name, %error, "writing the queue status failed")
            }
        }
        self.count_status(result.is_ok());
        if result.is_err() {
            let _ = self.feedback.send(Feedback::QueueStatusFailed { name: q.name });
        }
    }

    fn count_status(&self, ok: bool) {
        self.metrics
            .status_writes
            .get_or_create(&ResultLabel {
                result: if ok { "ok" } else { "error" },
            })
            .inc();
    }
}

/// Our status in Volcano's words (phases Pending, Inqueue, Running, Completed).
fn volcano_status(s: &api::PodGroupStatus) -> serde_json::Value {
    use api::PodGroupPhase as P;
    let phase = match s.phase {
        Some(P::Running) => "Running",
        Some(P::Scheduled | P::PreScheduling) => "Inqueue",
        Some(P::Finished) => "Completed",
        _ => "Pending",
    };
    json!({
        "phase": phase,
        "conditions": s.conditions,
        "running": s.running,
        "succeeded": s.succeeded,
        "failed": s.failed,
    })
}
