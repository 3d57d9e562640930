//! The differential test against kube-scheduler v1.20.2 (issue 13): the same seeded pods, on the same
//! cluster state, go to kube-scheduler and to this scheduler; the pods bound must be the same, where one
//! node is feasible it must be the node chosen, and every placement must pass the independent checker.
//! Why the comparison is exact: `e2e::differential` (module doc).
//!
//! Environment:
//! - `KAI_DIFF_SEED`: the seed (decimal); without it a fresh one, printed, so a run can be repeated.
//! - `KAI_DIFF_PODS`: probes per scheduler (default 500; the larger local mode, e.g. 5000, also doubles
//!   the worlds to 50).
//! - `KAI_DIFF_WORLDS`: independent worlds, i.e. probes per round (default 25, or 50 above 500 pods).
//! - `KAI_DIFF_RULES`: `all` (default: the probes of a quarter of the rounds also have claims and
//!   volumes, issue 14),
//!   `volumes` (all rules, every probe with claims), `pod-rules` (the same pods as `all` without their
//!   claims: the runs before issue 14) or `supported` (only the rules honoured before issue 13:
//!   resources, node selector, required node affinity, taints, cordons; no volumes).
//!
//! Run: `cargo test -p e2e --test differential -- --nocapture` (the figures are printed).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::keys;
use e2e::TestEnv;
use e2e::differential::compare::describe;
use e2e::differential::generate::{PHASE_LABEL, WORLD_LABEL, phase as phase_label};
use e2e::differential::storage::{self, Naming, RUN_LABEL};
use e2e::differential::{
    Config, Names, Outcome, ProbeResult, Release, Rules, Scenario, Side, State, Storage, Summary,
    binding_faults, evaluate, generate,
};
use e2e::harness::{PID_LABEL, TEST_LABEL};
use e2e::kube_scheduler::KubeScheduler;
use e2e::workloads::{build, start_scheduler};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const ENV_SEED: &str = "KAI_DIFF_SEED";
const ENV_PODS: &str = "KAI_DIFF_PODS";
const ENV_WORLDS: &str = "KAI_DIFF_WORLDS";
const ENV_RULES: &str = "KAI_DIFF_RULES";
/// How long a phase may take before its undecided probes are recorded as such.
const PHASE_TIMEOUT: Duration = Duration::from_secs(30);
/// Concurrent API writes of the test.
const WRITERS: usize = 16;
/// Disagreeing probes printed in full (all are written to the JSON file).
const PRINTED: usize = 25;
/// How long the storage may take to be ready (volumes made available and claims bound before their
/// probes bound by the PV controller, which writes each in turn): this, plus [`STORAGE_TIMEOUT_EACH`]
/// per object.
const STORAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// See [`STORAGE_TIMEOUT`].
const STORAGE_TIMEOUT_EACH: Duration = Duration::from_millis(50);
/// Time for the schedulers' watches of volumes, claims and classes to take in the round's storage
/// once the API server has it: those watches are not the pods' watch, so nothing orders them before
/// the probes.
const STORAGE_SETTLE: Duration = Duration::from_millis(500);
/// How long a bound probe's claims may take to show as bound (the PV controller finishes the binding;
/// both schedulers wait for it before binding the pod, so this is a margin only).
const CLAIMS_BOUND_TIMEOUT: Duration = Duration::from_secs(5);

fn config() -> anyhow::Result<Config> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let seed = match var(ENV_SEED) {
        Some(s) => s.parse().with_context(|| format!("{ENV_SEED}={s}"))?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
            .unwrap_or(1),
    };
    let probes: usize = match var(ENV_PODS) {
        Some(s) => s.parse().with_context(|| format!("{ENV_PODS}={s}"))?,
        None => 500,
    };
    let worlds = match var(ENV_WORLDS) {
        Some(s) => s.parse().with_context(|| format!("{ENV_WORLDS}={s}"))?,
        None if probes > 500 => 50,
        None => 25,
    };
    let rules = Rules::parse(var(ENV_RULES).as_deref().unwrap_or("all"))?;
    Ok(Config {
        seed,
        probes,
        worlds,
        rules,
    })
}

/// Both schedulers agree with each other and with the checker on every probe.
#[tokio::test]
async fn kai_scheduler_binds_what_kube_scheduler_binds_under_every_constraint() -> anyhow::Result<()> {
    let config = config()?;
    let reproduce = format!(
        "{ENV_SEED}={} {ENV_PODS}={} {ENV_WORLDS}={} {ENV_RULES}={} cargo test -p e2e --test differential -- --nocapture",
        config.seed,
        config.probes,
        config.worlds,
        config.rules.name(),
    );
    println!("differential run: {reproduce}");
    build().await?;
    let t = TestEnv::start("differential").await?;
    let second = format!("{}-b", t.namespace());
    let outcome = async {
        create_namespace(&t, &second).await?;
        run(&t, &second, &config).await
    }
    .await;
    // Cleaned up before any assertion: the second namespace and the cluster-scoped storage objects
    // are the test's own to remove.
    let removed = e2e::harness::teardown(t.client(), &second).await;
    let storage_removed = remove_storage(&t, &format!("{RUN_LABEL}={}", t.namespace())).await;
    let finished = t.finish().await;
    let (summary, report) = outcome?;
    removed?;
    storage_removed?;
    finished?;
    println!("{report}");
    assert!(
        summary.all_agree(),
        "{} of {} probes disagree (figures and pods above); reproduce with: {reproduce}",
        summary.probes - summary.agreed,
        summary.probes
    );
    Ok(())
}

/// A second namespace, labelled as test namespaces are (so `cargo xtask e2e-clean` finds leftovers).
async fn create_namespace(t: &TestEnv, name: &str) -> anyhow::Result<()> {
    let labels = BTreeMap::from([
        (TEST_LABEL.to_owned(), "differential".to_owned()),
        (PID_LABEL.to_owned(), std::process::id().to_string()),
    ]);
    let object = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(t.client().clone())
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    // Pods need the namespace's default ServiceAccount (and, before 1.24, its token).
    let needs_secret = !t.server_version().at_least(24);
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(t.client().clone(), name);
    t.wait_until(
        "the second namespace's ServiceAccount",
        Duration::from_secs(60),
        async || {
            Ok(accounts
                .get_opt("default")
                .await?
                .filter(|sa| !needs_secret || sa.secrets.as_ref().is_some_and(|s| !s.is_empty())))
        },
    )
    .await?;
    Ok(())
}

/// Timing of a run.
#[derive(Default)]
struct Clock {
    setup: Duration,
    prebound: Duration,
    /// Storage made while other rounds are played.
    storage_beside: Duration,
    /// Storage made in the rounds' own time.
    storage: Duration,
    kube: Duration,
    ours: Duration,
    /// Phases of the rounds with claims (part of `kube` and `ours`).
    kube_with_claims: Duration,
    ours_with_claims: Duration,
}

/// What playing a round needs.
struct Play<'a> {
    t: &'a TestEnv,
    names: &'a Names,
    nodes: &'a [Node],
    kube_name: &'a str,
    pool: &'a BTreeMap<String, String>,
}

impl Play<'_> {
    /// Plays round `r`: its claims, its pre-bound pods, each side's phase, and the verdicts.
    async fn round(
        &self,
        round: &e2e::differential::generate::Round,
        r: usize,
        clock: &mut Clock,
        results: &mut Vec<ProbeResult>,
    ) -> anyhow::Result<()> {
        let (t, names) = (self.t, self.names);
        // The round's claims first: pre-binding gives the schedulers' watches time to take them in.
        let step = Instant::now();
        create_round_claims(t, names, round).await?;
        clock.storage += step.elapsed();
        let created = Instant::now();
        prebind(t, round).await?;
        clock.prebound += created.elapsed();
        let with_claims = round.probes.iter().any(|p| !p.storage.is_empty());
        if with_claims {
            let settle = STORAGE_SETTLE.saturating_sub(created.elapsed());
            tokio::time::sleep(settle).await;
            clock.storage += settle;
        }
        let step = Instant::now();
        let kube = phase(t, names, round, r, Side::Kube, self.kube_name, self.pool).await?;
        clock.kube += step.elapsed();
        if with_claims {
            clock.kube_with_claims += step.elapsed();
        }
        let step = Instant::now();
        let ours = phase(t, names, round, r, Side::Ours, keys::SCHEDULER_NAME, self.pool).await?;
        clock.ours += step.elapsed();
        if with_claims {
            clock.ours_with_claims += step.elapsed();
        }
        for probe in &round.probes {
            results.push(judge(probe, self.nodes, &kube, &ours)?);
        }
        Ok(())
    }
}

async fn run(t: &TestEnv, second: &str, config: &Config) -> anyhow::Result<(Summary, String)> {
    let started = Instant::now();
    let mut clock = Clock::default();
    let ns = t.namespace().to_owned();
    let names = Names {
        namespaces: [ns.clone(), second.to_owned()],
        prefix: ns.clone(),
    };
    let scenario = generate(config, &names);
    let pool = BTreeMap::from([(keys::NODE_POOL.to_owned(), ns.clone())]);
    let nodes = create_nodes(t, &scenario).await?;
    let kube_name = format!("kube-{ns}");
    let log_dir = e2e::paths::target_dir().join("e2e-logs").join(&ns);
    let kubeconfig: PathBuf = t.kubeconfig_env().into();
    let _kube_scheduler =
        KubeScheduler::start(&kubeconfig, &kube_name, 500, &log_dir.join("kube-scheduler"))?;
    start_scheduler(t, "scheduler", &[])?;
    clock.setup = started.elapsed();

    let play = Play {
        t,
        names: &names,
        nodes: &nodes,
        kube_name: &kube_name,
        pool: &pool,
    };
    let mut results = Vec::new();
    // Each round's storage is made while the rounds before it (since the last with claims) are played.
    let mut next = 0;
    for (index, round) in scenario.rounds.iter().enumerate() {
        if round.probes.iter().all(|p| p.storage.is_empty()) {
            continue;
        }
        let storage = async {
            let step = Instant::now();
            create_storage(t, &names, round, index).await?;
            anyhow::Ok(step.elapsed())
        };
        let before = async {
            for r in next..index {
                play.round(&scenario.rounds[r], r, &mut clock, &mut results)
                    .await?;
            }
            anyhow::Ok(())
        };
        let (storage, before) = futures::join!(storage, before);
        before?;
        clock.storage_beside += storage?;
        play.round(round, index, &mut clock, &mut results).await?;
        next = index + 1;
    }
    for r in next..scenario.rounds.len() {
        play.round(&scenario.rounds[r], r, &mut clock, &mut results)
            .await?;
    }
    let summary = Summary::of(&results);
    let report = report(
        config,
        &scenario,
        &names,
        &results,
        &summary,
        &clock,
        started.elapsed(),
        &log_dir,
    )?;
    Ok((summary, report))
}

/// Creates every world's nodes (with our scheduler's node-pool label), cordons some, and returns them
/// as the server has them.
async fn create_nodes(t: &TestEnv, scenario: &Scenario) -> anyhow::Result<Vec<Node>> {
    let client = t.client().clone();
    let api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(&scenario.nodes)
        .map(|plan| {
            let client = client.clone();
            let api = api.clone();
            let fake = plan.nodes.clone().label(keys::NODE_POOL, t.namespace());
            async move {
                e2e::nodes::create(&client, &fake).await?;
                if plan.unschedulable {
                    api.patch(
                        &plan.name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "spec": { "unschedulable": true } })),
                    )
                    .await
                    .with_context(|| format!("cordoning {}", plan.name))?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    let nodes = api
        .list(&ListParams::default().labels(&t.node_selector()))
        .await?
        .items;
    anyhow::ensure!(
        nodes.len() == scenario.nodes.len(),
        "{} nodes created, {} listed",
        scenario.nodes.len(),
        nodes.len()
    );
    Ok(nodes)
}

fn pods_api(t: &TestEnv, namespace: &str) -> Api<Pod> {
    Api::namespaced(t.client().clone(), namespace)
}

/// Deletes the round's departing pre-bound pods and creates its new ones, bound.
async fn prebind(t: &TestEnv, round: &e2e::differential::generate::Round) -> anyhow::Result<()> {
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    futures::stream::iter(&round.remove)
        .map(|(namespace, name)| {
            let api = pods_api(t, namespace);
            let force = force.clone();
            async move {
                api.delete(name, &force)
                    .await
                    .with_context(|| format!("deleting {namespace}/{name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    futures::stream::iter(&round.add)
        .map(|pod| create_pod(t, pod))
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn create_pod(t: &TestEnv, pod: &Value) -> anyhow::Result<()> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let typed: Pod = serde_json::from_value(pod.clone())?;
    pods_api(t, namespace)
        .create(&PostParams::default(), &typed)
        .await
        .with_context(|| format!("creating pod {namespace}/{name}: {pod}"))?;
    Ok(())
}

/// The names of a probe's storage objects on `side`.
fn naming<'a>(
    names: &'a Names,
    probe: &'a e2e::differential::Probe,
    probe_name: &'a str,
    side: Side,
) -> Naming<'a> {
    Naming {
        prefix: &names.prefix,
        side,
        round: probe.round,
        probe: probe_name,
        namespace: &probe.namespace,
    }
}

async fn create_object<K>(api: &Api<K>, object: &Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: K = serde_json::from_value(object.clone())?;
    api.create(&PostParams::default(), &typed)
        .await
        .with_context(|| format!("creating {object}"))?;
    Ok(())
}

/// Creates a round's storage classes and volumes, and the claims bound before their probes, for both
/// sides, and waits until the PV controller has made the volumes available and set the bound pairs'
/// phases. Those pairs are bound by the test: the claim (naming its volume), then the volume with the
/// claim's UID in its `claimRef`, then, once the controller has seen the volume, the claim's
/// `pv.kubernetes.io/bind-completed`. The controller binding a pre-bound pair itself takes seconds on a
/// busy machine (four writes, and its next sync when one meets a conflict); here it only sets the
/// phases. Done while the rounds before are played. The round's objects are in its own classes, so
/// they are no candidates for the probes of other rounds.
async fn create_storage(
    t: &TestEnv,
    names: &Names,
    round: &e2e::differential::generate::Round,
    index: usize,
) -> anyhow::Result<()> {
    let mut class_objects = Vec::new();
    let mut volume_objects = Vec::new();
    let mut prebound_claims = Vec::new();
    for side in [Side::Kube, Side::Ours] {
        class_objects.extend(storage::classes(&names.prefix, side, index));
        for p in round.probes.iter().filter(|p| !p.storage.is_empty()) {
            let probe_name = p.name(side);
            let n = naming(names, p, &probe_name, side);
            volume_objects.extend(p.storage.volumes(&n));
            let (prebound, _) = split_claims(p, &n);
            prebound_claims.extend(prebound);
        }
    }
    let client = t.client();
    create_all(&Api::<StorageClass>::all(client.clone()), &class_objects).await?;
    let uids: HashMap<(String, String), String> = futures::stream::iter(&prebound_claims)
        .map(|o| {
            let namespace = o["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
            async move {
                let typed: PersistentVolumeClaim = serde_json::from_value(o.clone())?;
                let made = api
                    .create(&PostParams::default(), &typed)
                    .await
                    .with_context(|| format!("creating {o}"))?;
                anyhow::Ok((
                    (namespace, made.metadata.name.unwrap_or_default()),
                    made.metadata.uid.unwrap_or_default(),
                ))
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect()
        .await?;
    for v in &mut volume_objects {
        let claim_ref = &mut v["spec"]["claimRef"];
        if claim_ref.is_object() {
            let key = (
                claim_ref["namespace"].as_str().unwrap_or_default().to_owned(),
                claim_ref["name"].as_str().unwrap_or_default().to_owned(),
            );
            claim_ref["uid"] = json!(uids.get(&key).context("the claim of a pre-bound volume")?);
        }
    }
    create_all(&Api::<PersistentVolume>::all(client.clone()), &volume_objects).await?;
    let timeout =
        |objects: usize| STORAGE_TIMEOUT + STORAGE_TIMEOUT_EACH * u32::try_from(objects).unwrap_or(u32::MAX);
    let is = |status: Option<&str>, wanted: &str| status == Some(wanted);
    t.wait_until(
        "the round's volumes available (or bound, those reserved)",
        timeout(volume_objects.len()),
        async || {
            for side in [Side::Kube, Side::Ours] {
                let stored = list_storage(t, names, index, side).await?;
                if !stored.volumes.iter().all(|v| {
                    let reserved = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
                    is(
                        v.status.as_ref().and_then(|s| s.phase.as_deref()),
                        if reserved { "Bound" } else { "Available" },
                    )
                }) {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    let completed =
        Patch::Merge(json!({ "metadata": { "annotations": { storage::BIND_COMPLETED: "yes" } } }));
    futures::stream::iter(uids.keys())
        .map(|(namespace, name)| {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
            let completed = &completed;
            async move {
                api.patch(name, &PatchParams::default(), completed)
                    .await
                    .with_context(|| format!("marking claim {namespace}/{name} bound"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    // Until the round is played, its claims are those bound beforehand.
    t.wait_until(
        "the round's claims bound beforehand bound",
        timeout(uids.len()),
        async || {
            for side in [Side::Kube, Side::Ours] {
                let stored = list_storage(t, names, index, side).await?;
                if !stored
                    .claims
                    .iter()
                    .all(|c| is(c.status.as_ref().and_then(|s| s.phase.as_deref()), "Bound"))
                {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    Ok(())
}

/// A probe's claims on one side: those bound before the probe (made with the volumes, while the rounds
/// before are played), and the others (made at the start of the probe's round).
fn split_claims(p: &e2e::differential::Probe, n: &Naming<'_>) -> (Vec<Value>, Vec<Value>) {
    let prebound = p.storage.prebound_claims(n);
    p.storage
        .claims(n)
        .into_iter()
        .partition(|claim| prebound.iter().any(|c| claim["metadata"]["name"] == c.as_str()))
}

/// Creates the round's claims not bound beforehand (the claims the schedulers bind, and those that
/// stay pending) for both sides.
async fn create_round_claims(
    t: &TestEnv,
    names: &Names,
    round: &e2e::differential::generate::Round,
) -> anyhow::Result<()> {
    let mut claims = Vec::new();
    for p in round.probes.iter().filter(|p| !p.storage.is_empty()) {
        for side in [Side::Kube, Side::Ours] {
            let probe_name = p.name(side);
            let (_, others) = split_claims(p, &naming(names, p, &probe_name, side));
            claims.extend(others);
        }
    }
    create_claims(t, &claims).await
}

async fn create_all<K>(api: &Api<K>, objects: &[Value]) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    futures::stream::iter(objects)
        .map(|o| create_object(api, o))
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn create_claims(t: &TestEnv, claims: &[Value]) -> anyhow::Result<()> {
    futures::stream::iter(claims)
        .map(|o| {
            let namespace = o["metadata"]["namespace"].as_str().unwrap_or_default();
            let api: Api<PersistentVolumeClaim> = Api::namespaced(t.client().clone(), namespace);
            async move { create_object(&api, o).await }
        })
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// One side's storage objects of a round, as the server has them now.
async fn list_storage(t: &TestEnv, names: &Names, index: usize, side: Side) -> anyhow::Result<Storage> {
    let by_label = ListParams::default().labels(&format!("{PHASE_LABEL}={}", phase_label(index, side)));
    let client = t.client();
    let mut claims = Vec::new();
    for namespace in &names.namespaces {
        claims.extend(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
                .list(&by_label)
                .await?
                .items,
        );
    }
    Ok(Storage {
        claims,
        volumes: Api::<PersistentVolume>::all(client.clone())
            .list(&by_label)
            .await?
            .items,
        classes: Api::<StorageClass>::all(client.clone())
            .list(&by_label)
            .await?
            .items,
    })
}

/// Deletes the volumes and classes labelled `selector` (claims go with their namespaces), without
/// waiting: a deleted volume is no candidate for any scheduler, and the classes are the round's own.
async fn remove_storage(t: &TestEnv, selector: &str) -> anyhow::Result<()> {
    let by_label = ListParams::default().labels(selector);
    let client = t.client();
    Api::<PersistentVolume>::all(client.clone())
        .delete_collection(&DeleteParams::default(), &by_label)
        .await
        .context("deleting volumes")?;
    Api::<StorageClass>::all(client.clone())
        .delete_collection(&DeleteParams::default(), &by_label)
        .await
        .context("deleting storage classes")?;
    Ok(())
}

/// Waits (at most [`CLAIMS_BOUND_TIMEOUT`]) until the claims of the probes `side` bound are bound, so the
/// state read afterwards shows what the PV controller made of the scheduler's writes.
async fn wait_for_claims(
    t: &TestEnv,
    round: &e2e::differential::generate::Round,
    side: Side,
    outcomes: &HashMap<String, Outcome>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CLAIMS_BOUND_TIMEOUT;
    for probe in &round.probes {
        let name = probe.name(side);
        if probe.storage.is_empty() || outcomes[&name].node().is_none() {
            continue;
        }
        let api: Api<PersistentVolumeClaim> = Api::namespaced(t.client().clone(), &probe.namespace);
        for claim in &probe.storage.claims {
            let claim_name = storage::claim_name(&name, &claim.suffix);
            loop {
                let phase = api
                    .get_opt(&claim_name)
                    .await?
                    .and_then(|c| c.status)
                    .and_then(|s| s.phase);
                if phase.as_deref() == Some("Bound") || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Ok(())
}

/// What one side did with a round's probes, every pod of the test's namespaces at the end, and the
/// side's storage of the round when the probes were created and at the end.
struct PhaseResult {
    outcomes: HashMap<String, Outcome>,
    pods: Vec<Pod>,
    storage_before: Storage,
    storage_after: Storage,
}

/// Gives the round's probes to one scheduler, waits until each is bound or unschedulable, reads the
/// state, and deletes the probes (and their PodGroups).
async fn phase(
    t: &TestEnv,
    names: &Names,
    round: &e2e::differential::generate::Round,
    index: usize,
    side: Side,
    scheduler_name: &str,
    pool: &BTreeMap<String, String>,
) -> anyhow::Result<PhaseResult> {
    let label = format!(
        "{PHASE_LABEL}={}",
        e2e::differential::generate::phase(index, side)
    );
    let has_storage = round.probes.iter().any(|p| !p.storage.is_empty());
    let storage_before = if has_storage {
        list_storage(t, names, index, side).await?
    } else {
        Storage::default()
    };
    if side == Side::Ours {
        futures::stream::iter(&round.probes)
            .map(|probe| {
                let group: api::PodGroup = serde_json::from_value(probe.pod_group(pool))?;
                let api: Api<api::PodGroup> = Api::namespaced(t.client().clone(), &probe.namespace);
                Ok(async move {
                    api.create(&PostParams::default(), &group)
                        .await
                        .context("creating a PodGroup")?;
                    anyhow::Ok(())
                })
            })
            .try_buffer_unordered(WRITERS)
            .try_collect::<Vec<()>>()
            .await?;
    }
    let pods: Vec<Value> = round
        .probes
        .iter()
        .map(|p| p.pod(side, scheduler_name, pool))
        .collect();
    futures::stream::iter(&pods)
        .map(|pod| create_pod(t, pod))
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await?;
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let mut decided_count = 0;
        for namespace in &names.namespaces {
            let listed = pods_api(t, namespace)
                .list(&ListParams::default().labels(&label))
                .await?;
            decided_count += listed.items.iter().filter(|p| decided(p).is_some()).count();
        }
        if decided_count == round.probes.len() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The outcomes are read from the final state itself, which the checker judges.
    let mut state = Vec::new();
    for namespace in &names.namespaces {
        state.extend(pods_api(t, namespace).list(&ListParams::default()).await?.items);
    }
    let outcomes: HashMap<String, Outcome> = round
        .probes
        .iter()
        .map(|probe| {
            let name = probe.name(side);
            let outcome = state
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
                .and_then(decided)
                .unwrap_or(Outcome::Undecided);
            (name, outcome)
        })
        .collect();
    let storage_after = if has_storage {
        wait_for_claims(t, round, side, &outcomes).await?;
        list_storage(t, names, index, side).await?
    } else {
        Storage::default()
    };
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let by_label = ListParams::default().labels(&label);
    for namespace in &names.namespaces {
        pods_api(t, namespace)
            .delete_collection(&force, &by_label)
            .await?;
        if side == Side::Ours {
            Api::<api::PodGroup>::namespaced(t.client().clone(), namespace)
                .delete_collection(&DeleteParams::default(), &by_label)
                .await?;
        }
    }
    t.wait_until(
        "the phase's probes deleted",
        Duration::from_secs(30),
        async || {
            let mut left = 0;
            for namespace in &names.namespaces {
                left += pods_api(t, namespace).list_metadata(&by_label).await?.items.len();
            }
            Ok((left == 0).then_some(()))
        },
    )
    .await?;
    if has_storage {
        for namespace in &names.namespaces {
            Api::<PersistentVolumeClaim>::namespaced(t.client().clone(), namespace)
                .delete_collection(&DeleteParams::default(), &by_label)
                .await?;
        }
        remove_storage(t, &label).await?;
    }
    Ok(PhaseResult {
        outcomes,
        pods: state,
        storage_before,
        storage_after,
    })
}

/// Bound, or marked unschedulable by its scheduler; `None` while neither.
fn decided(pod: &Pod) -> Option<Outcome> {
    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        return Some(Outcome::Bound(node));
    }
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| Outcome::Unschedulable(c.message.clone().unwrap_or_default()))
}

/// What the checker says of a probe on one side.
struct Judged {
    /// The verdict on the side's final state (the probe left out) and its storage when the probe was
    /// created.
    verdict: e2e::differential::Verdict,
    /// The rules the side's placement breaks, [`e2e::differential::Rule::ClaimBinding`] included.
    breaks: std::collections::BTreeSet<e2e::differential::Rule>,
    /// What is wrong with the probe's claims after the decision.
    faults: Vec<String>,
}

/// The checker's verdict under `release`'s rules on a probe in a side's final state, and what the side
/// broke.
fn verdict_of(
    probe: &e2e::differential::Probe,
    side: Side,
    release: Release,
    nodes: &[Node],
    phase: &PhaseResult,
) -> anyhow::Result<Judged> {
    let name = probe.name(side);
    let pod = phase
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
        .with_context(|| format!("probe {name} missing from the final state"))?;
    let state =
        State::new(nodes, &phase.pods, Some((&probe.namespace, &name))).with_storage(&phase.storage_before);
    let verdict = evaluate(pod, &state, release)?;
    let outcome = &phase.outcomes[&name];
    let mut breaks = outcome
        .node()
        .map(|n| verdict.failures(n).cloned().unwrap_or_default())
        .unwrap_or_default();
    let faults = if probe.storage.is_empty() || *outcome == Outcome::Undecided {
        Vec::new()
    } else {
        let node = outcome
            .node()
            .map(|n| {
                nodes
                    .iter()
                    .find(|x| x.metadata.name.as_deref() == Some(n))
                    .with_context(|| format!("{name} bound to {n}, not a node of the test"))
            })
            .transpose()?;
        binding_faults(pod, node, &phase.storage_before, &phase.storage_after)?
    };
    if !faults.is_empty() {
        breaks.insert(e2e::differential::Rule::ClaimBinding);
    }
    Ok(Judged {
        verdict,
        breaks,
        faults,
    })
}

fn judge(
    probe: &e2e::differential::Probe,
    nodes: &[Node],
    kube: &PhaseResult,
    ours: &PhaseResult,
) -> anyhow::Result<ProbeResult> {
    let kube_judged = verdict_of(probe, Side::Kube, Release::V1_20, nodes, kube)?;
    let same_rules_ours = verdict_of(probe, Side::Ours, Release::V1_20, nodes, ours)?.verdict;
    let ours_judged = verdict_of(probe, Side::Ours, Release::Current, nodes, ours)?;
    let mut verdict = kube_judged.verdict;
    let mut current = ours_judged.verdict;
    // The other worlds' nodes fail the probe's world selector and tell nothing about the rules.
    let world = probe.spec["nodeSelector"][WORLD_LABEL]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let of_world: std::collections::HashSet<&str> = nodes
        .iter()
        .filter(|n| n.metadata.labels.as_ref().and_then(|l| l.get(WORLD_LABEL)) == Some(&world))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    verdict.nodes.retain(|n, _| of_world.contains(n.as_str()));
    current.nodes.retain(|n, _| of_world.contains(n.as_str()));
    Ok(ProbeResult {
        id: probe.id(),
        world: probe.world,
        carries: probe.carries.clone(),
        pod: json!({ "metadata": { "namespace": probe.namespace, "labels": probe.labels }, "spec": probe.spec }),
        same_state: verdict.feasible() == same_rules_ours.feasible(),
        verdict,
        current,
        kube: kube.outcomes[&probe.name(Side::Kube)].clone(),
        ours: ours.outcomes[&probe.name(Side::Ours)].clone(),
        kube_breaks: kube_judged.breaks,
        ours_breaks: ours_judged.breaks,
        storage: if probe.storage.is_empty() {
            Value::Null
        } else {
            probe.storage.describe()
        },
        kube_faults: kube_judged.faults,
        ours_faults: ours_judged.faults,
    })
}

#[allow(clippy::too_many_arguments)]
fn report(
    config: &Config,
    scenario: &Scenario,
    names: &Names,
    results: &[ProbeResult],
    summary: &Summary,
    clock: &Clock,
    took: Duration,
    log_dir: &std::path::Path,
) -> anyhow::Result<String> {
    let prebound: usize = scenario.rounds.iter().map(|r| r.add.len()).sum();
    let with_claims = scenario
        .rounds
        .iter()
        .flat_map(|r| &r.probes)
        .filter(|p| !p.storage.is_empty())
        .count();
    let mut out = format!(
        "\n==== differential test: seed {}, rules {:?}, {} worlds, {} nodes, {} rounds, {} probes per scheduler ({} with claims), {} pods pre-bound\n\
         time: {:.1} s in all (setup {:.1} s, pre-binding {:.1} s, storage {:.1} s in the rounds (and {:.1} s making the volumes and bound claims of the rounds with claims, while the rounds before each were played), kube-scheduler phases {:.1} s, kai-scheduler phases {:.1} s; of the phases, those of rounds with claims: {:.1} s and {:.1} s)\n\n",
        config.seed,
        config.rules,
        config.worlds,
        scenario.nodes.len(),
        scenario.rounds.len(),
        scenario.probes(),
        with_claims,
        prebound,
        took.as_secs_f64(),
        clock.setup.as_secs_f64(),
        clock.prebound.as_secs_f64(),
        clock.storage.as_secs_f64(),
        clock.storage_beside.as_secs_f64(),
        clock.kube.as_secs_f64(),
        clock.ours.as_secs_f64(),
        clock.kube_with_claims.as_secs_f64(),
        clock.ours_with_claims.as_secs_f64(),
    );
    out.push_str(&summary.render());
    let noted: Vec<&ProbeResult> = results.iter().filter(|r| !r.disagreements().is_empty()).collect();
    let failing: Vec<&ProbeResult> = noted
        .iter()
        .copied()
        .filter(|r| !r.failures().is_empty())
        .collect();
    if !noted.is_empty() {
        std::fs::create_dir_all(log_dir)?;
        let file = log_dir.join("differential.json");
        std::fs::write(&file, serde_json::to_string_pretty(&noted)?)?;
        out.push_str(&format!(
            "\n{} probes with a difference ({} failing), all written to {}",
            noted.len(),
            failing.len(),
            file.display(),
        ));
        if !failing.is_empty() {
            out.push_str(&format!("; the first {} failing:", PRINTED.min(failing.len())));
        }
        out.push('\n');
        for r in failing.iter().take(PRINTED) {
            out.push_str(&describe(r, &names.prefix));
        }
    }
    Ok(out)
}
