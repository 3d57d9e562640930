//! Storage objects to model updates: PersistentVolumeClaims, PersistentVolumes, StorageClasses and
//! CSINodes, read the way kube-scheduler's volume plugins read them. Pure, like `convert`.
//!
//! The API server validates these objects, so little can be malformed; what cannot be read (a quantity
//! that is not one) is returned as a fault for the caller to log and read conservatively: a claim
//! whose request cannot be read fits no volume, a volume whose capacity cannot be read fits no claim.

use std::sync::Arc;

use api::{keys, quantity};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use scheduler_core::model::volumes::{
    AccessModes, ClaimKey, ClaimRef, ClaimUpdate, StorageClassUpdate, VolumeMode, VolumePhase, VolumeUpdate,
};

use super::convert::term_requirements;
use super::pod_rules;

/// The key of a claim object.
#[must_use]
pub fn claim_key(pvc: &PersistentVolumeClaim) -> ClaimKey {
    ClaimKey {
        namespace: pvc.metadata.namespace.as_deref().unwrap_or_default().into(),
        name: pvc.metadata.name.as_deref().unwrap_or_default().into(),
    }
}

/// What the scheduler reads from a PersistentVolumeClaim, and what it could not read.
#[must_use]
pub fn claim(pvc: &PersistentVolumeClaim) -> (ClaimUpdate, Vec<String>) {
    let meta = &pvc.metadata;
    let spec = pvc.spec.as_ref();
    let mut faults = Vec::new();
    let request = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    // Unreadable: asks for more than any volume has.
    let request_bytes = bytes(request, "storage request", &mut faults).unwrap_or(u64::MAX);
    let mut selector_problems = Vec::new();
    let selector = pod_rules::selector(spec.and_then(|s| s.selector.as_ref()), &mut selector_problems);
    faults.extend(selector_problems);
    let update = ClaimUpdate {
        key: claim_key(pvc),
        uid: meta.uid.as_deref().unwrap_or_default().into(),
        deleting: meta.deletion_timestamp.is_some(),
        volume_name: spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty())
            .map(Arc::from),
        class: class_of(meta, spec.and_then(|s| s.storage_class_name.as_deref())).map(Arc::from),
        request_bytes,
        access_modes: access_modes(spec.and_then(|s| s.access_modes.as_deref())),
        volume_mode: volume_mode(spec.and_then(|s| s.volume_mode.as_deref())),
        selector,
        selected_node: annotation(meta, keys::SELECTED_NODE).map(Arc::from),
        owner_uid: meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| Arc::from(o.uid.as_str())),
    };
    (update, faults)
}

/// What the scheduler reads from a PersistentVolume, and what it could not read.
#[must_use]
pub fn volume(pv: &PersistentVolume) -> (VolumeUpdate, Vec<String>) {
    let meta = &pv.metadata;
    let spec = pv.spec.as_ref();
    let mut faults = Vec::new();
    let capacity = spec
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    // Unreadable: holds nothing any claim asks for.
    let capacity_bytes = bytes(capacity, "capacity", &mut faults).unwrap_or(0);
    let claim_ref = spec.and_then(|s| s.claim_ref.as_ref()).and_then(|r| {
        let name = r.name.as_deref().filter(|n| !n.is_empty())?;
        Some(ClaimRef {
            key: ClaimKey {
                namespace: r.namespace.as_deref().unwrap_or_default().into(),
                name: name.into(),
            },
            uid: r.uid.as_deref().filter(|u| !u.is_empty()).map(Arc::from),
        })
    });
    let node_affinity = spec
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|required| {
            // A term without requirements matches no node (kube's node selector terms), so it adds
            // nothing to the OR; a volume left with no term fits no node.
            required
                .node_selector_terms
                .iter()
                .map(term_requirements)
                .filter(|term| !term.is_empty())
                .collect()
        });
    let update = VolumeUpdate {
        name: meta.name.as_deref().unwrap_or_default().into(),
        claim_ref,
        phase: volume_phase(pv.status.as_ref().and_then(|s| s.phase.as_deref())),
        deleting: meta.deletion_timestamp.is_some(),
        class: class_of(meta, spec.and_then(|s| s.storage_class_name.as_deref()))
            .unwrap_or_default()
            .into(),
        capacity_bytes,
        access_modes: access_modes(spec.and_then(|s| s.access_modes.as_deref())),
        volume_mode: volume_mode(spec.and_then(|s| s.volume_mode.as_deref())),
        labels: meta.labels.clone().unwrap_or_default(),
        node_affinity,
        csi: spec
            .and_then(|s| s.csi.as_ref())
            .map(|c| (Arc::from(c.driver.as_str()), Arc::from(c.volume_handle.as_str()))),
    };
    (update, faults)
}

/// What the scheduler reads from a StorageClass.
#[must_use]
pub fn storage_class(sc: &StorageClass) -> StorageClassUpdate {
    StorageClassUpdate {
        name: sc.metadata.name.as_deref().unwrap_or_default().into(),
        provisioner: sc.provisioner.as_str().into(),
        wait_for_first_consumer: sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
        allowed_topologies: sc
            .allowed_topologies
            .iter()
            .flatten()
            .map(|term| {
                term.match_label_expressions
                    .iter()
                    .flatten()
                    .map(|e| (e.key.clone(), e.values.clone()))
                    .collect()
            })
            .collect(),
    }
}

/// A node's CSI attach limits from its CSINode (named after the node): drivers that report a count.
#[must_use]
pub fn attach_limits(csi_node: &CSINode) -> (Arc<str>, Vec<(Arc<str>, u32)>) {
    let node = csi_node.metadata.name.as_deref().unwrap_or_default().into();
    let limits = csi_node
        .spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            // A negative count is refused by the API server; read as no room at all.
            Some((Arc::from(d.name.as_str()), u32::try_from(count).unwrap_or(0)))
        })
        .collect();
    (node, limits)
}

/// The storage class of a claim or volume: the deprecated beta annotation wins over the field, as in
/// Kubernetes' own helpers.
fn class_of<'a>(meta: &'a ObjectMeta, field: Option<&'a str>) -> Option<&'a str> {
    annotation(meta, keys::BETA_STORAGE_CLASS).or(field)
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn access_modes(modes: Option<&[String]>) -> AccessModes {
    AccessModes::parse(modes.unwrap_or_default().iter().map(String::as_str))
}

fn volume_mode(mode: Option<&str>) -> VolumeMode {
    match mode {
        Some("Block") => VolumeMode::Block,
        _ => VolumeMode::Filesystem,
    }
}

/// `status.phase`; a volume the PV controller has not looked at yet is `Pending`, as the API server
/// defaults it.
fn volume_phase(phase: Option<&str>) -> VolumePhase {
    match phase {
        Some("Available") => VolumePhase::Available,
        Some("Bound") => VolumePhase::Bound,
        Some("Released") => VolumePhase::Released,
        Some("Failed") => VolumePhase::Failed,
        _ => VolumePhase::Pending,
    }
}

/// A storage quantity in bytes (absent is 0); `None` with a fault when it cannot be read.
fn bytes(q: Option<&Quantity>, what: &str, faults: &mut Vec<String>) -> Option<u64> {
    let Some(q) = q else {
        return Some(0);
    };
    match quantity::value(&q.0).map(u64::try_from) {
        Ok(Ok(v)) => Some(v),
        Ok(Err(_)) => {
            faults.push(format!("negative {what}: {}", q.0));
            None
        }
        Err(e) => {
            faults.push(format!("{what} {}: {e}", q.0));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::model::constraints::{Operator, Requirement};
    use scheduler_core::model::pod_rules::{LabelSelector, SelectorRequirement};

    fn yaml<T: serde::de::DeserializeOwned>(y: &str) -> T {
        serde_yaml::from_str(y).expect("yaml")
    }

    #[test]
    fn reads_a_claim_as_kube_scheduler_does() {
        let pvc: PersistentVolumeClaim = yaml(
            r#"
metadata:
  name: data
  namespace: ml
  uid: c1
  deletionTimestamp: "2026-01-01T00:00:00Z"
  annotations: {volume.kubernetes.io/selected-node: n3}
  ownerReferences:
  - {apiVersion: v1, kind: Pod, name: other, uid: p0}
  - {apiVersion: v1, kind: Pod, name: w-0, uid: p1, controller: true}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  volumeMode: Block
  resources: {requests: {storage: 10Gi}}
  selector:
    matchLabels: {disk: ssd}
    matchExpressions: [{key: rack, operator: In, values: [r1]}]
"#,
        );
        let (c, faults) = claim(&pvc);
        assert!(faults.is_empty(), "{faults:?}");
        assert_eq!(
            c,
            ClaimUpdate {
                key: ClaimKey {
                    namespace: "ml".into(),
                    name: "data".into()
                },
                uid: "c1".into(),
                deleting: true,
                volume_name: None,
                class: Some("local".into()),
                request_bytes: 10 << 30,
                access_modes: AccessModes::READ_WRITE_ONCE.with(AccessModes::READ_ONLY_MANY),
                volume_mode: VolumeMode::Block,
                selector: Some(LabelSelector::new(vec![
                    SelectorRequirement::equals("disk", "ssd"),
                    SelectorRequirement {
                        key: "rack".into(),
                        op: scheduler_core::model::pod_rules::SelectorOp::In(vec!["r1".into()]),
                    },
                ])),
                selected_node: Some("n3".into()),
                owner_uid: Some("p1".into()),
            }
        );
    }

    #[test]
    fn a_bound_claim_names_its_volume_and_the_beta_class_annotation_wins() {
        let pvc: PersistentVolumeClaim = yaml(
            r#"
metadata:
  name: data
  namespace: ml
  uid: c1
  annotations: {volume.beta.kubernetes.io/storage-class: old}
spec: {storageClassName: new, volumeName: pv-1, resources: {requests: {storage: 1500M}}}
status: {phase: Bound}
"#,
        );
        let (c, _) = claim(&pvc);
        assert_eq!(c.volume_name.as_deref(), Some("pv-1"));
        assert_eq!(c.class.as_deref(), Some("old"));
        assert_eq!(c.request_bytes, 1_500_000_000);
        assert_eq!(c.volume_mode, VolumeMode::Filesystem);
        assert!(!c.deleting && c.selector.is_none() && c.selected_node.is_none());
        // No class at all stays unset (not the empty class).
        let (c, _) = claim(&yaml("metadata: {name: x, namespace: ml}\nspec: {}"));
        assert_eq!(c.class, None);
        let (c, _) = claim(&yaml(
            "metadata: {name: x, namespace: ml}\nspec: {storageClassName: \"\"}",
        ));
        assert_eq!(c.class.as_deref(), Some(""));
    }

    #[test]
    fn an_unreadable_request_is_a_fault_and_fits_no_volume() {
        let (c, faults) = claim(&yaml(
            "metadata: {name: x, namespace: ml}\nspec: {resources: {requests: {storage: lots}}}",
        ));
        assert_eq!(c.request_bytes, u64::MAX);
        assert_eq!(faults.len(), 1, "{faults:?}");
        let (v, faults) = volume(&yaml("metadata: {name: pv}\nspec: {capacity: {storage: -1Gi}}"));
        assert_eq!(v.capacity_bytes, 0);
        assert_eq!(faults, ["negative capacity: -1Gi"]);
    }

    #[test]
    fn reads_a_local_volume_with_node_affinity_and_its_claim_reference() {
        let pv: PersistentVolume = yaml(
            r#"
metadata:
  name: pv-a
  labels: {topology.kubernetes.io/zone: a}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOncePod]
  storageClassName: local
  local: {path: /mnt/a}
  claimRef: {kind: PersistentVolumeClaim, apiVersion: v1, namespace: ml, name: data, uid: c1}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]
      - {}
      - matchFields: [{key: metadata.name, operator: In, values: [n2]}]
status: {phase: Bound}
"#,
        );
        let (v, faults) = volume(&pv);
        assert!(faults.is_empty());
        assert_eq!(
            v,
            VolumeUpdate {
                name: "pv-a".into(),
                claim_ref: Some(ClaimRef {
                    key: ClaimKey {
                        namespace: "ml".into(),
                        name: "data".into()
                    },
                    uid: Some("c1".into()),
                }),
                phase: VolumePhase::Bound,
                deleting: false,
                class: "local".into(),
                capacity_bytes: 100 << 30,
                access_modes: AccessModes::READ_WRITE_ONCE_POD,
                volume_mode: VolumeMode::Filesystem,
                labels: [("topology.kubernetes.io/zone".to_owned(), "a".to_owned())].into(),
                // The empty term matches no node: it is dropped from the OR.
                node_affinity: Some(vec![
                    vec![Requirement {
                        key: "kubernetes.io/hostname".into(),
                        field: false,
                        op: Operator::In(vec!["n1".into()]),
                    }],
                    vec![Requirement {
                        key: "metadata.name".into(),
                        field: true,
                        op: Operator::In(vec!["n2".into()]),
                    }],
                ]),
                csi: None,
            }
        );
    }

    #[test]
    fn reads_a_csi_volume_without_status_as_pending_and_unclaimed() {
        let pv: PersistentVolume = yaml(
            r#"
metadata:
  name: pv-b
  annotations: {volume.beta.kubernetes.io/storage-class: fast}
  deletionTimestamp: "2026-01-01T00:00:00Z"
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  volumeMode: Block
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}
  claimRef: {namespace: ml}
"#,
        );
        let (v, _) = volume(&pv);
        assert_eq!(v.phase, VolumePhase::Pending);
        assert_eq!(v.claim_ref, None, "a reference without a name reserves nothing");
        assert!(v.deleting);
        assert_eq!(&*v.class, "fast");
        assert_eq!(v.volume_mode, VolumeMode::Block);
        assert_eq!(v.node_affinity, None);
        assert_eq!(v.csi, Some((Arc::from("ebs.csi.aws.com"), Arc::from("vol-1"))));
        // Without a class the volume serves claims that ask for none.
        let (v, _) = volume(&yaml(
            "metadata: {name: pv-c}\nspec: {}\nstatus: {phase: Available}",
        ));
        assert_eq!(&*v.class, "");
        assert_eq!(v.phase, VolumePhase::Available);
    }

    #[test]
    fn reads_a_storage_class() {
        let sc: StorageClass = yaml(
            r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: zonal}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions:
  - {key: topology.kubernetes.io/zone, values: [a, b]}
  - {key: kubernetes.io/arch, values: [amd64]}
- matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [c]}]
"#,
        );
        assert_eq!(
            storage_class(&sc),
            StorageClassUpdate {
                name: "zonal".into(),
                provisioner: "ebs.csi.aws.com".into(),
                wait_for_first_consumer: true,
                allowed_topologies: vec![
                    vec![
                        ("topology.kubernetes.io/zone".into(), vec!["a".into(), "b".into()]),
                        ("kubernetes.io/arch".into(), vec!["amd64".into()]),
                    ],
                    vec![("topology.kubernetes.io/zone".into(), vec!["c".into()])],
                ],
            }
        );
        let immediate: StorageClass = yaml(
            "metadata: {name: now}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: Immediate",
        );
        let u = storage_class(&immediate);
        assert!(!u.wait_for_first_consumer && u.allowed_topologies.is_empty());
    }

    #[test]
    fn reads_attach_limits_of_drivers_that_report_a_count() {
        let csi: CSINode = yaml(
            r#"
metadata: {name: n1}
spec:
  drivers:
  - {name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 25}}
  - {name: nfs.csi.k8s.io, nodeID: n1}
  - {name: odd.example.com, nodeID: n1, allocatable: {}}
"#,
        );
        let (node, limits) = attach_limits(&csi);
        assert_eq!(&*node, "n1");
        assert_eq!(limits, vec![(Arc::from("ebs.csi.aws.com"), 25)]);
    }
}
