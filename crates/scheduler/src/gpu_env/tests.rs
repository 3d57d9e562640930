use api::keys;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{Admission, admit, device_sources, generated_name};

const SCHEDULER: &str = "kai-scheduler";

fn pod(annotations: Value, containers: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "worker-0", "namespace": "team-a", "annotations": annotations },
        "spec": { "schedulerName": SCHEDULER, "containers": containers },
    })
}

fn container(name: &str, env: Value) -> Value {
    json!({ "name": name, "image": "nvcr.io/nvidia/pytorch:24.01-py3", "env": env })
}

/// The pod after the webhook's patch.
fn admitted(pod: &Value, uid: &str) -> Value {
    match admit(pod, SCHEDULER, uid) {
        Admission::Patch(patch) => {
            let mut out = pod.clone();
            json_patch::patch(&mut out, &patch).expect("the patch applies");
            out
        }
        other => panic!("expected a patch, got {other:?}"),
    }
}

fn env_names(container: &Value) -> Vec<String> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn reference(container: &Value, key: &str) -> Option<(String, String, bool)> {
    let entry = container["env"].as_array()?.iter().find(|e| e["name"] == key)?;
    let r = &entry["valueFrom"]["configMapKeyRef"];
    Some((
        r["name"].as_str()?.to_owned(),
        r["key"].as_str()?.to_owned(),
        r["optional"].as_bool()?,
    ))
}

#[test]
fn pods_of_other_schedulers_and_pods_without_a_share_are_left_alone() {
    let mut other = pod(
        json!({ keys::GPU_FRACTION: "0.5" }),
        json!([container("c", json!([]))]),
    );
    other["spec"]["schedulerName"] = json!("default-scheduler");
    assert_eq!(admit(&other, SCHEDULER, "u1"), Admission::Unchanged);
    let plain = pod(json!({ "team": "a" }), json!([container("c", json!([]))]));
    assert_eq!(admit(&plain, SCHEDULER, "u1"), Admission::Unchanged);
    let mut bare = plain.clone();
    bare["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("annotations");
    assert_eq!(admit(&bare, SCHEDULER, "u1"), Admission::Unchanged);
}

#[test]
fn every_container_is_pointed_at_the_pods_configmap_and_its_other_env_is_kept() {
    let mut p = pod(
        json!({ keys::GPU_FRACTION: "0.5" }),
        json!([
            container(
                "trainer",
                json!([
                    { "name": "EPOCHS", "value": "3" },
                    { "name": keys::NVIDIA_VISIBLE_DEVICES, "value": "all" },
                    { "name": "RANK", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                ])
            ),
            json!({ "name": "sidecar", "image": "busybox" }),
        ]),
    );
    p["spec"]["initContainers"] = json!([container("fetch", json!([{ "name": "URL", "value": "s3://x" }]))]);
    let out = admitted(&p, "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4");

    let name = out["metadata"]["annotations"][keys::GPU_SHARING_CONFIGMAP]
        .as_str()
        .expect("the ConfigMap is named on the pod")
        .to_owned();
    assert!(
        name.starts_with("worker-0-") && name.ends_with("-shared-gpu"),
        "{name}"
    );
    assert_eq!(name.len(), "worker-0-".len() + 7 + "-shared-gpu".len(), "{name}");
    assert_eq!(
        out["metadata"]["annotations"][keys::GPU_FRACTION],
        "0.5",
        "other annotations stay"
    );

    let trainer = &out["spec"]["containers"][0];
    assert_eq!(
        env_names(trainer),
        [
            "EPOCHS",
            "RANK",
            keys::NVIDIA_VISIBLE_DEVICES,
            keys::GPU_PORTION,
            keys::RUNAI_NUM_OF_GPUS
        ],
        "the user's own entries stay in order; the image's or user's NVIDIA_VISIBLE_DEVICES is replaced"
    );
    assert_eq!(trainer["env"][0], json!({ "name": "EPOCHS", "value": "3" }));
    assert_eq!(
        trainer["env"][1], p["spec"]["containers"][0]["env"][2],
        "entries are kept as written"
    );
    for c in [
        trainer,
        &out["spec"]["containers"][1],
        &out["spec"]["initContainers"][0],
    ] {
        for key in super::KEYS {
            assert_eq!(
                reference(c, key),
                Some((name.clone(), key.to_owned(), false)),
                "{}: {key} comes from the pod's ConfigMap, not optional (the kubelet waits for it)",
                c["name"]
            );
        }
    }
    assert_eq!(env_names(&out["spec"]["initContainers"][0])[0], "URL");
    assert_eq!(out["spec"]["containers"][1]["image"], "busybox");
}

#[test]
fn admitting_an_admitted_pod_again_changes_nothing() {
    let p = pod(
        json!({ keys::GPU_MEMORY: "10000" }),
        json!([
            container("c", json!([{ "name": "A", "value": "1" }])),
            container("d", json!(null))
        ]),
    );
    let once = admitted(&p, "request-1");
    // A reinvocation, or the same manifest created again with the annotation and references in it
    // (`kubectl get -o yaml | kubectl create -f -`), under another request.
    assert_eq!(admit(&once, SCHEDULER, "request-1"), Admission::Unchanged);
    assert_eq!(admit(&once, SCHEDULER, "request-2"), Admission::Unchanged);
}

#[test]
fn a_named_container_is_the_only_one_pointed_at_the_device() {
    let mut p = pod(
        json!({ keys::GPU_FRACTION: "0.25", keys::GPU_FRACTION_CONTAINER_NAME: "gpu" }),
        json!([container("sidecar", json!([])), container("gpu", json!([]))]),
    );
    p["spec"]["initContainers"] = json!([container("init", json!([]))]);
    let out = admitted(&p, "u");
    assert!(reference(&out["spec"]["containers"][1], keys::NVIDIA_VISIBLE_DEVICES).is_some());
    assert!(reference(&out["spec"]["containers"][0], keys::NVIDIA_VISIBLE_DEVICES).is_none());
    assert!(reference(&out["spec"]["initContainers"][0], keys::NVIDIA_VISIBLE_DEVICES).is_none());

    // An init container may be the one, as in KAI; a container of that name is looked up after it.
    p["metadata"]["annotations"][keys::GPU_FRACTION_CONTAINER_NAME] = json!("init");
    let out = admitted(&p, "u");
    assert!(reference(&out["spec"]["initContainers"][0], keys::NVIDIA_VISIBLE_DEVICES).is_some());
    assert!(reference(&out["spec"]["containers"][1], keys::NVIDIA_VISIBLE_DEVICES).is_none());

    p["metadata"]["annotations"][keys::GPU_FRACTION_CONTAINER_NAME] = json!("missing");
    match admit(&p, SCHEDULER, "u") {
        Admission::Refuse(why) => assert!(why.contains("\"missing\""), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_configmap_named_on_the_pod_already_is_kept() {
    let p = pod(
        json!({ keys::GPU_FRACTION: "0.5", keys::GPU_SHARING_CONFIGMAP: "mine-shared-gpu" }),
        json!([container("c", json!([]))]),
    );
    let out = admitted(&p, "u");
    assert_eq!(
        out["metadata"]["annotations"][keys::GPU_SHARING_CONFIGMAP],
        "mine-shared-gpu"
    );
    assert_eq!(
        reference(&out["spec"]["containers"][0], keys::GPU_PORTION).map(|r| r.0),
        Some("mine-shared-gpu".to_owned())
    );
}

#[test]
fn generated_names_follow_kais_shape() {
    let owned = json!({ "metadata": { "generateName": "job-", "ownerReferences": [{ "name": "Train.Job-With-A-Name-Much-Longer-Than-Thirty-Three" }] } });
    let name = generated_name(&owned, "uid-1");
    assert!(name.starts_with("train.job-with-a-name-much-longer-"), "{name}");
    assert!(name.len() <= 33 + 1 + 7 + 1 + 10, "{name}");
    let generated = json!({ "metadata": { "generateName": "job-" } });
    assert!(
        generated_name(&generated, "uid-1").starts_with("job-"),
        "the base loses its dash"
    );
    assert_ne!(
        generated_name(&generated, "uid-1"),
        generated_name(&generated, "uid-2")
    );
    assert_eq!(
        generated_name(&generated, "uid-1"),
        generated_name(&generated, "uid-1")
    );
    assert!(generated_name(&json!({}), "u").starts_with("pod-"));
    for n in [name, generated_name(&generated, "x")] {
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
            "{n}"
        );
    }
}

#[test]
fn requests_that_cannot_be_served_are_refused_with_the_reason() {
    let refused = |annotations: Value, resources: Value| {
        let mut c = container("c", json!([]));
        c["resources"] = resources;
        match admit(&pod(annotations, json!([c])), SCHEDULER, "u") {
            Admission::Refuse(why) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    let none = json!({});
    let why = refused(json!({ keys::GPU_FRACTION: "1" }), none.clone());
    assert!(why.contains("must be below 1"), "{why}");
    let why = refused(json!({ keys::GPU_FRACTION: "1.5" }), none.clone());
    assert!(why.contains("1.5"), "{why}");
    let why = refused(json!({ keys::GPU_FRACTION: "half" }), none.clone());
    assert!(why.contains("half"), "{why}");
    let why = refused(
        json!({ keys::GPU_FRACTION: "0.5", keys::GPU_MEMORY: "1000" }),
        none.clone(),
    );
    assert!(why.contains("both"), "{why}");
    let why = refused(
        json!({ keys::GPU_FRACTION: "0.5" }),
        json!({ "limits": { keys::GPU_RESOURCE: "1" } }),
    );
    assert!(why.contains("whole GPUs"), "{why}");
    let why = refused(json!({ keys::GPU_FRACTION_NUM_DEVICES: "2" }), none.clone());
    assert!(why.contains("needs"), "{why}");
    let why = refused(json!({ keys::GPU_MEMORY: "0" }), none.clone());
    assert!(why.contains("gpu-memory"), "{why}");
    let why = refused(
        json!({ keys::GPU_FRACTION: "0.5", keys::GPU_FRACTION_NUM_DEVICES: "two" }),
        none,
    );
    assert!(why.contains("gpu-fraction-num-devices"), "{why}");
}

#[test]
fn fields_this_build_does_not_know_are_never_touched() {
    let mut c = container(
        "c",
        json!([{ "name": "TOKEN", "valueFrom": { "fileKeyRef": { "path": "t", "key": "k", "volumeName": "v" } } }]),
    );
    c["futureField"] = json!({ "x": 1 });
    let mut p = pod(json!({ keys::GPU_FRACTION: "0.5" }), json!([c]));
    p["spec"]["futureSpecField"] = json!(true);
    let Admission::Patch(patch) = admit(&p, SCHEDULER, "u") else {
        panic!("a patch");
    };
    let ops = serde_json::to_value(&patch).expect("JSON");
    for op in ops.as_array().expect("a list") {
        assert_ne!(op["op"], "remove", "{ops}");
    }
    let out = admitted(&p, "u");
    assert_eq!(out["spec"]["futureSpecField"], true);
    assert_eq!(out["spec"]["containers"][0]["futureField"], json!({ "x": 1 }));
    assert_eq!(
        out["spec"]["containers"][0]["env"][0],
        p["spec"]["containers"][0]["env"][0]
    );
}

#[test]
fn device_sources_are_the_configmaps_of_the_pods_prefix() {
    let p = pod(
        json!({ keys::GPU_FRACTION: "0.5" }),
        json!([container("c", json!([]))]),
    );
    let typed: Pod = serde_json::from_value(p.clone()).expect("a pod");
    assert_eq!(
        device_sources(&typed),
        None,
        "not admitted: nothing points at a device"
    );

    let out = admitted(&p, "u");
    let name = out["metadata"]["annotations"][keys::GPU_SHARING_CONFIGMAP]
        .as_str()
        .expect("named")
        .to_owned();
    let typed: Pod = serde_json::from_value(out).expect("a pod");
    assert_eq!(device_sources(&typed), Some(vec![name]));

    // KAI's webhook: `<prefix>-0` for the first container's variables, `<prefix>-0-evar` through envFrom.
    let kai = json!({
        "metadata": { "name": "w", "annotations": { keys::GPU_FRACTION: "0.5", keys::GPU_SHARING_CONFIGMAP: "w-abcdefg-shared-gpu" } },
        "spec": { "containers": [{
            "name": "c",
            "env": [
                { "name": keys::NVIDIA_VISIBLE_DEVICES, "valueFrom": { "configMapKeyRef": { "name": "w-abcdefg-shared-gpu-0", "key": keys::NVIDIA_VISIBLE_DEVICES } } },
                { "name": keys::GPU_PORTION, "valueFrom": { "configMapKeyRef": { "name": "w-abcdefg-shared-gpu-0", "key": keys::GPU_PORTION } } },
                { "name": "OTHER", "valueFrom": { "configMapKeyRef": { "name": "unrelated", "key": "x" } } },
            ],
            "envFrom": [{ "configMapRef": { "name": "w-abcdefg-shared-gpu-0-evar" } }, { "configMapRef": { "name": "app-settings" } }],
        }] },
    });
    let typed: Pod = serde_json::from_value(kai).expect("a pod");
    assert_eq!(
        device_sources(&typed),
        Some(vec![
            "w-abcdefg-shared-gpu-0".to_owned(),
            "w-abcdefg-shared-gpu-0-evar".to_owned()
        ])
    );

    // The annotation alone (copied from another pod, say) does not make a pod prepared.
    let annotated = pod(
        json!({ keys::GPU_FRACTION: "0.5", keys::GPU_SHARING_CONFIGMAP: "x-shared-gpu" }),
        json!([container("c", json!([]))]),
    );
    let typed: Pod = serde_json::from_value(annotated).expect("a pod");
    assert_eq!(device_sources(&typed), None);
}
