//! The scheduler's GPU-sharing admission webhook on a test cluster, registered as the chart registers it
//! but pointed at a scheduler running as a local process (`https://127.0.0.1:<port>/mutate-pods`; the API
//! server runs on the same host) and sent only the pods of one namespace, so it never touches another
//! test's pods (tests, and other people's tests, share the cluster).
//!
//! The cluster-scoped objects (the webhook configuration and the grant on it) are owned by that namespace:
//! the garbage collector removes them with it, however the test ends; [`LocalWebhook::remove`] removes them
//! at once.
//!
//! Must not: register anything that selects pods outside its namespace.

use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use crate::apply::{Applier, Placement};
use crate::chart_rbac::ChartRbac;
use crate::component::free_port;

/// The namespace label the test's webhook configuration selects (its value: the namespace's name).
pub const SCOPE_LABEL: &str = "e2e.kai.dev/gpu-sharing-webhook";

/// A webhook registered for one namespace.
#[derive(Debug, Clone)]
pub struct LocalWebhook {
    port: u16,
    configuration: String,
    namespace: String,
    secret: String,
}

impl LocalWebhook {
    /// Registers the chart's webhook for the pods of `namespace`, calling a free loopback port, with the
    /// chart's Secret, Role and grant moved to the test ([`ChartRbac::webhook_objects`]). A scheduler
    /// started with [`LocalWebhook::scheduler_args`] serves it.
    ///
    /// # Errors
    /// When the namespace does not exist or the server refuses an object.
    pub async fn register(client: &Client, rbac: &ChartRbac, namespace: &str) -> anyhow::Result<Self> {
        let port = free_port()?;
        let configuration = format!("{namespace}-gpu-sharing");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let label = json!({ "metadata": { "labels": { SCOPE_LABEL: namespace } } });
        let ns = namespaces
            .patch(namespace, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .with_context(|| format!("labelling namespace {namespace}"))?;
        let owner = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "name": namespace, "uid": ns.uid().unwrap_or_default(),
        });
        let url = format!("https://127.0.0.1:{port}/mutate-pods");
        let objects = rbac.webhook_objects(namespace, &configuration, &url, SCOPE_LABEL, &owner)?;
        let secret = objects
            .iter()
            .find(|o| o["kind"] == "Secret")
            .and_then(|o| o["metadata"]["name"].as_str())
            .unwrap_or_default()
            .to_owned();
        let mut applier = Applier::new(client.clone());
        for object in objects {
            applier
                .apply_value(object, Placement::AsWritten)
                .await
                .context("registering the GPU-sharing webhook")?;
        }
        Ok(Self {
            port,
            configuration,
            namespace: namespace.to_owned(),
            secret,
        })
    }

    /// The loopback port the API server calls.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The webhook configuration's name.
    #[must_use]
    pub fn configuration(&self) -> &str {
        &self.configuration
    }

    /// The scheduler's flags for serving this webhook with certificates it keeps itself (the chart's
    /// default), as `(flag, value)` pairs for [`crate::chart::ComponentSpec::local_args`].
    #[must_use]
    pub fn scheduler_flags(&self) -> Vec<(&'static str, String)> {
        vec![
            ("webhook-address", format!("127.0.0.1:{}", self.port)),
            ("webhook-secret", self.secret.clone()),
            ("webhook-secret-namespace", self.namespace.clone()),
            ("webhook-configuration", self.configuration.clone()),
            ("webhook-hosts", "127.0.0.1".to_owned()),
            ("webhook-certificates", "self".to_owned()),
        ]
    }

    /// [`LocalWebhook::scheduler_flags`] as arguments.
    #[must_use]
    pub fn scheduler_args(&self) -> Vec<String> {
        self.scheduler_flags()
            .into_iter()
            .map(|(flag, value)| format!("--{flag}={value}"))
            .collect()
    }

    /// Waits until the API server sends pods of the namespace through the webhook and takes its answer:
    /// a dry-run creation of a pod asking for half a GPU comes back pointed at its ConfigMap (the
    /// scheduler has made its certificate and the API server has read the CA bundle).
    ///
    /// # Errors
    /// When that does not happen within `timeout`.
    pub async fn wait_until_serving(&self, client: &Client, timeout: Duration) -> anyhow::Result<()> {
        wait_until_serving(client, &self.namespace, timeout)
            .await
            .with_context(|| format!("the webhook at 127.0.0.1:{}", self.port))
    }

    /// The CA bundle the webhook configuration carries (what the API server trusts), as text.
    ///
    /// # Errors
    /// When the configuration cannot be read.
    pub async fn ca_bundle(&self, client: &Client) -> anyhow::Result<String> {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let c = api.get(&self.configuration).await?;
        Ok(c.webhooks
            .iter()
            .flatten()
            .filter_map(|w| w.client_config.ca_bundle.as_ref())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .next()
            .unwrap_or_default())
    }

    /// Removes the webhook configuration and the grant on it now (the namespace's deletion would).
    ///
    /// # Errors
    /// When the server refuses.
    pub async fn remove(&self, client: &Client) -> anyhow::Result<()> {
        let gone = |r: Result<_, kube::Error>| match r {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        };
        let params = DeleteParams::default();
        gone(
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .delete(&self.configuration, &params)
                .await
                .map(drop),
        )?;
        gone(
            Api::<ClusterRoleBinding>::all(client.clone())
                .delete(&self.configuration, &params)
                .await
                .map(drop),
        )?;
        gone(
            Api::<ClusterRole>::all(client.clone())
                .delete(&self.configuration, &params)
                .await
                .map(drop),
        )?;
        Ok(())
    }
}

/// Waits until the API server sends pods of `namespace` through the GPU-sharing webhook and takes its
/// answer: a dry-run creation of a pod asking for half a GPU comes back pointed at its ConfigMap (the
/// scheduler has made its certificate and the API server has read the CA bundle).
///
/// # Errors
/// When that does not happen within `timeout`.
pub async fn wait_until_serving(client: &Client, namespace: &str, timeout: Duration) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let probe: Pod = serde_json::from_value(json!({
        "metadata": { "generateName": "webhook-probe-",
                      "annotations": { api::keys::GPU_FRACTION: "0.5" } },
        "spec": { "schedulerName": api::keys::SCHEDULER_NAME,
                  "containers": [{ "name": "c", "image": "example.com/probe:1" }] },
    }))?;
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match pods.create(&params, &probe).await {
            Ok(p) if p.annotations().contains_key(api::keys::GPU_SHARING_CONFIGMAP) => return Ok(()),
            Ok(_) => "the pod came back unchanged".to_owned(),
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!("the GPU-sharing webhook did not answer within {timeout:?} ({last})");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
