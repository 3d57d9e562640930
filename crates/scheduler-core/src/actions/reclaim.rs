//! reclaim: across queues, a gang whose queue is below its fair share takes resources back from queues
//! above theirs. KAI's rules decide who may take from whom: the reclaimer's queue must stay within its
//! fair share, victims come from the most over-served queues first, and the chosen victims are
//! validated against the fair-share strategies and saturation boundaries of the queue tree.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use super::allocate::AttemptShape;
use super::victims::{self, Candidates, Request, Unit};
use crate::config::ActionKind;
use crate::fairshare::ReclaimRejection;
use crate::framework::Session;
use crate::framework::backlog::ClassKey;
use crate::framework::decisions::EvictionCause;
use crate::framework::policy::fairness::VictimKeys;
use crate::framework::policy::ordering::{JobQueues, Turn};
use crate::framework::report::explain::Why;
use crate::model::ids::{WordMap, WordSet};
use crate::model::{QueueId, Resources, TaskId};

/// Runs reclaim.
pub fn reclaim(ssn: &mut Session<'_>) {
    // Ordered only when some queue may reclaim (the usual answer on a cluster at its fair shares is no).
    let mut waiting = super::preempt::waiting_for_room(ssn);
    let least = least_requests(ssn, &waiting);
    if !least
        .iter()
        .any(|(queue, bound)| ssn.fairness.can_reclaim(*queue, bound, true).is_ok())
    {
        // Debug builds (every test) check the bound against each gang's own request.
        #[cfg(debug_assertions)]
        for &g in &waiting {
            if let Some(queue) = ssn.gangs[g].queue
                && !ssn.outcomes.get(&g).is_some_and(|o| o.placed())
            {
                let request = pending_request(ssn, g);
                assert!(
                    ssn.fairness
                        .can_reclaim(queue, &request, ssn.gangs[g].preemptible)
                        .is_err(),
                    "gang {g} could reclaim though its queue's bound could not"
                );
            }
        }
        return;
    }
    super::preempt::in_job_order(ssn, &mut waiting);
    // The backlog's kept gangs stand in the order where they would if they were in the session (a
    // queue's place among the others reads its front gang's request). A kept gang's turn ends as the
    // last turn of its class did while nothing was evicted since (a like gang asks the same of the same
    // candidates, and a failed turn leaves the session as it found it), so it and the like ones after
    // it are passed over; otherwise it is taken in, answered as allocate answered its class, and has
    // its turn. Only classes told that their pods found no place wait for room (`waiting_for_room`).
    let classes: Vec<(ClassKey, Why)> = ssn
        .backlog_classes()
        .into_iter()
        .filter(|(key, why)| matches!(why, Why::NoFit(_)) && !key.never_preempts)
        .collect();
    let keys: Vec<ClassKey> = classes.iter().map(|(key, _)| key.clone()).collect();
    let mut order = JobQueues::with_kept(ssn, waiting.into_iter(), &keys);
    // Per class, the session's checkpoint at which a turn of its gangs is known to end as the last did
    // (a turn at the action's start ends as allocate's did: the class's gang in the session comes first
    // in its queue, and has had its turn, the same, before any kept one).
    let mut quiet: Vec<usize> = vec![ssn.checkpoint(); classes.len()];
    let mut victims = VictimLists::default();
    // Per queue, whether its bound is refused.
    let mut refused: UntilEviction<BTreeMap<QueueId, bool>> = UntilEviction::new(ssn);
    // Plain gangs whose victim search failed, by queue and shape: a like gang of the same queue asks
    // the same of the same candidates, and a failed search leaves the session as it found it, so it
    // fails alike until something is evicted (debug builds search and compare).
    let mut failed: UntilEviction<WordSet<(QueueId, AttemptShape)>> = UntilEviction::new(ssn);
    let lines = QueueLines::default();
    while let Some(turn) = order.pop_turn(ssn) {
        let (g, class) = match turn {
            Turn::Gang(g) => (g, None),
            Turn::Kept(k) => {
                let at = ssn.checkpoint();
                if quiet[k] == at {
                    order.pass_quiet(ssn, k, &|c| quiet.get(c) == Some(&at));
                    continue;
                }
                let Some(g) = order.take_kept(ssn, k) else {
                    continue;
                };
                let (key, why) = &classes[k];
                super::allocate::answer_as_class(ssn, g, key.clone(), why);
                (g, Some(k))
            }
        };
        'turn: {
            ssn.attempt(g);
            if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) {
                break 'turn;
            }
            let Some(queue) = ssn.gangs[g].queue else {
                break 'turn;
            };
            let preemptible = ssn.gangs[g].preemptible;
            // A queue whose bound is refused refuses each of its gangs (their requests ask at least the
            // bound): they are passed over without working out their requests.
            let bound_refused = *refused.current(ssn).entry(queue).or_insert_with(|| {
                least
                    .get(&queue)
                    .is_none_or(|bound| ssn.fairness.can_reclaim(queue, bound, true).is_err())
            });
            if bound_refused {
                debug_assert!(
                    ssn.fairness
                        .can_reclaim(queue, &pending_request(ssn, g), preemptible)
                        .is_err(),
                    "gang {g} could reclaim though its queue's bound could not"
                );
                // The gangs of its leaf the next pops would give, one after another, are refused
                // alike (nothing changed): their turns are taken in one step.
                order.pass_like_last(ssn, &|next| {
                    debug_assert!(
                        ssn.fairness
                            .can_reclaim(queue, &pending_request(ssn, next), ssn.gangs[next].preemptible)
                            .is_err(),
                        "gang {next} could reclaim though its queue's bound could not"
                    );
                    ssn.gangs[next].queue == Some(queue)
                });
                break 'turn;
            }
            let request = pending_request(ssn, g);
            if ssn.fairness.can_reclaim(queue, &request, preemptible).is_err() {
                break 'turn;
            }
            let like = AttemptShape::of(ssn, g).map(|shape| (queue, shape));
            if like
                .as_ref()
                .is_some_and(|like| failed.current(ssn).contains(like))
            {
                #[cfg(debug_assertions)]
                {
                    let at = ssn.checkpoint();
                    let candidates = victims.candidates(ssn, queue, &request, preemptible);
                    let found = search(ssn, g, queue, &request, preemptible, &candidates, &|_, _| {
                        String::new()
                    });
                    assert!(
                        !found,
                        "gang {g} found victims where a like gang of its queue found none"
                    );
                    assert_eq!(ssn.checkpoint(), at, "a failed victim search changed the session");
                }
                break 'turn;
            }
            let candidates = victims.candidates(ssn, queue, &request, preemptible);
            if candidates.slots() == 0 {
                break 'turn;
            }
            let reclaimer = ssn.cluster.group(ssn.gangs[g].root).key.to_string();
            let reclaimed_by = reclaim_message(ssn, queue, &reclaimer, &lines);
            let message = |ssn: &Session<'_>, u: &Unit| victim_message(ssn, u, &reclaimed_by, &lines);
            if search(ssn, g, queue, &request, preemptible, &candidates, &message) {
                ssn.mark_placed(g, ActionKind::Reclaim);
                ssn.explain(g, Why::Pipelined);
            } else if let Some(like) = like {
                failed.current(ssn).insert(like);
            }
        }
        // A failed turn evicted nothing: the class's next gang would fail alike.
        if let Some(k) = class
            && !ssn.outcomes.get(&g).is_some_and(|o| o.placed())
        {
            quiet[k] = ssn.checkpoint();
        }
    }
}

/// Searches `candidates` for victims whose eviction lets gang `g` of `queue` place `request`, within
/// the fair-share rules as the session stands; evicts them when found. Whether it found them.
fn search(
    ssn: &mut Session<'_>,
    g: usize,
    queue: QueueId,
    request: &Resources,
    preemptible: bool,
    candidates: &Candidates,
    message: victims::EvictionMessage<'_>,
) -> bool {
    let baseline = ssn.fairness.snapshot();
    let validate = |ssn: &Session<'_>, units: &[Unit]| -> Result<(), ReclaimRejection> {
        ssn.fairness
            .validate_reclaim(&baseline, queue, request, preemptible, &chunks(ssn, units))
    };
    let request = Request::among(g, candidates, EvictionCause::Reclaim, message).validated_by(&validate);
    victims::solve(ssn, &request).is_ok()
}

/// What reclaim's pass works out that only an eviction changes: kept while the session's checkpoint is
/// the one it was made at (the journal only grows, or rolls back with everything after undone), made
/// afresh after.
struct UntilEviction<T> {
    at: usize,
    value: T,
}

impl<T: Default> UntilEviction<T> {
    fn new(ssn: &Session<'_>) -> Self {
        Self {
            at: ssn.checkpoint(),
            value: T::default(),
        }
    }

    /// The value, emptied first if the session moved since it was made.
    fn current(&mut self, ssn: &Session<'_>) -> &mut T {
        if self.at != ssn.checkpoint() {
            self.at = ssn.checkpoint();
            self.value = T::default();
        }
        &mut self.value
    }
}

/// Per queue of the waiting gangs, a lower bound of every request its gangs could make in this pass:
/// the smallest share, slot by slot, of a pod any of them could place (nothing, for a gang with no such
/// pod). `can_reclaim` only fails more as a request grows (allocated + request against the fair share,
/// and for non-preemptible work against the quota too, on every slot), and reads only the reclaimer's
/// queue. So when no queue passes with its bound, every gang of the pass would be refused and the pass
/// is skipped (on a cluster where every queue holds its fair share, a backlog costs one look per pod
/// instead of an ordered pass that works out each gang's request); in the pass, a gang whose queue's
/// bound is refused at that point is passed over.
fn least_requests(ssn: &Session<'_>, waiting: &[usize]) -> BTreeMap<QueueId, Resources> {
    let cluster = &*ssn.cluster;
    let mut least: BTreeMap<QueueId, Resources> = BTreeMap::new();
    for &g in waiting {
        let gang = &ssn.gangs[g];
        let Some(queue) = gang.queue else { continue };
        if ssn.outcomes.get(&g).is_some_and(|o| o.placed()) {
            continue;
        }
        let mut bound: Option<Resources> = None;
        for t in gang.tasks() {
            let task = cluster.task(t);
            if task.ours && task.status == crate::model::TaskStatus::Pending && task.problem.is_none() {
                let share = ssn.share_request(t);
                bound = Some(bound.map_or(share, |b| b.least(&share)));
            }
        }
        let bound = bound.unwrap_or(Resources::ZERO);
        least
            .entry(queue)
            .and_modify(|b| *b = b.least(&bound))
            .or_insert(bound);
    }
    least
}

/// What the gang asks for in this attempt (its shortfall), in queue-share terms.
fn pending_request(ssn: &Session<'_>, g: usize) -> Resources {
    let cluster = &*ssn.cluster;
    let tasks = ssn.gangs[g].tasks_to_allocate(cluster, &|a, b| super::allocate::task_order(cluster, a, b));
    let mut r = Resources::ZERO;
    for t in tasks {
        r.add(&ssn.share_request(t));
    }
    r
}

/// Each queue's possible victims for this pass, in victim order, kept while the session is as it was
/// when they were listed: most reclaimers find no acceptable victims and leave the session as they
/// found it, so the gangs are listed once per change, not once per reclaimer (a backlog of reclaimers
/// over every gang's pods was quadratic).
#[derive(Default)]
struct VictimLists {
    /// The session's checkpoint when listed (its journal only grows, or rolls back to an earlier
    /// length with everything after undone).
    at: Option<usize>,
    /// Per queue, its preemptible gangs with a placed pod, lowest priority and newest first.
    gangs: BTreeMap<QueueId, Vec<usize>>,
    /// Per queue, those gangs' units, made when some reclaimer may take from the queue (the minimum
    /// runtime that protects one wakes the session then, as it would have at that reclaimer).
    units: BTreeMap<QueueId, VecDeque<Unit>>,
    /// The interleaved candidates, by the queues a reclaimer may take from (the order reads the
    /// queues' accounting, which changes only with the session), indexed once and searched by every
    /// reclaimer that may take from those queues until the session moves (a failed search leaves it
    /// as it found it, and the list's kept node bounds follow the nodes it touched).
    interleaved: std::collections::HashMap<Vec<QueueId>, Rc<Candidates>>,
}

impl VictimLists {
    /// Victim units from other queues than `queue`, the most over-served queue first; inside a queue
    /// the lowest priority and newest gang first.
    fn candidates(
        &mut self,
        ssn: &Session<'_>,
        queue: QueueId,
        request: &Resources,
        preemptible: bool,
    ) -> Rc<Candidates> {
        if self.at != Some(ssn.checkpoint()) {
            self.list(ssn);
        }
        let from: Vec<QueueId> = self
            .gangs
            .keys()
            .copied()
            .filter(|&vq| vq != queue && ssn.fairness.may_reclaim_from(queue, request, preemptible, vq))
            .collect();
        let out = match self.interleaved.get(&from) {
            Some(out) => Rc::clone(out),
            None => {
                let mut lists: Vec<(QueueId, VecDeque<Unit>, Resources)> = Vec::new();
                for &vq in &from {
                    let gangs = self.gangs.get(&vq).map_or(&[][..], Vec::as_slice);
                    let units = self.units.entry(vq).or_insert_with(|| {
                        let mut units = VecDeque::new();
                        for &v in gangs {
                            let protected = victims::protected_by_min_runtime(ssn, v, true);
                            units.extend(victims::units_of(ssn, v, !protected));
                        }
                        units
                    });
                    lists.push((vq, units.clone(), Resources::ZERO));
                }
                let out = Rc::new(Candidates::from_units(interleave(ssn, lists)));
                self.interleaved.insert(from, Rc::clone(&out));
                out
            }
        };
        #[cfg(debug_assertions)]
        {
            let fresh = listed_afresh(ssn, queue, request, preemptible)
                .into_iter()
                .map(|(q, units)| (q, units, Resources::ZERO))
                .collect();
            assert_eq!(
                out.units(),
                interleave(ssn, fresh),
                "kept victim candidates differ from candidates made afresh"
            );
        }
        out
    }

    /// Lists every queue's possible victims again.
    fn list(&mut self, ssn: &Session<'_>) {
        self.gangs.clear();
        self.units.clear();
        self.interleaved.clear();
        for v in 0..ssn.gangs.len() {
            let h = &ssn.gangs[v];
            let Some(vq) = h.queue else { continue };
            if h.preemptible && super::preempt::has_placed_pod(ssn, v) {
                self.gangs.entry(vq).or_default().push(v);
            }
        }
        for gangs in self.gangs.values_mut() {
            gangs.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
        }
        self.at = Some(ssn.checkpoint());
    }
}

/// The victim lists [`VictimLists`] keeps, made from the session as it is (debug builds compare).
#[cfg(debug_assertions)]
fn listed_afresh(
    ssn: &Session<'_>,
    queue: QueueId,
    request: &Resources,
    preemptible: bool,
) -> Vec<(QueueId, VecDeque<Unit>)> {
    let mut by_queue: BTreeMap<QueueId, Vec<usize>> = BTreeMap::new();
    for v in 0..ssn.gangs.len() {
        let h = &ssn.gangs[v];
        let Some(vq) = h.queue else { continue };
        if vq == queue || !h.preemptible || !super::preempt::has_placed_pod(ssn, v) {
            continue;
        }
        if ssn.fairness.may_reclaim_from(queue, request, preemptible, vq) {
            by_queue.entry(vq).or_default().push(v);
        }
    }
    by_queue
        .into_iter()
        .map(|(q, mut gangs)| {
            gangs.sort_by_key(|v| (ssn.gangs[*v].priority, -ssn.gangs[*v].created));
            let units = gangs
                .into_iter()
                .flat_map(|v| {
                    let protected = victims::min_runtime_end(ssn, v, true).is_some();
                    victims::units_of(ssn, v, !protected)
                })
                .collect();
            (q, units)
        })
        .collect()
}

/// One victim queue during [`interleave`]: its units left, what it gave so far, and what it would
/// have given with its next unit, with that amount's order keys.
struct Giving {
    queue: QueueId,
    units: VecDeque<Unit>,
    given: Resources,
    with_next: Option<(Resources, VictimKeys)>,
}

/// Interleaves the queues' units as KAI's victim order does: the most over-served queue gives next,
/// with what it already gave (and its next unit) taken off its allocation before comparing. A
/// queue's side of the comparison changes only when it gives, so its keys are made once per unit it
/// gives, not once per comparison.
fn interleave(ssn: &Session<'_>, lists: Vec<(QueueId, VecDeque<Unit>, Resources)>) -> Vec<Unit> {
    let mut lists: Vec<Giving> = lists
        .into_iter()
        .map(|(queue, units, given)| Giving {
            queue,
            units,
            given,
            with_next: None,
        })
        .collect();
    let mut out = Vec::new();
    loop {
        let mut best: Option<usize> = None;
        for i in 0..lists.len() {
            let l = &mut lists[i];
            let Some(next) = l.units.front() else { continue };
            if l.with_next.is_none() {
                l.with_next = Some((l.given.plus(&unit_share(ssn, next)), VictimKeys::default()));
            }
            best = match best {
                None => Some(i),
                Some(j) => {
                    // `j < i`: the best so far is on the left of the split.
                    let (left, right) = lists.split_at_mut(i);
                    let (b, a) = (&mut left[j], &mut right[0]);
                    let (Some((a_next, a_keys)), Some((b_next, b_keys))) =
                        (&mut a.with_next, &mut b.with_next)
                    else {
                        continue;
                    };
                    let ordering = ssn
                        .fairness
                        .compare_victims_keyed((a.queue, a_next, a_keys), (b.queue, b_next, b_keys));
                    Some(if ordering == std::cmp::Ordering::Less {
                        i
                    } else {
                        j
                    })
                }
            };
        }
        let Some(i) = best else { break };
        let l = &mut lists[i];
        // The best has a next unit, and its amount was made when it was compared.
        if let Some((with_next, _)) = l.with_next.take()
            && let Some(u) = l.units.pop_front()
        {
            l.given = with_next;
            out.push(u);
        }
    }
    out
}

fn unit_share(ssn: &Session<'_>, u: &Unit) -> Resources {
    let mut r = Resources::ZERO;
    for t in &u.tasks {
        r.add(&ssn.share_request(*t));
    }
    r
}

/// KAI's chunking of the chosen victims: each unit's resources once (a surplus pod, or a gang's core),
/// per victim queue.
fn chunks(ssn: &Session<'_>, units: &[Unit]) -> Vec<(QueueId, Resources)> {
    let mut counted: Vec<TaskId> = Vec::new();
    let mut out = Vec::new();
    for u in units {
        let Some(q) = ssn.gangs[u.gang].queue else {
            continue;
        };
        let mut r = Resources::ZERO;
        for t in &u.tasks {
            if !counted.contains(t) {
                counted.push(*t);
                r.add(&ssn.share_request(*t));
            }
        }
        if !r.is_zero() {
            out.push((q, r));
        }
    }
    out
}

fn queue_line(ssn: &Session<'_>, q: QueueId) -> String {
    let names = &ssn.cluster.names;
    let queue = ssn.cluster.queue(q);
    match ssn.fairness.report(q) {
        Some(r) => format!(
            "{} uses {} with a quota of {}, fair share of {} and queue priority of {}",
            queue.name,
            names.format(&r.allocated),
            names.format(&r.deserved.to_resources().max(&Resources::ZERO)),
            names.format(&r.fair_share.to_resources()),
            queue.priority
        ),
        None => format!("{} (not in the fair-share tree)", queue.name),
    }
}

/// Each queue's [`queue_line`] in one reclaim pass, by what it allocates: the line reads nothing else
/// that changes in a session (fair shares are divided as it opens), and a victim search's trial
/// evictions and trims come back to the same allocations again and again, each eviction with its
/// message (formatting the amounts was most of a search's cost in messages).
#[derive(Default)]
struct QueueLines(RefCell<WordMap<(QueueId, Resources), Rc<str>>>);

impl QueueLines {
    fn line(&self, ssn: &Session<'_>, q: QueueId) -> Rc<str> {
        let key = (q, ssn.fairness.allocated(q));
        if let Some(line) = self.0.borrow().get(&key) {
            debug_assert_eq!(
                **line,
                queue_line(ssn, q),
                "a queue's line changed with its allocation unchanged"
            );
            return Rc::clone(line);
        }
        let line: Rc<str> = queue_line(ssn, q).into();
        self.0.borrow_mut().insert(key, Rc::clone(&line));
        line
    }
}

fn reclaim_message(ssn: &Session<'_>, queue: QueueId, reclaimer: &str, lines: &QueueLines) -> String {
    format!(
        "reclaimed by workload {reclaimer} of queue {}",
        lines.line(ssn, queue)
    )
}

fn victim_message(ssn: &Session<'_>, u: &Unit, base: &str, lines: &QueueLines) -> String {
    match ssn.gangs[u.gang].queue {
        Some(q) => format!("{base}; victim queue {}", lines.line(ssn, q)),
        None => base.to_owned(),
    }
}
