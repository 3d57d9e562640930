//! Fake `Node` objects: created, given capacity and a `Ready=True` condition, and freed of the
//! `node.kubernetes.io/not-ready` taint the API server adds at creation (no node lifecycle controller
//! runs to remove it). No kubelet backs them; the [`crate::agent::NodeAgent`] plays its part for pods.
//!
//! Used by the test harness and by `cargo xtask nodes`. Every fake node carries [`FAKE_NODE_LABEL`] and
//! an [`OWNER_LABEL`], so deletion never touches a real node.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

/// Label every fake node carries (value `true`).
pub const FAKE_NODE_LABEL: &str = "e2e.kai.dev/fake-node";
/// Label naming who created a fake node (a test's namespace, or `xtask-<prefix>`).
pub const OWNER_LABEL: &str = "e2e.kai.dev/owner";
/// Taint the API server puts on new nodes.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// A set of identical fake nodes `<prefix>-0 .. <prefix>-<count-1>`.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeNodes {
    /// Name prefix.
    pub prefix: String,
    /// How many.
    pub count: usize,
    /// Value of [`OWNER_LABEL`].
    pub owner: String,
    /// Capacity and allocatable (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, any extended resource).
    pub capacity: BTreeMap<String, String>,
    /// Extra labels.
    pub labels: BTreeMap<String, String>,
    /// Taints kept on the node.
    pub taints: Vec<Taint>,
}

impl FakeNodes {
    /// One node with 64 CPUs, 256Gi memory, 8 GPUs and room for 110 pods. Set the owner with
    /// [`FakeNodes::owned_by`] (a test's `TestEnv::create_nodes` sets it to the test's namespace).
    #[must_use]
    pub fn new(prefix: impl Into<String>) -> Self {
        let capacity = [
            ("cpu", "64"),
            ("memory", "256Gi"),
            ("pods", "110"),
            (api::keys::GPU_RESOURCE, "8"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        Self {
            prefix: prefix.into(),
            count: 1,
            owner: String::new(),
            capacity,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    /// Who owns the nodes (value of [`OWNER_LABEL`]).
    #[must_use]
    pub fn owned_by(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Number of nodes.
    #[must_use]
    pub fn count(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// CPU capacity (a quantity: `"64"`, `"500m"`).
    #[must_use]
    pub fn cpu(self, quantity: &str) -> Self {
        self.resource("cpu", quantity)
    }

    /// Memory capacity (`"256Gi"`).
    #[must_use]
    pub fn memory(self, quantity: &str) -> Self {
        self.resource("memory", quantity)
    }

    /// Whole GPUs (`nvidia.com/gpu`); 0 removes the resource.
    #[must_use]
    pub fn gpus(mut self, count: u32) -> Self {
        if count == 0 {
            self.capacity.remove(api::keys::GPU_RESOURCE);
            self
        } else {
            self.resource(api::keys::GPU_RESOURCE, &count.to_string())
        }
    }

    /// Pod slots.
    #[must_use]
    pub fn pods(self, count: u32) -> Self {
        self.resource("pods", &count.to_string())
    }

    /// Any resource's capacity.
    #[must_use]
    pub fn resource(mut self, name: &str, quantity: &str) -> Self {
        self.capacity.insert(name.to_owned(), quantity.to_owned());
        self
    }

    /// An extra label.
    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// A taint kept on the nodes (`effect`: `NoSchedule`, `PreferNoSchedule`, `NoExecute`).
    #[must_use]
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints.push(Taint {
            key: key.to_owned(),
            value: (!value.is_empty()).then(|| value.to_owned()),
            effect: effect.to_owned(),
            time_added: None,
        });
        self
    }

    /// The node names.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        (0..self.count).map(|i| format!("{}-{i}", self.prefix)).collect()
    }

    /// Label selector matching exactly the nodes of this owner.
    #[must_use]
    pub fn owner_selector(&self) -> String {
        owner_selector(&self.owner)
    }

    /// All labels of node `name`.
    #[must_use]
    pub fn labels_of(&self, name: &str) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert("kubernetes.io/hostname".into(), name.to_owned());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("kubernetes.io/arch".into(), "amd64".into());
        labels.insert(FAKE_NODE_LABEL.into(), "true".into());
        labels.insert(OWNER_LABEL.into(), self.owner.clone());
        labels
    }

    /// The `/status` patch: capacity, allocatable, conditions, addresses, node info.
    #[must_use]
    pub fn status_patch(&self, name: &str, index: usize) -> serde_json::Value {
        let now = crate::now();
        let condition = |type_: &str, status: &str, reason: &str, message: &str| {
            json!({
                "type": type_, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            })
        };
        json!({
            "status": {
                "capacity": self.capacity,
                "allocatable": self.capacity,
                "conditions": [
                    condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "fake node"),
                    condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "fake node"),
                    condition("PIDPressure", "False", "KubeletHasSufficientPID", "fake node"),
                    condition("Ready", "True", "KubeletReady", "fake node played by the e2e node agent"),
                ],
                "addresses": [
                    {"type": "InternalIP", "address": fake_node_ip(index)},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {
                    "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                    "osImage": "fake", "containerRuntimeVersion": "fake://0",
                    "kubeletVersion": crate::paths::K8S_VERSION, "kubeProxyVersion": crate::paths::K8S_VERSION,
                    "operatingSystem": "linux", "architecture": "amd64",
                },
            }
        })
    }
}

/// Label selector matching the fake nodes of `owner`.
#[must_use]
pub fn owner_selector(owner: &str) -> String {
    format!("{FAKE_NODE_LABEL}=true,{OWNER_LABEL}={owner}")
}

/// An address in 198.18.0.0/15 (reserved for benchmarking): only data in a status, never contacted.
fn fake_node_ip(index: usize) -> String {
    format!("198.18.{}.{}", (index / 250) % 250, index % 250 + 1)
}

/// Creates (or updates) the nodes, makes them Ready and removes the not-ready taint. Returns their names.
///
/// # Errors
/// When the server rejects a node.
pub async fn create(client: &Client, nodes: &FakeNodes) -> anyhow::Result<Vec<String>> {
    if nodes.owner.is_empty() {
        bail!("fake nodes {} have no owner (FakeNodes::owned_by)", nodes.prefix);
    }
    let api: Api<Node> = Api::all(client.clone());
    let names = nodes.names();
    futures::stream::iter(names.iter().enumerate())
        .map(|(index, name)| create_one(&api, nodes, name, index))
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(names)
}

async fn create_one(api: &Api<Node>, nodes: &FakeNodes, name: &str, index: usize) -> anyhow::Result<()> {
    let labels = nodes.labels_of(name);
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let existing = api
                .get(name)
                .await
                .with_context(|| format!("reading node {name}"))?;
            if existing.labels().get(FAKE_NODE_LABEL).map(String::as_str) != Some("true") {
                bail!("node {name} exists and is not a fake node; pick another prefix");
            }
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .with_context(|| format!("labelling node {name}"))?;
        }
        Err(err) => return Err(err).with_context(|| format!("creating node {name}")),
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(nodes.status_patch(name, index)),
    )
    .await
    .with_context(|| format!("patching the status of node {name}"))?;
    // A merge patch replaces the whole list, dropping the not-ready taint the API server added.
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": nodes.taints}})),
    )
    .await
    .with_context(|| format!("setting the taints of node {name}"))?;
    Ok(())
}

/// Deletes the fake nodes matching `selector` (which is narrowed to fake nodes). Returns how many.
///
/// # Errors
/// When the server refuses.
pub async fn delete(client: &Client, selector: &str) -> anyhow::Result<usize> {
    let api: Api<Node> = Api::all(client.clone());
    let selector = narrow_to_fake(selector);
    let found = api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .context("listing nodes")?;
    let names: Vec<String> = found.items.into_iter().filter_map(|n| n.metadata.name).collect();
    let count = names.len();
    // One request per node, a few in flight: one collection delete of a benchmark's thousand nodes can
    // outlast the API server's request timeout on a busy server.
    futures::stream::iter(names)
        .map(|name| {
            let api = &api;
            async move {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(err) => Err(err).with_context(|| format!("deleting node {name}")),
                }
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await?;
    Ok(count)
}

fn narrow_to_fake(selector: &str) -> String {
    let fake = format!("{FAKE_NODE_LABEL}=true");
    if selector.split(',').any(|term| term.trim() == fake) {
        selector.to_owned()
    } else if selector.trim().is_empty() {
        fake
    } else {
        format!("{selector},{fake}")
    }
}

/// Deletes the fake nodes whose names start with `prefix`. Returns how many.
///
/// # Errors
/// When the server refuses.
pub async fn delete_by_prefix(client: &Client, prefix: &str) -> anyhow::Result<usize> {
    let api: Api<Node> = Api::all(client.clone());
    let found = api
        .list_metadata(&ListParams::default().labels(&narrow_to_fake("")))
        .await
        .context("listing nodes")?;
    let names: Vec<String> = found
        .items
        .into_iter()
        .map(|n| n.name_any())
        .filter(|n| n.starts_with(prefix))
        .collect();
    futures::stream::iter(names.iter())
        .map(|name| {
            let api = api.clone();
            async move {
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => Ok::<(), anyhow::Error>(()),
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                    Err(err) => Err(err).with_context(|| format!("deleting node {name}")),
                }
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(names.len())
}

/// Whether a node reports `Ready=True`.
#[must_use]
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_sets_capacity_labels_and_taints() {
        let nodes = FakeNodes::new("gpu")
            .owned_by("t1")
            .count(2)
            .gpus(4)
            .cpu("8")
            .label("zone", "a")
            .taint("k", "v", "NoSchedule");
        assert_eq!(nodes.names(), ["gpu-0", "gpu-1"]);
        assert_eq!(nodes.capacity["nvidia.com/gpu"], "4");
        assert_eq!(nodes.capacity["cpu"], "8");
        let labels = nodes.labels_of("gpu-1");
        assert_eq!(labels["zone"], "a");
        assert_eq!(labels[OWNER_LABEL], "t1");
        assert_eq!(labels["kubernetes.io/hostname"], "gpu-1");
        let patch = nodes.status_patch("gpu-1", 1);
        assert_eq!(patch["status"]["allocatable"]["nvidia.com/gpu"], "4");
        assert_eq!(patch["status"]["conditions"][3]["type"], "Ready");
        assert!(
            !FakeNodes::new("cpu")
                .gpus(0)
                .capacity
                .contains_key("nvidia.com/gpu")
        );
    }

    #[test]
    fn deletion_is_narrowed_to_fake_nodes() {
        assert_eq!(narrow_to_fake(""), "e2e.kai.dev/fake-node=true");
        assert_eq!(narrow_to_fake("a=b"), "a=b,e2e.kai.dev/fake-node=true");
        assert_eq!(narrow_to_fake(&owner_selector("x")), owner_selector("x"));
    }
}
