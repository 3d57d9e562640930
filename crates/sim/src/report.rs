//! A replay's figures as text tables, CSV and charts (pure but for the writers they are given).

use std::fmt::Write as _;

use crate::metrics::{CycleKind, QueueSummary, Summary};
use crate::plot::{LineChart, Series};
use crate::replay::Outcome;

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Writing CSV failed.
    #[error("writing CSV: {0}")]
    Csv(#[from] csv::Error),
}

/// Seconds as a short human duration (`42s`, `7.5m`, `3.2h`, `2.1d`).
#[must_use]
pub fn duration(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.0}s")
    } else if seconds < 3600.0 {
        format!("{:.1}m", seconds / 60.0)
    } else if seconds < 86_400.0 {
        format!("{:.1}h", seconds / 3600.0)
    } else {
        format!("{:.1}d", seconds / 86_400.0)
    }
}

/// Columns aligned: the first left, the others right.
#[must_use]
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        for (i, cell) in cells.enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if first {
                let _ = write!(out, "{cell:<w$}");
                first = false;
            } else {
                let _ = write!(out, "  {cell:>w$}");
            }
        }
        out.push('\n');
    };
    line(&mut out, &mut headers.iter().copied());
    for row in rows {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

/// Headers of the summary table.
pub const SUMMARY_HEADERS: [&str; 15] = [
    "policy",
    "finished",
    "never ran",
    "delay mean",
    "delay p50",
    "delay p99",
    "JCT mean",
    "JCT p99",
    "alloc %",
    "idle fit %",
    "held idle %",
    "Jain",
    "partial jobs",
    "evictions",
    "lost GPU-h",
];

/// One row of the summary table per policy.
#[must_use]
pub fn summary_rows(summaries: &[Summary]) -> Vec<Vec<String>> {
    summaries
        .iter()
        .map(|s| {
            vec![
                s.policy.clone(),
                format!("{}/{}", s.finished, s.jobs),
                s.never_started.to_string(),
                duration(s.delay.mean),
                duration(s.delay.p50),
                duration(s.delay.p99),
                duration(s.jct.mean),
                duration(s.jct.p99),
                format!("{:.1}", s.allocation_pct),
                format!("{:.1}", s.idle_while_fit_pct),
                format!("{:.1}", s.held_idle_pct),
                format!("{:.3}", s.jain),
                s.partial_jobs.to_string(),
                s.evictions.to_string(),
                format!("{:.0}", s.lost_gpu_hours),
            ]
        })
        .collect()
}

/// Headers of a per-queue table.
pub const QUEUE_HEADERS: [&str; 10] = [
    "queue",
    "jobs",
    "never ran",
    "delay mean",
    "delay p50",
    "delay p99",
    "JCT mean",
    "GPUs held",
    "fair share",
    "evictions",
];

/// One row per queue.
#[must_use]
pub fn queue_rows(queues: &[QueueSummary]) -> Vec<Vec<String>> {
    queues
        .iter()
        .map(|q| {
            vec![
                q.queue.clone(),
                q.jobs.to_string(),
                q.never_started.to_string(),
                duration(q.delay.mean),
                duration(q.delay.p50),
                duration(q.delay.p99),
                duration(q.jct.mean),
                format!("{:.1}", q.gpus),
                format!("{:.1}", q.fair_share),
                q.evictions.to_string(),
            ]
        })
        .collect()
}

/// The summary table and each policy's per-queue table, as text.
#[must_use]
pub fn render(summaries: &[Summary]) -> String {
    let mut out = table(&SUMMARY_HEADERS, &summary_rows(summaries));
    for s in summaries {
        let w = &s.writes;
        let _ = write!(
            out,
            "\n{} ({} cycles, {:.1} s; API writes decided: {} binds, {} PodGroup statuses, {} events, \
             {} pod conditions, {:.2} per bind)\n{}\n{}",
            s.policy,
            s.cycles,
            s.wall_seconds,
            w.binds,
            w.statuses,
            w.events,
            w.pod_conditions,
            w.per_bind(),
            cycle_line(&s.cycle_kinds),
            table(&QUEUE_HEADERS, &queue_rows(&s.queues))
        );
    }
    out
}

/// The cycles by trigger, each with the share that placed or evicted nothing and its share of the
/// cycles' time (`kinds` in trigger order, as a summary keeps them).
fn cycle_line(kinds: &[CycleKind]) -> String {
    let total: f64 = kinds.iter().map(|k| k.seconds).sum();
    let parts: Vec<String> = kinds
        .chunk_by(|a, b| a.trigger == b.trigger)
        .map(|of| {
            let cycles: u64 = of.iter().map(|k| k.cycles).sum();
            let idle: u64 = of.iter().filter(|k| !k.decided).map(|k| k.cycles).sum();
            let seconds: f64 = of.iter().map(|k| k.seconds).sum();
            format!(
                "{} {cycles} ({:.0} % placed and evicted nothing; {:.0} % of the cycles' time)",
                of[0].trigger.name(),
                100.0 * idle as f64 / cycles.max(1) as f64,
                if total > 0.0 { 100.0 * seconds / total } else { 0.0 }
            )
        })
        .collect();
    format!("cycles after {}", parts.join(", "))
}

/// Every policy's cycles by trigger and result as CSV (`decided`: some pod placed or evicted).
///
/// # Errors
/// The writer fails.
pub fn cycles_csv<W: std::io::Write>(summaries: &[Summary], out: W) -> Result<(), ReportError> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(["policy", "trigger", "decided", "cycles", "seconds"])?;
    for s in summaries {
        for k in &s.cycle_kinds {
            w.write_record([
                s.policy.clone(),
                k.trigger.name().to_owned(),
                k.decided.to_string(),
                k.cycles.to_string(),
                format!("{:.3}", k.seconds),
            ])?;
        }
    }
    w.flush().map_err(csv::Error::from)?;
    Ok(())
}

/// The summary as CSV, one row per policy (seconds and percentages as numbers).
///
/// # Errors
/// The writer fails.
pub fn summary_csv<W: std::io::Write>(summaries: &[Summary], out: W) -> Result<(), ReportError> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "policy",
        "jobs",
        "finished",
        "never_started",
        "delay_mean_s",
        "delay_p50_s",
        "delay_p99_s",
        "jct_mean_s",
        "jct_p50_s",
        "jct_p99_s",
        "allocation_pct",
        "idle_while_fit_pct",
        "fit_waiting_time_pct",
        "held_idle_pct",
        "jain",
        "partial_jobs",
        "evictions",
        "pods_evicted",
        "lost_gpu_hours",
        "cycles",
        "binds",
        "status_writes",
        "events",
        "pod_conditions",
        "wall_seconds",
    ])?;
    for s in summaries {
        w.write_record([
            s.policy.clone(),
            s.jobs.to_string(),
            s.finished.to_string(),
            s.never_started.to_string(),
            format!("{:.1}", s.delay.mean),
            format!("{:.1}", s.delay.p50),
            format!("{:.1}", s.delay.p99),
            format!("{:.1}", s.jct.mean),
            format!("{:.1}", s.jct.p50),
            format!("{:.1}", s.jct.p99),
            format!("{:.3}", s.allocation_pct),
            format!("{:.3}", s.idle_while_fit_pct),
            format!("{:.3}", s.fit_waiting_time_pct),
            format!("{:.3}", s.held_idle_pct),
            format!("{:.4}", s.jain),
            s.partial_jobs.to_string(),
            s.evictions.to_string(),
            s.pods_evicted.to_string(),
            format!("{:.2}", s.lost_gpu_hours),
            s.cycles.to_string(),
            s.writes.binds.to_string(),
            s.writes.statuses.to_string(),
            s.writes.events.to_string(),
            s.writes.pod_conditions.to_string(),
            format!("{:.2}", s.wall_seconds),
        ])?;
    }
    w.flush().map_err(csv::Error::from)?;
    Ok(())
}

/// Every policy's per-queue figures as CSV.
///
/// # Errors
/// The writer fails.
pub fn queues_csv<W: std::io::Write>(summaries: &[Summary], out: W) -> Result<(), ReportError> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "policy",
        "queue",
        "jobs",
        "finished",
        "never_started",
        "delay_mean_s",
        "delay_p50_s",
        "delay_p99_s",
        "jct_mean_s",
        "gpus",
        "fair_share",
        "evictions",
        "lost_gpu_hours",
    ])?;
    for s in summaries {
        for q in &s.queues {
            w.write_record([
                s.policy.clone(),
                q.queue.clone(),
                q.jobs.to_string(),
                q.finished.to_string(),
                q.never_started.to_string(),
                format!("{:.1}", q.delay.mean),
                format!("{:.1}", q.delay.p50),
                format!("{:.1}", q.delay.p99),
                format!("{:.1}", q.jct.mean),
                format!("{:.3}", q.gpus),
                format!("{:.3}", q.fair_share),
                q.evictions.to_string(),
                format!("{:.2}", q.lost_gpu_hours),
            ])?;
        }
    }
    w.flush().map_err(csv::Error::from)?;
    Ok(())
}

/// The time average of a step function given by its change points, over `buckets` equal spans of
/// `[0, end]`: (bucket end, average).
#[must_use]
pub fn bucket_average(steps: &[(i64, i64)], end: i64, buckets: usize) -> Vec<(i64, f64)> {
    if end <= 0 || buckets == 0 {
        return Vec::new();
    }
    let width = (end as f64 / buckets as f64).max(1.0);
    let mut out = Vec::with_capacity(buckets);
    let mut value = 0i64;
    let mut at = 0usize;
    let mut t = 0f64;
    for b in 1..=buckets {
        let bucket_end = (b as f64 * width).min(end as f64);
        let mut integral = 0.0;
        let start = t;
        while let Some(&(time, v)) = steps.get(at) {
            let time = time as f64;
            if time > bucket_end {
                break;
            }
            integral += value as f64 * (time - t).max(0.0);
            t = t.max(time);
            value = v;
            at += 1;
        }
        integral += value as f64 * (bucket_end - t).max(0.0);
        t = bucket_end;
        let span = bucket_end - start;
        if span > 0.0 {
            out.push((bucket_end as i64, integral / span));
        }
    }
    out
}

/// GPU allocation (% of the GPUs) over time (days), one line per policy, averaged over `buckets` spans.
#[must_use]
pub fn allocation_chart(outcomes: &[Outcome], gpus: i64, buckets: usize, title: &str) -> LineChart {
    let end = outcomes.iter().map(|o| o.end).max().unwrap_or(0);
    let capacity = (gpus * 1000).max(1) as f64;
    LineChart {
        title: title.to_owned(),
        x_label: "simulated time (days)".to_owned(),
        y_label: "GPUs allocated (%)".to_owned(),
        series: outcomes
            .iter()
            .map(|o| Series {
                name: o.policy.name().to_owned(),
                points: bucket_average(&o.timeline, end, buckets)
                    .into_iter()
                    .map(|(t, v)| (t as f64 / 86_400_000.0, 100.0 * v / capacity))
                    .collect(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(duration(42.0), "42s");
        assert_eq!(duration(90.0), "1.5m");
        assert_eq!(duration(5400.0), "1.5h");
        assert_eq!(duration(86_400.0 * 2.5), "2.5d");
    }

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["a", "bb"],
            &[vec!["xyz".into(), "1".into()], vec!["q".into(), "200".into()]],
        );
        assert_eq!(t, "a     bb\nxyz    1\nq    200\n");
    }

    #[test]
    fn bucket_averages_weight_by_time() {
        // 0 until 5, 10 from 5 to 10: buckets [0,5] -> 0, [5,10] -> 10; one bucket -> 5.
        let steps = [(5, 10)];
        assert_eq!(bucket_average(&steps, 10, 2), vec![(5, 0.0), (10, 10.0)]);
        assert_eq!(bucket_average(&steps, 10, 1), vec![(10, 5.0)]);
        // A change inside a bucket: 4 from 2 to 6, then 0: [0,8] averages 16 / 8 = 2.
        assert_eq!(bucket_average(&[(2, 4), (6, 0)], 8, 1), vec![(8, 2.0)]);
        assert!(bucket_average(&steps, 0, 3).is_empty());
    }
}
