//! What a cluster needs before the project (or its tests) can run: CRDs, priority classes, default
//! queues, namespaces. Used by `cargo xtask cluster up` and by the test harness, so both install the same.
//!
//! Idempotent: everything is server-side applied. A CRD some other product already installed (Volcano's
//! PodGroup, KubeRay's RayCluster, ...) is left alone; only absent CRDs or CRDs this field manager
//! applied are written.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt as _};

use crate::apply::{FIELD_MANAGER, apply_typed};
use crate::connect::ServerVersion;

/// What an install did, for a one-line summary.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstallReport {
    /// CRDs applied.
    pub applied: Vec<String>,
    /// CRDs left alone because another product owns them.
    pub foreign: Vec<String>,
    /// Whether CEL rules were dropped because the server predates them (< 1.25).
    pub dropped_cel_rules: bool,
}

impl std::fmt::Display for InstallReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} CRDs applied", self.applied.len())?;
        if !self.foreign.is_empty() {
            write!(
                f,
                "; left alone (installed by another product): {}",
                self.foreign.join(", ")
            )?;
        }
        if self.dropped_cel_rules {
            write!(f, "; CEL rules dropped (server < 1.25)")?;
        }
        Ok(())
    }
}

/// A CRD file read from disk.
#[derive(Debug, Clone)]
pub struct CrdSource {
    /// The file.
    pub path: PathBuf,
    /// The definition.
    pub crd: CustomResourceDefinition,
}

/// Reads every `*.yaml` CRD under `dir`, recursively, in path order.
///
/// # Errors
/// When a file cannot be read or is not a CRD.
pub fn read_crds(dir: &Path) -> anyhow::Result<Vec<CrdSource>> {
    let mut files = Vec::new();
    collect_yaml(dir, &mut files).with_context(|| format!("listing {}", dir.display()))?;
    files.sort();
    let mut crds = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        for document in crate::apply::split_documents(&text)? {
            let crd: CustomResourceDefinition = serde_json::from_value(document)
                .with_context(|| format!("{} is not a CustomResourceDefinition", path.display()))?;
            crds.push(CrdSource {
                path: path.clone(),
                crd,
            });
        }
    }
    if crds.is_empty() {
        bail!("no CRDs found under {}", dir.display());
    }
    Ok(crds)
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_yaml(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    Ok(())
}

/// Installs the project's CRDs from `crds_dir`, the priority classes, the namespaces and the default
/// queues, waiting until every CRD is Established.
///
/// # Errors
/// When the server rejects an object or a CRD is not Established within 60 s.
pub async fn install_project(client: &Client, crds_dir: &Path) -> anyhow::Result<InstallReport> {
    let report = install_crds(client, &read_crds(crds_dir)?).await?;
    install_priority_classes(client).await?;
    for namespace in [api::keys::SYSTEM_NAMESPACE, api::keys::RESERVATION_NAMESPACE] {
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        apply_typed(client, &object).await?;
    }
    install_default_queues(client).await?;
    Ok(report)
}

/// Installs the third-party CRDs of `e2e/fixtures/crds/` (KubeRay, Kubeflow, JobSet, LWS, Grove, Run:ai)
/// where absent.
///
/// # Errors
/// When the server rejects one or it is not Established within 60 s.
pub async fn install_fixture_crds(client: &Client) -> anyhow::Result<InstallReport> {
    install_crds(client, &read_crds(&crate::paths::fixtures_dir().join("crds"))?).await
}

/// Applies CRDs that are absent or ours, then waits until all of them are Established.
///
/// # Errors
/// When the server rejects one or it is not Established within 60 s.
pub async fn install_crds(client: &Client, crds: &[CrdSource]) -> anyhow::Result<InstallReport> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    // CEL validation rules exist from 1.25; older servers reject the unknown schema field under
    // server-side apply, and the components report the same problems in status anyway.
    let keep_cel = ServerVersion::of(client).await.map_or(true, |v| v.at_least(25));
    let mut report = InstallReport {
        dropped_cel_rules: !keep_cel,
        ..InstallReport::default()
    };
    for source in crds {
        let name = source.crd.name_any();
        let existing = api
            .get_opt(&name)
            .await
            .with_context(|| format!("reading CRD {name}"))?;
        if existing.is_some_and(|crd| !is_ours(&crd)) {
            report.foreign.push(name);
            continue;
        }
        let mut crd = source.crd.clone();
        if !keep_cel {
            crd = strip_cel_rules(crd);
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying CRD {name} from {}", source.path.display()))?;
        report.applied.push(name);
    }
    for name in report.applied.iter().chain(&report.foreign) {
        wait_established(&api, name, Duration::from_secs(60)).await?;
    }
    Ok(report)
}

/// Whether this field manager applied the CRD (so updating it cannot break another product).
fn is_ours(crd: &CustomResourceDefinition) -> bool {
    crd.managed_fields()
        .iter()
        .any(|entry| entry.manager.as_deref() == Some(FIELD_MANAGER))
}

/// Removes `x-kubernetes-validations` everywhere in a CRD.
#[must_use]
pub fn strip_cel_rules(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.remove("x-kubernetes-validations");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("invariant: a CRD serializes to JSON");
    strip(&mut value);
    serde_json::from_value(value).expect("invariant: removing CEL rules keeps a valid CRD")
}

/// Waits until a CRD reports `Established=True`.
///
/// # Errors
/// When it does not within `timeout`; the error quotes its conditions.
pub async fn wait_established(
    api: &Api<CustomResourceDefinition>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let crd = api
            .get(name)
            .await
            .with_context(|| format!("reading CRD {name}"))?;
        let conditions = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        if conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let summary: Vec<String> = conditions
                .iter()
                .map(|c| format!("{}={} {}", c.type_, c.status, c.message.as_deref().unwrap_or("")))
                .collect();
            bail!(
                "CRD {name} not Established after {timeout:?}: {}",
                summary.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Applies the four priority classes of [`api::keys::PRIORITY_CLASSES`].
///
/// # Errors
/// When the server rejects one.
pub async fn install_priority_classes(client: &Client) -> anyhow::Result<()> {
    for (name, value) in api::keys::PRIORITY_CLASSES {
        let class = PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            value,
            global_default: Some(false),
            description: Some(format!("KAI priority class {name} ({value}).")),
            ..PriorityClass::default()
        };
        apply_typed(client, &class).await?;
    }
    Ok(())
}

/// The default queues KAI's chart installs: `default-parent-queue` and its child `default-queue`, both
/// with quota 0, no limit and over-quota weight 1 for cpu, gpu and memory.
#[must_use]
pub fn default_queues() -> [api::Queue; 2] {
    let share = api::ResourceQuota {
        quota: Some(0.0),
        limit: Some(-1.0),
        over_quota_weight: Some(1.0),
    };
    let resources = api::queue::QueueResources {
        cpu: Some(share),
        gpu: Some(share),
        memory: Some(share),
        extended: std::collections::BTreeMap::new(),
    };
    let parent = api::Queue::new(
        api::keys::DEFAULT_PARENT_QUEUE,
        api::QueueSpec {
            resources: Some(resources.clone()),
            ..api::QueueSpec::default()
        },
    );
    let leaf = api::Queue::new(
        api::keys::DEFAULT_QUEUE,
        api::QueueSpec {
            parent_queue: Some(api::keys::DEFAULT_PARENT_QUEUE.to_owned()),
            resources: Some(resources),
            ..api::QueueSpec::default()
        },
    );
    [parent, leaf]
}

/// Applies [`default_queues`].
///
/// # Errors
/// When the server rejects one (for example when the Queue CRD is missing).
pub async fn install_default_queues(client: &Client) -> anyhow::Result<()> {
    for queue in default_queues() {
        apply_typed(client, &queue).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_crds_parse() {
        let crds = read_crds(&crate::paths::crds_dir()).expect("crds/ parses");
        let names: Vec<String> = crds.iter().map(|c| c.crd.name_any()).collect();
        assert!(
            names.contains(&"podgroups.scheduling.run.ai".to_owned()),
            "{names:?}"
        );
        assert!(
            names.contains(&"podgroups.scheduling.volcano.sh".to_owned()),
            "{names:?}"
        );
    }

    #[test]
    fn the_fixture_crds_parse_and_preserve_unknown_fields() {
        let crds = read_crds(&crate::paths::fixtures_dir().join("crds")).expect("fixture CRDs parse");
        assert!(crds.len() >= 13, "{} fixture CRDs", crds.len());
        for source in crds {
            for version in &source.crd.spec.versions {
                let schema = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref());
                let spec = schema
                    .and_then(|s| s.properties.as_ref())
                    .and_then(|p| p.get("spec"));
                assert_eq!(
                    spec.and_then(|s| s.x_kubernetes_preserve_unknown_fields),
                    Some(true),
                    "{} {}",
                    source.path.display(),
                    version.name
                );
            }
        }
    }

    #[test]
    fn stripping_cel_rules_removes_every_rule() {
        let crd = api::podgroup::crd();
        assert!(
            serde_json::to_string(&crd)
                .expect("json")
                .contains("x-kubernetes-validations")
        );
        let stripped = strip_cel_rules(crd);
        assert!(
            !serde_json::to_string(&stripped)
                .expect("json")
                .contains("x-kubernetes-validations")
        );
    }

    #[test]
    fn default_queues_match_the_chart() {
        let [parent, leaf] = default_queues();
        assert_eq!(parent.name_any(), "default-parent-queue");
        assert_eq!(leaf.spec.parent_queue.as_deref(), Some("default-parent-queue"));
        let gpu = leaf
            .spec
            .resources
            .as_ref()
            .and_then(|r| r.gpu)
            .expect("gpu share");
        assert_eq!(
            (gpu.quota, gpu.limit, gpu.over_quota_weight),
            (Some(0.0), Some(-1.0), Some(1.0))
        );
    }
}
