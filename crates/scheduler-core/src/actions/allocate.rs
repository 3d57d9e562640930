//! allocate: places pending gangs in queue order, each all or nothing.
//!
//! For each gang (KAI's `AllocateJob`): drop its own reservations so they can be re-placed, take the pods
//! it needs now (the shortfall of each unsatisfied part, or one more for an elastic gang), check the
//! queue rules, then place pod by pod inside a checkpoint. One pod that fits nowhere rolls the whole
//! attempt back and leaves every resource free for the next gang. If any pod only fits on resources
//! still being freed, the whole gang is reserved (pipelined) instead of half bound.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use crate::config::ActionKind;
use crate::framework::Session;
pub(super) use crate::framework::backlog::AttemptShape;
use crate::framework::backlog::ClassKey;
use crate::framework::policy::ordering::JobQueues;
use crate::framework::policy::placement::{Mode, NodeMiss, main_slot};
use crate::framework::policy::topology;
use crate::framework::report::explain::{FitFailure, FitSummary, Why};
use crate::framework::session::BacklogAnswer;
use crate::model::group::TopologyRequirement;
use crate::model::ids::{WordMap, WordSet};
use crate::model::resources::{CPU, GPU};
use crate::model::{Cluster, GpuRequest, GroupId, NodeId, Resources, TaskId, TaskStatus};

/// Task order inside a gang: the task-priority label (higher first), then older, then by name.
#[must_use]
pub fn task_order(cluster: &Cluster, a: TaskId, b: TaskId) -> Ordering {
    let (ta, tb) = (cluster.task(a), cluster.task(b));
    tb.task_order
        .cmp(&ta.task_order)
        .then(ta.created.cmp(&tb.created))
        .then(ta.name.cmp(&tb.name))
}

/// Runs allocate over every gang with pods waiting.
///
/// A gang whose failure is known before its turn takes none: one that failed when the cluster was as
/// it is now (the no-fit memo) is answered before the order is made, and once a plain gang fails, the
/// gangs of its class are answered alike and passed over by the order ([`Doom`]), so a queue competes
/// with its first gang that may still be placed.
pub fn allocate(ssn: &mut Session<'_>) {
    let mut candidates = Vec::new();
    let mut doom = Doom::new(ssn.gangs.len());
    check_backlog_heads(ssn, &mut doom);
    // Nothing journaled: no pod was placed or evicted in this session before allocate (it runs first by
    // default), so every gang has exactly the work it had at open.
    let as_at_open = ssn.checkpoint() == 0;
    // Gangs answered as their class, for the backlog (`framework::backlog`).
    let mut told: Vec<Told> = Vec::new();
    for g in 0..ssn.gangs.len() {
        // Most gangs of a busy cluster run with nothing to place: those known so at open are passed
        // over without a look at their pods.
        if !ssn.had_work_at_open(g) {
            debug_assert!(
                !ssn.gangs[g].has_work(ssn.cluster),
                "gang {g} has work it had not"
            );
            continue;
        }
        ssn.attempt(g);
        if as_at_open {
            debug_assert!(ssn.gangs[g].has_work(ssn.cluster), "gang {g} lost work untouched");
        } else if !ssn.gangs[g].has_work(ssn.cluster) {
            continue;
        }
        if let Some(why) = blocked(ssn, g) {
            ssn.explain(g, why);
            continue;
        }
        // Failed when the cluster was as it is now, and unchanged since: it fails again whatever this
        // pass places first (placing only takes room), so it takes no turn.
        let version = gang_version(ssn, g);
        let root = ssn.gangs[g].root;
        if let Some(why) = ssn
            .cluster
            .no_fit_memo
            .still_failing::<Why>(root, ssn.epoch_at_open, version)
            .cloned()
        {
            ssn.stats.gangs_skipped_unchanged += 1;
            // Its class fails as it does.
            if let Some(class) = doom.class(ssn, g)
                && (doom.record(ssn, g, class, &why) || doom.doomed(ssn, g))
            {
                told.push(Told {
                    gang: g,
                    class,
                    remembered: true,
                });
            }
            ssn.explain(g, why);
            continue;
        }
        candidates.push(g);
    }
    // Every attempt binds at least one pod or drops the gang for this cycle, so this bound is never
    // reached; it guards the loop against a future mistake turning into a hung scheduler.
    // A gang taken in from the backlog during the pass adds its own share.
    let share = |ssn: &Session<'_>, g: usize| (ssn.gangs[g].tasks().count() + 1) * 2;
    let mut budget: usize = candidates.iter().map(|g| share(ssn, *g)).sum::<usize>();
    let mut queue = JobQueues::new(ssn, candidates.into_iter(), false);
    // Gangs passed over, answered once the pass is over (with the figures it leaves).
    let mut passed_over = Vec::new();
    loop {
        let next = {
            let view = &*ssn;
            queue.pop_unless(view, &mut |g| doom.doomed(view, g))
        };
        passed_over.append(&mut queue.take_passed_over());
        let Some(g) = next else { break };
        ssn.attempt(g);
        if budget == 0 {
            ssn.stats.attempt_budget_exhausted = true;
            break;
        }
        budget -= 1;
        let version = gang_version(ssn, g);
        let root = ssn.gangs[g].root;
        ssn.stats.gangs_tried += 1;
        // Its class, found before the attempt when a placement takes the next of its class in from the
        // backlog (a placed gang has no attempt shape, and its pods wait no more); else only if it fails
        // (a failed attempt rolls back: the shape is the same).
        let class_before = (!ssn.backlog.is_empty()).then(|| doom.class(ssn, g)).flatten();
        let key_before = class_before.and_then(|c| doom.key(ssn, g, c));
        let held_reservations = ssn.gangs[g]
            .tasks()
            .any(|t| ssn.cluster.task(t).status == TaskStatus::Pipelined);
        match try_allocate(ssn, g) {
            Ok(progress) => {
                doom.placed();
                ssn.cluster.no_fit_memo.forget(root);
                // Placing takes room, so a class that failed still fails: except where the gang gave
                // up reservations of its own and placed its pods elsewhere, which may free room.
                if held_reservations && doom.revive() {
                    queue.doom_changed();
                    // Passed over on a failure that may no longer hold: back in their places, and
                    // so is the first kept gang of each backlog class (the rest follow it).
                    for passed in passed_over.drain(..) {
                        queue.push(ssn, passed);
                    }
                    for key in ssn.backlog_class_keys() {
                        if let Some(kept) = ssn.take_from_backlog(&key) {
                            budget = budget.saturating_add(share(ssn, kept));
                            queue.push(ssn, kept);
                        }
                    }
                }
                // An elastic gang competes again for one more pod, but only after binding one now:
                // a gang that only reserved (waits for evictions) or has nothing left to place is done
                // for this cycle.
                let more = ssn.gangs[g].pending(ssn.cluster).next().is_some();
                if progress == Progress::Bound && more && ssn.gangs[g].is_satisfied(ssn.cluster) {
                    queue.push(ssn, g);
                }
                // The next gang of its class kept in the backlog competes now, in its place.
                if let Some(key) = &key_before
                    && let Some(next) = ssn.take_from_backlog(key)
                {
                    budget = budget.saturating_add(share(ssn, next));
                    queue.push(ssn, next);
                }
            }
            Err(why) => {
                let why = share_with_last(ssn, root, why);
                if let Some(class) = class_before.or_else(|| doom.class(ssn, g))
                    && doom.record(ssn, g, class, &why)
                {
                    queue.doom_changed();
                    told.push(Told {
                        gang: g,
                        class,
                        remembered: false,
                    });
                }
                ssn.cluster
                    .no_fit_memo
                    .remember(root, ssn.epoch_at_open, version, why.clone());
                ssn.explain(g, why);
            }
        }
    }
    for g in passed_over {
        answer_doomed(ssn, &mut doom, g);
        if let Some(class) = doom.class(ssn, g) {
            told.push(Told {
                gang: g,
                class,
                remembered: false,
            });
        }
    }
    tell_backlog(ssn, &mut doom, told);
}

/// Checks that the first gang of each backlog class, taken in at open, is of its class in this
/// session; a class whose head is not (its shape depends on the session: a rule about other pods,
/// the placement strategy) has all its gangs taken in, to be tried as any other.
fn check_backlog_heads(ssn: &mut Session<'_>, doom: &mut Doom) {
    let heads: Vec<(ClassKey, crate::model::GroupId)> = ssn.backlog_heads().to_vec();
    for (key, head) in heads {
        let Some(&g) = ssn.gang_of.get(&head) else {
            continue;
        };
        let same = doom
            .class(ssn, g)
            .and_then(|c| doom.key(ssn, g, c))
            .is_some_and(|k| k == key);
        if !same {
            while ssn.take_from_backlog(&key).is_some() {}
        }
    }
}

/// A gang answered as its class (for the backlog).
struct Told {
    gang: usize,
    class: ClassId,
    /// Answered by the no-fit memo, before the order: nothing changed since the last cycle.
    remembered: bool,
}

/// Tells the backlog which gangs were answered as their class, and each class's answer: what a gang of
/// the class kept out of the session would have been told (naming its own pod). Where one was answered
/// by the no-fit memo, nothing changed since the last cycle, when the kept gangs were told theirs, so
/// they would be answered by it too: the class keeps the answer they were given then.
fn tell_backlog(ssn: &mut Session<'_>, doom: &mut Doom, told: Vec<Told>) {
    if !ssn.keeps_backlog() {
        return;
    }
    // Each class once, in the order its first gang was told (the answers are worked out in that order).
    let mut answers: Vec<(ClassKey, usize, bool)> = Vec::new();
    let mut at: WordMap<ClassKey, usize> = WordMap::default();
    for t in told {
        let Some(key) = doom.key(ssn, t.gang, t.class) else {
            continue;
        };
        let i = *at.entry(key.clone()).or_insert_with(|| {
            answers.push((key.clone(), t.gang, t.remembered));
            answers.len() - 1
        });
        let entry = &mut answers[i];
        if t.remembered || !entry.2 {
            (entry.1, entry.2) = (t.gang, t.remembered);
        }
        ssn.tell_backlog(BacklogAnswer::Gang(t.gang, key));
    }
    for (key, g, remembered) in answers {
        ssn.attempt(g);
        if remembered && ssn.backlog_has(&key) {
            // The kept gangs keep what they were told.
            ssn.tell_backlog(BacklogAnswer::Class(key, None));
            continue;
        }
        let why = if remembered {
            ssn.outcomes.get(&g).and_then(|o| o.why.first()).cloned()
        } else {
            // What a gang of the class passed over is told, at the end of the pass.
            class_answer(ssn, doom, g)
        };
        if let Some(why) = why {
            ssn.tell_backlog(BacklogAnswer::Class(key, Some(why)));
        }
    }
}

/// Why gang `g`, of a doomed class, fails after the pass: its class tried once more first if it
/// failed before something was placed (so the reason quotes what the pass left free).
fn class_answer(ssn: &mut Session<'_>, doom: &mut Doom, g: usize) -> Option<Why> {
    let root = ssn.gangs[g].root;
    if let Some(class) = doom.stale_no_fit(ssn, g) {
        let placements = ssn.stats.placements;
        let attempt = try_allocate(ssn, g);
        ssn.stats.placements = placements;
        match attempt {
            Err(why @ Why::NoFit(_)) => {
                let why = share_with_last(ssn, root, why);
                doom.refreshed(class, why);
            }
            // Its own queue's gate: the class's reason is still the last one found.
            Err(_) => {}
            // Placing only takes room, so this does not happen; if it did, the gang is placed, as its
            // turn would have placed it.
            Ok(_) => {
                debug_assert!(false, "gang {g} of a doomed class was placed");
                doom.placed();
                ssn.cluster.no_fit_memo.forget(root);
                return None;
            }
        }
    }
    doom.answer(ssn, g)
}

/// Answers a gang the order passed over because its class failed, once the pass is over: as a like
/// gang's attempt would then (its own queue's gate first, then the class's reason naming its own pod).
/// A class that failed before something was placed is tried once more first, so that its reason
/// quotes what is free after the pass.
fn answer_doomed(ssn: &mut Session<'_>, doom: &mut Doom, g: usize) {
    ssn.attempt(g);
    ssn.stats.gangs_like_a_failed_one += 1;
    let version = gang_version(ssn, g);
    let root = ssn.gangs[g].root;
    let placed = doom.placed;
    let Some(why) = class_answer(ssn, doom, g) else {
        // Placed after all (see `class_answer`).
        debug_assert!(doom.placed > placed, "a gang passed over has a doomed class");
        return;
    };
    #[cfg(debug_assertions)]
    check_doomed_answer(ssn, g, &why);
    ssn.cluster
        .no_fit_memo
        .remember(root, ssn.epoch_at_open, version, why.clone());
    ssn.explain(g, why);
}

/// A class of plain gangs: one attempt shape (interned per pass).
type ClassId = u32;

/// What allocate knows before a gang's turn about how it will fail. Plain gangs ([`AttemptShape`]) are
/// classed by shape; once a gang of a class fails, the rest of its class fails alike for the rest of
/// the pass, since placing only takes room and adds to queues' accounting: a shape whose pods found no
/// place finds none later (in any queue), and a queue gate that refused a request refuses it later. So
/// a backlog of like gangs costs one attempt per class, not one per gang, each time capacity frees up.
/// The one exception, a gang that gives up reservations of its own and places elsewhere, revives every
/// class ([`Self::revive`]).
#[derive(Default)]
struct Doom {
    /// Per gang index: `None` not looked at yet, `Some(None)` not plain, `Some(Some(c))` its class.
    class_of: Vec<Option<Option<ClassId>>>,
    /// Interned shapes.
    ids: WordMap<AttemptShape, ClassId>,
    /// Per class: the shape, the reason its pods found no place (once one failed so), and what its
    /// attempt asks of the queue (the same for every gang of the class: its pods ask alike and all
    /// wait; found at the first answer).
    classes: Vec<ClassState>,
    /// Classes refused by a queue's gate, by queue.
    gated: WordSet<(crate::model::QueueId, ClassId)>,
    /// Whether any class failed (nothing to look up before).
    any: bool,
    /// Gangs placed so far in the pass.
    placed: u64,
}

struct ClassState {
    shape: AttemptShape,
    no_fit: Option<Why>,
    /// How many gangs had been placed in the pass when `no_fit` was found.
    no_fit_at: u64,
    request: Option<Resources>,
}

impl Doom {
    fn new(gangs: usize) -> Self {
        Self {
            class_of: vec![None; gangs],
            ..Self::default()
        }
    }

    /// A gang was placed: reasons found so far quote figures from before it.
    fn placed(&mut self) {
        self.placed += 1;
    }

    /// Gang `g`'s class, if its reason was found before the last placement (and is to be found again).
    fn stale_no_fit(&mut self, ssn: &Session<'_>, g: usize) -> Option<ClassId> {
        let class = self.class(ssn, g)?;
        let state = &self.classes[class as usize];
        (state.no_fit.is_some() && state.no_fit_at < self.placed).then_some(class)
    }

    /// The reason `class` fails after the pass.
    fn refreshed(&mut self, class: ClassId, why: Why) {
        let state = &mut self.classes[class as usize];
        state.no_fit = Some(why);
        state.no_fit_at = self.placed;
    }

    /// Gang `g`'s class, if it is plain (found once per pass: a gang does not change shape until its
    /// own attempt succeeds, after which it is not asked again).
    fn class(&mut self, ssn: &Session<'_>, g: usize) -> Option<ClassId> {
        if self.class_of.len() <= g {
            self.class_of.resize(g + 1, None);
        }
        if let Some(known) = self.class_of[g] {
            return known;
        }
        let class = AttemptShape::of(ssn, g).map(|shape| match self.ids.get(&shape) {
            Some(id) => *id,
            None => {
                let id = ClassId::try_from(self.classes.len()).unwrap_or(ClassId::MAX);
                self.ids.insert(shape.clone(), id);
                self.classes.push(ClassState {
                    shape,
                    no_fit: None,
                    no_fit_at: 0,
                    request: None,
                });
                id
            }
        });
        self.class_of[g] = Some(class);
        class
    }

    /// The backlog class of gang `g` of `class`.
    fn key(&self, ssn: &Session<'_>, g: usize, class: ClassId) -> Option<ClassKey> {
        ClassKey::of(ssn, g, self.classes.get(class as usize)?.shape.clone())
    }

    /// Whether gang `g` will fail: its class failed in this pass.
    fn doomed(&mut self, ssn: &Session<'_>, g: usize) -> bool {
        if !self.any {
            return false;
        }
        let Some(class) = self.class(ssn, g) else {
            return false;
        };
        self.classes[class as usize].no_fit.is_some()
            || ssn.gangs[g]
                .queue
                .is_some_and(|q| self.gated.contains(&(q, class)))
    }

    /// Records how gang `g` of `class` failed; whether a class became doomed by it (a pod that found no
    /// place dooms the shape, a queue gate the shape in that queue; other reasons are the gang's own).
    fn record(&mut self, ssn: &Session<'_>, g: usize, class: ClassId, why: &Why) -> bool {
        match why {
            Why::NoFit(f) if f.failed_task.is_some() && f.topology.is_none() => {
                let state = &mut self.classes[class as usize];
                if state.no_fit.is_some() {
                    return false;
                }
                state.no_fit = Some(why.clone());
                state.no_fit_at = self.placed;
                self.any = true;
                true
            }
            Why::Queue(_) => {
                let Some(queue) = ssn.gangs[g].queue else {
                    return false;
                };
                self.any = true;
                self.gated.insert((queue, class))
            }
            _ => false,
        }
    }

    /// Forgets every failure (room may have been freed); whether there was any.
    fn revive(&mut self) -> bool {
        let any = self.any;
        for state in &mut self.classes {
            state.no_fit = None;
        }
        self.gated.clear();
        self.any = false;
        any
    }

    /// Why doomed gang `g` fails: its own queue's rule if one stops it (checked first, as an attempt
    /// does), else its class's reason, naming its own pod.
    fn answer(&mut self, ssn: &Session<'_>, g: usize) -> Option<Why> {
        let class = self.class(ssn, g)?;
        let cluster = &*ssn.cluster;
        let shape = &self.classes[class as usize].shape;
        // A plain gang's pods all wait: one pod is the whole attempt (most backlogs), else they are
        // taken in task order.
        let lone = if shape.pods == 1 {
            ssn.gangs[g].tasks().next()
        } else {
            None
        };
        let ordered;
        let tasks: &[TaskId] = match &lone {
            Some(t) => {
                debug_assert_eq!(
                    ssn.gangs[g].tasks_to_allocate(cluster, &|a, b| task_order(cluster, a, b)),
                    [*t]
                );
                std::slice::from_ref(t)
            }
            None => {
                ordered = ssn.gangs[g].tasks_to_allocate(cluster, &|a, b| task_order(cluster, a, b));
                &ordered
            }
        };
        let queue = ssn.gangs[g].queue?;
        let preemptible = shape.preemptible;
        let state = &mut self.classes[class as usize];
        let request = *state.request.get_or_insert_with(|| queue_request(ssn, tasks));
        debug_assert_eq!(
            queue_request(ssn, tasks),
            request,
            "gang {g} asks otherwise than its shape"
        );
        if let Err(gate) = ssn.fairness.gate(ssn.cluster, queue, &request, preemptible) {
            return Some(Why::Queue(gate));
        }
        debug_assert!(
            !self.gated.contains(&(queue, class)),
            "a gate that refused gang {g}'s class lets it pass"
        );
        let Some(Why::NoFit(f)) = &state.no_fit else {
            return None;
        };
        for_own_pod(ssn, g, tasks, f)
    }
}

/// A like gang's reason `f` for plain gang `g`, whose pods to place are `tasks`: the same summary,
/// naming its own pod.
fn for_own_pod(ssn: &Session<'_>, g: usize, tasks: &[TaskId], f: &FitFailure) -> Option<Why> {
    let failed = *tasks.get(usize::try_from(f.pods_placed).ok()?)?;
    // The gang's last reason, if it names the same pod with this same summary, is this one: shared,
    // not made again (a backlog's gangs are answered alike cycle after cycle).
    if let Some(Why::NoFit(last)) = ssn.cluster.no_fit_memo.last::<Why>(ssn.gangs[g].root)
        && Arc::ptr_eq(&last.summary, &f.summary)
        && last.failed_task == Some(failed)
        && last.failed_pod.names(ssn.cluster.task(failed))
    {
        return Some(Why::NoFit(Arc::clone(last)));
    }
    Some(Why::NoFit(
        f.for_pod(ssn.cluster.task(failed).pod_name(), failed).into(),
    ))
}

/// Gives a gang taken in from the backlog after allocate (by a victim action) the answer its class
/// was given, naming its own pod, as allocate would have answered it, and tells the backlog.
pub(super) fn answer_as_class(ssn: &mut Session<'_>, g: usize, key: ClassKey, answer: &Why) {
    let why = match answer {
        Why::NoFit(f) => {
            let cluster = &*ssn.cluster;
            let tasks = ssn.gangs[g].tasks_to_allocate(cluster, &|a, b| task_order(cluster, a, b));
            for_own_pod(ssn, g, &tasks, f)
        }
        other => Some(other.clone()),
    };
    if let Some(why) = why {
        let version = gang_version(ssn, g);
        let root = ssn.gangs[g].root;
        ssn.cluster
            .no_fit_memo
            .remember(root, ssn.epoch_at_open, version, why.clone());
        ssn.explain(g, why);
        ssn.tell_backlog(BacklogAnswer::Gang(g, key));
    }
}

/// A failed attempt's reason, sharing the summary of the gang's last one when the nodes answered the
/// same (one comparison per attempt): like gangs answered from it then share it with their own last
/// reasons, which the status report and the no-fit memo compare by identity.
fn share_with_last(ssn: &Session<'_>, root: GroupId, why: Why) -> Why {
    let Why::NoFit(mut new) = why else {
        return why;
    };
    if let Some(Why::NoFit(last)) = ssn.cluster.no_fit_memo.last::<Why>(root)
        && (Arc::ptr_eq(&last.summary, &new.summary) || last.summary == new.summary)
    {
        if last.failed_task == new.failed_task && last.failed_pod == new.failed_pod {
            return Why::NoFit(Arc::clone(last));
        }
        Arc::make_mut(&mut new).summary = Arc::clone(&last.summary);
    }
    Why::NoFit(new)
}

/// Debug builds check every answer given a doomed gang against a real attempt, which must fail (and roll
/// back) the same way: at its queue's gate, or with no place for its pods (which pod, and the figures,
/// may have moved since its class failed).
#[cfg(debug_assertions)]
fn check_doomed_answer(ssn: &mut Session<'_>, g: usize, why: &Why) {
    let placements = ssn.stats.placements;
    let attempt = try_allocate(ssn, g);
    ssn.stats.placements = placements;
    match (&attempt, why) {
        (Err(Why::Queue(_)), Why::Queue(_)) | (Err(Why::NoFit(_)), Why::NoFit(_)) => {}
        _ => panic!("a doomed gang's answer {why:?} differs from an attempt's {attempt:?}"),
    }
}

/// What placing `tasks` asks of their queue (the gate's request).
fn queue_request(ssn: &Session<'_>, tasks: &[TaskId]) -> Resources {
    let mut request = Resources::ZERO;
    for t in tasks {
        request.add(&ssn.share_request(*t));
    }
    request
}

/// The gang's version (kept when it was built: a PodGroup that changes builds its gang again).
fn gang_version(ssn: &Session<'_>, g: usize) -> u64 {
    let gang = &ssn.gangs[g];
    debug_assert_eq!(
        gang.version,
        gang.live_version(ssn.cluster),
        "gang {g}'s version moved"
    );
    gang.version
}

/// Reasons a gang cannot be tried at all.
fn blocked(ssn: &Session<'_>, g: usize) -> Option<Why> {
    let gang = &ssn.gangs[g];
    let pool = ssn.cluster.node_pool_name();
    if ssn.cluster.group(gang.root).backed_off_on(pool) {
        return Some(Why::SchedulingBackoff {
            node_pool: pool.into(),
        });
    }
    for id in &gang.groups {
        if let Some(p) = ssn.cluster.group(*id).blocking_problem() {
            return Some(Why::Problem(p.clone()));
        }
    }
    if gang.queue.is_none() {
        // resolve_group always records why; this is a fallback.
        let name = ssn.cluster.group(gang.root).queue_name.to_string();
        return Some(Why::Problem(crate::model::GroupProblem::QueueNotFound(name)));
    }
    if let Err(not_ready) = ssn.gang_ready(g) {
        return Some(Why::NotReady(not_ready));
    }
    // A pod whose bind just failed holds its gang back until its back-off ends (a failed bind is
    // recorded on its pod, which builds the gang again).
    if !gang.bind_failure_at_build {
        return None;
    }
    let backing_off = gang
        .tasks()
        .map(|t| ssn.cluster.task(t))
        .filter(|t| t.ours && t.status == TaskStatus::Pending)
        .filter_map(|t| t.bind_failure.as_ref().map(|f| (f, t)))
        .filter(|(f, _)| f.retry_at > ssn.now)
        .max_by_key(|(f, t)| (f.retry_at, t.uid.clone()));
    if let Some((failure, task)) = backing_off {
        ssn.wake_at(failure.retry_at);
        return Some(Why::BindFailed {
            pod: task.key(),
            reason: failure.reason.clone(),
            count: failure.count,
        });
    }
    None
}

/// What a successful attempt achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Nothing to place (e.g. an elastic gang at its maximum).
    Nothing,
    /// Pods were placed to be bound now.
    Bound,
    /// Pods were reserved on resources still being freed.
    Reserved,
}

/// Tries to place one gang (or grow an elastic one by one pod).
///
/// # Errors
/// Why it cannot be placed now; nothing of it is placed then.
pub fn try_allocate(ssn: &mut Session<'_>, g: usize) -> Result<Progress, Why> {
    let checkpoint = ssn.checkpoint();
    let was_satisfied = ssn.gang_satisfied(g);
    // Reservations from earlier cycles are released and re-placed, preferring the same node.
    let mut nominated = HashMap::new();
    let reserved: Vec<TaskId> = ssn.gangs[g]
        .tasks()
        .filter(|t| ssn.cluster.task(*t).status == TaskStatus::Pipelined)
        .collect();
    for t in reserved {
        if let Some(n) = ssn.cluster.task(t).node {
            nominated.insert(t, n);
        }
        ssn.unreserve(t);
    }
    let tasks = {
        let cluster = &*ssn.cluster;
        ssn.gangs[g].tasks_to_allocate(cluster, &|a, b| task_order(cluster, a, b))
    };
    if tasks.is_empty() {
        ssn.rollback(checkpoint);
        return Ok(Progress::Nothing);
    }
    let gang = &ssn.gangs[g];
    let queue = gang
        .queue
        .expect("invariant: blocked() filters gangs without a queue");
    let preemptible = gang.preemptible;
    let request = queue_request(ssn, &tasks);
    if let Err(gate) = ssn.fairness.gate(ssn.cluster, queue, &request, preemptible) {
        ssn.rollback(checkpoint);
        return Err(Why::Queue(gate));
    }
    if !was_satisfied && let Some(min) = ssn.cluster.group(gang.root).min_resources {
        let free = ssn.index.free_totals().0;
        if !min.fits_in(&free) {
            ssn.rollback(checkpoint);
            return Err(Why::MinResources {
                needed: Box::new(min),
                free: Box::new(free),
            });
        }
    }
    let pipelined_any = match place_gang(ssn, g, &tasks, &nominated) {
        Ok(p) => p,
        Err(mut failure) => {
            ssn.rollback(checkpoint);
            if let Some(t) = failure.failed_task {
                failure.beyond_every_node = ssn.beyond_every_node(&ssn.cluster.task(t).request);
                fill_free(ssn, t, &mut failure);
            }
            return Err(Why::NoFit(failure.into()));
        }
    };
    let placed = tasks;
    // No part of a gang is bound while another part waits for resources being freed.
    if pipelined_any && !was_satisfied {
        for t in &placed {
            let task = ssn.cluster.task(*t);
            if task.status == TaskStatus::Binding {
                let (node, groups) = (
                    task.node.expect("invariant: binding has a node"),
                    task.gpu_groups.clone(),
                );
                ssn.pipeline(*t, node, groups);
            }
        }
    }
    if !was_satisfied && ssn.gangs[g].is_satisfied(ssn.cluster) {
        ssn.mark_placed(g, ActionKind::Allocate);
    }
    if pipelined_any {
        ssn.explain(g, Why::Pipelined);
        Ok(Progress::Reserved)
    } else {
        Ok(Progress::Bound)
    }
}

/// Places the pods of a gang, honouring its topology constraints: the gang-level domain first (tightest
/// domain that can hold it), then per sub-group domains inside it. Returns whether any pod is only
/// reserved (pipelined).
fn place_gang(
    ssn: &mut Session<'_>,
    g: usize,
    tasks: &[TaskId],
    nominated: &HashMap<TaskId, NodeId>,
) -> Result<bool, Box<FitFailure>> {
    let root = ssn.gangs[g].nodes[0].topology.clone();
    match root {
        None => place_leaves(ssn, g, tasks, None, nominated),
        Some(req) => place_in_domains(ssn, g, tasks, &req, None, nominated, tasks.len()),
    }
}

/// Tries the candidate domains of a constraint in order; the first that holds `tasks` wins.
fn place_in_domains(
    ssn: &mut Session<'_>,
    g: usize,
    tasks: &[TaskId],
    req: &TopologyRequirement,
    within: Option<&[NodeId]>,
    nominated: &HashMap<TaskId, NodeId>,
    pods_needed: usize,
) -> Result<bool, Box<FitFailure>> {
    let mut need = Resources::ZERO;
    for t in tasks {
        need.add(&node_need(ssn.cluster, *t));
    }
    let running: Vec<NodeId> = ssn.gangs[g]
        .tasks()
        .filter(|t| ssn.cluster.task(*t).status.is_active_allocated())
        .filter_map(|t| ssn.cluster.task(t).node)
        .collect();
    let must_contain: Vec<NodeId> = if req.required.is_some() {
        running
    } else {
        Vec::new()
    };
    let (candidates, largest) = topology::candidates(ssn.cluster, req, &need, &must_contain, within);
    let mut last: Option<Box<FitFailure>> = None;
    for domain in candidates {
        let cp = ssn.checkpoint();
        match place_leaves(ssn, g, tasks, domain.as_deref(), nominated) {
            Ok(p) => return Ok(p),
            Err(f) => {
                ssn.rollback(cp);
                last = Some(f);
            }
        }
    }
    let level = req
        .required
        .or(req.preferred)
        .and_then(|l| req.levels.get(l))
        .cloned()
        .unwrap_or_default();
    // No domain could be tried: the gang's total request is what no domain holds.
    let mut failure = last.unwrap_or_else(|| {
        Box::new(FitFailure {
            summary: Arc::new(FitSummary {
                pods_needed: u32::try_from(pods_needed).unwrap_or(u32::MAX),
                request_total: need,
                ..FitSummary::default()
            }),
            ..FitFailure::default()
        })
    });
    let names = &ssn.cluster.names;
    let most = largest.map_or_else(
        || "no node carries the level's label".to_owned(),
        |(id, v)| {
            let slot = if need.gpu() > 0 { GPU } else { CPU };
            format!(
                "the freest {level} domain ({id}) has {} {}",
                names.format_amount(slot, v),
                names.name(slot)
            )
        },
    );
    failure.topology = Some(format!(
        "topology {}: the pods must share one {level} domain and none can hold them all ({} needed; {most})",
        req.topology,
        names.format(&need)
    ));
    Err(failure)
}

/// What a pod takes on a node, counting a fresh device for a fraction.
fn node_need(cluster: &Cluster, t: TaskId) -> Resources {
    let task = cluster.task(t);
    let mut r = task.request;
    if let GpuRequest::Fraction { milli, devices } = task.gpu {
        r.0[GPU] += i64::from(milli * devices);
    }
    r
}

/// Places pods, each within `domain` when given; pods of a sub-group with its own topology go to one
/// domain of that sub-group's level inside `domain`.
fn place_leaves(
    ssn: &mut Session<'_>,
    g: usize,
    tasks: &[TaskId],
    domain: Option<&[NodeId]>,
    nominated: &HashMap<TaskId, NodeId>,
) -> Result<bool, Box<FitFailure>> {
    // Group pods by the sub-group constraint that applies to them (the nearest leaf's).
    let mut constrained: Vec<(TopologyRequirement, Vec<TaskId>)> = Vec::new();
    let mut free: Vec<TaskId> = Vec::new();
    for t in tasks {
        let leaf = ssn.gangs[g]
            .nodes
            .iter()
            .skip(1)
            .find(|n| n.tasks.contains(t))
            .and_then(|n| n.topology.clone());
        match leaf {
            Some(req) => match constrained.iter_mut().find(|(r, _)| *r == req) {
                Some((_, list)) => list.push(*t),
                None => constrained.push((req, vec![*t])),
            },
            None => free.push(*t),
        }
    }
    let mut pipelined = false;
    for (req, list) in constrained {
        pipelined |= place_in_domains(ssn, g, &list, &req, domain, nominated, tasks.len())?;
    }
    for (i, t) in free.iter().enumerate() {
        let found = {
            let cluster = &*ssn.cluster;
            ssn.index.find(
                cluster,
                cluster.task(*t),
                &ssn.policy,
                domain,
                nominated.get(t).copied(),
            )
        };
        match found {
            Some(p) if p.mode == Mode::Allocate => ssn.allocate(*t, p.node, p.gpu_groups),
            Some(p) => {
                pipelined = true;
                ssn.pipeline(*t, p.node, p.gpu_groups);
            }
            None => {
                let mut failure = node_summary(ssn, *t, domain);
                failure.pods_needed = u32::try_from(tasks.len()).unwrap_or(u32::MAX);
                failure.pods_placed = u32::try_from(tasks.len() - free.len() + i).unwrap_or(u32::MAX);
                for task in tasks {
                    failure.request_total.add(&ssn.cluster.task(*task).request);
                }
                return Err(Box::new(failure));
            }
        }
    }
    Ok(pipelined)
}

/// How every node answers for the pod that fit nowhere (with the gang's earlier pods still placed).
fn node_summary(ssn: &mut Session<'_>, t: TaskId, domain: Option<&[NodeId]>) -> FitFailure {
    let mut failure = FitFailure {
        failed_task: Some(t),
        failed_pod: ssn.cluster.task(t).pod_name(),
        summary: Arc::new(FitSummary {
            pod_request: ssn.cluster.task(t).request,
            ..FitSummary::default()
        }),
    };
    if let GpuRequest::Fraction { milli, devices } = ssn.cluster.task(t).gpu {
        failure.pod_request.0[GPU] = i64::from(milli * devices);
    }
    let cluster = &*ssn.cluster;
    let task = cluster.task(t);
    match domain {
        None => {
            let (nodes, misses) = ssn.index.summarize(cluster, task, &ssn.policy);
            failure.nodes = nodes;
            failure.misses = Arc::new(misses);
        }
        Some(domain) => {
            let summary = &mut *failure;
            let misses = Arc::make_mut(&mut summary.misses);
            let inside: std::collections::HashSet<NodeId> = domain.iter().copied().collect();
            for (i, _) in cluster.nodes.iter() {
                let n = NodeId(i);
                summary.nodes += 1;
                if !inside.contains(&n) {
                    *misses.entry(NodeMiss::OutsideDomain).or_default() += 1;
                    continue;
                }
                match ssn.index.check(cluster, task, &ssn.policy, n) {
                    Ok(p) if p.mode == Mode::Allocate => {}
                    Ok(_) => {
                        *misses
                            .entry(NodeMiss::Insufficient(main_slot(task.gpu)))
                            .or_default() += 1
                    }
                    Err(miss) => *misses.entry(miss).or_default() += 1,
                }
            }
        }
    }
    failure
}

/// Free resources on the nodes the pod may use, after the attempt was rolled back.
fn fill_free(ssn: &mut Session<'_>, t: TaskId, failure: &mut FitFailure) {
    let constraints = ssn.cluster.task(t).constraints;
    // The resource the message names; the pod's main one when no node lacked room.
    let slot = failure
        .scarce_slot()
        .unwrap_or_else(|| main_slot(ssn.cluster.task(t).gpu));
    let (eligible, with_free, free) = ssn.index.free_on_eligible(ssn.cluster, constraints);
    failure.eligible_nodes += eligible;
    failure.nodes_with_free += with_free[slot];
    failure.free_on_eligible.add(&free);
}
