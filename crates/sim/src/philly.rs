//! The Philly trace (Microsoft, the 82,247-job subset of the Pollux artifact:
//! `timestamp,duration,num_gpus,gpu_time,cluster`) as a native [`Workload`]:
//!
//! - each virtual cluster (`cluster`) is a leaf queue under one department `philly`; its GPU quota is
//!   its share of the slice's GPU-time times the cluster's GPUs, rounded to whole GPUs by largest
//!   remainder (every VC at least one GPU, taken from the largest), and its over-quota weight is its
//!   quota; no limit (the policies narrow this, see `replay::Policy`);
//! - nodes of 8 GPUs, 64 cores and 512 GiB; a pod asks 4 cores and 32 GiB per GPU, so GPUs are the
//!   only scarce resource;
//! - a job of at most 8 GPUs is one pod; a larger one is a gang of `ceil(n / 8)` equal pods of
//!   `ceil(n / pods)` GPUs (a data-parallel job's workers are alike): a 12-GPU job is 2 pods of 6, a
//!   24-GPU job 3 of 8. When the pod count does not divide `n` the pods are rounded up (no such job in
//!   the Philly subset: its sizes are 1-8, 12, 16, 24, 32, 64, 128; [`Setup::rounded_up`] counts them);
//! - arrival is the submit time minus the slice's first, duration the trace's run time;
//! - the node count is the smallest giving an offered load (GPU-time / (GPUs x span)) at most the
//!   target (default 0.8), and never fewer nodes than the largest job needs; the span runs from the
//!   first arrival to the last end were every job started on arrival (a slice's long jobs run well
//!   past its last arrival, and the work has to fit the time it covers).

use std::collections::BTreeMap;
use std::path::Path;

use crate::workload::{JobSpec, NodeSpec, PodsSpec, QueueSpec, Workload};

/// GPUs per Philly node.
pub const GPUS_PER_NODE: u32 = 8;

/// Why the trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PhillyError {
    /// The file could not be opened or read.
    #[error("cannot read the Philly trace {path}: {source}")]
    Read {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The header is not the expected one.
    #[error("the Philly trace's header is {found:?}, expected timestamp,duration,num_gpus,gpu_time,cluster")]
    Header {
        /// The header found.
        found: String,
    },
    /// A row is malformed.
    #[error("Philly trace line {line}: {why}")]
    Row {
        /// 1-based line number in the file.
        line: u64,
        /// What is wrong.
        why: String,
    },
    /// No job in the slice.
    #[error("the Philly slice holds no job (offset {offset}, {rows} rows in the trace)")]
    Empty {
        /// Jobs skipped.
        offset: usize,
        /// Rows read.
        rows: usize,
    },
    /// The target load is not in (0, 1].
    #[error("target load {0} is not in (0, 1]")]
    Load(f64),
}

/// One row of the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Submit time, seconds since the Unix epoch.
    pub submit: i64,
    /// Run time in seconds.
    pub duration: f64,
    /// GPUs.
    pub gpus: u32,
    /// Virtual cluster.
    pub vc: String,
}

/// Seconds since the epoch of `YYYY-MM-DD HH:MM:SS` (UTC).
fn parse_timestamp(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Reads every row of a trace.
///
/// # Errors
/// The file cannot be read, the header is wrong, or a row is malformed (with its line number).
pub fn read(path: &Path) -> Result<Vec<Row>, PhillyError> {
    let file = std::fs::File::open(path).map_err(|source| PhillyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(std::io::BufReader::new(file), &path.display().to_string())
}

/// Reads the rows of a trace from any reader (`origin` names it in I/O errors).
///
/// # Errors
/// As [`read`].
pub fn parse<R: std::io::Read>(reader: R, origin: &str) -> Result<Vec<Row>, PhillyError> {
    let mut csv = csv::ReaderBuilder::new().has_headers(true).from_reader(reader);
    let io = |e: csv::Error, line: u64| match e.into_kind() {
        csv::ErrorKind::Io(source) => PhillyError::Read {
            path: origin.to_owned(),
            source,
        },
        other => PhillyError::Row {
            line,
            why: format!("{other:?}"),
        },
    };
    let header = csv.headers().map_err(|e| io(e, 1))?.clone();
    let expected = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"];
    if header.iter().map(str::trim).ne(expected) {
        return Err(PhillyError::Header {
            found: header.iter().collect::<Vec<_>>().join(","),
        });
    }
    let mut rows = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        let line = csv.position().line();
        match csv.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(io(e, line)),
        }
        let line = record.position().map_or(line, csv::Position::line);
        let bad = |why: String| PhillyError::Row { line, why };
        let field = |i: usize| record.get(i).unwrap_or("").trim();
        let submit = parse_timestamp(field(0))
            .ok_or_else(|| bad(format!("timestamp {:?} is not YYYY-MM-DD HH:MM:SS", field(0))))?;
        let duration: f64 = field(1)
            .parse()
            .ok()
            .filter(|d: &f64| d.is_finite() && *d > 0.0 && *d < 1.0e10)
            .ok_or_else(|| {
                bad(format!(
                    "duration {:?} is not a positive number of seconds",
                    field(1)
                ))
            })?;
        let gpus: u32 = field(2)
            .parse()
            .ok()
            .filter(|g| (1..=4096).contains(g))
            .ok_or_else(|| {
                bad(format!(
                    "num_gpus {:?} is not a whole number in 1..=4096",
                    field(2)
                ))
            })?;
        let vc = field(4);
        if vc.is_empty() {
            return Err(bad("cluster (the virtual cluster) is empty".to_owned()));
        }
        rows.push(Row {
            submit,
            duration,
            gpus,
            vc: vc.to_owned(),
        });
    }
    Ok(rows)
}

/// How the trace becomes a replay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// Offered load the cluster is sized for, in (0, 1].
    pub target_load: f64,
    /// Jobs (in submit order) skipped before the slice.
    pub offset: usize,
    /// Most jobs in the slice (all when `None`).
    pub limit: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            target_load: 0.8,
            offset: 0,
            limit: None,
        }
    }
}

/// The replay's setup, for the report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Setup {
    /// Jobs in the slice.
    pub jobs: usize,
    /// Nodes of 8 GPUs.
    pub nodes: u32,
    /// GPUs.
    pub gpus: u32,
    /// Seconds from the first arrival to the last end were every job started on arrival.
    pub span_seconds: f64,
    /// GPU-seconds of all jobs.
    pub gpu_seconds: f64,
    /// GPU-time / (GPUs x span).
    pub offered_load: f64,
    /// Jobs whose GPUs do not split evenly over their pods, rounded up (none in the Philly subset).
    pub rounded_up: usize,
    /// Per VC: (name, share of GPU-time, quota in GPUs).
    pub queues: Vec<(String, f64, u32)>,
}

/// Whole quotas summing to `total`, proportional to `weights` (largest remainder), each at least one
/// when `total` allows (taken from the largest).
fn apportion(weights: &[f64], total: u32) -> Vec<u32> {
    let sum: f64 = weights.iter().sum();
    if weights.is_empty() || sum <= 0.0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights.iter().map(|w| w / sum * f64::from(total)).collect();
    let mut out: Vec<u32> = exact.iter().map(|e| e.floor() as u32).collect();
    let mut left = total.saturating_sub(out.iter().sum());
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder.sort_by(|a, b| {
        let (ra, rb) = (exact[*a] - exact[*a].floor(), exact[*b] - exact[*b].floor());
        rb.total_cmp(&ra).then(a.cmp(b))
    });
    for i in by_remainder {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    if total as usize >= weights.len() {
        for i in 0..out.len() {
            if out[i] == 0 {
                let largest = (0..out.len()).max_by_key(|j| (out[*j], std::cmp::Reverse(*j)));
                if let Some(l) = largest
                    && out[l] > 1
                {
                    out[l] -= 1;
                    out[i] = 1;
                }
            }
        }
    }
    out
}

/// The slice of the trace as a native workload, and its setup.
///
/// # Errors
/// An empty slice or a target load outside (0, 1].
pub fn workload(rows: &[Row], options: &Options) -> Result<(Workload, Setup), PhillyError> {
    if !(options.target_load > 0.0 && options.target_load <= 1.0) {
        return Err(PhillyError::Load(options.target_load));
    }
    let mut order: Vec<&Row> = rows.iter().collect();
    order.sort_by_key(|r| r.submit);
    let slice: Vec<&Row> = order
        .into_iter()
        .skip(options.offset)
        .take(options.limit.unwrap_or(usize::MAX))
        .collect();
    let Some(first) = slice.first() else {
        return Err(PhillyError::Empty {
            offset: options.offset,
            rows: rows.len(),
        });
    };
    let start = first.submit;
    let gpu_seconds: f64 = slice.iter().map(|r| r.duration * f64::from(r.gpus)).sum();
    // The span of the work: from the first arrival to the last end were every job started on arrival
    // (a short slice's long jobs run well past its last arrival).
    let span = slice
        .iter()
        .map(|r| (r.submit - start) as f64 + r.duration)
        .fold(0.0, f64::max);
    let per_node = f64::from(GPUS_PER_NODE) * span * options.target_load;
    let biggest = slice.iter().map(|r| r.gpus).max().unwrap_or(1);
    let nodes = ((gpu_seconds / per_node).ceil() as u32)
        .max(biggest.div_ceil(GPUS_PER_NODE))
        .max(1);
    let gpus = nodes * GPUS_PER_NODE;
    let mut by_vc: BTreeMap<&str, f64> = BTreeMap::new();
    for r in &slice {
        *by_vc.entry(r.vc.as_str()).or_default() += r.duration * f64::from(r.gpus);
    }
    let names: Vec<&str> = by_vc.keys().copied().collect();
    let weights: Vec<f64> = by_vc.values().copied().collect();
    let quotas = apportion(&weights, gpus);
    let mut queues = vec![QueueSpec {
        name: "philly".to_owned(),
        parent: None,
        priority: None,
        quota: f64::from(gpus),
        limit: None,
        over_quota_weight: 1.0,
    }];
    queues.extend(names.iter().zip(&quotas).map(|(name, quota)| QueueSpec {
        name: (*name).to_owned(),
        parent: Some("philly".to_owned()),
        priority: None,
        quota: f64::from(*quota),
        limit: None,
        over_quota_weight: f64::from(*quota).max(1.0),
    }));
    let mut jobs = Vec::with_capacity(slice.len());
    let mut rounded_up = 0;
    for (i, r) in slice.iter().enumerate() {
        let (count, per_pod) = split(r.gpus);
        if count * per_pod != r.gpus {
            rounded_up += 1;
        }
        let arrival = (r.submit - start) as f64;
        jobs.push(philly_job(i, &r.vc, arrival, r.duration, count, per_pod));
    }
    let setup = Setup {
        jobs: slice.len(),
        nodes,
        gpus,
        span_seconds: span,
        gpu_seconds,
        offered_load: gpu_seconds / (f64::from(gpus) * span),
        rounded_up,
        queues: names
            .iter()
            .zip(&weights)
            .zip(&quotas)
            .map(|((n, w), q)| ((*n).to_owned(), w / gpu_seconds, *q))
            .collect(),
    };
    let workload = Workload {
        nodes: vec![NodeSpec {
            name: "philly".to_owned(),
            count: nodes,
            cpu: 64.0,
            memory_gib: 512,
            gpus: GPUS_PER_NODE,
            labels: BTreeMap::new(),
        }],
        queues,
        jobs,
    };
    Ok((workload, setup))
}

/// Pods and GPUs per pod of an `n`-GPU job: one pod up to a node's 8 GPUs, else `ceil(n / 8)` equal
/// pods of `ceil(n / pods)` GPUs (exact when the pod count divides `n`: 12 = 2 x 6, 24 = 3 x 8).
#[must_use]
pub fn split(gpus: u32) -> (u32, u32) {
    if gpus <= GPUS_PER_NODE {
        (1, gpus)
    } else {
        let pods = gpus.div_ceil(GPUS_PER_NODE);
        (pods, gpus.div_ceil(pods))
    }
}

fn philly_job(i: usize, vc: &str, arrival: f64, duration: f64, count: u32, gpus: u32) -> JobSpec {
    JobSpec {
        name: Some(format!("j{i}")),
        queue: vc.to_owned(),
        arrival,
        duration,
        priority: None,
        preemptible: None,
        pods: PodsSpec {
            count,
            cpu: 4.0 * f64::from(gpus),
            memory_gib: 32 * gpus,
            gpus,
            gpu_share: None,
        },
        min_member: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "timestamp,duration,num_gpus,gpu_time,cluster\n";

    fn rows(body: &str) -> Result<Vec<Row>, PhillyError> {
        parse(format!("{HEADER}{body}").as_bytes(), "test")
    }

    #[test]
    fn timestamps_are_utc_seconds() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_timestamp("2017-10-09 07:01:55"), Some(1_507_532_515));
        assert_eq!(parse_timestamp("2000-03-01 00:00:01"), Some(951_868_801));
        for bad in [
            "2017-13-01 00:00:00",
            "2017-10-09T07:01:55",
            "2017-10-09 07:01",
            "20x7-10-09 07:01:55",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn rows_are_read_and_errors_name_their_line() {
        let r =
            rows("2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,2951.0,16,47216.0,6214e9\n")
                .expect("valid");
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[1].gpus, r[1].vc.as_str(), r[1].duration),
            (16, "6214e9", 2951.0)
        );
        let e = rows("2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 07:01:55,-5,1,66.0,a\n").unwrap_err();
        assert!(matches!(e, PhillyError::Row { line: 3, .. }), "{e}");
        assert!(e.to_string().contains("line 3: duration"), "{e}");
        let e = rows("2017-10-09 07:01:55,66.0,0,66.0,a\n").unwrap_err();
        assert!(e.to_string().contains("line 2: num_gpus"), "{e}");
        let e = rows("bad,66.0,1,66.0,a\n").unwrap_err();
        assert!(e.to_string().contains("line 2: timestamp"), "{e}");
        let e = rows("2017-10-09 07:01:55,66.0,1,66.0,\n").unwrap_err();
        assert!(e.to_string().contains("cluster"), "{e}");
        let e = parse("a,b\n1,2\n".as_bytes(), "t").unwrap_err();
        assert!(matches!(e, PhillyError::Header { .. }), "{e}");
        let e = read(Path::new("/nonexistent/philly.csv")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/philly.csv"), "{e}");
    }

    #[test]
    fn jobs_split_into_pods_of_at_most_a_node() {
        assert_eq!(split(1), (1, 1));
        assert_eq!(split(8), (1, 8));
        assert_eq!(split(12), (2, 6));
        assert_eq!(split(16), (2, 8));
        assert_eq!(split(24), (3, 8));
        assert_eq!(split(128), (16, 8));
        assert_eq!(
            split(9),
            (2, 5),
            "9 GPUs do not split evenly: rounded up to 2 x 5"
        );
    }

    #[test]
    fn quotas_are_whole_gpus_summing_to_the_cluster() {
        assert_eq!(apportion(&[5.0, 4.0], 16), vec![9, 7]);
        assert_eq!(apportion(&[1.0, 1.0, 1.0], 10), vec![4, 3, 3]);
        // A tiny share still gets one GPU, taken from the largest.
        assert_eq!(apportion(&[1000.0, 1.0], 8), vec![7, 1]);
        assert_eq!(apportion(&[], 8), Vec::<u32>::new());
    }

    #[test]
    fn the_cluster_is_sized_for_the_target_load() {
        // 8 GPUs x 1 h (VC a), 16 GPUs x 30 min (b), 1 GPU x 2 h (a, arriving at 2 h): 64,800 GPU-s.
        let r = rows(
            "2017-10-09 00:00:00,3600,8,0,a\n2017-10-09 01:00:00,1800,16,0,b\n2017-10-09 02:00:00,7200,1,0,a\n",
        )
        .expect("valid");
        let (w, setup) = workload(&r, &Options::default()).expect("a workload");
        // The span ends with the last job's end: 2 h + 2 h. ceil(64,800 / (8 x 14,400 x 0.8)) = 1 node,
        // but the 16-GPU job needs 2; load 64,800 / (16 x 14,400).
        assert_eq!((setup.nodes, setup.gpus, setup.jobs), (2, 16, 3));
        assert!((setup.span_seconds - 14_400.0).abs() < 1e-9);
        assert!((setup.offered_load - 0.28125).abs() < 1e-12);
        // a has 36,000 / 64,800 of the GPU-time: 8.9 GPUs -> 9, b 7.
        let quotas: Vec<(&str, f64)> = w.queues.iter().map(|q| (q.name.as_str(), q.quota)).collect();
        assert_eq!(quotas, [("philly", 16.0), ("a", 9.0), ("b", 7.0)]);
        let c = w.check().expect("valid");
        assert_eq!(c.jobs[1].pods, 2);
        assert_eq!(c.jobs[1].gpu_milli, 8000);
        assert_eq!(c.jobs[2].arrival, 7_200_000);
        // A lower target needs more nodes; a slice takes jobs in submit order.
        let (_, s) = workload(
            &r,
            &Options {
                target_load: 0.2,
                ..Options::default()
            },
        )
        .expect("a workload");
        assert_eq!(s.nodes, 3, "ceil(64,800 / (8 x 14,400 x 0.2)) = ceil(2.8)");
        let (w, s) = workload(
            &r,
            &Options {
                offset: 1,
                limit: Some(1),
                ..Options::default()
            },
        )
        .expect("a workload");
        assert_eq!((s.jobs, w.jobs[0].queue.as_str()), (1, "b"));
        assert!(matches!(
            workload(
                &r,
                &Options {
                    offset: 5,
                    ..Options::default()
                }
            ),
            Err(PhillyError::Empty { .. })
        ));
        assert!(matches!(
            workload(
                &r,
                &Options {
                    target_load: 1.5,
                    ..Options::default()
                }
            ),
            Err(PhillyError::Load(_))
        ));
    }
}
