//! `serving.knative.dev` workloads (Service → Configuration → Revision → Deployment → pods).
//!
//! Gang mode (the default): one group per Revision, `pg-<revision>-<uid>`, owned by the Revision, of
//! `autoscaling.knative.dev/min-scale` pods. Per-pod mode: one group per pod, owned by the pod. Both at
//! `inference` priority.

use api::keys;

use super::common::{annotations, name, owner_ref, uid};
use super::generic::{per_pod, whole};
use super::json::group_kind;
use super::names::{pg_name, pod_as_object};
use super::{Shape, Warning, Workload};

pub(crate) fn knative(w: &Workload<'_>, warnings: &mut Vec<Warning>) -> Shape {
    let top = w.top.as_ref();
    let revision = std::iter::once(top)
        .chain(w.below.iter().map(AsRef::as_ref))
        .find(|o| group_kind(o) == ("serving.knative.dev", "Revision"));
    let per_pod_shape = || {
        let pod = pod_as_object(w.pod);
        per_pod(w, uid(&pod), &pod, "inference")
    };
    if !w.settings.knative_gang {
        return per_pod_shape();
    }
    let Some(revision) = revision else {
        warnings.push(Warning::Workload {
            detail: format!("no Knative Revision found below {}; one group per pod", name(top)),
        });
        return per_pod_shape();
    };
    let min_scale = match annotations(revision).get(keys::KNATIVE_MIN_SCALE) {
        None => 1,
        Some(v) => v
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|m| *m >= 1)
            .unwrap_or_else(|| {
                if v.trim() != "0" {
                    warnings.push(Warning::InvalidValue {
                        key: keys::KNATIVE_MIN_SCALE.to_owned(),
                        value: v.clone(),
                        detail: "expected a non-negative integer; using 1".to_owned(),
                    });
                }
                1
            }),
    };
    let mut shape = whole(w, min_scale, "inference");
    shape.name = pg_name(name(revision), uid(revision), None);
    shape.owner = owner_ref(revision);
    shape.gang = true;
    shape
}
