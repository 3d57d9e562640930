//! The observed mix of pod request shapes: how often each (CPU, GPU request, placement constraints)
//! shape arrived, for placement that weighs what is likely to come next (the `fragmentation` strategy).
//!
//! Counted when a pod of ours first appears; never decremented when it goes, so the mix is the mix of
//! arrivals, not of what happens to be placed. Counts are halved once their sum passes a bound, so the
//! mix follows a workload that changes and the book stays small.

use std::collections::HashMap;

use super::GpuRequest;
use super::constraints::ConstraintsId;

/// A request shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    /// CPU request in millicores.
    pub cpu_milli: i64,
    /// Thousandths of a GPU on each device it takes (1000 for whole GPUs; 0 for none).
    pub gpu_milli: u32,
    /// Devices it takes (0 for a CPU-only pod).
    pub gpus: u32,
    /// Where it may go.
    pub constraints: ConstraintsId,
}

impl Shape {
    /// The shape of a pod, or `None` for requests whose size per device depends on the node
    /// (`gpu-memory`).
    #[must_use]
    pub fn of(cpu_milli: i64, gpu: GpuRequest, constraints: ConstraintsId) -> Option<Self> {
        let (gpu_milli, gpus) = match gpu {
            GpuRequest::None => (0, 0),
            GpuRequest::Whole(n) => (1000, n),
            GpuRequest::Fraction { milli, devices } => (milli.min(1000), devices.max(1)),
            GpuRequest::Memory { .. } => return None,
        };
        Some(Self {
            cpu_milli,
            gpu_milli,
            gpus,
            constraints,
        })
    }
}

/// A shape and its share of arrivals (the shares of a mix sum to 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WeightedShape {
    /// The shape.
    pub shape: Shape,
    /// Its share.
    pub weight: f64,
}

/// Arrivals by shape.
#[derive(Clone, Debug, Default)]
pub struct ShapeBook {
    counts: HashMap<Shape, u64>,
    total: u64,
}

/// Sum of counts past which every count is halved.
const DECAY_AT: u64 = 1 << 20;

impl ShapeBook {
    /// Counts one arrival.
    pub fn observe(&mut self, shape: Shape) {
        *self.counts.entry(shape).or_default() += 1;
        self.total += 1;
        if self.total > DECAY_AT {
            self.counts.values_mut().for_each(|c| *c /= 2);
            self.counts.retain(|_, c| *c > 0);
            self.total = self.counts.values().sum();
        }
    }

    /// Counts one arrival of a pod asking `cpu_milli` and `gpu` under `constraints` (nothing for a
    /// request without a fixed shape).
    pub fn observe_pod(&mut self, cpu_milli: i64, gpu: GpuRequest, constraints: ConstraintsId) {
        if let Some(shape) = Shape::of(cpu_milli, gpu, constraints) {
            self.observe(shape);
        }
    }

    /// Arrivals counted (after decay).
    #[must_use]
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The most frequent shapes that together cover at least `coverage` (0-1) of arrivals, with their
    /// shares renormalised over the shapes kept (FGD's "typical pods"); most frequent first, ties in
    /// shape order. Empty when nothing arrived.
    #[must_use]
    pub fn mix(&self, coverage: f64) -> Vec<WeightedShape> {
        let mut shapes: Vec<(Shape, u64)> = self.counts.iter().map(|(s, c)| (*s, *c)).collect();
        shapes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let total = self.total as f64;
        let mut kept = Vec::new();
        let mut covered = 0u64;
        for (shape, count) in shapes {
            #[allow(clippy::cast_precision_loss)]
            if total > 0.0 && covered as f64 >= coverage * total {
                break;
            }
            covered += count;
            kept.push((shape, count));
        }
        #[allow(clippy::cast_precision_loss)]
        let covered = covered as f64;
        kept.into_iter()
            .map(|(shape, count)| WeightedShape {
                shape,
                #[allow(clippy::cast_precision_loss)]
                weight: count as f64 / covered,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(cpu: i64, gpu: GpuRequest) -> Shape {
        Shape::of(cpu, gpu, ConstraintsId(0)).expect("sized")
    }

    #[test]
    fn the_mix_keeps_the_most_frequent_shapes_up_to_the_coverage_and_renormalises() {
        let mut book = ShapeBook::default();
        let (a, b, c) = (
            shape(1000, GpuRequest::Whole(1)),
            shape(
                2000,
                GpuRequest::Fraction {
                    milli: 500,
                    devices: 1,
                },
            ),
            shape(4000, GpuRequest::None),
        );
        for _ in 0..70 {
            book.observe(a);
        }
        for _ in 0..25 {
            book.observe(b);
        }
        for _ in 0..5 {
            book.observe(c);
        }
        let mix = book.mix(0.95);
        assert_eq!(mix.iter().map(|w| w.shape).collect::<Vec<_>>(), vec![a, b]);
        assert!((mix[0].weight - 70.0 / 95.0).abs() < 1e-12);
        assert!((mix.iter().map(|w| w.weight).sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(book.mix(1.0).len(), 3);
        assert!(ShapeBook::default().mix(0.95).is_empty());
    }

    #[test]
    fn counts_decay_past_the_bound() {
        let mut book = ShapeBook::default();
        let a = shape(1, GpuRequest::None);
        for _ in 0..=DECAY_AT {
            book.observe(a);
        }
        assert!(book.total() <= DECAY_AT / 2 + 1, "{}", book.total());
        assert_eq!(book.mix(0.95).len(), 1);
    }

    #[test]
    fn gpu_memory_requests_have_no_fixed_shape() {
        assert_eq!(
            Shape::of(1, GpuRequest::Memory { mib: 10, devices: 1 }, ConstraintsId(0)),
            None
        );
    }
}
