//! The GPU-sharing admission webhook, served by the scheduler's own process over TLS
//! (`--webhook-address`): the API server calls it for every pod created in the namespaces the chart's
//! `MutatingWebhookConfiguration` selects, and it points the GPU containers of this scheduler's pods that
//! ask for a share of a GPU at their device (the decision is [`crate::gpu_env::admit`]).
//!
//! Certificates ([`keeper`]): kept by the scheduler (a CA and a serving certificate in a Secret, renewed
//! in time, the CA bundle kept in the webhook configuration; [`certs`]) or by someone else, such as
//! cert-manager (the Secret is only read). Every replica serves, leader or not; only the leader writes
//! the Secret and the bundle (the client's fence refuses anyone else's writes anyway).
//!
//! The chart registers the webhook with `failurePolicy: Ignore`: while no replica answers, pods are
//! created as they are, so the webhook never blocks a pod it does not concern. A sharing pod created
//! then is not prepared, and the scheduler does not place it (`gpusharing.requireWebhook`); its
//! PodGroup and events say why.
//!
//! Must not: write anything a pod admission depends on (`sideEffects: None`: the API server also calls
//! it for dry runs); block on the API server while answering.

pub mod certs;
pub mod keeper;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tracing::{debug, info, warn};

use crate::gpu_env::{self, Admission};

/// The path the API server posts admission reviews to.
pub const PATH: &str = "/mutate-pods";

/// Why the webhook server stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound.
    #[error("cannot bind the webhook server to {address}: {source}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The TLS settings could not be made.
    #[error("webhook TLS settings: {0}")]
    Tls(#[from] rustls::Error),
    /// Serving failed.
    #[error("webhook server failed: {0}")]
    Serve(#[source] std::io::Error),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Counters of the webhook's answers.
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    admissions: Family<ResultLabel, Counter>,
}

impl WebhookMetrics {
    /// Registers the counters.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "webhook_admissions",
            "Pods the GPU-sharing admission webhook answered for, by result (unchanged, mutated, refused, \
             invalid)",
            self.admissions.clone(),
        );
    }

    fn count(&self, result: &'static str) {
        self.admissions.get_or_create(&ResultLabel { result }).inc();
    }
}

#[derive(Clone)]
struct AppState {
    scheduler_name: Arc<str>,
    metrics: WebhookMetrics,
}

/// Binds the webhook's address (before serving, so a bad address stops start-up).
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, Error> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })
}

/// Serves the webhook on `tcp` with the certificate of `store` until `shutdown` completes. Pods of
/// `scheduler_name` are the ones it changes.
///
/// # Errors
/// When serving fails.
pub async fn serve(
    tcp: tokio::net::TcpListener,
    store: Arc<tls::CertStore>,
    scheduler_name: String,
    metrics: WebhookMetrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    if let Ok(address) = tcp.local_addr() {
        info!(%address, "GPU-sharing admission webhook listening");
    }
    let listener = tls::TlsListener::new(tcp, tls::server_config(store)?);
    axum::serve(listener, router(&scheduler_name, metrics))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(Error::Serve)
}

fn router(scheduler_name: &str, metrics: WebhookMetrics) -> Router {
    Router::new().route(PATH, post(review)).with_state(AppState {
        scheduler_name: scheduler_name.into(),
        metrics,
    })
}

async fn review(State(state): State<AppState>, body: axum::body::Bytes) -> Response {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            state.metrics.count("invalid");
            warn!(error = %e, "webhook: not an AdmissionReview");
            return (StatusCode::BAD_REQUEST, format!("not an AdmissionReview: {e}")).into_response();
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            state.metrics.count("invalid");
            warn!(error = %e, "webhook: AdmissionReview without a request");
            return (StatusCode::BAD_REQUEST, e.to_string()).into_response();
        }
    };
    let response = answer(&request, &state.scheduler_name, &state.metrics);
    match serde_json::to_vec(&response.into_review()) {
        Ok(json) => ([(CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The response to one admission request.
fn answer(
    request: &AdmissionRequest<DynamicObject>,
    scheduler_name: &str,
    metrics: &WebhookMetrics,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(object) = request.object.as_ref() else {
        metrics.count("unchanged");
        return response;
    };
    let pod = match serde_json::to_value(object) {
        Ok(v) => v,
        Err(e) => {
            metrics.count("invalid");
            return response.deny(format!("the pod could not be read: {e}"));
        }
    };
    let name = || {
        let n = object.metadata.name.as_deref().unwrap_or_default();
        if n.is_empty() {
            format!(
                "{}/{}*",
                request.namespace.as_deref().unwrap_or_default(),
                object.metadata.generate_name.as_deref().unwrap_or_default()
            )
        } else {
            format!("{}/{n}", request.namespace.as_deref().unwrap_or_default())
        }
    };
    match gpu_env::admit(&pod, scheduler_name, &request.uid) {
        Admission::Unchanged => {
            metrics.count("unchanged");
            response
        }
        Admission::Patch(patch) => match response.clone().with_patch(patch) {
            Ok(patched) => {
                metrics.count("mutated");
                debug!(pod = %name(), "pointed the pod's GPU containers at its shared device");
                patched
            }
            Err(e) => {
                metrics.count("invalid");
                response.deny(format!("the patch could not be written: {e}"))
            }
        },
        Admission::Refuse(why) => {
            metrics.count("refused");
            info!(pod = %name(), reason = %why, "refused a GPU-sharing pod");
            response.deny(format!("GPU sharing: {why}"))
        }
    }
}

#[cfg(test)]
mod tests;
