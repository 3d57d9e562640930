//! A pure in-memory cluster simulator: builders for nodes, queues and gangs, and rounds of scheduling
//! cycles with the API server and kubelets played by simple rules between rounds (KAI's multi-round test
//! harness): a bind becomes a running pod, an eviction becomes a pod recreated by its controller
//! (pending, no node), a reservation stays until its gang is bound or it lapses.
//!
//! Used by the scenario tests, the benchmarks and `what-if` tooling; it goes through the same model API
//! as the watch cache, so what it exercises is what runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::Config;
use crate::cycle::{self, CycleResult};
use crate::framework::decisions::Decisions;
use crate::model::constraints::{Constraints, Taint, TaintEffect, Toleration};
use crate::model::group::{GroupKind, SubGroupDecl};
use crate::model::group_status::SeenStatus;
use crate::model::pod_rules::{
    HOSTNAME_KEY, Inclusion, LabelSelector, Labels, NamespaceScope, PodTerm, RulesSpec, SelectorRequirement,
    Spread,
};

/// The zone label synthetic nodes carry.
const ZONE_KEY: &str = "topology.kubernetes.io/zone";
use crate::model::queue::QueueResourceSpec;
use crate::model::resources::{CPU, GPU, MEMORY, PODS};
use crate::model::volumes::PodClaim;
use crate::model::{
    ApiView, Cluster, GpuRequest, Group, GroupKey, Millis, NodeUpdate, PodUpdate, Queue, Resources,
    TaskStatus,
};

/// GiB in bytes.
pub const GI: i64 = 1 << 30;

/// A simulated cluster and clock.
pub struct Sim {
    /// The model.
    pub cluster: Cluster,
    /// Configuration.
    pub config: Config,
    /// Simulated time.
    pub now: Millis,
    /// Decisions of every round, in order.
    pub history: Vec<Decisions>,
    /// Pods evicted so far (namespace/name).
    pub evicted: Vec<String>,
    /// The last cycle's result.
    pub last: Option<CycleResult>,
    /// Pods (namespace/name) whose binds the simulated API server refuses, with the reason.
    pub refuse_binds: BTreeMap<String, String>,
    uid: u64,
}

impl Default for Sim {
    fn default() -> Self {
        Self::new()
    }
}

/// Builder of a gang and its pods.
#[derive(Clone, Debug)]
pub struct GangSpec {
    name: String,
    namespace: String,
    queue: String,
    pods: u32,
    min: u32,
    max: Option<u32>,
    request: Resources,
    gpu: GpuRequest,
    priority: Option<i32>,
    priority_class: Option<String>,
    preemptible: Option<bool>,
    selector: Vec<(String, String)>,
    tolerations: Vec<Toleration>,
    subgroups: Vec<(String, u32, Option<String>, u32)>,
    parent: Option<String>,
    running_on: Vec<String>,
    created: Millis,
    timeout: Option<i64>,
    kind: GroupKind,
    min_resources: Option<Resources>,
    topology: Option<(String, Option<String>, Option<String>)>,
    labels: Labels,
    rules: RulesSpec,
    claims: Vec<(String, bool)>,
    scheduling_backoff: bool,
    never_preempts: bool,
}

impl GangSpec {
    /// A gang of `pods` one-GPU pods needing all of them.
    #[must_use]
    pub fn new(name: &str, queue: &str, pods: u32) -> Self {
        Self {
            name: name.to_owned(),
            namespace: "ns".to_owned(),
            queue: queue.to_owned(),
            pods,
            min: pods,
            max: None,
            request: Resources::new(1000, GI, 0),
            gpu: GpuRequest::Whole(1),
            priority: None,
            priority_class: None,
            preemptible: None,
            selector: Vec::new(),
            tolerations: Vec::new(),
            subgroups: Vec::new(),
            parent: None,
            running_on: Vec::new(),
            created: 0,
            timeout: None,
            kind: GroupKind::Kai,
            min_resources: None,
            topology: None,
            labels: Labels::new(),
            rules: RulesSpec::default(),
            claims: Vec::new(),
            scheduling_backoff: false,
            never_preempts: false,
        }
    }
    /// Pods with `preemptionPolicy: Never`.
    #[must_use]
    pub fn never_preempts(mut self) -> Self {
        self.never_preempts = true;
        self
    }
    /// `schedulingBackoff: 1`: tried once per node pool.
    #[must_use]
    pub fn scheduling_backoff(mut self) -> Self {
        self.scheduling_backoff = true;
        self
    }
    /// minMember.
    #[must_use]
    pub fn min(mut self, min: u32) -> Self {
        self.min = min;
        self
    }
    /// maxMember.
    #[must_use]
    pub fn max(mut self, max: u32) -> Self {
        self.max = Some(max);
        self
    }
    /// Whole GPUs per pod.
    #[must_use]
    pub fn gpus(mut self, n: u32) -> Self {
        self.gpu = if n == 0 {
            GpuRequest::None
        } else {
            GpuRequest::Whole(n)
        };
        self
    }
    /// A GPU fraction per pod (thousandths).
    #[must_use]
    pub fn fraction(mut self, milli: u32) -> Self {
        self.gpu = GpuRequest::Fraction { milli, devices: 1 };
        self
    }
    /// CPU millicores and memory GiB per pod.
    #[must_use]
    pub fn cpu_mem(mut self, cpu_milli: i64, mem_gi: i64) -> Self {
        self.request.0[CPU] = cpu_milli;
        self.request.0[MEMORY] = mem_gi * GI;
        self
    }
    /// Integer priority.
    #[must_use]
    pub fn priority(mut self, p: i32) -> Self {
        self.priority = Some(p);
        self
    }
    /// Priority class name.
    #[must_use]
    pub fn priority_class(mut self, p: &str) -> Self {
        self.priority_class = Some(p.to_owned());
        self
    }
    /// Explicit preemptibility.
    #[must_use]
    pub fn preemptible(mut self, p: bool) -> Self {
        self.preemptible = Some(p);
        self
    }
    /// Node selector entry.
    #[must_use]
    pub fn selector(mut self, k: &str, v: &str) -> Self {
        self.selector.push((k.to_owned(), v.to_owned()));
        self
    }
    /// Tolerates a taint key (any value, any effect).
    #[must_use]
    pub fn tolerate(mut self, key: &str) -> Self {
        self.tolerations.push(Toleration {
            key: key.to_owned(),
            exists: true,
            value: String::new(),
            effect: None,
        });
        self
    }
    /// A sub-group: name, minMember, parent, pods labelled with it.
    #[must_use]
    pub fn subgroup(mut self, name: &str, min: u32, parent: Option<&str>, pods: u32) -> Self {
        self.subgroups
            .push((name.to_owned(), min, parent.map(str::to_owned), pods));
        self
    }
    /// `parentPodGroup`.
    #[must_use]
    pub fn parent(mut self, p: &str) -> Self {
        self.parent = Some(p.to_owned());
        self
    }
    /// Its first pods already run on these nodes.
    #[must_use]
    pub fn running_on(mut self, nodes: &[&str]) -> Self {
        self.running_on = nodes.iter().map(|s| (*s).to_owned()).collect();
        self
    }
    /// Creation time.
    #[must_use]
    pub fn created(mut self, ms: Millis) -> Self {
        self.created = ms;
        self
    }
    /// `scheduleTimeoutSeconds`.
    #[must_use]
    pub fn timeout(mut self, secs: i64) -> Self {
        self.timeout = Some(secs);
        self
    }
    /// A Volcano PodGroup with `minResources`.
    #[must_use]
    pub fn volcano(mut self, min_resources: Option<Resources>) -> Self {
        self.kind = GroupKind::Volcano;
        self.min_resources = min_resources;
        self
    }
    /// Namespace.
    #[must_use]
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.to_owned();
        self
    }
    /// Labels on every pod.
    #[must_use]
    pub fn labels(mut self, pairs: &[(&str, &str)]) -> Self {
        self.labels = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self
    }

    /// Rules about other pods (affinity, spread, host ports) on every pod.
    #[must_use]
    pub fn rules(mut self, rules: RulesSpec) -> Self {
        self.rules = rules;
        self
    }

    /// PersistentVolumeClaims each pod uses; `{i}` in a name is replaced by the pod's index.
    #[must_use]
    pub fn claims(mut self, names: &[&str]) -> Self {
        self.claims = names.iter().map(|n| ((*n).to_owned(), false)).collect();
        self
    }

    /// Generic ephemeral volumes each pod has (claims `<pod>-<volume>`).
    #[must_use]
    pub fn ephemeral_volumes(mut self, volumes: &[&str]) -> Self {
        self.claims = volumes.iter().map(|n| ((*n).to_owned(), true)).collect();
        self
    }

    /// Topology constraint: topology name, required level, preferred level.
    #[must_use]
    pub fn topology(mut self, topology: &str, required: Option<&str>, preferred: Option<&str>) -> Self {
        self.topology = Some((
            topology.to_owned(),
            required.map(str::to_owned),
            preferred.map(str::to_owned),
        ));
        self
    }
}

impl Sim {
    /// An empty cluster with the default queues and priority classes.
    #[must_use]
    pub fn new() -> Self {
        let mut cluster = Cluster::default();
        for (name, value) in api::keys::PRIORITY_CLASSES {
            cluster.apply_priority_class(name, value, false);
        }
        Self {
            cluster,
            config: Config::default(),
            now: 1_000_000,
            history: Vec::new(),
            evicted: Vec::new(),
            last: None,
            refuse_binds: BTreeMap::new(),
            uid: 0,
        }
    }

    /// A simulator over an existing model (e.g. a [`Synthetic`] cluster) with the default configuration.
    #[must_use]
    pub fn with_cluster(cluster: Cluster) -> Self {
        Self {
            cluster,
            ..Self::new()
        }
    }

    /// Runs rounds until one decides no bind and no eviction (at most `max`); returns the rounds run.
    pub fn settle_all(&mut self, max: usize) -> usize {
        for i in 1..=max {
            let r = self.round();
            if r.decisions.binds.is_empty() && r.decisions.evictions.is_empty() {
                return i;
            }
        }
        max
    }

    /// Adds a node with CPU millicores, memory GiB and GPUs.
    pub fn node(&mut self, name: &str, cpu_milli: i64, mem_gi: i64, gpus: i64) -> &mut Self {
        self.node_with(name, cpu_milli, mem_gi, gpus, &[], &[])
    }

    /// Adds a node with labels and `NoSchedule` taint keys.
    pub fn node_with(
        &mut self,
        name: &str,
        cpu_milli: i64,
        mem_gi: i64,
        gpus: i64,
        labels: &[(&str, &str)],
        taints: &[&str],
    ) -> &mut Self {
        let allocatable = Resources::new(cpu_milli, mem_gi * GI, gpus * 1000).with(PODS, 110);
        // The kubelet labels every node with its hostname.
        let mut labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels
            .entry(HOSTNAME_KEY.to_owned())
            .or_insert_with(|| name.to_owned());
        self.cluster.apply_node(NodeUpdate {
            name: name.into(),
            labels,
            taints: taints
                .iter()
                .map(|k| Taint {
                    key: (*k).to_owned(),
                    value: String::new(),
                    effect: TaintEffect::NoSchedule,
                })
                .collect(),
            ready: true,
            unschedulable: false,
            allocatable,
            gpu_memory_mib: Some(80_000),
        });
        self
    }

    /// Adds `n` identical GPU nodes `prefix-0..`.
    pub fn nodes(&mut self, prefix: &str, n: usize, gpus: i64) -> &mut Self {
        for i in 0..n {
            self.node(&format!("{prefix}-{i}"), 64_000, 256, gpus);
        }
        self
    }

    /// Adds a queue with GPU quota, limit and weight (others unlimited).
    pub fn queue(
        &mut self,
        name: &str,
        parent: Option<&str>,
        gpu_quota: f64,
        gpu_limit: f64,
        weight: f64,
    ) -> &mut Self {
        let mut q = Queue::new(name);
        q.parent_name = parent.map(Into::into);
        q.resources[GPU] = QueueResourceSpec {
            quota: gpu_quota,
            limit: gpu_limit,
            weight,
        };
        q.created = i64::try_from(self.cluster.queues.len()).unwrap_or_default();
        self.cluster.apply_queue(q);
        self
    }

    /// Adds a queue as given.
    pub fn queue_spec(&mut self, q: Queue) -> &mut Self {
        self.cluster.apply_queue(q);
        self
    }

    fn next_uid(&mut self) -> Arc<str> {
        self.uid += 1;
        format!("uid-{}", self.uid).into()
    }

    /// Adds a gang and its pods.
    pub fn gang(&mut self, spec: GangSpec) -> &mut Self {
        let key = GroupKey {
            kind: spec.kind,
            namespace: spec.namespace.as_str().into(),
            name: spec.name.as_str().into(),
        };
        let mut group = Group::new(key.clone(), &spec.queue, spec.min);
        group.uid = self.next_uid();
        group.max_member = spec.max;
        group.explicit_priority = spec.priority;
        group.priority_class = spec.priority_class.as_deref().map(Into::into);
        group.explicit_preemptible = spec.preemptible;
        group.parent_name = spec.parent.as_deref().map(Into::into);
        group.created = spec.created;
        group.schedule_timeout_secs = spec.timeout;
        group.scheduling_backoff = spec.scheduling_backoff;
        group.min_resources = spec.min_resources;
        group.topology_spec = spec.topology.clone();
        for (name, min, parent, _) in &spec.subgroups {
            let parent = parent
                .as_ref()
                .and_then(|p| spec.subgroups.iter().position(|s| &s.0 == p));
            group.subgroups.push(SubGroupDecl {
                name: name.as_str().into(),
                min_member: *min,
                parent,
                topology: None,
            });
            group.subgroup_topology_specs.push(None);
        }
        self.cluster.apply_group(group);
        let constraints = Constraints {
            node_selector: spec.selector.clone(),
            affinity_terms: Vec::new(),
            tolerations: spec.tolerations.clone(),
            preferred: Vec::new(),
        };
        let mut request = spec.request.with(PODS, 1);
        if let GpuRequest::Whole(n) = spec.gpu {
            request.0[GPU] = i64::from(n) * 1000;
        }
        let labelled: Vec<(String, u32)> = spec.subgroups.iter().map(|s| (s.0.clone(), s.3)).collect();
        let total = if labelled.is_empty() {
            spec.pods
        } else {
            labelled.iter().map(|s| s.1).sum()
        };
        let mut subgroup_of = Vec::new();
        for (name, n) in &labelled {
            for _ in 0..*n {
                subgroup_of.push(Some(name.clone()));
            }
        }
        for i in 0..total {
            let running = spec.running_on.get(i as usize);
            let uid = self.next_uid();
            self.cluster.apply_pod(PodUpdate {
                uid,
                namespace: key.namespace.clone(),
                name: format!("{}-{i}", spec.name).into(),
                ours: true,
                group_key: Some(key.clone()),
                subgroup: subgroup_of.get(i as usize).cloned().flatten().map(Into::into),
                request,
                gpu: spec.gpu,
                constraints: constraints.clone(),
                labels: spec.labels.clone(),
                rules: spec.rules.clone(),
                api: match running {
                    Some(node) => ApiView {
                        status: TaskStatus::Running,
                        node_name: Some(node.as_str().into()),
                        bound_at: None,
                    },
                    None => ApiView {
                        status: TaskStatus::Pending,
                        node_name: None,
                        bound_at: None,
                    },
                },
                gpu_groups: match (running, spec.gpu) {
                    (Some(_), GpuRequest::Fraction { .. }) => vec![format!("group-{}-{i}", spec.name).into()],
                    _ => Vec::new(),
                },
                task_order: 0,
                never_preempts: spec.never_preempts,
                created: spec.created + i64::from(i),
                problem: None,
                claims: spec
                    .claims
                    .iter()
                    .map(|(n, ephemeral)| PodClaim {
                        name: if *ephemeral {
                            format!("{}-{i}-{n}", spec.name).into()
                        } else {
                            n.replace("{i}", &i.to_string()).into()
                        },
                        ephemeral: *ephemeral,
                    })
                    .collect(),
                reservation_for: None,
                gpu_device: None,
            });
        }
        self
    }

    /// Adds a pod of another scheduler running on a node.
    pub fn foreign_pod(&mut self, name: &str, node: &str, cpu_milli: i64, gpus: i64) -> &mut Self {
        let uid = self.next_uid();
        self.cluster.apply_pod(PodUpdate {
            uid,
            namespace: "other".into(),
            name: name.into(),
            ours: false,
            group_key: None,
            subgroup: None,
            request: Resources::new(cpu_milli, 0, gpus * 1000).with(PODS, 1),
            gpu: if gpus > 0 {
                GpuRequest::Whole(u32::try_from(gpus).unwrap_or(0))
            } else {
                GpuRequest::None
            },
            constraints: Constraints::default(),
            labels: Labels::new(),
            rules: RulesSpec::default(),
            api: ApiView {
                status: TaskStatus::Running,
                node_name: Some(node.into()),
                bound_at: None,
            },
            gpu_groups: Vec::new(),
            task_order: 0,
            never_preempts: false,
            created: 0,
            problem: None,
            claims: Vec::new(),
            reservation_for: None,
            gpu_device: None,
        });
        self
    }

    /// Runs one cycle, then lets the simulated API server and kubelets react.
    pub fn round(&mut self) -> &CycleResult {
        let result = cycle::run(&mut self.cluster, &self.config, self.now);
        self.settle(&result.decisions);
        self.history.push(result.decisions.clone());
        self.now += 1000;
        self.last.replace(result);
        self.last.as_ref().expect("invariant: just set")
    }

    /// Runs one cycle at [`Self::now`] and lets the simulated API server and kubelets react, as
    /// [`Self::round`] does, but keeps no history and leaves the clock alone: for long replays driven
    /// by their own clock (`kai sim`).
    pub fn step(&mut self) -> CycleResult {
        let result = cycle::run(&mut self.cluster, &self.config, self.now);
        self.settle(&result.decisions);
        result
    }

    /// Removes a finished gang as the API server would after its pods completed and were deleted:
    /// its pods, then its PodGroup. Returns whether the gang existed.
    pub fn remove_gang(&mut self, namespace: &str, name: &str) -> bool {
        let key = GroupKey {
            kind: GroupKind::Kai,
            namespace: namespace.into(),
            name: name.into(),
        };
        let Some(g) = self.cluster.group_id(&key) else {
            return false;
        };
        let uids: Vec<Arc<str>> = self
            .cluster
            .group(g)
            .tasks
            .iter()
            .map(|t| self.cluster.task(*t).uid.clone())
            .collect();
        for uid in uids {
            self.cluster.remove_pod(&uid);
        }
        self.cluster.remove_group(&key);
        true
    }

    /// How many waiting gangs the last cycle kept in its backlog (`framework::backlog`).
    #[must_use]
    pub fn backlog_len(&self) -> usize {
        crate::framework::session::backlog_len(&self.cluster)
    }

    /// The PodGroups the last cycle kept in its backlog.
    #[must_use]
    pub fn backlog_groups(&self) -> Vec<crate::model::GroupId> {
        crate::framework::session::backlog_groups(&self.cluster)
    }

    /// Runs `n` rounds.
    pub fn rounds(&mut self, n: usize) -> &mut Self {
        for _ in 0..n {
            self.round();
        }
        self
    }

    /// Applies decisions the way a cluster would: binds land and run; evicted pods are recreated
    /// pending by their controller.
    fn settle(&mut self, d: &Decisions) {
        for b in &d.binds {
            if let Some(reason) = self.refuse_binds.get(&format!("{}/{}", b.namespace, b.name))
                && let Some(id) = self.cluster.task_id(&b.uid)
            {
                self.cluster.bind_failed(id, reason.as_str().into(), self.now);
                continue;
            }
            if let Some(id) = self.cluster.task_id(&b.uid) {
                let mut update = self.pod_update(id);
                update.api = ApiView {
                    status: TaskStatus::Running,
                    node_name: Some(b.node.clone()),
                    bound_at: Some(self.now),
                };
                update.gpu_groups.clone_from(&b.gpu_groups);
                self.cluster.apply_pod(update);
            }
        }
        for e in &d.evictions {
            if let Some(id) = self.cluster.task_id(&e.uid) {
                self.evicted.push(format!("{}/{}", e.namespace, e.name));
                let mut update = self.pod_update(id);
                self.cluster.remove_pod(&e.uid);
                update.uid = self.next_uid();
                update.api = ApiView {
                    status: TaskStatus::Pending,
                    node_name: None,
                    bound_at: None,
                };
                update.gpu_groups.clear();
                self.cluster.apply_pod(update);
            }
        }
        for s in &d.group_statuses {
            if let Some(g) = self.cluster.group_id(&s.key) {
                let mut group = self.cluster.group(g).clone();
                group.observed.status = Some(SeenStatus::Decided(s.status.clone()));
                group.observed.fingerprint = s.fingerprint;
                self.cluster.apply_group(group);
            }
        }
    }

    /// The update that reproduces a task as it is.
    fn pod_update(&self, id: crate::model::TaskId) -> PodUpdate {
        pod_update_of(&self.cluster, id)
    }

    /// Completes a pod (it succeeded).
    pub fn complete(&mut self, namespace: &str, name: &str) -> &mut Self {
        let id = self
            .cluster
            .tasks
            .iter()
            .find(|(_, t)| &*t.namespace == namespace && &*t.name == name)
            .map(|(i, _)| crate::model::TaskId(i));
        if let Some(id) = id {
            let mut update = self.pod_update(id);
            update.api = ApiView {
                status: TaskStatus::Succeeded,
                node_name: update.api.node_name,
                bound_at: update.api.bound_at,
            };
            self.cluster.apply_pod(update);
        }
        self
    }

    /// Marks a pod as being deleted (evicted, the kubelet has not confirmed yet): it still holds its node.
    pub fn deleting(&mut self, namespace: &str, name: &str) -> &mut Self {
        if let Some(id) = self.pod_id(namespace, name) {
            let mut update = self.pod_update(id);
            update.api.status = TaskStatus::Releasing;
            self.cluster.apply_pod(update);
        }
        self
    }

    /// Adds a pending copy of a pod named `new_name`, as its controller replaces a deleted one.
    pub fn recreate(&mut self, namespace: &str, name: &str, new_name: &str) -> &mut Self {
        if let Some(id) = self.pod_id(namespace, name) {
            let mut update = self.pod_update(id);
            update.uid = self.next_uid();
            update.name = new_name.into();
            update.api = ApiView {
                status: TaskStatus::Pending,
                node_name: None,
                bound_at: None,
            };
            update.gpu_groups.clear();
            self.cluster.apply_pod(update);
        }
        self
    }

    fn pod_id(&self, namespace: &str, name: &str) -> Option<crate::model::TaskId> {
        self.cluster
            .tasks
            .iter()
            .find(|(_, t)| &*t.namespace == namespace && &*t.name == name)
            .map(|(i, _)| crate::model::TaskId(i))
    }

    /// Status of every pod of a gang, by pod name: (status, node).
    #[must_use]
    pub fn pods(&self, gang: &str) -> BTreeMap<String, (TaskStatus, Option<String>)> {
        self.cluster
            .tasks
            .iter()
            .filter(|(_, t)| t.group_key.as_ref().is_some_and(|k| &*k.name == gang))
            .map(|(_, t)| {
                (
                    t.name.to_string(),
                    (t.status, t.node.map(|n| self.cluster.node(n).name.to_string())),
                )
            })
            .collect()
    }

    /// How many pods of a gang are in a status.
    #[must_use]
    pub fn count(&self, gang: &str, status: TaskStatus) -> usize {
        self.pods(gang).values().filter(|(s, _)| *s == status).count()
    }

    /// Pods of a gang running or bound, by node.
    #[must_use]
    pub fn placement(&self, gang: &str) -> BTreeMap<String, usize> {
        let mut by_node = BTreeMap::new();
        for (status, node) in self.pods(gang).values() {
            if let (true, Some(n)) = (status.is_active_allocated(), node) {
                *by_node.entry(n.clone()).or_default() += 1;
            }
        }
        by_node
    }

    /// The last status written for a gang.
    #[must_use]
    pub fn status(&self, gang: &str) -> Option<api::PodGroupStatus> {
        let (_, g) = self.cluster.groups.iter().find(|(_, g)| &*g.key.name == gang)?;
        g.observed.status.as_ref().map(SeenStatus::render)
    }

    /// The message of the gang's Unschedulable condition.
    #[must_use]
    pub fn why(&self, gang: &str) -> Option<String> {
        self.status(gang)?
            .conditions
            .into_iter()
            .find(|c| c.type_ == crate::framework::report::status::condition::UNSCHEDULABLE)
            .and_then(|c| c.message)
    }
}

// ---------------------------------------------------------------------------------------------
// Synthetic clusters (benchmarks)
// ---------------------------------------------------------------------------------------------

/// Priority classes of pending gangs in a mixed workload, picked per gang: mostly preemptible training,
/// some preemptible builds, a few non-preemptible builds.
pub const MIXED_PRIORITIES: [&str; 5] = ["train", "train", "train", "build-preemptible", "build"];

/// The shape of a synthetic cluster: `nodes` GPU nodes (64 CPU, 512 GiB, `gpus_per_node` GPUs), a
/// two-level queue tree (`departments` x `queues_per_department` leaves, GPU quotas summing to the
/// cluster), running work filling `running_fraction` of the GPUs with low-priority gangs, and
/// `pending_pods` pending one-GPU pods in gangs of `gang_size` spread round-robin over the leaves.
#[derive(Clone, Debug)]
pub struct Synthetic {
    /// GPU nodes.
    pub nodes: usize,
    /// GPUs per node.
    pub gpus_per_node: i64,
    /// Pods per gang (minMember = pods).
    pub gang_size: u32,
    /// Pending pods (rounded down to whole gangs).
    pub pending_pods: usize,
    /// Top-level queues.
    pub departments: usize,
    /// Leaf queues per department.
    pub queues_per_department: usize,
    /// Share of all GPUs held by running gangs (priority class `running_class`), 0.0..=1.0.
    pub running_fraction: f64,
    /// Priority class of the running gangs.
    pub running_class: &'static str,
    /// Running pods dealt round-robin over the nodes (fragmented) instead of packed node by node.
    pub running_spread: bool,
    /// Priority classes of pending gangs, one picked per gang.
    pub pending_classes: &'static [&'static str],
    /// GPUs per pending pod.
    pub gpus_per_pod: u32,
    /// Seed of the deterministic pseudo-random picks.
    pub seed: u64,
    /// Share of pending gangs whose pods carry a rule about each other, 0.0..=1.0: half of them
    /// required hostname anti-affinity, half a `DoNotSchedule` zone spread (maxSkew 1).
    pub rules_fraction: f64,
}

/// Zones the synthetic nodes are dealt over (`topology.kubernetes.io/zone`).
pub const SYNTHETIC_ZONES: usize = 10;

impl Synthetic {
    /// The benchmark shape: `nodes` nodes of 8 GPUs, 10 pending pods per node in gangs of `gang_size`,
    /// 100 leaf queues under 10 departments, mixed priorities, nothing running.
    #[must_use]
    pub fn new(nodes: usize, gang_size: u32) -> Self {
        Self {
            nodes,
            gpus_per_node: 8,
            gang_size,
            pending_pods: nodes * 10,
            departments: 10,
            queues_per_department: 10,
            running_fraction: 0.0,
            running_class: "train",
            running_spread: false,
            pending_classes: &MIXED_PRIORITIES,
            gpus_per_pod: 1,
            seed: 1,
            rules_fraction: 0.0,
        }
    }

    /// Leaf queue names, in order.
    #[must_use]
    pub fn leaf_queues(&self) -> Vec<String> {
        (0..self.departments)
            .flat_map(|d| (0..self.queues_per_department).map(move |q| format!("dept-{d}-q{q}")))
            .collect()
    }

    /// The watch updates that describe the cluster, in the order a watch cache would apply them.
    #[must_use]
    pub fn updates(&self) -> SyntheticUpdates {
        let total_gpus = self.nodes as f64 * self.gpus_per_node as f64;
        let mut queues = Vec::new();
        let leaves = (self.departments * self.queues_per_department).max(1);
        for d in 0..self.departments {
            let mut dept = Queue::new(&format!("dept-{d}"));
            dept.resources[GPU].quota = total_gpus / self.departments as f64;
            dept.created = i64::try_from(queues.len()).unwrap_or_default();
            queues.push(dept);
        }
        for (i, name) in self.leaf_queues().iter().enumerate() {
            let mut q = Queue::new(name);
            q.parent_name = Some(format!("dept-{}", i / self.queues_per_department.max(1)).into());
            q.resources[GPU].quota = total_gpus / leaves as f64;
            q.created = i64::try_from(queues.len()).unwrap_or_default();
            queues.push(q);
        }
        let nodes = (0..self.nodes)
            .map(|i| NodeUpdate {
                name: format!("node-{i}").into(),
                labels: BTreeMap::from([
                    (HOSTNAME_KEY.to_owned(), format!("node-{i}")),
                    (ZONE_KEY.to_owned(), format!("zone-{}", i % SYNTHETIC_ZONES)),
                ]),
                taints: Vec::new(),
                ready: true,
                unschedulable: false,
                allocatable: Resources::new(64_000, 512 * GI, self.gpus_per_node * 1000).with(PODS, 110),
                gpu_memory_mib: Some(80_000),
            })
            .collect();
        let mut out = SyntheticUpdates {
            queues,
            nodes,
            groups: Vec::new(),
            pods: Vec::new(),
        };
        let leaf_names = self.leaf_queues();
        let mut rng = SplitMix(self.seed);
        let mut serial = 0usize;
        // Running work: one-GPU pods packed node by node.
        let running_pods = (self.running_fraction.clamp(0.0, 1.0) * total_gpus) as usize;
        let running_gangs = running_pods / self.gang_size.max(1) as usize;
        let mut slot = 0usize;
        for _ in 0..running_gangs {
            let queue = &leaf_names[serial % leaf_names.len()];
            let nodes: Vec<String> = (0..self.gang_size)
                .map(|_| {
                    let node = if self.running_spread {
                        slot % self.nodes.max(1)
                    } else {
                        slot / usize::try_from(self.gpus_per_node.max(1)).unwrap_or(1)
                    };
                    slot += 1;
                    format!("node-{node}")
                })
                .collect();
            out.gang(
                serial,
                queue,
                self.gang_size,
                1,
                self.running_class,
                Some(&nodes),
                None,
            );
            serial += 1;
        }
        let pending_gangs = self.pending_pods / self.gang_size.max(1) as usize;
        let mut with_rules = 0usize;
        for _ in 0..pending_gangs {
            let queue = &leaf_names[serial % leaf_names.len()];
            let class = self.pending_classes[rng.below(self.pending_classes.len())];
            // Deterministic share: a gang gets rules when the running share falls below the target.
            let rules = if (with_rules as f64) < self.rules_fraction * (serial + 1) as f64 {
                with_rules += 1;
                Some(with_rules.is_multiple_of(2))
            } else {
                None
            };
            out.gang(
                serial,
                queue,
                self.gang_size,
                self.gpus_per_pod,
                class,
                None,
                rules,
            );
            serial += 1;
        }
        out
    }

    /// The model after applying [`Self::updates`] to an empty cluster with the default priority classes.
    #[must_use]
    pub fn cluster(&self) -> Cluster {
        let mut cluster = empty_cluster();
        self.updates().apply(&mut cluster);
        cluster
    }

    /// Churn of a settled cluster: the first running gangs holding about `fraction` of the running pods
    /// complete, and as many new pods arrive pending (new gangs of the same size). Returns (pods
    /// completed, pods added).
    pub fn churn(&self, cluster: &mut Cluster, fraction: f64, generation: usize) -> (usize, usize) {
        let running: Vec<crate::model::GroupId> = cluster
            .groups
            .iter()
            .filter(|(_, g)| {
                !g.tasks.is_empty()
                    && g.tasks
                        .iter()
                        .all(|t| cluster.task(*t).status == TaskStatus::Running)
            })
            .map(|(i, _)| crate::model::GroupId(i))
            .collect();
        let running_pods: usize = running.iter().map(|g| cluster.group(*g).tasks.len()).sum();
        let target = ((running_pods as f64) * fraction).ceil() as usize;
        let mut completed = 0;
        for g in running {
            if completed >= target {
                break;
            }
            let tasks = cluster.group(g).tasks.clone();
            for t in tasks {
                let mut update = pod_update_of(cluster, t);
                update.api.status = TaskStatus::Succeeded;
                cluster.apply_pod(update);
                completed += 1;
            }
        }
        let leaf_names = self.leaf_queues();
        let mut updates = SyntheticUpdates::default();
        let gangs = completed.div_ceil(self.gang_size.max(1) as usize);
        let mut rng = SplitMix(self.seed ^ (generation as u64 + 1).wrapping_mul(0x9e37_79b9));
        for i in 0..gangs {
            let serial = 1_000_000 * (generation + 1) + i;
            let queue = &leaf_names[serial % leaf_names.len()];
            let class = self.pending_classes[rng.below(self.pending_classes.len())];
            updates.gang(
                serial,
                queue,
                self.gang_size,
                self.gpus_per_pod,
                class,
                None,
                None,
            );
        }
        let added = updates.pods.len();
        updates.apply(cluster);
        (completed, added)
    }
}

/// The rules of a synthetic gang's pods about each other: required hostname anti-affinity, or a
/// `DoNotSchedule` zone spread with maxSkew 1.
fn synthetic_rules(job: &str, namespace: &str, anti_affinity: bool) -> RulesSpec {
    let term = |key: &str| {
        PodTerm::new(
            Some(LabelSelector::new(vec![SelectorRequirement::equals("job", job)])),
            NamespaceScope::only(namespace),
            key,
        )
    };
    if anti_affinity {
        RulesSpec {
            anti_affinity: vec![term(HOSTNAME_KEY)],
            ..RulesSpec::default()
        }
    } else {
        RulesSpec {
            spread: vec![Spread {
                term: term(ZONE_KEY),
                max_skew: 1,
                hard: true,
                min_domains: None,
                node_affinity: Inclusion::Honor,
                node_taints: Inclusion::Ignore,
            }],
            ..RulesSpec::default()
        }
    }
}

/// An empty model with the default priority classes.
#[must_use]
pub fn empty_cluster() -> Cluster {
    let mut cluster = Cluster::default();
    for (name, value) in api::keys::PRIORITY_CLASSES {
        cluster.apply_priority_class(name, value, false);
    }
    cluster
}

/// The watch updates of a synthetic cluster.
#[derive(Clone, Debug, Default)]
pub struct SyntheticUpdates {
    /// Queues, departments first.
    pub queues: Vec<Queue>,
    /// Nodes.
    pub nodes: Vec<NodeUpdate>,
    /// PodGroups.
    pub groups: Vec<Group>,
    /// Pods.
    pub pods: Vec<PodUpdate>,
}

impl SyntheticUpdates {
    /// Applies everything through the model's watch-event API (queues, nodes, PodGroups, pods).
    pub fn apply(self, cluster: &mut Cluster) {
        for q in self.queues {
            cluster.apply_queue(q);
        }
        for n in self.nodes {
            cluster.apply_node(n);
        }
        for g in self.groups {
            cluster.apply_group(g);
        }
        for p in self.pods {
            cluster.apply_pod(p);
        }
    }

    /// Number of pods.
    #[must_use]
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    #[allow(clippy::too_many_arguments)]
    fn gang(
        &mut self,
        serial: usize,
        queue: &str,
        pods: u32,
        gpus_per_pod: u32,
        class: &str,
        running_on: Option<&[String]>,
        anti_affinity_else_spread: Option<bool>,
    ) {
        let namespace: Arc<str> = queue.rsplit_once('-').map_or(queue, |(dept, _)| dept).into();
        let name = format!("job-{serial}");
        let key = GroupKey {
            kind: GroupKind::Kai,
            namespace: namespace.clone(),
            name: name.as_str().into(),
        };
        let created = i64::try_from(serial).unwrap_or_default();
        let mut group = Group::new(key.clone(), queue, pods);
        group.uid = format!("syn-pg-{serial}").into();
        group.priority_class = Some(class.into());
        group.created = created;
        self.groups.push(group);
        let request = Resources::new(4000, 32 * GI, i64::from(gpus_per_pod) * 1000).with(PODS, 1);
        let rules = anti_affinity_else_spread.map(|anti| synthetic_rules(&name, &namespace, anti));
        for i in 0..pods {
            let node = running_on.and_then(|n| n.get(i as usize));
            self.pods.push(PodUpdate {
                uid: format!("syn-{serial}-{i}").into(),
                namespace: namespace.clone(),
                name: format!("{name}-{i}").into(),
                ours: true,
                group_key: Some(key.clone()),
                subgroup: None,
                request,
                gpu: GpuRequest::Whole(gpus_per_pod),
                constraints: Constraints::default(),
                labels: Labels::from([("job".to_owned(), name.clone())]),
                rules: rules.clone().unwrap_or_default(),
                api: ApiView {
                    status: if node.is_some() {
                        TaskStatus::Running
                    } else {
                        TaskStatus::Pending
                    },
                    node_name: node.map(|n| n.as_str().into()),
                    bound_at: None,
                },
                gpu_groups: Vec::new(),
                task_order: 0,
                never_preempts: false,
                created: created * 1000 + i64::from(i),
                problem: None,
                claims: Vec::new(),
                reservation_for: None,
                gpu_device: None,
            });
        }
    }
}

/// The update that reproduces a task as it is (to re-apply it changed, as a watch event would).
#[must_use]
pub fn pod_update_of(cluster: &Cluster, id: crate::model::TaskId) -> PodUpdate {
    let t = cluster.task(id);
    PodUpdate {
        uid: t.uid.clone(),
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        ours: t.ours,
        group_key: t.group_key.clone(),
        subgroup: t.subgroup.clone(),
        request: t.request,
        gpu: t.gpu,
        constraints: cluster.constraints.get(t.constraints).clone(),
        labels: (*t.labels).clone(),
        rules: cluster.rules.declared(t.rules),
        api: t.api.clone(),
        gpu_groups: t.gpu_groups.clone(),
        task_order: t.task_order,
        never_preempts: t.never_preempts,
        created: t.created,
        problem: t.spec_problem.clone(),
        claims: t.claims.clone(),
        reservation_for: t.reservation_for.clone(),
        gpu_device: t.gpu_device.clone(),
    }
}

/// Free GPUs stranded on partly used nodes: whole devices free on nodes that also hold GPU work (a
/// placement-quality measure: lower is better packed).
#[must_use]
pub fn fragmented_gpus(cluster: &Cluster) -> i64 {
    cluster
        .nodes
        .iter()
        .filter(|(_, n)| n.ready && !n.unschedulable)
        .map(|(_, n)| {
            let used = n.used.gpu() + n.nominated.gpu();
            let free = (n.allocatable.gpu() - used).max(0) / 1000;
            if used > 0 && free > 0 { free } else { 0 }
        })
        .sum()
}

/// A small deterministic generator (splitmix64), so synthetic clusters are the same on every run.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_gang_frees_its_node_for_the_next_one() {
        let mut s = Sim::new();
        s.nodes("n", 1, 8);
        s.queue("q", None, 8.0, -1.0, 1.0);
        s.gang(GangSpec::new("first", "q", 1).gpus(8));
        s.gang(GangSpec::new("second", "q", 1).gpus(8).created(10));
        let r = s.step();
        assert_eq!(r.decisions.binds.len(), 1, "one 8-GPU gang fits one 8-GPU node");
        assert_eq!(s.count("first", TaskStatus::Running), 1);
        assert!(s.history.is_empty(), "step keeps no history");
        assert!(s.remove_gang("ns", "first"));
        assert!(!s.remove_gang("ns", "first"), "already gone");
        assert!(
            s.cluster
                .group_id(&GroupKey {
                    kind: GroupKind::Kai,
                    namespace: "ns".into(),
                    name: "first".into(),
                })
                .is_none()
        );
        let r = s.step();
        assert_eq!(r.decisions.binds.len(), 1, "the freed node takes the second gang");
        assert_eq!(s.count("second", TaskStatus::Running), 1);
        s.cluster
            .check_invariants()
            .expect("accounting exact after removal");
    }
}
