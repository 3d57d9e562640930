//! Fractional GPUs that see only their device (issue 17), against a real API server that really calls the
//! scheduler's admission webhook: each test registers the chart's webhook configuration for its own
//! namespace, pointed at its scheduler process on a loopback port (`e2e::webhook`), and the node agent
//! plays the kubelet (it starts a container only with the ConfigMap keys its environment takes, and writes
//! down what it got) and the NVIDIA device plugin (each reservation pod gets a fake GPU UUID).
//!
//! Run one: `cargo test -p e2e --test gpu_isolation half`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use api::keys;
use e2e::TestEnv;
use e2e::agent::{CONTAINER_ENV_ANNOTATION, fake_gpu_uuid};
use e2e::webhook::LocalWebhook;
use e2e::workloads::{self, apply, pod_group, pool_labels, pool_nodes};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
/// Label of the pods a test makes, selecting them all.
const APP: &str = "gpu-isolation";

/// A test namespace, its webhook registered, and a scheduler with GPU sharing on as the chart configures
/// it (`requireWebhook`) and `extra_args`; with `serve`, the scheduler serves the webhook (certificates it
/// keeps) and the test waits until the API server goes through it.
async fn start(test: &str, serve: bool, extra_args: &[&str]) -> anyhow::Result<(TestEnv, LocalWebhook)> {
    workloads::build().await?;
    let t = TestEnv::start(test).await?;
    let webhook = t.register_gpu_webhook().await?;
    let config = e2e::paths::test_file(
        test,
        "scheduler.yaml",
        "plugins:\n  gpusharing:\n    enabled: true\n    requireWebhook: true\n    reservationTimeout: 30s\n",
    )?;
    let config = config.to_string_lossy().into_owned();
    let mut args: Vec<String> = vec!["--config".into(), config];
    if serve {
        args.extend(webhook.scheduler_args());
    }
    args.extend(extra_args.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    workloads::start_scheduler(&t, "scheduler", &args)?;
    workloads::reservation_account(&t).await?;
    if serve {
        webhook.wait_until_serving(t.client(), TIMEOUT).await?;
    }
    Ok((t, webhook))
}

/// A bare pod of the test's pool in a PodGroup of its own.
fn pod(t: &TestEnv, name: &str, annotations: &Value, containers: &Value) -> [Value; 2] {
    let mut labels = pool_labels(t);
    labels["app"] = json!(APP);
    let mut all = json!({ keys::POD_GROUP_NAME: name });
    if let (Some(a), Some(extra)) = (all.as_object_mut(), annotations.as_object()) {
        a.extend(extra.clone());
    }
    [
        pod_group(t, name, json!({ "minMember": 1, "queue": keys::DEFAULT_QUEUE })),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": t.namespace(), "labels": labels, "annotations": all },
            "spec": { "schedulerName": keys::SCHEDULER_NAME, "containers": containers },
        }),
    ]
}

fn container(name: &str) -> Value {
    json!({ "name": name, "image": "nvcr.io/nvidia/pytorch:24.01-py3" })
}

/// What each container got from ConfigMaps when the node agent started it.
fn started_env(p: &Pod) -> BTreeMap<String, BTreeMap<String, String>> {
    p.annotations()
        .get(CONTAINER_ENV_ANNOTATION)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

fn env_of(p: &Pod, container: &str, key: &str) -> Option<String> {
    started_env(p).get(container).and_then(|e| e.get(key).cloned())
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

async fn pod_named(t: &TestEnv, name: &str) -> anyhow::Result<Pod> {
    Ok(t.api::<Pod>().get(name).await?)
}

/// Waits until the pods named are running with their environment (the node agent started them).
async fn wait_started(t: &TestEnv, names: &[&str]) -> anyhow::Result<Vec<Pod>> {
    let started = t
        .wait_for_pods(
            &format!("{names:?} started"),
            &format!("app={APP}"),
            TIMEOUT,
            |pods| {
                names.iter().all(|n| {
                    pods.iter().any(|p| {
                        p.name_any() == *n
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                })
            },
        )
        .await?;
    Ok(names
        .iter()
        .filter_map(|n| started.iter().find(|p| p.name_any() == *n).cloned())
        .collect())
}

/// The reservation pods on the test's nodes (the reservation namespace is shared by all tests).
async fn reservation_pods(t: &TestEnv, nodes: &[String]) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(t.client().clone(), keys::RESERVATION_NAMESPACE);
    Ok(api
        .list(&ListParams::default().labels(&format!("app={}", keys::RESERVATION_APP)))
        .await?
        .items
        .into_iter()
        .filter(|p| node_of(p).is_some_and(|n| nodes.iter().any(|m| m == n)))
        .collect())
}

/// Removes reservation pods left on the test's nodes (after a failure only: the scheduler removes them).
async fn remove_reservations(t: &TestEnv, nodes: &[String]) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(t.client().clone(), keys::RESERVATION_NAMESPACE);
    for p in reservation_pods(t, nodes).await? {
        let _ = api
            .delete(&p.name_any(), &DeleteParams::default().grace_period(0))
            .await;
    }
    Ok(())
}

async fn sharing_configmaps(t: &TestEnv) -> anyhow::Result<Vec<ConfigMap>> {
    Ok(t.api::<ConfigMap>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.name_any().ends_with(gpu_configmap_suffix()))
        .collect())
}

fn gpu_configmap_suffix() -> &'static str {
    "-shared-gpu"
}

/// Two pods of half a GPU share one device and both start with it (and the portion) in their environment;
/// a third pod of 0.6 is on the node's other device and sees that one; a pod that asks for no GPU is left
/// as it was written. Each pod's ConfigMap is owned by it and goes with it, and the reservation pods go
/// with their last sharer.
#[tokio::test]
async fn half_gpu_pods_share_one_device_and_see_only_it() -> anyhow::Result<()> {
    let (t, webhook) = start("gpu-isolation-halves", true, &[]).await?;
    let nodes = t.create_nodes(pool_nodes(&t, "gi").count(1).gpus(2)).await?;
    let node = nodes[0].clone();
    let half = json!({ keys::GPU_FRACTION: "0.5" });
    // The user's own variables stay; an image-style NVIDIA_VISIBLE_DEVICES=all is replaced.
    let mut first = container("trainer");
    first["env"] =
        json!([{ "name": "EPOCHS", "value": "3" }, { "name": keys::NVIDIA_VISIBLE_DEVICES, "value": "all" }]);
    let mut objects = Vec::new();
    objects.extend(pod(&t, "half-a", &half, &json!([first])));
    objects.extend(pod(&t, "half-b", &half, &json!([container("trainer")])));
    objects.extend(pod(
        &t,
        "big",
        &json!({ keys::GPU_FRACTION: "0.6" }),
        &json!([container("trainer")]),
    ));
    let mut cpu = container("web");
    cpu["resources"] = json!({ "requests": { "cpu": "100m" } });
    objects.extend(pod(&t, "cpu-only", &json!({}), &json!([cpu])));
    apply(&t, &objects).await?;

    let outcome = async {
        let started = wait_started(&t, &["half-a", "half-b", "big", "cpu-only"]).await?;
        let [a, b, big, plain] = started.as_slice() else {
            anyhow::bail!("4 pods expected");
        };
        let device = |p: &Pod| env_of(p, "trainer", keys::NVIDIA_VISIBLE_DEVICES);
        let portion = |p: &Pod| env_of(p, "trainer", keys::GPU_PORTION);
        println!(
            "half-a {:?} {:?}; half-b {:?} {:?}; big {:?} {:?}",
            device(a),
            portion(a),
            device(b),
            portion(b),
            device(big),
            portion(big)
        );
        assert!(
            device(a).is_some(),
            "half-a started without its device: {:?}",
            started_env(a)
        );
        assert_eq!(device(a), device(b), "the two halves see the same device");
        assert_eq!(portion(a).as_deref(), Some("0.50"));
        assert_eq!(portion(b).as_deref(), Some("0.50"));
        assert_eq!(
            env_of(a, "trainer", keys::RUNAI_NUM_OF_GPUS).as_deref(),
            Some("0.50")
        );
        assert_ne!(
            device(big),
            device(a),
            "0.6 does not fit beside them: another device"
        );
        assert_eq!(portion(big).as_deref(), Some("0.60"));
        let seen: BTreeSet<String> = [device(a), device(big)].into_iter().flatten().collect();
        let node_devices: BTreeSet<String> = (0..2).map(|i| fake_gpu_uuid(&node, i)).collect();
        assert_eq!(
            seen, node_devices,
            "each is a device of the node, as its device plugin named it"
        );
        for p in [a, b, big] {
            assert_eq!(node_of(p), Some(node.as_str()));
            assert_eq!(
                p.annotations().get(keys::GPU_DEVICE),
                device(p).as_ref(),
                "{}: the device annotation agrees",
                p.name_any()
            );
        }
        // The reservation pods hold exactly those devices.
        let held: BTreeSet<String> = reservation_pods(&t, &nodes)
            .await?
            .iter()
            .filter_map(|r| r.annotations().get(keys::RESERVED_GPU_INDEX).cloned())
            .collect();
        assert_eq!(held, node_devices);

        // The spec as the webhook left it: the user's variable first, the device from the ConfigMap.
        let spec_env = a
            .spec
            .as_ref()
            .map(|s| s.containers[0].env.clone().unwrap_or_default())
            .unwrap_or_default();
        let names: Vec<&str> = spec_env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "EPOCHS",
                keys::NVIDIA_VISIBLE_DEVICES,
                keys::GPU_PORTION,
                keys::RUNAI_NUM_OF_GPUS
            ]
        );
        assert!(
            spec_env[1].value.is_none() && spec_env[1].value_from.is_some(),
            "{spec_env:?}"
        );
        let configmap = a
            .annotations()
            .get(keys::GPU_SHARING_CONFIGMAP)
            .cloned()
            .unwrap_or_default();
        let cm = t.api::<ConfigMap>().get(&configmap).await?;
        let owner = cm.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owner.len(), 1);
        assert_eq!(
            (owner[0].kind.as_str(), Some(owner[0].uid.as_str())),
            ("Pod", a.uid().as_deref())
        );

        // The pod that asks for no GPU is as it was written.
        assert!(!plain.annotations().contains_key(keys::GPU_SHARING_CONFIGMAP));
        assert!(plain.spec.as_ref().is_some_and(|s| s.containers[0].env.is_none()));
        assert!(started_env(plain).is_empty());

        // Gone with their pods: the ConfigMaps (owner references) and the reservation pods (last sharer).
        for name in ["half-a", "half-b", "big"] {
            t.api::<Pod>().delete(name, &DeleteParams::default()).await?;
        }
        t.wait_until("the pods' ConfigMaps collected", TIMEOUT, async || {
            Ok(sharing_configmaps(&t).await?.is_empty().then_some(()))
        })
        .await?;
        t.wait_until("the reservation pods removed", TIMEOUT, async || {
            Ok(reservation_pods(&t, &nodes).await?.is_empty().then_some(()))
        })
        .await?;
        anyhow::Ok(())
    }
    .await;
    finish(t, webhook, &nodes, outcome).await
}

/// A `gpu-memory` pod's portion is its memory over the node's `nvidia.com/gpu.memory`; a pod of half a GPU
/// on two devices sees two UUIDs; `gpu-fraction-container-name` gives the device to that container only;
/// and a request that cannot be served is refused at creation, with the reason.
#[tokio::test]
async fn memory_shares_two_device_shares_and_named_containers_see_the_right_devices() -> anyhow::Result<()> {
    let (t, webhook) = start("gpu-isolation-memory", true, &[]).await?;
    let nodes = t
        .create_nodes(
            pool_nodes(&t, "gm")
                .count(1)
                .gpus(4)
                .label(keys::NODE_GPU_MEMORY, "40000"),
        )
        .await?;
    let node = nodes[0].clone();
    let mut objects = Vec::new();
    objects.extend(pod(
        &t,
        "memory",
        &json!({ keys::GPU_MEMORY: "10000" }),
        &json!([container("c")]),
    ));
    objects.extend(pod(
        &t,
        "two-devices",
        &json!({ keys::GPU_FRACTION: "0.5", keys::GPU_FRACTION_NUM_DEVICES: "2" }),
        &json!([container("c")]),
    ));
    objects.extend(pod(
        &t,
        "named",
        &json!({ keys::GPU_FRACTION: "0.25", keys::GPU_FRACTION_CONTAINER_NAME: "main" }),
        &json!([container("sidecar"), container("main")]),
    ));
    apply(&t, &objects).await?;

    let outcome = async {
        let started = wait_started(&t, &["memory", "two-devices", "named"]).await?;
        let [memory, two, named] = started.as_slice() else {
            anyhow::bail!("3 pods expected");
        };
        let node_devices: BTreeSet<String> = (0..4).map(|i| fake_gpu_uuid(&node, i)).collect();
        assert_eq!(
            env_of(memory, "c", keys::GPU_PORTION).as_deref(),
            Some("0.25"),
            "10000 of 40000 MiB"
        );
        let devices = env_of(two, "c", keys::NVIDIA_VISIBLE_DEVICES).unwrap_or_default();
        println!("two-devices sees {devices}");
        let list: BTreeSet<String> = devices.split(',').map(str::to_owned).collect();
        assert_eq!(list.len(), 2, "two distinct devices: {devices}");
        assert!(list.is_subset(&node_devices), "{devices}");
        assert_eq!(
            env_of(two, "c", keys::GPU_PORTION).as_deref(),
            Some("0.50"),
            "per device"
        );
        let groups = two
            .labels()
            .keys()
            .filter(|k| k.starts_with(&format!("{}/", keys::GPU_GROUP)))
            .count();
        assert_eq!(groups, 2, "{:?}", two.labels());
        assert!(env_of(named, "main", keys::NVIDIA_VISIBLE_DEVICES).is_some());
        assert!(
            !started_env(named).contains_key("sidecar"),
            "only the named container: {:?}",
            started_env(named)
        );
        assert_eq!(env_of(named, "main", keys::GPU_PORTION).as_deref(), Some("0.25"));

        // Refused at creation, with the reason, while the webhook runs.
        let [group, refused] = pod(
            &t,
            "whole-by-fraction",
            &json!({ keys::GPU_FRACTION: "1" }),
            &json!([container("c")]),
        );
        apply(&t, &[group]).await?;
        let error = t
            .api::<Pod>()
            .create(&PostParams::default(), &serde_json::from_value(refused)?)
            .await
            .expect_err("refused");
        println!("refused: {error}");
        assert!(
            error
                .to_string()
                .contains("GPU sharing: gpu-fraction must be below 1"),
            "{error}"
        );
        for name in ["memory", "two-devices", "named"] {
            t.api::<Pod>().delete(name, &DeleteParams::default()).await?;
        }
        t.wait_until("the reservation pods removed", TIMEOUT, async || {
            Ok(reservation_pods(&t, &nodes).await?.is_empty().then_some(()))
        })
        .await?;
        anyhow::Ok(())
    }
    .await;
    finish(t, webhook, &nodes, outcome).await
}

/// The webhook is registered but nothing answers (the scheduler does not serve it): pods are still
/// created at once (failurePolicy Ignore); a pod that asks for no GPU is placed, a pod that asks for half a
/// GPU is not, and says why on its PodScheduled condition and in a Warning event.
#[tokio::test]
async fn with_the_webhook_down_sharing_pods_wait_with_a_message_and_other_pods_are_created()
-> anyhow::Result<()> {
    let (t, webhook) = start("gpu-isolation-down", false, &[]).await?;
    t.create_nodes(pool_nodes(&t, "gd").count(1).gpus(1)).await?;
    let mut cpu = container("web");
    cpu["resources"] = json!({ "requests": { "cpu": "100m" } });
    let timeout = webhook_timeout()?;
    for [group, p] in [
        pod(&t, "plain", &json!({}), &json!([cpu])),
        pod(
            &t,
            "half",
            &json!({ keys::GPU_FRACTION: "0.5" }),
            &json!([container("c")]),
        ),
    ] {
        apply(&t, &[group]).await?;
        let created = Instant::now();
        t.api::<Pod>()
            .create(&PostParams::default(), &serde_json::from_value(p)?)
            .await?;
        let took = created.elapsed();
        println!("a pod created in {took:?} with the webhook down (timeoutSeconds {timeout:?})");
        assert!(
            took < timeout + Duration::from_secs(2),
            "the creation waited at most the webhook's timeout: {took:?}"
        );
    }

    let outcome = async {
        wait_started(&t, &["plain"]).await?;
        let half = pod_named(&t, "half").await?;
        assert!(
            !half.annotations().contains_key(keys::GPU_SHARING_CONFIGMAP),
            "not prepared"
        );
        let needle = "GPU-sharing admission webhook";
        let message = t
            .wait_until("the sharing pod's PodScheduled=False", TIMEOUT, async || {
                let p = pod_named(&t, "half").await?;
                Ok(p.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                    .and_then(|c| c.message)
                    .filter(|m| m.contains(needle)))
            })
            .await?;
        println!("half waits: {message}");
        t.wait_until("a Warning event on the sharing pod", TIMEOUT, async || {
            let events = t
                .api::<Event>()
                .list(&ListParams::default().fields(&format!(
                    "involvedObject.name=half,reason={}",
                    keys::EVENT_UNSCHEDULABLE
                )))
                .await?;
            Ok(events
                .items
                .iter()
                .any(|e| e.message.as_deref().is_some_and(|m| m.contains(needle)))
                .then_some(()))
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(node_of(&pod_named(&t, "half").await?), None, "never bound");
        anyhow::Ok(())
    }
    .await;
    finish(t, webhook, &[], outcome).await
}

/// Ends a test whose body gave `outcome`: on failure, the reservation pods of `nodes` removed and the
/// report printed; the components stopped and the webhook configuration removed in every case, then the
/// namespace.
async fn finish(
    t: TestEnv,
    webhook: LocalWebhook,
    nodes: &[String],
    outcome: anyhow::Result<()>,
) -> anyhow::Result<()> {
    if outcome.is_err() {
        remove_reservations(&t, nodes).await?;
        println!("{}", t.report().await);
    }
    t.remove_webhook(&webhook).await?;
    outcome?;
    t.finish().await
}

/// The chart's `timeoutSeconds` for the webhook.
fn webhook_timeout() -> anyhow::Result<Duration> {
    let rendered = e2e::chart::Rendered::render(
        &e2e::helm::Helm::find_or_fetch()?,
        e2e::chart::RELEASE,
        e2e::chart::NAMESPACE,
        &[("global.gpuSharing", "true")],
    )?;
    let seconds = rendered
        .of_kind("MutatingWebhookConfiguration")
        .next()
        .and_then(|c| c.pointer("/webhooks/0/timeoutSeconds"))
        .and_then(Value::as_u64)
        .ok_or_else(|| anyhow::anyhow!("the chart renders no webhook timeout"))?;
    Ok(Duration::from_secs(seconds))
}

/// With short validities the scheduler renews the serving certificate and replaces the CA while the
/// webhook serves: the CA bundle in the webhook configuration follows, and every pod created meanwhile
/// goes through the webhook.
#[tokio::test]
async fn certificates_are_renewed_while_the_webhook_serves() -> anyhow::Result<()> {
    let (t, webhook) = start(
        "gpu-isolation-renewal",
        true,
        &["--webhook-cert-validity=15s", "--webhook-ca-validity=45s"],
    )
    .await?;
    let secrets: Api<Secret> = t.api();
    let secret_name = webhook
        .scheduler_flags()
        .into_iter()
        .find(|(f, _)| *f == "webhook-secret")
        .map(|(_, v)| v)
        .unwrap_or_default();
    let mut cas = BTreeSet::new();
    let mut certs = BTreeSet::new();
    let mut failures = Vec::new();
    let mut probes = 0;
    let outcome = async {
        let until = Instant::now() + Duration::from_secs(55);
        while Instant::now() < until {
            let s = secrets.get(&secret_name).await?;
            if let Some(ca) = s.annotations().get("kai.scheduler/webhook-ca-name") {
                cas.insert(ca.clone());
            }
            if let Some(cert) = s.data.as_ref().and_then(|d| d.get("tls.crt")) {
                certs.insert(String::from_utf8_lossy(&cert.0).into_owned());
            }
            probes += 1;
            if let Err(e) = webhook.wait_until_serving(t.client(), Duration::ZERO).await {
                failures.push(e.to_string());
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        println!(
            "{probes} probes, {} CAs, {} serving certificates, failures: {failures:?}",
            cas.len(),
            certs.len()
        );
        assert!(cas.len() >= 2, "the CA was replaced: {cas:?}");
        assert!(
            certs.len() >= 3,
            "the serving certificate was renewed: {}",
            certs.len()
        );
        assert!(
            failures.is_empty(),
            "every pod went through the webhook: {failures:?}"
        );
        let bundle = webhook.ca_bundle(t.client()).await?;
        let current = secrets.get(&secret_name).await?;
        let ca = current
            .data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        assert_eq!(bundle, ca, "the configuration carries the Secret's bundle");
        anyhow::Ok(())
    }
    .await;
    finish(t, webhook, &[], outcome).await
}

/// Certificates kept by someone else (cert-manager: a `kubernetes.io/tls` Secret, the bundle injected into
/// the configuration) are served as they are; the scheduler writes neither.
#[tokio::test]
async fn certificates_kept_by_cert_manager_are_served_and_left_alone() -> anyhow::Result<()> {
    workloads::build().await?;
    let t = TestEnv::start("gpu-isolation-external").await?;
    let webhook = t.register_gpu_webhook().await?;
    let outcome = async {
        let flags = webhook.scheduler_flags();
        let flag = |name: &str| flags.iter().find(|(f, _)| *f == name).map(|(_, v)| v.clone()).unwrap_or_default();
        let secret_name = flag("webhook-secret");
        // What cert-manager would write: a self-signed chain for the webhook's host.
        let now = jiff::Timestamp::now().as_second();
        let validity = scheduler::webhook::certs::Validity {
            ca: Duration::from_secs(3600),
            cert: Duration::from_secs(3600),
        };
        let minted = scheduler::webhook::certs::renew(
            scheduler::webhook::certs::Step::Fresh,
            None,
            &["127.0.0.1".to_owned()],
            now,
            validity,
        )
        .map_err(anyhow::Error::msg)?
        .ok_or_else(|| anyhow::anyhow!("no certificate"))?;
        let secrets: Api<Secret> = t.api();
        secrets.delete(&secret_name, &DeleteParams::default()).await?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": { "name": secret_name, "annotations": { "cert-manager.io/certificate-name": "kai-scheduler-webhook" } },
            "type": "kubernetes.io/tls",
            "stringData": { "tls.crt": minted.cert, "tls.key": minted.key, "ca.crt": minted.bundle() },
        }))?;
        secrets.create(&PostParams::default(), &secret).await?;
        let configurations: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
            Api::all(t.client().clone());
        let bundle = serde_json::to_value(k8s_openapi::ByteString(minted.bundle().into_bytes()))?;
        let inject = json!([{ "op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle }]);
        configurations
            .patch(webhook.configuration(), &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(inject)?))
            .await?;

        let config = e2e::paths::test_file(
            "external",
            "scheduler.yaml",
            "plugins:\n  gpusharing:\n    enabled: true\n    requireWebhook: true\n",
        )?;
        let args = [
            "--config".to_owned(),
            config.to_string_lossy().into_owned(),
            format!("--webhook-address={}", flag("webhook-address")),
            format!("--webhook-secret={secret_name}"),
            format!("--webhook-secret-namespace={}", t.namespace()),
            "--webhook-hosts=127.0.0.1".to_owned(),
            "--webhook-certificates=external".to_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        workloads::start_scheduler(&t, "scheduler", &args)?;
        webhook.wait_until_serving(t.client(), TIMEOUT).await?;
        let version = secrets.get(&secret_name).await?.resource_version();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(secrets.get(&secret_name).await?.resource_version(), version, "the Secret is left alone");
        assert_eq!(webhook.ca_bundle(t.client()).await?, minted.bundle(), "the bundle is left alone");
        anyhow::Ok(())
    }
    .await;
    finish(t, webhook, &[], outcome).await
}
