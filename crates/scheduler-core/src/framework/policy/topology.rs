//! Topology domains: nodes grouped by their labels at a level of a `Topology` (zone > rack > host, an
//! NVLink domain, ...), and the order in which a gang tries them: the tightest domain that can hold it
//! first, so gangs pack into domains and leave whole domains free for larger ones.

use std::collections::BTreeMap;

use crate::model::group::TopologyRequirement;
use crate::model::resources::{CPU, GPU};
use crate::model::{Cluster, NodeId, Resources};

/// Nodes that share one domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// Label values down to the level, joined with `.` (KAI's domain id).
    pub id: String,
    /// Level index.
    pub level: usize,
    /// Member nodes.
    pub nodes: Vec<NodeId>,
}

/// Domains at one level: nodes lacking a label at or above the level are outside the topology.
#[must_use]
pub fn domains(cluster: &Cluster, levels: &[String], level: usize) -> Vec<Domain> {
    let mut by_id: BTreeMap<String, Vec<NodeId>> = BTreeMap::new();
    'nodes: for (i, n) in cluster.nodes.iter() {
        let mut parts = Vec::with_capacity(level + 1);
        for key in &levels[..=level.min(levels.len().saturating_sub(1))] {
            match n.labels.get(key) {
                Some(v) => parts.push(v.as_str()),
                None => continue 'nodes,
            }
        }
        by_id.entry(parts.join(".")).or_default().push(NodeId(i));
    }
    by_id
        .into_iter()
        .map(|(id, nodes)| Domain { id, level, nodes })
        .collect()
}

/// Free resources now over a domain's nodes.
#[must_use]
pub fn free(cluster: &Cluster, nodes: &[NodeId]) -> Resources {
    let mut total = Resources::ZERO;
    for n in nodes {
        let node = cluster.node(*n);
        if node.ready && !node.unschedulable {
            total.add(&node.available(&Resources::ZERO).1.max(&Resources::ZERO));
        }
    }
    total
}

/// Node sets to try in order (`None` = anywhere), and the freest domain at the required level (id, main
/// resource amount) for explanations.
pub type Candidates = (Vec<Option<Vec<NodeId>>>, Option<(String, i64)>);

/// The node sets a gang tries, in order: domains at the preferred level (tightest that can hold it
/// first), then domains at the required level, then (without a required level) anywhere (`None`).
/// `must_contain` restricts to domains holding the gang's running pods. Also returns the largest free
/// amount seen at the required level, for the explanation when nothing fits.
#[must_use]
pub fn candidates(
    cluster: &Cluster,
    req: &TopologyRequirement,
    need: &Resources,
    must_contain: &[NodeId],
    within: Option<&[NodeId]>,
) -> Candidates {
    let main = if need.gpu() > 0 { GPU } else { CPU };
    let mut out: Vec<Option<Vec<NodeId>>> = Vec::new();
    let mut largest: Option<(String, i64)> = None;
    let mut levels_to_try: Vec<usize> = Vec::new();
    if let Some(p) = req.preferred {
        levels_to_try.push(p);
    }
    if let Some(r) = req.required
        && !levels_to_try.contains(&r)
    {
        levels_to_try.push(r);
    }
    for level in levels_to_try {
        let is_required = req.required == Some(level);
        let mut fitting: Vec<(i64, String, Vec<NodeId>)> = Vec::new();
        for d in domains(cluster, &req.levels, level) {
            let nodes: Vec<NodeId> = match within {
                Some(w) => d.nodes.iter().copied().filter(|n| w.contains(n)).collect(),
                None => d.nodes.clone(),
            };
            if nodes.is_empty() || !must_contain.iter().all(|n| nodes.contains(n)) {
                continue;
            }
            // A preferred domain must lie inside the required one the running pods use: checked above.
            let f = free(cluster, &nodes);
            if is_required && largest.as_ref().is_none_or(|(_, v)| f.0[main] > *v) {
                largest = Some((d.id.clone(), f.0[main]));
            }
            if need.fits_in(&f) {
                fitting.push((f.0[main] - need.0[main], d.id, nodes));
            }
        }
        fitting.sort();
        out.extend(fitting.into_iter().map(|(_, _, nodes)| Some(nodes)));
    }
    if req.required.is_none() {
        out.push(within.map(<[NodeId]>::to_vec));
    }
    (out, largest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Sim;

    #[test]
    fn domains_join_label_values_and_skip_unlabelled_nodes() {
        let mut s = Sim::new();
        s.node_with("a", 1000, 1, 2, &[("zone", "z1"), ("rack", "r1")], &[]);
        s.node_with("b", 1000, 1, 2, &[("zone", "z1"), ("rack", "r2")], &[]);
        s.node_with("c", 1000, 1, 2, &[("zone", "z2"), ("rack", "r1")], &[]);
        s.node_with("d", 1000, 1, 2, &[("rack", "r1")], &[]);
        let levels = vec!["zone".to_owned(), "rack".to_owned()];
        let zones: Vec<String> = domains(&s.cluster, &levels, 0)
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(zones, vec!["z1", "z2"]);
        let racks: Vec<(String, usize)> = domains(&s.cluster, &levels, 1)
            .into_iter()
            .map(|d| (d.id, d.nodes.len()))
            .collect();
        assert_eq!(
            racks,
            vec![("z1.r1".into(), 1), ("z1.r2".into(), 1), ("z2.r1".into(), 1)]
        );
    }
}
