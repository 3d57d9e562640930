//! Binds a gang's claims before its pods, as kube-scheduler's volume binding does: a claim given an
//! existing volume gets it reserved through the volume's `spec.claimRef` (the PV controller then binds
//! the claim), a claim to be provisioned gets the node in its `volume.kubernetes.io/selected-node`
//! annotation (the provisioner then makes a volume there and the PV controller binds it). The gang's
//! pods are bound only once every claim of the gang is bound, at most [`CLAIM_BIND_TIMEOUT`] later; on
//! failure what the gang took is given back (where the claim is still unbound) and its pods go back to
//! pending with a `FailedBinding` event saying why; the loop holds the gang back before it tries again
//! (the back-off of a failed bind), with the reason in its status.
//!
//! Writes are conditional: a volume is read, checked to be unclaimed (or reserved for this claim
//! already) and patched with the resourceVersion read, so a concurrent change fails the write instead
//! of overwriting it. Pods without volumes never come here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use api::keys;
use scheduler_core::framework::decisions::Bind;
use scheduler_core::model::GroupKey;
use scheduler_core::model::volumes::{ClaimBinding, ClaimChoice, ClaimKey};

use super::{Applier, LOG_TARGET, ResultLabel};
use crate::loop_state::Feedback;

/// How long a gang's claims may take to be bound once reserved or given a node: the PV controller
/// binds a reserved volume within seconds, a provisioner takes longer (kube-scheduler waits up to
/// 10 minutes by default; a gang holds its nodes meanwhile, so this waits less and retries).
pub const CLAIM_BIND_TIMEOUT: Duration = Duration::from_secs(60);

/// First pause between reads of the claims still unbound; it doubles up to [`MAX_POLL_INTERVAL`].
const FIRST_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Longest pause between reads of the claims still unbound.
const MAX_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Why a gang's claims could not be bound.
#[derive(Debug, thiserror::Error)]
pub(super) enum VolumeBindError {
    /// This replica is no longer the leader.
    #[error("not the leader any more")]
    NotLeading,
    /// The chosen volume is gone.
    #[error("persistentvolume {volume} not found")]
    VolumeNotFound {
        /// Volume.
        volume: Arc<str>,
    },
    /// The chosen volume is being deleted.
    #[error("persistentvolume {volume} is being deleted")]
    VolumeDeleting {
        /// Volume.
        volume: Arc<str>,
    },
    /// The chosen volume was reserved for another claim meanwhile.
    #[error("persistentvolume {volume} is reserved for claim {holder}")]
    VolumeTaken {
        /// Volume.
        volume: Arc<str>,
        /// `namespace/name` of the claim it is reserved for.
        holder: String,
    },
    /// The claim is gone.
    #[error("claim {claim} not found")]
    ClaimNotFound {
        /// Claim.
        claim: ClaimKey,
    },
    /// The claim was deleted and made again under the same name.
    #[error("claim {claim} was replaced by a new one")]
    ClaimReplaced {
        /// Claim.
        claim: ClaimKey,
    },
    /// The claim is to be provisioned on another node already.
    #[error("claim {claim} is to be provisioned on node {selected}, not {node}")]
    OtherNodeSelected {
        /// Claim.
        claim: ClaimKey,
        /// The node its annotation names.
        selected: String,
        /// The node the gang was placed on.
        node: Arc<str>,
    },
    /// The provisioner gave the claim back (it removes the selected node when it cannot provision).
    #[error("claim {claim} could not be provisioned on node {node}")]
    ProvisioningRefused {
        /// Claim.
        claim: ClaimKey,
        /// Node.
        node: Arc<str>,
    },
    /// The claim did not become bound in time.
    #[error("claim {claim} not bound within {} s", CLAIM_BIND_TIMEOUT.as_secs())]
    Timeout {
        /// The first claim still unbound.
        claim: ClaimKey,
    },
    /// The API server refused a read or a write.
    #[error("{action} failed: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// Why it failed.
        #[source]
        source: kube::Error,
    },
}

impl VolumeBindError {
    /// The metric's `result` label.
    fn result(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            _ => "error",
        }
    }
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> VolumeBindError {
    let action = action.into();
    move |source| VolumeBindError::Api { action, source }
}

/// What the binder changed for one claim, to give back if the gang fails.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Taken {
    /// The volume's `claimRef` was set to the claim.
    Volume {
        /// Volume.
        volume: Arc<str>,
        /// Claim.
        claim: ClaimKey,
        /// Claim UID.
        claim_uid: Arc<str>,
    },
    /// The claim's selected-node annotation was set to the node.
    SelectedNode {
        /// Claim.
        claim: ClaimKey,
        /// Claim UID.
        claim_uid: Arc<str>,
        /// Node.
        node: Arc<str>,
    },
}

/// A cycle's binds split by how they are sent: `plain` binds go at once, as before volumes existed;
/// each of `with_claims` is a gang (or a pod outside any gang) with claims to bind first, in decision
/// order. A gang goes whole to one side: if any of its pods has claims to bind, none of its pods is
/// bound before them.
pub(super) fn split_by_claims(binds: Vec<Bind>) -> (Vec<Bind>, Vec<Vec<Bind>>) {
    if binds.iter().all(|b| b.volumes.is_empty()) {
        return (binds, Vec::new());
    }
    let gangs_with_claims: std::collections::HashSet<GroupKey> = binds
        .iter()
        .filter(|b| !b.volumes.is_empty())
        .filter_map(|b| b.group.clone())
        .collect();
    let mut plain = Vec::new();
    let mut with_claims: Vec<Vec<Bind>> = Vec::new();
    let mut position: HashMap<GroupKey, usize> = HashMap::new();
    for b in binds {
        match &b.group {
            Some(g) if gangs_with_claims.contains(g) => {
                let i = *position.entry(g.clone()).or_insert_with(|| {
                    with_claims.push(Vec::new());
                    with_claims.len() - 1
                });
                with_claims[i].push(b);
            }
            None if !b.volumes.is_empty() => with_claims.push(vec![b]),
            _ => plain.push(b),
        }
    }
    (plain, with_claims)
}

/// The claims of a gang's binds, each once (pods of a gang may share a claim).
fn distinct_claims(binds: &[Bind]) -> Vec<ClaimBinding> {
    let mut seen = std::collections::HashSet::new();
    binds
        .iter()
        .flat_map(|b| b.volumes.iter())
        .filter(|c| seen.insert(c.claim.clone()))
        .cloned()
        .collect()
}

/// Whether a claim is bound: it names its volume and the PV controller set its phase.
fn is_bound(pvc: &PersistentVolumeClaim) -> bool {
    let named = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty());
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    named && phase == Some("Bound")
}

fn has_volume_name(pvc: &PersistentVolumeClaim) -> bool {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
}

fn selected_node(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::SELECTED_NODE))
        .map(String::as_str)
}

/// The merge patch that reserves a volume for a claim, conditional on the resourceVersion read.
fn reserve_patch(resource_version: Option<&str>, claim: &ClaimKey, claim_uid: &str) -> Value {
    json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": { keys::BOUND_BY_CONTROLLER: "yes" },
        },
        "spec": { "claimRef": {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": claim.namespace.as_ref(),
            "name": claim.name.as_ref(),
            "uid": claim_uid,
        } },
    })
}

/// The merge patch that gives a reserved volume back, conditional on the resourceVersion read.
fn release_patch(resource_version: Option<&str>) -> Value {
    json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": { keys::BOUND_BY_CONTROLLER: null },
        },
        "spec": { "claimRef": null },
    })
}

/// The merge patch that sets (or, with `None`, removes) a claim's selected node, conditional on the
/// resourceVersion read.
fn selected_node_patch(resource_version: Option<&str>, node: Option<&str>) -> Value {
    json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": { keys::SELECTED_NODE: node },
        },
    })
}

impl Applier {
    /// Binds a gang's claims, then its pods; on failure gives back what it took and sends every pod
    /// of the gang back to pending.
    pub(super) async fn bind_with_claims(self: Arc<Self>, binds: Vec<Bind>) {
        let claims = distinct_claims(&binds);
        let gang = binds
            .first()
            .map(|b| match &b.group {
                Some(g) => g.to_string(),
                None => format!("{}/{}", b.namespace, b.name),
            })
            .unwrap_or_default();
        match self.bind_claims(&claims).await {
            Ok(()) => {
                self.metrics
                    .claim_bindings
                    .get_or_create(&ResultLabel { result: "ok" })
                    .inc();
                info!(target: LOG_TARGET, gang = %gang, claims = claims.len(), pods = binds.len(), "claims bound; binding the pods");
                self.queue_binds(binds);
            }
            Err(why) if matches!(why, VolumeBindError::NotLeading) || !self.leading() => {
                // Deposed (a write the fence refused fails the same way): the new leader decides
                // again; no back-off, no event.
                debug!(target: LOG_TARGET, gang = %gang, error = %why, "not the leader any more; the gang's binds are dropped");
                for b in &binds {
                    let _ = self.feedback.send(Feedback::BindDropped { uid: b.uid.clone() });
                }
            }
            Err(why) => {
                self.metrics
                    .claim_bindings
                    .get_or_create(&ResultLabel { result: why.result() })
                    .inc();
                warn!(target: LOG_TARGET, gang = %gang, error = %why, "binding claims failed; the gang's pods go back to pending");
                let failed = AtomicBool::new(true);
                let message = format!("binding volumes failed: {why}");
                join_all(
                    binds
                        .iter()
                        .map(|b| self.bind_failed(b, &failed, message.clone())),
                )
                .await;
            }
        }
    }

    /// Reserves a volume or selects a node for each claim, then waits until all are bound; on failure
    /// gives back what this call took.
    async fn bind_claims(&self, claims: &[ClaimBinding]) -> Result<(), VolumeBindError> {
        if !self.leading() {
            return Err(VolumeBindError::NotLeading);
        }
        let results = join_all(claims.iter().map(|c| self.take(c))).await;
        let mut taken = Vec::new();
        let mut first_error = None;
        for r in results {
            match r {
                Ok(t) => taken.extend(t),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let result = match first_error {
            Some(e) => Err(e),
            None => self.wait_bound(claims).await,
        };
        if result.is_err() && !taken.is_empty() && self.leading() {
            join_all(taken.iter().map(|t| self.give_back(t))).await;
        }
        result
    }

    /// One claim's reservation or node selection; `None` when nothing had to change.
    async fn take(&self, c: &ClaimBinding) -> Result<Option<Taken>, VolumeBindError> {
        let Ok(_permit) = self.binds.acquire().await else {
            // Closed only when the applier goes away: the process is stopping.
            return Err(VolumeBindError::NotLeading);
        };
        match &c.choice {
            ClaimChoice::Volume(volume) => self.reserve_volume(c, volume).await,
            ClaimChoice::Provision(node) => self.select_node(c, node).await,
        }
    }

    /// Sets the volume's `claimRef` to the claim, unless it is reserved for the claim already.
    async fn reserve_volume(
        &self,
        c: &ClaimBinding,
        volume: &Arc<str>,
    ) -> Result<Option<Taken>, VolumeBindError> {
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = volumes
            .get_opt(volume)
            .await
            .map_err(api_error(format!("reading persistentvolume {volume}")))?
            .ok_or_else(|| VolumeBindError::VolumeNotFound {
                volume: volume.clone(),
            })?;
        if pv.metadata.deletion_timestamp.is_some() {
            return Err(VolumeBindError::VolumeDeleting {
                volume: volume.clone(),
            });
        }
        if let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            let same_claim = r.namespace.as_deref() == Some(&*c.claim.namespace)
                && r.name.as_deref() == Some(&*c.claim.name);
            let uid = r.uid.as_deref().unwrap_or_default();
            // Reserved for this claim already (by an earlier attempt, or by its user by name, which the
            // PV controller completes by itself): nothing to write.
            if same_claim && (uid.is_empty() || uid == &*c.claim_uid) {
                return Ok(None);
            }
            return Err(VolumeBindError::VolumeTaken {
                volume: volume.clone(),
                holder: format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or_default(),
                    r.name.as_deref().unwrap_or_default()
                ),
            });
        }
        let patch = reserve_patch(pv.metadata.resource_version.as_deref(), &c.claim, &c.claim_uid);
        volumes
            .patch(volume, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error(format!(
                "reserving persistentvolume {volume} for claim {}",
                c.claim
            )))?;
        info!(target: LOG_TARGET, claim = %c.claim, volume = %volume, "volume reserved for claim");
        Ok(Some(Taken::Volume {
            volume: volume.clone(),
            claim: c.claim.clone(),
            claim_uid: c.claim_uid.clone(),
        }))
    }

    /// Sets the claim's selected node, unless it is set to that node already or the claim is bound.
    async fn select_node(&self, c: &ClaimBinding, node: &Arc<str>) -> Result<Option<Taken>, VolumeBindError> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &c.claim.namespace);
        let pvc = self.read_claim(&claims, c).await?;
        if has_volume_name(&pvc) {
            return Ok(None);
        }
        match selected_node(&pvc) {
            Some(n) if n == &**node => return Ok(None),
            Some(n) => {
                return Err(VolumeBindError::OtherNodeSelected {
                    claim: c.claim.clone(),
                    selected: n.to_owned(),
                    node: node.clone(),
                });
            }
            None => {}
        }
        let patch = selected_node_patch(pvc.metadata.resource_version.as_deref(), Some(node));
        claims
            .patch(&c.claim.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error(format!("selecting node {node} for claim {}", c.claim)))?;
        info!(target: LOG_TARGET, claim = %c.claim, node = %node, "node selected for provisioning");
        Ok(Some(Taken::SelectedNode {
            claim: c.claim.clone(),
            claim_uid: c.claim_uid.clone(),
            node: node.clone(),
        }))
    }

    /// The claim, checked to be the one the decision was about.
    async fn read_claim(
        &self,
        claims: &Api<PersistentVolumeClaim>,
        c: &ClaimBinding,
    ) -> Result<PersistentVolumeClaim, VolumeBindError> {
        let pvc = claims
            .get_opt(&c.claim.name)
            .await
            .map_err(api_error(format!("reading claim {}", c.claim)))?
            .ok_or_else(|| VolumeBindError::ClaimNotFound {
                claim: c.claim.clone(),
            })?;
        if pvc.metadata.uid.as_deref() != Some(&*c.claim_uid) {
            return Err(VolumeBindError::ClaimReplaced {
                claim: c.claim.clone(),
            });
        }
        Ok(pvc)
    }

    /// Reads the claims until all are bound, pausing longer each time, at most [`CLAIM_BIND_TIMEOUT`].
    /// A read that fails is tried again at the next round.
    async fn wait_bound(&self, claims: &[ClaimBinding]) -> Result<(), VolumeBindError> {
        let deadline = tokio::time::Instant::now() + CLAIM_BIND_TIMEOUT;
        let mut pending: Vec<&ClaimBinding> = claims.iter().collect();
        let mut pause = FIRST_POLL_INTERVAL;
        loop {
            let reads = join_all(pending.iter().map(|c| self.claim_bound(c))).await;
            let mut still = Vec::with_capacity(pending.len());
            for (c, read) in pending.into_iter().zip(reads) {
                match read {
                    Ok(true) => {}
                    Ok(false) => still.push(c),
                    Err(VolumeBindError::Api { action, source }) => {
                        warn!(target: LOG_TARGET, claim = %c.claim, error = %source, "{action} failed; reading again");
                        still.push(c);
                    }
                    Err(e) => return Err(e),
                }
            }
            pending = still;
            let Some(first) = pending.first() else {
                return Ok(());
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(VolumeBindError::Timeout {
                    claim: first.claim.clone(),
                });
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(MAX_POLL_INTERVAL);
            if !self.leading() {
                return Err(VolumeBindError::NotLeading);
            }
        }
    }

    /// Whether one claim is bound; a claim whose provisioner gave its node back fails.
    async fn claim_bound(&self, c: &ClaimBinding) -> Result<bool, VolumeBindError> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &c.claim.namespace);
        let pvc = self.read_claim(&claims, c).await?;
        if is_bound(&pvc) {
            return Ok(true);
        }
        if let ClaimChoice::Provision(node) = &c.choice
            && !has_volume_name(&pvc)
            && selected_node(&pvc).is_none()
        {
            return Err(VolumeBindError::ProvisioningRefused {
                claim: c.claim.clone(),
                node: node.clone(),
            });
        }
        Ok(false)
    }

    /// Gives back what [`Self::take`] changed, while the claim is still unbound: the volume's
    /// `claimRef` (unless the PV controller is binding them already), the claim's selected node.
    /// Failures are logged: the claim then keeps its choice, as kube-scheduler leaves it.
    async fn give_back(&self, taken: &Taken) {
        let result = match taken {
            Taken::Volume {
                volume,
                claim,
                claim_uid,
            } => self.release_volume(volume, claim, claim_uid).await,
            Taken::SelectedNode {
                claim,
                claim_uid,
                node,
            } => self.unselect_node(claim, claim_uid, node).await,
        };
        if let Err(e) = result {
            warn!(target: LOG_TARGET, ?taken, error = %e, "giving back a failed gang's claim choice failed");
        }
    }

    async fn release_volume(
        &self,
        volume: &Arc<str>,
        claim: &ClaimKey,
        claim_uid: &Arc<str>,
    ) -> Result<(), VolumeBindError> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let pvc = claims
            .get_opt(&claim.name)
            .await
            .map_err(api_error(format!("reading claim {claim}")))?;
        if pvc
            .as_ref()
            .is_some_and(|p| p.metadata.uid.as_deref() == Some(&**claim_uid) && has_volume_name(p))
        {
            return Ok(());
        }
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let Some(pv) = volumes
            .get_opt(volume)
            .await
            .map_err(api_error(format!("reading persistentvolume {volume}")))?
        else {
            return Ok(());
        };
        let ours = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_some_and(|r| r.uid.as_deref() == Some(&**claim_uid));
        let binding = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        if !ours || binding {
            return Ok(());
        }
        let patch = release_patch(pv.metadata.resource_version.as_deref());
        volumes
            .patch(volume, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error(format!("releasing persistentvolume {volume}")))?;
        info!(target: LOG_TARGET, claim = %claim, volume = %volume, "volume reservation given back");
        Ok(())
    }

    async fn unselect_node(
        &self,
        claim: &ClaimKey,
        claim_uid: &Arc<str>,
        node: &Arc<str>,
    ) -> Result<(), VolumeBindError> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let Some(pvc) = claims
            .get_opt(&claim.name)
            .await
            .map_err(api_error(format!("reading claim {claim}")))?
        else {
            return Ok(());
        };
        if pvc.metadata.uid.as_deref() != Some(&**claim_uid)
            || has_volume_name(&pvc)
            || selected_node(&pvc) != Some(&**node)
        {
            return Ok(());
        }
        let patch = selected_node_patch(pvc.metadata.resource_version.as_deref(), None);
        claims
            .patch(&claim.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error(format!("removing the selected node of claim {claim}")))?;
        info!(target: LOG_TARGET, claim = %claim, node = %node, "selected node given back");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::model::{GpuRequest, GroupKind};

    /// The binder against a fake API server holding PersistentVolumes and claims, in paused time.
    mod against_a_fake_api {
        use std::collections::HashMap;
        use std::sync::Mutex;

        use http::{Method, StatusCode};
        use scheduler_core::config::GpuSharingArgs;
        use tokio::sync::mpsc;

        use super::super::super::test_api;
        use super::*;

        /// Objects by path; GET, merge PATCH (refused with 409 when the resourceVersion it carries is
        /// not the object's), and `react` after each PATCH (the PV controller's part).
        struct FakeApi {
            objects: Mutex<HashMap<String, Value>>,
            /// (method, path, body) of every request, in order.
            log: Mutex<Vec<(Method, String, Value)>>,
            react: fn(&mut HashMap<String, Value>),
        }

        fn pv_path(name: &str) -> String {
            format!("/api/v1/persistentvolumes/{name}")
        }

        fn pvc_path(name: &str) -> String {
            format!("/api/v1/namespaces/ml/persistentvolumeclaims/{name}")
        }

        fn free_volume(name: &str) -> Value {
            json!({ "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": { "name": name, "resourceVersion": "1" },
                "spec": { "capacity": { "storage": "1Gi" } },
                "status": { "phase": "Available" } })
        }

        fn unbound_claim(name: &str) -> Value {
            json!({ "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": { "name": name, "namespace": "ml", "uid": format!("uid-{name}"), "resourceVersion": "1" },
                "spec": {}, "status": { "phase": "Pending" } })
        }

        /// RFC 7386: objects merge, `null` removes, anything else replaces.
        fn merge(target: &mut Value, patch: &Value) {
            let Value::Object(fields) = patch else {
                *target = patch.clone();
                return;
            };
            if !target.is_object() {
                *target = json!({});
            }
            let object = target.as_object_mut().expect("an object");
            for (k, v) in fields {
                if v.is_null() {
                    object.remove(k);
                } else {
                    merge(object.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }

        impl FakeApi {
            fn answer(&self, method: &Method, path: &str, body: &Value) -> (StatusCode, Value) {
                let mut objects = self.objects.lock().expect("objects");
                let Some(object) = objects.get_mut(path) else {
                    let status = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found" });
                    return (StatusCode::NOT_FOUND, status);
                };
                match *method {
                    Method::GET => (StatusCode::OK, object.clone()),
                    Method::PATCH => {
                        let version = object["metadata"]["resourceVersion"].clone();
                        let wanted = &body["metadata"]["resourceVersion"];
                        if !wanted.is_null() && *wanted != version {
                            let status = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "reason": "Conflict", "code": 409, "message": "changed" });
                            return (StatusCode::CONFLICT, status);
                        }
                        merge(object, body);
                        let next: u64 = version.as_str().and_then(|v| v.parse().ok()).unwrap_or(0) + 1;
                        object["metadata"]["resourceVersion"] = json!(next.to_string());
                        let answer = object.clone();
                        (self.react)(&mut objects);
                        (StatusCode::OK, answer)
                    }
                    // Binds and events: accepted, nothing kept.
                    _ => (StatusCode::CREATED, json!({})),
                }
            }

            fn patches(&self) -> Vec<(String, Value)> {
                let log = self.log.lock().expect("log");
                log.iter()
                    .filter(|(m, _, _)| *m == Method::PATCH)
                    .map(|(_, p, b)| (p.clone(), b.clone()))
                    .collect()
            }

            fn object(&self, path: &str) -> Value {
                self.objects.lock().expect("objects")[path].clone()
            }
        }

        /// An applier as `main.rs` builds it, whose client talks to `objects`.
        fn applier(
            objects: Vec<(String, Value)>,
            react: fn(&mut HashMap<String, Value>),
        ) -> (Arc<Applier>, Arc<FakeApi>, mpsc::UnboundedReceiver<Feedback>) {
            let fake = Arc::new(FakeApi {
                objects: Mutex::new(objects.into_iter().collect()),
                log: Mutex::new(Vec::new()),
                react,
            });
            let server = Arc::clone(&fake);
            let (applier, _log, feedback) = test_api::applier(4, GpuSharingArgs::default(), move |seen| {
                let answer = server.answer(&seen.method, &seen.path, &seen.body);
                server.log.lock().expect("log").push((
                    seen.method.clone(),
                    seen.path.clone(),
                    seen.body.clone(),
                ));
                answer
            });
            (Arc::new(applier), fake, feedback)
        }

        fn choice(claim: &str, choice: ClaimChoice) -> ClaimBinding {
            ClaimBinding {
                claim: ClaimKey {
                    namespace: "ml".into(),
                    name: claim.into(),
                },
                claim_uid: format!("uid-{claim}").into(),
                choice,
            }
        }

        fn gang_bind(name: &str, claims: Vec<ClaimBinding>) -> Bind {
            Bind {
                volumes: claims,
                ..bind(name, Some("g"), &[])
            }
        }

        /// The PV controller and a provisioner: a volume reserved for a claim, or a claim given a
        /// node, ends bound.
        fn bind_what_was_chosen(objects: &mut HashMap<String, Value>) {
            let reserved: Vec<(String, String)> = objects
                .values()
                .filter(|o| o["kind"] == "PersistentVolume")
                .filter_map(|v| {
                    let claim = v["spec"]["claimRef"]["name"].as_str()?;
                    Some((claim.to_owned(), v["metadata"]["name"].as_str()?.to_owned()))
                })
                .collect();
            for (claim, volume) in reserved {
                if let Some(c) = objects.get_mut(&pvc_path(&claim)) {
                    c["spec"]["volumeName"] = json!(volume);
                    c["status"]["phase"] = json!("Bound");
                }
            }
            for c in objects
                .values_mut()
                .filter(|o| o["kind"] == "PersistentVolumeClaim")
            {
                if !c["metadata"]["annotations"][keys::SELECTED_NODE].is_null() {
                    c["spec"]["volumeName"] = json!("pv-provisioned");
                    c["status"]["phase"] = json!("Bound");
                }
            }
        }

        #[tokio::test(start_paused = true)]
        async fn a_gangs_claims_are_bound_before_any_of_its_pods() {
            let (applier, fake, _feedback) = applier(
                vec![
                    (pv_path("pv-0"), free_volume("pv-0")),
                    (pvc_path("data-0"), unbound_claim("data-0")),
                    (pvc_path("data-1"), unbound_claim("data-1")),
                ],
                bind_what_was_chosen,
            );
            let binds = vec![
                gang_bind("w-0", vec![choice("data-0", ClaimChoice::Volume("pv-0".into()))]),
                gang_bind("w-1", vec![choice("data-1", ClaimChoice::Provision("n1".into()))]),
            ];
            Arc::clone(&applier).bind_with_claims(binds).await;
            // The pods' binds run as tasks of their own.
            tokio::time::sleep(Duration::from_secs(1)).await;

            // Written concurrently: in either order.
            let patches: HashMap<String, Value> = fake.patches().into_iter().collect();
            assert_eq!(patches.len(), 2, "{patches:?}");
            let claim = ClaimKey {
                namespace: "ml".into(),
                name: "data-0".into(),
            };
            assert_eq!(
                patches.get(&pv_path("pv-0")),
                Some(&reserve_patch(Some("1"), &claim, "uid-data-0"))
            );
            assert_eq!(
                patches.get(&pvc_path("data-1")),
                Some(&selected_node_patch(Some("1"), Some("n1")))
            );

            let log = fake.log.lock().expect("log").clone();
            let last_patch = log
                .iter()
                .rposition(|(m, _, _)| *m == Method::PATCH)
                .expect("patches");
            let binds: Vec<usize> = log
                .iter()
                .enumerate()
                .filter(|(_, (m, p, _))| *m == Method::POST && p.ends_with("/binding"))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(binds.len(), 2, "both pods bound: {log:?}");
            assert!(
                binds.iter().all(|i| *i > last_patch),
                "pods bound after their claims: {log:?}"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn claims_not_bound_in_time_are_given_back() {
            // No PV controller: nothing ever binds.
            let (applier, fake, _feedback) = applier(
                vec![
                    (pv_path("pv-0"), free_volume("pv-0")),
                    (pvc_path("data-0"), unbound_claim("data-0")),
                    (pvc_path("data-1"), unbound_claim("data-1")),
                ],
                |_| {},
            );
            let claims = [
                choice("data-0", ClaimChoice::Volume("pv-0".into())),
                choice("data-1", ClaimChoice::Provision("n1".into())),
            ];
            let started = tokio::time::Instant::now();
            let error = applier.bind_claims(&claims).await.expect_err("never bound");
            assert_eq!(error.to_string(), "claim ml/data-0 not bound within 60 s");
            assert_eq!(error.result(), "timeout");
            assert!(started.elapsed() >= CLAIM_BIND_TIMEOUT);
            // Both choices were written, then given back: the volume is free, the claim has no node.
            assert_eq!(fake.patches().len(), 4, "{:?}", fake.patches());
            let volume = fake.object(&pv_path("pv-0"));
            assert!(volume["spec"]["claimRef"].is_null(), "{volume}");
            assert!(
                volume["metadata"]["annotations"][keys::BOUND_BY_CONTROLLER].is_null(),
                "{volume}"
            );
            let claim = fake.object(&pvc_path("data-1"));
            assert!(
                claim["metadata"]["annotations"][keys::SELECTED_NODE].is_null(),
                "{claim}"
            );
        }

        #[tokio::test(start_paused = true)]
        async fn a_volume_taken_meanwhile_fails_the_gang_and_frees_what_it_took() {
            let mut taken = free_volume("pv-1");
            taken["spec"]["claimRef"] = json!({ "namespace": "ml", "name": "other", "uid": "uid-other" });
            let (applier, fake, mut feedback) = applier(
                vec![
                    (pv_path("pv-0"), free_volume("pv-0")),
                    (pv_path("pv-1"), taken.clone()),
                    (pvc_path("data-0"), unbound_claim("data-0")),
                    (pvc_path("data-1"), unbound_claim("data-1")),
                ],
                |_| {},
            );
            let binds = vec![
                gang_bind("w-0", vec![choice("data-0", ClaimChoice::Volume("pv-0".into()))]),
                gang_bind("w-1", vec![choice("data-1", ClaimChoice::Volume("pv-1".into()))]),
            ];
            Arc::clone(&applier).bind_with_claims(binds).await;

            assert!(
                fake.object(&pv_path("pv-0"))["spec"]["claimRef"].is_null(),
                "pv-0 given back"
            );
            assert_eq!(
                fake.object(&pv_path("pv-1")),
                taken,
                "the other claim's volume untouched"
            );
            let log = fake.log.lock().expect("log").clone();
            assert!(
                !log.iter().any(|(_, p, _)| p.ends_with("/binding")),
                "no pod of the gang bound: {log:?}"
            );
            let mut failed = Vec::new();
            while let Ok(Feedback::BindFailed { uid, reason }) = feedback.try_recv() {
                assert_eq!(
                    &*reason,
                    "binding volumes failed: persistentvolume pv-1 is reserved for claim ml/other"
                );
                failed.push(uid.to_string());
            }
            failed.sort();
            assert_eq!(failed, ["uid-w-0", "uid-w-1"]);
        }

        #[tokio::test(start_paused = true)]
        async fn a_claim_already_reserved_or_given_the_node_is_not_written_again() {
            let mut reserved = free_volume("pv-0");
            reserved["spec"]["claimRef"] = json!({ "namespace": "ml", "name": "data-0" });
            let mut selected = unbound_claim("data-1");
            selected["metadata"]["annotations"] = json!({ keys::SELECTED_NODE: "n1" });
            let (applier, fake, _feedback) = applier(
                vec![
                    (pv_path("pv-0"), reserved),
                    (pvc_path("data-0"), unbound_claim("data-0")),
                    (pvc_path("data-1"), selected),
                ],
                |_| {},
            );
            let claims = [
                choice("data-0", ClaimChoice::Volume("pv-0".into())),
                choice("data-1", ClaimChoice::Provision("n1".into())),
            ];
            let taken = join_all(claims.iter().map(|c| applier.take(c))).await;
            assert!(taken.iter().all(|t| matches!(t, Ok(None))), "{taken:?}");
            assert!(fake.patches().is_empty());
            // Given to another node: refused.
            let error = applier
                .take(&choice("data-1", ClaimChoice::Provision("n2".into())))
                .await
                .expect_err("another node was selected");
            assert_eq!(
                error.to_string(),
                "claim ml/data-1 is to be provisioned on node n1, not n2"
            );
        }
    }

    fn bind(name: &str, group: Option<&str>, claims: &[&str]) -> Bind {
        Bind {
            uid: format!("uid-{name}").into(),
            namespace: "ml".into(),
            name: name.into(),
            node: "n1".into(),
            gpu_groups: Vec::new(),
            devices: Vec::new(),
            gpu: GpuRequest::None,
            gpu_memory_mib: None,
            group: group.map(|g| GroupKey {
                kind: GroupKind::Kai,
                namespace: "ml".into(),
                name: g.into(),
            }),
            name_group_on_pod: false,
            volumes: claims
                .iter()
                .map(|c| ClaimBinding {
                    claim: ClaimKey {
                        namespace: "ml".into(),
                        name: (*c).into(),
                    },
                    claim_uid: format!("uid-{c}").into(),
                    choice: ClaimChoice::Provision("n1".into()),
                })
                .collect(),
        }
    }

    fn names(binds: &[Bind]) -> Vec<&str> {
        binds.iter().map(|b| &*b.name).collect()
    }

    #[test]
    fn a_gang_with_any_claim_to_bind_waits_whole_and_other_binds_go_at_once() {
        let binds = vec![
            bind("a-0", Some("a"), &[]),
            bind("plain-0", Some("plain"), &[]),
            bind("a-1", Some("a"), &["data-a-1"]),
            bind("lone", None, &[]),
            bind("lone-with-claim", None, &["scratch"]),
            bind("b-0", Some("b"), &["data-b-0"]),
            bind("plain-1", Some("plain"), &[]),
            bind("a-2", Some("a"), &[]),
        ];
        let (plain, with_claims) = split_by_claims(binds);
        assert_eq!(names(&plain), ["plain-0", "lone", "plain-1"]);
        let units: Vec<Vec<&str>> = with_claims.iter().map(|u| names(u)).collect();
        assert_eq!(
            units,
            [vec!["a-0", "a-1", "a-2"], vec!["lone-with-claim"], vec!["b-0"]]
        );
    }

    #[test]
    fn binds_without_claims_all_go_at_once() {
        let binds = vec![bind("x", Some("g"), &[]), bind("y", None, &[])];
        let (plain, with_claims) = split_by_claims(binds);
        assert_eq!(names(&plain), ["x", "y"]);
        assert!(with_claims.is_empty());
    }

    #[test]
    fn a_claim_shared_by_pods_of_a_gang_is_bound_once() {
        let binds = vec![
            bind("a-0", Some("a"), &["shared", "own-0"]),
            bind("a-1", Some("a"), &["shared", "own-1"]),
        ];
        let claims: Vec<String> = distinct_claims(&binds)
            .iter()
            .map(|c| c.claim.to_string())
            .collect();
        assert_eq!(claims, ["ml/shared", "ml/own-0", "ml/own-1"]);
    }

    #[test]
    fn patches_reserve_and_give_back_conditionally() {
        let claim = ClaimKey {
            namespace: "ml".into(),
            name: "data".into(),
        };
        assert_eq!(
            reserve_patch(Some("42"), &claim, "c1"),
            json!({
                "metadata": {
                    "resourceVersion": "42",
                    "annotations": { "pv.kubernetes.io/bound-by-controller": "yes" },
                },
                "spec": { "claimRef": {
                    "kind": "PersistentVolumeClaim", "apiVersion": "v1",
                    "namespace": "ml", "name": "data", "uid": "c1",
                } },
            })
        );
        assert_eq!(
            release_patch(Some("43")),
            json!({
                "metadata": {
                    "resourceVersion": "43",
                    "annotations": { "pv.kubernetes.io/bound-by-controller": null },
                },
                "spec": { "claimRef": null },
            })
        );
        assert_eq!(
            selected_node_patch(Some("7"), Some("n1")),
            json!({ "metadata": {
                "resourceVersion": "7",
                "annotations": { "volume.kubernetes.io/selected-node": "n1" },
            } })
        );
        assert_eq!(
            selected_node_patch(Some("8"), None)["metadata"]["annotations"],
            json!({ "volume.kubernetes.io/selected-node": null })
        );
    }

    #[test]
    fn a_claim_is_bound_once_named_and_marked_bound() {
        let pvc = |y: &str| -> PersistentVolumeClaim { serde_yaml::from_str(y).expect("yaml") };
        assert!(is_bound(&pvc(
            "metadata: {name: d}\nspec: {volumeName: pv}\nstatus: {phase: Bound}"
        )));
        // The PV controller writes the name first, then the phase.
        assert!(!is_bound(&pvc(
            "metadata: {name: d}\nspec: {volumeName: pv}\nstatus: {phase: Pending}"
        )));
        assert!(!is_bound(&pvc(
            "metadata: {name: d}\nspec: {}\nstatus: {phase: Pending}"
        )));
        let annotated =
            pvc("metadata: {name: d, annotations: {volume.kubernetes.io/selected-node: n1}}\nspec: {}");
        assert_eq!(selected_node(&annotated), Some("n1"));
    }
}
