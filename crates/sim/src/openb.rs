//! Readers of Alibaba's GPU cluster trace v2023 ("openb", as used by the FGD paper: Weng et al.,
//! "Beware of Fragmentation", USENIX ATC 2023), and its mapping onto the core's model.
//!
//! - node list: `sn,cpu_milli,memory_mib,gpu,model`;
//! - pod lists: `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
//!   deletion_time,scheduled_time` (only the first seven matter to a static replay; `gpu_spec` and `qos`
//!   may be absent, as in `openb_pod_list_multigpu50.csv`).
//!
//! A node becomes a ready node with its CPU, memory and GPUs and the GPU model as the
//! `nvidia.com/gpu.product` label; a pod becomes a one-pod gang asking for its CPU and memory and for
//! whole GPUs, or, when `gpu_milli` < 1000 on one GPU, for that fraction of a shared GPU; `gpu_spec`
//! (`A|B`) becomes a required node affinity `In [A, B]` on the model label.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use scheduler_core::model::constraints::{Constraints, Operator, Requirement};
use scheduler_core::model::pod_rules::HOSTNAME_KEY;
use scheduler_core::model::resources::PODS;
use scheduler_core::model::{GpuRequest, NodeUpdate, Resources};

/// The node label that carries a node's GPU model.
pub const GPU_MODEL_LABEL: &str = "nvidia.com/gpu.product";

/// MiB in bytes.
const MIB: i64 = 1 << 20;

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OpenbError {
    /// The file could not be opened.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The CSV itself is malformed.
    #[error("line {line}: {source}")]
    Csv {
        /// 1-based line.
        line: u64,
        /// The cause.
        source: csv::Error,
    },
    /// A required column is missing from the header.
    #[error("missing column {0:?} in the header")]
    MissingColumn(&'static str),
    /// A field does not hold what its column needs.
    #[error("line {line}, column {column}: {value:?} {reason}")]
    Field {
        /// 1-based line.
        line: u64,
        /// Column name.
        column: &'static str,
        /// The text found.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// One node of the node list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenbNode {
    /// Name (`sn`).
    pub name: String,
    /// CPU in millicores.
    pub cpu_milli: i64,
    /// Memory in MiB.
    pub memory_mib: i64,
    /// GPUs.
    pub gpus: u32,
    /// GPU model (empty for a CPU-only node).
    pub model: String,
}

/// One pod of a pod list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenbPod {
    /// Name.
    pub name: String,
    /// CPU request in millicores.
    pub cpu_milli: i64,
    /// Memory request in MiB.
    pub memory_mib: i64,
    /// GPUs (0-8).
    pub num_gpu: u32,
    /// Thousandths of each GPU (1000 for whole GPUs, less for a fraction of one GPU, 0 without GPU).
    pub gpu_milli: u32,
    /// GPU models allowed (empty: any).
    pub gpu_spec: Vec<String>,
    /// QoS class as written.
    pub qos: String,
}

impl OpenbPod {
    /// GPU thousandths the pod asks for in all.
    #[must_use]
    pub fn gpu_milli_total(&self) -> i64 {
        i64::from(self.num_gpu) * i64::from(self.gpu_milli)
    }

    /// The core's GPU request: none, whole GPUs, or a fraction of one shared GPU.
    #[must_use]
    pub fn gpu_request(&self) -> GpuRequest {
        match (self.num_gpu, self.gpu_milli) {
            (0, _) | (_, 0) => GpuRequest::None,
            (1, m) if m < 1000 => GpuRequest::Fraction { milli: m, devices: 1 },
            (n, _) => GpuRequest::Whole(n),
        }
    }

    /// The pod's request as the core counts it (CPU, memory, whole GPUs, one pod slot; a fraction's
    /// GPU is accounted on its shared device, not here).
    #[must_use]
    pub fn request(&self) -> Resources {
        let whole = match self.gpu_request() {
            GpuRequest::Whole(n) => i64::from(n) * 1000,
            _ => 0,
        };
        Resources::new(self.cpu_milli, self.memory_mib.saturating_mul(MIB), whole).with(PODS, 1)
    }

    /// Where the pod may go: a required node affinity on the GPU model when `gpu_spec` names models.
    #[must_use]
    pub fn constraints(&self) -> Constraints {
        let mut c = Constraints::default();
        if !self.gpu_spec.is_empty() {
            c.affinity_terms = vec![vec![Requirement {
                key: GPU_MODEL_LABEL.to_owned(),
                field: false,
                op: Operator::In(self.gpu_spec.clone()),
            }]];
        }
        c
    }
}

impl OpenbNode {
    /// The node as the core's watch cache would apply it.
    #[must_use]
    pub fn update(&self) -> NodeUpdate {
        let mut labels = BTreeMap::from([(HOSTNAME_KEY.to_owned(), self.name.clone())]);
        if !self.model.is_empty() {
            labels.insert(GPU_MODEL_LABEL.to_owned(), self.model.clone());
        }
        NodeUpdate {
            name: self.name.as_str().into(),
            labels,
            taints: Vec::new(),
            ready: true,
            unschedulable: false,
            allocatable: Resources::new(
                self.cpu_milli,
                self.memory_mib.saturating_mul(MIB),
                i64::from(self.gpus) * 1000,
            )
            .with(PODS, 1_000_000),
            gpu_memory_mib: None,
        }
    }
}

/// Column positions found in a header.
struct Columns(Vec<(&'static str, usize)>);

impl Columns {
    fn find(headers: &csv::StringRecord, wanted: &[&'static str]) -> Result<Self, OpenbError> {
        let mut out = Vec::new();
        for w in wanted {
            let i = headers
                .iter()
                .position(|h| h.trim() == *w)
                .ok_or(OpenbError::MissingColumn(w))?;
            out.push((*w, i));
        }
        Ok(Self(out))
    }

    /// Adds the columns of `optional` the header has (a missing one reads as empty).
    fn with_optional(mut self, headers: &csv::StringRecord, optional: &[&'static str]) -> Self {
        for w in optional {
            if let Some(i) = headers.iter().position(|h| h.trim() == *w) {
                self.0.push((w, i));
            }
        }
        self
    }

    fn get<'r>(&self, record: &'r csv::StringRecord, column: &'static str) -> &'r str {
        self.0
            .iter()
            .find(|(c, _)| *c == column)
            .and_then(|(_, i)| record.get(*i))
            .unwrap_or("")
            .trim()
    }
}

fn number<T: std::str::FromStr>(line: u64, column: &'static str, value: &str) -> Result<T, OpenbError> {
    value.parse().map_err(|_| OpenbError::Field {
        line,
        column,
        value: value.to_owned(),
        reason: "is not a non-negative whole number in range",
    })
}

fn records<R: Read>(reader: R) -> csv::Reader<R> {
    csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(reader)
}

fn line_of(record: &csv::StringRecord) -> u64 {
    record.position().map_or(0, csv::Position::line)
}

/// A record of the reader, or the CSV error with its line.
fn record_at(record: Result<csv::StringRecord, csv::Error>) -> Result<csv::StringRecord, OpenbError> {
    record.map_err(|source| OpenbError::Csv {
        line: source.position().map_or(0, csv::Position::line),
        source,
    })
}

/// A column that names the row (`sn`, `name`): present and not empty.
fn row_name<'r>(
    cols: &Columns,
    record: &'r csv::StringRecord,
    column: &'static str,
    line: u64,
) -> Result<&'r str, OpenbError> {
    let name = cols.get(record, column);
    if name.is_empty() {
        return Err(OpenbError::Field {
            line,
            column,
            value: String::new(),
            reason: "is empty",
        });
    }
    Ok(name)
}

/// Reads a node list.
///
/// # Errors
/// A malformed CSV, a missing column, or a field out of range (with its line).
pub fn read_nodes(reader: impl Read) -> Result<Vec<OpenbNode>, OpenbError> {
    let mut rdr = records(reader);
    let headers = rdr
        .headers()
        .map_err(|source| OpenbError::Csv { line: 1, source })?
        .clone();
    let cols = Columns::find(&headers, &["sn", "cpu_milli", "memory_mib", "gpu", "model"])?;
    let mut nodes = Vec::new();
    for record in rdr.records() {
        let record = record_at(record)?;
        let line = line_of(&record);
        let name = row_name(&cols, &record, "sn", line)?;
        let cpu_milli: u32 = number(line, "cpu_milli", cols.get(&record, "cpu_milli"))?;
        let memory_mib: u32 = number(line, "memory_mib", cols.get(&record, "memory_mib"))?;
        let gpus: u32 = number(line, "gpu", cols.get(&record, "gpu"))?;
        if gpus > 1024 {
            return Err(OpenbError::Field {
                line,
                column: "gpu",
                value: gpus.to_string(),
                reason: "is more GPUs than a node holds",
            });
        }
        nodes.push(OpenbNode {
            name: name.to_owned(),
            cpu_milli: i64::from(cpu_milli),
            memory_mib: i64::from(memory_mib),
            gpus,
            model: cols.get(&record, "model").to_owned(),
        });
    }
    Ok(nodes)
}

/// Reads a pod list.
///
/// # Errors
/// A malformed CSV, a missing column, or a field out of range or inconsistent (a fraction on more than
/// one GPU, GPU thousandths without GPUs or above 1000), with its line.
pub fn read_pods(reader: impl Read) -> Result<Vec<OpenbPod>, OpenbError> {
    let mut rdr = records(reader);
    let headers = rdr
        .headers()
        .map_err(|source| OpenbError::Csv { line: 1, source })?
        .clone();
    // `gpu_spec` and `qos` are absent from some lists (multigpu50): no model constraint, no class.
    let cols = Columns::find(
        &headers,
        &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
    )?
    .with_optional(&headers, &["gpu_spec", "qos"]);
    let mut pods = Vec::new();
    for record in rdr.records() {
        let record = record_at(record)?;
        let line = line_of(&record);
        let name = row_name(&cols, &record, "name", line)?;
        let cpu_milli: u32 = number(line, "cpu_milli", cols.get(&record, "cpu_milli"))?;
        let memory_mib: u32 = number(line, "memory_mib", cols.get(&record, "memory_mib"))?;
        let num_gpu: u32 = number(line, "num_gpu", cols.get(&record, "num_gpu"))?;
        let gpu_milli: u32 = number(line, "gpu_milli", cols.get(&record, "gpu_milli"))?;
        let bad = |column, value: u32, reason| OpenbError::Field {
            line,
            column,
            value: value.to_string(),
            reason,
        };
        if num_gpu > 64 {
            return Err(bad("num_gpu", num_gpu, "is more GPUs than a pod can ask for"));
        }
        if gpu_milli > 1000 {
            return Err(bad("gpu_milli", gpu_milli, "is more than one GPU (1000)"));
        }
        if num_gpu == 0 && gpu_milli > 0 {
            return Err(bad(
                "gpu_milli",
                gpu_milli,
                "is GPU thousandths on a pod without GPUs",
            ));
        }
        if num_gpu > 0 && gpu_milli == 0 {
            return Err(bad("gpu_milli", gpu_milli, "is zero on a pod with GPUs"));
        }
        if num_gpu > 1 && gpu_milli < 1000 {
            return Err(bad("gpu_milli", gpu_milli, "is a fraction on more than one GPU"));
        }
        let gpu_spec: Vec<String> = cols
            .get(&record, "gpu_spec")
            .split('|')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect();
        pods.push(OpenbPod {
            name: name.to_owned(),
            cpu_milli: i64::from(cpu_milli),
            memory_mib: i64::from(memory_mib),
            num_gpu,
            gpu_milli,
            gpu_spec,
            qos: cols.get(&record, "qos").to_owned(),
        });
    }
    Ok(pods)
}

/// Reads a file with `read`, naming the file in errors.
///
/// # Errors
/// The file cannot be opened, or `read` fails.
pub fn read_file<T>(
    path: &Path,
    read: impl FnOnce(std::fs::File) -> Result<T, OpenbError>,
) -> Result<T, OpenbError> {
    let file = std::fs::File::open(path).map_err(|source| OpenbError::Io {
        path: path.display().to_string(),
        source,
    })?;
    read(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,P100\nn-1,96000,393216,8,V100M32\nc-0,32000,131072,0,\n";

    #[test]
    fn reads_nodes_and_maps_them_to_node_updates() {
        let nodes = read_nodes(NODES.as_bytes()).expect("valid");
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[1].gpus, 8);
        let u = nodes[1].update();
        assert_eq!(u.allocatable.gpu(), 8000);
        assert_eq!(u.allocatable.cpu(), 96_000);
        assert_eq!(u.labels.get(GPU_MODEL_LABEL).map(String::as_str), Some("V100M32"));
        assert!(!nodes[2].update().labels.contains_key(GPU_MODEL_LABEL));
    }

    #[test]
    fn reads_pods_whole_fraction_cpu_only_and_constrained() {
        let csv = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
                   p0,12000,16384,1,1000,,LS,Running,0,1,0\n\
                   p1,6000,12288,1,460,,LS,Running,0,1,0\n\
                   p2,4000,8192,0,0,,BE,Running,0,1,0\n\
                   p3,8000,8192,8,1000,V100M16|V100M32,LS,Running,0,1,0\n";
        let pods = read_pods(csv.as_bytes()).expect("valid");
        assert_eq!(pods[0].gpu_request(), GpuRequest::Whole(1));
        assert_eq!(pods[0].request().gpu(), 1000);
        assert_eq!(
            pods[1].gpu_request(),
            GpuRequest::Fraction {
                milli: 460,
                devices: 1
            }
        );
        assert_eq!(
            pods[1].request().gpu(),
            0,
            "a fraction is accounted on its device"
        );
        assert_eq!(pods[1].gpu_milli_total(), 460);
        assert_eq!(pods[2].gpu_request(), GpuRequest::None);
        assert_eq!(pods[3].gpu_milli_total(), 8000);
        let c = pods[3].constraints();
        assert_eq!(
            c.affinity_terms[0][0].op,
            Operator::In(vec!["V100M16".into(), "V100M32".into()])
        );
        assert!(pods[0].constraints().affinity_terms.is_empty());
    }

    #[test]
    fn bad_fields_are_reported_with_their_line() {
        let head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n";
        let cases = [
            ("p,1,1,2,500,,LS\n", "gpu_milli", "fraction on more than one GPU"),
            ("p,1,1,0,500,,LS\n", "gpu_milli", "without GPUs"),
            ("p,1,1,1,1500,,LS\n", "gpu_milli", "more than one GPU"),
            ("p,-5,1,1,1000,,LS\n", "cpu_milli", "non-negative"),
            ("p,x,1,1,1000,,LS\n", "cpu_milli", "non-negative"),
        ];
        for (row, column, reason) in cases {
            let text = format!("{head}p-ok,1,1,1,1000,,LS\n{row}");
            let e = read_pods(text.as_bytes()).expect_err(row);
            match &e {
                OpenbError::Field { line, column: c, .. } => {
                    assert_eq!((*line, *c), (3, column), "{e}");
                    assert!(e.to_string().contains(reason), "{e}");
                }
                other => panic!("{row}: {other:?}"),
            }
        }
        let e = read_nodes("sn,cpu_milli,gpu,model\nn,1,1,T4\n".as_bytes()).expect_err("no memory");
        assert!(matches!(e, OpenbError::MissingColumn("memory_mib")), "{e:?}");
        let e = read_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1\n".as_bytes()).expect_err("short");
        assert!(matches!(e, OpenbError::Csv { line: 2, .. }), "{e:?}");
    }

    #[test]
    fn gpu_spec_and_qos_may_be_absent() {
        let pods = read_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,2,1000\n".as_bytes())
            .expect("valid");
        assert_eq!(pods[0].gpu_request(), GpuRequest::Whole(2));
        assert!(pods[0].gpu_spec.is_empty() && pods[0].qos.is_empty());
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let e = read_file(Path::new("/nonexistent/nodes.csv"), read_nodes).expect_err("missing");
        assert!(e.to_string().contains("/nonexistent/nodes.csv"), "{e}");
    }
}
