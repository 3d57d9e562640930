//! The order in which gangs are tried: a tree of queues mirroring the queue hierarchy, each leaf holding
//! its gangs in job order. Popping walks from the roots to the best leaf, comparing siblings by fair share
//! with the best gang of each subtree, so allocations interleave across queues as accounting changes.

use smallvec::SmallVec;
use std::cmp::Ordering;
use std::collections::VecDeque;

use crate::fairshare::OrderKey;
use crate::framework::Session;
use crate::framework::backlog::{ClassKey, JobPlace};
use crate::model::{GroupKey, QueueId, Resources};

/// A leaf queue (dense index) and its front entry: the next gang (or kept class, `KEPT`) to try under
/// some queue.
type Pick = Option<(u32, usize)>;

/// Marks an entry of the order that stands for a class of the backlog's kept gangs (its index in
/// `JobQueues::kept`) rather than a gang of the session.
const KEPT: usize = 1 << (usize::BITS - 1);

/// (fairness version, fronts version) of a queue when its best was found.
type Seen = (u64, u64);

/// The best of a scan over siblings so far: the queue, its (leaf, gang) and its order key.
type Leader = Option<(u32, (u32, usize), Option<OrderKey>)>;

/// One step of a scan over siblings: the sibling, what its candidate and key were derived at, and the
/// best of the scan up to and including it.
#[derive(Clone, Debug)]
struct ScanStep {
    queue: u32,
    seen: Seen,
    leader: Leader,
}

/// No dense index (a queue the order does not hold).
const NONE: u32 = u32::MAX;

/// Gangs by queue, in order. The queue tree is copied into dense vectors when the order is made (a
/// pop visits every sibling on its path, so each visit is an index, not a map lookup).
#[derive(Clone, Debug, Default)]
pub struct JobQueues {
    /// Every model queue, in arena order.
    nodes: Vec<QueueNode>,
    /// The top-level queues without problems, as dense indexes, in arena order.
    roots: Vec<u32>,
    /// What each gang asks for next (used to compare queues), by gang index.
    requests: Vec<Resources>,
    /// Gangs queued.
    queued: usize,
    /// Reverse order (victim selection): worst gangs of the most over-served queues first.
    reverse: bool,
    /// The last scan over the roots, step by step (see `QueueNode::scan`).
    root_scan: Vec<ScanStep>,
    /// The leaf the last pops took from and the requests it won with: while no accounting changed and
    /// nothing was put back, only that leaf's front moves between pops, and it is still the best when
    /// its next entry asks what it won with (every comparison reads only accounting and requests), so
    /// runs of like gangs, and a leaf whose kept classes take turns, are popped without comparing
    /// queues.
    last: Option<LastPop>,
    /// Gangs taken off a leaf's front because their failure was known before their turn (see
    /// [`Self::pop_unless`]), in the order they were taken, for the caller to answer.
    passed_over: Vec<usize>,
    /// Whether some gang may be doomed (set by [`Self::doom_changed`]): until then no front is asked.
    dooming: bool,
    /// The backlog's classes in the order ([`Self::with_kept`]), each standing in its queue's leaf at
    /// the place of its first gang that has not had its turn.
    kept: Vec<KeptFront>,
    /// Tests compare against the uncached order.
    #[cfg(test)]
    uncached: bool,
}

/// A class of the backlog's kept gangs in the order.
#[derive(Clone, Debug)]
struct KeptFront {
    key: ClassKey,
    leaf: u32,
    /// What each of its gangs asks next.
    request: Resources,
    /// Its first gang that has not had its turn, by its place (none: all have).
    next: Option<JobPlace>,
}

/// What the order gives next ([`JobQueues::pop_turn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// A gang of the session.
    Gang(usize),
    /// The next kept gang of a class ([`JobQueues::with_kept`]): its turn is taken with
    /// [`JobQueues::take_kept`] or passed over with the like ones after it with [`JobQueues::pass_kept`].
    Kept(usize),
}

/// Says of a gang at a leaf's front whether its failure in this pass is already known (the order then
/// passes it over: it takes no turn).
pub type Doomed<'a> = dyn FnMut(usize) -> bool + 'a;

/// One queue of the order.
#[derive(Clone, Debug)]
struct QueueNode {
    queue: QueueId,
    /// The model queue's children, as dense indexes, in the model's order (none: a leaf).
    children: Vec<u32>,
    /// The parent's dense index.
    parent: u32,
    /// The gangs of this queue, in job order (only a leaf's are ever taken).
    gangs: VecDeque<usize>,
    /// The kept classes of this queue (indexes into `JobQueues::kept`).
    kept: Vec<usize>,
    /// Bumped when the front gang of a leaf under it changes (pop, push).
    fronts: u64,
    /// The best (leaf, gang) under it, with the (fairness version, fronts version) it was found at:
    /// siblings compare only their own accounting and candidates, so a subtree where neither changed
    /// still has the same best, and a pop re-compares only along the path that changed.
    best_under: Option<(Seen, Pick)>,
    /// The last scan over its children, step by step. A scan is a left fold (each step compares one
    /// sibling with the best so far), and a sibling whose fairness and fronts versions are the same
    /// has the same candidate and key; so a scan after a pop starts at the first sibling that changed,
    /// from the best recorded before it, and picks what a full scan picks (the comparison need not be
    /// transitive for that).
    scan: Vec<ScanStep>,
    /// Its order key with what it was computed from: a key reads only the queue's accounting and its
    /// best gang's request, so a new front gang asking the same (a backlog of like jobs) keeps it.
    key: Option<KeyAt>,
}

/// A queue's order key, with what it was computed from: the queue's fairness version and the request
/// of the gang it was computed with (that gang is kept too, to skip comparing requests while it stays).
#[derive(Clone, Debug)]
struct KeyAt {
    version: u64,
    gang: usize,
    request: Resources,
    key: Option<OrderKey>,
}

/// The leaf the last pops took from, the requests it was the best with (the first few), and the
/// session's allocation changes then.
#[derive(Clone, Debug)]
struct LastPop {
    leaf: u32,
    requests: SmallVec<[Resources; LAST_POP_REQUESTS]>,
    fairness: u64,
}

/// How many requests a leaf's wins remember (a queue's kept classes and its plain gangs' shapes).
const LAST_POP_REQUESTS: usize = 8;

/// KAI's job order inside a queue: higher priority, then gangs below their minimum before those at it
/// before elastic growth, then older, then by name.
#[must_use]
pub fn job_key<'a>(ssn: &'a Session<'_>, gang: usize) -> (i32, u8, i64, SlashJoined<'a>) {
    let g = &ssn.gangs[gang];
    let cluster = &*ssn.cluster;
    let elastic = if !ssn.gang_satisfied(gang) {
        0
    } else if g
        .tasks()
        .filter(|t| cluster.task(*t).status.is_active_allocated())
        .count()
        == g.required_pods(0) as usize
    {
        1
    } else {
        2
    };
    (
        -g.priority,
        elastic,
        g.created,
        SlashJoined(&cluster.group(g.root).key),
    )
}

/// A kept gang's place as [`job_key`] orders it.
fn place_key(place: &JobPlace) -> (i32, u8, i64, SlashJoined<'_>) {
    (
        -place.priority,
        place.elastic,
        place.created,
        SlashJoined(&place.key),
    )
}

/// Gang `g`'s place in job order ([`job_key`]), owned.
#[must_use]
pub fn job_place(ssn: &Session<'_>, g: usize) -> JobPlace {
    let (_, elastic, created, _) = job_key(ssn, g);
    JobPlace {
        priority: ssn.gangs[g].priority,
        elastic,
        created,
        key: ssn.cluster.group(ssn.gangs[g].root).key.clone(),
    }
}

/// A gang's key ordered as its `namespace/name` text orders, without making the text (the last tie
/// breaker of the job order; compared once per pair, not formatted once per comparison). Borrowed: a
/// cycle keys every waiting gang, and a copy would count references up and down for each.
#[derive(Clone, Copy, Debug)]
pub struct SlashJoined<'a>(&'a GroupKey);

impl<'a> SlashJoined<'a> {
    /// The key, ordered as its text.
    #[must_use]
    pub fn new(key: &'a GroupKey) -> Self {
        Self(key)
    }
}

impl PartialEq for SlashJoined<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for SlashJoined<'_> {}

impl SlashJoined<'_> {
    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.0
            .namespace
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(self.0.name.bytes())
    }
}

impl Ord for SlashJoined<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.0, other.0);
        // Sorting thousands of gangs compares names by the million: compare whole slices where the
        // texts' order follows from them, byte by byte only where one namespace is a prefix of the other.
        if a.namespace == b.namespace {
            return a.name.as_bytes().cmp(b.name.as_bytes());
        }
        let (x, y) = (a.namespace.as_bytes(), b.namespace.as_bytes());
        let common = x.len().min(y.len());
        match x[..common].cmp(&y[..common]) {
            Ordering::Equal => self.bytes().cmp(other.bytes()),
            decided => decided,
        }
    }
}

impl PartialOrd for SlashJoined<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl JobQueues {
    /// Queues the given gangs (those with a resolved queue).
    #[must_use]
    pub fn new(ssn: &Session<'_>, gangs: impl Iterator<Item = usize>, reverse: bool) -> Self {
        let cluster = &*ssn.cluster;
        let mut dense = Vec::new();
        for (i, (arena, _)) in cluster.queues.iter().enumerate() {
            let arena = QueueId(arena).index();
            if dense.len() <= arena {
                dense.resize(arena + 1, NONE);
            }
            dense[arena] = u32::try_from(i).unwrap_or(NONE);
        }
        let dense_of = |q: QueueId| dense.get(q.index()).copied().unwrap_or(NONE);
        let nodes: Vec<QueueNode> = cluster
            .queues
            .iter()
            .map(|(arena, q)| QueueNode {
                queue: QueueId(arena),
                children: q
                    .children
                    .iter()
                    .map(|c| dense_of(*c))
                    .filter(|c| *c != NONE)
                    .collect(),
                parent: q.parent.map_or(NONE, dense_of),
                gangs: VecDeque::new(),
                kept: Vec::new(),
                fronts: 0,
                best_under: None,
                scan: Vec::new(),
                key: None,
            })
            .collect();
        let roots = cluster
            .queues
            .iter()
            .filter(|(_, q)| q.parent.is_none() && q.problems.is_empty())
            .map(|(arena, _)| dense_of(QueueId(arena)))
            .collect();
        let mut q = Self {
            nodes,
            roots,
            requests: vec![Resources::ZERO; ssn.gangs.len()],
            reverse,
            ..Self::default()
        };
        let mut keyed: Vec<((i32, u8, i64, SlashJoined<'_>), usize)> = gangs
            .filter_map(|g| {
                let queue = dense_of(ssn.gangs[g].queue?);
                (queue != NONE).then(|| (job_key(ssn, g), g))
            })
            .collect();
        // Stable (driftsort): a churn cycle's waiting gangs arrive mostly in order already, which it
        // sorts in runs; an unstable sort cost more there (and less in a first cycle).
        keyed.sort();
        if reverse {
            keyed.reverse();
        }
        for (_, g) in keyed {
            let Some(queue) = ssn.gangs[g].queue.map(dense_of) else {
                continue;
            };
            q.requests[g] = pending_request(ssn, g);
            q.nodes[queue as usize].gangs.push_back(g);
            q.queued += 1;
        }
        q
    }

    /// Queues the given gangs and, each in its queue's leaf at the place of its first gang, the kept
    /// gangs of the backlog's classes `classes`: a kept gang stands where it would stand if it were in
    /// the session, its class's request orders its queue when it is the queue's front, and the caller
    /// decides at each class's turn whether to take that gang in ([`Self::take_kept`]) or pass over
    /// it and the like gangs after it ([`Self::pass_kept`]). Dooming is not asked of such an order.
    #[must_use]
    pub fn with_kept(ssn: &Session<'_>, gangs: impl Iterator<Item = usize>, classes: &[ClassKey]) -> Self {
        let mut q = Self::new(ssn, gangs, false);
        for key in classes {
            // The `k`-th class is `Turn::Kept(k)`: one the order cannot place stands nowhere, with no
            // gang to give, so that the indexes stay the caller's.
            let k = q.kept.len();
            let placed = q.dense(key.queue).zip(ssn.backlog.class_request(key));
            q.kept.push(KeptFront {
                key: key.clone(),
                leaf: placed.map_or(NONE, |(leaf, _)| leaf),
                request: placed.map_or(Resources::ZERO, |(_, request)| request),
                next: placed.and_then(|_| ssn.backlog.first_after(key, None).map(|(place, _)| place)),
            });
            if let Some((leaf, _)) = placed {
                q.nodes[leaf as usize].kept.push(k);
            }
        }
        q
    }

    /// The dense index of a queue, if the order holds it.
    fn dense(&self, queue: QueueId) -> Option<u32> {
        self.nodes
            .iter()
            .position(|n| n.queue == queue)
            .and_then(|i| u32::try_from(i).ok())
    }

    /// A leaf's front entry: its first gang, or the kept class whose next gang comes before it.
    fn front(&self, ssn: &Session<'_>, leaf: u32) -> Option<usize> {
        let node = self.nodes.get(leaf as usize)?;
        let gang = node.gangs.front().copied();
        if node.kept.is_empty() {
            return gang;
        }
        let mut best: Option<(usize, &JobPlace)> = None;
        for &k in &node.kept {
            if let Some(next) = &self.kept[k].next
                && best.is_none_or(|(_, b)| next < b)
            {
                best = Some((k, next));
            }
        }
        match (gang, best) {
            (Some(g), Some((k, next))) => {
                if place_key(next) < job_key(ssn, g) {
                    Some(KEPT | k)
                } else {
                    Some(g)
                }
            }
            (None, Some((k, _))) => Some(KEPT | k),
            (gang, None) => gang,
        }
    }

    /// What an entry asks next.
    fn request_of(&self, entry: usize) -> Option<Resources> {
        if entry & KEPT != 0 {
            self.kept.get(entry & !KEPT).map(|k| k.request)
        } else {
            self.requests.get(entry).copied()
        }
    }

    /// Takes the next turn: a gang of the session or a kept class's next gang.
    pub fn pop_turn(&mut self, ssn: &Session<'_>) -> Option<Turn> {
        let entry = self.pop_unless(ssn, &mut |_| false)?;
        Some(if entry & KEPT != 0 {
            Turn::Kept(entry & !KEPT)
        } else {
            Turn::Gang(entry)
        })
    }

    /// Takes, one after another, the session gangs the next pops would give without comparing queues
    /// (the last pop's leaf, still the best: see `last`) while `ends_at_once` says their turns would
    /// end doing nothing: the turns a caller would take and end, taken in one step. It stops at a kept
    /// class's entry, whose turn moves the class ([`Self::take_kept`], [`Self::pass_kept`]). How many
    /// it took.
    pub fn pass_like_last(&mut self, ssn: &Session<'_>, ends_at_once: &dyn Fn(usize) -> bool) -> usize {
        #[cfg(test)]
        if self.uncached {
            return 0;
        }
        let mut passed = 0;
        // A doomed front would be set aside first (`settle`): the pops go on without this shortcut.
        while !self.dooming {
            let Some(last) = self
                .last
                .as_ref()
                .filter(|l| l.fairness == ssn.fairness.changes())
            else {
                break;
            };
            let leaf = last.leaf;
            let Some(front) = self.front(ssn, leaf).filter(|f| f & KEPT == 0) else {
                break;
            };
            let asks_as_won = self.request_of(front).is_some_and(|r| last.requests.contains(&r));
            if !asks_as_won || !ends_at_once(front) {
                break;
            }
            self.take_front(ssn, leaf);
            passed += 1;
        }
        passed
    }

    /// Passes over kept class `k`'s next gang and every gang of it after that one that comes before
    /// anything else of its queue's leaf: turns that end as this one would are taken one after
    /// another (the leaf stays the best while nothing changes and its front asks the same).
    pub fn pass_kept(&mut self, ssn: &Session<'_>, k: usize) {
        let Some(front) = self.kept.get(k) else {
            return;
        };
        let leaf = front.leaf;
        let node = &self.nodes[leaf as usize];
        // The first entry of the leaf that is not this class's.
        let mut bound: Option<JobPlace> = node.gangs.front().map(|&g| job_place(ssn, g));
        for &other in &node.kept {
            if other == k {
                continue;
            }
            if let Some(next) = &self.kept[other].next
                && bound.as_ref().is_none_or(|b| next < b)
            {
                bound = Some(next.clone());
            }
        }
        let key = &self.kept[k].key;
        let next = bound.and_then(|b| ssn.backlog.first_after(key, Some(&b)).map(|(place, _)| place));
        self.kept[k].next = next;
        self.front_changed(leaf);
    }

    /// Passes over kept class `k`'s next gang as [`Self::pass_kept`] does, then, in one step, the turns
    /// the next pops would give and the caller would pass over likewise: while accounting is unchanged
    /// (a pass changes none), the leaf keeps winning as long as its front asks a request it won with
    /// (`last`), so its turns go, in job order, to the gangs of its quiet classes (`quiet`: a turn of
    /// that class ends as the last did) up to its first entry that is not one of theirs. Each such
    /// class then stands at its first gang after that entry. When a quiet class with a gang before it
    /// asks something the leaf did not win with, a pop would compare queues again: only `k` is passed.
    pub fn pass_quiet(&mut self, ssn: &Session<'_>, k: usize, quiet: &dyn Fn(usize) -> bool) {
        self.pass_kept(ssn, k);
        #[cfg(test)]
        if self.uncached {
            return;
        }
        let Some(leaf) = self.kept.get(k).map(|front| front.leaf) else {
            return;
        };
        let Some(last) = self
            .last
            .as_ref()
            .filter(|l| l.leaf == leaf && l.fairness == ssn.fairness.changes())
        else {
            return;
        };
        let node = &self.nodes[leaf as usize];
        // The leaf's first entry that is not a quiet class's: the turns stop there.
        let mut stop: Option<JobPlace> = node.gangs.front().map(|&g| job_place(ssn, g));
        for &c in &node.kept {
            if quiet(c) {
                continue;
            }
            if let Some(next) = &self.kept[c].next
                && stop.as_ref().is_none_or(|s| next < s)
            {
                stop = Some(next.clone());
            }
        }
        let before_stop = |c: usize| {
            self.kept[c]
                .next
                .as_ref()
                .is_some_and(|next| stop.as_ref().is_none_or(|s| next < s))
        };
        let passing: SmallVec<[usize; LAST_POP_REQUESTS]> = node
            .kept
            .iter()
            .copied()
            .filter(|&c| quiet(c) && before_stop(c))
            .collect();
        if passing.is_empty()
            || passing
                .iter()
                .any(|&c| !last.requests.contains(&self.kept[c].request))
        {
            return;
        }
        for c in passing {
            let next = stop
                .as_ref()
                .and_then(|s| ssn.backlog.first_after(&self.kept[c].key, Some(s)))
                .map(|(place, _)| place);
            self.kept[c].next = next;
        }
        self.front_changed(leaf);
    }

    /// Takes kept class `k`'s next gang into the session for its turn; its index (`None`: it is no
    /// longer kept).
    pub fn take_kept(&mut self, ssn: &mut Session<'_>, k: usize) -> Option<usize> {
        let front = self.kept.get_mut(k)?;
        let place = front.next.take()?;
        let (key, leaf) = (front.key.clone(), front.leaf);
        let taken = ssn.take_from_backlog_at(&key, &place);
        self.kept[k].next = ssn.backlog.first_after(&key, Some(&place)).map(|(p, _)| p);
        self.front_changed(leaf);
        let g = taken?;
        if self.requests.len() <= g {
            self.requests.resize(g + 1, Resources::ZERO);
        }
        self.requests[g] = pending_request(ssn, g);
        debug_assert_eq!(
            Some(self.requests[g]),
            self.request_of(KEPT | k),
            "a kept gang asks as its class"
        );
        Some(g)
    }

    /// The dense index of a gang's queue, if the order holds it.
    fn queue_of(&self, ssn: &Session<'_>, gang: usize) -> Option<u32> {
        self.dense(ssn.gangs.get(gang)?.queue?)
    }

    /// Puts a gang back (elastic growth) in its place.
    pub fn push(&mut self, ssn: &Session<'_>, gang: usize) {
        let Some(queue) = self.queue_of(ssn, gang) else {
            return;
        };
        self.last = None;
        // A gang taken into the session since the order was made (the backlog's) is new here.
        if self.requests.len() <= gang {
            self.requests.resize(gang + 1, Resources::ZERO);
        }
        self.requests[gang] = pending_request(ssn, gang);
        self.front_changed(queue);
        // Its request changed: keys computed with it hold only if the new request is the same.
        let mut next = queue;
        for _ in 0..=self.nodes.len() {
            let Some(node) = self.nodes.get_mut(next as usize) else {
                break;
            };
            if let Some(at) = &mut node.key
                && at.gang == gang
            {
                at.gang = usize::MAX;
            }
            next = node.parent;
        }
        let key = job_key(ssn, gang);
        let reverse = self.reverse;
        let leaf = &mut self.nodes[queue as usize].gangs;
        // After the gangs of its key and before the first that comes later. A leaf stays in job order
        // (made sorted, and only inserted into in order; a gang's key moves only on its own turn), so
        // a binary search finds the place a scan would: the backlog's gangs come in one per placement,
        // and a scan per arrival made a queue of thousands quadratic.
        let later = |g: &usize| {
            let k = job_key(ssn, *g);
            if reverse { k < key } else { k > key }
        };
        let pos = leaf.partition_point(|g| !later(g));
        debug_assert_eq!(
            Some(pos),
            leaf.iter().position(later).or(Some(leaf.len())),
            "a job-order leaf out of order"
        );
        leaf.insert(pos, gang);
        self.queued += 1;
    }

    /// Takes the next gang (of an order without kept classes: [`Self::pop_turn`] takes the turns of
    /// one with them).
    pub fn pop(&mut self, ssn: &Session<'_>) -> Option<usize> {
        debug_assert!(self.kept.is_empty(), "an order with kept classes pops turns");
        self.pop_unless(ssn, &mut |_| false)
    }

    /// Takes the next gang whose failure is not known yet. A gang at a leaf's front that `doomed` says
    /// will fail takes no turn: it is set aside ([`Self::take_passed_over`]) before its queue is
    /// compared with its siblings, so a queue competes with the first gang of it that may still be
    /// placed. Until the caller first calls [`Self::doom_changed`] no gang is asked (none is doomed), and
    /// it calls it whenever what `doomed` says changes.
    pub fn pop_unless(&mut self, ssn: &Session<'_>, doomed: &mut Doomed<'_>) -> Option<usize> {
        if let Some(gang) = self.pop_like_last(ssn, doomed) {
            return Some(gang);
        }
        let roots = std::mem::take(&mut self.roots);
        let mut scan = std::mem::take(&mut self.root_scan);
        let best = self.best(ssn, &roots, &mut scan, doomed);
        self.roots = roots;
        self.root_scan = scan;
        let leaf = best?.0;
        self.take_front(ssn, leaf)
    }

    /// The gangs set aside by [`Self::pop_unless`] since the last call, in the order they were set
    /// aside.
    pub fn take_passed_over(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.passed_over)
    }

    /// Some gang's doom changed: every leaf's front is looked at again.
    pub fn doom_changed(&mut self) {
        debug_assert!(self.kept.is_empty(), "kept classes are not doomed");
        self.dooming = true;
        self.last = None;
        for node in &mut self.nodes {
            node.fronts += 1;
        }
    }

    /// Sets aside the leaf's front gangs that `doomed` says will fail.
    fn settle(&mut self, leaf: u32, doomed: &mut Doomed<'_>) {
        if !self.dooming {
            return;
        }
        let mut taken = false;
        while let Some(&gang) = self.nodes.get(leaf as usize).and_then(|n| n.gangs.front()) {
            if !doomed(gang) {
                break;
            }
            self.nodes[leaf as usize].gangs.pop_front();
            self.queued -= 1;
            self.passed_over.push(gang);
            taken = true;
        }
        if taken {
            self.front_changed(leaf);
        }
    }

    /// The next gang of the last pop's leaf, if it is still the best (see `last`).
    fn pop_like_last(&mut self, ssn: &Session<'_>, doomed: &mut Doomed<'_>) -> Option<usize> {
        #[cfg(test)]
        if self.uncached {
            return None;
        }
        let (leaf, fairness) = self.last.as_ref().map(|l| (l.leaf, l.fairness))?;
        if ssn.fairness.changes() != fairness {
            self.last = None;
            return None;
        }
        // Passing over doomed gangs changes no accounting: the leaf is still the best if its next
        // live entry asks what it won with.
        self.settle(leaf, doomed);
        let front = self.front(ssn, leaf)?;
        let request = self.request_of(front)?;
        if !self.last.as_ref().is_some_and(|l| l.requests.contains(&request)) {
            return None;
        }
        self.take_front(ssn, leaf)
    }

    /// Takes a leaf's front entry, remembering what was taken. A kept class stays in the leaf: its
    /// turn moves it ([`Self::take_kept`], [`Self::pass_kept`]).
    fn take_front(&mut self, ssn: &Session<'_>, leaf: u32) -> Option<usize> {
        self.front_changed(leaf);
        let front = self.front(ssn, leaf);
        let gang = match front {
            Some(entry) if entry & KEPT != 0 => front,
            _ => self.nodes.get_mut(leaf as usize)?.gangs.pop_front(),
        };
        if gang.is_some_and(|g| g & KEPT == 0) {
            self.queued -= 1;
        }
        let fairness = ssn.fairness.changes();
        let last = self.last.take();
        self.last = gang.and_then(|g| self.request_of(g)).map(|request| match last {
            // The same leaf again with nothing else changed since its last win: it wins with this
            // request too.
            Some(mut last) if last.leaf == leaf && last.fairness == fairness => {
                if !last.requests.contains(&request) && last.requests.len() < LAST_POP_REQUESTS {
                    last.requests.push(request);
                }
                last
            }
            _ => LastPop {
                leaf,
                requests: smallvec::smallvec![request],
                fairness,
            },
        });
        gang
    }

    /// True when no gang is queued (nor any kept gang left to have its turn).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.queued == 0 && self.kept.iter().all(|k| k.next.is_none())
    }

    /// A leaf's front gang changes: the cached bests of it and its ancestors are stale.
    fn front_changed(&mut self, leaf: u32) {
        // Another leaf's front moved (a doomed gang set aside while comparing): the last leaf's wins
        // were against fronts that are gone.
        if self.last.as_ref().is_some_and(|l| l.leaf != leaf) {
            self.last = None;
        }
        let mut next = leaf;
        // Bounded: a parent cycle is a reported queue problem.
        for _ in 0..=self.nodes.len() {
            let Some(node) = self.nodes.get_mut(next as usize) else {
                break;
            };
            node.fronts += 1;
            next = node.parent;
        }
    }

    /// The best (leaf, gang) under an inner queue, reused while nothing under it changed.
    fn best_under(&mut self, ssn: &Session<'_>, inner: u32, doomed: &mut Doomed<'_>) -> Pick {
        let node = &mut self.nodes[inner as usize];
        let children = std::mem::take(&mut node.children);
        let mut scan = std::mem::take(&mut node.scan);
        #[cfg(test)]
        if self.uncached {
            let best = self.best(ssn, &children, &mut scan, doomed);
            self.nodes[inner as usize].children = children;
            return best;
        }
        let node = &self.nodes[inner as usize];
        let seen = (ssn.fairness.version(node.queue), node.fronts);
        let best = match node.best_under {
            Some((at, best)) if at == seen => best,
            _ => {
                let best = self.best(ssn, &children, &mut scan, doomed);
                // Read again: passing over doomed fronts under it moved its fronts version.
                let node = &self.nodes[inner as usize];
                let seen = (ssn.fairness.version(node.queue), node.fronts);
                self.nodes[inner as usize].best_under = Some((seen, best));
                best
            }
        };
        let node = &mut self.nodes[inner as usize];
        node.children = children;
        node.scan = scan;
        best
    }

    /// The best (leaf, gang) among the subtrees of `queues`, resuming the last scan over them (`scan`)
    /// from its first step whose sibling changed.
    fn best(
        &mut self,
        ssn: &Session<'_>,
        queues: &[u32],
        scan: &mut Vec<ScanStep>,
        doomed: &mut Doomed<'_>,
    ) -> Pick {
        #[cfg(test)]
        if self.uncached {
            scan.clear();
        }
        let mut best: Leader = None;
        // A key is only read to compare siblings: an only child needs none.
        let alone = queues.len() == 1;
        let mut resumed = false;
        for (i, &q) in queues.iter().enumerate() {
            if self.nodes[q as usize].children.is_empty() {
                self.settle(q, doomed);
            }
            let node = &self.nodes[q as usize];
            let seen = (ssn.fairness.version(node.queue), node.fronts);
            if !resumed {
                match scan.get(i) {
                    Some(step) if step.queue == q && step.seen == seen => {
                        best = step.leader;
                        continue;
                    }
                    _ => {
                        resumed = true;
                        scan.truncate(i);
                    }
                }
            }
            let candidate = if node.children.is_empty() {
                self.front(ssn, q).map(|g| (q, g))
            } else {
                self.best_under(ssn, q, doomed)
            };
            let Some(candidate) = candidate else {
                scan.push(ScanStep {
                    queue: q,
                    seen,
                    leader: best,
                });
                continue;
            };
            if alone {
                return Some(candidate);
            }
            let key = self.order_key(ssn, q, candidate.1);
            best = match best {
                None => Some((q, candidate, key)),
                Some((bq, bc, bkey)) => {
                    let (queue, best_queue) = (self.nodes[q as usize].queue, self.nodes[bq as usize].queue);
                    let mut ord = ssn
                        .fairness
                        .compare_keys(queue, key.as_ref(), best_queue, bkey.as_ref());
                    // Tests compare the keys with the pairwise comparison they stand for.
                    #[cfg(test)]
                    if self.uncached {
                        let a_req = self.request_of(candidate.1).unwrap_or(Resources::ZERO);
                        let b_req = self.request_of(bc.1).unwrap_or(Resources::ZERO);
                        ord = ssn
                            .fairness
                            .compare(ssn.cluster, queue, &a_req, best_queue, &b_req);
                    }
                    if self.reverse {
                        ord = ord.reverse();
                    }
                    if ord == Ordering::Less {
                        Some((q, candidate, key))
                    } else {
                        Some((bq, bc, bkey))
                    }
                }
            };
            scan.push(ScanStep {
                queue: q,
                seen,
                leader: best,
            });
        }
        best.map(|(_, c, _)| c)
    }

    /// The order key of queue `q` represented by `gang` (its best), reused while the queue's accounting
    /// and the request it is computed for stay the same.
    fn order_key(&mut self, ssn: &Session<'_>, q: u32, gang: usize) -> Option<OrderKey> {
        #[cfg(test)]
        let cached = !self.uncached;
        #[cfg(not(test))]
        let cached = true;
        let request = self.request_of(gang).unwrap_or(Resources::ZERO);
        let node = &mut self.nodes[q as usize];
        let version = ssn.fairness.version(node.queue);
        if cached
            && let Some(at) = &node.key
            && at.version == version
            && at.gang == gang
        {
            return at.key;
        }
        if cached
            && let Some(at) = &mut node.key
            && at.version == version
            && at.request == request
        {
            at.gang = gang;
            return at.key;
        }
        let key = ssn.fairness.order_key(node.queue, &request);
        node.key = Some(KeyAt {
            version,
            gang,
            request,
            key,
        });
        key
    }
}

/// What a gang asks for in its next attempt: its pending pods up to its minimum (at least one).
pub(crate) fn pending_request(ssn: &Session<'_>, gang: usize) -> Resources {
    let g = &ssn.gangs[gang];
    // No pod of it placed, reserved or evicted in this session: its pods are as its gang was built
    // with (a carried gang's pods did not change since), so the request is the one kept then.
    if !ssn.gang_touched(gang) {
        debug_assert_eq!(
            g.next_request_at_build,
            g.next_request(ssn.cluster),
            "gang {gang}'s request changed since it was built"
        );
        return g.next_request_at_build;
    }
    g.next_request(ssn.cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::sim::Synthetic;

    /// The cached order pops exactly what a full comparison pops, while accounting changes under it
    /// as allocate would change it (every other gang "placed").
    #[test]
    fn cached_subtree_bests_pop_the_same_gangs_as_full_comparisons() {
        let mut cluster = Synthetic::new(12, 1).cluster();
        let config = Config::default();
        let mut ssn = Session::open(&mut cluster, &config, 1_000_000);
        let all = 0..ssn.gangs.len();
        let mut cached = JobQueues::new(&ssn, all.clone(), false);
        let mut full = JobQueues::new(&ssn, all, false);
        full.uncached = true;
        let mut popped = 0;
        while let Some(g) = full.pop(&ssn) {
            assert_eq!(cached.pop(&ssn), Some(g), "pop {popped}");
            popped += 1;
            // Accounting moves in the popped gang's queue (allocate) and, as reclaim's evictions do, in
            // some other queue whose subtree was not popped from.
            let other = (g * 7 + 3) % ssn.gangs.len();
            let target = if popped % 2 == 0 { g } else { other };
            if popped % 3 != 0
                && let Some(q) = ssn.gangs[target].queue
            {
                // Large enough to move the queue across its fair share and reorder the queues.
                let request = cached.requests[g].times(40);
                let sign = if target == g { 1 } else { -1 };
                let cluster = &*ssn.cluster;
                ssn.fairness.change(cluster, q, &request, true, sign);
            }
            if popped % 7 == 0 {
                // Elastic growth puts a gang back in its place in both.
                full.push(&ssn, g);
                cached.push(&ssn, g);
            }
        }
        assert!(cached.pop(&ssn).is_none());
        assert!(popped > 100, "popped {popped}");
    }
}

#[cfg(test)]
mod doomed_tests {
    use super::*;
    use crate::config::Config;
    use crate::sim::Synthetic;

    /// Gangs whose failure is known take no turn: popping with them passed over gives, at every step,
    /// what an order made of the live gangs alone gives, while accounting changes under both and more
    /// gangs are doomed along the way; every doomed gang is handed back once.
    #[test]
    fn doomed_fronts_take_no_turn() {
        let mut cluster = Synthetic::new(12, 1).cluster();
        let config = Config::default();
        let mut ssn = Session::open(&mut cluster, &config, 1_000_000);
        let n = ssn.gangs.len();
        let mut doomed = vec![false; n];
        for (g, d) in doomed.iter_mut().enumerate() {
            *d = g % 3 == 1;
        }
        let mut skipping = JobQueues::new(&ssn, 0..n, false);
        skipping.doom_changed();
        let live =
            |doomed: &[bool], gone: &[bool]| (0..n).filter(|g| !doomed[*g] && !gone[*g]).collect::<Vec<_>>();
        let mut gone = vec![false; n];
        let mut taken = vec![false; n];
        let mut reference = JobQueues::new(&ssn, live(&doomed, &gone).into_iter(), false);
        reference.uncached = true;
        let mut passed = Vec::new();
        let mut popped = 0;
        while let Some(g) = reference.pop(&ssn) {
            let got = skipping.pop_unless(&ssn, &mut |g| doomed[g]);
            assert_eq!(got, Some(g), "pop {popped}");
            gone[g] = true;
            taken[g] = true;
            for p in skipping.take_passed_over() {
                assert!(doomed[p], "gang {p} passed over but not doomed");
                gone[p] = true;
                passed.push(p);
            }
            popped += 1;
            if popped % 3 != 0
                && let Some(q) = ssn.gangs[g].queue
            {
                let request = skipping.requests[g].times(40);
                let cluster = &*ssn.cluster;
                ssn.fairness.change(cluster, q, &request, true, 1);
            }
            if popped == 10 {
                // More gangs are found doomed mid-way.
                for (g, d) in doomed.iter_mut().enumerate() {
                    if g % 5 == 0 {
                        *d = true;
                    }
                }
                skipping.doom_changed();
                reference = JobQueues::new(&ssn, live(&doomed, &gone).into_iter(), false);
                reference.uncached = true;
            }
        }
        assert_eq!(skipping.pop_unless(&ssn, &mut |g| doomed[g]), None);
        passed.extend(skipping.take_passed_over());
        passed.sort_unstable();
        // Every gang left once: popped while live, or passed over while doomed.
        let expected: Vec<usize> = (0..n).filter(|g| doomed[*g] && !taken[*g]).collect();
        assert_eq!(passed, expected);
        assert!(popped > 30, "popped {popped}");
    }
}

#[cfg(test)]
mod kept_tests {
    use super::*;
    use crate::sim::{GangSpec, Sim};

    /// Three queues over two 8-GPU nodes and far more jobs than fit, of three shapes interleaved in
    /// job order, after two rounds: the backlog keeps a class per queue and shape.
    fn crowded() -> Sim {
        let mut sim = Sim::new();
        sim.nodes("gpu", 2, 8);
        sim.queue("a", None, 8.0, -1.0, 1.0);
        sim.queue("b", None, 4.0, -1.0, 1.0);
        sim.queue("c", None, 4.0, -1.0, 2.0);
        for i in 0..90_u32 {
            let queue = ["a", "b", "c"][(i % 3) as usize];
            let gpus = [1, 2, 8][(i / 3 % 3) as usize];
            sim.gang(
                GangSpec::new(&format!("job-{i}"), queue, 1)
                    .gpus(gpus)
                    .created(i64::from(i)),
            );
        }
        sim.rounds(2);
        sim
    }

    /// Gang `g`'s turn placed it, alike in both sessions: its queue's accounting grows by four times
    /// what it asks (enough to reorder the queues).
    fn place_in_both(order: &JobQueues, g: usize, sessions: [&mut Session<'_>; 2]) {
        let Some(q) = sessions[0].gangs[g].queue else {
            return;
        };
        let request = order.requests[g].times(4);
        for ssn in sessions {
            let cluster = &*ssn.cluster;
            ssn.fairness.change(cluster, q, &request, true, 1);
        }
    }

    /// A session on each sim, each with an order of its gangs and the backlog's kept classes: the first
    /// cached as the scheduler runs it, the second uncached (every pop a full comparison of queues).
    fn cached_and_uncached<'a>(
        left: &'a mut Sim,
        right: &'a mut Sim,
    ) -> (Session<'a>, JobQueues, Session<'a>, JobQueues) {
        let cached_ssn = Session::open(&mut left.cluster, &left.config, left.now);
        let full_ssn = Session::open(&mut right.cluster, &right.config, right.now);
        let keys = cached_ssn.backlog.class_keys();
        assert_eq!(keys, full_ssn.backlog.class_keys());
        let cached = JobQueues::with_kept(&cached_ssn, 0..cached_ssn.gangs.len(), &keys);
        let mut full = JobQueues::with_kept(&full_ssn, 0..full_ssn.gangs.len(), &keys);
        full.uncached = true;
        (cached_ssn, cached, full_ssn, full)
    }

    /// The gang turn `turn` gives in both orders: a kept class's next gang, taken in by each alike.
    fn gang_of_turn(
        turn: Turn,
        turns: usize,
        (cached, cached_ssn): (&mut JobQueues, &mut Session<'_>),
        (full, full_ssn): (&mut JobQueues, &mut Session<'_>),
    ) -> Option<usize> {
        match turn {
            Turn::Gang(g) => Some(g),
            Turn::Kept(k) => {
                let g = cached.take_kept(cached_ssn, k);
                assert_eq!(full.take_kept(full_ssn, k), g, "turn {turns}");
                g
            }
        }
    }

    /// An order with the backlog's kept classes standing in it pops, turn by turn, what the uncached
    /// order (every pop a full comparison of queues) pops, while kept gangs are passed over or taken
    /// in and accounting moves under both: the leaf wins it remembers ([`LastPop`]) hold only against
    /// the fronts they were won against.
    #[test]
    fn kept_classes_take_the_turns_the_uncached_order_gives() {
        let (mut left, mut right) = (crowded(), crowded());
        let (mut cached_ssn, mut cached, mut full_ssn, mut full) = cached_and_uncached(&mut left, &mut right);
        let kept = cached_ssn.backlog.class_keys().len();
        assert!(kept >= 6, "{kept} classes kept");
        let (mut turns, mut kept_turns, mut taken) = (0, 0, 0);
        while let Some(turn) = full.pop_turn(&full_ssn) {
            assert_eq!(
                cached.pop_turn(&cached_ssn),
                Some(turn),
                "turn {turn:?} ({turns})"
            );
            turns += 1;
            let gang = match turn {
                Turn::Gang(g) => Some(g),
                Turn::Kept(k) => {
                    kept_turns += 1;
                    // Most kept turns end as the last of their class did (passed over with the like
                    // gangs after them); every fifth is taken in.
                    if kept_turns % 5 == 0 {
                        let g = cached.take_kept(&mut cached_ssn, k);
                        assert_eq!(full.take_kept(&mut full_ssn, k), g, "turn {turns}");
                        taken += usize::from(g.is_some());
                        g
                    } else {
                        cached.pass_kept(&cached_ssn, k);
                        full.pass_kept(&full_ssn, k);
                        None
                    }
                }
            };
            // Some turns place their gang: its queue's accounting moves, and the queues reorder.
            if let Some(g) = gang
                && turns % 3 == 0
            {
                place_in_both(&cached, g, [&mut cached_ssn, &mut full_ssn]);
            }
        }
        assert_eq!(cached.pop_turn(&cached_ssn), None);
        assert!(
            kept_turns > 20 && taken > 3,
            "{kept_turns} kept turns, {taken} taken in"
        );
    }

    /// The next turn that is not a quiet class's, passing those over on the way (`batched`: as reclaim
    /// does, with [`JobQueues::pass_quiet`]; otherwise one by one); counts the quiet turns popped.
    fn next_real_turn(
        order: &mut JobQueues,
        ssn: &Session<'_>,
        quiet: &[bool],
        batched: bool,
        quiet_pops: &mut usize,
    ) -> Option<Turn> {
        loop {
            match order.pop_turn(ssn)? {
                Turn::Kept(k) if quiet[k] => {
                    *quiet_pops += 1;
                    if batched {
                        order.pass_quiet(ssn, k, &|c| quiet[c]);
                    } else {
                        order.pass_kept(ssn, k);
                    }
                }
                turn => return Some(turn),
            }
        }
    }

    /// Passing a leaf's quiet classes over in one step leaves every other turn as passing them one by
    /// one with the uncached order gives: the same gangs and classes, in the same order, while kept
    /// gangs are taken in, accounting moves and classes turn quiet and back (an eviction would).
    #[test]
    fn quiet_classes_passed_in_one_step_leave_the_other_turns_as_they_were() {
        let (mut left, mut right) = (crowded(), crowded());
        let (mut batched_ssn, mut batched, mut single_ssn, mut single) =
            cached_and_uncached(&mut left, &mut right);
        // Two classes in three quiet to begin with.
        let mut quiet: Vec<bool> = (0..batched_ssn.backlog.class_keys().len())
            .map(|k| k % 3 != 0)
            .collect();
        let (mut turns, mut batched_pops, mut single_pops) = (0, 0, 0);
        loop {
            let expected = next_real_turn(&mut single, &single_ssn, &quiet, false, &mut single_pops);
            let got = next_real_turn(&mut batched, &batched_ssn, &quiet, true, &mut batched_pops);
            assert_eq!(got, expected, "turn {turns}");
            let Some(turn) = expected else { break };
            turns += 1;
            let gang = gang_of_turn(
                turn,
                turns,
                (&mut batched, &mut batched_ssn),
                (&mut single, &mut single_ssn),
            );
            if let Some(g) = gang
                && turns % 2 == 0
            {
                place_in_both(&batched, g, [&mut batched_ssn, &mut single_ssn]);
            }
            // Now and then an eviction: every class's next turn may end otherwise, then some go quiet.
            if turns % 7 == 0 {
                for (k, q) in quiet.iter_mut().enumerate() {
                    *q = (k + turns) % 3 != 0;
                }
            }
        }
        assert!(turns > 10, "{turns} turns");
        assert!(
            batched_pops < single_pops,
            "quiet turns popped: {batched_pops} batched, {single_pops} one by one"
        );
    }

    /// The next turn that is not a session gang of a refused queue, passing those over on the way
    /// (`batched`: as reclaim does, with [`JobQueues::pass_like_last`]; otherwise one by one); counts
    /// the refused turns (`[0]`) and the pops that gave one (`[1]`).
    fn next_unrefused_turn(
        order: &mut JobQueues,
        ssn: &Session<'_>,
        refused: &[QueueId],
        batched: bool,
        counts: &mut [usize; 2],
    ) -> Option<Turn> {
        let is_refused = |g: usize| ssn.gangs[g].queue.is_some_and(|q| refused.contains(&q));
        loop {
            match order.pop_turn(ssn)? {
                Turn::Gang(g) if is_refused(g) => {
                    counts[0] += 1;
                    counts[1] += 1;
                    if batched {
                        counts[0] += order.pass_like_last(ssn, &|next| {
                            assert!(is_refused(next), "gang {next} of a queue not refused offered");
                            true
                        });
                    }
                }
                turn => return Some(turn),
            }
        }
    }

    /// Passing a refused queue's gangs over in one step leaves every other turn as popping them one by
    /// one with the uncached order gives, while kept gangs are taken in, accounting moves and queues
    /// are refused and let go (an eviction would).
    #[test]
    fn refused_gangs_passed_in_one_step_leave_the_other_turns_as_they_were() {
        let (mut left, mut right) = (crowded(), crowded());
        // A round's worth more of each queue's gangs in the session, beside the kept classes, in runs
        // of like ones: a run ends where a front asks what its leaf has not won with.
        for sim in [&mut left, &mut right] {
            for i in 90..150_u32 {
                let queue = ["a", "b", "c"][(i % 3) as usize];
                sim.gang(
                    GangSpec::new(&format!("job-{i}"), queue, 1)
                        .gpus(if i / 9 % 2 == 0 { 1 } else { 8 })
                        .created(i64::from(i)),
                );
            }
        }
        let (mut batched_ssn, mut batched, mut single_ssn, mut single) =
            cached_and_uncached(&mut left, &mut right);
        let queues: Vec<QueueId> = {
            let mut q: Vec<QueueId> = batched_ssn.gangs.iter().filter_map(|g| g.queue).collect();
            q.sort_unstable();
            q.dedup();
            q
        };
        assert_eq!(queues.len(), 3, "{queues:?}");
        let mut refused: Vec<QueueId> = vec![queues[1]];
        let (mut turns, mut batched_counts, mut single_counts) = (0, [0, 0], [0, 0]);
        loop {
            let expected = next_unrefused_turn(&mut single, &single_ssn, &refused, false, &mut single_counts);
            let got = next_unrefused_turn(&mut batched, &batched_ssn, &refused, true, &mut batched_counts);
            assert_eq!(got, expected, "turn {turns}");
            let Some(turn) = expected else { break };
            turns += 1;
            let gang = gang_of_turn(
                turn,
                turns,
                (&mut batched, &mut batched_ssn),
                (&mut single, &mut single_ssn),
            );
            if let Some(g) = gang
                && turns % 2 == 0
            {
                place_in_both(&batched, g, [&mut batched_ssn, &mut single_ssn]);
            }
            // Now and then an eviction: another queue is refused.
            if turns % 3 == 0 {
                refused = vec![queues[turns / 3 % 3]];
            }
        }
        assert!(turns > 10, "{turns} turns");
        assert_eq!(batched_counts[0], single_counts[0], "refused turns");
        assert!(
            single_counts[0] > 10 && batched_counts[1] < single_counts[1],
            "refused turns {}, popped in {} batched, {} one by one",
            single_counts[0],
            batched_counts[1],
            single_counts[1]
        );
    }
}

#[cfg(test)]
mod slash_joined_tests {
    use std::sync::Arc;

    use super::SlashJoined;
    use crate::model::{GroupKey, GroupKind};

    fn key(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            kind: GroupKind::Kai,
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }

    #[test]
    fn orders_as_the_namespace_slash_name_text_does() {
        let pairs = [
            ("a", "b", "a-x", "b"),
            ("a", "zz", "ab", "a"),
            ("ns", "job-10", "ns", "job-9"),
            ("ns", "j", "ns", "j"),
            ("", "x", "a", ""),
            ("ns", "a", "ns-b", "a"),
            ("ns-b", "a", "ns", "z"),
            ("ns", "z", "ns0", "a"),
            ("ns0", "a", "ns", "z"),
            ("n", "s/x", "ns", "x"),
            ("abc", "x", "abd", "a"),
        ];
        for (n1, m1, n2, m2) in pairs {
            let text = format!("{n1}/{m1}").cmp(&format!("{n2}/{m2}"));
            let (a, b) = (key(n1, m1), key(n2, m2));
            assert_eq!(
                SlashJoined(&a).cmp(&SlashJoined(&b)),
                text,
                "{n1}/{m1} vs {n2}/{m2}"
            );
        }
    }
}
