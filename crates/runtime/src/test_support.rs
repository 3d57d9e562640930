//! A `kube::Client` backed by a closure instead of an API server, for tests of the thin I/O functions.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
};

use http::{Method, Request, Response, StatusCode};
use kube::{Client, client::Body};

/// One request as the fake server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) body: serde_json::Value,
}

/// A client whose every request is answered by `respond`; returns the log of requests too.
pub(crate) fn fake_client(
    respond: impl Fn(&Seen) -> (StatusCode, serde_json::Value) + Send + Sync + 'static,
) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let respond = Arc::new(respond);
    let seen_log = log.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let (respond, log) = (respond.clone(), seen_log.clone());
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let body = if bytes.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("json")
            };
            let seen = Seen {
                method: parts.method,
                path: parts.uri.path().to_owned(),
                body,
            };
            let (code, json) = respond(&seen);
            log.lock().expect("log").push(seen);
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(json.to_string().into_bytes()))
                .expect("response");
            Ok::<_, Infallible>(response)
        }
    });
    (Client::new(service, "default"), log)
}

/// A Kubernetes `Status` error body.
pub(crate) fn status(code: StatusCode, reason: &str, message: &str) -> (StatusCode, serde_json::Value) {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "reason": reason, "code": code.as_u16(), "message": message,
    });
    (code, body)
}
