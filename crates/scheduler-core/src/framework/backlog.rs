//! The backlog: waiting gangs kept out of the session while the first gang of their class answers for
//! them.
//!
//! A busy cluster's backlog is mostly gangs that wait for the same reason cycle after cycle, and a
//! session that held every one of them would visit each in every pass (opening, allocate's order, the
//! timeouts, the status report, the carry), though allocate passes over all but the first of a class
//! once that one fails ([`AttemptShape`]; `actions::allocate`). So plain gangs answered so are kept
//! here between sessions, per class (queue and attempt shape), in job order:
//!
//! - each session takes in the first gang of every class (its *head*), which allocate tries as any other;
//!   when a gang of a class is placed, the next one is taken in at once and competes in the same pass
//!   ([`crate::framework::Session::take_from_backlog`]); when one fails, the rest are answered alike
//!   without being looked at: they fail as they would have, each naming its own pod;
//! - what they ask counts against their queues in fair share as if they were in the session
//!   ([`Backlog::pending_by_queue`]);
//! - the victim actions (consolidation, reclaim, preempt) take the next one of a class in after an
//!   eviction, which may change its answer (`actions::kept`); reclaim, whose order across queues reads
//!   each queue's front gang, keeps each class in its queue at the place of its next gang
//!   (`ordering::JobQueues::with_kept`);
//! - a gang leaves the backlog when it or its pods change (a queue or priority class that changes
//!   its gang's resolution changes its PodGroup), when its status changed without a stamp, when its
//!   status is due a refresh of its figures (the class's answer moved since what its status says), when
//!   its class's answer says something else beyond figures or its class is not answered, and all leave
//!   when the hierarchy stops being flat or a rule about other pods appears: it then rejoins the session
//!   and is reported as before, and may be kept again at the session's end.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasherDefault;

use crate::config::PlacementStrategy;
use crate::framework::Session;
use crate::framework::gang::{Gang, PlainPod};
use crate::framework::report::explain::{Why, gist_fingerprint};
use crate::model::ids::WordHasher;
use crate::model::{GroupId, GroupKey, Millis, QueueId, Resources};

/// What the placement of a plain gang's pods reads: whether it is preemptible, its pods and minimum
/// (so the pods it places now) and the one shape they share (its queue's rules are checked before, per
/// gang). A plain gang has one PodGroup without sub-groups, topology or `minResources`, and only
/// pending pods of its own that ask alike and whose place depends on nothing but the nodes (no claims,
/// no rules about other pods and none of theirs about it, no reservation or chosen device).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AttemptShape {
    pod: PlainPod,
    /// Whether the gang is preemptible (its queue's gate reads it).
    pub preemptible: bool,
    /// Its pods.
    pub pods: usize,
    min: u32,
    max: Option<u32>,
}

impl AttemptShape {
    /// The shape of gang `g`'s next attempt, if it is plain.
    #[must_use]
    pub fn of(ssn: &Session<'_>, g: usize) -> Option<Self> {
        let gang = &ssn.gangs[g];
        let cluster = &*ssn.cluster;
        if cluster.group(gang.root).min_resources.is_some()
            // A seeded draw per pod picks among the nodes: a gang's first pods may land elsewhere.
            || ssn.policy.gpu == PlacementStrategy::Random
            || ssn.policy.cpu == PlacementStrategy::Random
            || ssn.gang_satisfied(g)
        {
            return None;
        }
        // A gang none of whose pods changed in this session is as it was built.
        let pod = if ssn.gang_touched(g) {
            gang.plain_pod(cluster)
        } else {
            gang.plain_pod_as_built(cluster)
        }?;
        // A plain pod's rules are its own (a pod that changes builds its gang again).
        debug_assert_eq!(
            gang.pod_rules_at_build,
            gang.tasks()
                .any(|t| cluster.task(t).rules != crate::model::pod_rules::PodRulesId(0))
        );
        if ssn.index.rules.relevant_to_any(gang.pod_rules_at_build) {
            return None;
        }
        let leaf = &gang.nodes[0];
        Some(Self {
            pod,
            preemptible: gang.preemptible,
            pods: leaf.tasks.len(),
            min: leaf.min,
            max: leaf.max,
        })
    }
}

/// A class of the backlog: gangs of one queue, priority and attempt shape, all of whose pods may
/// evict others or none (the victim actions ask each the same of the same candidates).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClassKey {
    /// The queue.
    pub queue: QueueId,
    /// The gangs' priority.
    pub priority: i32,
    /// Whether a waiting pod of them never preempts (`preemptionPolicy: Never`).
    pub never_preempts: bool,
    /// The shape.
    pub shape: AttemptShape,
}

impl ClassKey {
    /// Gang `g`'s class, given its attempt shape.
    #[must_use]
    pub fn of(ssn: &Session<'_>, g: usize, shape: AttemptShape) -> Option<Self> {
        let gang = &ssn.gangs[g];
        Some(Self {
            queue: gang.queue?,
            priority: gang.priority,
            never_preempts: gang.tasks().any(|t| {
                let task = ssn.cluster.task(t);
                task.never_preempts && task.status.is_pending()
            }),
            shape,
        })
    }
}

/// Where a gang stands in job order: KAI's order for a waiting gang (higher priority, then below its
/// minimum before elastic growth, then older, then by `namespace/name`), as `ordering::job_key` orders
/// it. A kept gang's place in its class, and the place reclaim's order compares kept gangs with the
/// session's by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlace {
    /// Its priority.
    pub priority: i32,
    /// The job order's second key (`ordering::job_key`): 0 below its minimum (every kept gang), more
    /// for elastic growth.
    pub elastic: u8,
    /// When it was created.
    pub created: Millis,
    /// Its root PodGroup's key.
    pub key: GroupKey,
}

impl Ord for JobPlace {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .priority
            .cmp(&self.priority)
            .then(self.elastic.cmp(&other.elastic))
            .then(self.created.cmp(&other.created))
            .then_with(|| {
                crate::framework::policy::ordering::SlashJoined::new(&self.key)
                    .cmp(&crate::framework::policy::ordering::SlashJoined::new(&other.key))
            })
    }
}

impl PartialOrd for JobPlace {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A gang to keep ([`Backlog::keep`]).
pub struct KeptGang<'a> {
    /// Its PodGroup.
    pub group: GroupId,
    /// The gang.
    pub gang: &'a Gang,
    /// Its PodGroup's key.
    pub key: &'a GroupKey,
    /// What its waiting pods ask of its queue.
    pub pending: Resources,
    /// What its next attempt asks (`ordering`'s request, which orders queues).
    pub request: Resources,
    /// What it was told (`None`: a newer status is held back for it).
    pub told: Option<Why>,
    /// When a status differing only in figures may replace the one written (`None`: at once).
    pub refresh_at: Option<Millis>,
}

/// A kept gang.
#[derive(Clone, Debug)]
struct Member {
    order: JobPlace,
    /// When a status differing only in figures from the one written may replace it (none: at once).
    refresh_at: Option<Millis>,
    /// The version of its class's answer its status says (`u64::MAX`: none of them; its status says
    /// something older, or a newer status was held back for it).
    told_version: u64,
}

/// One class.
#[derive(Clone, Debug)]
struct Class {
    key: ClassKey,
    /// Its gangs in job order.
    members: BTreeMap<JobPlace, GroupId>,
    /// What one of its gangs' waiting pods ask of their queue (the same for all: they ask alike).
    pending: Resources,
    /// What one of its gangs' next attempt asks (`ordering`'s request; the same for all).
    request: Resources,
    /// The answer its gangs were last given (the head's, or the last taken in).
    answer: Why,
    /// Gangs whose figures' refresh time has not come, by that time.
    unripe: BTreeSet<(Millis, GroupId)>,
    /// Gangs whose figures' refresh time has come (some may have left since: each is checked against
    /// `members` when read): a new answer sends them back to the session.
    ripe: Vec<GroupId>,
    /// Bumped when the answer changes, the figures its message prints included.
    answer_version: u64,
    /// The answer version the ripe gangs were last checked against.
    ripe_checked: u64,
    /// Gangs whose status does not say the current answer (their figures are due a refresh at
    /// their refresh time).
    stale: usize,
    /// Answered in this session, and whether the answer's gist moved.
    answered: bool,
    moved: bool,
}

/// The kept gangs (see the module's documentation), carried from one session to the next.
#[derive(Clone, Debug, Default)]
pub struct Backlog {
    classes: Vec<Class>,
    by_key: HashMap<ClassKey, usize, BuildHasherDefault<WordHasher>>,
    /// Each kept gang's class and entry.
    members: HashMap<GroupId, (usize, Member), BuildHasherDefault<WordHasher>>,
    /// Whether each PodGroup slot is kept (the keys of `members`, by slot: every session asks it of
    /// every root, where the map's lookups missed the cache).
    held: Vec<bool>,
    /// The gangs let go since the last [`Self::take_released`]: a session's carried roots leave the
    /// kept gangs out, so the next session places these among them (`gang::with_released`).
    released: Vec<GroupId>,
}

impl Backlog {
    /// How many gangs are kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether `group` is kept here.
    #[must_use]
    pub fn holds(&self, group: GroupId) -> bool {
        let held = self.held.get(group.index()).copied().unwrap_or(false);
        debug_assert_eq!(held, self.members.contains_key(&group));
        held
    }

    /// Lets every gang go (they rejoin the session).
    pub fn dissolve(&mut self) {
        let mut released = std::mem::take(&mut self.released);
        released.extend(self.members.keys().copied());
        *self = Self {
            released,
            ..Self::default()
        };
    }

    /// Takes the list of gangs let go since the last call (in no order; a gang let go twice, or let go
    /// and kept again, may be listed).
    pub fn take_released(&mut self) -> Vec<GroupId> {
        std::mem::take(&mut self.released)
    }

    /// Whether some gang was let go since the last [`Self::take_released`].
    #[must_use]
    pub fn has_released(&self) -> bool {
        !self.released.is_empty()
    }

    /// Lets `group` go, if kept.
    pub fn release(&mut self, group: GroupId) {
        let Some((class, member)) = self.members.remove(&group) else {
            return;
        };
        if let Some(held) = self.held.get_mut(group.index()) {
            *held = false;
        }
        self.released.push(group);
        let c = &mut self.classes[class];
        c.members.remove(&member.order);
        if member.told_version != c.answer_version {
            c.stale = c.stale.saturating_sub(1);
        }
        if let Some(at) = member.refresh_at {
            c.unripe.remove(&(at, group));
        }
    }

    /// Lets a whole class go.
    fn release_class(&mut self, class: usize) {
        let groups: Vec<GroupId> = self.classes[class].members.values().copied().collect();
        for g in groups {
            self.release(g);
        }
    }

    /// Takes out the first gang of `key`'s class, if any.
    pub fn take_first(&mut self, key: &ClassKey) -> Option<GroupId> {
        let class = *self.by_key.get(key)?;
        let group = *self.classes[class].members.values().next()?;
        self.release(group);
        Some(group)
    }

    /// Takes out the first gang of `key`'s class that comes after `place` in job order, if any.
    pub fn take_first_after(&mut self, key: &ClassKey, place: &JobPlace) -> Option<GroupId> {
        let group = self.first_after(key, Some(place))?.1;
        self.release(group);
        Some(group)
    }

    /// The first gang of `key`'s class after `place` in job order (`None`: the first of all), with its
    /// place.
    #[must_use]
    pub fn first_after(&self, key: &ClassKey, place: Option<&JobPlace>) -> Option<(JobPlace, GroupId)> {
        let class = &self.classes[*self.by_key.get(key)?];
        let mut after = match place {
            Some(p) => class
                .members
                .range((std::ops::Bound::Excluded(p), std::ops::Bound::Unbounded)),
            None => class.members.range(..),
        };
        after.next().map(|(p, g)| (p.clone(), *g))
    }

    /// Takes out the gang of `key`'s class at `place`, if it is kept.
    pub fn take_at(&mut self, key: &ClassKey, place: &JobPlace) -> Option<GroupId> {
        let class = *self.by_key.get(key)?;
        let group = *self.classes[class].members.get(place)?;
        self.release(group);
        Some(group)
    }

    /// What the next attempt of each of `key`'s class's gangs asks (`ordering`'s request: the same
    /// for all, they ask alike).
    #[must_use]
    pub fn class_request(&self, key: &ClassKey) -> Option<Resources> {
        self.by_key.get(key).map(|c| self.classes[*c].request)
    }

    /// The classes that keep gangs.
    #[must_use]
    pub fn class_keys(&self) -> Vec<ClassKey> {
        self.classes
            .iter()
            .filter(|c| !c.members.is_empty())
            .map(|c| c.key.clone())
            .collect()
    }

    /// Takes out the first gang of every class (the heads a session tries).
    pub fn take_heads(&mut self) -> Vec<(ClassKey, GroupId)> {
        // By class index: a class's key is cloned only when it has a head (an emptied class stays listed).
        let mut heads = Vec::new();
        for class in 0..self.classes.len() {
            let Some(&group) = self.classes[class].members.values().next() else {
                continue;
            };
            self.release(group);
            heads.push((self.classes[class].key.clone(), group));
        }
        heads
    }

    /// Lets go every gang whose figures' refresh has come and whose class's answer moved since it was
    /// told; returns them.
    pub fn release_due(&mut self, now: Millis) -> Vec<GroupId> {
        let mut due = Vec::new();
        for (class, c) in self.classes.iter_mut().enumerate() {
            // Gangs whose time came since the last look; then, if the answer moved since the ripe ones
            // were checked, those too (each is looked at once per move of its class's answer).
            let mut look: Vec<GroupId> = Vec::new();
            while let Some(&(at, g)) = c.unripe.first() {
                if at > now {
                    break;
                }
                c.unripe.pop_first();
                look.push(g);
            }
            if c.ripe_checked != c.answer_version {
                c.ripe_checked = c.answer_version;
                look.append(&mut c.ripe);
                // A gang that left and came back is listed twice.
                look.sort_unstable();
                look.dedup();
            }
            for g in look {
                // Left the class since (the ripe list is not kept exact).
                let Some((of, member)) = self.members.get(&g) else {
                    continue;
                };
                if *of != class {
                    continue;
                }
                if member.told_version != c.answer_version {
                    due.push(g);
                } else {
                    c.ripe.push(g);
                }
            }
        }
        for g in &due {
            self.release(*g);
        }
        due
    }

    /// What the kept gangs ask of each queue: one amount per class (each gang's times their number,
    /// saturating: the amounts never have a negative part, so this is their saturating sum).
    #[must_use]
    pub fn pending_by_queue(&self) -> Vec<(QueueId, Resources)> {
        self.classes
            .iter()
            .filter(|c| !c.members.is_empty())
            .map(|c| {
                let n = i64::try_from(c.members.len()).unwrap_or(i64::MAX);
                (c.key.queue, c.pending.times(n))
            })
            .collect()
    }

    /// How many kept gangs wait, by their class's first reason.
    #[must_use]
    pub fn waiting_by_reason(&self) -> Vec<(&'static str, u64)> {
        self.classes
            .iter()
            .filter(|c| !c.members.is_empty())
            .map(|c| (c.answer.reason(), c.members.len() as u64))
            .collect()
    }

    /// The earliest time a kept gang's figures are due a refresh (its status does not say its
    /// class's answer).
    #[must_use]
    pub fn next_refresh(&self) -> Option<Millis> {
        self.classes
            .iter()
            .filter(|c| c.stale > 0)
            .filter_map(|c| {
                c.unripe
                    .iter()
                    .find(|(_, g)| {
                        self.members
                            .get(g)
                            .is_some_and(|(_, m)| m.told_version != c.answer_version)
                    })
                    .map(|(at, _)| *at)
            })
            .min()
    }

    /// Gives `key`'s class its answer for this session (`None`: the one it had); a class whose answer
    /// says something else than
    /// the one its gangs were told, beyond the figures (its gist), lets them all go: their statuses
    /// and events must say so.
    pub fn answer(&mut self, key: &ClassKey, answer: Option<Why>) {
        let Some(&class) = self.by_key.get(key) else {
            return;
        };
        let c = &mut self.classes[class];
        c.answered = true;
        let Some(answer) = answer else {
            return;
        };
        // Most cycles answer a class as the last did: compared without hashing either (`same_gist`).
        c.moved |= !same_gist(&c.answer, &answer);
        if !same_answer(&c.answer, &answer) {
            c.answer_version += 1;
            // No status says this one yet.
            c.stale = c.members.len();
        }
        c.answer = answer;
        c.answered = true;
    }

    /// Lets go every class not answered in this session (what its gangs would be told is not known)
    /// and every class whose answer moved ([`Self::answer`]).
    pub fn release_unanswered_and_moved(&mut self) {
        for class in 0..self.classes.len() {
            let c = &mut self.classes[class];
            let go = !c.answered || c.moved;
            c.answered = false;
            c.moved = false;
            if go && !c.members.is_empty() {
                self.release_class(class);
            }
        }
    }

    /// The answer `key`'s class's gangs were given.
    #[must_use]
    pub fn class_answer(&self, key: &ClassKey) -> Option<&Why> {
        self.by_key.get(key).map(|c| &self.classes[*c].answer)
    }

    /// Whether `key`'s class keeps any gang.
    #[must_use]
    pub fn has_class(&self, key: &ClassKey) -> bool {
        self.by_key
            .get(key)
            .is_some_and(|c| !self.classes[*c].members.is_empty())
    }

    /// Keeps a gang in `key`'s class, whose answer is `answer`.
    pub fn keep(&mut self, key: ClassKey, answer: &Why, gang: KeptGang<'_>, now: Millis) {
        let KeptGang {
            group,
            gang,
            key: group_key,
            pending,
            request,
            told,
            refresh_at,
        } = gang;
        self.release(group);
        let class = match self.by_key.get(&key) {
            Some(&c) => c,
            None => {
                let c = self.classes.len();
                self.classes.push(Class {
                    key: key.clone(),
                    members: BTreeMap::new(),
                    pending,
                    request,
                    answer: answer.clone(),
                    unripe: BTreeSet::new(),
                    ripe: Vec::new(),
                    answer_version: 0,
                    ripe_checked: 0,
                    stale: 0,
                    answered: false,
                    moved: false,
                });
                self.by_key.insert(key, c);
                c
            }
        };
        let c = &mut self.classes[class];
        debug_assert_eq!(c.pending, pending, "gangs of one class ask alike");
        debug_assert!(
            c.members.is_empty() || c.request == request,
            "gangs of one class make like attempts"
        );
        if c.members.is_empty() {
            c.pending = pending;
            c.request = request;
            c.answer = answer.clone();
            c.answer_version += 1;
            c.stale = 0;
        }
        let told_version = if told.as_ref().is_some_and(|t| same_answer(t, &c.answer)) {
            c.answer_version
        } else {
            c.stale += 1;
            u64::MAX
        };
        let order = JobPlace {
            priority: gang.priority,
            elastic: 0,
            created: gang.created,
            key: group_key.clone(),
        };
        c.members.insert(order.clone(), group);
        match refresh_at {
            Some(at) if at > now => {
                c.unripe.insert((at, group));
            }
            _ => c.ripe.push(group),
        }
        if self.held.len() <= group.index() {
            self.held.resize(group.index() + 1, false);
        }
        self.held[group.index()] = true;
        self.members.insert(
            group,
            (
                class,
                Member {
                    order,
                    refresh_at,
                    told_version,
                },
            ),
        );
    }

    /// Drops the classes left empty (after the session that kept them: a long-running scheduler sees
    /// many shapes come and go).
    pub fn seal(&mut self) {
        if self.classes.iter().any(|c| c.members.is_empty()) {
            // Each class's new index (an empty one's is never read: no gang is kept in it).
            let mut renumbered = Vec::with_capacity(self.classes.len());
            let mut kept = Vec::with_capacity(self.classes.len());
            for c in std::mem::take(&mut self.classes) {
                renumbered.push(kept.len());
                if !c.members.is_empty() {
                    kept.push(c);
                }
            }
            self.by_key.clear();
            for (i, c) in kept.iter().enumerate() {
                self.by_key.insert(c.key.clone(), i);
            }
            for (class, _) in self.members.values_mut() {
                *class = renumbered.get(*class).copied().unwrap_or(usize::MAX);
            }
            self.classes = kept;
        }
    }

    /// The kept gangs, by class (tests and debug checks).
    #[must_use]
    pub fn groups(&self) -> Vec<GroupId> {
        let mut all: Vec<GroupId> = self.members.keys().copied().collect();
        all.sort();
        all
    }
}

/// Whether two answers say the same beyond their figures (their gist): the same answer does, without
/// hashing either (a backlog's gangs share their reasons' summaries).
#[must_use]
pub fn same_gist(a: &Why, b: &Why) -> bool {
    let same = match (a, b) {
        (Why::NoFit(x), Why::NoFit(y)) => {
            x.failed_pod.is_empty() == y.failed_pod.is_empty() && same_answer(a, b)
        }
        _ => same_answer(a, b),
    };
    same || gist_fingerprint(std::slice::from_ref(a)) == gist_fingerprint(std::slice::from_ref(b))
}

/// Whether two answers say the same, the figures they print included (a kept gang's status says no
/// more: `FitSummary::says_same`).
fn same_answer(a: &Why, b: &Why) -> bool {
    match (a, b) {
        (Why::NoFit(x), Why::NoFit(y)) => {
            std::sync::Arc::ptr_eq(&x.summary, &y.summary) || x.summary.says_same(&y.summary)
        }
        _ => a == b,
    }
}
