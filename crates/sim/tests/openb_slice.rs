//! A CI-sized run of the FGD experiment on a slice of the real openb trace: every 8th node of the node
//! list and the first 1,000 pods of a pod list, one seed, the reference policies and the core's own.
//!
//! The traces are read from `$KAI_TRACES/openb` (default: `<workspace>/../shared/traces/openb`); the
//! project never holds trace data. Without them this test fails and says where it looked.
//!
//! The expectations are derived from the experiment's definition, not copied from a run: allocation
//! never exceeds capacity or what arrived, never falls (nothing departs), every pod is placed or refused
//! once, a constrained pod sits only on a node of its GPU models, the fragmentation measure lies between
//! zero and the idle capacity, and (on the default list, which is GPU-bound) BestFit, which looks at
//! every node, allocates at least what Random does once the cluster is full. With consolidation, every
//! moved pod is placed again (none lost), so the same holds of its replay.

use std::path::PathBuf;

use kai_sim::fgd::{self, Policy, Replay};
use kai_sim::openb::{self, OpenbNode, OpenbPod};
use scheduler_core::model::TaskStatus;

fn traces() -> PathBuf {
    let dir = std::env::var_os("KAI_TRACES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
        PathBuf::from,
    );
    dir.join("openb")
}

fn load(workload: &str) -> (Vec<OpenbNode>, Vec<OpenbPod>) {
    let dir = traces();
    let nodes_file = dir.join("openb_node_list_gpu_node.csv");
    assert!(
        nodes_file.is_file(),
        "the openb trace is missing: no {} (set KAI_TRACES to the directory holding openb/)",
        nodes_file.display()
    );
    let nodes = openb::read_file(&nodes_file, openb::read_nodes).expect("node list");
    let pods = openb::read_file(&dir.join(format!("{workload}.csv")), openb::read_pods).expect("pod list");
    let nodes: Vec<OpenbNode> = nodes.into_iter().step_by(8).collect();
    let pods: Vec<OpenbPod> = pods.into_iter().take(1000).collect();
    (nodes, pods)
}

fn check_replay(name: &str, nodes: &[OpenbNode], pods: &[OpenbPod], order: &[usize], r: &Replay) {
    let capacity = fgd::capacity_milli(nodes);
    assert_eq!(
        r.placed + r.failed,
        order.len(),
        "{name}: each pod placed or refused once"
    );
    let mut last = 0;
    for s in &r.samples {
        assert!(s.allocated_milli <= capacity, "{name}: over capacity");
        assert!(
            s.allocated_milli <= s.arrived_milli,
            "{name}: more allocated than arrived"
        );
        assert!(
            s.allocated_milli >= last,
            "{name}: allocation fell with nothing departing"
        );
        last = s.allocated_milli;
        assert_eq!(
            s.idle_milli,
            capacity - s.allocated_milli,
            "{name}: idle + allocated = capacity"
        );
        #[allow(clippy::cast_precision_loss)]
        let idle = s.idle_milli as f64;
        assert!(
            s.frag_milli >= -1e-6 && s.frag_milli <= idle + 1e-6,
            "{name}: fragmentation outside [0, idle]"
        );
    }
    let arrived: i64 = order.iter().map(|i| pods[*i].gpu_milli_total()).sum();
    assert_eq!(r.samples.last().map(|s| s.arrived_milli), Some(arrived), "{name}");
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let target = (1.3 * capacity as f64) as i64;
    assert!(
        arrived <= target && arrived > target - 8000,
        "{name}: arrived {arrived} vs {target}"
    );
    // Figures are read at every reported load, and allocation there never falls with load.
    let at: Vec<f64> = fgd::REPORTED
        .iter()
        .map(|p| {
            r.at(*p)
                .unwrap_or_else(|| panic!("{name}: no sample near {p} %"))
                .0
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1] + 1e-9), "{name}: {at:?}");
}

#[test]
fn the_fgd_experiment_on_a_slice_of_openb() {
    for (workload, policies) in [
        (
            "openb_pod_list_default",
            &[Policy::Random, Policy::BestFit, Policy::Fragmentation][..],
        ),
        (
            "openb_pod_list_gpuspec33",
            &[Policy::Fragmentation, Policy::FragmentationConsolidate][..],
        ),
    ] {
        let (nodes, pods) = load(workload);
        let capacity = fgd::capacity_milli(&nodes);
        let typical = fgd::Typical::of(&pods);
        let order = fgd::arrival_order(&pods, capacity, 1.3, 42);
        let mut at_130 = Vec::new();
        for policy in policies {
            let name = format!("{workload} {}", policy.name());
            let (r, cluster) = fgd::replay_keeping_cluster(
                &fgd::node_order(&nodes, 42),
                &pods,
                &order,
                &policy.config(42),
                fgd::Mix::Observed,
                &typical,
                &mut |_| {},
            )
            .expect("replays");
            check_replay(&name, &nodes, &pods, &order, &r);
            cluster.check_invariants().expect("accounting stays exact");
            // Consolidation moves a pod only where it has somewhere else to go: none is lost.
            assert_eq!(r.lost, 0, "{name}: a moved pod found no place again");
            // Constrained pods sit only on nodes of their models.
            for (_, task) in cluster.tasks.iter() {
                let Some(n) = task.node else { continue };
                assert_eq!(task.status, TaskStatus::Running, "{name}");
                let node = cluster.node(n);
                for term in &cluster.constraints.get(task.constraints).affinity_terms {
                    assert!(
                        term.iter().all(|req| req.matches_node(&node.name, &node.labels)),
                        "{name}: {} on {}",
                        task.name,
                        node.name
                    );
                }
            }
            at_130.push((*policy, r.at(130).map(|(a, _)| a).unwrap_or_default()));
        }
        let of = |p: Policy| at_130.iter().find(|(q, _)| *q == p).map(|(_, a)| *a);
        if let (Some(random), Some(bestfit)) = (of(Policy::Random), of(Policy::BestFit)) {
            assert!(
                bestfit >= random,
                "{workload}: BestFit {bestfit:.2} % < Random {random:.2} % at 130 %"
            );
        }
    }
}
