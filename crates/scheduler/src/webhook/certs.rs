//! The webhook's certificates when the scheduler keeps them itself (no cert-manager): a CA, whose
//! certificate goes into the webhook configuration's `caBundle`, and a serving certificate it signs for
//! the webhook's host names. Both live in one Secret (`tls.crt`, `tls.key`, `ca.crt`, as cert-manager
//! writes them, plus `ca.key`), so every replica serves the same certificate and a restart keeps it.
//!
//! Renewal, decided by [`plan`] (pure) and carried out by [`renew`]:
//! - the serving certificate is reissued once a third of its validity is left, when the host names
//!   change, or when it was signed by a CA that is no longer the current one;
//! - the CA is replaced once a third of its validity is left, in two steps so that the API server never
//!   meets a certificate it cannot verify: the new CA joins the bundle beside the old one, and only once
//!   the webhook configuration carries that bundle is a serving certificate signed by the new CA; the old
//!   CA leaves the bundle when it expires.

use std::collections::BTreeMap;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};

/// Secret data key of the serving certificate (PEM).
pub const CERT_KEY: &str = "tls.crt";
/// Secret data key of the serving certificate's private key (PEM, PKCS #8).
pub const PRIVATE_KEY: &str = "tls.key";
/// Secret data key of the CA bundle (PEM; the current CA first).
pub const CA_KEY: &str = "ca.crt";
/// Secret data key of the current CA's private key (PEM, PKCS #8). Only in a Secret the scheduler keeps.
pub const CA_PRIVATE_KEY: &str = "ca.key";

/// The prefix of every annotation the scheduler keeps on the Secret.
pub const ANNOTATION_PREFIX: &str = "kai.scheduler/webhook-";
const ANNOTATION_CA_NAME: &str = "kai.scheduler/webhook-ca-name";
const ANNOTATION_CA_NOT_AFTER: &str = "kai.scheduler/webhook-ca-not-after";
const ANNOTATION_PREVIOUS_CA_NAME: &str = "kai.scheduler/webhook-previous-ca-name";
const ANNOTATION_PREVIOUS_CA_NOT_AFTER: &str = "kai.scheduler/webhook-previous-ca-not-after";
const ANNOTATION_CERT_ISSUER: &str = "kai.scheduler/webhook-cert-issuer";
const ANNOTATION_CERT_NOT_AFTER: &str = "kai.scheduler/webhook-cert-not-after";
const ANNOTATION_CERT_HOSTS: &str = "kai.scheduler/webhook-cert-hosts";

/// Certificates are valid from a little before they are made, for clocks a little behind.
const BACKDATE_SECS: i64 = 300;

/// How long certificates are made valid for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The CA.
    pub ca: Duration,
    /// The serving certificate (at most as long as the CA that signs it).
    pub cert: Duration,
}

impl Validity {
    fn ca_secs(self) -> i64 {
        i64::try_from(self.ca.as_secs()).unwrap_or(i64::MAX)
    }

    fn cert_secs(self) -> i64 {
        i64::try_from(self.cert.as_secs()).unwrap_or(i64::MAX)
    }
}

/// One CA certificate in the bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca {
    /// Its common name (unique per CA: the time it was made).
    pub name: String,
    /// The certificate (PEM).
    pub pem: String,
    /// End of validity, in seconds since the epoch.
    pub not_after: i64,
}

/// What the webhook's Secret holds when the scheduler keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The CA that signs new serving certificates.
    pub ca: Ca,
    /// The CA before it, still in the bundle until it expires.
    pub previous_ca: Option<Ca>,
    /// The current CA's private key (PEM).
    pub ca_key: String,
    /// The serving certificate (PEM).
    pub cert: String,
    /// Its private key (PEM).
    pub key: String,
    /// Its end of validity, in seconds since the epoch.
    pub cert_not_after: i64,
    /// The name of the CA that signed it.
    pub cert_issuer: String,
    /// The host names and addresses it is valid for.
    pub cert_hosts: Vec<String>,
}

impl Stored {
    /// The CA bundle for the webhook configuration: the current CA, then the previous one.
    #[must_use]
    pub fn bundle(&self) -> String {
        let mut out = self.ca.pem.clone();
        if let Some(previous) = &self.previous_ca {
            out.push_str(&previous.pem);
        }
        out
    }

    /// The Secret's data and annotations.
    #[must_use]
    pub fn to_secret(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let data = BTreeMap::from([
            (CERT_KEY.to_owned(), self.cert.clone()),
            (PRIVATE_KEY.to_owned(), self.key.clone()),
            (CA_KEY.to_owned(), self.bundle()),
            (CA_PRIVATE_KEY.to_owned(), self.ca_key.clone()),
        ]);
        let mut annotations = BTreeMap::from([
            (ANNOTATION_CA_NAME.to_owned(), self.ca.name.clone()),
            (ANNOTATION_CA_NOT_AFTER.to_owned(), self.ca.not_after.to_string()),
            (ANNOTATION_CERT_ISSUER.to_owned(), self.cert_issuer.clone()),
            (
                ANNOTATION_CERT_NOT_AFTER.to_owned(),
                self.cert_not_after.to_string(),
            ),
            (ANNOTATION_CERT_HOSTS.to_owned(), self.cert_hosts.join(",")),
        ]);
        if let Some(previous) = &self.previous_ca {
            annotations.insert(ANNOTATION_PREVIOUS_CA_NAME.to_owned(), previous.name.clone());
            annotations.insert(
                ANNOTATION_PREVIOUS_CA_NOT_AFTER.to_owned(),
                previous.not_after.to_string(),
            );
        }
        (data, annotations)
    }

    /// Reads what [`Stored::to_secret`] wrote; `None` when anything is missing or unreadable (the
    /// Secret is then made anew).
    #[must_use]
    pub fn from_secret(
        data: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Option<Self> {
        let text = |key: &str| data.get(key).filter(|v| !v.is_empty()).cloned();
        let note = |key: &str| annotations.get(key).filter(|v| !v.is_empty()).cloned();
        let time = |key: &str| note(key).and_then(|v| v.parse::<i64>().ok());
        let mut certificates = pem_certificates(&text(CA_KEY)?).into_iter();
        let ca = Ca {
            name: note(ANNOTATION_CA_NAME)?,
            pem: certificates.next()?,
            not_after: time(ANNOTATION_CA_NOT_AFTER)?,
        };
        let previous_ca = match (note(ANNOTATION_PREVIOUS_CA_NAME), certificates.next()) {
            (Some(name), Some(pem)) => Some(Ca {
                name,
                pem,
                not_after: time(ANNOTATION_PREVIOUS_CA_NOT_AFTER)?,
            }),
            _ => None,
        };
        Some(Self {
            ca,
            previous_ca,
            ca_key: text(CA_PRIVATE_KEY)?,
            cert: text(CERT_KEY)?,
            key: text(PRIVATE_KEY)?,
            cert_not_after: time(ANNOTATION_CERT_NOT_AFTER)?,
            cert_issuer: note(ANNOTATION_CERT_ISSUER)?,
            cert_hosts: note(ANNOTATION_CERT_HOSTS)?
                .split(',')
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// The PEM blocks of certificates in `text`, each with its own lines.
fn pem_certificates(text: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let stop = start + end + END.len();
        out.push(format!("{}\n", &rest[start..stop]));
        rest = &rest[stop..];
    }
    out
}

/// The next change to the stored certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to change.
    Keep,
    /// Nothing usable is stored (or the CA expired): a new CA and serving certificate.
    Fresh,
    /// The CA nears its end: a new one joins the bundle; the serving certificate stays for now.
    NewCa,
    /// A new serving certificate from the current CA.
    Reissue,
    /// The previous CA expired: it leaves the bundle.
    DropPreviousCa,
}

/// What to do next with `stored` (what the Secret holds) at `now` (seconds since the epoch) for a server
/// reached as `hosts`. `bundle_served`: the webhook configuration carries the current bundle (or there
/// is none to keep), so a certificate of the current CA can be served.
#[must_use]
pub fn plan(
    stored: Option<&Stored>,
    hosts: &[String],
    now: i64,
    validity: Validity,
    bundle_served: bool,
) -> Step {
    let Some(s) = stored else {
        return Step::Fresh;
    };
    if now >= s.ca.not_after {
        return Step::Fresh;
    }
    if s.previous_ca.is_none() && s.ca.not_after - now < validity.ca_secs() / 3 {
        return Step::NewCa;
    }
    let expired = now >= s.cert_not_after;
    let stale_issuer = s.cert_issuer != s.ca.name;
    if expired || (stale_issuer && bundle_served) {
        return Step::Reissue;
    }
    if !stale_issuer
        && (s.cert_not_after - now < validity.cert_secs() / 3 || s.cert_hosts.as_slice() != hosts)
    {
        return Step::Reissue;
    }
    if s.previous_ca.as_ref().is_some_and(|p| now >= p.not_after) {
        return Step::DropPreviousCa;
    }
    Step::Keep
}

/// Carries out `step` on `stored` (`None` only for [`Step::Fresh`]).
///
/// # Errors
/// When a key or certificate cannot be made (or the stored CA key cannot be read).
pub fn renew(
    step: Step,
    stored: Option<&Stored>,
    hosts: &[String],
    now: i64,
    validity: Validity,
) -> Result<Option<Stored>, String> {
    let fresh = || -> Result<Stored, String> {
        let (ca, ca_key) = new_ca(now, validity)?;
        let (cert, key, cert_not_after) = issue(&ca, &ca_key, hosts, now, validity)?;
        Ok(Stored {
            cert_issuer: ca.name.clone(),
            ca,
            previous_ca: None,
            ca_key,
            cert,
            key,
            cert_not_after,
            cert_hosts: hosts.to_vec(),
        })
    };
    let Some(s) = stored else {
        return match step {
            Step::Keep => Ok(None),
            _ => fresh().map(Some),
        };
    };
    let next = match step {
        Step::Keep => return Ok(None),
        Step::Fresh => fresh()?,
        Step::NewCa => {
            let (ca, ca_key) = new_ca(now, validity)?;
            Stored {
                previous_ca: Some(s.ca.clone()),
                ca,
                ca_key,
                ..s.clone()
            }
        }
        Step::Reissue => {
            let (cert, key, cert_not_after) = issue(&s.ca, &s.ca_key, hosts, now, validity)?;
            Stored {
                cert,
                key,
                cert_not_after,
                cert_issuer: s.ca.name.clone(),
                cert_hosts: hosts.to_vec(),
                ..s.clone()
            }
        }
        Step::DropPreviousCa => Stored {
            previous_ca: None,
            ..s.clone()
        },
    };
    Ok(Some(next))
}

fn offset(secs: i64) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| format!("time {secs} out of range: {e}"))
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn new_ca(now: i64, validity: Validity) -> Result<(Ca, String), String> {
    let name = format!("kai-scheduler-webhook-ca-{now}");
    let key = KeyPair::generate().map_err(|e| format!("making a CA key: {e}"))?;
    let mut params = ca_params(&name);
    params.not_before = offset(now - BACKDATE_SECS)?;
    let not_after = now.saturating_add(validity.ca_secs());
    params.not_after = offset(not_after)?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("making the CA certificate: {e}"))?;
    Ok((
        Ca {
            name,
            pem: cert.pem(),
            not_after,
        },
        key.serialize_pem(),
    ))
}

/// A serving certificate for `hosts` signed by `ca`, valid for [`Validity::cert`] but never past the CA.
fn issue(
    ca: &Ca,
    ca_key: &str,
    hosts: &[String],
    now: i64,
    validity: Validity,
) -> Result<(String, String, i64), String> {
    let signer = KeyPair::from_pem(ca_key).map_err(|e| format!("reading the CA key: {e}"))?;
    let issuer = Issuer::new(ca_params(&ca.name), signer);
    let key = KeyPair::generate().map_err(|e| format!("making a serving key: {e}"))?;
    let mut params =
        CertificateParams::new(hosts.to_vec()).map_err(|e| format!("host names {hosts:?}: {e}"))?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        hosts.first().map_or("kai-scheduler-webhook", String::as_str),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = offset(now - BACKDATE_SECS)?;
    let not_after = now.saturating_add(validity.cert_secs()).min(ca.not_after);
    params.not_after = offset(not_after)?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("signing the serving certificate: {e}"))?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

#[cfg(test)]
mod tests;
