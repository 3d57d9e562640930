//! Builds the report from a snapshot: what the scheduler wrote, then a simulated cycle with the
//! scheduler's own decision code, its reasons read as values.

use std::collections::BTreeMap;

use scheduler_core::actions::{self, victims};
use scheduler_core::config::Config;
use scheduler_core::fairshare::units::to_raw;
use scheduler_core::framework::Session;
use scheduler_core::framework::decisions::EvictionCause;
use scheduler_core::framework::policy::placement::{Mode, NodeMiss};
use scheduler_core::framework::report::explain::{FitFailure, QueueGate, Why, miss_text};
use scheduler_core::framework::report::status::rfc3339;
use scheduler_core::model::resources::{CPU, GPU, MAX_RESOURCES, MEMORY, PODS, ResourceNames};
use scheduler_core::model::{
    Cluster, GroupId, GroupKey, GroupKind, Millis, NodeId, QueueId, Resources, TaskId, TaskStatus,
};

use super::report::{
    Amounts, Analysis, Explanation, FitKind, GangRequest, NodeCount, NodeFit, PodStates, QueueResourceState,
    QueueState, Reason, ToFit, Verdict, Victim, WrittenCondition, WrittenStatus,
};
use crate::render::{amount, amounts, spec_units};
use crate::snapshot::Snapshot;

/// Why an explanation could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The PodGroup is not in the model.
    #[error("PodGroup {0} is not in the snapshot")]
    NotFound(String),
}

fn pod_states(cluster: &Cluster, group: GroupId) -> PodStates {
    let mut s = PodStates::default();
    for t in &cluster.group(group).tasks {
        s.total += 1;
        match cluster.task(*t).status {
            TaskStatus::Running => s.running += 1,
            TaskStatus::Binding | TaskStatus::Bound => s.bound += 1,
            TaskStatus::Pipelined => s.reserved += 1,
            TaskStatus::Pending => s.pending += 1,
            TaskStatus::Gated => s.gated += 1,
            TaskStatus::Releasing => s.releasing += 1,
            TaskStatus::Succeeded => s.succeeded += 1,
            TaskStatus::Failed => s.failed += 1,
        }
    }
    s
}

fn written(status: &api::PodGroupStatus) -> WrittenStatus {
    WrittenStatus {
        phase: status.phase.map(|p| p.as_str().to_owned()),
        conditions: status
            .conditions
            .iter()
            .map(|c| WrittenCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                since: c.last_transition_time.clone(),
            })
            .collect(),
        scheduling_reasons: status
            .scheduling_conditions
            .iter()
            .flat_map(|c| c.reasons.iter())
            .map(|r| Reason {
                reason: r.reason.clone().unwrap_or_default(),
                message: r.message.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

fn reason_of(why: &Why, names: &ResourceNames) -> Reason {
    Reason {
        reason: why.reason().to_owned(),
        message: why.message(names),
    }
}

/// Why waiting pods are not even tried, read from the pods themselves: they name another scheduler (the
/// model keeps such pods only while they hold a node, so the snapshot's pods are read again with the
/// scheduler's conversion), something about them cannot be read, or there are none.
fn pod_notes(
    snapshot: &Snapshot,
    cluster: &Cluster,
    key: &GroupKey,
    tasks: &[TaskId],
    scheduler: &str,
) -> Vec<Reason> {
    let mut names = cluster.names.clone();
    let foreign = snapshot
        .pods
        .iter()
        .map(|p| scheduler::cache::convert::pod(&mut names, p, scheduler))
        .filter(|u| !u.ours && u.group_key.as_ref() == Some(key) && u.api.status == TaskStatus::Pending)
        .count();
    let mut notes = Vec::new();
    if foreign > 0 {
        notes.push(Reason {
            reason: "OtherScheduler".to_owned(),
            message: format!(
                "{foreign} of its waiting pods name another scheduler (spec.schedulerName is not {scheduler}); \
                 this scheduler does not place them"
            ),
        });
    }
    for t in tasks.iter().map(|t| cluster.task(*t)) {
        if let (TaskStatus::Pending, Some(problem)) = (t.status, &t.problem) {
            notes.push(Reason {
                reason: "PodProblem".to_owned(),
                message: format!("pod {} cannot be scheduled: {problem}", t.key()),
            });
        }
    }
    if notes.is_empty() && tasks.is_empty() {
        notes.push(Reason {
            reason: "NoPods".to_owned(),
            message: format!(
                "no pod of this scheduler names this PodGroup yet (annotation {} or {})",
                api::keys::POD_GROUP_NAME,
                api::keys::POD_GROUP_SEED
            ),
        });
    }
    notes
}

/// A running gang that could be evicted, with the queues above it (to match a queue's subtree).
struct Holder {
    gang: usize,
    key: String,
    queue: String,
    queue_path: Vec<String>,
    priority: i32,
    preemptible: bool,
    pods: usize,
    resources: Resources,
}

fn holders(ssn: &Session<'_>, except: usize) -> Vec<Holder> {
    let cluster = &*ssn.cluster;
    let mut out = Vec::new();
    for (i, gang) in ssn.gangs.iter().enumerate() {
        if i == except {
            continue;
        }
        let held: Vec<TaskId> = gang
            .tasks()
            .filter(|t| cluster.task(*t).ours && cluster.task(*t).status.is_allocated())
            .collect();
        if held.is_empty() {
            continue;
        }
        let mut resources = Resources::ZERO;
        for t in &held {
            resources.add(&ssn.share_request(*t));
        }
        out.push(Holder {
            gang: i,
            key: cluster.group(gang.root).key.to_string(),
            queue: cluster.group(gang.root).queue_name.to_string(),
            queue_path: queue_path(cluster, gang.queue)
                .iter()
                .map(|q| cluster.queue(*q).name.to_string())
                .collect(),
            priority: gang.priority,
            preemptible: gang.preemptible,
            pods: held.len(),
            resources,
        });
    }
    out
}

fn queue_path(cluster: &Cluster, leaf: Option<QueueId>) -> Vec<QueueId> {
    let mut path = Vec::new();
    let mut cur = leaf;
    while let Some(q) = cur {
        if path.contains(&q) {
            break;
        }
        path.push(q);
        cur = cluster.queue(q).parent;
    }
    path
}

fn victim(names: &ResourceNames, h: &Holder) -> Victim {
    Victim {
        gang: h.key.clone(),
        queue: h.queue.clone(),
        priority: h.priority,
        pods: h.pods,
        resources: amounts(names, &h.resources),
        action: None,
    }
}

/// The largest pod by (GPU, CPU, memory), earliest in task order on ties.
fn largest(cluster: &Cluster, tasks: &[TaskId]) -> Option<TaskId> {
    let key = |t: &TaskId| {
        let r = cluster.task(*t).request;
        (r.gpu(), r.cpu(), r.memory())
    };
    let mut best: Option<TaskId> = None;
    for t in tasks {
        if best.is_none_or(|b| key(t) > key(&b)) {
            best = Some(*t);
        }
    }
    best
}

fn node_fit(ssn: &mut Session<'_>, t: TaskId) -> NodeFit {
    let ids: Vec<NodeId> = ssn.cluster.nodes.iter().map(|(i, _)| NodeId(i)).collect();
    let mut refused: BTreeMap<NodeMiss, usize> = BTreeMap::new();
    let (mut eligible, mut fits_now, mut fits_later) = (0, 0, 0);
    let mut free = Resources::ZERO;
    for n in &ids {
        let cluster = &*ssn.cluster;
        let answer = ssn.index.check(cluster, cluster.task(t), &ssn.policy, *n);
        if !matches!(answer, Err(NodeMiss::Static(_))) {
            eligible += 1;
            free.add(
                &cluster
                    .node(*n)
                    .available(&Resources::ZERO)
                    .0
                    .max(&Resources::ZERO),
            );
        }
        match answer {
            Ok(p) if p.mode == Mode::Allocate => fits_now += 1,
            Ok(_) => fits_later += 1,
            Err(miss) => *refused.entry(miss).or_default() += 1,
        }
    }
    let names = &ssn.cluster.names;
    NodeFit {
        pod: ssn.cluster.task(t).key(),
        nodes: ids.len(),
        eligible,
        free_on_eligible: amounts(names, &free),
        fits_now,
        fits_after_releases: fits_later,
        refused: refused
            .iter()
            .map(|(m, n)| NodeCount {
                reason: miss_text(m, names),
                nodes: *n,
            })
            .collect(),
    }
}

fn queue_states(ssn: &Session<'_>, leaf: Option<QueueId>, request: &Resources) -> Vec<QueueState> {
    let cluster = &*ssn.cluster;
    let mut slots: Vec<usize> = (0..MAX_RESOURCES)
        .filter(|s| *s != PODS && request.0[*s] != 0)
        .collect();
    if slots.is_empty() {
        slots = vec![GPU, CPU, MEMORY];
    }
    queue_path(cluster, leaf)
        .into_iter()
        .map(|q| {
            let queue = cluster.queue(q);
            let allocated = ssn.fairness.allocated(q);
            let requested = ssn.fairness.requested(q);
            let fair_share = ssn
                .fairness
                .report(q)
                .map_or(Resources::ZERO, |r| r.fair_share.to_resources());
            QueueState {
                name: queue.name.to_string(),
                resources: slots
                    .iter()
                    .map(|s| QueueResourceState {
                        resource: cluster.names.name(*s).to_owned(),
                        quota: queue.resources[*s].quota,
                        limit: queue.resources[*s].limit,
                        allocated: spec_units(*s, allocated.0[*s]),
                        requested: spec_units(*s, requested.0[*s]),
                        fair_share: spec_units(*s, fair_share.0[*s]),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The scheduler's victim search asked for the fewest running gangs (of any queue and priority) whose
/// eviction lets the gang fit, on a fresh copy of the model where allocate has run.
fn smallest_eviction(model: &Cluster, config: &Config, now: Millis, root: GroupId) -> Option<Vec<Victim>> {
    let mut cluster = model.clone();
    let mut ssn = Session::open(&mut cluster, config, now);
    let g = *ssn.gang_of.get(&root)?;
    actions::allocate::allocate(&mut ssn);
    let waits_for_room = ssn
        .outcomes
        .get(&g)
        .is_some_and(|o| !o.placed() && matches!(o.why.first(), Some(Why::NoFit(_))));
    if !waits_for_room {
        return None;
    }
    let pool = holders(&ssn, g);
    // Lowest priority first, then the gangs holding least (so that among equally few victims the least
    // resources go), then the newest.
    let mut order: Vec<(i32, i64, i64, i64, usize)> = pool
        .iter()
        .map(|h| {
            let g = &ssn.gangs[h.gang];
            (
                g.priority,
                h.resources.gpu(),
                h.resources.cpu(),
                -g.created,
                h.gang,
            )
        })
        .collect();
    order.sort_unstable();
    let order: Vec<usize> = order.into_iter().map(|o| o.4).collect();
    let mut candidates = Vec::new();
    for v in order {
        candidates.extend(victims::units_of(&ssn, v, true));
    }
    // Nothing is evicted for real here: the events' text is never read.
    let no_message = |_: &Session<'_>, _: &victims::Unit| String::new();
    let request = victims::Request::new(g, candidates, EvictionCause::Preempt, &no_message);
    let Ok(units) = victims::solve(&mut ssn, &request) else {
        return Some(Vec::new());
    };
    let mut chosen: BTreeMap<usize, (usize, Resources)> = BTreeMap::new();
    for u in &units {
        let e = chosen.entry(u.gang).or_default();
        for t in &u.tasks {
            e.0 += 1;
            e.1.add(&ssn.share_request(*t));
        }
    }
    let names = &ssn.cluster.names;
    Some(
        chosen
            .into_iter()
            .filter_map(|(gang, (pods, resources))| {
                let h = pool.iter().find(|h| h.gang == gang)?;
                Some(Victim {
                    pods,
                    resources: amounts(names, &resources),
                    ..victim(names, h)
                })
            })
            .collect(),
    )
}

/// Allocatable resources of the nodes a pod may use (its static placement rules pass), whatever is
/// running there.
fn eligible_capacity(model: &Cluster, task: TaskId) -> Resources {
    let Some(t) = model.tasks.get(task.0) else {
        return Resources::ZERO;
    };
    let constraints = model.constraints.get(t.constraints);
    let mut total = Resources::ZERO;
    for (_, n) in model.nodes.iter() {
        if constraints.check(n.facts()).is_ok() {
            total.add(&n.allocatable);
        }
    }
    total
}

/// The scarce resource of a fit failure: the one most nodes lack (GPUs first on ties), else the pod's
/// main resource.
fn scarce_slot(f: &FitFailure) -> usize {
    f.misses
        .iter()
        .filter_map(|(m, n)| match m {
            NodeMiss::Insufficient(slot) => Some((*n, usize::from(*slot == GPU), *slot)),
            _ => None,
        })
        .max()
        .map_or(if f.pod_request.gpu() > 0 { GPU } else { CPU }, |(_, _, s)| s)
}

/// What would have to free, from the first reason and the holders of resources.
fn to_fit(
    why: &Why,
    names: &ResourceNames,
    leaf_queue: Option<&str>,
    pool: &[Holder],
    gang_priority: i32,
    capacity: &Resources,
) -> Option<ToFit> {
    let lower = |queue: &str, subtree: bool| -> Vec<Victim> {
        pool.iter()
            .filter(|h| h.preemptible && h.priority < gang_priority)
            .filter(|h| {
                if subtree {
                    h.queue_path.iter().any(|q| q == queue)
                } else {
                    h.queue_path.first().is_some_and(|q| q == queue)
                }
            })
            .map(|h| victim(names, h))
            .collect()
    };
    let fit = |kind: FitKind, summary: String, free: Amounts, queue: Option<&str>, subtree: bool| ToFit {
        kind,
        summary,
        free,
        queue: queue.map(str::to_owned),
        preemptible_lower_priority: queue.map(|q| lower(q, subtree)).unwrap_or_default(),
        smallest_eviction: None,
    };
    match why {
        Why::NoFit(f) if f.failed_pod.is_empty() => Some(fit(
            FitKind::TopologyDomain,
            format!(
                "room inside one topology domain: {}",
                f.topology.clone().unwrap_or_default()
            ),
            Amounts::new(),
            leaf_queue,
            false,
        )),
        Why::NoFit(f) if f.eligible_nodes == 0 => {
            let refused: Vec<String> = f
                .misses
                .iter()
                .map(|(m, n)| format!("{n} {}", miss_text(m, names)))
                .collect();
            Some(fit(
                FitKind::FixPlacementRules,
                format!(
                    "nothing: no node passes the placement rules of pod {} ({}); fix its node selector, \
                     affinity or tolerations, or the nodes' labels, taints and readiness",
                    f.failed_pod,
                    refused.join(", ")
                ),
                Amounts::new(),
                None,
                false,
            ))
        }
        Why::NoFit(f) => {
            let slot = scarce_slot(f);
            let name = names.name(slot);
            let total = f.request_total.0[slot];
            if total > capacity.0[slot] {
                let short = total - capacity.0[slot];
                return Some(fit(
                    FitKind::AddCapacity,
                    format!(
                        "more than exists: the gang needs {} {name} and the nodes its pods may use have {} in \
                         all; add at least {} {name} of capacity there, or lower minMember",
                        names.format_amount(slot, total),
                        names.format_amount(slot, capacity.0[slot]),
                        names.format_amount(slot, short)
                    ),
                    Amounts::from([(name.to_owned(), names.format_amount(slot, short))]),
                    None,
                    false,
                ));
            }
            let remaining = f.pods_needed.saturating_sub(f.pods_placed).max(1);
            let per_pod = f.pod_request.0[slot];
            let by_pods = per_pod * i64::from(remaining);
            let by_total = total - f.free_on_eligible.0[slot];
            let need = by_pods.max(by_total);
            let mut summary = format!(
                "{} room: free {} {name} ({} per pod, each on one node) on nodes the pods may use",
                if remaining == 1 {
                    "1 more pod needs".to_owned()
                } else {
                    format!("{remaining} more pods need")
                },
                names.format_amount(slot, need),
                names.format_amount(slot, per_pod),
            );
            if by_total <= 0 {
                summary.push_str(&format!(
                    "; {} {name} is free in total, but split across nodes",
                    names.format_amount(slot, f.free_on_eligible.0[slot])
                ));
            }
            Some(fit(
                FitKind::FreeRoom,
                summary,
                Amounts::from([(name.to_owned(), names.format_amount(slot, need))]),
                leaf_queue,
                false,
            ))
        }
        Why::Queue(gate) => {
            // Shortfall amounts are in fair-share units; messages use the resource's notation.
            let s = gate.shortfall();
            let text = |v: f64| amount(names, s.slot, to_raw(s.slot, v));
            let name = names.name(s.slot);
            let queue = &*s.queue_name;
            let excess = s.used + s.requested - s.bound;
            let summary = match gate {
                QueueGate::OverLimit(_) if s.requested > s.bound => format!(
                    "nothing can free enough: this gang alone asks for {} {name} and queue {queue}'s limit is \
                     {}; raise the limit to at least {} or make the gang smaller",
                    text(s.requested),
                    text(s.bound),
                    text(s.requested)
                ),
                QueueGate::OverLimit(_) => format!(
                    "queue {queue} would have to free {} {name} of the {} it has allocated, or its limit be \
                     raised to at least {}",
                    text(excess),
                    text(s.used),
                    text(s.used + s.requested)
                ),
                QueueGate::NonPreemptibleOverQuota(_) => format!(
                    "non-preemptible work in queue {queue} would have to free {} {name} (deserved quota {}), \
                     or this gang be made preemptible",
                    text(excess),
                    text(s.bound)
                ),
            };
            Some(fit(
                FitKind::QueueRoom,
                summary,
                Amounts::from([(name.to_owned(), text(excess))]),
                Some(queue),
                true,
            ))
        }
        Why::MinResources { needed, free } => {
            let mut short = Resources::ZERO;
            for s in needed.shortfalls(free) {
                short.0[s] = needed.0[s] - free.0[s];
            }
            Some(fit(
                FitKind::MinResources,
                format!(
                    "free {} in the cluster (minResources {}, free {})",
                    names.format(&short),
                    names.format(needed),
                    names.format(free)
                ),
                amounts(names, &short),
                leaf_queue,
                false,
            ))
        }
        _ => None,
    }
}

/// Explains one PodGroup over a snapshot and its model: what was written, and a simulated cycle with
/// the given configuration at `now`.
///
/// # Errors
/// When the PodGroup is not in the model.
pub fn explain(
    snapshot: &Snapshot,
    model: &Cluster,
    key: &GroupKey,
    config: &Config,
    now: Millis,
) -> Result<Explanation, ExplainError> {
    explain_for(snapshot, model, key, config, now, api::keys::SCHEDULER_NAME)
}

/// [`explain`] for a scheduler with another `spec.schedulerName` (named in messages).
///
/// # Errors
/// When the PodGroup is not in the model.
pub fn explain_for(
    snapshot: &Snapshot,
    model: &Cluster,
    key: &GroupKey,
    config: &Config,
    now: Millis,
    scheduler_name: &str,
) -> Result<Explanation, ExplainError> {
    let gid = model
        .group_id(key)
        .ok_or_else(|| ExplainError::NotFound(key.to_string()))?;
    let group = model.group(gid);
    let pods = pod_states(model, gid);
    let problems = group
        .problems
        .iter()
        .map(|p| Reason {
            reason: p.reason().to_owned(),
            message: p.to_string(),
        })
        .collect();

    let mut cluster = model.clone();
    let mut ssn = Session::open(&mut cluster, config, now);
    let g = *ssn
        .gang_of
        .get(&gid)
        .ok_or_else(|| ExplainError::NotFound(key.to_string()))?;
    let root = ssn.gangs[g].root;
    let root_key = ssn.cluster.group(root).key.clone();
    let satisfied = ssn.gangs[g].is_satisfied(ssn.cluster);
    let to_place = {
        let cluster = &*ssn.cluster;
        ssn.gangs[g].tasks_to_allocate(cluster, &|a, b| actions::allocate::task_order(cluster, a, b))
    };
    let mut request = Resources::ZERO;
    for t in &to_place {
        request.add(&ssn.share_request(*t));
    }
    let names = ssn.cluster.names.clone();
    let largest = largest(ssn.cluster, &to_place);
    let gang_request = largest.map(|t| GangRequest {
        pods: u32::try_from(to_place.len()).unwrap_or(u32::MAX),
        total: amounts(&names, &request),
        largest_pod: ssn.cluster.task(t).key(),
        largest_pod_request: amounts(&names, &ssn.share_request(t)),
    });
    let nodes = largest.map(|t| node_fit(&mut ssn, t));
    let leaf = ssn.gangs[g].queue;
    let preemptible = ssn.gangs[g].preemptible;
    let priority = ssn.gangs[g].priority;
    let queues = queue_states(&ssn, leaf, &request);
    let queue_gate = match (leaf, to_place.is_empty()) {
        (Some(q), false) => ssn
            .fairness
            .gate(ssn.cluster, q, &request, preemptible)
            .err()
            .map(|gate| reason_of(&Why::Queue(gate), &names)),
        _ => None,
    };
    let pool = holders(&ssn, g);

    // The cycle as configured; the first reasons that stop the gang are kept even if a later action
    // (preempt, consolidation) then finds it room.
    let mut blocking: Vec<Why> = Vec::new();
    for action in &config.actions {
        actions::run(&mut ssn, *action);
        if let Some(o) = ssn.outcomes.get(&g)
            && blocking.is_empty()
            && !o.why.is_empty()
            && !matches!(o.why.first(), Some(Why::Pipelined))
        {
            blocking = o.why.to_vec();
        }
    }
    let outcome = ssn.outcomes.get(&g).cloned().unwrap_or_default();
    let mut reasons: Vec<Reason> = blocking.iter().map(|w| reason_of(w, &names)).collect();
    if reasons.is_empty() && !satisfied {
        let tasks: Vec<TaskId> = ssn.gangs[g].tasks().collect();
        reasons = pod_notes(snapshot, ssn.cluster, key, &tasks, scheduler_name);
    }
    let (decisions, _) = ssn.close();
    let evictions: Vec<Victim> = {
        let mut by_gang: BTreeMap<String, (usize, Resources, &'static str)> = BTreeMap::new();
        for e in decisions
            .evictions
            .iter()
            .filter(|e| e.for_group.as_ref() == Some(&root_key))
        {
            let victim_gang = e
                .group
                .as_ref()
                .map_or_else(|| format!("{}/{}", e.namespace, e.name), ToString::to_string);
            let entry = by_gang
                .entry(victim_gang)
                .or_insert((0, Resources::ZERO, e.cause.as_str()));
            entry.0 += 1;
            if let Some(t) = cluster.task_id(&e.uid) {
                entry.1.add(&cluster.task(t).request);
            }
        }
        by_gang
            .into_iter()
            .map(|(gang, (pods, resources, action))| {
                let h = pool.iter().find(|h| h.key == gang);
                Victim {
                    queue: h.map(|h| h.queue.clone()).unwrap_or_default(),
                    priority: h.map_or(0, |h| h.priority),
                    gang,
                    pods,
                    resources: amounts(&names, &resources),
                    action: Some(action.to_owned()),
                }
            })
            .collect()
    };
    let verdict = if outcome.placed() {
        Verdict::WouldBePlaced
    } else if satisfied {
        Verdict::Placed
    } else {
        Verdict::Waiting
    };
    let leaf_name = leaf.map(|q| model.queue(q).name.to_string());
    let capacity = match blocking.first() {
        Some(Why::NoFit(f)) => f
            .failed_task
            .map_or(Resources::ZERO, |t| eligible_capacity(model, t)),
        _ => Resources::ZERO,
    };
    let mut fit = match (verdict, blocking.first()) {
        (Verdict::Placed, _) | (_, None) => None,
        (_, Some(why)) => to_fit(why, &names, leaf_name.as_deref(), &pool, priority, &capacity),
    };
    if let Some(f) = fit.as_mut()
        && verdict == Verdict::Waiting
        && f.kind == FitKind::FreeRoom
    {
        f.smallest_eviction = smallest_eviction(model, config, now, root);
    }
    let group = model.group(gid);
    Ok(Explanation {
        kind: match key.kind {
            GroupKind::Kai => "PodGroup".to_owned(),
            GroupKind::Volcano => "PodGroup (volcano)".to_owned(),
        },
        namespace: key.namespace.to_string(),
        name: key.name.to_string(),
        part_of: (root != gid).then(|| root_key.to_string()),
        queue: group.queue_name.to_string(),
        priority: group.priority,
        priority_class: group.priority_class.as_deref().map(str::to_owned),
        preemptible: group.preemptible,
        min_member: group.min_member,
        max_member: group.max_member,
        pods,
        problems,
        written: snapshot.pod_group_status(key).map(written),
        analysis: Analysis {
            snapshot_time: rfc3339(now),
            verdict,
            placed_by: outcome.placed_by.map(|action| action.as_str().to_owned()),
            reasons,
            request: gang_request,
            nodes,
            queues,
            queue_gate,
            evictions,
            to_fit: fit,
        },
    })
}
