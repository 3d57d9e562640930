//! The project's CRDs are installed, Established, and serve what the generated files declare.

use e2e::TestEnv;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;

#[tokio::test]
async fn project_crds_are_established_and_serve_their_versions() -> anyhow::Result<()> {
    let t = TestEnv::start("crds-established").await?;
    let api: Api<CustomResourceDefinition> = Api::all(t.client().clone());
    for source in e2e::install::read_crds(&e2e::paths::crds_dir())? {
        let name = source.crd.name_any();
        let installed = api.get(&name).await?;
        let conditions = installed
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name} is not Established: {conditions:?}"
        );
        if installed.spec.group == "scheduling.volcano.sh"
            && !installed
                .managed_fields()
                .iter()
                .any(|m| m.manager.as_deref() == Some(e2e::FIELD_MANAGER))
        {
            // Volcano's own CRD: not ours to compare.
            continue;
        }
        let served = |crd: &CustomResourceDefinition| {
            let mut versions: Vec<(String, bool, bool)> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.clone(), v.served, v.storage))
                .collect();
            versions.sort();
            versions
        };
        assert_eq!(
            served(&installed),
            served(&source.crd),
            "{name} versions differ from {}",
            source.path.display()
        );
    }
    for version in ["v2alpha2", "v2"] {
        let gvk = GroupVersionKind::gvk("scheduling.run.ai", version, "PodGroup");
        kube::discovery::pinned_kind(t.client(), &gvk).await?;
    }
    t.finish().await
}

#[tokio::test]
async fn a_podgroup_written_as_v2_reads_back_as_v2alpha2_and_the_other_way() -> anyhow::Result<()> {
    let t = TestEnv::start("podgroup-versions").await?;
    t.apply_yaml(
        "apiVersion: scheduling.run.ai/v2\nkind: PodGroup\nmetadata: {name: written-v2}\nspec: {minMember: 3, queue: team-a}\n---\n\
         apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata: {name: written-v2alpha2}\n\
         spec: {minMember: 2, queue: team-b, preemptibility: non-preemptible}\n",
    )
    .await?;
    let typed: Api<api::PodGroup> = t.api();
    let from_v2 = typed.get("written-v2").await?;
    assert_eq!(
        (from_v2.spec.min_member, from_v2.spec.queue.as_deref()),
        (Some(3), Some("team-a"))
    );
    let v2 = ApiResource::from_gvk(&GroupVersionKind::gvk("scheduling.run.ai", "v2", "PodGroup"));
    let as_v2: DynamicObject = Api::namespaced_with(t.client().clone(), t.namespace(), &v2)
        .get("written-v2alpha2")
        .await?;
    assert_eq!(
        as_v2.types.as_ref().map(|t| t.api_version.as_str()),
        Some("scheduling.run.ai/v2")
    );
    assert_eq!(as_v2.data["spec"]["preemptibility"], "non-preemptible");
    assert_eq!(as_v2.data["spec"]["minMember"], 2);
    t.finish().await
}
