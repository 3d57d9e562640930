//! Invalid objects are rejected by the API server with a message naming the field and the rule, through
//! the OpenAPI schema alone (CEL is not available on every supported server).

use e2e::TestEnv;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;

async fn rejection(t: &TestEnv, object: serde_json::Value) -> anyhow::Result<String> {
    let gvk = e2e::apply::gvk_of(&object)?;
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = if gvk.kind == "Queue" {
        Api::all_with(t.client().clone(), &resource)
    } else {
        Api::namespaced_with(t.client().clone(), t.namespace(), &resource)
    };
    let object: DynamicObject = serde_json::from_value(object)?;
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => anyhow::bail!("the server accepted an invalid object: {created:?}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            Ok(status.message)
        }
        Err(err) => Err(err.into()),
    }
}

fn podgroup(version: &str, spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": format!("scheduling.run.ai/{version}"),
        "kind": "PodGroup",
        "metadata": {"name": "invalid"},
        "spec": spec,
    })
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
}

#[tokio::test]
async fn podgroup_min_member_zero_is_rejected() -> anyhow::Result<()> {
    let t = TestEnv::start("invalid-min-member").await?;
    for version in ["v2", "v2alpha2"] {
        let message = rejection(&t, podgroup(version, serde_json::json!({"minMember": 0}))).await?;
        assert_mentions(&message, &["spec.minMember", "greater than or equal to 1"]);
    }
    t.finish().await
}

#[tokio::test]
async fn podgroup_negative_schedule_timeout_is_rejected() -> anyhow::Result<()> {
    let t = TestEnv::start("invalid-timeout").await?;
    let message = rejection(
        &t,
        podgroup(
            "v2",
            serde_json::json!({"minMember": 2, "scheduleTimeoutSeconds": -5}),
        ),
    )
    .await?;
    assert_mentions(
        &message,
        &["spec.scheduleTimeoutSeconds", "greater than or equal to 0"],
    );
    t.finish().await
}

#[tokio::test]
async fn podgroup_unknown_preemptibility_is_rejected() -> anyhow::Result<()> {
    let t = TestEnv::start("invalid-preemptibility").await?;
    let message = rejection(
        &t,
        podgroup("v2", serde_json::json!({"preemptibility": "sometimes"})),
    )
    .await?;
    assert_mentions(
        &message,
        &[
            "spec.preemptibility",
            "\"sometimes\"",
            "\"preemptible\"",
            "\"non-preemptible\"",
        ],
    );
    t.finish().await
}

#[tokio::test]
async fn queue_quota_below_minus_one_is_rejected() -> anyhow::Result<()> {
    let t = TestEnv::start("invalid-queue-quota").await?;
    let queue = serde_json::json!({
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": format!("{}-invalid", t.namespace())},
        "spec": {"resources": {"gpu": {"quota": -2, "limit": -1, "overQuotaWeight": 1}}},
    });
    let message = rejection(&t, queue).await?;
    assert_mentions(
        &message,
        &["spec.resources.gpu.quota", "greater than or equal to -1"],
    );
    t.finish().await
}

#[tokio::test]
async fn kubectl_users_see_the_rejection() -> anyhow::Result<()> {
    let t = TestEnv::start("invalid-kubectl").await?;
    let output = t
        .kubectl()?
        .run(
            &["apply", "-n", t.namespace(), "-f", "-"],
            Some("apiVersion: scheduling.run.ai/v2\nkind: PodGroup\nmetadata: {name: bad}\nspec: {minMember: 0}\n"),
        )
        .await?;
    assert!(!output.success, "kubectl accepted minMember 0: {}", output.stdout);
    assert_mentions(&output.stderr, &["spec.minMember", "greater than or equal to 1"]);
    let gvk = GroupVersionKind::gvk("scheduling.run.ai", "v2", "PodGroup");
    let api: Api<DynamicObject> =
        Api::namespaced_with(t.client().clone(), t.namespace(), &ApiResource::from_gvk(&gvk));
    assert!(api.get_opt("bad").await?.is_none());
    t.finish().await
}
