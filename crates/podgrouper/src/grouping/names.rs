//! PodGroup and sub-group names: KAI's formats (`pg-<owner>-<uid>`), kept within Kubernetes' limits by
//! a stable hash suffix instead of a bare truncation (two long names never collide by losing their
//! distinguishing tail).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, TypeMeta};

/// Longest object name (DNS subdomain).
pub(crate) const MAX_NAME: usize = 253;
/// Longest label value.
pub(crate) const MAX_LABEL_VALUE: usize = 63;

/// `pg-<name>-<uid>[-<suffix>]`, bounded to a valid object name.
pub(crate) fn pg_name(name: &str, uid: &str, suffix: Option<&str>) -> String {
    let mut s = format!("pg-{name}-{uid}");
    if let Some(suffix) = suffix {
        s.push('-');
        s.push_str(suffix);
    }
    bounded_name(&s)
}

/// `raw` as a valid object name: unchanged when it already is one; otherwise lower-cased, invalid
/// characters replaced and, when anything was lost or it is too long, cut and suffixed with a hash of
/// the original.
#[must_use]
pub fn bounded_name(raw: &str) -> String {
    bound(raw, MAX_NAME, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'
    })
}

/// `raw` as a valid label value (at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends), by the same method as [`bounded_name`].
#[must_use]
pub fn bounded_label_value(raw: &str) -> String {
    bound(raw, MAX_LABEL_VALUE, |c| {
        c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'
    })
}

fn bound(raw: &str, max: usize, allowed: impl Fn(char) -> bool) -> String {
    let valid_ends = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
    };
    if raw.len() <= max && raw.chars().all(&allowed) && valid_ends(raw) {
        return raw.to_owned();
    }
    let cleaned: String = raw
        .chars()
        .map(|c| {
            let c = if allowed(c) { c } else { c.to_ascii_lowercase() };
            if allowed(c) { c } else { '-' }
        })
        .collect();
    let hash = format!("{:016x}", fnv1a64(raw.as_bytes()));
    // Keep the readable head, then `-<hash>`; the hash ends alphanumeric, the head must start so.
    let head_len = max - hash.len() - 1;
    let head: String = cleaned.chars().take(head_len).collect();
    let head = head.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let head = head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if head.is_empty() {
        hash
    } else {
        format!("{head}-{hash}")
    }
}

/// FNV-1a, 64 bits: stable across versions and platforms (unlike `DefaultHasher`).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A pod seen as an owner-chain object (metadata only), for bare pods and pods owning pods.
#[must_use]
pub fn pod_as_object(pod: &Pod) -> DynamicObject {
    DynamicObject {
        types: Some(TypeMeta {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
        }),
        metadata: pod.metadata.clone(),
        data: serde_json::Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept() {
        assert_eq!(pg_name("train", "1234", None), "pg-train-1234");
        assert_eq!(pg_name("js", "u", Some("worker")), "pg-js-u-worker");
    }

    #[test]
    fn long_names_are_hashed_within_the_limit_and_do_not_collide() {
        let a = "a".repeat(300);
        let b = format!("{}b", "a".repeat(299));
        let (na, nb) = (bounded_name(&a), bounded_name(&b));
        assert_eq!(na.len(), MAX_NAME);
        assert_eq!(nb.len(), MAX_NAME);
        assert_ne!(na, nb);
        assert_eq!(na, bounded_name(&a), "stable");
        let label = bounded_label_value(&a);
        assert_eq!(label.len(), MAX_LABEL_VALUE);
        assert!(label.starts_with("aaaa"));
    }

    #[test]
    fn invalid_characters_are_replaced_and_hashed() {
        let n = bounded_name("Spark_App.ID");
        assert!(n.starts_with("spark-app.id-"), "{n}");
        assert_ne!(bounded_name("Spark_App"), bounded_name("spark-app"));
        assert_eq!(bounded_label_value("Worker_Group"), "Worker_Group");
        assert!(bounded_label_value("-x-").ends_with(&format!("{:016x}", fnv1a64(b"-x-"))));
    }
}
