//! The scheduler's configuration file: which actions run in which order and how each plugin is tuned.
//! Typed and strict: an unknown action, plugin or argument stops start-up with a message naming it.
//!
//! ```yaml
//! actions: [allocate, consolidation, reclaim, preempt, stalegangeviction]
//! plugins:
//!   nodeplacement: {gpu: binpack, cpu: binpack}
//!   proportion: {kValue: 1.0, reclaimerSaturationMultiplier: 1.0}
//!   minruntime: {defaultPreemptMinRuntime: 0s, defaultReclaimMinRuntime: 0s}
//!   gpusharing: {enabled: false, placement: binpack}
//!   stalegangeviction: {gracePeriod: 60s}
//!   consolidation: {maxPreemptees: 16}
//!   pipelining: {reservationTtl: 5m}
//! # Usage-based fair share (off when absent), KAI's keys:
//! usageDBConfig:
//!   clientType: scheduler   # or KAI's `prometheus` / `fake`: usage is kept by the scheduler either way
//!   usageParams: {halfLifePeriod: 1h, windowSize: 168h, windowType: sliding, fetchInterval: 1m}
//! ```

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use thiserror::Error;

/// Errors loading the configuration.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read scheduler configuration {path}")]
    Read {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The YAML does not match the schema (unknown action, plugin, argument, bad value).
    #[error("invalid scheduler configuration: {0}")]
    Parse(String),
    /// The values are individually valid but inconsistent.
    #[error("invalid scheduler configuration: {0}")]
    Invalid(String),
}

/// An action of the cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// Place pending gangs, all or nothing.
    Allocate,
    /// Move preemptible pods to make room for a gang that fits nowhere (defragmentation).
    Consolidation,
    /// Take resources back across queues for a queue below its fair share.
    Reclaim,
    /// Evict lower-priority preemptible work in the same queue.
    Preempt,
    /// Evict gangs running below their minimum for longer than a grace period.
    StaleGangEviction,
}

impl ActionKind {
    /// Name as written in the configuration, metrics and events.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allocate => "allocate",
            Self::Consolidation => "consolidation",
            Self::Reclaim => "reclaim",
            Self::Preempt => "preempt",
            Self::StaleGangEviction => "stalegangeviction",
        }
    }
}

/// Bin-pack (fill the fullest node first) or spread (the emptiest first); or one of the scored
/// strategies, which look at every node that fits (`framework::policy::placement`, `scored`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementStrategy {
    /// Fullest first: keeps whole nodes free for big gangs.
    #[default]
    Binpack,
    /// Emptiest first: spreads load.
    Spread,
    /// Fragmentation-aware: the node (and, for a fraction, the device) where the expected GPU capacity
    /// that the observed mix of request shapes cannot use grows least (FGD's measure and score, Weng et
    /// al., ATC 2023); ties go to the first node in node order.
    Fragmentation,
    /// Experiment policy (the FGD paper's BestFit baseline): the node whose CPU and GPU left after the
    /// pod, each as a share of 128 cores and 8 GPUs, weigh least, scored as whole points out of 100;
    /// ties go to the first node in node order. Meant for `kai sim`, not for production.
    Bestfit,
    /// Experiment policy (the FGD paper's Random baseline): a seeded-hash choice among the nodes (and
    /// devices) that fit. Meant for `kai sim`, not for production.
    Random,
}

impl PlacementStrategy {
    /// Whether the strategy scores every node that fits instead of walking a free-capacity order.
    #[must_use]
    pub fn is_scored(self) -> bool {
        matches!(self, Self::Fragmentation | Self::Bestfit | Self::Random)
    }

    /// Name as written in the configuration.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Binpack => "binpack",
            Self::Spread => "spread",
            Self::Fragmentation => "fragmentation",
            Self::Bestfit => "bestfit",
            Self::Random => "random",
        }
    }
}

/// Node order per resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodePlacementArgs {
    /// For pods that ask for GPUs.
    #[serde(default)]
    pub gpu: PlacementStrategy,
    /// For CPU-only pods.
    #[serde(default)]
    pub cpu: PlacementStrategy,
    /// Seed of the hash that chooses for `random`; decisions never read a clock or a global random
    /// generator.
    #[serde(default)]
    pub seed: u64,
}

/// Fair-share tuning (KAI's proportion plugin).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProportionArgs {
    /// Weight of historical usage in over-quota division (acts only with `usageDBConfig`).
    #[serde(default = "one")]
    pub k_value: f64,
    /// How much more saturated than the queues it takes from a reclaimer may end (>= 1).
    #[serde(default = "one", alias = "relcaimerSaturationMultiplier")]
    pub reclaimer_saturation_multiplier: f64,
}

impl Default for ProportionArgs {
    fn default() -> Self {
        Self {
            k_value: 1.0,
            reclaimer_saturation_multiplier: 1.0,
        }
    }
}

fn one() -> f64 {
    1.0
}

/// Minimum runtimes before a gang may be evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MinRuntimeArgs {
    /// Default for preemption when the queue sets none.
    #[serde(default, with = "duration_str")]
    pub default_preempt_min_runtime: Duration,
    /// Default for reclaim when the queue sets none.
    #[serde(default, with = "duration_str")]
    pub default_reclaim_min_runtime: Duration,
}

/// GPU sharing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GpuSharingArgs {
    /// Schedule `gpu-fraction` / `gpu-memory` pods (the chart's `global.gpuSharing`).
    #[serde(default)]
    pub enabled: bool,
    /// Fullest shared device first (binpack) or a fresh device first (spread).
    #[serde(default)]
    pub placement: PlacementStrategy,
    /// Create reservation pods that hold the physical device for the sharers.
    #[serde(default = "yes")]
    pub reservation_pods: bool,
    /// Image of the reservation pods (runs `kai-gpu-reservation`).
    #[serde(default = "reservation_image")]
    pub reservation_image: String,
    /// How long a bind waits for a new reservation pod to report its device.
    #[serde(default = "reservation_timeout", with = "duration_str")]
    pub reservation_timeout: Duration,
    /// Place a sharing pod only once the GPU-sharing admission webhook has pointed its containers at
    /// the pod's GPU-sharing ConfigMap (`runai/shared-gpu-configmap`); a sharing pod created without it
    /// (the webhook was down or not installed) waits with a message instead of starting with every GPU of
    /// its node in view. The chart sets it with `global.gpuSharing`, which installs the webhook.
    #[serde(default)]
    pub require_webhook: bool,
}

fn reservation_image() -> String {
    "ghcr.io/kai-rs/kai-scheduler:latest".to_owned()
}

fn reservation_timeout() -> Duration {
    Duration::from_secs(40)
}

impl Default for GpuSharingArgs {
    fn default() -> Self {
        Self {
            enabled: false,
            placement: PlacementStrategy::Binpack,
            reservation_pods: true,
            reservation_image: reservation_image(),
            reservation_timeout: reservation_timeout(),
            require_webhook: false,
        }
    }
}

fn yes() -> bool {
    true
}

/// Stale-gang eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaleGangArgs {
    /// How long a gang may run below its minimum before it is evicted whole.
    #[serde(with = "duration_str")]
    pub grace_period: Duration,
}

impl Default for StaleGangArgs {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(60),
        }
    }
}

/// Consolidation limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsolidationArgs {
    /// Most gangs moved to make room for one.
    pub max_preemptees: u32,
}

impl Default for ConsolidationArgs {
    fn default() -> Self {
        Self { max_preemptees: 16 }
    }
}

/// Reservations for gangs waiting on freed resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PipeliningArgs {
    /// How long resources freed by evictions stay reserved for the gang they were freed for.
    #[serde(with = "duration_str")]
    pub reservation_ttl: Duration,
}

impl Default for PipeliningArgs {
    fn default() -> Self {
        Self {
            reservation_ttl: Duration::from_secs(300),
        }
    }
}

/// Plugin settings. Every plugin is on; these tune them.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub struct Plugins {
    /// Node order.
    #[serde(default)]
    pub nodeplacement: NodePlacementArgs,
    /// Fair share.
    #[serde(default)]
    pub proportion: ProportionArgs,
    /// Minimum runtimes.
    #[serde(default)]
    pub minruntime: MinRuntimeArgs,
    /// GPU sharing.
    #[serde(default)]
    pub gpusharing: GpuSharingArgs,
    /// Stale-gang eviction.
    #[serde(default)]
    pub stalegangeviction: StaleGangArgs,
    /// Consolidation.
    #[serde(default)]
    pub consolidation: ConsolidationArgs,
    /// Reservations.
    #[serde(default)]
    pub pipelining: PipeliningArgs,
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Actions in order.
    #[serde(default = "default_actions")]
    pub actions: Vec<ActionKind>,
    /// Plugin settings.
    #[serde(default)]
    pub plugins: Plugins,
    /// Usage-based (time-based) fair share, KAI's `usageDBConfig`; off when absent.
    #[serde(default, rename = "usageDBConfig", skip_serializing_if = "Option::is_none")]
    pub usage_db: Option<UsageDbConfig>,
}

/// KAI's `usageDBConfig`. KAI reads usage from Prometheus; this scheduler records it itself, so the
/// connection settings are accepted and not used.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UsageDbConfig {
    /// `scheduler` (this scheduler's own record), or KAI's `prometheus` or `fake`, which mean the same
    /// here.
    #[serde(default)]
    pub client_type: String,
    /// KAI's Prometheus address (not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_string: Option<String>,
    /// KAI's variable holding the Prometheus address (not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_string_env_var: Option<String>,
    /// Window, decay and refresh.
    #[serde(default)]
    pub usage_params: UsageParamsConfig,
}

/// KAI's `usageDBConfig.usageParams`, as written (durations in Go's form, plus `d` and `w`).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UsageParamsConfig {
    /// Half-life of the decay; absent or 0: no decay (KAI's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_life_period: Option<String>,
    /// Window size (default one week, `168h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_size: Option<String>,
    /// `sliding` (default) or `tumbling` (KAI's `cron` is not supported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_type: Option<String>,
    /// Start of the first tumbling window (RFC 3339; default the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tumbling_window_start_time: Option<String>,
    /// KAI's cron window definition (only with `windowType: cron`, which is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron_string: Option<String>,
    /// How often the queues' usage is recomputed for fair share (default `1m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_interval: Option<String>,
    /// KAI's staleness period of fetched usage (accepted, not used: usage is never stale here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness_period: Option<String>,
    /// KAI's wait for the first fetch (accepted, not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_timeout: Option<String>,
    /// KAI's client-specific parameters (Prometheus metric names; accepted, not used).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra_params: std::collections::BTreeMap<String, String>,
}

/// Usage-based fair share as configured and validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageSettings {
    /// Window and decay.
    pub params: crate::fairshare::UsageParams,
    /// How often the queues' usage is recomputed for fair share.
    pub fetch_interval: Duration,
}

/// KAI's default window: one week.
const DEFAULT_USAGE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// Key prefix of usage parameters in messages.
const USAGE_PARAMS: &str = "usageDBConfig.usageParams";

/// A duration in [`parse_duration`]'s form, or a whole number of days (`7d`) or weeks (`1w`).
fn parse_long_duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let trimmed = text.trim();
    let days = |n: &str, per: u64| {
        n.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(per * 24 * 3600))
            .map(Duration::from_secs)
    };
    let long = if let Some(n) = trimmed.strip_suffix('w') {
        days(n, 7)
    } else if let Some(n) = trimmed.strip_suffix('d') {
        days(n, 1)
    } else {
        None
    };
    match long {
        Some(d) => Ok(d),
        None => parse_duration(trimmed).map_err(|why| ConfigError::Invalid(format!("{key}: {why}"))),
    }
}

/// Milliseconds since the epoch of an RFC 3339 time (`2025-01-01T00:00:00Z`, fractions and offsets
/// allowed).
fn parse_rfc3339(text: &str) -> Result<crate::model::Millis, String> {
    let bad = || format!("{text:?} is not an RFC 3339 time (e.g. 2025-01-01T00:00:00Z)");
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let s = t.get(r).ok_or_else(bad)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse::<i64>().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return Err(bad());
    }
    let mut rest = t.get(19..).ok_or_else(bad)?;
    let mut millis = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let ms: String = frac[..digits].chars().chain("000".chars()).take(3).collect();
        millis = ms.parse::<i64>().map_err(|_| bad())?;
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ => {
            let ob = rest.as_bytes();
            if ob.len() != 6 || !matches!(ob[0], b'+' | b'-') || ob[3] != b':' {
                return Err(bad());
            }
            let h: i64 = rest[1..3].parse().map_err(|_| bad())?;
            let m: i64 = rest[4..6].parse().map_err(|_| bad())?;
            let sign = if ob[0] == b'-' { -1 } else { 1 };
            sign * (h * 60 + m)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Ok(seconds * 1000 + millis)
}

impl UsageDbConfig {
    /// The validated settings.
    ///
    /// # Errors
    /// An unknown client type or window type, a cron window, a duration or time that does not parse,
    /// a zero window or fetch interval.
    pub fn settings(&self) -> Result<UsageSettings, ConfigError> {
        match self.client_type.as_str() {
            "scheduler" | "prometheus" | "fake" => {}
            other => {
                return Err(ConfigError::Invalid(format!(
                    "usageDBConfig.clientType must be scheduler (or KAI's prometheus or fake, which \
                     mean the same here: the scheduler records usage itself), got {other:?}"
                )));
            }
        }
        let p = &self.usage_params;
        let duration = |key: &str, value: &Option<String>| -> Result<Option<Duration>, ConfigError> {
            value
                .as_deref()
                .map(|v| parse_long_duration(&format!("{USAGE_PARAMS}.{key}"), v))
                .transpose()
        };
        let half_life = duration("halfLifePeriod", &p.half_life_period)?.filter(|d| !d.is_zero());
        let window = duration("windowSize", &p.window_size)?.unwrap_or(DEFAULT_USAGE_WINDOW);
        if window.is_zero() {
            return Err(ConfigError::Invalid(format!(
                "{USAGE_PARAMS}.windowSize must be above 0"
            )));
        }
        let fetch_interval = duration("fetchInterval", &p.fetch_interval)?.unwrap_or(Duration::from_secs(60));
        if fetch_interval.is_zero() {
            return Err(ConfigError::Invalid(format!(
                "{USAGE_PARAMS}.fetchInterval must be above 0"
            )));
        }
        duration("stalenessPeriod", &p.staleness_period)?;
        duration("waitTimeout", &p.wait_timeout)?;
        let kind = match p.window_type.as_deref().unwrap_or("sliding") {
            "sliding" => crate::fairshare::WindowKind::Sliding,
            "tumbling" => crate::fairshare::WindowKind::Tumbling {
                origin: match &p.tumbling_window_start_time {
                    Some(t) => parse_rfc3339(t).map_err(|why| {
                        ConfigError::Invalid(format!("{USAGE_PARAMS}.tumblingWindowStartTime: {why}"))
                    })?,
                    None => 0,
                },
            },
            "cron" => {
                return Err(ConfigError::Invalid(format!(
                    "{USAGE_PARAMS}.windowType cron is not supported; use sliding or tumbling"
                )));
            }
            other => {
                return Err(ConfigError::Invalid(format!(
                    "{USAGE_PARAMS}.windowType must be sliding or tumbling, got {other:?}"
                )));
            }
        };
        Ok(UsageSettings {
            params: crate::fairshare::UsageParams {
                half_life,
                window,
                kind,
            },
            fetch_interval,
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            actions: default_actions(),
            plugins: Plugins::default(),
            usage_db: None,
        }
    }
}

fn default_actions() -> Vec<ActionKind> {
    vec![
        ActionKind::Allocate,
        ActionKind::Consolidation,
        ActionKind::Reclaim,
        ActionKind::Preempt,
        ActionKind::StaleGangEviction,
    ]
}

impl Config {
    /// Parses and validates YAML.
    ///
    /// # Errors
    /// Unknown names, bad values, inconsistent settings.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let config: Self = if text.trim().is_empty() {
            Self::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?
        };
        config.validate()?;
        Ok(config)
    }

    /// Reads a file.
    ///
    /// # Errors
    /// When it cannot be read or is invalid.
    pub fn load(path: &str) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for a in &self.actions {
            if !seen.insert(a) {
                return Err(ConfigError::Invalid(format!(
                    "action {} is listed twice",
                    a.as_str()
                )));
            }
        }
        let sharing = &self.plugins.gpusharing;
        if sharing.require_webhook && !sharing.reservation_pods {
            return Err(ConfigError::Invalid(
                "gpusharing.requireWebhook needs gpusharing.reservationPods: a sharing pod's device is \
                 learnt from its reservation pod, and a pod whose device is unknown is never bound"
                    .to_owned(),
            ));
        }
        let p = &self.plugins.proportion;
        if !(p.k_value.is_finite() && p.k_value >= 0.0) {
            return Err(ConfigError::Invalid(format!(
                "proportion.kValue must be a number >= 0, got {}",
                p.k_value
            )));
        }
        if !(p.reclaimer_saturation_multiplier.is_finite() && p.reclaimer_saturation_multiplier >= 1.0) {
            return Err(ConfigError::Invalid(format!(
                "proportion.reclaimerSaturationMultiplier must be >= 1, got {}",
                p.reclaimer_saturation_multiplier
            )));
        }
        self.usage()?;
        Ok(())
    }

    /// Usage-based fair share's settings, `None` when it is off (no `usageDBConfig`).
    ///
    /// # Errors
    /// Invalid settings (see [`UsageDbConfig::settings`]); a loaded configuration has none.
    pub fn usage(&self) -> Result<Option<UsageSettings>, ConfigError> {
        self.usage_db.as_ref().map(UsageDbConfig::settings).transpose()
    }

    /// Whether an action is enabled.
    #[must_use]
    pub fn has(&self, action: ActionKind) -> bool {
        self.actions.contains(&action)
    }
}

/// Parses `90s`, `5m`, `1h30m`, `500ms`, `0` (the grammar of [`api::duration::parse`]: exact integer
/// arithmetic, so text from a Queue or a config file can never overflow or panic).
///
/// # Errors
/// A message naming the bad text.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    api::duration::parse(text)
        .map_err(|why| format!("{text:?} is not a duration (use e.g. 90s, 5m, 1h): {why}"))
}

/// Formats a duration the way [`parse_duration`] reads it.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        // Below a millisecond: the exact form, so a saved configuration loads back the same.
        return api::duration::format(d);
    }
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if !ms.is_multiple_of(60_000) || ms == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}m", ms / 60_000)
    }
}

mod duration_str {
    use super::{Deserialize, Deserializer, Duration};

    pub(super) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full_file() {
        assert_eq!(Config::from_yaml("").unwrap(), Config::default());
        let c = Config::from_yaml(
            "actions: [allocate, reclaim]\nplugins:\n  nodeplacement: {gpu: spread}\n  proportion: {relcaimerSaturationMultiplier: 2}\n  stalegangeviction: {gracePeriod: 90s}\n",
        )
        .unwrap();
        assert_eq!(c.actions, vec![ActionKind::Allocate, ActionKind::Reclaim]);
        assert_eq!(c.plugins.nodeplacement.gpu, PlacementStrategy::Spread);
        assert_eq!(c.plugins.nodeplacement.cpu, PlacementStrategy::Binpack);
        assert!((c.plugins.proportion.reclaimer_saturation_multiplier - 2.0).abs() < f64::EPSILON);
        assert_eq!(c.plugins.stalegangeviction.grace_period, Duration::from_secs(90));
    }

    #[test]
    fn unknown_names_stop_startup_with_a_clear_message() {
        let e = Config::from_yaml("actions: [allocate, backfill]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `backfill`"), "{e}");
        let e = Config::from_yaml("plugins: {binpackk: {}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `binpackk`"), "{e}");
        let e = Config::from_yaml("plugins: {nodeplacement: {gpu: tight}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `tight`"), "{e}");
        let e = Config::from_yaml("plugins: {stalegangeviction: {gracePeriod: soon}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"soon\" is not a duration"), "{e}");
        let e = Config::from_yaml("actions: [allocate, allocate]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("listed twice"), "{e}");
        let e = Config::from_yaml("plugins: {proportion: {reclaimerSaturationMultiplier: 0.5}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains(">= 1"), "{e}");
        let e = Config::from_yaml("plugins: {gpusharing: {requireWebhook: true, reservationPods: false}}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("requireWebhook needs gpusharing.reservationPods"),
            "{e}"
        );
        let c = Config::from_yaml("plugins: {gpusharing: {enabled: true, requireWebhook: true}}").unwrap();
        assert!(c.plugins.gpusharing.require_webhook);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn durations_too_large_or_odd_are_errors_not_panics() {
        // The first three overflowed `Duration::from_secs_f64` (a panic) before; the rest are malformed.
        for text in [
            "99999999999999999999999h",
            "18446744073709551615s1s",
            "5124095576030432h",
            "1e400s",
            ".s",
            "1..5s",
            "-1s",
            "ms",
        ] {
            assert!(parse_duration(text).is_err(), "{text:?}");
        }
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 2s "), Ok(Duration::from_secs(2)));
        for d in [
            0,
            1,
            999,
            1000,
            60_000,
            90_000,
            3_600_000,
            u64::from(u32::MAX) * 1000,
        ] {
            let d = Duration::from_millis(d);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{d:?}");
        }
        // Sub-millisecond durations were written as whole milliseconds (1.5 µs saved as "0s").
        let d = Duration::from_nanos(1_500);
        assert_eq!(format_duration(d), "1500ns");
        assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }
}
