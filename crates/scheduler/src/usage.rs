//! Usage-based fair share's I/O edge. With `usageDBConfig` set, the loop keeps the queues' usage
//! record (`scheduler_core::fairshare::UsageRecord`): after each cycle it folds the cycle's sample (what
//! every queue holds) with the cycle's time, every `fetchInterval` it puts the normalised usage into the
//! model, and every [`PERSIST_INTERVAL_MS`] it writes the record to a ConfigMap in the scheduler's
//! namespace (server-side apply, field manager [`FIELD_MANAGER`]), from which a new leader restores it.
//! Only the leader folds and writes (the fenced client refuses a deposed leader's write). A missing
//! ConfigMap starts an empty record; an unreadable or corrupt one is logged and also starts empty, so the
//! next write replaces it.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use scheduler_core::config::UsageSettings;
use scheduler_core::fairshare::{UsageError, UsageRecord, UsageSample};
use scheduler_core::model::{Cluster, Millis};
use serde_json::json;
use tracing::{info, warn};

/// Key of the record in the ConfigMap's data.
pub const DATA_KEY: &str = "usage.yaml";

/// Server-side apply field manager of the usage ConfigMap.
pub const FIELD_MANAGER: &str = "kai-scheduler-usage";

/// How often the record is written.
pub const PERSIST_INTERVAL_MS: Millis = 60_000;

/// Errors of this module: a stored record that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum UsageStoreError {
    /// The API call failed.
    #[error("usage ConfigMap {name}: {source}")]
    Api {
        /// The ConfigMap.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// The ConfigMap exists but has no record under [`DATA_KEY`].
    #[error("usage ConfigMap {0} has no {DATA_KEY}")]
    Missing(String),
    /// The record does not decode (or encode).
    #[error("usage ConfigMap {name}: {source}")]
    Record {
        /// The ConfigMap.
        name: String,
        /// Cause.
        source: UsageError,
    },
}

/// Where the record is kept.
#[derive(Clone)]
pub struct Store {
    api: Api<ConfigMap>,
    name: String,
}

impl Store {
    /// The ConfigMap `name` in `namespace`.
    #[must_use]
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }

    /// Reads the record; `Ok(None)` when there is no ConfigMap yet.
    ///
    /// # Errors
    /// The read failed, or the ConfigMap holds no valid record.
    pub async fn load(&self) -> Result<Option<UsageRecord>, UsageStoreError> {
        let found = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|source| UsageStoreError::Api {
                name: self.name.clone(),
                source,
            })?;
        found.map(|cm| decode_configmap(&self.name, &cm)).transpose()
    }

    /// Writes the record (server-side apply, forced: this field manager owns the data).
    ///
    /// # Errors
    /// The write failed.
    pub async fn save(&self, text: String) -> Result<(), UsageStoreError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api
            .patch(
                &self.name,
                &params,
                &Patch::Apply(configmap_patch(&self.name, text)),
            )
            .await
            .map(drop)
            .map_err(|source| UsageStoreError::Api {
                name: self.name.clone(),
                source,
            })
    }
}

/// The usage ConfigMap's name when none is given: the scheduler's Lease name (`<scheduler-name>`, or
/// `<scheduler-name>-<node-pool>` for a pool's scheduler, as KAI names its shards' leases) + `-usage`.
#[must_use]
pub fn default_configmap_name(scheduler_name: &str, node_pool: Option<&str>) -> String {
    match node_pool {
        Some(pool) => format!("{scheduler_name}-{pool}-usage"),
        None => format!("{scheduler_name}-usage"),
    }
}

/// The record a ConfigMap holds.
///
/// # Errors
/// No [`DATA_KEY`], or a record that does not decode.
pub fn decode_configmap(name: &str, cm: &ConfigMap) -> Result<UsageRecord, UsageStoreError> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .ok_or_else(|| UsageStoreError::Missing(name.to_owned()))?;
    UsageRecord::decode(text).map_err(|source| UsageStoreError::Record {
        name: name.to_owned(),
        source,
    })
}

/// The apply patch that stores `text`.
#[must_use]
pub fn configmap_patch(name: &str, text: String) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": { "app.kubernetes.io/managed-by": FIELD_MANAGER },
        },
        "data": { DATA_KEY: text },
    })
}

/// The loop's usage state.
pub struct UsageKeeper {
    settings: UsageSettings,
    record: UsageRecord,
    /// The last cycle's sample: a skipped cycle changed nothing, so it still holds.
    sample: Option<UsageSample>,
    refreshed: Option<Millis>,
    persisted: Option<Millis>,
}

impl UsageKeeper {
    /// An empty record.
    #[must_use]
    pub fn new(settings: UsageSettings) -> Self {
        Self {
            settings,
            record: UsageRecord::default(),
            sample: None,
            refreshed: None,
            persisted: None,
        }
    }

    /// The record.
    #[must_use]
    pub fn record(&self) -> &UsageRecord {
        &self.record
    }

    /// Starts again from what `loaded` gave (on gaining leadership): a record, none, or an error that
    /// is logged and starts an empty record. The model's usage is refreshed at once.
    pub fn restore(
        &mut self,
        loaded: Result<Option<UsageRecord>, UsageStoreError>,
        cluster: &mut Cluster,
        now: Millis,
    ) {
        self.record = match loaded {
            Ok(Some(record)) => {
                info!(buckets = record.bucket_count(), "usage record restored");
                record
            }
            Ok(None) => {
                info!("no usage record stored yet; starting from empty");
                UsageRecord::default()
            }
            Err(e) => {
                warn!(error = %e, "the stored usage record cannot be used; starting from empty (it is replaced at the next write)");
                UsageRecord::default()
            }
        };
        self.sample = None;
        self.persisted = Some(now);
        self.refresh(cluster, now);
    }

    fn refresh(&mut self, cluster: &mut Cluster, now: Millis) {
        cluster.set_historical_usage(self.record.normalized(&self.settings.params, now));
        self.refreshed = Some(now);
    }

    /// After a cycle at `now`: folds its sample (or the last one, for a skipped cycle) and refreshes the
    /// model's usage when `fetchInterval` has passed. Returns the encoded record when a write is due.
    pub fn after_cycle(
        &mut self,
        cluster: &mut Cluster,
        now: Millis,
        sample: Option<UsageSample>,
    ) -> Option<String> {
        if sample.is_some() {
            self.sample = sample;
        }
        if let Some(sample) = &self.sample {
            self.record.fold(&self.settings.params, now, sample);
        }
        let interval = i64::try_from(self.settings.fetch_interval.as_millis()).unwrap_or(i64::MAX);
        if self.refreshed.is_none_or(|t| now.saturating_sub(t) >= interval) {
            self.refresh(cluster, now);
        }
        if self
            .persisted
            .is_some_and(|t| now.saturating_sub(t) < PERSIST_INTERVAL_MS)
        {
            return None;
        }
        self.persisted = Some(now);
        match self.record.encode() {
            Ok(text) => Some(text),
            Err(e) => {
                warn!(error = %e, "usage record not written");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use scheduler_core::fairshare::{UsageParams, WindowKind};

    use super::*;

    fn settings() -> UsageSettings {
        UsageSettings {
            params: UsageParams {
                half_life: Some(Duration::from_secs(600)),
                window: Duration::from_secs(86_400),
                kind: WindowKind::Sliding,
            },
            fetch_interval: Duration::from_secs(60),
        }
    }

    fn sample(gpus: f64) -> UsageSample {
        UsageSample {
            capacity: [8.0, 1000.0, 1e9],
            queues: vec![(Arc::from("a"), [gpus, 0.0, 0.0])],
        }
    }

    fn configmap(text: Option<&str>) -> ConfigMap {
        ConfigMap {
            data: text.map(|t| BTreeMap::from([(DATA_KEY.to_owned(), t.to_owned())])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn the_stored_record_round_trips_through_the_configmap() {
        let mut keeper = UsageKeeper::new(settings());
        let mut cluster = Cluster::default();
        keeper.restore(Ok(None), &mut cluster, 0);
        let mut written = None;
        for minute in 1..=10 {
            if let Some(text) = keeper.after_cycle(&mut cluster, minute * 60_000, Some(sample(4.0))) {
                written = Some(text);
            }
        }
        let text = written.expect("written at least once in ten minutes");
        let patch = configmap_patch("kai-scheduler-usage", text.clone());
        assert_eq!(patch["data"][DATA_KEY], serde_json::Value::String(text.clone()));
        let back = decode_configmap("x", &configmap(Some(&text))).expect("decodes");
        assert!(back.bucket_count() > 0);
        // What a new leader restores gives the model usage at once.
        let mut fresh = UsageKeeper::new(settings());
        let mut cluster2 = Cluster::default();
        fresh.restore(Ok(Some(back)), &mut cluster2, 10 * 60_000);
        assert!(cluster2.historical_usage.get("a").gpu > 0.0);
    }

    #[test]
    fn a_missing_or_corrupt_record_starts_empty() {
        assert!(matches!(
            decode_configmap("cm", &configmap(None)),
            Err(UsageStoreError::Missing(_))
        ));
        for corrupt in [
            "{",
            "version: 9",
            "version: 1\nbuckets: [{start: 1, end: 0, capacity: [0, 0, 0]}]",
        ] {
            let err = decode_configmap("cm", &configmap(Some(corrupt))).expect_err(corrupt);
            assert!(matches!(err, UsageStoreError::Record { .. }), "{corrupt}: {err}");
            let mut keeper = UsageKeeper::new(settings());
            let mut cluster = Cluster::default();
            keeper.restore(Err(err), &mut cluster, 0);
            assert!(keeper.record().is_empty());
            assert!(cluster.historical_usage.is_empty());
        }
    }

    #[test]
    fn skipped_cycles_fold_the_last_sample_and_usage_refreshes_each_fetch_interval() {
        let mut keeper = UsageKeeper::new(settings());
        let mut cluster = Cluster::default();
        keeper.restore(Ok(None), &mut cluster, 0);
        keeper.after_cycle(&mut cluster, 1_000, Some(sample(8.0)));
        // Skipped cycles (no sample) keep folding what the last cycle saw.
        for s in 2..=30 {
            keeper.after_cycle(&mut cluster, s * 1_000, None);
        }
        assert!(
            cluster.historical_usage.get("a").gpu == 0.0,
            "not refreshed before the interval"
        );
        keeper.after_cycle(&mut cluster, 61_000, None);
        assert!(
            cluster.historical_usage.get("a").gpu > 0.99,
            "{:?}",
            cluster.historical_usage.get("a")
        );
    }
}
