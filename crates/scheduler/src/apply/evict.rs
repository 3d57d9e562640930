//! Evictions through the Eviction API, so PodDisruptionBudgets hold.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Preconditions};
use runtime::discovery::{self, EvictOutcome};
use tracing::warn;

use scheduler_core::framework::decisions::{Event, EventObject, EventType, Evict};

use super::{Applier, EvictLabel, LOG_TARGET};
use crate::loop_state::Feedback;

impl Applier {
    pub(super) async fn evict(&self, e: Evict) {
        let Ok(_permit) = self.writes.acquire().await else {
            return;
        };
        if !self.leading() {
            let _ = self.feedback.send(Feedback::EvictFailed { uid: e.uid.clone() });
            return;
        }
        let options = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(e.uid.to_string()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        };
        let outcome = discovery::evict(&self.client, self.eviction, &e.namespace, &e.name, &options).await;
        let action = e.cause.as_str();
        let result = match &outcome {
            Ok(EvictOutcome::Evicted) => "ok",
            Ok(EvictOutcome::NotFound) => "gone",
            Ok(EvictOutcome::Blocked { .. }) => "blocked",
            Err(_) => "error",
        };
        self.metrics
            .evictions
            .get_or_create(&EvictLabel { action, result })
            .inc();
        let pod = EventObject::Pod {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            uid: e.uid.clone(),
        };
        match outcome {
            Ok(EvictOutcome::Evicted) => {
                self.event(Event {
                    object: pod,
                    type_: EventType::Normal,
                    reason: api::keys::EVENT_EVICT,
                    message: e.message.clone(),
                })
                .await;
            }
            Ok(EvictOutcome::NotFound) => {}
            Ok(EvictOutcome::Blocked { message, .. }) => {
                let _ = self.feedback.send(Feedback::EvictFailed { uid: e.uid.clone() });
                self.event(Event {
                    object: pod,
                    type_: EventType::Warning,
                    reason: "EvictionBlocked",
                    message: format!("eviction by {action} blocked by a PodDisruptionBudget: {message}"),
                })
                .await;
            }
            Err(err) => {
                warn!(target: LOG_TARGET, pod = %format!("{}/{}", e.namespace, e.name), error = %err, "eviction failed");
                let _ = self.feedback.send(Feedback::EvictFailed { uid: e.uid.clone() });
            }
        }
    }
}
