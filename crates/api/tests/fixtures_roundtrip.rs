//! Every PodGroup and Queue in the seed documents and in KAI-shaped fixtures deserializes into the typed
//! API and serializes back to the same object.

use std::path::{Path, PathBuf};

use kai_api::{PodGroup, Queue, VolcanoPodGroup};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

fn fixture_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/fixtures");
    let mut files = Vec::new();
    for dir in ["seeds", "kai"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("fixture dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Numbers compare by value (`-1` and `-1.0` are the same quota; a quantity `1` comes back as `"1"`).
fn normalize(value: Value) -> Value {
    match value {
        Value::Number(n) => serde_json::json!(n.as_f64().expect("finite")),
        Value::String(s) if s.parse::<f64>().is_ok() => serde_json::json!(s.parse::<f64>().expect("checked")),
        Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, normalize(v))).collect()),
        other => other,
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(doc: &Value, file: &Path) {
    let typed: T =
        serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{}: {e}\n{doc:#}", file.display()));
    let mut back = serde_json::to_value(&typed).expect("serialize");
    // One Rust type serves both PodGroup versions; the served version is the server's business.
    back["apiVersion"] = doc["apiVersion"].clone();
    assert_eq!(
        normalize(back),
        normalize(doc.clone()),
        "{} does not round-trip",
        file.display()
    );
}

#[test]
fn seed_and_kai_objects_roundtrip() {
    let mut counts = [0usize; 3];
    for file in fixture_files() {
        let text = std::fs::read_to_string(&file).expect("read");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let doc: Value = serde_yaml::with::singleton_map_recursive::deserialize(doc).expect("yaml");
            let api_version = doc["apiVersion"].as_str().unwrap_or_default();
            let kind = doc["kind"].as_str().unwrap_or_default();
            match (api_version, kind) {
                ("scheduling.run.ai/v2" | "scheduling.run.ai/v2alpha2", "PodGroup") => {
                    roundtrip::<PodGroup>(&doc, &file);
                    counts[0] += 1;
                }
                ("scheduling.run.ai/v2", "Queue") => {
                    roundtrip::<Queue>(&doc, &file);
                    counts[1] += 1;
                }
                ("scheduling.volcano.sh/v1beta1", "PodGroup") => {
                    roundtrip::<VolcanoPodGroup>(&doc, &file);
                    counts[2] += 1;
                }
                _ => {}
            }
        }
    }
    // 7 seed PodGroups + 2 KAI-shaped ones; 2 seed queues + 2 default queues; 1 Volcano PodGroup.
    assert_eq!(
        counts,
        [9, 4, 1],
        "fixture objects seen (PodGroup, Queue, Volcano PodGroup)"
    );
}

#[test]
fn seed_fields_land_in_typed_fields() {
    let pg: PodGroup = serde_yaml::from_str(
        "apiVersion: scheduling.run.ai/v2\nkind: PodGroup\nmetadata: {name: a}\n\
         spec: {minMember: 2, maxMember: 8, queue: training, priority: 75, scheduleTimeoutSeconds: 300,\n\
         parentPodGroup: ml-pipeline}",
    )
    .expect("parse");
    assert_eq!(pg.spec.min_member, Some(2));
    assert_eq!(pg.spec.max_member, Some(8));
    assert_eq!(pg.spec.priority, Some(75));
    assert_eq!(pg.spec.schedule_timeout_seconds, Some(300));
    assert_eq!(pg.spec.parent_pod_group.as_deref(), Some("ml-pipeline"));
    assert_eq!(pg.spec.effective_min_member(), 2);
}

#[test]
fn unknown_phase_written_by_another_tool_still_parses() {
    let status: kai_api::PodGroupStatus =
        serde_json::from_value(serde_json::json!({"phase": "Inqueue"})).unwrap();
    assert_eq!(status.phase, Some(kai_api::PodGroupPhase::Unknown));
}
