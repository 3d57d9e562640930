//! Time-based (usage-aware) fair share, KAI's "time-based fairshare" without Prometheus: the
//! scheduler keeps each queue's historical usage itself.
//!
//! KAI's usage is, per queue and resource, `Σ allocation(t)·0.5^((now−t)/halfLife)` over the window
//! divided by the same sum of the cluster's capacity; the proportion plugin then weighs the
//! over-quota division with `shareWeight = max(0, nWeight + kValue·(nWeight − usage))`
//! ([`super::division`]). Here:
//!
//! - [`UsageRecord::fold`] adds the allocation observed at a time (a [`UsageSample`], taken after each
//!   cycle) for the interval since the previous fold (at most [`MAX_GAP_MS`]: a scheduler that was
//!   down does not know what ran meanwhile) into time buckets;
//! - [`UsageRecord::normalized`] gives each queue's normalised usage at a time, which the loop puts
//!   into the model ([`crate::model::Cluster::set_historical_usage`]) for the sessions to divide with.
//!
//! A bucket's sums are kept decayed to the bucket's end, so decay is exact whatever the bucket width;
//! buckets are at most a half-life wide (so the factors stay within `[0.5, 2]` where they are used)
//! and at most 1/[`BUCKETS_PER_WINDOW`] of the window, which is the resolution of a sliding window's
//! edge (a bucket straddling it counts in proportion to its overlap). A tumbling window's buckets never
//! straddle a reset. Buckets that left the window, or whose weight fell below 2^-40, are dropped, so a
//! record holds at most about 41 buckets with decay and [`BUCKETS_PER_WINDOW`] + 1 without.
//!
//! [`UsageRecord::encode`] / [`UsageRecord::decode`] are the persisted form (YAML); decoding checks
//! every number, so a corrupt record is an error value, never a panic or a poisoned division.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{HistoricalUsage, Millis, UsageShares};

/// Buckets a window is divided into at least (the sliding edge's resolution).
pub const BUCKETS_PER_WINDOW: i64 = 24;

/// The longest interval one fold accounts for.
pub const MAX_GAP_MS: i64 = 5 * 60 * 1000;

/// Half-lives after which a bucket is dropped (its weight is below 2^-40).
const DROP_AFTER_HALF_LIVES: f64 = 40.0;

/// Version of the persisted form.
const FORMAT_VERSION: u32 = 1;

/// Errors of this module: a persisted record that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UsageError {
    /// Not the YAML of a record.
    #[error("usage record does not parse: {0}")]
    Parse(String),
    /// A version this scheduler does not read.
    #[error("usage record has version {0}, this scheduler reads version {FORMAT_VERSION}")]
    Version(u32),
    /// A value that cannot be a usage (negative, not finite, a bucket ending before it starts, buckets
    /// out of order).
    #[error("usage record is corrupt: {0}")]
    Corrupt(String),
}

/// How the window is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    /// The last window before now (KAI's default).
    Sliding,
    /// Consecutive windows from `origin`: usage starts from zero at each window's start.
    Tumbling {
        /// When the first window starts.
        origin: Millis,
    },
}

/// Validated usage parameters (from `usageDBConfig.usageParams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageParams {
    /// Decay half-life; `None` is no decay.
    pub half_life: Option<Duration>,
    /// Window size (> 0).
    pub window: Duration,
    /// Sliding or tumbling.
    pub kind: WindowKind,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl UsageParams {
    fn window_ms(&self) -> i64 {
        millis(self.window)
    }

    fn half_life_ms(&self) -> Option<f64> {
        self.half_life.filter(|h| !h.is_zero()).map(|h| millis(h) as f64)
    }

    /// Width of a bucket in milliseconds (at least 1).
    #[must_use]
    pub fn bucket_ms(&self) -> i64 {
        let window = self.window_ms();
        let mut n = BUCKETS_PER_WINDOW;
        if let Some(h) = self.half_life.filter(|h| !h.is_zero()) {
            let per_half_life = window.div_euclid(millis(h)).saturating_add(1);
            n = n.max(per_half_life);
        }
        (window / n).max(1)
    }

    /// Decay factor of an amount `age_ms` old (an age below zero gives a factor above 1).
    fn decay(&self, age_ms: i64) -> f64 {
        match self.half_life_ms() {
            Some(h) => 0.5_f64.powf(age_ms as f64 / h),
            None => 1.0,
        }
    }

    /// Start of the window `at` falls in (tumbling; sliding windows use epoch-aligned periods only to
    /// cut buckets).
    fn period_start(&self, at: Millis) -> Option<Millis> {
        let origin = match self.kind {
            WindowKind::Sliding => 0,
            WindowKind::Tumbling { origin } => origin,
        };
        let window = self.window_ms();
        let period = at.checked_sub(origin)?.div_euclid(window);
        origin.checked_add(period.checked_mul(window)?)
    }

    /// The bucket `[start, end)` containing `at`.
    fn bucket_of(&self, at: Millis) -> Option<(Millis, Millis)> {
        let period_start = self.period_start(at)?;
        let period_end = period_start.checked_add(self.window_ms())?;
        let width = self.bucket_ms();
        let index = at.checked_sub(period_start)?.div_euclid(width);
        let start = period_start.checked_add(index.checked_mul(width)?)?;
        let end = start.checked_add(width)?.min(period_end);
        Some((start, end))
    }

    /// How much of a bucket counts at `now` (window and decay), 0 when none.
    fn weight(&self, bucket: &Bucket, now: Millis) -> f64 {
        let part = match self.kind {
            WindowKind::Sliding => {
                let from = now.saturating_sub(self.window_ms());
                if bucket.end <= from {
                    0.0
                } else if bucket.start >= from {
                    1.0
                } else {
                    (bucket.end - from) as f64 / (bucket.end - bucket.start) as f64
                }
            }
            WindowKind::Tumbling { .. } => match self.period_start(now) {
                Some(start) if bucket.start >= start => 1.0,
                _ => 0.0,
            },
        };
        if part == 0.0 {
            return 0.0;
        }
        part * self.decay(now.saturating_sub(bucket.end))
    }

    fn expired(&self, bucket: &Bucket, now: Millis) -> bool {
        let decayed = self
            .half_life_ms()
            .is_some_and(|h| (now.saturating_sub(bucket.end) as f64) / h > DROP_AFTER_HALF_LIVES);
        decayed || self.weight(bucket, now) == 0.0
    }
}

/// Amounts per resource, in the order GPU, CPU, memory (any unit, as long as capacity and allocation
/// share it: the usage is their ratio).
pub type Amounts = [f64; 3];

/// What was allocated at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageSample {
    /// The capacity fair share divided (GPU, CPU, memory).
    pub capacity: Amounts,
    /// Allocation per queue (parents include their children, as their fair share does).
    pub queues: Vec<(Arc<str>, Amounts)>,
}

/// One time bucket: amount·seconds decayed to `end`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Bucket {
    start: Millis,
    end: Millis,
    capacity: Amounts,
    #[serde(default)]
    queues: BTreeMap<String, Amounts>,
}

/// Each queue's historical usage (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageRecord {
    /// When the last fold happened.
    last: Option<Millis>,
    /// Oldest first, disjoint.
    buckets: Vec<Bucket>,
}

/// The persisted form.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    version: u32,
    #[serde(default)]
    last: Option<Millis>,
    #[serde(default)]
    buckets: Vec<Bucket>,
}

fn clean(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 { v } else { 0.0 }
}

fn add(into: &mut Amounts, amounts: &Amounts, factor: f64) {
    for (sum, v) in into.iter_mut().zip(amounts) {
        let next = *sum + clean(*v) * factor;
        if next.is_finite() {
            *sum = next;
        }
    }
}

impl UsageRecord {
    /// True when nothing was recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// When the last fold happened.
    #[must_use]
    pub fn last(&self) -> Option<Millis> {
        self.last
    }

    /// Number of buckets kept.
    #[must_use]
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Folds `sample`, observed at `at`, into the record for the interval since the previous fold (at
    /// most [`MAX_GAP_MS`]; the first fold only starts the clock). A time before the previous fold is
    /// ignored (clocks may step back), and so are amounts that are negative or not finite. Buckets that
    /// no longer count are dropped.
    pub fn fold(&mut self, params: &UsageParams, at: Millis, sample: &UsageSample) {
        let previous = self.last;
        match previous {
            Some(last) if at < last => return,
            _ => self.last = Some(at),
        }
        self.buckets.retain(|b| !params.expired(b, at));
        let Some(last) = previous else { return };
        let dt = at.saturating_sub(last).min(MAX_GAP_MS);
        if dt <= 0 {
            return;
        }
        let Some((start, end)) = params.bucket_of(at) else {
            return;
        };
        let middle = at.saturating_sub(dt / 2);
        // Amount·seconds, decayed from the middle of the interval to the bucket's end (≤ 1 bucket, so
        // the factor is at least 0.5^(bucket/halfLife) ≥ 0.5).
        let factor = dt as f64 / 1000.0 * params.decay(end.saturating_sub(middle));
        if !factor.is_finite() {
            return;
        }
        let bucket = match self.buckets.iter().position(|b| b.start == start) {
            Some(i) => &mut self.buckets[i],
            None => {
                // Buckets are cut from `at`, which only grows: a new one goes last, unless parameters
                // changed; then keep the order and disjointness by dropping overlapped buckets.
                self.buckets.retain(|b| b.end <= start || b.start >= end);
                let i = self.buckets.partition_point(|b| b.start < start);
                self.buckets.insert(
                    i,
                    Bucket {
                        start,
                        end,
                        capacity: [0.0; 3],
                        queues: BTreeMap::new(),
                    },
                );
                &mut self.buckets[i]
            }
        };
        add(&mut bucket.capacity, &sample.capacity, factor);
        for (queue, amounts) in &sample.queues {
            // A queue that holds nothing adds nothing (absent is 0), which keeps the record small.
            if amounts.iter().all(|v| clean(*v) == 0.0) {
                continue;
            }
            match bucket.queues.get_mut(queue.as_ref()) {
                Some(into) => add(into, amounts, factor),
                None => {
                    let mut into = [0.0; 3];
                    add(&mut into, amounts, factor);
                    bucket.queues.insert(queue.to_string(), into);
                }
            }
        }
    }

    /// Each queue's normalised usage at `now`: its decayed amount·seconds in the window over the
    /// cluster's (per resource; 0 where the capacity is 0).
    #[must_use]
    pub fn normalized(&self, params: &UsageParams, now: Millis) -> HistoricalUsage {
        let mut capacity = [0.0; 3];
        let mut used: BTreeMap<&str, Amounts> = BTreeMap::new();
        for bucket in &self.buckets {
            let w = params.weight(bucket, now);
            if w == 0.0 {
                continue;
            }
            add(&mut capacity, &bucket.capacity, w);
            for (queue, amounts) in &bucket.queues {
                add(used.entry(queue.as_str()).or_insert([0.0; 3]), amounts, w);
            }
        }
        let ratio = |u: f64, c: f64| if c > 0.0 { u / c } else { 0.0 };
        HistoricalUsage::from_pairs(used.into_iter().map(|(queue, u)| {
            (
                Arc::from(queue),
                UsageShares {
                    gpu: ratio(u[0], capacity[0]),
                    cpu: ratio(u[1], capacity[1]),
                    memory: ratio(u[2], capacity[2]),
                },
            )
        }))
    }

    /// The persisted form (YAML).
    ///
    /// # Errors
    /// Only if the serializer fails, which a record of finite numbers does not make it do.
    pub fn encode(&self) -> Result<String, UsageError> {
        let stored = Stored {
            version: FORMAT_VERSION,
            last: self.last,
            buckets: self.buckets.clone(),
        };
        serde_yaml::to_string(&stored).map_err(|e| UsageError::Parse(e.to_string()))
    }

    /// Reads the persisted form back.
    ///
    /// # Errors
    /// Text that is not a record, another version, or values no fold makes (negative or non-finite
    /// amounts, empty or overlapping buckets).
    pub fn decode(text: &str) -> Result<Self, UsageError> {
        let stored: Stored = serde_yaml::from_str(text).map_err(|e| UsageError::Parse(e.to_string()))?;
        if stored.version != FORMAT_VERSION {
            return Err(UsageError::Version(stored.version));
        }
        let good = |a: &Amounts| a.iter().all(|v| v.is_finite() && *v >= 0.0);
        let mut previous_end = Millis::MIN;
        for b in &stored.buckets {
            if b.end <= b.start {
                return Err(UsageError::Corrupt(format!(
                    "bucket ends at {} before it starts at {}",
                    b.end, b.start
                )));
            }
            if b.start < previous_end {
                return Err(UsageError::Corrupt(format!(
                    "bucket starting at {} overlaps the one before",
                    b.start
                )));
            }
            previous_end = b.end;
            if !good(&b.capacity) {
                return Err(UsageError::Corrupt(format!(
                    "bucket starting at {} has capacity {:?}",
                    b.start, b.capacity
                )));
            }
            if let Some((q, a)) = b.queues.iter().find(|(_, a)| !good(a)) {
                return Err(UsageError::Corrupt(format!(
                    "bucket starting at {} has usage {a:?} for queue {q}",
                    b.start
                )));
            }
        }
        Ok(Self {
            last: stored.last,
            buckets: stored.buckets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;

    fn params(half_life_h: u64, window_h: u64) -> UsageParams {
        UsageParams {
            half_life: (half_life_h > 0).then(|| Duration::from_secs(half_life_h * 3600)),
            window: Duration::from_secs(window_h * 3600),
            kind: WindowKind::Sliding,
        }
    }

    fn sample(a_gpus: f64) -> UsageSample {
        UsageSample {
            capacity: [8.0, 8000.0, 64e9],
            queues: vec![(Arc::from("a"), [a_gpus, 0.0, 0.0]), (Arc::from("b"), [0.0; 3])],
        }
    }

    /// Folds `gpus` for queue `a` every minute from `from` to `to`.
    fn run(record: &mut UsageRecord, p: &UsageParams, from: Millis, to: Millis, gpus: f64) {
        let mut t = from;
        while t <= to {
            record.fold(p, t, &sample(gpus));
            t += 60_000;
        }
    }

    #[test]
    fn usage_is_the_share_of_capacity_used_in_the_window() {
        let p = params(0, 10);
        let mut r = UsageRecord::default();
        // Half the GPUs for the whole window.
        run(&mut r, &p, 0, 10 * HOUR, 4.0);
        let u = r.normalized(&p, 10 * HOUR);
        assert!((u.get("a").gpu - 0.5).abs() < 1e-9, "{:?}", u.get("a"));
        assert_eq!(u.get("b").gpu, 0.0);
        assert_eq!(u.get("a").cpu, 0.0);
    }

    #[test]
    fn decay_halves_old_usage_each_half_life() {
        let p = params(1, 24 * 7);
        let mut r = UsageRecord::default();
        // All GPUs for one hour, then nothing for three hours: used 1 of the window's decayed capacity.
        run(&mut r, &p, 0, HOUR, 8.0);
        let just_after = r.normalized(&p, HOUR).get("a").gpu;
        run(&mut r, &p, HOUR + 60_000, 4 * HOUR, 0.0);
        let later = r.normalized(&p, 4 * HOUR).get("a").gpu;
        // The capacity decays too, so the ratio falls but more slowly than 1/8: what matters is that
        // it falls, and that after many half-lives it is gone.
        assert!(later < just_after, "{later} < {just_after}");
        run(&mut r, &p, 4 * HOUR + 60_000, 60 * HOUR, 0.0);
        assert!(r.normalized(&p, 60 * HOUR).get("a").gpu < 1e-9);
        assert!(r.bucket_count() <= 42, "{}", r.bucket_count());
    }

    #[test]
    fn sliding_window_forgets_usage_outside_it() {
        let p = params(0, 2);
        let mut r = UsageRecord::default();
        run(&mut r, &p, 0, HOUR, 8.0);
        run(&mut r, &p, HOUR + 60_000, 4 * HOUR, 0.0);
        assert_eq!(r.normalized(&p, 4 * HOUR).get("a").gpu, 0.0);
        assert!(r.bucket_count() <= BUCKETS_PER_WINDOW as usize + 1);
    }

    #[test]
    fn tumbling_window_resets_at_each_window_start() {
        let p = UsageParams {
            half_life: None,
            window: Duration::from_secs(3600),
            kind: WindowKind::Tumbling { origin: 0 },
        };
        let mut r = UsageRecord::default();
        run(&mut r, &p, 0, HOUR - 60_000, 8.0);
        assert!(r.normalized(&p, HOUR - 60_000).get("a").gpu > 0.99);
        assert_eq!(r.normalized(&p, HOUR).get("a").gpu, 0.0);
    }

    #[test]
    fn gaps_are_capped_and_time_going_back_is_ignored() {
        let p = params(0, 100);
        let mut r = UsageRecord::default();
        r.fold(&p, 0, &sample(8.0));
        r.fold(&p, 10 * HOUR, &sample(8.0));
        let enc = r.encode().map_err(|e| e.to_string());
        r.fold(&p, HOUR, &sample(8.0));
        assert_eq!(r.encode().map_err(|e| e.to_string()), enc);
        assert_eq!(r.last(), Some(10 * HOUR));
        // One gap of 5 minutes counted, not ten hours.
        let cap = r.buckets.iter().map(|b| b.capacity[0]).sum::<f64>();
        assert!((cap - 8.0 * 300.0).abs() < 1e-6, "{cap}");
    }

    #[test]
    fn bad_sample_values_are_ignored() {
        let p = params(1, 10);
        let mut r = UsageRecord::default();
        let bad = UsageSample {
            capacity: [f64::NAN, f64::INFINITY, -1.0],
            queues: vec![(Arc::from("a"), [f64::NAN, -5.0, f64::INFINITY])],
        };
        r.fold(&p, 0, &bad);
        r.fold(&p, 60_000, &bad);
        let u = r.normalized(&p, 60_000);
        assert_eq!(u.get("a"), UsageShares::default());
        assert!(UsageRecord::decode(&r.encode().unwrap_or_default()).is_ok());
    }

    #[test]
    fn encoding_round_trips() {
        let p = params(1, 24);
        let mut r = UsageRecord::default();
        run(&mut r, &p, 0, 3 * HOUR, 3.5);
        let text = r.encode().expect("encodes");
        let back = UsageRecord::decode(&text).expect("decodes");
        assert_eq!(back, r);
        assert_eq!(back.normalized(&p, 3 * HOUR), r.normalized(&p, 3 * HOUR));
        assert_eq!(
            UsageRecord::decode("version: 1").expect("empty"),
            UsageRecord::default()
        );
    }

    #[test]
    fn corrupt_records_are_errors() {
        let cases = [
            ("", "parse"),
            ("not: [a record", "parse"),
            ("version: 2", "version"),
            ("version: 1\nsurprise: 1", "parse"),
            (
                "version: 1\nbuckets: [{start: 10, end: 5, capacity: [1, 1, 1]}]",
                "corrupt",
            ),
            (
                "version: 1\nbuckets: [{start: 0, end: 10, capacity: [1, 1, 1]}, {start: 5, end: 20, capacity: [1, 1, 1]}]",
                "corrupt",
            ),
            (
                "version: 1\nbuckets: [{start: 0, end: 10, capacity: [-1, 1, 1]}]",
                "corrupt",
            ),
            (
                "version: 1\nbuckets: [{start: 0, end: 10, capacity: [.nan, 1, 1]}]",
                "corrupt",
            ),
            (
                "version: 1\nbuckets: [{start: 0, end: 10, capacity: [1, 1, 1], queues: {a: [.inf, 0, 0]}}]",
                "corrupt",
            ),
            (
                "version: 1\nbuckets: [{start: 0, end: 10, capacity: [1, 1]}]",
                "parse",
            ),
        ];
        for (text, want) in cases {
            let got = match UsageRecord::decode(text) {
                Err(UsageError::Parse(_)) => "parse",
                Err(UsageError::Version(_)) => "version",
                Err(UsageError::Corrupt(_)) => "corrupt",
                Ok(_) => "ok",
            };
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn buckets_are_at_most_a_half_life_and_a_share_of_the_window() {
        assert_eq!(params(0, 24).bucket_ms(), HOUR);
        assert_eq!(params(1, 24 * 7).bucket_ms(), 24 * 7 * HOUR / (24 * 7 + 1));
        let tiny = UsageParams {
            half_life: Some(Duration::from_millis(1)),
            window: Duration::from_millis(3),
            kind: WindowKind::Sliding,
        };
        assert_eq!(tiny.bucket_ms(), 1);
    }
}
