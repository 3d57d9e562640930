use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::{Step, Stored, Validity, plan, renew};

const DAY: i64 = 86_400;
const VALIDITY: Validity = Validity {
    ca: Duration::from_secs(300 * 86_400),
    cert: Duration::from_secs(30 * 86_400),
};
const START: i64 = 1_800_000_000;

fn hosts() -> Vec<String> {
    vec![
        "kai-scheduler-webhook.kai-scheduler.svc".to_owned(),
        "127.0.0.1".to_owned(),
    ]
}

fn fresh(now: i64) -> Stored {
    renew(Step::Fresh, None, &hosts(), now, VALIDITY)
        .expect("made")
        .expect("a new store")
}

/// Whether the API server, trusting the stored bundle, would accept the stored serving certificate for
/// `host` at `now`.
fn verifies(bundle: &str, s: &Stored, host: &str, now: i64) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots
            .add(ca.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let cert = CertificateDer::from_pem_slice(s.cert.as_bytes()).map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let at = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(now).unwrap_or(0)));
    verifier
        .verify_server_cert(&cert, &[], &name, &[], at)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[test]
fn a_fresh_store_serves_every_host_and_round_trips_through_the_secret() {
    let s = fresh(START);
    for host in hosts() {
        verifies(&s.bundle(), &s, &host, START).unwrap_or_else(|e| panic!("{host}: {e}"));
    }
    assert!(
        verifies(&s.bundle(), &s, "other.example", START).is_err(),
        "only its own hosts"
    );
    let (data, annotations) = s.to_secret();
    assert_eq!(Stored::from_secret(&data, &annotations), Some(s.clone()));
    assert_eq!(plan(Some(&s), &hosts(), START, VALIDITY, true), Step::Keep);

    let mut broken = data.clone();
    broken.remove(super::CA_PRIVATE_KEY);
    assert_eq!(Stored::from_secret(&broken, &annotations), None);
    assert_eq!(plan(None, &hosts(), START, VALIDITY, true), Step::Fresh);
}

#[test]
fn the_serving_certificate_is_reissued_before_it_expires_and_when_hosts_change() {
    let s = fresh(START);
    assert_eq!(
        plan(Some(&s), &hosts(), START + 19 * DAY, VALIDITY, true),
        Step::Keep
    );
    let due = START + 21 * DAY;
    assert_eq!(plan(Some(&s), &hosts(), due, VALIDITY, true), Step::Reissue);
    let next = renew(Step::Reissue, Some(&s), &hosts(), due, VALIDITY)
        .expect("made")
        .expect("changed");
    assert_ne!(next.cert, s.cert);
    assert_eq!(next.ca, s.ca, "the CA stays");
    verifies(&next.bundle(), &next, &hosts()[0], due).expect("valid");
    assert_eq!(plan(Some(&next), &hosts(), due, VALIDITY, true), Step::Keep);

    let moved = vec!["kai-webhook.other.svc".to_owned()];
    assert_eq!(plan(Some(&s), &moved, START, VALIDITY, true), Step::Reissue);
    let expired = START + 31 * DAY;
    assert_eq!(
        plan(Some(&s), &hosts(), expired, VALIDITY, false),
        Step::Reissue,
        "an expired certificate is replaced even before the bundle is confirmed"
    );
}

#[test]
fn a_new_ca_joins_the_bundle_before_it_signs_the_served_certificate() {
    let s = fresh(START);
    let late = START + 201 * DAY;
    // Keep the serving certificate fresh up to then.
    let s = renew(Step::Reissue, Some(&s), &hosts(), late - DAY, VALIDITY)
        .expect("made")
        .expect("changed");
    assert_eq!(plan(Some(&s), &hosts(), late, VALIDITY, true), Step::NewCa);
    let rolled = renew(Step::NewCa, Some(&s), &hosts(), late, VALIDITY)
        .expect("made")
        .expect("changed");
    assert_ne!(rolled.ca, s.ca);
    assert_eq!(rolled.previous_ca.as_ref(), Some(&s.ca));
    assert_eq!(rolled.cert, s.cert, "the served certificate stays for now");
    // The old certificate verifies against the new bundle, so nothing breaks while it is served.
    verifies(&rolled.bundle(), &rolled, &hosts()[0], late).expect("old certificate, new bundle");

    // Until the webhook configuration carries the new bundle, the certificate is not switched.
    assert_eq!(plan(Some(&rolled), &hosts(), late, VALIDITY, false), Step::Keep);
    assert_eq!(plan(Some(&rolled), &hosts(), late, VALIDITY, true), Step::Reissue);
    let switched = renew(Step::Reissue, Some(&rolled), &hosts(), late, VALIDITY)
        .expect("made")
        .expect("changed");
    assert_eq!(switched.cert_issuer, switched.ca.name);
    verifies(&switched.bundle(), &switched, &hosts()[0], late).expect("new certificate, new bundle");
    assert!(
        verifies(&s.bundle(), &switched, &hosts()[0], late).is_err(),
        "the old bundle alone would not do: hence the order"
    );
    let (data, annotations) = switched.to_secret();
    assert_eq!(Stored::from_secret(&data, &annotations), Some(switched.clone()));

    // The old CA leaves the bundle when it expires.
    let after = START + 301 * DAY;
    let fresh_cert = renew(Step::Reissue, Some(&switched), &hosts(), after - DAY, VALIDITY)
        .expect("made")
        .expect("changed");
    assert_eq!(
        plan(Some(&fresh_cert), &hosts(), after, VALIDITY, true),
        Step::DropPreviousCa
    );
    let dropped = renew(Step::DropPreviousCa, Some(&fresh_cert), &hosts(), after, VALIDITY)
        .expect("made")
        .expect("changed");
    assert_eq!(dropped.previous_ca, None);
    verifies(&dropped.bundle(), &dropped, &hosts()[0], after).expect("still served");
}

#[test]
fn an_expired_ca_starts_over() {
    let s = fresh(START);
    assert_eq!(
        plan(Some(&s), &hosts(), START + 301 * DAY, VALIDITY, true),
        Step::Fresh
    );
}

#[test]
fn serving_certificates_never_outlive_their_ca() {
    let short = Validity {
        ca: Duration::from_secs(10 * 86_400),
        cert: Duration::from_secs(30 * 86_400),
    };
    let s = renew(Step::Fresh, None, &hosts(), START, short)
        .expect("made")
        .expect("new");
    assert_eq!(s.cert_not_after, s.ca.not_after);
}
