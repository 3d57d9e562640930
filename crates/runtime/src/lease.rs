//! Leader election on a `coordination.k8s.io/v1` Lease, so exactly one replica of a component writes.
//!
//! The shape is client-go's (acquire or renew every `retry_period`, give up after `renew_deadline`, others
//! take over after `lease_duration`), made stricter in three ways:
//!
//! * **Leadership is a deadline, not a flag.** A renewal counts from the moment its request was *sent*;
//!   the leader is valid until then + `renew_deadline` by both the monotonic and the wall clock. Writers
//!   call [`LeaderGuard::check`] right before each write, which compares against that deadline itself,
//!   so a process that was paused (SIGSTOP, a long GC-like stall, a starved runtime) sees on resume that
//!   its leadership ended, even before the election task has run again.
//! * **Takeover needs two proofs.** A candidate takes a lease held by someone else only when the record
//!   is expired by its own wall clock ([`decide`]) *and* it has watched the record stay unchanged for a
//!   full lease duration by its monotonic clock. The second makes clock skew between nodes harmless:
//!   the old leader's deadline (`renew_deadline` after it sent its last successful renewal) falls before
//!   the candidate's (`lease_duration` after it first saw that renewal), since
//!   `renew_deadline < lease_duration`.
//! * **Writes are optimistic.** Every update carries the `resourceVersion` it was based on; a conflict
//!   means someone else wrote, and nothing is assumed until the lease is read again.
//!
//! On graceful shutdown the leader first stops leading locally, then empties `holderIdentity`, so a
//! successor takes over within one retry period instead of waiting for expiry. With
//! `--leader-elect=false` the elector reports leadership at once and never touches the API.
//!
//! What it cannot do: stop a write that was already sent when leadership ended. Keep each write short
//! next to the `lease_duration - renew_deadline` margin (5 s by default), and prefer writes that carry
//! preconditions (resourceVersion, UID) where the API allows it.
//!
//! Owns: the Lease protocol and the leadership state. Must not: decide what a leader does.

use std::{
    hash::{BuildHasher as _, RandomState},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use api::duration;

/// Field manager recorded on the Lease.
const FIELD_MANAGER: &str = "kai-leader-election";

/// Lease problems a caller can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A required setting is empty.
    #[error("leader election: {0} must not be empty")]
    Empty(&'static str),
    /// The timings cannot give the safety guarantee.
    #[error(
        "leader election needs 0 < retry period ({}) < renew deadline ({}) < lease duration ({}), \
         and a lease duration of 1s to 68 years",
        duration::format(*retry_period),
        duration::format(*renew_deadline),
        duration::format(*lease_duration)
    )]
    Timings {
        /// `--lease-duration`.
        lease_duration: Duration,
        /// `--renew-deadline`.
        renew_deadline: Duration,
        /// `--retry-period`.
        retry_period: Duration,
    },
    /// This process is not the leader now; do not write.
    #[error("not the leader")]
    NotLeader,
}

/// Validated settings for one Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    name: String,
    namespace: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl LeaseConfig {
    /// Checks that names are set and `0 < retry_period < renew_deadline < lease_duration`, with
    /// `lease_duration` between 1 s and `i32::MAX` seconds (it is written as whole seconds, rounded up).
    pub fn new(
        name: String,
        namespace: String,
        identity: String,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, Error> {
        for (value, what) in [
            (&name, "the lease name"),
            (&namespace, "the lease namespace"),
            (&identity, "the identity"),
        ] {
            if value.trim().is_empty() {
                return Err(Error::Empty(what));
            }
        }
        let ordered =
            !retry_period.is_zero() && retry_period < renew_deadline && renew_deadline < lease_duration;
        let representable = lease_duration >= Duration::from_secs(1)
            && lease_duration <= Duration::from_secs(i32::MAX as u64);
        if !(ordered && representable) {
            return Err(Error::Timings {
                lease_duration,
                renew_deadline,
                retry_period,
            });
        }
        Ok(Self {
            name,
            namespace,
            identity,
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    /// Lease object name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lease namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// This process's identity in `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// How long a renewal keeps the lease for others.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// How long the leader trusts its last renewal.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// Interval between attempts.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }

    fn lease_duration_seconds(&self) -> i32 {
        let seconds = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(seconds).unwrap_or(i32::MAX)
    }
}

/// Whether and how to elect a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderElection {
    /// Single replica: this process leads from the start and never touches a Lease.
    Disabled,
    /// Compete for the configured Lease.
    Enabled(LeaseConfig),
}

/// `hostname_<random>`: unique per process, readable in `kubectl get lease`.
pub fn default_identity() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    // RandomState is seeded from the OS; mixing in the pid and time separates processes started together.
    let suffix = RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()));
    format!("{host}_{suffix:016x}")
}

/// What the Lease record says this candidate may do, by its own wall clock `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No lease, no holder, or the holder's lease has expired (or never said how long it lasts).
    Acquire,
    /// The lease is ours; renew it.
    Renew,
    /// Someone else holds a lease that has not expired.
    Follow {
        /// The holder's identity.
        holder: String,
        /// When the record expires by `now`'s clock.
        expires_at: Timestamp,
    },
}

/// Reads the record only: `renewTime` (else `acquireTime`) + `leaseDurationSeconds` against `now`.
///
/// The lease is expired at exactly its expiry instant. A record without a renewal time or with a
/// non-positive duration gives no validity and reads as [`Decision::Acquire`]; the elector still waits a
/// full lease duration of unchanged record before taking over from another holder (see the module doc).
pub fn decide(lease: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = lease else {
        return Decision::Acquire;
    };
    let holder = match spec.holder_identity.as_deref() {
        None | Some("") => return Decision::Acquire,
        Some(holder) if holder == me => return Decision::Renew,
        Some(holder) => holder,
    };
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref());
    let seconds = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|&s| s > 0);
    let (Some(renewed), Some(seconds)) = (renewed, seconds) else {
        return Decision::Acquire;
    };
    let expires_at = renewed
        .0
        .checked_add(Duration::from_secs(seconds))
        .unwrap_or(Timestamp::MAX);
    if now < expires_at {
        Decision::Follow {
            holder: holder.to_owned(),
            expires_at,
        }
    } else {
        Decision::Acquire
    }
}

/// This process's view of the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderState {
    /// This process leads; `term` counts this process's acquisitions, from 1.
    Leading {
        /// When this term was acquired (wall clock).
        since: Timestamp,
        /// Which acquisition this is.
        term: u64,
    },
    /// Another process leads, or nobody is known to (`None`).
    Following {
        /// The current holder, when known.
        holder: Option<String>,
    },
}

impl LeaderState {
    /// Whether this state is [`LeaderState::Leading`]. For a decision to write, use
    /// [`LeaderGuard::check`], which also checks the deadline.
    pub fn is_leader(&self) -> bool {
        matches!(self, Self::Leading { .. })
    }
}

/// The clocks leadership is measured with. Tests derive the wall clock from tokio's (pausable) clock.
#[derive(Debug, Clone, Copy)]
struct Clock {
    /// `None`: the system clock. `Some((wall, at))`: `wall` at tokio instant `at`, advancing with tokio.
    wall_origin: Option<(Timestamp, Instant)>,
}

impl Clock {
    const SYSTEM: Self = Self { wall_origin: None };

    fn mono(self) -> Instant {
        Instant::now()
    }

    fn wall(self) -> Timestamp {
        match self.wall_origin {
            None => Timestamp::now(),
            Some((wall, at)) => wall
                .checked_add(Instant::now().saturating_duration_since(at))
                .unwrap_or(Timestamp::MAX),
        }
    }
}

/// A term of leadership and when it ends; `None` deadlines never end (election disabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tenure {
    term: u64,
    mono_deadline: Option<Instant>,
    wall_deadline: Option<Timestamp>,
}

impl Tenure {
    fn unbounded(term: u64) -> Self {
        Self {
            term,
            mono_deadline: None,
            wall_deadline: None,
        }
    }

    /// Valid only while *both* clocks are before their deadlines: a wall clock stepped back cannot extend
    /// it, and a suspended machine (monotonic clock stopped) cannot either.
    fn is_valid(&self, mono: Instant, wall: Timestamp) -> bool {
        self.mono_deadline.is_none_or(|deadline| mono < deadline)
            && self.wall_deadline.is_none_or(|deadline| wall < deadline)
    }
}

type SharedTenure = Arc<Mutex<Option<Tenure>>>;

fn lock(tenure: &SharedTenure) -> MutexGuard<'_, Option<Tenure>> {
    // Every write is a single assignment, so a poisoned value is still consistent.
    tenure.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Cheap check for writers: call [`LeaderGuard::check`] right before each write.
#[derive(Debug, Clone)]
pub struct LeaderGuard {
    tenure: SharedTenure,
    clock: Clock,
}

impl LeaderGuard {
    /// The current term if this process leads *now*, else [`Error::NotLeader`].
    ///
    /// Compares the clocks with the renewal deadline itself, so it turns false on time even if the
    /// election task has not run (e.g. right after the process resumes from a pause).
    pub fn check(&self) -> Result<u64, Error> {
        match *lock(&self.tenure) {
            Some(tenure) if tenure.is_valid(self.clock.mono(), self.clock.wall()) => Ok(tenure.term),
            _ => Err(Error::NotLeader),
        }
    }

    /// Whether [`LeaderGuard::check`] succeeds.
    pub fn is_leader(&self) -> bool {
        self.check().is_ok()
    }
}

/// A guard whose leadership a test takes away by hand (no API server, no clocks).
#[cfg(test)]
pub(crate) struct Revocable {
    tenure: SharedTenure,
}

#[cfg(test)]
impl Revocable {
    /// A guard that leads until [`Revocable::revoke`].
    pub(crate) fn leading() -> (LeaderGuard, Self) {
        let tenure: SharedTenure = Arc::new(Mutex::new(Some(Tenure::unbounded(1))));
        let guard = LeaderGuard {
            tenure: tenure.clone(),
            clock: Clock::SYSTEM,
        };
        (guard, Self { tenure })
    }

    /// Ends the term, as a failed renewal does.
    pub(crate) fn revoke(&self) {
        *lock(&self.tenure) = None;
    }
}

/// What components hold: the published [`LeaderState`] and the write [`LeaderGuard`].
#[derive(Debug, Clone)]
pub struct Leadership {
    state: watch::Receiver<LeaderState>,
    guard: LeaderGuard,
}

impl Leadership {
    /// A receiver of state changes (e.g. to start and stop work loops; `changed().await` wakes on each).
    pub fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.state.clone()
    }

    /// The current published state.
    pub fn state(&self) -> LeaderState {
        self.state.borrow().clone()
    }

    /// The guard writers check before each write.
    pub fn guard(&self) -> LeaderGuard {
        self.guard.clone()
    }

    /// Whether this process may write now (see [`LeaderGuard::check`]).
    pub fn is_leader(&self) -> bool {
        self.guard.is_leader()
    }
}

/// The election task; build with [`Elector::new`], run with [`Elector::run`].
pub struct Elector {
    client: Client,
    election: LeaderElection,
    state: watch::Sender<LeaderState>,
    tenure: SharedTenure,
    clock: Clock,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("election", &self.election)
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// The elector and the handle components read. When `election` is disabled the handle reports
    /// leadership immediately.
    ///
    /// Give the elector its own client (e.g. built with [`crate::client::RateLimit::UNLIMITED`]) so a
    /// component's burst of requests cannot hold back renewals behind the shared rate limit.
    pub fn new(client: Client, election: LeaderElection) -> (Self, Leadership) {
        Self::with_clock(client, election, Clock::SYSTEM)
    }

    fn with_clock(client: Client, election: LeaderElection, clock: Clock) -> (Self, Leadership) {
        let (initial, tenure) = match election {
            LeaderElection::Disabled => (
                LeaderState::Leading {
                    since: clock.wall(),
                    term: 1,
                },
                Some(Tenure::unbounded(1)),
            ),
            LeaderElection::Enabled(_) => (LeaderState::Following { holder: None }, None),
        };
        let (state, receiver) = watch::channel(initial);
        let tenure = Arc::new(Mutex::new(tenure));
        let guard = LeaderGuard {
            tenure: tenure.clone(),
            clock,
        };
        (
            Self {
                client,
                election,
                state,
                tenure,
                clock,
            },
            Leadership {
                state: receiver,
                guard,
            },
        )
    }

    /// Campaigns until `shutdown` is cancelled, then stops leading and releases the lease if held.
    ///
    /// Runs until shutdown; if a binary sees it end otherwise (a panic), it should exit, since its
    /// leadership can no longer be renewed.
    pub async fn run(self, shutdown: CancellationToken) {
        let Self {
            client,
            election,
            state,
            tenure,
            clock,
        } = self;
        match election {
            LeaderElection::Disabled => {
                shutdown.cancelled().await;
                *lock(&tenure) = None;
                state.send_replace(LeaderState::Following { holder: None });
            }
            LeaderElection::Enabled(config) => {
                let span = tracing::info_span!(
                    "leader_election",
                    lease = %config.name,
                    namespace = %config.namespace,
                    identity = %config.identity,
                );
                let campaign = Campaign {
                    api: Api::namespaced(client, &config.namespace),
                    config,
                    clock,
                    state,
                    shared: tenure,
                    tenure: None,
                    terms: 0,
                    cached: None,
                    observed: None,
                };
                campaign.run(shutdown).instrument(span).await;
            }
        }
    }
}

/// The first time this candidate saw a given version of the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    resource_version: String,
    since: Instant,
}

/// Records a read of `resource_version` at `now`; returns how long the record has been unchanged.
fn observe(observed: &mut Option<Observed>, resource_version: &str, now: Instant) -> Duration {
    match observed {
        Some(seen) if seen.resource_version == resource_version => now.saturating_duration_since(seen.since),
        _ => {
            *observed = Some(Observed {
                resource_version: resource_version.to_owned(),
                since: now,
            });
            Duration::ZERO
        }
    }
}

/// Result of one acquire-or-renew attempt.
#[derive(Debug)]
enum Attempt {
    /// Our write succeeded; the lease as stored.
    Holding(Box<Lease>),
    /// Someone else holds it (or we must wait longer before taking it).
    Following(Option<String>),
    /// Someone else wrote between our read and our write.
    Contended,
}

struct Campaign {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Clock,
    state: watch::Sender<LeaderState>,
    /// What [`LeaderGuard`]s read.
    shared: SharedTenure,
    /// This task's copy of the current tenure.
    tenure: Option<Tenure>,
    terms: u64,
    /// The lease as last read or written by us (its resourceVersion is the base of our next write).
    cached: Option<Lease>,
    observed: Option<Observed>,
}

impl Campaign {
    async fn run(mut self, shutdown: CancellationToken) {
        tracing::info!(
            lease_duration = %duration::format(self.config.lease_duration),
            renew_deadline = %duration::format(self.config.renew_deadline),
            retry_period = %duration::format(self.config.retry_period),
            "campaigning for leadership"
        );
        loop {
            self.expire_if_due();
            let started = self.clock.mono();
            let started_wall = self.clock.wall();
            let budget = match self.tenure.and_then(|t| t.mono_deadline) {
                Some(deadline) => deadline.saturating_duration_since(started),
                None => self.config.renew_deadline,
            };
            let attempt = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                attempt = tokio::time::timeout(budget, self.attempt(started_wall)) => attempt,
            };
            let mut retry_now = false;
            match attempt {
                Ok(Ok(Attempt::Holding(lease))) => {
                    if let Some(version) = lease.metadata.resource_version.as_deref() {
                        observe(&mut self.observed, version, self.clock.mono());
                    }
                    self.cached = Some(*lease);
                    self.hold(started, started_wall);
                }
                Ok(Ok(Attempt::Following(holder))) => self.follow(holder),
                Ok(Ok(Attempt::Contended)) => {
                    tracing::debug!("lease changed concurrently; reading it again");
                    self.cached = None;
                    // While leading, find out at once whether we still are; otherwise wait our turn.
                    retry_now = self.tenure.is_some();
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, leading = self.tenure.is_some(), "lease request failed");
                }
                Err(_elapsed) => {
                    // The write may still land; its resourceVersion is unknown, so read before writing.
                    self.cached = None;
                    tracing::warn!(leading = self.tenure.is_some(), "lease request timed out");
                }
            }
            self.expire_if_due();
            let mut wake = if retry_now {
                self.clock.mono()
            } else {
                started + self.config.retry_period
            };
            if let Some(deadline) = self.tenure.and_then(|t| t.mono_deadline) {
                // Wake at the deadline to publish the loss on time (the guard already enforces it).
                wake = wake.min(deadline);
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(wake) => {}
            }
        }
        self.release().await;
    }

    /// Reads (unless our cached copy is current), decides, and writes.
    async fn attempt(&mut self, now: Timestamp) -> Result<Attempt, kube::Error> {
        let params = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.to_owned()),
        };
        let current = match (&self.tenure, &self.cached) {
            // Leading and our last write succeeded: renew on top of it; a conflict sends us back here.
            (Some(_), Some(lease)) => lease.clone(),
            _ => {
                let read = self.api.get_opt(&self.config.name).await?;
                let read_at = self.clock.mono();
                self.cached.clone_from(&read);
                let Some(lease) = read else {
                    let created = self.api.create(&params, &self.new_lease(now)).await;
                    return match created {
                        Ok(lease) => Ok(Attempt::Holding(Box::new(lease))),
                        Err(error) if is_conflict(&error) => Ok(Attempt::Contended),
                        Err(error) => Err(error),
                    };
                };
                let unchanged_for = observe(
                    &mut self.observed,
                    lease.metadata.resource_version.as_deref().unwrap_or(""),
                    read_at,
                );
                match decide(lease.spec.as_ref(), &self.config.identity, now) {
                    Decision::Follow { holder, .. } => return Ok(Attempt::Following(Some(holder))),
                    Decision::Renew => {}
                    Decision::Acquire => {
                        if let Some(holder) = other_holder(&lease, &self.config.identity) {
                            let record_duration = lease
                                .spec
                                .as_ref()
                                .and_then(|s| s.lease_duration_seconds)
                                .and_then(|s| u64::try_from(s).ok())
                                .map_or(Duration::ZERO, Duration::from_secs);
                            if unchanged_for < self.config.lease_duration.max(record_duration) {
                                return Ok(Attempt::Following(Some(holder)));
                            }
                            tracing::info!(previous = %holder, "lease expired; taking over");
                        }
                    }
                }
                lease
            }
        };
        if current.metadata.resource_version.is_none() {
            // Without a resourceVersion a PUT would overwrite unconditionally; never do that.
            self.cached = None;
            return Ok(Attempt::Contended);
        }
        let desired = self.renewed(current, now);
        match self.api.replace(&self.config.name, &params, &desired).await {
            Ok(lease) => Ok(Attempt::Holding(Box::new(lease))),
            Err(error) if is_conflict(&error) => Ok(Attempt::Contended),
            Err(error) => Err(error),
        }
    }

    fn new_lease(&self, now: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.lease_duration_seconds()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    /// `current` with us as holder, renewed at `now`; fields we do not own (labels, preferredHolder,
    /// strategy) are kept.
    fn renewed(&self, mut lease: Lease, now: Timestamp) -> Lease {
        let previous = lease.spec.take().unwrap_or_default();
        let ours = previous.holder_identity.as_deref() == Some(self.config.identity.as_str());
        let continuing = ours && self.tenure.is_some();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration_seconds()),
            acquire_time: if continuing {
                previous.acquire_time.clone()
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: if ours {
                previous.lease_transitions
            } else {
                Some(previous.lease_transitions.unwrap_or(0).saturating_add(1))
            },
            ..previous
        });
        lease
    }

    /// Our write landed; the renewal counts from when it was sent.
    fn hold(&mut self, sent: Instant, sent_wall: Timestamp) {
        let renew_deadline = self.config.renew_deadline;
        let mono_deadline = sent + renew_deadline;
        let wall_deadline = sent_wall.checked_add(renew_deadline).unwrap_or(Timestamp::MAX);
        let term = match self.tenure {
            Some(tenure) => tenure.term,
            None => self.terms + 1,
        };
        let tenure = Tenure {
            term,
            mono_deadline: Some(mono_deadline),
            wall_deadline: Some(wall_deadline),
        };
        if !tenure.is_valid(self.clock.mono(), self.clock.wall()) {
            tracing::warn!("lease write confirmed after the renew deadline; not leading on it");
            self.stop_leading(None);
            return;
        }
        *lock(&self.shared) = Some(tenure);
        if self.tenure.replace(tenure).is_none() {
            self.terms = term;
            tracing::info!(term, "became leader");
            self.publish(LeaderState::Leading {
                since: sent_wall,
                term,
            });
        }
    }

    fn follow(&mut self, holder: Option<String>) {
        if self.tenure.is_some() {
            tracing::warn!(
                holder = holder.as_deref().unwrap_or(""),
                "lease taken by another process"
            );
        }
        self.stop_leading(holder);
    }

    fn expire_if_due(&mut self) {
        if self
            .tenure
            .is_some_and(|t| !t.is_valid(self.clock.mono(), self.clock.wall()))
        {
            tracing::warn!(
                renew_deadline = %duration::format(self.config.renew_deadline),
                "could not renew the lease in time; stopped leading"
            );
            self.stop_leading(None);
        }
    }

    /// Guards turn false first, then the state is published.
    fn stop_leading(&mut self, holder: Option<String>) {
        if self.tenure.take().is_some() {
            *lock(&self.shared) = None;
        }
        self.publish(LeaderState::Following { holder });
    }

    fn publish(&self, next: LeaderState) {
        self.state.send_if_modified(|current| {
            let changed = *current != next;
            if changed {
                *current = next;
            }
            changed
        });
    }

    /// Stops leading, then hands the lease back (holder cleared, 1 s duration) if we still held it, so a
    /// successor need not wait for expiry. Safe to write after stopping: the write is conditional on the
    /// resourceVersion of a record naming us.
    async fn release(mut self) {
        let held = self
            .tenure
            .is_some_and(|t| t.is_valid(self.clock.mono(), self.clock.wall()));
        self.stop_leading(None);
        if !held {
            return;
        }
        let cached = self.cached.take();
        let released = tokio::time::timeout(self.config.renew_deadline, async {
            let lease = match cached {
                Some(lease) => Some(lease),
                None => self.api.get_opt(&self.config.name).await?,
            };
            let Some(mut lease) = lease.filter(|lease| {
                lease.metadata.resource_version.is_some()
                    && lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                        == Some(self.config.identity.as_str())
            }) else {
                return Ok(false);
            };
            let now = self.clock.wall();
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
                spec.lease_duration_seconds = Some(1);
                spec.acquire_time = Some(MicroTime(now));
                spec.renew_time = Some(MicroTime(now));
            }
            let params = PostParams {
                dry_run: false,
                field_manager: Some(FIELD_MANAGER.to_owned()),
            };
            self.api
                .replace(&self.config.name, &params, &lease)
                .await
                .map(|_| true)
        })
        .await;
        match released {
            Ok(Ok(true)) => tracing::info!("released the lease"),
            Ok(Ok(false)) => tracing::info!("lease no longer ours; nothing to release"),
            Ok(Err(error)) => tracing::warn!(%error, "could not release the lease; it will expire"),
            Err(_elapsed) => tracing::warn!("releasing the lease timed out; it will expire"),
        }
    }
}

fn other_holder(lease: &Lease, me: &str) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty() && *holder != me)
        .map(str::to_owned)
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

#[cfg(test)]
mod tests;
