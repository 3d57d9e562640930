//! Well-known label, annotation and object names.
//!
//! Every key the components read or write lives here, once, with a line on who reads and who writes it.
//! The names are KAI's (so KAI users' manifests keep working), the seed documents' variants, and
//! Volcano's where users come from Volcano.

/// Scheduler name pods opt in with (`spec.schedulerName`). Read by both components.
pub const SCHEDULER_NAME: &str = "kai-scheduler";

/// Namespace the chart installs the components into; leases live here.
pub const SYSTEM_NAMESPACE: &str = "kai-scheduler";

// ---------------------------------------------------------------------------------------------
// Pod -> group membership
// ---------------------------------------------------------------------------------------------

/// Annotation naming the PodGroup a pod belongs to (KAI's key). Written by the podgrouper, read by the
/// scheduler; users may set it on bare pods to join a PodGroup they created.
pub const POD_GROUP_NAME: &str = "pod-group-name";

/// The seed documents' spelling of the group annotation. Read by the podgrouper (the pod joins that group)
/// and by the scheduler.
pub const POD_GROUP_SEED: &str = "scheduling.run.ai/pod-group";

/// Volcano's group annotation (`scheduling.k8s.io/group-name`), naming a `scheduling.volcano.sh` PodGroup.
/// Read by the podgrouper and the scheduler.
pub const VOLCANO_GROUP_NAME: &str = "scheduling.k8s.io/group-name";

/// Pod label naming the sub-group (KAI `subGroups[].name`) a pod belongs to. Written by the podgrouper,
/// read by the scheduler.
pub const SUBGROUP_NAME: &str = "kai.scheduler/subgroup-name";

// ---------------------------------------------------------------------------------------------
// Queue and priority
// ---------------------------------------------------------------------------------------------

/// Queue label on a workload (top owner) or pod. Read by the podgrouper.
pub const QUEUE_LABEL: &str = "kai.scheduler/queue";

/// The seed documents' (older Run:ai) queue label. Read by the podgrouper after [`QUEUE_LABEL`].
pub const QUEUE_LABEL_LEGACY: &str = "runai/queue";

/// KAI's project label on a workload (top owner) or pod: a workload without a queue label goes to the
/// queue of its project, `<project>`, or `<project>-<node pool>` when the pod names a node pool
/// ([`NODE_POOL`]). Read by the podgrouper after the queue labels.
pub const PROJECT_LABEL: &str = "project";

/// Queue every workload without a queue label lands in. Created by the chart and `cargo xtask cluster up`.
pub const DEFAULT_QUEUE: &str = "default-queue";

/// Parent of [`DEFAULT_QUEUE`]; only leaf queues take work.
pub const DEFAULT_PARENT_QUEUE: &str = "default-parent-queue";

/// Label carrying a priority class name on a workload or pod (seed 002). Read by the podgrouper.
pub const PRIORITY_CLASS_LABEL: &str = "priorityClassName";

/// KubeRay's priority label on a Ray top owner. Read by the podgrouper.
pub const RAY_PRIORITY_CLASS_LABEL: &str = "ray.io/priority-class-name";

/// Label overriding preemptibility (`preemptible` / `non-preemptible`) on a workload or pod. Read by the
/// podgrouper, which copies it to `spec.preemptibility`.
pub const PREEMPTIBILITY_LABEL: &str = "kai.scheduler/preemptibility";

/// Pod label ordering tasks inside a gang (higher first). Read by the scheduler.
pub const TASK_PRIORITY_LABEL: &str = "kai.scheduler/task-priority";

/// The four priority classes the chart installs, with their values.
pub const PRIORITY_CLASSES: [(&str, i32); 4] = [
    ("train", 50),
    ("build-preemptible", 75),
    ("build", 100),
    ("inference", 125),
];

/// Priority at or above which a group is non-preemptible unless `spec.preemptibility` says otherwise.
pub const NON_PREEMPTIBLE_PRIORITY: i32 = 100;

/// Priority of a group whose priority class is unknown or unset (KAI's default).
pub const DEFAULT_PRIORITY: i32 = 50;

// ---------------------------------------------------------------------------------------------
// Gang behaviour on workloads
// ---------------------------------------------------------------------------------------------

/// Annotation on a workload (RayCluster in seed 000; any batch Job) asking for one gang over all its pods.
/// Read by the podgrouper.
pub const GANG_SCHEDULING: &str = "scheduling.run.ai/gang-scheduling";

/// Annotation on a workload overriding the computed minMember. Read by the podgrouper.
pub const MIN_MEMBER_OVERRIDE: &str = "kai.scheduler/min-member";

/// Annotation on the PodGroup copied from the top owner: YAML with name, uid, group, version, kind.
/// Written by the podgrouper, read by `kai explain`.
pub const TOP_OWNER_METADATA: &str = "kai.scheduler/top-owner-metadata";

/// Annotation on a PodGroup: when its gang last started (RFC 3339). Written by KAI's scheduler; read by
/// min-runtime protection when it is later than the pods' bindings. This scheduler does not write it.
pub const LAST_START_TIMESTAMP: &str = "kai.scheduler/last-start-timestamp";

/// Annotation on a PodGroup: when it was first seen running below minMember (RFC 3339). Written by KAI's
/// scheduler; read by stale-gang eviction when it appears or changes (after a switch from KAI). This
/// scheduler keeps its own stale times in memory and does not write it.
pub const STALE_TIMESTAMP: &str = "kai.scheduler/stale-podgroup-timestamp";

/// Node-pool label on nodes and pods. Read by the scheduler (partitioning) and copied by the podgrouper.
pub const NODE_POOL: &str = "kai.scheduler/node-pool";

/// The node pool named on a PodGroup's `schedulingConditions` by a scheduler serving what carries no
/// pool label (KAI's default pool name). Written by the scheduler; compared by `schedulingBackoff`.
pub const DEFAULT_NODE_POOL: &str = "default";

// ---------------------------------------------------------------------------------------------
// Topology
// ---------------------------------------------------------------------------------------------

/// Workload annotation naming a `Topology` object. Read by the podgrouper into `spec.topologyConstraint`.
pub const TOPOLOGY: &str = "kai.scheduler/topology";
/// Workload annotation: level all pods must share. Read by the podgrouper.
pub const TOPOLOGY_REQUIRED: &str = "kai.scheduler/topology-required-placement";
/// Workload annotation: level pods should share when possible. Read by the podgrouper.
pub const TOPOLOGY_PREFERRED: &str = "kai.scheduler/topology-preferred-placement";

// ---------------------------------------------------------------------------------------------
// GPU sharing
// ---------------------------------------------------------------------------------------------

/// Pod annotation: the part of one GPU a pod asks for, in (0, 1]. Read by the scheduler.
pub const GPU_FRACTION: &str = "gpu-fraction";
/// Pod annotation: GPU memory (MiB) a pod asks for on one device. Read by the scheduler.
pub const GPU_MEMORY: &str = "gpu-memory";
/// Pod annotation: the number of devices a fractional request spans. Read by the scheduler.
pub const GPU_FRACTION_NUM_DEVICES: &str = "gpu-fraction-num-devices";
/// Pod annotation naming the container that receives the shared GPU. Read by the scheduler.
pub const GPU_FRACTION_CONTAINER_NAME: &str = "gpu-fraction-container-name";
/// Label naming a shared-GPU slot: set on the sharing pods and on the reservation pod that holds the
/// device. Written by the scheduler; read back by it after a restart to rebuild GPU occupancy.
pub const GPU_GROUP: &str = "runai-gpu-group";
/// Annotation the reservation pod sets on itself: the device UUID it was given.
pub const RESERVED_GPU_INDEX: &str = "run.ai/reserve_for_gpu_index";
/// Pod annotation naming the physical device(s) a sharing pod was given (comma-separated UUIDs, as the
/// reservation pod reported them). Written by the scheduler before it binds the pod, for people and
/// tools; the containers get the device from the pod's GPU-sharing ConfigMap ([`GPU_SHARING_CONFIGMAP`]).
pub const GPU_DEVICE: &str = "kai.scheduler/gpu-device";
/// Pod annotation (KAI's) naming the pod's GPU-sharing ConfigMap, or the prefix of KAI's per-container
/// ones (`<prefix>-<index>`, `<prefix>-<index>-evar`). Written by the admission webhook, which points
/// the GPU containers' [`NVIDIA_VISIBLE_DEVICES`] and [`GPU_PORTION`] at that ConfigMap; the scheduler
/// fills every ConfigMap of that prefix the pod's containers reference, owned by the pod, before it
/// binds the pod.
pub const GPU_SHARING_CONFIGMAP: &str = "runai/shared-gpu-configmap";
/// Environment variable (and ConfigMap key) the NVIDIA container runtime reads: the devices a container
/// sees (UUIDs, comma-separated).
pub const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// Environment variable (and ConfigMap key) with the part of each device the pod received ("0.50"), as
/// KAI sets it.
pub const GPU_PORTION: &str = "GPU_PORTION";
/// KAI's older name of [`GPU_PORTION`], still set for workloads that read it.
pub const RUNAI_NUM_OF_GPUS: &str = "RUNAI_NUM_OF_GPUS";
/// Pod annotation recording how the pod received its GPU (`Regular`, `Fraction`). Written by the scheduler.
pub const RECEIVED_RESOURCE_TYPE: &str = "received-resource-type";
/// Namespace holding GPU reservation pods.
pub const RESERVATION_NAMESPACE: &str = "kai-resource-reservation";
/// `app` label value of reservation pods.
pub const RESERVATION_APP: &str = "kai-resource-reservation";
/// Node label: memory per GPU in MiB (from the GPU operator). Read by the scheduler for `gpu-memory`.
pub const NODE_GPU_MEMORY: &str = "nvidia.com/gpu.memory";
/// Node label: number of GPUs (from the GPU operator).
pub const NODE_GPU_COUNT: &str = "nvidia.com/gpu.count";
/// The extended resource name of a whole GPU.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

// ---------------------------------------------------------------------------------------------
// Storage (Kubernetes' own keys: kube-scheduler's volume binding and the PV controller)
// ---------------------------------------------------------------------------------------------

/// Claim annotation: the node a claim waiting for its first consumer is to be provisioned for. Written by
/// the scheduler before the pod's bind (as kube-scheduler does), read by external provisioners and by the
/// scheduler (a claim already given a node provisions only there).
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// PersistentVolume annotation: its `claimRef` was set by a controller, not by the user. Written by the
/// scheduler with the `claimRef` it reserves a volume with, read by the PV controller.
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The deprecated storage class annotation of claims and volumes, which still wins over
/// `spec.storageClassName` in Kubernetes. Read by the scheduler.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

// ---------------------------------------------------------------------------------------------
// Events and field managers
// ---------------------------------------------------------------------------------------------

/// Event reason on a PodGroup once its gang is placed (seed 000 queries it).
pub const EVENT_POD_GROUP_SCHEDULED: &str = "PodGroupScheduled";
/// Event reason on a PodGroup or pod that cannot be placed.
pub const EVENT_UNSCHEDULABLE: &str = "Unschedulable";
/// Event reason on a pod the podgrouper could not handle cleanly.
pub const EVENT_PODGROUPER_WARNING: &str = "PodGrouperWarning";
/// Event reason on an evicted pod and its PodGroup.
pub const EVENT_EVICT: &str = "Evict";

/// Server-side-apply field manager of the podgrouper.
pub const FIELD_MANAGER_PODGROUPER: &str = "kai-podgrouper";
/// Server-side-apply field manager of the scheduler.
pub const FIELD_MANAGER_SCHEDULER: &str = "kai-scheduler";
/// Server-side apply field manager of the pods' GPU-sharing ConfigMaps (device and portion, written by
/// the scheduler before it binds a sharing pod).
pub const FIELD_MANAGER_GPU_SHARING: &str = "kai-scheduler-gpu-sharing";
/// Server-side apply field manager of the CA bundle the scheduler keeps in its webhook configuration.
pub const FIELD_MANAGER_WEBHOOK_CA: &str = "kai-scheduler-webhook-ca";

// ---------------------------------------------------------------------------------------------
// Segments (sub-groups of a fixed size inside one replica type)
// ---------------------------------------------------------------------------------------------

/// Annotation on a pod, worker template or LeaderWorkerSet: split the workers into sub-groups of this
/// many pods. Read by the podgrouper.
pub const SEGMENT_SIZE: &str = "kai.scheduler/segment-size";
/// Annotation: level every segment's pods must share. Read by the podgrouper.
pub const SEGMENT_TOPOLOGY_REQUIRED: &str = "kai.scheduler/segment-topology-required-placement";
/// Annotation: level every segment's pods should share. Read by the podgrouper.
pub const SEGMENT_TOPOLOGY_PREFERRED: &str = "kai.scheduler/segment-topology-preferred-placement";

// ---------------------------------------------------------------------------------------------
// Keys other operators set on the pods and objects they create (read by the podgrouper)
// ---------------------------------------------------------------------------------------------

/// KubeRay: pod label naming the head (`headgroup`) or worker group of a pod.
pub const RAY_GROUP: &str = "ray.io/group";
/// JobSet: pod label naming the replicated job a pod belongs to.
pub const JOBSET_REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Kubeflow training operator: pod label with the lower-cased replica type (`master`, `worker`, ...).
pub const KUBEFLOW_REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
/// Kubeflow training operator: pod label with the pod's index within its replica type.
pub const KUBEFLOW_REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
/// Kubeflow training operator: pod label naming the job.
pub const KUBEFLOW_JOB_NAME: &str = "training.kubeflow.org/job-name";
/// Kubeflow MPI operator: pod label with the role (`launcher`, `worker`).
pub const KUBEFLOW_JOB_ROLE: &str = "training.kubeflow.org/job-role";
/// LeaderWorkerSet: pod label naming the set.
pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// LeaderWorkerSet: pod label with the replica group's index.
pub const LWS_GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// LeaderWorkerSet: pod label with the pod's index in its group (`0` is the leader).
pub const LWS_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// LeaderWorkerSet: pod annotation with the group size.
pub const LWS_SIZE: &str = "leaderworkerset.sigs.k8s.io/size";
/// Grove: pod label naming the PodGang (`scheduler.grove.io`) the pod belongs to.
pub const GROVE_PODGANG: &str = "grove.io/podgang";
/// Grove: PodGang annotation naming the `Topology` its pack constraints refer to.
pub const GROVE_TOPOLOGY_NAME: &str = "grove.io/topology-name";
/// Knative: annotation on a Revision with its minimal number of pods.
pub const KNATIVE_MIN_SCALE: &str = "autoscaling.knative.dev/min-scale";
/// Spark: pod label with the application's name.
pub const SPARK_APP_NAME: &str = "spark-app-name";
/// Spark: pod label with the application's unique id, shared by the driver and its executors.
pub const SPARK_APP_SELECTOR: &str = "spark-app-selector";
/// kubectl: the whole last applied manifest; never copied onto a PodGroup.
pub const LAST_APPLIED_CONFIGURATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
