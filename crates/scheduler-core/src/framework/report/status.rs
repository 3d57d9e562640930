//! Turns a session's outcomes into the statuses, conditions and events users read, writing only what
//! changed since it was last written.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use std::sync::Arc;

use api::PodGroupPhase;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::framework::decisions::{
    Decisions, Event, EventObject, EventType, GroupStatus, PodCondition, QueueStatus,
};
use crate::framework::report::explain::{ComparedSummaries, Why, gist_fingerprint};
use crate::framework::{GangOutcome, Session};
use crate::model::group_status::{DecidedCondition, DecidedStatus, PoolCondition, SeenStatus, SlotNames};
use crate::model::ids::WordHasher;
use crate::model::resources::{GPU, PODS};
use crate::model::{Cluster, Group, GroupId, GroupKind, Millis, Resources, StatusWritten, TaskStatus};

/// Condition types written on PodGroups.
pub mod condition {
    /// At least minMember pods are placed.
    pub const SCHEDULED: &str = "Scheduled";
    /// Why the gang waits.
    pub const UNSCHEDULABLE: &str = crate::model::group_status::UNSCHEDULABLE_CONDITION_TYPE;
    /// Something in the PodGroup or what it references is wrong.
    pub const INVALID: &str = "Invalid";
    /// A warning that does not stop scheduling (e.g. unknown priority class).
    pub const WARNING: &str = "Warning";
    /// `scheduleTimeoutSeconds` passed while unplaced.
    pub const TIMED_OUT: &str = "TimedOut";
    /// Every condition type the scheduler writes (others are left to their owners).
    pub const OURS: [&str; 5] = [SCHEDULED, UNSCHEDULABLE, INVALID, WARNING, TIMED_OUT];
}

/// RFC 3339 from milliseconds.
#[must_use]
pub fn rfc3339(ms: Millis) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub use crate::model::group_status::status_fingerprint;

fn fingerprint_str(s: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish() | 1
}

/// Member counts of one PodGroup (its own pods).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Running.
    pub running: u32,
    /// Bound or being bound, not yet running.
    pub bound: u32,
    /// Reserved.
    pub pipelined: u32,
    /// Waiting.
    pub pending: u32,
    /// Succeeded.
    pub succeeded: u32,
    /// Failed.
    pub failed: u32,
    /// Being deleted.
    pub releasing: u32,
}

/// Counts a PodGroup's pods by status.
#[must_use]
pub fn counts(cluster: &Cluster, group: &Group) -> Counts {
    let mut c = Counts::default();
    for t in &group.tasks {
        match cluster.task(*t).status {
            TaskStatus::Running => c.running += 1,
            TaskStatus::Binding | TaskStatus::Bound => c.bound += 1,
            TaskStatus::Pipelined => c.pipelined += 1,
            TaskStatus::Pending | TaskStatus::Gated => c.pending += 1,
            TaskStatus::Succeeded => c.succeeded += 1,
            TaskStatus::Failed => c.failed += 1,
            TaskStatus::Releasing => c.releasing += 1,
        }
    }
    c
}

/// The phase of a PodGroup from its counts and the gang's state.
#[must_use]
pub fn phase(
    c: Counts,
    min: u32,
    gang_satisfied: bool,
    timed_out: bool,
    has_children: bool,
) -> PodGroupPhase {
    let total = c.running + c.bound + c.pipelined + c.pending + c.succeeded + c.failed + c.releasing;
    let finished = c.succeeded + c.failed;
    if total > 0 && finished == total && !has_children {
        return if c.succeeded >= min.min(total) {
            PodGroupPhase::Finished
        } else {
            PodGroupPhase::Failed
        };
    }
    let running_needed = if has_children { 1 } else { min.max(1) };
    if c.running + c.succeeded >= running_needed && gang_satisfied {
        PodGroupPhase::Running
    } else if gang_satisfied && c.pipelined == 0 {
        PodGroupPhase::Scheduled
    } else if gang_satisfied {
        PodGroupPhase::PreScheduling
    } else if timed_out {
        PodGroupPhase::Failed
    } else {
        PodGroupPhase::Pending
    }
}

fn quantities(cluster: &Cluster, r: &Resources) -> BTreeMap<String, Quantity> {
    // Inserted one by one: a status per group, and collecting sorts through a buffer first.
    let mut map = BTreeMap::new();
    for (slot, v) in r.nonzero().filter(|(slot, _)| *slot != PODS) {
        let q = match slot {
            0 => api::quantity::format_milli(v),
            GPU => api::quantity::format_decimal_milli(v),
            _ => {
                let mut text = String::with_capacity(12);
                api::quantity::push_integer(&mut text, v);
                text
            }
        };
        map.insert(cluster.names.name(slot).to_owned(), Quantity(q));
    }
    map
}

fn condition(
    previous: Option<&SeenStatus>,
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: impl Into<Arc<str>>,
    stamp: &Arc<str>,
) -> DecidedCondition {
    let text = if status { "True" } else { "False" };
    let last_transition_time = match previous.and_then(|p| p.condition(type_)) {
        Some((old, time)) if old == text => time.map(Arc::from),
        _ => Some(Arc::clone(stamp)),
    };
    DecidedCondition {
        type_,
        status,
        reason,
        message: message.into(),
        last_transition_time,
    }
}

/// Tracks how long each gang has waited and marks those past `scheduleTimeoutSeconds` as timed out.
pub fn timeouts(ssn: &mut Session<'_>) {
    let now = ssn.now;
    // A gang as the last session saw it, then found not waiting (no waiting time, not timed out), is
    // not waiting now: every input is the same.
    let unchanged = ssn.unchanged_gangs();
    for (g, unchanged) in unchanged.into_iter().enumerate() {
        let root_group = ssn.cluster.group(ssn.gangs[g].root);
        if unchanged && root_group.waiting_since.is_none() && !root_group.timed_out {
            debug_assert!(
                ssn.gangs[g].is_satisfied(ssn.cluster) || ssn.gangs[g].pending(ssn.cluster).next().is_none(),
                "gang {g} skipped but waiting"
            );
            continue;
        }
        ssn.attempt(g);
        let root = ssn.gangs[g].root;
        let satisfied = ssn.gang_satisfied(g);
        let waiting = !satisfied && ssn.gang_has_pending(g);
        // The group is written only when a value changes: a write marks it changed (`Arena::stamp`),
        // and the next session would build its gang again.
        let group = ssn.cluster.group(root);
        if !waiting {
            if group.waiting_since.is_some() || (satisfied && group.timed_out) {
                let group = ssn.cluster.group_mut(root);
                group.waiting_since = None;
                if satisfied {
                    group.timed_out = false;
                }
            }
            continue;
        }
        let since = match group.waiting_since {
            Some(since) => since,
            None => {
                let since = group.created.max(0).min(now);
                ssn.cluster.group_mut(root).waiting_since = Some(since);
                since
            }
        };
        let group = ssn.cluster.group(root);
        let Some(timeout) = group.schedule_timeout_secs else {
            continue;
        };
        let at = since.saturating_add(timeout.saturating_mul(1000));
        if !group.timed_out && now < at {
            ssn.wake_at(at);
        } else {
            if !group.timed_out {
                ssn.cluster.group_mut(root).timed_out = true;
            }
            let last = ssn
                .outcomes
                .get(&g)
                .and_then(|o| o.why.first())
                .map_or_else(|| "no room".to_owned(), |w| w.message(&ssn.cluster.names));
            ssn.outcomes.get_or_default(g).why.insert(
                0,
                Why::TimedOut {
                    after_secs: timeout,
                    last,
                },
            );
        }
    }
}

/// Fills `decisions` with what changed: gang statuses, annotations, pod conditions, events, queue statuses.
pub fn report(ssn: &mut Session<'_>, decisions: &mut Decisions) {
    let now = ssn.now;
    // Every new transition of this cycle carries the same time: format it once.
    let stamp: Arc<str> = Arc::from(rfc3339(now));
    let names = SlotNames::new(
        (0..ssn.cluster.names.len())
            .map(|slot| Arc::from(ssn.cluster.names.name(slot)))
            .collect(),
    );
    let mut shared = Shared {
        now,
        stamp,
        names,
        placed_messages: HashMap::default(),
        compared_summaries: ComparedSummaries::default(),
    };
    let echoed = ssn.cluster.echoed.take();
    let last = ssn.report_carry.take();
    let visit = last.and_then(|last| to_visit(ssn, &last, echoed?));
    let mut revisit = Vec::new();
    match &visit {
        Some(visit) => {
            #[cfg(debug_assertions)]
            check_unvisited_would_be_skipped(ssn, visit);
            for &id in visit {
                if ssn.cluster.groups.get(id.0).is_some() {
                    report_group(ssn, id, &mut shared, decisions);
                    note_revisit(ssn, id, &mut revisit);
                }
            }
        }
        None => {
            let group_ids: Vec<GroupId> = ssn.cluster.groups.iter().map(|(i, _)| GroupId(i)).collect();
            // A first report writes about a status and an event per group: room made once, not by
            // doubling (each doubling copies every status so far).
            decisions.group_statuses.reserve(group_ids.len());
            decisions.events.reserve(group_ids.len());
            for id in group_ids {
                report_group(ssn, id, &mut shared, decisions);
                note_revisit(ssn, id, &mut revisit);
            }
        }
    }
    ssn.report_carry = Some(ReportCarry {
        groups: ssn.cluster.groups.clock(),
        tasks: ssn.cluster.tasks.clock(),
        revisit,
    });
    report_queues(ssn, decisions);
    report_pods_without_gang(ssn, decisions);
}

/// Where a status report left off, for the next one: the group and task arenas' clocks at its end, and
/// the groups it must look at again whatever changes (see [`note_revisit`]). A group not among them
/// and unchanged since (by the change logs), whose gang has no outcome in the next cycle, would be
/// skipped by its report stamp: the next report does not look at it at all.
#[derive(Clone, Debug)]
pub(crate) struct ReportCarry {
    groups: u64,
    tasks: u64,
    revisit: Vec<GroupId>,
}

impl ReportCarry {
    /// Drops the groups `gone` says left the session (the backlog keeps them: the next report does
    /// not look at them unless they change).
    pub(crate) fn forget_revisits(&mut self, gone: impl Fn(GroupId) -> bool) {
        self.revisit.retain(|g| !gone(*g));
    }
}

/// Whether a group's next report must look at it even if nothing it reads changes: it has no report
/// stamp (placed in this cycle, still filling, backed off), it was told why it waits (its next cycle's
/// reason must be compared), or a pod's share is read through its node's devices.
fn note_revisit(ssn: &Session<'_>, id: GroupId, revisit: &mut Vec<GroupId>) {
    let Some(group) = ssn.cluster.groups.get(id.0) else {
        return;
    };
    let waits = group
        .report_why
        .as_ref()
        .and_then(|w| w.downcast_ref::<Vec<Why>>())
        .is_none_or(|w| !w.is_empty());
    let reads_devices = ssn.gang_of.get(&id).is_some_and(|g| ssn.gang_reads_devices(*g));
    if waits || reads_devices || !ssn.reports.contains_key(&id) {
        revisit.push(id);
    }
}

/// The groups this report looks at, by slot, when the last report's carry and the change logs tell
/// what changed since: the groups it asked to see again, those changed since (with every group of
/// their gang, whose derived state they change), those of gangs with an outcome in this cycle, and
/// those updated without a stamp. `None`: look at every group.
fn to_visit(ssn: &Session<'_>, last: &ReportCarry, echoed: Vec<GroupId>) -> Option<Vec<GroupId>> {
    let cluster = &*ssn.cluster;
    let changed = crate::framework::session::groups_changed_since(cluster, last.groups, last.tasks)?;
    // A list sorted by slot, not a flag per slot: a report looks at a few groups of tens of thousands.
    let mut visit: Vec<GroupId> = Vec::new();
    for &slot in changed.slots() {
        let id = GroupId(slot);
        match ssn.gang_of.get(&id) {
            Some(g) => visit.extend_from_slice(&ssn.gangs[*g].groups),
            None => visit.push(id),
        }
    }
    for (g, outcome) in ssn.outcomes.iter() {
        if outcome.placed() || !outcome.why.is_empty() {
            visit.extend_from_slice(&ssn.gangs[g].groups);
        }
    }
    visit.extend(last.revisit.iter().chain(echoed.iter()));
    let slots = cluster.groups.capacity();
    visit.retain(|id| id.index() < slots);
    visit.sort_unstable();
    visit.dedup();
    Some(visit)
}

/// Debug builds (every test): each group the report does not look at would have been skipped by its
/// report stamp had it looked.
#[cfg(debug_assertions)]
fn check_unvisited_would_be_skipped(ssn: &Session<'_>, visit: &[GroupId]) {
    let cluster = &*ssn.cluster;
    for (i, group) in cluster.groups.iter() {
        if visit.binary_search(&GroupId(i)).is_ok() {
            continue;
        }
        let id = GroupId(i);
        // Kept in the backlog: told its class's reason, and not looked at until it leaves.
        if ssn.backlog.holds(id) {
            continue;
        }
        let gang_index = ssn.gang_of.get(&id).copied();
        let outcome = gang_index.and_then(|g| ssn.outcomes.get(&g));
        assert!(
            outcome.is_none_or(|o| !o.placed() && o.why.is_empty()),
            "{:?}: its gang has an outcome but the report skips it",
            group.key
        );
        let derived = derived(ssn, id, gang_index);
        let why_empty = group
            .report_why
            .as_ref()
            .and_then(|w| w.downcast_ref::<Vec<Why>>())
            .is_some_and(Vec::is_empty);
        assert!(
            group.report_inputs != 0
                && why_empty
                && ssn.reports.get(&id).is_some_and(|stamp| stamp.holds(
                    cluster,
                    id,
                    derived,
                    group_reads_devices(ssn, id)
                )),
            "{:?}: the report skips it but its stamp does not hold (inputs {}, no reasons {}, stamped {}, gang {:?}, kept {})",
            group.key,
            group.report_inputs,
            why_empty,
            ssn.reports.contains_key(&id),
            gang_index,
            ssn.backlog.holds(id)
        );
    }
}

/// What a group's report reads from its gang.
fn derived(ssn: &Session<'_>, id: GroupId, gang_index: Option<usize>) -> Derived {
    let cluster = &*ssn.cluster;
    let (satisfied, is_root, has_children) = match gang_index {
        Some(g) => {
            let gang = &ssn.gangs[g];
            let node = gang.nodes.iter().position(|n| n.group == id).unwrap_or(0);
            (
                if node == 0 {
                    ssn.gang_satisfied(g)
                } else {
                    gang.satisfied(cluster, node)
                },
                gang.root == id,
                gang.nodes[node]
                    .children
                    .iter()
                    .any(|c| gang.nodes[*c].group != id),
            )
        }
        None => (false, true, false),
    };
    let gang_waiting = is_root
        && gang_index.is_some_and(|g| {
            let gang = &ssn.gangs[g];
            // The root's own node is the whole gang's: its answer is `satisfied` already.
            let whole_satisfied = if gang.nodes.first().is_some_and(|n| n.group == id) {
                satisfied
            } else {
                gang.is_satisfied(cluster)
            };
            debug_assert_eq!(whole_satisfied, gang.is_satisfied(cluster));
            !whole_satisfied && ssn.gang_has_pending(g)
        });
    Derived {
        gang: gang_index.is_some(),
        satisfied,
        is_root,
        has_children,
        gang_waiting,
    }
}

/// How long a pod may wait for its PodGroup before it is told why (the podgrouper usually creates it
/// within a second).
const ORPHAN_GRACE_MS: Millis = 10_000;

/// Pods that cannot be scheduled on their own account: no PodGroup, a missing PodGroup, or a bad
/// annotation. Each gets a `PodScheduled=False` condition saying so (and an event for bad input).
fn report_pods_without_gang(ssn: &mut Session<'_>, decisions: &mut Decisions) {
    let now = ssn.now;
    let mut updates = Vec::new();
    // When a pod's grace for its PodGroup ends (recorded on the session below).
    let mut wake: Vec<Millis> = Vec::new();
    for id in ssn.cluster.pending_without_gang() {
        let i = id.0;
        let t = ssn.cluster.task(id);
        let message = if let Some(problem) = &t.problem {
            format!("pod cannot be scheduled: {problem}")
        } else if now - t.created < ORPHAN_GRACE_MS {
            wake.push(t.created + ORPHAN_GRACE_MS);
            continue;
        } else if let Some(key) = &t.group_key {
            let kind = match key.kind {
                GroupKind::Kai => "PodGroup (scheduling.run.ai)",
                GroupKind::Volcano => "PodGroup (scheduling.volcano.sh)",
            };
            format!(
                "{kind} {} does not exist; create it or fix the pod's group annotation",
                key
            )
        } else {
            format!(
                "no PodGroup yet: waiting for the podgrouper to create one (or set the {} annotation)",
                api::keys::POD_GROUP_NAME
            )
        };
        let print = fingerprint_str(&message);
        if t.condition_fingerprint == print {
            continue;
        }
        if t.problem.is_some() {
            decisions.events.push(Event {
                object: EventObject::Pod {
                    namespace: t.namespace.clone(),
                    name: t.name.clone(),
                    uid: t.uid.clone(),
                },
                type_: EventType::Warning,
                reason: api::keys::EVENT_UNSCHEDULABLE,
                message: message.clone(),
            });
        }
        decisions.pod_conditions.push(PodCondition {
            uid: t.uid.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            message,
        });
        updates.push((i, print));
    }
    for (i, print) in updates {
        if let Some(t) = ssn.cluster.tasks.get_mut(i) {
            t.condition_fingerprint = print;
        }
    }
    for at in wake {
        ssn.wake_at(at);
    }
}

/// How long a waiting gang's status keeps its live figures ("6 free on 3 nodes") when nothing else in
/// it changed: a status that differs from the one last written only in those figures is written this
/// long after it, not at once, and raises no event. Each such refresh doubles the wait for the next,
/// up to [`FIGURES_REFRESH_MAX_MS`]; any other change starts again from this one. With a backlog every
/// bind changes what is free, and rewriting every waiting gang's status and pods' conditions at each
/// one would cost the API server more writes than the binds themselves; a gang that has waited for
/// hours gains little from figures fresher than an hour, while each refresh is a status write and a
/// condition per pod (an hour instead of ten minutes cut a Philly replay's status writes by two
/// thirds). A change of reason, of the gang's pods or of anything else in the status is written at
/// once; `kai explain` always shows the live figures.
pub const FIGURES_REFRESH_MS: Millis = 30_000;

/// The longest wait between two refreshes of a waiting gang's figures (see [`FIGURES_REFRESH_MS`]).
pub const FIGURES_REFRESH_MAX_MS: Millis = 3_600_000;

/// When a status differing only in live figures from the one last decided for the group may replace
/// it; `None` when no decided status holds it back (none in memory, or the API no longer holds it:
/// someone else wrote the status, or the write failed).
pub(crate) fn figures_refresh_at(group: &Group) -> Option<Millis> {
    group
        .status_written
        .filter(|w| w.fingerprint == group.observed.fingerprint)
        .map(|w| w.at.saturating_add(w.refresh_ms))
}

/// How long a new PodGroup whose pods are still arriving goes without a status. The podgrouper makes a
/// workload's PodGroup just before it puts the pods in it, and a Job's pods join its gang one by one
/// within a second: a status written in between ("0 of minMember placed", "the gang needs 8, 3 exist so
/// far") would be replaced at once, and a burst of new workloads would cost status writes and warning
/// events per group for nothing. A group still incomplete after this is reported as any other.
pub const EMPTY_GROUP_GRACE_MS: Millis = 10_000;

/// Whether the group's report waits: its gang has no pods yet or waits only for more pods to exist, no
/// status was written yet, nothing is wrong with it, and it is younger than [`EMPTY_GROUP_GRACE_MS`].
/// Records the end of the grace as a deadline.
fn filling_and_young(ssn: &Session<'_>, id: GroupId, gang_index: Option<usize>, now: Millis) -> bool {
    let group = ssn.cluster.group(id);
    let filling = match gang_index {
        Some(g) => {
            ssn.gangs[g].pod_count == 0
                || ssn.outcomes.get(&g).and_then(|o| o.why.first()).is_some_and(|w| {
                    matches!(
                        w,
                        Why::NotReady(crate::framework::gang::NotReady::MissingPods {
                            gated: 0,
                            refused: 0,
                            ..
                        })
                    )
                })
        }
        None => group.tasks.is_empty(),
    };
    let until = group.created.saturating_add(EMPTY_GROUP_GRACE_MS);
    if !filling || group.observed.status.is_some() || !group.problems.is_empty() || now >= until {
        return false;
    }
    ssn.wake_at(until);
    true
}

/// What every group's report of a cycle shares.
struct Shared {
    now: Millis,
    /// `now` in RFC 3339.
    stamp: Arc<str>,
    names: Arc<SlotNames>,
    /// The `Scheduled` condition's messages made so far, by (pods placed, minMember): most groups of a
    /// cycle say the same, and share one text.
    placed_messages: HashMap<(u32, u32), Arc<str>, BuildHasherDefault<WordHasher>>,
    /// Pairs of fit summaries compared in full so far (see
    /// [`crate::framework::report::explain::FitFailure::same_as`]).
    compared_summaries: ComparedSummaries,
}

/// Whether a group's reasons are the ones its last report recorded. A backlog's like gangs share one
/// fit summary per cycle, so most comparisons end at the summaries' identity or at a pair compared
/// already in this report.
fn same_reasons(recorded: &[Why], now: &[Why], compared: &mut ComparedSummaries) -> bool {
    recorded.len() == now.len()
        && recorded.iter().zip(now).all(|(a, b)| match (a, b) {
            (Why::NoFit(a), Why::NoFit(b)) => Arc::ptr_eq(a, b) || a.same_as(b, compared),
            _ => a == b,
        })
}

impl Shared {
    /// "N of minMember M pods placed".
    fn placed_message(&mut self, placed: u32, min: u32) -> Arc<str> {
        Arc::clone(
            self.placed_messages
                .entry((placed, min))
                .or_insert_with(|| Arc::from(format!("{placed} of minMember {min} pods placed"))),
        )
    }
}

fn report_group(ssn: &mut Session<'_>, id: GroupId, shared: &mut Shared, decisions: &mut Decisions) {
    let now = shared.now;
    let gang_index = ssn.gang_of.get(&id).copied();
    if filling_and_young(ssn, id, gang_index, now) {
        return;
    }
    let cluster = &*ssn.cluster;
    let group = cluster.group(id);
    let no_outcome = GangOutcome::default();
    let outcome = gang_index
        .and_then(|g| ssn.outcomes.get(&g))
        .unwrap_or(&no_outcome);
    // A gang backed off on this pool keeps the status that recorded why (KAI leaves it out of its
    // snapshot altogether): writing one now would replace the reason it was found unschedulable.
    if outcome
        .why
        .iter()
        .any(|w| matches!(w, Why::SchedulingBackoff { .. }))
    {
        return;
    }
    let derived = derived(ssn, id, gang_index);
    let Derived {
        satisfied,
        is_root,
        has_children,
        gang_waiting,
        ..
    } = derived;
    // Nothing it reads changed since its last report, which left the model as that report wanted:
    // the same report again would write, emit and mark nothing. Or only the live figures of its
    // reasons changed while the status written is younger than the refresh: the report would hold the
    // new status back. A gang placed in this cycle always reports (its event is news even when the rest
    // is the same).
    if outcome.placed_by.is_none()
        && group.report_inputs != 0
        && let Some(recorded) = group
            .report_why
            .as_ref()
            .and_then(|w| w.downcast_ref::<Vec<Why>>())
    {
        let refresh = figures_refresh_at(group).filter(|at| now < *at);
        let held_back = group.status_written.is_some_and(|w| w.newer_held_back);
        let skip = if same_reasons(recorded, &outcome.why, &mut shared.compared_summaries) {
            // A status held back at that report is written at the refresh.
            (!held_back || refresh.is_some()).then_some(refresh.filter(|_| held_back))
        } else {
            refresh
                .filter(|_| gist_fingerprint(recorded) == gist_fingerprint(&outcome.why))
                .map(Some)
        };
        if let Some(due) = skip
            && inputs_unchanged(ssn, id, derived)
        {
            if let Some(at) = due {
                ssn.report_due_at(at);
            }
            return;
        }
    }
    let cluster = &*ssn.cluster;
    let group = cluster.group(id);
    let outcome = gang_index
        .and_then(|g| ssn.outcomes.get(&g))
        .unwrap_or(&no_outcome);
    let c = counts(cluster, group);
    let phase = phase(c, group.min_member, satisfied, group.timed_out, has_children);
    // Resources: allocated (placed pods) and requested (placed + waiting).
    let mut allocated = Resources::ZERO;
    let mut requested = Resources::ZERO;
    for t in &group.tasks {
        let task = cluster.task(*t);
        let share = ssn.share_request(*t);
        if task.status.is_allocated() {
            allocated.add(&share);
        }
        if task.status.is_allocated() || task.status.is_pending() || task.status == TaskStatus::Pipelined {
            requested.add(&share);
        }
    }
    let prev = group.observed.status.as_ref();
    let scheduled = matches!(
        phase,
        PodGroupPhase::Scheduled | PodGroupPhase::Running | PodGroupPhase::Finished
    );
    let mut conditions = Vec::with_capacity(2);
    conditions.push(condition(
        prev,
        condition::SCHEDULED,
        scheduled,
        if scheduled { "Scheduled" } else { "NotScheduled" },
        shared.placed_message(
            c.running + c.bound + if scheduled { c.succeeded } else { 0 },
            group.min_member,
        ),
        &shared.stamp,
    ));
    for p in &group.problems {
        let type_ = if p.is_blocking() {
            condition::INVALID
        } else {
            condition::WARNING
        };
        if conditions.iter().any(|c| c.type_ == type_) {
            continue;
        }
        conditions.push(condition(
            prev,
            type_,
            true,
            p.reason(),
            p.to_string(),
            &shared.stamp,
        ));
    }
    // Why it waits: the outcome of this cycle (root) or of its gang (child groups).
    let waiting = !scheduled && (c.pending + c.pipelined > 0 || gang_waiting);
    let whys: Vec<&Why> = outcome.why.iter().collect();
    // Shared by the condition, the pool record and its first reason.
    let message: Option<Arc<str>> = whys.first().map(|w| Arc::from(w.message(&cluster.names)));
    let mut pool = None;
    if waiting && let (Some(why), Some(message)) = (whys.first(), message.as_ref()) {
        conditions.push(condition(
            prev,
            condition::UNSCHEDULABLE,
            true,
            why.reason(),
            Arc::clone(message),
            &shared.stamp,
        ));
        if c.running + c.bound == 0 {
            let pool_name = cluster.node_pool_name();
            // KAI names the pool in the message of a gang that backs off per pool.
            let pool_message = if group.scheduling_backoff {
                Arc::from(format!("Node-Pool '{pool_name}': {message}"))
            } else {
                Arc::clone(message)
            };
            let last_transition_time = prev
                .and_then(SeenStatus::first_scheduling_condition)
                .filter(|(m, _)| *m == Some(&*pool_message))
                .and_then(|(_, time)| time.map(Arc::from))
                .or_else(|| Some(Arc::clone(&shared.stamp)));
            pool = Some(PoolCondition {
                node_pool: Arc::from(pool_name),
                message: pool_message,
                reasons: whys
                    .iter()
                    .enumerate()
                    .map(|(i, w)| {
                        // The first one's message is the condition's, made above.
                        let text = if i == 0 {
                            Arc::clone(message)
                        } else {
                            Arc::from(w.message(&cluster.names))
                        };
                        (w.reason(), text)
                    })
                    .collect(),
                last_transition_time,
            });
        }
    }
    if group.timed_out {
        let secs = group.schedule_timeout_secs.unwrap_or_default();
        conditions.push(condition(
            prev,
            condition::TIMED_OUT,
            true,
            "ScheduleTimeout",
            format!("not placed within scheduleTimeoutSeconds ({secs}s); still retried, and placed if room appears"),
            &shared.stamp,
        ));
    }
    let status = DecidedStatus {
        phase,
        running: i32::try_from(c.running).unwrap_or(i32::MAX),
        succeeded: i32::try_from(c.succeeded).unwrap_or(i32::MAX),
        failed: i32::try_from(c.failed).unwrap_or(i32::MAX),
        pending: i32::try_from(c.pending + c.pipelined).unwrap_or(i32::MAX),
        conditions,
        pool,
        // Conditions other components own (the podgrouper's warnings) are kept as they are: the status
        // is written whole, and on servers that treat the list as atomic it would otherwise drop them.
        foreign: prev
            .map(|p| p.conditions_not_in(&condition::OURS))
            .unwrap_or_default(),
        allocated,
        requested,
        non_preemptible: !group.preemptible,
        names: Arc::clone(&shared.names),
    };
    let fingerprint = status.fingerprint();
    let key = group.key.clone();
    let uid = group.uid.clone();
    let volcano = key.kind == GroupKind::Volcano;
    let object = EventObject::PodGroup {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        uid,
        volcano,
    };
    // Events: placed; newly unschedulable with a new reason; problems.
    if let Some(placed_by) = outcome.placed_by
        && is_root
    {
        let mut nodes: Vec<&str> = ssn.gangs[gang_index.unwrap_or_default()]
            .tasks()
            .filter_map(|t| cluster.task(t).node.map(|n| &*cluster.node(n).name))
            .collect();
        let pods = nodes.len();
        nodes.sort_unstable();
        nodes.dedup();
        let how = if phase == PodGroupPhase::PreScheduling {
            "reserved (waiting for evictions)"
        } else {
            "placed"
        };
        // "gang placed by allocate: 8 pods on 2 nodes: a, b", written out without the formatting
        // machinery (an event per gang placed, tens of thousands in a full cycle).
        let mut message = String::with_capacity(64 + nodes.iter().map(|n| n.len() + 2).sum::<usize>());
        message.push_str("gang ");
        message.push_str(how);
        message.push_str(" by ");
        message.push_str(placed_by.as_str());
        message.push_str(": ");
        api::quantity::push_integer(&mut message, i64::try_from(pods).unwrap_or(i64::MAX));
        message.push_str(" pods on ");
        api::quantity::push_integer(&mut message, i64::try_from(nodes.len()).unwrap_or(i64::MAX));
        message.push_str(if nodes.len() == 1 { " node: " } else { " nodes: " });
        for (i, node) in nodes.iter().enumerate() {
            if i > 0 {
                message.push_str(", ");
            }
            message.push_str(node);
        }
        decisions.events.push(Event {
            object: object.clone(),
            type_: EventType::Normal,
            reason: api::keys::EVENT_POD_GROUP_SCHEDULED,
            message,
        });
    }
    // The first reason's gist: a new event when the reason changes, not when its figures do.
    let event_print = if waiting && !whys.is_empty() {
        gist_fingerprint(&outcome.why[..1])
    } else {
        0
    };
    let old_event_print = group.observed.event_fingerprint;
    if waiting && event_print != old_event_print && event_print != 0 {
        decisions.events.push(Event {
            object: object.clone(),
            type_: EventType::Warning,
            reason: api::keys::EVENT_UNSCHEDULABLE,
            message: message.as_deref().unwrap_or_default().to_owned(),
        });
    }
    let changed = fingerprint != group.observed.fingerprint;
    let status_gist = status.gist(gist_fingerprint(&outcome.why));
    // A status that differs from the one written only in live figures waits for the refresh: a
    // backlog's every status rewritten at every bind would cost the API server more than the binds.
    let held_until = figures_refresh_at(group).filter(|at| {
        changed && waiting && now < *at && group.status_written.is_some_and(|w| w.gist == status_gist)
    });
    // Pod conditions for waiting pods. They quote the status's message, so a rewrite is held back with
    // it; a pod told nothing yet is told now.
    let mut pod_updates = Vec::new();
    if waiting
        && group.mark_unschedulable
        && let Some(m) = &message
    {
        let print = fingerprint_str(m);
        for t in &group.tasks {
            let task = cluster.task(*t);
            // A pod with a problem of its own says so (`report_pods_without_gang`), not the gang's reason.
            if task.status == TaskStatus::Pending
                && task.ours
                && task.problem.is_none()
                && task.condition_fingerprint != print
                && (held_until.is_none() || task.condition_fingerprint == 0)
            {
                pod_updates.push((*t, print));
                decisions.pod_conditions.push(PodCondition {
                    uid: task.uid.clone(),
                    namespace: task.namespace.clone(),
                    name: task.name.clone(),
                    message: format!("gang {}: {m}", group.key.name),
                });
            }
        }
    }
    // One status, shared by the decision and the model.
    let status = Arc::new(status);
    let status_update = (changed && held_until.is_none()).then(|| GroupStatus {
        key: key.clone(),
        status: Arc::clone(&status),
        fingerprint,
    });
    // Remember what is being written so the next cycle does not write it again before the echo.
    let group = ssn.cluster.group_mut(id);
    if waiting {
        group.observed.event_fingerprint = event_print;
    } else {
        group.observed.event_fingerprint = 0;
    }
    if let Some(at) = held_until {
        if let Some(written) = &mut group.status_written {
            written.newer_held_back = true;
        }
        ssn.report_due_at(at);
    } else if let Some(update) = status_update {
        // A refresh of the figures alone waits twice as long for the next one.
        let refresh_ms = match group.status_written {
            Some(w) if waiting && w.gist == status_gist && w.fingerprint == group.observed.fingerprint => {
                w.refresh_ms.saturating_mul(2).min(FIGURES_REFRESH_MAX_MS)
            }
            _ => FIGURES_REFRESH_MS,
        };
        group.status_written = Some(StatusWritten {
            at: now,
            fingerprint,
            gist: status_gist,
            refresh_ms,
            newer_held_back: false,
        });
        group.observed.fingerprint = fingerprint;
        group.observed.status = Some(SeenStatus::Decided(status));
        decisions.group_statuses.push(update);
    } else if let Some(written) = &mut group.status_written
        && written.fingerprint == fingerprint
    {
        // The status the API holds is the one decided: nothing is held back, and its gist is this
        // report's (the same texts).
        written.newer_held_back = false;
        written.gist = status_gist;
    }
    for (t, print) in pod_updates {
        if let Some(task) = ssn.cluster.tasks.get_mut(t.0) {
            task.condition_fingerprint = print;
        }
    }
    let cluster = &*ssn.cluster;
    let group = cluster.group(id);
    let memo = if outcome.placed_by.is_none() {
        report_inputs(cluster, group, derived)
    } else {
        0
    };
    let why: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> =
        (memo != 0).then(|| std::sync::Arc::new(outcome.why.to_vec()) as _);
    let group = ssn.cluster.group_mut(id);
    group.report_inputs = memo;
    group.report_why = why;
    if memo == 0 {
        ssn.reports.remove(&id);
    } else {
        let stamp = ReportStamp::now(ssn.cluster, id, derived);
        ssn.reports.insert(id, stamp);
    }
}

/// Whether nothing [`report_inputs`] reads changed since the group's last report: first by the arena
/// stamps (no fingerprint to compute), else by the fingerprint, after which the stamps are taken again.
fn inputs_unchanged(ssn: &mut Session<'_>, id: GroupId, derived: Derived) -> bool {
    let cluster = &*ssn.cluster;
    let reads_devices = group_reads_devices(ssn, id);
    if ssn
        .reports
        .get(&id)
        .is_some_and(|stamp| stamp.holds(cluster, id, derived, reads_devices))
    {
        return true;
    }
    let group = cluster.group(id);
    if group.report_inputs != report_inputs(cluster, group, derived) {
        return false;
    }
    let stamp = ReportStamp::now(cluster, id, derived);
    ssn.reports.insert(id, stamp);
    true
}

/// Whether a pod of the group may have a share read through its node's devices (unknown, so yes, for
/// a group outside every gang).
fn group_reads_devices(ssn: &Session<'_>, id: GroupId) -> bool {
    ssn.gang_of.get(&id).is_none_or(|g| ssn.gang_reads_devices(*g))
}

/// The model when a group's report inputs were last fingerprinted: the group's arena stamp, the task
/// arena's clock, what its gang said of it, and the fields a status echo writes without a stamp
/// (`Cluster::apply_group`). While the group's stamp and its pods' are not above these and the rest is
/// the same, nothing [`report_inputs`] reads has changed (a pod whose share depends on its node's
/// devices, a `gpu-memory` request, is fingerprinted every time instead).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReportStamp {
    group: u64,
    tasks: u64,
    derived: Derived,
    echoed: Echoed,
}

/// What a PodGroup update that declares the same gang may change and [`report_inputs`] reads: its
/// status (the start and stale annotations it may also change are read by no report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Echoed {
    fingerprint: u64,
    event_fingerprint: u64,
}

impl Echoed {
    fn of(group: &Group) -> Self {
        Self {
            fingerprint: group.observed.fingerprint,
            event_fingerprint: group.observed.event_fingerprint,
        }
    }
}

impl ReportStamp {
    fn now(cluster: &Cluster, id: GroupId, derived: Derived) -> Self {
        Self {
            group: cluster.groups.stamp(id.0),
            tasks: cluster.tasks.clock(),
            derived,
            echoed: Echoed::of(cluster.group(id)),
        }
    }

    /// Whether it still holds; `reads_devices`: whether a pod of the group may have a share read
    /// through its node's devices (known per gang: when none may, the pods' stamps are read, not the
    /// pods; a pod that joins or leaves stamps its group).
    fn holds(&self, cluster: &Cluster, id: GroupId, derived: Derived, reads_devices: bool) -> bool {
        self.derived == derived
            && cluster.groups.stamp(id.0) <= self.group
            && cluster.groups.get(id.0).is_some_and(|group| {
                Echoed::of(group) == self.echoed
                    && if reads_devices {
                        crate::framework::session::pods_unchanged_since(cluster, group, self.tasks)
                    } else {
                        debug_assert!(!group.tasks.iter().any(|t| cluster.tasks.get(t.0).is_some_and(
                            |task| matches!(task.gpu, crate::model::GpuRequest::Memory { .. })
                        )));
                        crate::framework::session::pods_stamped_by(cluster, group, self.tasks)
                    }
            })
    }
}

/// What a group's report reads from its gang, computed once per report.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Derived {
    gang: bool,
    satisfied: bool,
    is_root: bool,
    has_children: bool,
    gang_waiting: bool,
}

/// Fingerprint of everything `report_group` reads for a group not placed in this cycle, but why it
/// waits (compared apart): the group's own fields, its pods' state, what its gang says about it.
/// Never 0.
fn report_inputs(cluster: &Cluster, group: &Group, derived: Derived) -> u64 {
    let mut h = WordHasher::default();
    derived.hash(&mut h);
    (
        &group.key,
        &group.uid,
        group.version,
        group.min_member,
        group.timed_out,
    )
        .hash(&mut h);
    (
        group.schedule_timeout_secs,
        group.mark_unschedulable,
        group.preemptible,
    )
        .hash(&mut h);
    group.problems.hash(&mut h);
    (group.observed.fingerprint, group.observed.event_fingerprint).hash(&mut h);
    group.tasks.len().hash(&mut h);
    for t in &group.tasks {
        let task = cluster.task(*t);
        // The uid names the pod (its name and namespace never change under one uid).
        (
            t.0,
            &task.uid,
            task.status,
            task.node,
            task.ours,
            task.problem.is_some(),
        )
            .hash(&mut h);
        (task.condition_fingerprint, task.gpu).hash(&mut h);
        task.request.nonzero().count().hash(&mut h);
        for (slot, value) in task.request.nonzero() {
            (slot, value).hash(&mut h);
        }
        // A GPU-memory request's share depends on its node's devices.
        if matches!(task.gpu, crate::model::GpuRequest::Memory { .. })
            && let Some(n) = task.node
        {
            cluster.node(n).gpu_memory_mib.hash(&mut h);
        }
    }
    h.finish() | 1
}

/// The queues the model's gangs name, with their ancestors.
fn queues_used_by_groups(cluster: &Cluster) -> std::collections::HashSet<crate::model::QueueId> {
    let mut used = std::collections::HashSet::new();
    for (_, group) in cluster.groups.iter() {
        let mut next = group.queue;
        // Bounded by the queue count: a parent cycle (reported as a queue problem) cannot loop here.
        for _ in 0..=cluster.queues.len() {
            let Some(q) = next else { break };
            if !used.insert(q) {
                break;
            }
            next = cluster.queue(q).parent;
        }
    }
    used
}

fn report_queues(ssn: &mut Session<'_>, decisions: &mut Decisions) {
    let ids: Vec<crate::model::QueueId> = ssn
        .cluster
        .queues
        .iter()
        .map(|(i, _)| crate::model::QueueId(i))
        .collect();
    let used = (ssn.cluster.queue_reports == crate::model::QueueReports::UsedByPool)
        .then(|| queues_used_by_groups(ssn.cluster));
    for id in ids {
        // An invalid queue is reported by every scheduler alike (its problems do not depend on the pool).
        if used.as_ref().is_some_and(|u| !u.contains(&id)) && ssn.cluster.queue(id).problems.is_empty() {
            continue;
        }
        let cluster = &*ssn.cluster;
        let queue = cluster.queue(id);
        let (allocated, requested) = (ssn.fairness.allocated(id), ssn.fairness.requested(id));
        let report = ssn.fairness.report(id);
        let fair_share = report.as_ref().map(|r| r.fair_share.to_resources());
        // Fingerprinted from the figures, not the text: most queues are unchanged in most cycles, and
        // their statuses are made only when written. Pods are not reported, so not fingerprinted.
        let fingerprint = {
            let mut h = WordHasher::default();
            // Nonzero slots only (most of the sixteen are zero), each with its slot, then a count
            // that ends the amount.
            let mut amounts = |r: &Resources| {
                let mut n = 0u64;
                for (slot, v) in r.nonzero().filter(|(slot, _)| *slot != PODS) {
                    h.write_usize(slot);
                    h.write_i64(v);
                    n += 1;
                }
                h.write_u64(n);
            };
            amounts(&allocated);
            amounts(&requested);
            if let (Some(report), Some(fair_share)) = (&report, &fair_share) {
                amounts(&report.allocated_non_preemptible);
                amounts(fair_share);
            }
            report.is_some().hash(&mut h);
            for c in &queue.children {
                cluster.queue(*c).name.hash(&mut h);
            }
            for p in &queue.problems {
                p.to_string().hash(&mut h);
            }
            h.finish()
        };
        if fingerprint == queue.observed_fingerprint {
            continue;
        }
        let mut status = api::QueueStatus {
            child_queues: queue
                .children
                .iter()
                .map(|c| cluster.queue(*c).name.to_string())
                .collect(),
            allocated: quantities(cluster, &allocated),
            requested: quantities(cluster, &requested),
            ..api::QueueStatus::default()
        };
        if let (Some(report), Some(fair_share)) = (&report, &fair_share) {
            status.allocated_non_preemptible = quantities(cluster, &report.allocated_non_preemptible);
            status.fair_share = quantities(cluster, fair_share);
        }
        for p in &queue.problems {
            status.conditions.push(api::queue::QueueCondition {
                type_: "Valid".to_owned(),
                status: "False".to_owned(),
                reason: Some("InvalidQueue".to_owned()),
                message: Some(p.to_string()),
                ..Default::default()
            });
        }
        if fingerprint != queue.observed_fingerprint {
            let name = queue.name.clone();
            // The report's own bookkeeping, not a change to the queue: unstamped, so that the next
            // session reuses the fair-share tree built from the queues (`Fairness::reopen`).
            if let Some(q) = ssn.cluster.queues.get_mut_unstamped(id.0) {
                q.observed_fingerprint = fingerprint;
            }
            decisions.queue_statuses.push(QueueStatus {
                name,
                status,
                fingerprint,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_civil_time() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_600_000), "2026-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000 + 3_723_000), "2000-02-29T01:02:03Z");
    }

    #[test]
    fn phases_follow_the_seed_table() {
        let c = |running, bound, pending, succeeded, failed| Counts {
            running,
            bound,
            pipelined: 0,
            pending,
            succeeded,
            failed,
            releasing: 0,
        };
        assert_eq!(
            phase(c(0, 0, 4, 0, 0), 4, false, false, false),
            PodGroupPhase::Pending
        );
        assert_eq!(
            phase(c(0, 4, 0, 0, 0), 4, true, false, false),
            PodGroupPhase::Scheduled
        );
        assert_eq!(
            phase(c(4, 0, 0, 0, 0), 4, true, false, false),
            PodGroupPhase::Running
        );
        assert_eq!(
            phase(c(0, 0, 0, 4, 0), 4, false, false, false),
            PodGroupPhase::Finished
        );
        assert_eq!(
            phase(c(0, 0, 0, 1, 3), 4, false, false, false),
            PodGroupPhase::Failed
        );
        assert_eq!(
            phase(c(0, 0, 8, 0, 0), 8, false, true, false),
            PodGroupPhase::Failed
        );
        let pipelined = Counts {
            pipelined: 4,
            ..Counts::default()
        };
        assert_eq!(
            phase(pipelined, 4, true, false, false),
            PodGroupPhase::PreScheduling
        );
    }
}
