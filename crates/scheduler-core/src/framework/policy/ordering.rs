//! The order in which gangs are tried: a tree of queues mirroring the queue hierarchy, each leaf holding
//! its gangs in job order. Popping walks from the roots to the best leaf, comparing siblings by fair share
//! with the best gang of each subtree, so allocations interleave across queues as accounting changes.

use std::cmp::Ordering;
use std::collections::VecDeque;

use crate::fairshare::OrderKey;
use crate::framework::Session;
use crate::model::{GroupKey, IdMap, QueueId, Resources, TaskStatus};

/// A leaf queue and its front gang: the next gang to try under some queue.
type Pick = Option<(QueueId, usize)>;

/// (fairness version, fronts version) of a queue when its best was found.
type Seen = (u64, u64);

/// Gangs by queue, in order.
#[derive(Clone, Debug, Default)]
pub struct JobQueues {
    leaves: IdMap<QueueId, VecDeque<usize>>,
    /// What each gang asks for next (used to compare queues).
    requests: IdMap<usize, Resources>,
    /// Reverse order (victim selection): worst gangs of the most over-served queues first.
    reverse: bool,
    /// Per queue, bumped when the front gang of a leaf under it changes (pop, push).
    fronts: PerQueue<u64>,
    /// The best (leaf, gang) under each inner queue, with the (fairness version, fronts version) it was
    /// found at: siblings compare only their own accounting and candidates, so a subtree where neither
    /// changed still has the same best, and a pop re-compares only along the path that changed.
    best_under: PerQueue<(Seen, Pick)>,
    /// Each queue's order key with what it was computed from: a key reads only the queue's accounting
    /// and its best gang's request, so a new front gang asking the same (a backlog of like jobs) keeps it.
    keys: PerQueue<KeyAt>,
    /// The top-level queues without problems, listed at the first pop.
    roots: Option<Vec<QueueId>>,
    /// What the last pop took: while no accounting changed and nothing was put back, a leaf whose next
    /// gang asks the same as the one taken is still the best (every comparison reads only accounting
    /// and requests), so a run of like gangs is popped without comparing queues.
    last: Option<LastPop>,
    /// Tests compare against the uncached order.
    #[cfg(test)]
    uncached: bool,
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

/// The leaf a pop took from, the request of the gang it took and the session's allocation changes then.
#[derive(Clone, Copy, Debug)]
struct LastPop {
    leaf: QueueId,
    request: Resources,
    fairness: u64,
}

/// Values per queue, in a vector by the queue's arena index (looked up on every comparison of a pop).
#[derive(Clone, Debug)]
struct PerQueue<T>(Vec<Option<T>>);

impl<T> Default for PerQueue<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T> PerQueue<T> {
    fn get(&self, q: &QueueId) -> Option<&T> {
        self.0.get(q.index()).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, q: &QueueId) -> Option<&mut T> {
        self.0.get_mut(q.index()).and_then(Option::as_mut)
    }

    fn insert(&mut self, q: QueueId, value: T) {
        if self.0.len() <= q.index() {
            self.0.resize_with(q.index() + 1, || None);
        }
        self.0[q.index()] = Some(value);
    }
}

/// KAI's job order inside a queue: higher priority, then gangs below their minimum before those at it
/// before elastic growth, then older, then by name.
#[must_use]
pub fn job_key(ssn: &Session<'_>, gang: usize) -> (i32, u8, i64, SlashJoined) {
    let g = &ssn.gangs[gang];
    let cluster = &*ssn.cluster;
    let elastic = if !g.is_satisfied(cluster) {
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
        SlashJoined(cluster.group(g.root).key.clone()),
    )
}

/// A gang's key ordered as its `namespace/name` text orders, without making the text (the last tie
/// breaker of the job order; compared once per pair, not formatted once per comparison).
#[derive(Clone, Debug)]
pub struct SlashJoined(GroupKey);

impl PartialEq for SlashJoined {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for SlashJoined {}

impl SlashJoined {
    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.0
            .namespace
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(self.0.name.bytes())
    }
}

impl Ord for SlashJoined {
    fn cmp(&self, other: &Self) -> Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl PartialOrd for SlashJoined {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl JobQueues {
    /// Queues the given gangs (those with a resolved queue).
    #[must_use]
    pub fn new(ssn: &Session<'_>, gangs: impl Iterator<Item = usize>, reverse: bool) -> Self {
        let mut q = Self {
            reverse,
            ..Self::default()
        };
        let mut keyed: Vec<((i32, u8, i64, SlashJoined), usize)> = gangs
            .filter(|g| ssn.gangs[*g].queue.is_some())
            .map(|g| (job_key(ssn, g), g))
            .collect();
        keyed.sort();
        if reverse {
            keyed.reverse();
        }
        for (_, g) in keyed {
            let queue = ssn.gangs[g].queue.expect("invariant: filtered on queue");
            q.requests.insert(g, pending_request(ssn, g));
            q.leaves.entry(queue).or_default().push_back(g);
        }
        q
    }

    /// Puts a gang back (elastic growth) in its place.
    pub fn push(&mut self, ssn: &Session<'_>, gang: usize) {
        let Some(queue) = ssn.gangs[gang].queue else {
            return;
        };
        self.last = None;
        self.requests.insert(gang, pending_request(ssn, gang));
        self.front_changed(ssn, queue);
        // Its request changed: keys computed with it hold only if the new request is the same.
        let mut next = Some(queue);
        for _ in 0..=ssn.cluster.queues.len() {
            let Some(q) = next else { break };
            if let Some(at) = self.keys.get_mut(&q)
                && at.gang == gang
            {
                at.gang = usize::MAX;
            }
            next = ssn.cluster.queues.get(q.0).and_then(|queue| queue.parent);
        }
        let key = job_key(ssn, gang);
        let leaf = self.leaves.entry(queue).or_default();
        let pos = leaf
            .iter()
            .position(|g| {
                let k = job_key(ssn, *g);
                if self.reverse { k < key } else { k > key }
            })
            .unwrap_or(leaf.len());
        leaf.insert(pos, gang);
    }

    /// Takes the next gang.
    pub fn pop(&mut self, ssn: &Session<'_>) -> Option<usize> {
        if let Some(gang) = self.pop_like_last(ssn) {
            return Some(gang);
        }
        // The model's queues do not change during a session: list the roots once.
        let roots = match self.roots.take() {
            Some(roots) => roots,
            None => ssn
                .cluster
                .queues
                .iter()
                .filter(|(_, q)| q.parent.is_none() && q.problems.is_empty())
                .map(|(i, _)| QueueId(i))
                .collect(),
        };
        let best = self.best(ssn, &roots);
        self.roots = Some(roots);
        let leaf = best?.0;
        self.take_front(ssn, leaf)
    }

    /// The next gang of the last pop's leaf, if it is still the best (see `last`).
    fn pop_like_last(&mut self, ssn: &Session<'_>) -> Option<usize> {
        #[cfg(test)]
        if self.uncached {
            return None;
        }
        let last = self.last.take()?;
        let front = *self.leaves.get(&last.leaf)?.front()?;
        if ssn.fairness.changes() != last.fairness || self.requests.get(&front) != Some(&last.request) {
            return None;
        }
        self.take_front(ssn, last.leaf)
    }

    /// Takes a leaf's front gang, remembering what was taken.
    fn take_front(&mut self, ssn: &Session<'_>, leaf: QueueId) -> Option<usize> {
        self.front_changed(ssn, leaf);
        let gang = self.leaves.get_mut(&leaf)?.pop_front();
        if self.leaves.get(&leaf).is_some_and(VecDeque::is_empty) {
            self.leaves.remove(&leaf);
        }
        self.last = gang.and_then(|g| {
            let request = *self.requests.get(&g)?;
            Some(LastPop {
                leaf,
                request,
                fairness: ssn.fairness.changes(),
            })
        });
        gang
    }

    /// True when no gang is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// A leaf's front gang changes: the cached bests of it and its ancestors are stale.
    fn front_changed(&mut self, ssn: &Session<'_>, leaf: QueueId) {
        let mut next = Some(leaf);
        // Bounded: a parent cycle is a reported queue problem.
        for _ in 0..=ssn.cluster.queues.len() {
            let Some(q) = next else { break };
            let v = self.fronts.get(&q).copied().unwrap_or(0);
            self.fronts.insert(q, v + 1);
            next = ssn.cluster.queues.get(q.0).and_then(|queue| queue.parent);
        }
    }

    /// The best (leaf, gang) under an inner queue, reused while nothing under it changed.
    fn best_under(&mut self, ssn: &Session<'_>, inner: QueueId) -> Pick {
        #[cfg(test)]
        if self.uncached {
            return self.best(ssn, &ssn.cluster.queue(inner).children);
        }
        let key = (
            ssn.fairness.version(inner),
            self.fronts.get(&inner).copied().unwrap_or(0),
        );
        if let Some((at, best)) = self.best_under.get(&inner)
            && *at == key
        {
            return *best;
        }
        let best = self.best(ssn, &ssn.cluster.queue(inner).children);
        self.best_under.insert(inner, (key, best));
        best
    }

    /// The best (leaf, gang) among the subtrees of `queues`.
    fn best(&mut self, ssn: &Session<'_>, queues: &[QueueId]) -> Pick {
        let mut best: Option<(QueueId, (QueueId, usize), Option<OrderKey>)> = None;
        // A key is only read to compare siblings: an only child needs none.
        let alone = queues.len() == 1;
        for q in queues {
            let candidate = if ssn.cluster.queue(*q).is_leaf() {
                self.leaves.get(q).and_then(|l| l.front()).map(|g| (*q, *g))
            } else {
                self.best_under(ssn, *q)
            };
            let Some(candidate) = candidate else { continue };
            if alone {
                return Some(candidate);
            }
            let key = self.order_key(ssn, *q, candidate.1);
            best = match best {
                None => Some((*q, candidate, key)),
                Some((bq, bc, bkey)) => {
                    let mut ord = ssn.fairness.compare_keys(*q, key.as_ref(), bq, bkey.as_ref());
                    // Tests compare the keys with the pairwise comparison they stand for.
                    #[cfg(test)]
                    if self.uncached {
                        let empty = Resources::ZERO;
                        let a_req = self.requests.get(&candidate.1).unwrap_or(&empty);
                        let b_req = self.requests.get(&bc.1).unwrap_or(&empty);
                        ord = ssn.fairness.compare(ssn.cluster, *q, a_req, bq, b_req);
                    }
                    if self.reverse {
                        ord = ord.reverse();
                    }
                    if ord == Ordering::Less {
                        Some((*q, candidate, key))
                    } else {
                        Some((bq, bc, bkey))
                    }
                }
            };
        }
        best.map(|(_, c, _)| c)
    }

    /// The order key of queue `q` represented by `gang` (its best), reused while the queue's accounting
    /// and the request it is computed for stay the same.
    fn order_key(&mut self, ssn: &Session<'_>, q: QueueId, gang: usize) -> Option<OrderKey> {
        let version = ssn.fairness.version(q);
        #[cfg(test)]
        let cached = !self.uncached;
        #[cfg(not(test))]
        let cached = true;
        if cached
            && let Some(at) = self.keys.get(&q)
            && at.version == version
            && at.gang == gang
        {
            return at.key;
        }
        let request = self.requests.get(&gang).copied().unwrap_or(Resources::ZERO);
        if cached
            && let Some(at) = self.keys.get_mut(&q)
            && at.version == version
            && at.request == request
        {
            at.gang = gang;
            return at.key;
        }
        let key = ssn.fairness.order_key(q, &request);
        self.keys.insert(
            q,
            KeyAt {
                version,
                gang,
                request,
                key,
            },
        );
        key
    }
}

/// What a gang asks for in its next attempt: its pending pods up to its minimum (at least one).
fn pending_request(ssn: &Session<'_>, gang: usize) -> Resources {
    let g = &ssn.gangs[gang];
    let cluster = &*ssn.cluster;
    let active = g
        .tasks()
        .filter(|t| cluster.task(*t).status.is_active_allocated())
        .count();
    let missing = (g.required_pods(0) as usize).saturating_sub(active).max(1);
    let mut total = Resources::ZERO;
    for t in g
        .tasks()
        .filter(|t| cluster.task(*t).status == TaskStatus::Pending)
        .take(missing)
    {
        total.add(&ssn.share_request(t));
    }
    total
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
                let request = cached
                    .requests
                    .get(&g)
                    .copied()
                    .unwrap_or(Resources::ZERO)
                    .times(40);
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
mod slash_joined_tests {
    use std::sync::Arc;

    use super::SlashJoined;
    use crate::model::{GroupKey, GroupKind};

    fn key(namespace: &str, name: &str) -> SlashJoined {
        SlashJoined(GroupKey {
            kind: GroupKind::Kai,
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        })
    }

    #[test]
    fn orders_as_the_namespace_slash_name_text_does() {
        let pairs = [
            ("a", "b", "a-x", "b"),
            ("a", "zz", "ab", "a"),
            ("ns", "job-10", "ns", "job-9"),
            ("ns", "j", "ns", "j"),
            ("", "x", "a", ""),
        ];
        for (n1, m1, n2, m2) in pairs {
            let text = format!("{n1}/{m1}").cmp(&format!("{n2}/{m2}"));
            assert_eq!(key(n1, m1).cmp(&key(n2, m2)), text, "{n1}/{m1} vs {n2}/{m2}");
        }
    }
}
