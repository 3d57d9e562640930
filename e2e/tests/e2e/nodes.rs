//! Fake nodes are Ready, untainted (but for the taints asked for), and report the capacity asked for.

use e2e::{FakeNodes, TestEnv};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn fake_nodes_are_ready_untainted_and_have_their_capacity() -> anyhow::Result<()> {
    let t = TestEnv::start("fake-nodes").await?;
    let plain = t
        .create_nodes(
            FakeNodes::new("plain")
                .count(2)
                .cpu("16")
                .memory("64Gi")
                .gpus(4)
                .label("zone", "a"),
        )
        .await?;
    let tainted = t
        .create_nodes(
            FakeNodes::new("tainted")
                .gpus(0)
                .taint("dedicated", "ml", "NoSchedule"),
        )
        .await?;
    let api: Api<Node> = Api::all(t.client().clone());
    let owned = api
        .list(&ListParams::default().labels(&t.node_selector()))
        .await?
        .items;
    assert_eq!(
        owned.len(),
        3,
        "{:?}",
        owned.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
    );
    for node in &owned {
        let name = node.name_any();
        assert!(e2e::nodes::is_ready(node), "{name} not Ready");
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            !taints.iter().any(|t| t.key == e2e::nodes::NOT_READY_TAINT),
            "{name}: {taints:?}"
        );
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        let get = |k: &str| allocatable.get(k).map(|q| q.0.clone());
        assert_eq!(get("pods").as_deref(), Some("110"), "{name}");
        if plain.contains(&name) {
            assert!(taints.is_empty(), "{name}: {taints:?}");
            assert_eq!(
                (get("cpu").as_deref(), get("memory").as_deref()),
                (Some("16"), Some("64Gi")),
                "{name}"
            );
            assert_eq!(get("nvidia.com/gpu").as_deref(), Some("4"), "{name}");
            assert_eq!(node.labels().get("zone").map(String::as_str), Some("a"));
        } else {
            assert!(tainted.contains(&name));
            let summary: Vec<(String, Option<String>, String)> = taints
                .iter()
                .map(|t| (t.key.clone(), t.value.clone(), t.effect.clone()))
                .collect();
            assert_eq!(
                summary,
                [(
                    "dedicated".to_owned(),
                    Some("ml".to_owned()),
                    "NoSchedule".to_owned()
                )]
            );
            assert_eq!(get("nvidia.com/gpu"), None);
        }
    }
    let selector = t.node_selector();
    t.finish().await?;
    // The nodes go with the test.
    let client = e2e::Target::resolve().await?.connect().await?;
    let left = Api::<Node>::all(client)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    assert!(
        left.is_empty(),
        "nodes left behind: {:?}",
        left.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
    );
    Ok(())
}
