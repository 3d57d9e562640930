//! The applier's tests' API server: an [`Applier`] built as `main.rs` builds it, whose client is
//! answered by a closure instead of an API server, and the log of the requests it sent.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use runtime::discovery::EvictionVersion;
use runtime::lease::{Elector, LeaderElection};
use scheduler_core::config::GpuSharingArgs;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Applier, ApplierOptions, ApplyMetrics};
use crate::loop_state::Feedback;

/// One request as the fake API server saw it (a body that is not JSON is `null`).
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub method: Method,
    pub path: String,
    pub body: Value,
}

/// The requests the applier sent, oldest first.
pub(super) type Log = Arc<Mutex<Vec<Seen>>>;

/// An applier with `concurrency` binds and other writes at once and `gpu_sharing`'s settings, whose
/// every request `respond` answers (status and JSON body); returns it, its request log and the
/// feedback it sends the loop.
pub(super) fn applier(
    concurrency: usize,
    gpu_sharing: GpuSharingArgs,
    respond: impl Fn(&Seen) -> (StatusCode, Value) + Send + Sync + 'static,
) -> (Applier, Log, mpsc::UnboundedReceiver<Feedback>) {
    let log = Log::default();
    let respond = Arc::new(respond);
    let seen_log = Arc::clone(&log);
    let service = tower::service_fn(move |request: Request<Body>| {
        let (respond, log) = (Arc::clone(&respond), Arc::clone(&seen_log));
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let seen = Seen {
                method: parts.method,
                path: parts.uri.path().to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (code, answer) = respond(&seen);
            log.lock().expect("log").push(seen);
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(answer.to_string().into_bytes()))
                .expect("response");
            Ok::<_, Infallible>(response)
        }
    });
    let client = kube::Client::new(service, "default");
    let (_elector, leadership) = Elector::new(client.clone(), LeaderElection::Disabled);
    let (feedback, received) = mpsc::unbounded_channel();
    let options = ApplierOptions {
        identity: "test".to_owned(),
        bind_concurrency: concurrency,
        write_concurrency: concurrency,
        gpu_sharing,
    };
    let applier = Applier::new(
        client,
        EvictionVersion::V1,
        leadership.guard(),
        feedback,
        options,
        ApplyMetrics::default(),
    );
    (applier, log, received)
}
