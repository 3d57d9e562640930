//! Node bounds kept across one action's victim searches.
//!
//! Consolidation searches victims for one waiting gang after another over one kept list
//! ([`super::Pool`]), and for a gang's last pod it meets nodes in order of a bound on their rank
//! ([`super::Search::rank_bound`]). A node's bound reads only the pod's shape ([`BoundPod`]), the node
//! (its room, shared devices, static predicates) and the list's units on it. So the bounds are kept per
//! pod shape, ordered, and before each search only the nodes changed since are bounded again: those the
//! model stamped (pods placed, evicted, reserved, rolled back: [`crate::model::Cluster`]'s node arena
//! keeps a log of them) and those whose units the list refilled ([`Candidates::refilled_nodes`]).

use std::collections::{BTreeSet, HashMap};

use super::{BoundPod, Candidates, Rank, Request, Search};
use crate::framework::Session;
use crate::model::{IdMap, NodeId};

/// Bounds by pod shape.
#[derive(Clone, Debug, Default)]
pub(super) struct KeptBounds {
    by_shape: HashMap<BoundPod, ShapeBounds>,
}

/// Every node's bound for one pod shape, as of a node clock and a point of the list's refills.
#[derive(Clone, Debug, Default)]
struct ShapeBounds {
    /// Whether every node was bounded once.
    built: bool,
    /// The node arena's clock when they were last brought up to date.
    nodes_clock: u64,
    /// How many of the list's refilled nodes they had seen then.
    refills_seen: usize,
    by_node: IdMap<NodeId, Rank>,
    ordered: BTreeSet<Rank>,
}

impl KeptBounds {
    /// The bounds of every node for `pod`, lowest first, as the session and the list stand. Only for a
    /// search that takes every unit of the list and has taken none yet ([`Request::takes_every_unit`]),
    /// with no topology domain.
    pub(super) fn brought_up_to_date(
        &mut self,
        search: &mut Search,
        ssn: &mut Session<'_>,
        req: &Request<'_>,
        pod: &BoundPod,
    ) -> &BTreeSet<Rank> {
        let candidates: &Candidates = &req.candidates;
        let clock = ssn.cluster.nodes.clock();
        let refills = candidates.refilled_nodes.len();
        let kept = self.by_shape.entry(*pod).or_default();
        let changed: Option<Vec<NodeId>> = if kept.built {
            ssn.cluster.nodes.changed_since(kept.nodes_clock).map(|stamped| {
                let mut nodes: Vec<NodeId> = stamped.iter().map(|i| NodeId(*i)).collect();
                nodes.extend(
                    candidates
                        .refilled_nodes
                        .get(kept.refills_seen..)
                        .unwrap_or_default(),
                );
                nodes.sort_unstable();
                nodes.dedup();
                nodes
            })
        } else {
            None
        };
        match changed {
            Some(nodes) => {
                for node in nodes {
                    if let Some(old) = kept.by_node.remove(&node) {
                        kept.ordered.remove(&old);
                    }
                    let held = candidates.index(ssn.cluster).get(&node);
                    if let Some(held) = held
                        && let Some(bound) = search.rank_bound(ssn, req, pod, node, held, None)
                    {
                        kept.by_node.insert(node, bound);
                        kept.ordered.insert(bound);
                    }
                }
            }
            None => {
                // First use, or the log no longer reaches back: bound every node.
                kept.by_node.clear();
                kept.ordered.clear();
                for (node, held) in candidates.index(ssn.cluster) {
                    if let Some(bound) = search.rank_bound(ssn, req, pod, *node, held, None) {
                        kept.by_node.insert(*node, bound);
                        kept.ordered.insert(bound);
                    }
                }
            }
        }
        kept.built = true;
        kept.nodes_clock = clock;
        kept.refills_seen = refills;
        if cfg!(debug_assertions) {
            let fresh: BTreeSet<Rank> = candidates
                .index(ssn.cluster)
                .iter()
                .filter_map(|(node, held)| search.rank_bound(ssn, req, pod, *node, held, None))
                .collect();
            debug_assert!(fresh == kept.ordered, "kept node bounds differ from fresh ones");
        }
        &kept.ordered
    }
}
