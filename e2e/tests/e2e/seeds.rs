//! Every seed manifest applies unchanged with the project's kubectl, and the PodGroups read back with the
//! fields the seeds wrote (v2 objects through v2alpha2 too).
//!
//! Namespaced objects go into the test's namespace (`ml-training` is replaced by it). Cluster-scoped
//! objects (queues, a ClusterTrainingRuntime) are applied as written and deleted afterwards when this
//! test created them.

use std::path::PathBuf;

use e2e::TestEnv;
use e2e::apply::{Applier, gvk_of, split_documents};
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::discovery::Scope;

fn seed_files() -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(e2e::paths::fixtures_dir().join("seeds"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    Ok(files)
}

/// Every key of `expected` has the same value in `actual` (recursively for objects).
fn assert_subset(expected: &serde_json::Value, actual: &serde_json::Value, context: &str) {
    match (expected, actual) {
        (serde_json::Value::Object(expected), serde_json::Value::Object(actual)) => {
            for (key, value) in expected {
                let found = actual
                    .get(key)
                    .unwrap_or_else(|| panic!("{context}: {key} missing in {actual:?}"));
                assert_subset(value, found, &format!("{context}.{key}"));
            }
        }
        _ => assert_eq!(expected, actual, "{context}"),
    }
}

#[tokio::test]
async fn every_seed_applies_with_kubectl_and_reads_back() -> anyhow::Result<()> {
    let t = TestEnv::start("seeds-apply").await?;
    t.install_fixture_crds().await?;
    let kubectl = t.kubectl()?;
    let mut applier = Applier::new(t.client().clone());
    let mut created_cluster_objects = Vec::new();
    let mut podgroups = Vec::new();
    let files = seed_files()?;
    assert!(files.len() >= 11, "expected the seed manifests, found {files:?}");

    for file in &files {
        let text = std::fs::read_to_string(file)?
            .replace("namespace: ml-training", &format!("namespace: {}", t.namespace()));
        for document in split_documents(&text)? {
            let gvk = gvk_of(&document)?;
            let (resource, capabilities) = applier.resolve(&gvk).await?;
            let name = document["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if capabilities.scope == Scope::Cluster {
                let api: Api<DynamicObject> = Api::all_with(t.client().clone(), &resource);
                if api.get_opt(&name).await?.is_none() {
                    created_cluster_objects.push((resource.clone(), name.clone()));
                }
            }
            if gvk.kind == "PodGroup" {
                podgroups.push((resource, document));
            }
        }
        let output = kubectl
            .run_ok(&["apply", "-n", t.namespace(), "-f", "-"], Some(&text))
            .await;
        let output = output.map_err(|e| anyhow::anyhow!("{}: {e:#}", file.display()))?;
        assert!(
            output.contains("created") || output.contains("configured") || output.contains("unchanged"),
            "{output}"
        );
    }

    for (resource, document) in &podgroups {
        let name = document["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(t.client().clone(), t.namespace(), resource);
        let read = api.get(name).await?;
        assert_subset(
            &document["spec"],
            &read.data["spec"],
            &format!("{} {name} spec", resource.api_version),
        );
        if resource.group == "scheduling.run.ai" {
            // The same object through the storage version, as the typed API the components use.
            let typed: Api<api::PodGroup> = t.api();
            let through_v2alpha2 = serde_json::to_value(typed.get(name).await?.spec)?;
            assert_subset(
                &document["spec"],
                &through_v2alpha2,
                &format!("v2alpha2 {name} spec"),
            );
        }
    }
    let kinds: Vec<&str> = podgroups.iter().map(|(r, _)| r.group.as_str()).collect();
    assert!(
        kinds.contains(&"scheduling.run.ai") && kinds.contains(&"scheduling.volcano.sh"),
        "{kinds:?}"
    );

    for (resource, name) in created_cluster_objects.iter().rev() {
        let api: Api<DynamicObject> = Api::all_with(t.client().clone(), resource);
        api.delete(name, &DeleteParams::default()).await?;
    }
    t.finish().await
}
