//! KAI's per-kind defaults: a ConfigMap whose `types` key holds a JSON list of
//! `{typeName, group, priorityName, preemptibility}`, giving a workload kind the priority class and
//! preemptibility its PodGroups get when no label names them (before the built-in default of the kind).
//!
//! Parsing is pure and forgiving per entry: an entry that cannot be used is reported and skipped, the
//! others still apply; only a ConfigMap that cannot be read at all is an error.

use std::collections::{BTreeMap, HashMap};

use api::Preemptibility;
use serde::Deserialize;

/// The ConfigMap key holding the list (KAI's).
pub const TYPES_KEY: &str = "types";

/// Why a defaults ConfigMap could not be read at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KindDefaultsError {
    /// The ConfigMap has no `types` key.
    #[error("the ConfigMap has no `{TYPES_KEY}` key")]
    MissingKey,
    /// `types` is not a JSON list of objects.
    #[error("`{TYPES_KEY}` is not a JSON list of {{typeName, group, priorityName, preemptibility}}: {0}")]
    NotAList(String),
}

/// One kind's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindDefault {
    /// Priority class of the kind's PodGroups, when set.
    pub priority_class: Option<String>,
    /// Preemptibility of the kind's PodGroups, when set.
    pub preemptibility: Option<Preemptibility>,
}

/// Defaults per kind, keyed `Kind.group` (`Deployment.apps`) or `Kind` alone (any group), as KAI keys
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindDefaults {
    by_kind: HashMap<String, KindDefault>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    type_name: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    priority_name: String,
    #[serde(default)]
    preemptibility: String,
}

fn key(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    }
}

impl KindDefaults {
    /// Reads a ConfigMap's data. Entries that cannot be used are skipped and described in the second
    /// value (one line each); a later entry for the same kind replaces an earlier one, as in KAI.
    ///
    /// # Errors
    /// [`KindDefaultsError`] when the `types` key is missing or not a JSON list of objects.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<(Self, Vec<String>), KindDefaultsError> {
        let text = data.get(TYPES_KEY).ok_or(KindDefaultsError::MissingKey)?;
        let entries: Vec<Entry> =
            serde_json::from_str(text).map_err(|e| KindDefaultsError::NotAList(e.to_string()))?;
        let mut by_kind = HashMap::new();
        let mut problems = Vec::new();
        for (i, e) in entries.into_iter().enumerate() {
            if e.type_name.is_empty() {
                problems.push(format!("entry {i}: no typeName; skipped"));
                continue;
            }
            let preemptibility = match e.preemptibility.to_ascii_lowercase().as_str() {
                "" => None,
                "preemptible" => Some(Preemptibility::Preemptible),
                "non-preemptible" => Some(Preemptibility::NonPreemptible),
                other => {
                    problems.push(format!(
                        "entry {i} ({}): preemptibility {other:?} is neither preemptible nor \
                         non-preemptible; ignored",
                        key(&e.group, &e.type_name)
                    ));
                    None
                }
            };
            let priority_class = Some(e.priority_name).filter(|p| !p.is_empty());
            by_kind.insert(
                key(&e.group, &e.type_name),
                KindDefault {
                    priority_class,
                    preemptibility,
                },
            );
        }
        Ok((Self { by_kind }, problems))
    }

    /// The defaults of a kind: by kind and group first, then by kind alone.
    #[must_use]
    pub fn get(&self, group: &str, kind: &str) -> Option<&KindDefault> {
        self.by_kind
            .get(&key(group, kind))
            .or_else(|| self.by_kind.get(kind))
    }

    /// Number of kinds with defaults.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_kind.len()
    }

    /// Whether no kind has defaults.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(types: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(TYPES_KEY.to_owned(), types.to_owned())])
    }

    #[test]
    fn entries_by_kind_and_group_then_kind_alone() {
        let (d, problems) = KindDefaults::from_data(&data(
            r#"[{"typeName":"Deployment","group":"apps","priorityName":"inference","preemptibility":"non-preemptible"},
                {"typeName":"Job","priorityName":"build"},
                {"typeName":"PyTorchJob","group":"kubeflow.org","preemptibility":"Preemptible"}]"#,
        ))
        .expect("parsed");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(d.len(), 3);
        assert_eq!(
            d.get("apps", "Deployment"),
            Some(&KindDefault {
                priority_class: Some("inference".into()),
                preemptibility: Some(Preemptibility::NonPreemptible),
            })
        );
        assert_eq!(d.get("apps", "StatefulSet"), None);
        assert_eq!(d.get("", "Deployment"), None, "the group is part of the key");
        assert_eq!(
            d.get("batch", "Job").and_then(|k| k.priority_class.as_deref()),
            Some("build"),
            "an entry without a group matches the kind in any group"
        );
        assert_eq!(
            d.get("kubeflow.org", "PyTorchJob").and_then(|k| k.preemptibility),
            Some(Preemptibility::Preemptible),
            "case-insensitive, as KAI"
        );
    }

    #[test]
    fn bad_entries_are_reported_and_the_rest_kept() {
        let (d, problems) = KindDefaults::from_data(&data(
            r#"[{"group":"apps","priorityName":"x"},
                {"typeName":"Job","group":"batch","priorityName":"build","preemptibility":"sometimes"}]"#,
        ))
        .expect("parsed");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("no typeName"));
        assert!(problems[1].contains("\"sometimes\""));
        let job = d.get("batch", "Job").expect("kept");
        assert_eq!(job.priority_class.as_deref(), Some("build"));
        assert_eq!(job.preemptibility, None);
    }

    #[test]
    fn unreadable_configmaps_are_errors() {
        assert_eq!(
            KindDefaults::from_data(&BTreeMap::new()),
            Err(KindDefaultsError::MissingKey)
        );
        assert!(matches!(
            KindDefaults::from_data(&data("{\"typeName\":\"Job\"}")),
            Err(KindDefaultsError::NotAList(_))
        ));
        assert!(matches!(
            KindDefaults::from_data(&data("[1, 2]")),
            Err(KindDefaultsError::NotAList(_))
        ));
        let (empty, problems) = KindDefaults::from_data(&data("[]")).expect("an empty list");
        assert!(empty.is_empty() && problems.is_empty());
    }
}
