//! Tests for the lease decision (pure) and the elector against an in-memory API server that implements
//! Lease GET/POST/PUT with resourceVersion conflicts, on tokio's paused clock.

use std::{
    convert::Infallible,
    sync::atomic::{AtomicUsize, Ordering},
};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;

use super::*;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).expect("valid timestamp")
}

fn spec(holder: Option<&str>, renewed: Option<i64>, seconds: Option<i32>) -> LeaseSpec {
    LeaseSpec {
        holder_identity: holder.map(str::to_owned),
        renew_time: renewed.map(|s| MicroTime(at(s))),
        lease_duration_seconds: seconds,
        ..LeaseSpec::default()
    }
}

// ---------------------------------------------------------------------------------------------
// decide
// ---------------------------------------------------------------------------------------------

#[test]
fn no_lease_is_acquired() {
    assert_eq!(decide(None, "me", at(0)), Decision::Acquire);
}

#[test]
fn vacant_lease_is_acquired_even_if_recently_renewed() {
    assert_eq!(
        decide(Some(&spec(None, Some(0), Some(15))), "me", at(1)),
        Decision::Acquire
    );
    assert_eq!(
        decide(Some(&spec(Some(""), Some(0), Some(15))), "me", at(1)),
        Decision::Acquire
    );
}

#[test]
fn own_lease_is_renewed_whether_or_not_expired() {
    assert_eq!(
        decide(Some(&spec(Some("me"), Some(0), Some(15))), "me", at(1)),
        Decision::Renew
    );
    assert_eq!(
        decide(Some(&spec(Some("me"), Some(0), Some(15))), "me", at(100)),
        Decision::Renew
    );
    assert_eq!(
        decide(Some(&spec(Some("me"), None, None)), "me", at(0)),
        Decision::Renew
    );
}

#[test]
fn valid_foreign_lease_is_followed_until_it_expires() {
    let lease = spec(Some("other"), Some(0), Some(15));
    let follow = Decision::Follow {
        holder: "other".to_owned(),
        expires_at: at(15),
    };
    assert_eq!(decide(Some(&lease), "me", at(0)), follow);
    assert_eq!(decide(Some(&lease), "me", at(14)), follow);
    // Expired at exactly renewTime + duration.
    assert_eq!(decide(Some(&lease), "me", at(15)), Decision::Acquire);
    assert_eq!(decide(Some(&lease), "me", at(1_000)), Decision::Acquire);
}

#[test]
fn identity_comparison_is_exact() {
    let lease = spec(Some("me-2"), Some(0), Some(15));
    assert!(matches!(
        decide(Some(&lease), "me", at(1)),
        Decision::Follow { .. }
    ));
}

#[test]
fn acquire_time_stands_in_for_a_missing_renew_time() {
    let lease = LeaseSpec {
        acquire_time: Some(MicroTime(at(10))),
        ..spec(Some("other"), None, Some(15))
    };
    assert_eq!(
        decide(Some(&lease), "me", at(20)),
        Decision::Follow {
            holder: "other".to_owned(),
            expires_at: at(25)
        }
    );
    assert_eq!(decide(Some(&lease), "me", at(25)), Decision::Acquire);
}

#[test]
fn records_without_validity_read_as_acquirable() {
    assert_eq!(
        decide(Some(&spec(Some("other"), None, Some(15))), "me", at(0)),
        Decision::Acquire
    );
    assert_eq!(
        decide(Some(&spec(Some("other"), Some(0), None)), "me", at(0)),
        Decision::Acquire
    );
    assert_eq!(
        decide(Some(&spec(Some("other"), Some(0), Some(0))), "me", at(0)),
        Decision::Acquire
    );
    assert_eq!(
        decide(Some(&spec(Some("other"), Some(0), Some(-5))), "me", at(0)),
        Decision::Acquire
    );
}

#[test]
fn renew_time_ahead_of_our_clock_is_honoured_from_the_record() {
    // The holder's clock runs ahead of ours: the record stays valid longer by our clock, never shorter.
    let lease = spec(Some("other"), Some(60), Some(15));
    assert_eq!(
        decide(Some(&lease), "me", at(0)),
        Decision::Follow {
            holder: "other".to_owned(),
            expires_at: at(75)
        }
    );
}

#[test]
fn huge_durations_saturate_instead_of_overflowing() {
    let lease = LeaseSpec {
        renew_time: Some(MicroTime(Timestamp::MAX)),
        ..spec(Some("other"), None, Some(i32::MAX))
    };
    assert_eq!(
        decide(Some(&lease), "me", at(0)),
        Decision::Follow {
            holder: "other".to_owned(),
            expires_at: Timestamp::MAX
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Pure pieces of the elector
// ---------------------------------------------------------------------------------------------

#[test]
fn tenure_needs_both_clocks_before_their_deadlines() {
    let t0 = Instant::now();
    let tenure = Tenure {
        term: 1,
        mono_deadline: Some(t0 + Duration::from_secs(10)),
        wall_deadline: Some(at(10)),
    };
    assert!(tenure.is_valid(t0, at(0)));
    assert!(tenure.is_valid(t0 + Duration::from_millis(9_999), at(9)));
    assert!(
        !tenure.is_valid(t0 + Duration::from_secs(10), at(0)),
        "monotonic deadline reached"
    );
    assert!(
        !tenure.is_valid(t0, at(10)),
        "wall clock jumped forward (or the machine was suspended)"
    );
    assert!(
        tenure.is_valid(t0, at(-3_600)),
        "a wall clock stepped back does not end it..."
    );
    assert!(
        !tenure.is_valid(t0 + Duration::from_secs(11), at(-3_600)),
        "...nor extend it"
    );
    assert!(Tenure::unbounded(1).is_valid(t0 + Duration::from_secs(1 << 30), Timestamp::MAX));
}

#[test]
fn observation_counts_time_since_the_version_first_seen() {
    let t0 = Instant::now();
    let mut observed = None;
    assert_eq!(observe(&mut observed, "1", t0), Duration::ZERO);
    assert_eq!(
        observe(&mut observed, "1", t0 + Duration::from_secs(5)),
        Duration::from_secs(5)
    );
    assert_eq!(
        observe(&mut observed, "2", t0 + Duration::from_secs(6)),
        Duration::ZERO
    );
    assert_eq!(
        observe(&mut observed, "2", t0 + Duration::from_secs(21)),
        Duration::from_secs(15)
    );
    // An earlier instant (reads racing) does not underflow.
    assert_eq!(observe(&mut observed, "2", t0), Duration::ZERO);
}

#[test]
fn config_validation() {
    let secs = Duration::from_secs;
    let config =
        |lease, renew, retry| LeaseConfig::new("l".into(), "ns".into(), "me".into(), lease, renew, retry);
    assert!(config(secs(15), secs(10), secs(2)).is_ok());
    for (lease, renew, retry) in [
        (secs(10), secs(10), secs(2)),
        (secs(15), secs(2), secs(2)),
        (secs(15), secs(10), Duration::ZERO),
        (secs(15), secs(20), secs(2)),
        (
            Duration::from_millis(900),
            Duration::from_millis(500),
            Duration::from_millis(100),
        ),
        (secs(i32::MAX as u64 + 1), secs(10), secs(2)),
    ] {
        assert!(
            matches!(config(lease, renew, retry), Err(Error::Timings { .. })),
            "{lease:?} {renew:?} {retry:?}"
        );
    }
    let empty = LeaseConfig::new(" ".into(), "ns".into(), "me".into(), secs(15), secs(10), secs(2));
    assert_eq!(empty, Err(Error::Empty("the lease name")));
    let empty = LeaseConfig::new(
        "l".into(),
        "ns".into(),
        String::new(),
        secs(15),
        secs(10),
        secs(2),
    );
    assert_eq!(empty, Err(Error::Empty("the identity")));
}

#[test]
fn lease_duration_is_written_in_whole_seconds_rounded_up() {
    let config = |lease| {
        LeaseConfig::new(
            "l".into(),
            "ns".into(),
            "me".into(),
            lease,
            Duration::from_millis(800),
            Duration::from_millis(100),
        )
        .expect("valid")
        .lease_duration_seconds()
    };
    assert_eq!(config(Duration::from_secs(15)), 15);
    assert_eq!(config(Duration::from_millis(1_500)), 2);
}

#[test]
fn default_identities_name_the_host_and_differ() {
    let a = default_identity();
    let b = default_identity();
    assert_ne!(a, b);
    let (host, suffix) = a.rsplit_once('_').expect("host_suffix");
    assert!(!host.is_empty());
    assert_eq!(suffix.len(), 16);
}

// ---------------------------------------------------------------------------------------------
// The elector against an in-memory API server
// ---------------------------------------------------------------------------------------------

const NAMESPACE: &str = "kai-scheduler";
const NAME: &str = "kai-scheduler";
const ITEM: &str = "/apis/coordination.k8s.io/v1/namespaces/kai-scheduler/leases/kai-scheduler";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/kai-scheduler/leases";

/// The server's one Lease and its write history.
#[derive(Debug, Default)]
struct Store {
    lease: Option<Lease>,
    version: u64,
    /// Holder after each successful write.
    holders: Vec<Option<String>>,
}

/// How one client's link to the server misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Healthy,
    /// Requests reach the server, but responses are held until the link heals.
    HoldResponses,
}

#[derive(Clone)]
struct Link {
    store: Arc<Mutex<Store>>,
    fault: watch::Receiver<Fault>,
    requests: Arc<AtomicUsize>,
}

fn status(code: StatusCode, reason: &str) -> (StatusCode, serde_json::Value) {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "reason": reason, "code": code.as_u16(), "message": reason,
    });
    (code, body)
}

fn store_lease(store: &mut Store, mut lease: Lease) -> serde_json::Value {
    store.version += 1;
    lease.metadata.resource_version = Some(store.version.to_string());
    store
        .holders
        .push(lease.spec.as_ref().and_then(|s| s.holder_identity.clone()));
    store.lease = Some(lease.clone());
    serde_json::to_value(&lease).expect("lease json")
}

fn handle(store: &mut Store, method: &Method, path: &str, body: &[u8]) -> (StatusCode, serde_json::Value) {
    match (method, path) {
        (&Method::GET, ITEM) => match &store.lease {
            Some(lease) => (StatusCode::OK, serde_json::to_value(lease).expect("lease json")),
            None => status(StatusCode::NOT_FOUND, "NotFound"),
        },
        (&Method::POST, COLLECTION) => {
            if store.lease.is_some() {
                return status(StatusCode::CONFLICT, "AlreadyExists");
            }
            let lease: Lease = serde_json::from_slice(body).expect("lease body");
            assert_eq!(
                lease.metadata.resource_version, None,
                "create must not carry a resourceVersion"
            );
            (StatusCode::CREATED, store_lease(store, lease))
        }
        (&Method::PUT, ITEM) => {
            let lease: Lease = serde_json::from_slice(body).expect("lease body");
            let Some(sent) = lease.metadata.resource_version.clone() else {
                panic!("the elector sent an unconditional update");
            };
            let current = store
                .lease
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            match current {
                None => status(StatusCode::NOT_FOUND, "NotFound"),
                Some(current) if current != sent => status(StatusCode::CONFLICT, "Conflict"),
                Some(_) => (StatusCode::OK, store_lease(store, lease)),
            }
        }
        _ => panic!("unexpected request {method} {path}"),
    }
}

impl Link {
    async fn serve(self, request: Request<Body>) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let (parts, body) = request.into_parts();
        let body = body.collect_bytes().await.expect("request body");
        let (code, json) = {
            let mut store = self.store.lock().expect("store");
            handle(&mut store, &parts.method, parts.uri.path(), &body)
        };
        let mut fault = self.fault.clone();
        // Held responses are delivered once the link heals (or never, if the caller gave up).
        let _ = fault.wait_for(|f| *f == Fault::Healthy).await;
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(json.to_string().into_bytes()))
            .expect("response")
    }
}

/// One simulated process: its client, elector handle and controls.
struct Node {
    leadership: Leadership,
    fault: watch::Sender<Fault>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    requests: Arc<AtomicUsize>,
}

fn lease_config(identity: &str) -> LeaseConfig {
    LeaseConfig::new(
        NAME.to_owned(),
        NAMESPACE.to_owned(),
        identity.to_owned(),
        Duration::from_secs(15),
        Duration::from_secs(10),
        Duration::from_secs(2),
    )
    .expect("valid config")
}

/// A wall clock that follows tokio's paused clock, offset by `skew`.
fn test_clock(skew_seconds: i64) -> Clock {
    Clock {
        wall_origin: Some((at(skew_seconds), Instant::now())),
    }
}

fn start(store: &Arc<Mutex<Store>>, election: LeaderElection, skew_seconds: i64) -> Node {
    let (fault, fault_rx) = watch::channel(Fault::Healthy);
    let requests = Arc::new(AtomicUsize::new(0));
    let link = Link {
        store: store.clone(),
        fault: fault_rx,
        requests: requests.clone(),
    };
    let service = tower::service_fn(move |request: Request<Body>| {
        let link = link.clone();
        async move { Ok::<_, Infallible>(link.serve(request).await) }
    });
    let client = Client::new(service, NAMESPACE);
    let (elector, leadership) = Elector::with_clock(client, election, test_clock(skew_seconds));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(elector.run(shutdown.clone()));
    Node {
        leadership,
        fault,
        shutdown,
        task,
        requests,
    }
}

fn candidate(store: &Arc<Mutex<Store>>, identity: &str, skew_seconds: i64) -> Node {
    start(
        store,
        LeaderElection::Enabled(lease_config(identity)),
        skew_seconds,
    )
}

/// Advances the paused clock in 50 ms steps, asserting at each step that at most one node may write.
async fn run_for(duration: Duration, nodes: &[&Node]) {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let leaders = nodes.iter().filter(|node| node.leadership.is_leader()).count();
        assert!(leaders <= 1, "two processes may write at once");
    }
}

fn holder(store: &Arc<Mutex<Store>>) -> Option<String> {
    let store = store.lock().expect("store");
    store
        .lease
        .as_ref()
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.clone())
}

#[tokio::test(start_paused = true)]
async fn disabled_election_leads_at_once_and_never_calls_the_api() {
    let store = Arc::new(Mutex::new(Store::default()));
    let node = start(&store, LeaderElection::Disabled, 0);
    assert!(node.leadership.is_leader());
    assert!(matches!(
        node.leadership.state(),
        LeaderState::Leading { term: 1, .. }
    ));
    run_for(Duration::from_secs(60), &[&node]).await;
    assert!(node.leadership.is_leader());
    assert_eq!(node.requests.load(Ordering::SeqCst), 0);

    node.shutdown.cancel();
    node.task.await.expect("elector ends");
    assert!(!node.leadership.is_leader(), "no writes after shutdown");
    assert_eq!(node.requests.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn sole_candidate_creates_the_lease_and_keeps_renewing_it() {
    let store = Arc::new(Mutex::new(Store::default()));
    let node = candidate(&store, "a", 0);
    assert!(
        !node.leadership.is_leader(),
        "not leading before the lease is written"
    );
    let mut states = node.leadership.subscribe();

    run_for(Duration::from_millis(100), &[&node]).await;
    assert!(node.leadership.is_leader());
    assert!(states.has_changed().expect("sender alive"));
    let LeaderState::Leading { term, .. } = states.borrow_and_update().clone() else {
        panic!("leading")
    };
    assert_eq!(term, 1);

    run_for(Duration::from_secs(60), &[&node]).await;
    assert!(node.leadership.is_leader());
    assert!(
        !states.has_changed().expect("sender alive"),
        "renewals do not republish the state"
    );
    let store_guard = store.lock().expect("store");
    // One create, then one renewal per retry period.
    assert!(
        (29..=32).contains(&store_guard.holders.len()),
        "{} writes",
        store_guard.holders.len()
    );
    let spec = store_guard
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(
        spec.acquire_time < spec.renew_time,
        "acquireTime stays while renewTime moves"
    );
}

#[tokio::test(start_paused = true)]
async fn second_candidate_follows_a_live_leader() {
    let store = Arc::new(Mutex::new(Store::default()));
    let a = candidate(&store, "a", 0);
    run_for(Duration::from_millis(100), &[&a]).await;
    let b = candidate(&store, "b", 0);
    run_for(Duration::from_secs(60), &[&a, &b]).await;
    assert!(a.leadership.is_leader());
    assert_eq!(
        b.leadership.state(),
        LeaderState::Following {
            holder: Some("a".to_owned())
        }
    );
}

#[tokio::test(start_paused = true)]
async fn simultaneous_candidates_elect_exactly_one() {
    let store = Arc::new(Mutex::new(Store::default()));
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|id| candidate(&store, id, 0))
        .collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    run_for(Duration::from_secs(30), &refs).await;
    assert_eq!(nodes.iter().filter(|n| n.leadership.is_leader()).count(), 1);
}

#[tokio::test(start_paused = true)]
async fn partitioned_leader_stops_before_a_successor_starts() {
    let store = Arc::new(Mutex::new(Store::default()));
    let a = candidate(&store, "a", 0);
    run_for(Duration::from_millis(100), &[&a]).await;
    // b's wall clock runs an hour ahead: by the record alone it would take over at once.
    let b = candidate(&store, "b", 3_600);
    run_for(Duration::from_secs(10), &[&a, &b]).await;
    assert!(a.leadership.is_leader());
    assert!(!b.leadership.is_leader());

    // a's renewals still land but it never hears back (the riskiest partition).
    a.fault.send_replace(Fault::HoldResponses);
    let cut = Instant::now();
    let mut a_stopped = None;
    let mut b_started = None;
    while b_started.is_none() {
        run_for(Duration::from_millis(50), &[&a, &b]).await;
        if a_stopped.is_none() && !a.leadership.is_leader() {
            a_stopped = Some(Instant::now() - cut);
        }
        if b.leadership.is_leader() {
            b_started = Some(Instant::now() - cut);
        }
        assert!(
            Instant::now() - cut < Duration::from_secs(60),
            "b never took over"
        );
    }
    let (a_stopped, b_started) = (a_stopped.expect("a stopped"), b_started.expect("b started"));
    assert!(
        a_stopped <= Duration::from_secs(10),
        "a stops within its renew deadline: {a_stopped:?}"
    );
    assert!(
        b_started >= Duration::from_secs(15),
        "b waits a full lease duration: {b_started:?}"
    );
    assert!(b_started <= Duration::from_secs(22), "{b_started:?}");
    assert_eq!(a.leadership.state(), LeaderState::Following { holder: None });

    // The link heals: a's late confirmations must not make it leader again.
    a.fault.send_replace(Fault::Healthy);
    run_for(Duration::from_secs(30), &[&a, &b]).await;
    assert!(b.leadership.is_leader());
    assert_eq!(
        a.leadership.state(),
        LeaderState::Following {
            holder: Some("b".to_owned())
        }
    );
    assert_eq!(holder(&store), Some("b".to_owned()));
    let transitions = store
        .lock()
        .expect("store")
        .lease
        .as_ref()
        .and_then(|l| l.spec.as_ref()?.lease_transitions);
    assert_eq!(transitions, Some(1));
}

#[tokio::test(start_paused = true)]
async fn guard_turns_false_on_time_even_if_the_elector_never_runs_again() {
    // What a SIGSTOPped process sees on resume: the elector has not run, but the deadline has passed.
    let store = Arc::new(Mutex::new(Store::default()));
    let a = candidate(&store, "a", 0);
    run_for(Duration::from_millis(100), &[&a]).await;
    let guard = a.leadership.guard();
    assert_eq!(guard.check(), Ok(1));
    a.task.abort();
    let _ = a.task.await;
    tokio::time::advance(Duration::from_millis(9_800)).await;
    assert_eq!(
        guard.check(),
        Ok(1),
        "still within the renew deadline of the last renewal"
    );
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(guard.check(), Err(Error::NotLeader));
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_hands_over_within_a_retry_period() {
    let store = Arc::new(Mutex::new(Store::default()));
    let mut a = candidate(&store, "a", 0);
    run_for(Duration::from_millis(100), &[&a]).await;
    let b = candidate(&store, "b", 0);
    run_for(Duration::from_secs(5), &[&a, &b]).await;
    assert!(a.leadership.is_leader());

    a.shutdown.cancel();
    let stopping = Instant::now();
    (&mut a.task).await.expect("elector ends");
    assert!(!a.leadership.is_leader());
    assert_eq!(holder(&store), None, "released");
    while !b.leadership.is_leader() {
        run_for(Duration::from_millis(50), &[&a, &b]).await;
    }
    assert!(
        Instant::now() - stopping <= Duration::from_millis(2_100),
        "took over after a release"
    );
    assert!(matches!(
        b.leadership.state(),
        LeaderState::Leading { term: 1, .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn follower_shutdown_leaves_the_lease_alone() {
    let store = Arc::new(Mutex::new(Store::default()));
    let a = candidate(&store, "a", 0);
    run_for(Duration::from_millis(100), &[&a]).await;
    let b = candidate(&store, "b", 0);
    run_for(Duration::from_secs(5), &[&a, &b]).await;
    b.shutdown.cancel();
    b.task.await.expect("elector ends");
    run_for(Duration::from_secs(5), &[&a]).await;
    assert!(a.leadership.is_leader());
    assert_eq!(holder(&store), Some("a".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn crashed_leader_is_replaced_after_the_lease_expires() {
    let store = Arc::new(Mutex::new(Store::default()));
    let a = candidate(&store, "a", 0);
    run_for(Duration::from_millis(100), &[&a]).await;
    let b = candidate(&store, "b", 0);
    run_for(Duration::from_secs(3), &[&a, &b]).await;
    a.task.abort(); // no release: a crash
    let crashed = Instant::now();
    while !b.leadership.is_leader() {
        run_for(Duration::from_millis(50), &[&a, &b]).await;
        assert!(
            Instant::now() - crashed < Duration::from_secs(30),
            "b never took over"
        );
    }
    let waited = Instant::now() - crashed;
    assert!(
        waited >= Duration::from_secs(13) && waited <= Duration::from_secs(20),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn leader_that_finds_the_lease_taken_follows_at_once() {
    let store = Arc::new(Mutex::new(Store::default()));
    let a = candidate(&store, "a", 0);
    run_for(Duration::from_millis(100), &[&a]).await;
    assert!(a.leadership.is_leader());
    // An operator hands the lease to someone else behind a's back.
    {
        let mut store = store.lock().expect("store");
        let mut lease = store.lease.clone().expect("lease");
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = Some("operator".to_owned());
            spec.renew_time = Some(MicroTime(at(10)));
            spec.lease_duration_seconds = Some(3_600);
        }
        store_lease(&mut store, lease);
    }
    run_for(Duration::from_millis(2_100), &[&a]).await;
    assert_eq!(
        a.leadership.state(),
        LeaderState::Following {
            holder: Some("operator".to_owned())
        }
    );
    assert!(!a.leadership.is_leader());
}
