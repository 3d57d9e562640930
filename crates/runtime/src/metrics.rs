//! Small helpers over prometheus-client shared by both components.
//!
//! Owns: the duration [`Timer`] and the default latency buckets. Must not: define component metrics.

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::time::Instant;

/// Buckets for operation latencies in seconds: 1 ms to about 33 s, doubling.
pub fn duration_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.001, 2.0, 16)
}

/// A histogram with [`duration_buckets`], e.g. as the constructor of a `Family`.
pub fn duration_histogram() -> Histogram {
    Histogram::new(duration_buckets())
}

/// Observes the seconds from its creation into a histogram when dropped (or at [`Timer::stop`]), so early
/// returns and `?` are measured too.
///
/// Holds its own handle to the histogram (handles are shared), so it can live across `.await` points;
/// for a labelled family pass `family.get_or_create(&labels).clone()`.
#[derive(Debug)]
#[must_use = "a timer observes when dropped; binding it to `_` drops it at once"]
pub struct Timer {
    histogram: Histogram,
    start: Instant,
    observed: bool,
}

impl Timer {
    /// Starts timing now.
    pub fn start(histogram: Histogram) -> Self {
        Self {
            histogram,
            start: Instant::now(),
            observed: false,
        }
    }

    /// Observes now and returns the elapsed seconds.
    pub fn stop(mut self) -> f64 {
        self.observe()
    }

    fn observe(&mut self) -> f64 {
        let seconds = self.start.elapsed().as_secs_f64();
        if !self.observed {
            self.histogram.observe(seconds);
            self.observed = true;
        }
        seconds
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.observe();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus_client::registry::Registry;

    use super::*;

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
        text
    }

    #[tokio::test(start_paused = true)]
    async fn drop_observes_the_elapsed_time_once() {
        let histogram = duration_histogram();
        let mut registry = Registry::default();
        registry.register("op_duration_seconds", "Operation duration", histogram.clone());
        {
            let _timer = Timer::start(histogram.clone());
            tokio::time::advance(Duration::from_millis(1_500)).await;
        }
        let text = encoded(&registry);
        assert!(text.contains("op_duration_seconds_count 1\n"), "{text}");
        assert!(text.contains("op_duration_seconds_sum 1.5\n"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn stop_observes_and_drop_does_not_observe_again() {
        let histogram = duration_histogram();
        let mut registry = Registry::default();
        registry.register("op_duration_seconds", "Operation duration", histogram.clone());
        let timer = Timer::start(histogram.clone());
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(timer.stop(), 0.25);
        let text = encoded(&registry);
        assert!(text.contains("op_duration_seconds_count 1\n"), "{text}");
        assert!(
            text.contains("op_duration_seconds_bucket{le=\"0.256\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("op_duration_seconds_bucket{le=\"0.128\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    fn buckets_span_milliseconds_to_half_a_minute() {
        let buckets: Vec<f64> = duration_buckets().collect();
        assert_eq!(buckets.len(), 16);
        assert_eq!(buckets[0], 0.001);
        assert_eq!(buckets[15], 32.768);
    }
}
