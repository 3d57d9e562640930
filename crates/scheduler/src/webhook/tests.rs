use std::sync::Arc;
use std::time::Duration;

use api::keys;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::certs::{self, Step, Validity};
use super::tls::CertStore;
use super::{PATH, WebhookMetrics};

const VALIDITY: Validity = Validity {
    ca: Duration::from_secs(3600),
    cert: Duration::from_secs(600),
};

fn review(pod: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": { "group": "", "version": "v1", "kind": "Pod" },
            "resource": { "group": "", "version": "v1", "resource": "pods" },
            "requestKind": { "group": "", "version": "v1", "kind": "Pod" },
            "requestResource": { "group": "", "version": "v1", "resource": "pods" },
            "namespace": "team-a", "operation": "CREATE",
            "userInfo": { "username": "admin" },
            "object": pod, "oldObject": null, "dryRun": false,
            "options": { "apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions" },
        },
    })
}

fn sharing_pod(fraction: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "generateName": "worker-", "annotations": { keys::GPU_FRACTION: fraction } },
        "spec": { "schedulerName": keys::SCHEDULER_NAME, "containers": [{ "name": "c", "image": "cuda" }] },
    })
}

/// A server on a free loopback port serving `store`; returns its port.
async fn start(store: Arc<CertStore>) -> u16 {
    let tcp = super::bind(([127, 0, 0, 1], 0).into()).await.expect("bound");
    let port = tcp.local_addr().expect("address").port();
    tokio::spawn(super::serve(
        tcp,
        store,
        keys::SCHEDULER_NAME.to_owned(),
        WebhookMetrics::default(),
        std::future::pending(),
    ));
    port
}

/// Posts `body` over TLS trusting only `bundle`, as the API server does; returns the certificate the
/// server showed and the response body.
async fn post(port: u16, bundle: &str, body: &Value) -> Result<(Vec<u8>, Value), String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots
            .add(ca.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let mut tls = connector.connect(name, tcp).await.map_err(|e| e.to_string())?;
    let shown = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let body = body.to_string();
    let request = format!(
        "POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response);
    let (head, payload) = text.split_once("\r\n\r\n").ok_or("no HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("answered {head}"));
    }
    let payload: Value = serde_json::from_str(payload).map_err(|e| format!("{e}: {payload}"))?;
    Ok((shown, payload))
}

fn fresh(now: i64) -> certs::Stored {
    certs::renew(Step::Fresh, None, &["127.0.0.1".to_owned()], now, VALIDITY)
        .expect("made")
        .expect("new")
}

#[tokio::test]
async fn the_webhook_answers_over_tls_and_takes_a_renewed_certificate_without_a_restart() {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let first = fresh(now);
    let store = Arc::new(CertStore::default());
    let port = start(Arc::clone(&store)).await;
    assert!(
        post(port, &first.bundle(), &review(&sharing_pod("0.5")))
            .await
            .is_err(),
        "no certificate loaded yet: no handshake"
    );
    assert!(store.load(&first.cert, &first.key).expect("loads"));
    assert!(
        !store.load(&first.cert, &first.key).expect("loads"),
        "the same again is no change"
    );

    let (shown, answer) = post(port, &first.bundle(), &review(&sharing_pod("0.5")))
        .await
        .expect("answered");
    assert_eq!(
        shown,
        CertificateDer::from_pem_slice(first.cert.as_bytes())
            .expect("pem")
            .to_vec()
    );
    let response = &answer["response"];
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    assert!(!response["patch"].is_null(), "{answer}");

    // A new CA and certificate: the next connection shows them, verified by the new bundle.
    let second = fresh(now + 1);
    assert!(store.load(&second.cert, &second.key).expect("loads"));
    let (shown, _) = post(port, &second.bundle(), &review(&sharing_pod("0.5")))
        .await
        .expect("answered with the new certificate");
    assert_eq!(
        shown,
        CertificateDer::from_pem_slice(second.cert.as_bytes())
            .expect("pem")
            .to_vec()
    );
    assert!(
        post(port, &first.bundle(), &review(&sharing_pod("0.5")))
            .await
            .is_err(),
        "the old bundle alone no longer verifies it"
    );
}

fn answer_for(pod: &Value) -> Value {
    let review: kube::core::admission::AdmissionReview<kube::core::DynamicObject> =
        serde_json::from_value(review(pod)).expect("a review");
    let request = review.try_into().expect("a request");
    let response = super::answer(&request, keys::SCHEDULER_NAME, &WebhookMetrics::default());
    serde_json::to_value(response.into_review()).expect("JSON")
}

#[test]
fn answers_carry_the_patch_the_refusal_or_nothing() {
    let patched = answer_for(&sharing_pod("0.5"));
    let response = &patched["response"];
    assert_eq!(response["allowed"], true);
    // The patch as the API server reads it (Go's []byte: base64, or the byte list kube writes).
    let bytes: Vec<u8> = match &response["patch"] {
        Value::Array(items) => items
            .iter()
            .map(|b| u8::try_from(b.as_u64().expect("a byte")).expect("a byte"))
            .collect(),
        other => panic!("patch is {other}"),
    };
    let ops: Value = serde_json::from_slice(&bytes).expect("a JSON patch");
    let mut pod = sharing_pod("0.5");
    let ops: json_patch::Patch = serde_json::from_value(ops).expect("ops");
    json_patch::patch(&mut pod, &ops).expect("applies");
    assert!(pod["metadata"]["annotations"][keys::GPU_SHARING_CONFIGMAP].is_string());
    assert_eq!(
        pod["spec"]["containers"][0]["env"][0]["name"],
        keys::NVIDIA_VISIBLE_DEVICES
    );

    let refused = answer_for(&sharing_pod("1"));
    assert_eq!(refused["response"]["allowed"], false);
    let message = refused["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("GPU sharing: gpu-fraction must be below 1"),
        "{message}"
    );

    let mut plain = sharing_pod("0.5");
    plain["metadata"]["annotations"] = json!({});
    let unchanged = answer_for(&plain);
    assert_eq!(unchanged["response"]["allowed"], true);
    assert!(unchanged["response"].get("patch").is_none(), "{unchanged}");
}
