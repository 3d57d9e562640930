//! The admin HTTP server: `/livez`, `/readyz` and `/metrics` on `--admin-address`.
//!
//! Readiness is a set of named gates ("crds", "caches", ...) that components register at start-up and
//! open when their condition holds; `/readyz` answers 200 only when every gate is open. Liveness is a
//! [`Liveness`]: `/livez` answers 500, naming the part, once a loop's heartbeat is older than its timeout
//! or a task the process needs (a watch) has ended, so the kubelet restarts a process that makes no
//! progress. Metrics are a
//! prometheus-client [`Registry`] that components fill at start-up, before it is frozen into
//! [`AdminState`]; the metric handles stay usable (they are shared internally).
//!
//! Owns: the endpoints and their responses. Must not: expose configuration, object contents or anything
//! else beyond the three endpoints.

use std::{
    collections::BTreeMap,
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header::CONTENT_TYPE},
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::registry::Registry;

use crate::liveness::{Liveness, LivenessStatus};

/// Content type of the OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the admin server stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound (in use, not local, no permission).
    #[error("cannot bind the admin server to {address}: {source}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("admin server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Shared readiness of the process: ready when at least one gate exists and all gates are open.
///
/// Cloning shares the state. Register every gate before serving, so the process is not briefly "ready"
/// between two registrations.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    gates: Arc<Mutex<BTreeMap<&'static str, bool>>>,
}

/// The answer `/readyz` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadinessStatus {
    /// Every gate is open.
    Ready,
    /// Some gates are closed (named, in order), or none are registered yet (empty list).
    NotReady(Vec<&'static str>),
}

impl Readiness {
    /// A readiness with no gates (not ready until one is registered and opened).
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a closed gate named `name` and returns its handle. Registering a name again returns a
    /// handle to the same gate without changing it.
    pub fn gate(&self, name: &'static str) -> ReadinessGate {
        self.lock().entry(name).or_insert(false);
        ReadinessGate {
            readiness: self.clone(),
            name,
        }
    }

    /// The current answer.
    pub fn status(&self) -> ReadinessStatus {
        let gates = self.lock();
        let closed: Vec<_> = gates
            .iter()
            .filter(|(_, open)| !**open)
            .map(|(name, _)| *name)
            .collect();
        if gates.is_empty() || !closed.is_empty() {
            ReadinessStatus::NotReady(closed)
        } else {
            ReadinessStatus::Ready
        }
    }

    /// Whether every gate is open.
    pub fn is_ready(&self) -> bool {
        self.status() == ReadinessStatus::Ready
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, bool>> {
        // The map stays consistent even if a holder panicked: every write is a single insert.
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One named readiness condition; see [`Readiness::gate`].
#[derive(Debug, Clone)]
pub struct ReadinessGate {
    readiness: Readiness,
    name: &'static str,
}

impl ReadinessGate {
    /// Opens the gate (the condition holds, e.g. caches synced).
    pub fn set_ready(&self) {
        self.set(true);
    }

    /// Closes the gate again (the condition was lost, e.g. a watch broke for good).
    pub fn set_not_ready(&self) {
        self.set(false);
    }

    fn set(&self, open: bool) {
        let previous = self.readiness.lock().insert(self.name, open);
        if previous != Some(open) {
            tracing::info!(gate = self.name, ready = open, "readiness changed");
        }
    }
}

/// What the admin endpoints read.
#[derive(Debug, Clone)]
pub struct AdminState {
    readiness: Readiness,
    liveness: Liveness,
    registry: Arc<Registry>,
}

impl AdminState {
    /// Freezes `registry` (register every metric first) together with the shared readiness and liveness.
    pub fn new(readiness: Readiness, liveness: Liveness, registry: Registry) -> Self {
        Self {
            readiness,
            liveness,
            registry: Arc::new(registry),
        }
    }
}

/// The admin router (`/livez`, `/readyz`, `/metrics`; anything else is 404).
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Binds `address` and serves [`router`] until `shutdown` completes, then finishes in-flight requests.
pub async fn serve(
    address: SocketAddr,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })?;
    tracing::info!(%address, "admin server listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(Error::Serve)
}

async fn livez(State(state): State<AdminState>) -> Response {
    match state.liveness.status() {
        LivenessStatus::Live => (StatusCode::OK, "ok\n").into_response(),
        LivenessStatus::NotLive(failures) => {
            let failures: Vec<String> = failures.iter().map(ToString::to_string).collect();
            let failures = failures.join("; ");
            tracing::warn!(%failures, "not live");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("not live: {failures}\n"),
            )
                .into_response()
        }
    }
}

async fn readyz(State(state): State<AdminState>) -> Response {
    match state.readiness.status() {
        ReadinessStatus::Ready => (StatusCode::OK, "ok\n").into_response(),
        ReadinessStatus::NotReady(closed) if closed.is_empty() => {
            (StatusCode::SERVICE_UNAVAILABLE, "not ready: starting\n").into_response()
        }
        ReadinessStatus::NotReady(closed) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: waiting for {}\n", closed.join(", ")),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => ([(CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use http::Request;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt as _;

    use super::*;

    #[test]
    fn readiness_needs_a_gate_and_all_gates_open() {
        let readiness = Readiness::new();
        assert_eq!(readiness.status(), ReadinessStatus::NotReady(vec![]));

        let caches = readiness.gate("caches");
        let crds = readiness.gate("crds");
        assert_eq!(
            readiness.status(),
            ReadinessStatus::NotReady(vec!["caches", "crds"])
        );

        crds.set_ready();
        assert_eq!(readiness.status(), ReadinessStatus::NotReady(vec!["caches"]));
        caches.set_ready();
        assert!(readiness.is_ready());

        caches.set_not_ready();
        assert_eq!(readiness.status(), ReadinessStatus::NotReady(vec!["caches"]));
        caches.set_ready();
        assert!(readiness.is_ready());
    }

    #[test]
    fn registering_a_gate_again_keeps_its_state() {
        let readiness = Readiness::new();
        readiness.gate("caches").set_ready();
        let again = readiness.gate("caches");
        assert!(readiness.is_ready());
        again.set_not_ready();
        assert!(!readiness.is_ready());
    }

    #[test]
    fn clones_share_state() {
        let readiness = Readiness::new();
        let gate = readiness.clone().gate("caches");
        gate.clone().set_ready();
        assert!(readiness.is_ready());
    }

    async fn get(state: &AdminState, path: &str) -> (StatusCode, Option<String>, String) {
        let response = router(state.clone())
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().expect("ascii").to_owned());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        (
            status,
            content_type,
            String::from_utf8(bytes.to_vec()).expect("utf-8"),
        )
    }

    fn liveness() -> Liveness {
        Liveness::new(Duration::from_secs(60))
    }

    #[tokio::test]
    async fn livez_is_ok_without_parts() {
        let state = AdminState::new(Readiness::new(), liveness(), Registry::default());
        let (status, _, body) = get(&state, "/livez").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn livez_fails_naming_a_stale_heartbeat_and_recovers_on_the_next_beat() {
        let liveness = Liveness::new(Duration::from_secs(60));
        let state = AdminState::new(Readiness::new(), liveness.clone(), Registry::default());
        let heartbeat = liveness.heartbeat("scheduling loop");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            get(&state, "/livez").await.0,
            StatusCode::OK,
            "within the timeout"
        );

        tokio::time::sleep(Duration::from_secs(15)).await;
        let (status, _, body) = get(&state, "/livez").await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "not live: scheduling loop: no progress for 1m15s (timeout 1m)\n"
            )
        );

        heartbeat.beat();
        assert_eq!(get(&state, "/livez").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn livez_fails_once_a_needed_task_has_stopped() {
        let liveness = liveness();
        let state = AdminState::new(Readiness::new(), liveness.clone(), Registry::default());
        let watch = liveness.task("watch pods");
        assert_eq!(get(&state, "/livez").await.0, StatusCode::OK);
        drop(watch);
        let (status, _, body) = get(&state, "/livez").await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "not live: watch pods: stopped\n"
            )
        );
    }

    #[tokio::test]
    async fn readiness_does_not_make_a_process_live_or_not() {
        let liveness = liveness();
        let state = AdminState::new(Readiness::new(), liveness.clone(), Registry::default());
        assert_eq!(get(&state, "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            get(&state, "/livez").await.0,
            StatusCode::OK,
            "starting is not dead"
        );
    }

    #[tokio::test]
    async fn readyz_reports_closed_gates_until_ready() {
        let readiness = Readiness::new();
        let state = AdminState::new(readiness.clone(), liveness(), Registry::default());
        let (status, _, body) = get(&state, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "not ready: starting\n")
        );

        let caches = readiness.gate("caches");
        let crds = readiness.gate("crds");
        let (status, _, body) = get(&state, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: waiting for caches, crds\n"
            )
        );

        caches.set_ready();
        crds.set_ready();
        let (status, _, body) = get(&state, "/readyz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    }

    #[tokio::test]
    async fn metrics_exposes_registered_metrics_as_openmetrics() {
        let mut registry = Registry::with_prefix("kai");
        let binds = Counter::<u64>::default();
        registry.register("binds", "Pods bound", binds.clone());
        let state = AdminState::new(Readiness::new(), liveness(), registry);
        binds.inc_by(3);

        let (status, content_type, body) = get(&state, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(body.contains("# TYPE kai_binds counter"), "{body}");
        assert!(body.contains("kai_binds_total 3"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[tokio::test]
    async fn unknown_paths_are_not_found() {
        let state = AdminState::new(Readiness::new(), liveness(), Registry::default());
        for path in ["/", "/debug", "/metrics/x", "/healthz"] {
            assert_eq!(get(&state, path).await.0, StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[tokio::test]
    async fn serve_reports_an_address_in_use() {
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = taken.local_addr().expect("addr");
        let state = AdminState::new(Readiness::new(), liveness(), Registry::default());
        let error = serve(address, state, std::future::pending())
            .await
            .expect_err("address in use");
        assert!(matches!(error, Error::Bind { address: a, .. } if a == address));
    }
}
