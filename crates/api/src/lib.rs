//! CRD types and well-known keys shared by the podgrouper, the scheduler, the CLI and the tests.
//!
//! Owns: the `scheduling.run.ai` PodGroup (served as `v2alpha2` and `v2`) and Queue (`v2`), KAI's
//! `kai.scheduler` Topology, Volcano's `scheduling.volcano.sh` PodGroup, the label/annotation keys
//! ([`keys`]), pure parsers for quantities and GPU-sharing annotations ([`quantity`]) and for durations
//! written in flags and configuration files ([`duration`]).
//!
//! Must not: depend on tokio or a Kubernetes client, or do any I/O. `crds()` is the only source of the
//! YAML under `crds/` (written by `cargo xtask crds`).

pub mod duration;
pub mod keys;
pub mod podgroup;
pub mod quantity;
pub mod queue;
pub mod topology;
pub mod volcano;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use podgroup::{PodGroup, PodGroupPhase, PodGroupSpec, PodGroupStatus, Preemptibility, SubGroup};
pub use queue::{Queue, QueueSpec, QueueStatus, ResourceQuota};
pub use topology::{Topology, TopologySpec};
pub use volcano::PodGroup as VolcanoPodGroup;

/// A generated CRD and the file it is written to under `crds/`.
#[derive(Debug, Clone)]
pub struct CrdFile {
    /// Path relative to `crds/`.
    pub path: &'static str,
    /// The definition.
    pub crd: CustomResourceDefinition,
}

/// Every CRD the project installs. Volcano's PodGroup sits in its own folder because it is installed only
/// where Volcano itself is absent.
#[must_use]
pub fn crds() -> Vec<CrdFile> {
    vec![
        CrdFile {
            path: "podgroups.scheduling.run.ai.yaml",
            crd: podgroup::crd(),
        },
        CrdFile {
            path: "queues.scheduling.run.ai.yaml",
            crd: tidy(Queue::crd()),
        },
        CrdFile {
            path: "topologies.kai.scheduler.yaml",
            crd: tidy(Topology::crd()),
        },
        CrdFile {
            path: "volcano/podgroups.scheduling.volcano.sh.yaml",
            crd: tidy(VolcanoPodGroup::crd()),
        },
    ]
}

/// Drops the long upstream description that k8s-openapi attaches to every `Quantity` in a schema: it
/// would repeat a page of text for each resource map and bloat every CRD and `kubectl explain`.
fn tidy(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                let is_quantity =
                    map.get("x-kubernetes-int-or-string") == Some(&serde_json::Value::Bool(true));
                if is_quantity {
                    map.remove("description");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("invariant: a CRD serializes to JSON");
    strip(&mut value);
    serde_json::from_value(value).expect("invariant: stripping descriptions keeps a valid CRD")
}
