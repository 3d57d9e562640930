//! What the containers of a pod that shares a GPU see: the admission webhook's mutation, the check that
//! it happened, and the ConfigMaps the binder fills.
//!
//! On a GPU node the NVIDIA container runtime exposes the devices named by a container's
//! `NVIDIA_VISIBLE_DEVICES`; a CUDA image sets it to `all`. A pod asking for part of a GPU
//! (`gpu-fraction`, `gpu-memory`, `gpu-fraction-num-devices`) asks for no `nvidia.com/gpu`, so the device
//! plugin gives it nothing and the image's `all` would stand. The webhook ([`admit`]) therefore points
//! the pod's GPU containers at a ConfigMap of the pod, named by KAI's `runai/shared-gpu-configmap`
//! annotation: `NVIDIA_VISIBLE_DEVICES`, `GPU_PORTION` and `RUNAI_NUM_OF_GPUS` come from its keys, not
//! optional, so the kubelet starts no container before the ConfigMap holds them. The scheduler writes the
//! device (the reservation pod's UUID, several for `gpu-fraction-num-devices`) and the portion into every
//! such ConfigMap before it binds the pod (`apply::gpu_env`), owned by the pod.
//!
//! Which containers: the one named by `gpu-fraction-container-name` (an init container or a container, as
//! KAI looks it up), else every container and init container of the pod, so that none of them sees more
//! than the shared device (KAI points only the first container; a sidecar with a CUDA image would see
//! every GPU of the node).
//!
//! Everything here is pure and works on the object as JSON, so fields this build's types do not know
//! are never dropped from a pod.

use std::collections::BTreeMap;

use api::keys;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

/// The suffix of the ConfigMap names the webhook makes (KAI's).
pub const CONFIGMAP_SUFFIX: &str = "shared-gpu";
/// The longest base (owner or pod name) kept in a generated name, as KAI keeps it, so the name with
/// KAI's per-container suffixes still fits a volume name.
const MAX_BASE: usize = 33;
/// The keys the scheduler fills and the containers read, in the order they are added to a container.
pub const KEYS: [&str; 3] = [
    keys::NVIDIA_VISIBLE_DEVICES,
    keys::GPU_PORTION,
    keys::RUNAI_NUM_OF_GPUS,
];

/// The admission webhook's answer for one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Nothing to change: not this scheduler's pod, no GPU share asked, or already pointed at its
    /// ConfigMap (a pod admitted again).
    Unchanged,
    /// The JSON patch (RFC 6902) that points the pod's GPU containers at its ConfigMap.
    Patch(json_patch::Patch),
    /// The pod asks for a share in a way that cannot be served; the message says why.
    Refuse(String),
}

/// Whether a pod's annotations ask for a share of a GPU (KAI's `gpu-fraction` or `gpu-memory`).
#[must_use]
pub fn asks_for_share(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| a.contains_key(keys::GPU_FRACTION) || a.contains_key(keys::GPU_MEMORY))
}

/// The webhook's decision for the pod `pod` (the admission request's object, as JSON) created under the
/// admission request `request_uid` (it makes the generated ConfigMap name unique).
#[must_use]
pub fn admit(pod: &Value, scheduler_name: &str, request_uid: &str) -> Admission {
    if pod.pointer("/spec/schedulerName").and_then(Value::as_str) != Some(scheduler_name) {
        return Admission::Unchanged;
    }
    let annotation = |key: &str| {
        pod.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    };
    let fraction = annotation(keys::GPU_FRACTION);
    let memory = annotation(keys::GPU_MEMORY);
    let devices = annotation(keys::GPU_FRACTION_NUM_DEVICES);
    if fraction.is_none() && memory.is_none() && devices.is_none() {
        return Admission::Unchanged;
    }
    if let Err(why) = validate(pod, fraction, memory, devices) {
        return Admission::Refuse(why);
    }
    let targets = match targets(pod, annotation(keys::GPU_FRACTION_CONTAINER_NAME)) {
        Ok(t) => t,
        Err(why) => return Admission::Refuse(why),
    };
    let name = match annotation(keys::GPU_SHARING_CONFIGMAP).filter(|n| !n.is_empty()) {
        Some(existing) => existing.to_owned(),
        None => generated_name(pod, request_uid),
    };
    let mut mutated = pod.clone();
    set_annotation(&mut mutated, keys::GPU_SHARING_CONFIGMAP, &name);
    for (list, index) in targets {
        if let Some(container) = mutated
            .pointer_mut(&format!("/spec/{list}/{index}"))
            .and_then(Value::as_object_mut)
        {
            point_at(container, &name);
        }
    }
    let patch = json_patch::diff(pod, &mutated);
    if patch.0.is_empty() {
        Admission::Unchanged
    } else {
        Admission::Patch(patch)
    }
}

/// KAI's checks of a GPU-share request, with its messages' sense: one way of asking for a GPU, values
/// the scheduler can count.
fn validate(
    pod: &Value,
    fraction: Option<&str>,
    memory: Option<&str>,
    devices: Option<&str>,
) -> Result<(), String> {
    let whole = containers(pod).any(|(_, _, c)| {
        ["limits", "requests"].iter().any(|kind| {
            c.pointer(&format!("/resources/{kind}"))
                .and_then(|r| r.get(keys::GPU_RESOURCE))
                .is_some()
        })
    });
    if fraction.is_some() && memory.is_some() {
        return Err(format!(
            "the pod asks for both {} and {}; ask for one",
            keys::GPU_FRACTION,
            keys::GPU_MEMORY
        ));
    }
    if whole && (fraction.is_some() || memory.is_some()) {
        return Err(format!(
            "the pod asks for whole GPUs ({}) and a share of one ({} or {}); ask for one",
            keys::GPU_RESOURCE,
            keys::GPU_FRACTION,
            keys::GPU_MEMORY
        ));
    }
    if devices.is_some() && fraction.is_none() && memory.is_none() {
        return Err(format!(
            "{} needs {} or {}: the share taken on each device",
            keys::GPU_FRACTION_NUM_DEVICES,
            keys::GPU_FRACTION,
            keys::GPU_MEMORY
        ));
    }
    if let Some(f) = fraction {
        match api::quantity::gpu_fraction_milli(f) {
            Ok(milli) if milli < 1000 => {}
            Ok(_) => {
                return Err(format!(
                    "{} must be below 1, got {f:?}; ask for {}: 1 for a whole GPU",
                    keys::GPU_FRACTION,
                    keys::GPU_RESOURCE
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    if let Some(m) = memory {
        api::quantity::positive_count("gpu-memory", m).map_err(|e| e.to_string())?;
    }
    if let Some(d) = devices {
        api::quantity::positive_count("gpu-fraction-num-devices", d).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Every container of the pod as (list, index, object): init containers first, as KAI looks a named one
/// up.
fn containers(pod: &Value) -> impl Iterator<Item = (&'static str, usize, &Value)> {
    ["initContainers", "containers"]
        .into_iter()
        .flat_map(move |list| {
            pod.pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
                .map(move |(i, c)| (list, i, c))
        })
}

/// The containers to point at the device: the one named by `gpu-fraction-container-name`, else all.
fn targets(pod: &Value, named: Option<&str>) -> Result<Vec<(&'static str, usize)>, String> {
    let mut all = containers(pod);
    match named {
        Some(name) => all
            .find(|(_, _, c)| c.get("name").and_then(Value::as_str) == Some(name))
            .map(|(list, i, _)| vec![(list, i)])
            .ok_or_else(|| {
                format!(
                    "{} names container {name:?}, which the pod does not have",
                    keys::GPU_FRACTION_CONTAINER_NAME
                )
            }),
        None => Ok(all.map(|(list, i, _)| (list, i)).collect()),
    }
}

/// `<owner or pod name, at most 33 characters>-<7 characters of the request>-shared-gpu`, KAI's shape.
/// The pod's name may be empty at admission (`generateName`), hence the owner first.
fn generated_name(pod: &Value, request_uid: &str) -> String {
    let text = |pointer: &str| {
        pod.pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let base = text("/metadata/ownerReferences/0/name")
        .or_else(|| text("/metadata/name"))
        .or_else(|| text("/metadata/generateName"))
        .unwrap_or("pod");
    let base: String = base
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(MAX_BASE)
        .collect();
    let base = base.trim_end_matches(['-', '.']).trim_start_matches(['-', '.']);
    let base = if base.is_empty() { "pod" } else { base };
    format!("{base}-{}-{CONFIGMAP_SUFFIX}", short_id(request_uid))
}

/// Seven lowercase letters and digits derived from `text` (FNV-1a, base 36).
fn short_id(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    (0..7)
        .map(|_| {
            let d = digits[usize::try_from(hash % 36).unwrap_or(0)];
            hash /= 36;
            char::from(d)
        })
        .collect()
}

fn set_annotation(pod: &mut Value, key: &str, value: &str) {
    let Some(object) = pod.as_object_mut() else {
        return;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(key.to_owned(), json!(value));
    }
}

/// Replaces the container's own entries of [`KEYS`] (a value the image or the user set, or an older
/// reference) with references to `configmap`, after every other entry, which stays as it was.
fn point_at(container: &mut Map<String, Value>, configmap: &str) {
    let mut env: Vec<Value> = container
        .get("env")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    env.retain(|e| {
        !e.get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| KEYS.contains(&n))
    });
    for key in KEYS {
        env.push(json!({
            "name": key,
            "valueFrom": { "configMapKeyRef": { "name": configmap, "key": key, "optional": false } },
        }));
    }
    container.insert("env".to_owned(), Value::Array(env));
}

/// The ConfigMaps the scheduler must fill before it binds the pod: every ConfigMap a container or init
/// container references (`env` key references, `envFrom`) whose name starts with the pod's
/// `runai/shared-gpu-configmap` annotation (the webhook's one, or KAI's per-container ones and their
/// `-evar` companions for a pod KAI's webhook admitted), sorted. `None` when the pod was not pointed at
/// one: no annotation, or no container taking `NVIDIA_VISIBLE_DEVICES` from such a ConfigMap.
#[must_use]
pub fn device_sources(pod: &Pod) -> Option<Vec<String>> {
    let prefix = pod
        .metadata
        .annotations
        .as_ref()?
        .get(keys::GPU_SHARING_CONFIGMAP)
        .filter(|p| !p.is_empty())?;
    let spec = pod.spec.as_ref()?;
    let mut names = Vec::new();
    let mut points = false;
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        for e in c.env.iter().flatten() {
            let Some(r) = e.value_from.as_ref().and_then(|v| v.config_map_key_ref.as_ref()) else {
                continue;
            };
            if r.name.starts_with(prefix.as_str()) {
                points |= e.name == keys::NVIDIA_VISIBLE_DEVICES && r.key == keys::NVIDIA_VISIBLE_DEVICES;
                names.push(r.name.clone());
            }
        }
        for from in c.env_from.iter().flatten() {
            if let Some(r) = from
                .config_map_ref
                .as_ref()
                .filter(|r| r.name.starts_with(prefix.as_str()))
            {
                names.push(r.name.clone());
            }
        }
    }
    names.sort();
    names.dedup();
    points.then_some(names)
}

/// The data of a pod's GPU-sharing ConfigMaps: the devices (comma-separated, in the order of the pod's
/// GPU groups) and the portion of each, under both of KAI's names for it.
#[must_use]
pub fn configmap_data(devices: &[&str], portion: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::NVIDIA_VISIBLE_DEVICES.to_owned(), devices.join(",")),
        (keys::GPU_PORTION.to_owned(), portion.to_owned()),
        (keys::RUNAI_NUM_OF_GPUS.to_owned(), portion.to_owned()),
    ])
}

/// The problem of a sharing pod the webhook did not prepare (it was down, or not installed, when the pod
/// was created), when the scheduler requires it (`gpusharing.requireWebhook`).
#[must_use]
pub fn not_prepared_problem() -> String {
    format!(
        "the pod asks for a share of a GPU but was not prepared by the GPU-sharing admission webhook (no {} \
         annotation pointing its containers at their device; was the webhook down when the pod was \
         created?); without it the containers would see every GPU of the node. Delete the pod so that it \
         is created again (its controller does that) while the webhook runs",
        keys::GPU_SHARING_CONFIGMAP
    )
}

#[cfg(test)]
mod tests;
