//! The differential test against kube-scheduler v1.20.2 (issue 13: honour every constraint a pod
//! carries as kube-scheduler does; issue 14: volumes): a seeded cluster and pods ([`mod@generate`],
//! claims and volumes: [`storage`]), the same pods given to both schedulers on the same cluster state,
//! their outcomes [`compare`]d, and every placement judged by an independent [`check`] of the
//! Kubernetes rules. `e2e/tests/differential.rs` runs it.
//!
//! # Why the comparison is exact
//!
//! Two correct schedulers may bind the same pods to different nodes (their scoring differs), and from
//! then on the clusters differ, so comparing free-running schedulers compares nothing. Here every
//! comparison is of one decision on one state both schedulers saw:
//!
//! - **Worlds.** The cluster is cut into independent worlds of 3-6 nodes. Every pod of a world carries
//!   the world's label and selects the world's nodes by `nodeSelector`; every label selector the
//!   generator writes (pod affinity, anti-affinity, spread) names the world, and the zone and region
//!   values are the world's own, so no pod of one world counts for, or is kept out by, a pod of another:
//!   not even for kube-scheduler, whose affinity pre-filter looks at every node of the cluster and whose
//!   "first pod of a group" rule asks whether *any* pod in the cluster matches.
//! - **Rounds.** Each round, the test first binds the round's pre-existing pods itself (created with
//!   `spec.nodeName`, so no scheduler decides them), identically for both, then gives each world
//!   **one** probe pod: first to kube-scheduler, then the identical pod (another name, our
//!   `schedulerName`, its own one-pod PodGroup) to this scheduler. A phase ends when every probe is bound
//!   or marked `PodScheduled=False` (`Unschedulable`); the probes are then deleted (grace period 0) before
//!   the next phase. A world never holds two probes at once, so a probe's outcome depends on the world's
//!   state alone, which both schedulers saw the same. Pod events arrive in one watch stream, in order: a
//!   scheduler has taken in the deletions of the previous phase before it sees the next probe.
//! - **Storage.** Binding a claim consumes a volume, so the sides share none: each has its own
//!   StorageClasses per round and each probe its own volumes and claims in them ([`storage`]), made
//!   identical but for names before the round (the claims bound beforehand bound, the volumes
//!   available, then half a second for the schedulers' watches of volumes and claims, which are not the
//!   pods' watch and so not ordered with it). A volume's node affinity names nodes or a zone of the
//!   probe's world, and the classes are the round's, so no probe's storage is a candidate for another.
//!   After the phase the side's storage of the round is read again (the claims of a bound probe must be
//!   bound, the PV controller finishing what the scheduler wrote) and deleted.
//! - **The decision is then a function of that state** for a correct scheduler: the pod is bound iff
//!   some node is feasible (all pods have the same priority, so kube-scheduler preempts nothing; no
//!   probe of ours competes with another in its world, so ours has nothing to reclaim or consolidate),
//!   and where exactly one node is feasible, to that node. Where several are, the node may differ (and is
//!   reported for information only).
//!
//! The [`check`]er decides the feasible nodes from the API objects themselves (nodes, every pod bound
//! in the test's namespaces, the side's claims, volumes and classes), so it also judges kube-scheduler: a kube-scheduler placement it rejects, or
//! a pod kube-scheduler leaves pending while it sees a feasible node, is a fault of the test, reported as
//! such.
//!
//! # Two releases
//!
//! kube-scheduler v1.20.2 is the only release the local control plane can build, and in one rule the
//! generator exercises it differs from the releases users run: a topology spread domain counts the pods
//! of every node with that value in v1.20.2, of the eligible nodes only since the node inclusion
//! policies ([`check::Release`]). kube-scheduler is held to v1.20.2's rules and this scheduler to the
//! current ones; where the two give different feasible nodes the probe is noted, not failed
//! ([`compare::Disagreement::SpreadCountedAsInV1_20`]).

pub mod check;
pub mod compare;
pub mod generate;
pub mod storage;

pub use check::{Release, Rule, State, Storage, Verdict, binding_faults, evaluate};
pub use compare::{Outcome, ProbeResult, Summary};
pub use generate::{Config, Names, Probe, Rules, Scenario, Side, generate};
