//! Who was busy during a benchmark run: CPU time of the local control plane's processes (kube-apiserver,
//! etcd, kube-controller-manager) and of the contender's, the machine's busy share, and what the API
//! server reports about the run's requests (`/metrics`: how many binds it served and how long they and all
//! writes took, requests refused with 429). A probe is taken when the clock starts and another at the last
//! bind; [`Load::between`] is the difference.
//!
//! The control plane is shared with other engineers' tests: its CPU time and request counts include
//! theirs, so read them beside the machine's load average.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::DevPaths;

/// The control plane's processes, by name, as their pid files in `<cluster>/run/` name them.
const CONTROL_PLANE: [&str; 3] = ["kube-apiserver", "etcd", "kube-controller-manager"];

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// The latency histogram of a set of requests, as `apiserver_request_duration_seconds` buckets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Requests.
    pub count: f64,
    /// Seconds, summed.
    pub sum: f64,
    /// Cumulative count per upper bound (seconds), ascending.
    pub buckets: Vec<(f64, f64)>,
}

impl Histogram {
    fn minus(&self, earlier: &Self) -> Self {
        let before = |le: f64| {
            earlier
                .buckets
                .iter()
                .find(|(b, _)| b.total_cmp(&le).is_eq())
                .map_or(0.0, |(_, c)| *c)
        };
        Self {
            count: self.count - earlier.count,
            sum: self.sum - earlier.sum,
            buckets: self
                .buckets
                .iter()
                .map(|(le, c)| (*le, c - before(*le)))
                .collect(),
        }
    }

    fn add(&mut self, other: &Self) {
        self.count += other.count;
        self.sum += other.sum;
        for (le, c) in &other.buckets {
            match self.buckets.iter_mut().find(|(b, _)| b.total_cmp(le).is_eq()) {
                Some((_, mine)) => *mine += c,
                None => self.buckets.push((*le, *c)),
            }
        }
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }

    /// Mean seconds.
    #[must_use]
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The `q` quantile (0..1) in seconds, interpolated inside its bucket as Prometheus does.
    #[must_use]
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let mut previous = (0.0, 0.0);
        for (le, cumulative) in &self.buckets {
            if *cumulative >= rank {
                if le.is_infinite() {
                    return Some(previous.0);
                }
                let inside = (cumulative - previous.1).max(f64::MIN_POSITIVE);
                return Some(previous.0 + (le - previous.0) * (rank - previous.1) / inside);
            }
            previous = (*le, *cumulative);
        }
        Some(previous.0)
    }
}

/// What the API server's `/metrics` says at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerMetrics {
    /// `POST pods/binding`.
    pub binding: Histogram,
    /// Every write (POST, PUT, PATCH, DELETE, APPLY) of any resource.
    pub writes: Histogram,
    /// Requests answered 429 (too many requests in flight).
    pub throttled: f64,
}

/// The labels of a `name{labels} value` line.
fn labels(line: &str) -> BTreeMap<&str, &str> {
    let Some(inner) = line
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(l, _)| l)
    else {
        return BTreeMap::new();
    };
    inner
        .split("\",")
        .filter_map(|pair| {
            let (k, v) = pair.split_once("=\"")?;
            Some((k.trim(), v.trim_end_matches('"')))
        })
        .collect()
}

fn value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse().ok()
}

impl ServerMetrics {
    /// Reads the series this module needs from a `/metrics` text.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut m = Self::default();
        let write_verbs = ["POST", "PUT", "PATCH", "DELETE", "APPLY"];
        for line in text.lines() {
            let Some(name) = line.split(['{', ' ']).next() else {
                continue;
            };
            let (name, part) = match name {
                "apiserver_request_duration_seconds_bucket" => (name, "bucket"),
                "apiserver_request_duration_seconds_sum" => (name, "sum"),
                "apiserver_request_duration_seconds_count" => (name, "count"),
                "apiserver_request_total" => (name, "total"),
                _ => continue,
            };
            let (Some(v), l) = (value(line), labels(line)) else {
                continue;
            };
            if name == "apiserver_request_total" {
                if l.get("code") == Some(&"429") {
                    m.throttled += v;
                }
                continue;
            }
            let verb = l.get("verb").copied().unwrap_or_default();
            if !write_verbs.contains(&verb) {
                continue;
            }
            let binding = verb == "POST"
                && l.get("resource") == Some(&"pods")
                && l.get("subresource") == Some(&"binding");
            let mut one = Histogram::default();
            match part {
                "sum" => one.sum = v,
                "count" => one.count = v,
                _ => {
                    let le = match l.get("le").copied() {
                        Some("+Inf") => f64::INFINITY,
                        Some(le) => le.parse().unwrap_or(f64::INFINITY),
                        None => continue,
                    };
                    one.buckets.push((le, v));
                }
            }
            m.writes.add(&one);
            if binding {
                m.binding.add(&one);
            }
        }
        m
    }
}

/// CPU ticks (user + system) of a live process.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the name.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Busy and total ticks of all CPUs (`/proc/stat`).
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = cpu.iter().take(8).sum();
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
    let idle = cpu.get(3)? + cpu.get(4)?;
    Some((total - idle, total))
}

/// One moment of the run.
#[derive(Clone, Debug)]
pub struct Probe {
    at: Instant,
    cpu: Vec<(String, Option<u64>)>,
    machine: Option<(u64, u64)>,
    metrics: Option<ServerMetrics>,
}

/// The control plane's processes and their pids (those whose pid file names a live process).
#[must_use]
pub fn control_plane() -> Vec<(String, u32)> {
    let run = DevPaths::from_env().cluster_dir().join("run");
    CONTROL_PLANE
        .iter()
        .filter_map(|name| {
            let pid = std::fs::read_to_string(run.join(format!("{name}.pid")))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(((*name).to_owned(), pid))
        })
        .collect()
}

/// Reads every process's CPU time, the machine's, and the API server's metrics (when `client` may read
/// `/metrics`).
pub async fn probe(client: &kube::Client, processes: &[(String, u32)]) -> Probe {
    let metrics = match read_metrics(client).await {
        Ok(m) => Some(m),
        Err(err) => {
            eprintln!("bench:   API server metrics not read: {err:#}");
            None
        }
    };
    Probe {
        at: Instant::now(),
        cpu: processes
            .iter()
            .map(|(name, pid)| (name.clone(), cpu_ticks(*pid)))
            .collect(),
        machine: machine_ticks(),
        metrics,
    }
}

async fn read_metrics(client: &kube::Client) -> anyhow::Result<ServerMetrics> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    let text = client.request_text(request).await.context("GET /metrics")?;
    Ok(ServerMetrics::parse(&text))
}

/// What happened between two probes.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// Between the probes.
    pub wall: Duration,
    /// CPU seconds per process over the interval (processes that ran throughout).
    pub cpu_seconds: Vec<(String, f64)>,
    /// Share of all CPUs busy (any process), 0..1.
    pub machine_busy: Option<f64>,
    /// The API server's figures over the interval (all clients).
    pub server: Option<ServerMetrics>,
}

impl Load {
    /// The difference of two probes of the same processes.
    #[must_use]
    pub fn between(start: &Probe, end: &Probe) -> Self {
        let cpu_seconds = start
            .cpu
            .iter()
            .zip(&end.cpu)
            .filter_map(|((name, a), (_, b))| {
                Some((
                    name.clone(),
                    b.as_ref()?.saturating_sub((*a)?) as f64 / TICKS_PER_SECOND,
                ))
            })
            .collect();
        let machine_busy = match (start.machine, end.machine) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => Some((b1 - b0) as f64 / (t1 - t0) as f64),
            _ => None,
        };
        let server = match (&start.metrics, &end.metrics) {
            (Some(a), Some(b)) => Some(ServerMetrics {
                binding: b.binding.minus(&a.binding),
                writes: b.writes.minus(&a.writes),
                throttled: b.throttled - a.throttled,
            }),
            _ => None,
        };
        Self {
            wall: end.at.saturating_duration_since(start.at),
            cpu_seconds,
            machine_busy,
            server,
        }
    }

    /// Cores a process kept busy on average.
    #[must_use]
    pub fn cores(&self, name: &str) -> Option<f64> {
        let wall = self.wall.as_secs_f64();
        self.cpu_seconds
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, s)| *s / wall.max(1e-3))
            .reduce(|a, b| a + b)
    }
}

/// A Markdown table of the runs' loads: who kept the CPUs busy and how the API server answered.
#[must_use]
pub fn table(rows: &[(String, &Load)], cores: usize) -> String {
    let mut out = format!(
        "\nWhere the time went ({cores} cores; cores busy = CPU seconds / wall seconds between the first create \
         and the last bind; the API server's figures count every client):\n\n\
         | run | wall s | kube-apiserver cores | etcd cores | controller-manager cores | contender cores | machine busy | \
         binds/s served | binding ms mean / p50 / p99 | all writes/s | write ms mean / p99 | 429s |\n\
         | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{:.0}", v * 1e3));
    for (label, load) in rows {
        let wall = load.wall.as_secs_f64().max(1e-3);
        let contender: Vec<String> = load
            .cpu_seconds
            .iter()
            .filter(|(n, _)| !CONTROL_PLANE.contains(&n.as_str()))
            .map(|(n, s)| format!("{n} {:.2}", s / wall))
            .collect();
        let (binding, writes, throttled) = match &load.server {
            Some(s) => (Some(&s.binding), Some(&s.writes), Some(s.throttled)),
            None => (None, None, None),
        };
        out.push_str(&format!(
            "| {label} | {wall:.1} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} | {} / {} | {} |\n",
            f(load.cores("kube-apiserver")),
            f(load.cores("etcd")),
            f(load.cores("kube-controller-manager")),
            contender.join(", "),
            load.machine_busy
                .map_or_else(|| "-".to_owned(), |b| format!("{:.0}%", b * 100.0)),
            binding.map_or_else(|| "-".to_owned(), |b| format!("{:.0}", b.count / wall)),
            ms(binding.and_then(Histogram::mean)),
            ms(binding.and_then(|b| b.quantile(0.5))),
            ms(binding.and_then(|b| b.quantile(0.99))),
            writes.map_or_else(|| "-".to_owned(), |w| format!("{:.0}", w.count / wall)),
            ms(writes.and_then(Histogram::mean)),
            ms(writes.and_then(|w| w.quantile(0.99))),
            throttled.map_or_else(|| "-".to_owned(), |t| format!("{t:.0}")),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP apiserver_request_duration_seconds x
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1",le="0.1"} 50
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1",le="0.2"} 90
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1",le="+Inf"} 100
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 12
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 100
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1",le="0.1"} 7
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="events",scope="namespace",subresource="",verb="POST",version="v1",le="0.1"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="events",scope="namespace",subresource="",verb="POST",version="v1",le="0.2"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="events",scope="namespace",subresource="",verb="POST",version="v1",le="+Inf"} 10
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="events",scope="namespace",subresource="",verb="POST",version="v1"} 0.5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="events",scope="namespace",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="429",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 100
"#;

    #[test]
    fn binding_and_write_latencies_are_read_from_the_histograms() {
        let m = ServerMetrics::parse(METRICS);
        assert_eq!(m.binding.count, 100.0);
        assert!((m.binding.mean().expect("mean") - 0.12).abs() < 1e-9);
        assert_eq!(m.writes.count, 110.0, "reads are not writes");
        assert_eq!(
            m.writes.buckets,
            vec![(0.1, 60.0), (0.2, 100.0), (f64::INFINITY, 110.0)]
        );
        assert_eq!(m.throttled, 3.0);
        // The median falls at rank 50: the top of the first bucket.
        assert!((m.binding.quantile(0.5).expect("p50") - 0.1).abs() < 1e-9);
        // Rank 70 is halfway through the second bucket.
        assert!((m.binding.quantile(0.7).expect("p70") - 0.15).abs() < 1e-9);
        let zero = ServerMetrics::parse("");
        let d = m.binding.minus(&zero.binding);
        assert_eq!(d.count, 100.0);
        assert_eq!(d.buckets[1], (0.2, 90.0));
    }

    #[test]
    fn this_process_is_busy_and_the_machine_has_ticks() {
        let ticks = cpu_ticks(std::process::id());
        assert!(ticks.is_some());
        let (busy, total) = machine_ticks().expect("/proc/stat");
        assert!(busy <= total && total > 0);
    }
}
