//! Events, published as events.k8s.io/v1 with client-go's series semantics: a repeat of the same
//! event within a few minutes continues it as a series instead of creating another.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::debug;

use scheduler_core::framework::decisions::{Event, EventObject, EventType};

use super::{Applier, LOG_TARGET};

impl Applier {
    pub(super) async fn event(&self, e: Event) {
        if !self.leading() {
            return;
        }
        let reference = match &e.object {
            EventObject::PodGroup {
                namespace,
                name,
                uid,
                volcano,
            } => ObjectReference {
                api_version: Some(
                    if *volcano {
                        "scheduling.volcano.sh/v1beta1"
                    } else {
                        "scheduling.run.ai/v2alpha2"
                    }
                    .to_owned(),
                ),
                kind: Some("PodGroup".to_owned()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                uid: Some(uid.to_string()).filter(|u| !u.is_empty()),
                ..ObjectReference::default()
            },
            EventObject::Pod { namespace, name, uid } => ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                uid: Some(uid.to_string()),
                ..ObjectReference::default()
            },
            EventObject::Queue { name } => ObjectReference {
                api_version: Some("scheduling.run.ai/v2".to_owned()),
                kind: Some("Queue".to_owned()),
                name: Some(name.to_string()),
                ..ObjectReference::default()
            },
        };
        let note = truncate(&e.message, 1000);
        let type_ = match e.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let key = EventKey::of(type_, e.reason, &reference, &note);
        let result = match self.events.repeat(&key, now) {
            Some((name, count)) => {
                let patch = json!({ "series": { "count": count, "lastObservedTime": MicroTime(now) } });
                events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| name)
            }
            None => {
                let event = self.events.new_event(type_, e.reason, reference, note, now);
                events
                    .create(&PostParams::default(), &event)
                    .await
                    .map(|_| event.metadata.name.unwrap_or_default())
            }
        };
        match result {
            Ok(name) => self.events.record(key, name, now),
            Err(err) => debug!(target: LOG_TARGET, error = %err, reason = e.reason, "event not recorded"),
        }
    }
}

/// What makes two events the same occurrence: client-go's correlator folds repeats of one message into
/// a series. kube's `Recorder` leaves the message out of its key, so a gang's second `Unschedulable`
/// reason (e.g. over its queue limit after "waiting for pods") became a repeat of the first and its text
/// was never shown; the message is part of the key here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    type_: &'static str,
    reason: &'static str,
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
    note: String,
}

impl EventKey {
    fn of(type_: &'static str, reason: &'static str, regarding: &ObjectReference, note: &str) -> Self {
        Self {
            type_,
            reason,
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
            note: note.to_owned(),
        }
    }
}

/// How long a published event can be continued as a series (client-go and kube use 6 minutes).
const SERIES_TTL_MS: i64 = 6 * 60 * 1000;

/// The events published recently, to continue a repeat as a series instead of creating another.
pub(super) struct EventSeries {
    instance: String,
    recent: std::sync::Mutex<HashMap<EventKey, (String, i32, i64)>>,
}

impl EventSeries {
    pub(super) fn new(instance: String) -> Self {
        Self {
            instance,
            recent: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The event to continue and its next count, when the same event was published within the TTL.
    fn repeat(&self, key: &EventKey, now: k8s_openapi::jiff::Timestamp) -> Option<(String, i32)> {
        let now = now.as_millisecond();
        let mut recent = self.recent.lock().ok()?;
        recent.retain(|_, (_, _, last)| now - *last < SERIES_TTL_MS);
        recent.get(key).map(|(name, count, _)| (name.clone(), count + 1))
    }

    /// Remembers a published event (or the continuation of one).
    fn record(&self, key: EventKey, name: String, now: k8s_openapi::jiff::Timestamp) {
        if let Ok(mut recent) = self.recent.lock() {
            let entry = recent.entry(key).or_insert((name, 0, 0));
            entry.1 += 1;
            entry.2 = now.as_millisecond();
        }
    }

    fn new_event(
        &self,
        type_: &str,
        reason: &str,
        regarding: ObjectReference,
        note: String,
        now: k8s_openapi::jiff::Timestamp,
    ) -> K8sEvent {
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(api::keys::SCHEDULER_NAME),
            now.as_nanosecond()
        );
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some("Scheduling".to_owned()),
            reason: Some(reason.to_owned()),
            type_: Some(type_.to_owned()),
            note: Some(note),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_controller: Some(api::keys::SCHEDULER_NAME.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..K8sEvent::default()
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_message_continues_a_series() {
        let series = EventSeries::new("replica-a".to_owned());
        let pg = ObjectReference {
            kind: Some("PodGroup".to_owned()),
            namespace: Some("ns".to_owned()),
            name: Some("big".to_owned()),
            uid: Some("u1".to_owned()),
            ..ObjectReference::default()
        };
        let t0 = k8s_openapi::jiff::Timestamp::from_millisecond(1_000_000).unwrap();
        let waiting = EventKey::of("Warning", "Unschedulable", &pg, "waiting for pods");
        assert_eq!(series.repeat(&waiting, t0), None);
        series.record(waiting.clone(), "big.1".to_owned(), t0);
        assert_eq!(series.repeat(&waiting, t0), Some(("big.1".to_owned(), 2)));
        // Same object and reason, another message: a new event, so its text is shown.
        let over_limit = EventKey::of("Warning", "Unschedulable", &pg, "queue q at its limit");
        assert_eq!(series.repeat(&over_limit, t0), None);
        // Past the TTL a repeat starts a new event.
        let later = k8s_openapi::jiff::Timestamp::from_millisecond(1_000_000 + SERIES_TTL_MS).unwrap();
        assert_eq!(series.repeat(&waiting, later), None);
    }
}
