//! Keeps the webhook's certificate current: reads the Secret every round and serves what it holds; when
//! the scheduler keeps the certificates ([`Source::SelfManaged`]) the leader also renews them
//! ([`certs::plan`]) and keeps the CA bundle in the webhook configuration.
//!
//! The Secret is made by the chart (empty) and filled here, so the scheduler needs only `get` and
//! `update` on that one Secret; the bundle is written with a JSON patch guarded by `test` operations on
//! the webhook names, under the field manager `kai-scheduler-webhook-ca`, so nothing else in the
//! configuration (the chart's) is ever touched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use runtime::admin::ReadinessGate;
use runtime::lease::LeaderGuard;
use runtime::shutdown::CancellationToken;
use serde_json::json;
use tracing::{info, warn};

use super::certs::{self, Step, Stored, Validity};
use super::tls::CertStore;

/// Who keeps the certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The scheduler makes, renews and publishes them.
    SelfManaged,
    /// Someone else (cert-manager) fills the Secret and the bundle; the scheduler only reads the Secret.
    External,
}

/// What the keeper keeps.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The Secret's name.
    pub secret: String,
    /// Its namespace.
    pub namespace: String,
    /// The `MutatingWebhookConfiguration` whose CA bundle is kept (self-managed only); `None` leaves
    /// the bundle to someone else.
    pub configuration: Option<String>,
    /// Who keeps the certificates.
    pub source: Source,
    /// Host names and addresses the API server reaches the webhook as.
    pub hosts: Vec<String>,
    /// How long new certificates are valid.
    pub validity: Validity,
}

impl Settings {
    /// How often the Secret is read (and the certificates checked): a twentieth of the serving
    /// certificate's validity, between 1 s and 60 s.
    #[must_use]
    pub fn period(&self) -> Duration {
        (self.validity.cert / 20).clamp(Duration::from_secs(1), Duration::from_secs(60))
    }
}

/// The wait before the next round after one that failed or left no certificate to serve.
const RETRY: Duration = Duration::from_secs(2);

/// How long the webhook configuration must have carried a new CA before a certificate it signed is
/// served: the API servers read webhook configurations through their own caches.
const PROPAGATION: Duration = Duration::from_secs(5);

/// What the keeper remembers between rounds: since when the configuration has carried the current CA.
#[derive(Debug, Default)]
struct Seen {
    served: Option<(String, tokio::time::Instant)>,
}

/// Runs until `shutdown`: one round at once, then one every [`Settings::period`]. `ready` opens once a
/// certificate is served.
pub async fn run(
    client: Client,
    settings: Settings,
    guard: LeaderGuard,
    store: Arc<CertStore>,
    ready: ReadinessGate,
    shutdown: CancellationToken,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut seen = Seen::default();
    loop {
        let result = round(&secrets, &configurations, &settings, &guard, &store, &mut seen).await;
        if let Err(e) = &result {
            warn!(
                secret = %format!("{}/{}", settings.namespace, settings.secret),
                error = %e,
                "webhook certificate"
            );
        }
        if store.is_loaded() {
            ready.set_ready();
        }
        // A failed round, or one that left nothing to serve (a follower waiting for the leader's first
        // certificate, a replica that became leader since), is tried again soon, not a period later.
        let wait = if result.is_err() || !store.is_loaded() {
            RETRY.min(settings.period())
        } else {
            settings.period()
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

fn text_data(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, ByteString(v))| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .chain(
            secret
                .string_data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone())),
        )
        .collect()
}

async fn round(
    secrets: &Api<Secret>,
    configurations: &Api<MutatingWebhookConfiguration>,
    settings: &Settings,
    guard: &LeaderGuard,
    store: &CertStore,
    seen: &mut Seen,
) -> Result<(), String> {
    let Some(secret) = secrets
        .get_opt(&settings.secret)
        .await
        .map_err(|e| format!("reading the Secret: {e}"))?
    else {
        return Err(match settings.source {
            Source::SelfManaged => "the Secret does not exist; the chart makes it (empty) and the scheduler \
                                    fills it"
                .to_owned(),
            Source::External => {
                "the Secret does not exist (yet); cert-manager (or whoever keeps the certificate) makes it"
                    .to_owned()
            }
        });
    };
    let data = text_data(&secret);
    let (cert, key) = match settings.source {
        Source::External => (
            data.get(certs::CERT_KEY).cloned().unwrap_or_default(),
            data.get(certs::PRIVATE_KEY).cloned().unwrap_or_default(),
        ),
        Source::SelfManaged => {
            let annotations = secret.metadata.annotations.clone().unwrap_or_default();
            let mut stored = Stored::from_secret(&data, &annotations);
            if guard.check().is_ok() {
                stored = keep(secrets, configurations, settings, secret, stored, seen).await?;
            }
            match stored {
                Some(s) => (s.cert, s.key),
                None => return Err("the Secret holds no certificate yet (the leader makes one)".to_owned()),
            }
        }
    };
    if cert.is_empty() || key.is_empty() {
        return Err(format!(
            "the Secret has no {} or {} yet",
            certs::CERT_KEY,
            certs::PRIVATE_KEY
        ));
    }
    if store.load(&cert, &key)? {
        info!(
            secret = %format!("{}/{}", settings.namespace, settings.secret),
            "webhook serving certificate loaded"
        );
    }
    Ok(())
}

/// The leader's part: renews what [`certs::plan`] says, writes the Secret, keeps the bundle. Returns what
/// the Secret holds afterwards.
async fn keep(
    secrets: &Api<Secret>,
    configurations: &Api<MutatingWebhookConfiguration>,
    settings: &Settings,
    mut secret: Secret,
    stored: Option<Stored>,
    seen: &mut Seen,
) -> Result<Option<Stored>, String> {
    let configuration = match &settings.configuration {
        Some(name) => Some(
            configurations
                .get_opt(name)
                .await
                .map_err(|e| format!("reading MutatingWebhookConfiguration {name}: {e}"))?
                .ok_or_else(|| format!("MutatingWebhookConfiguration {name} does not exist"))?,
        ),
        None => None,
    };
    let served = |s: &Stored| {
        configuration
            .as_ref()
            .is_none_or(|c| bundles(c).iter().all(|b| contains(b, &s.ca.pem)) && !bundles(c).is_empty())
    };
    // The current CA counts as served once the configuration has carried it for PROPAGATION.
    let bundle_served = match stored.as_ref().filter(|s| served(s)) {
        Some(s) if configuration.is_none() => {
            seen.served = Some((s.ca.name.clone(), tokio::time::Instant::now()));
            true
        }
        Some(s) => {
            let since = match &seen.served {
                Some((name, at)) if *name == s.ca.name => *at,
                _ => {
                    let at = tokio::time::Instant::now();
                    seen.served = Some((s.ca.name.clone(), at));
                    at
                }
            };
            since.elapsed() >= PROPAGATION
        }
        None => {
            seen.served = None;
            false
        }
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let step = certs::plan(
        stored.as_ref(),
        &settings.hosts,
        now,
        settings.validity,
        bundle_served,
    );
    let mut current = stored;
    if step != Step::Keep
        && let Some(next) = certs::renew(step, current.as_ref(), &settings.hosts, now, settings.validity)?
    {
        let (data, annotations) = next.to_secret();
        secret.data = Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        );
        secret.string_data = None;
        // This keeper's annotations are replaced as a whole (a dropped previous CA loses its own);
        // anyone else's stay.
        let kept = secret.metadata.annotations.get_or_insert_with(BTreeMap::new);
        kept.retain(|k, _| !k.starts_with(certs::ANNOTATION_PREFIX));
        kept.extend(annotations);
        secrets
            .replace(&settings.secret, &PostParams::default(), &secret)
            .await
            .map_err(|e| format!("writing the Secret ({step:?}): {e}"))?;
        info!(
            secret = %format!("{}/{}", settings.namespace, settings.secret),
            ?step,
            "webhook certificates renewed"
        );
        current = Some(next);
    }
    if let (Some(s), Some(c)) = (&current, &configuration) {
        publish_bundle(configurations, c, &s.bundle()).await?;
    }
    Ok(current)
}

/// The CA bundles of a configuration's webhooks, as text.
fn bundles(c: &MutatingWebhookConfiguration) -> Vec<String> {
    c.webhooks
        .iter()
        .flatten()
        .map(|w| {
            w.client_config
                .ca_bundle
                .as_ref()
                .map(|ByteString(b)| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        })
        .collect()
}

fn contains(bundle: &str, pem: &str) -> bool {
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    squash(bundle).contains(&squash(pem))
}

/// Writes `bundle` into every webhook of the configuration whose bundle differs.
async fn publish_bundle(
    configurations: &Api<MutatingWebhookConfiguration>,
    c: &MutatingWebhookConfiguration,
    bundle: &str,
) -> Result<(), String> {
    let name = c.metadata.name.clone().unwrap_or_default();
    let encoded = serde_json::to_value(ByteString(bundle.as_bytes().to_vec()))
        .map_err(|e| format!("encoding the CA bundle: {e}"))?;
    let mut ops = Vec::new();
    for (i, (webhook, current)) in c.webhooks.iter().flatten().zip(bundles(c)).enumerate() {
        if current == bundle {
            continue;
        }
        ops.push(json!({ "op": "test", "path": format!("/webhooks/{i}/name"), "value": webhook.name }));
        ops.push(
            json!({ "op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded }),
        );
    }
    if ops.is_empty() {
        return Ok(());
    }
    let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
        .map_err(|e| format!("building the patch: {e}"))?;
    let params = PatchParams {
        field_manager: Some(api::keys::FIELD_MANAGER_WEBHOOK_CA.to_owned()),
        ..PatchParams::default()
    };
    configurations
        .patch(&name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(|e| format!("writing the CA bundle into MutatingWebhookConfiguration {name}: {e}"))?;
    info!(configuration = %name, "webhook CA bundle published");
    Ok(())
}
