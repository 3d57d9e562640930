//! Scenarios of the grouping rules: one table of (pod, owner chain) -> PodGroup fields, then the rules
//! that need more than a row (explicit groups, queue and priority validation, names, patches).

use api::keys;
use serde_json::json;

use super::testkit::{
    View, applied, obj, pod, run, run_with, subs, with_annotations, with_labels, with_status,
};
use super::{BreakReason, ChainBreak, Decision, Input, Object, Settings, Warning, group};

/// What a row expects of the computed PodGroup.
struct Expect {
    name: &'static str,
    owner: (&'static str, &'static str),
    min: i32,
    subs: &'static [(&'static str, i32)],
    pod_sub: Option<&'static str>,
    queue: &'static str,
    priority: &'static str,
}

fn row(label: &str, p: &super::testkit::PodB, owners: &[Object], view: &View, e: &Expect) {
    let out = run(p, owners, view);
    let g = applied(&out);
    assert_eq!(g.name, e.name, "{label}: name");
    assert_eq!(
        (g.owner.kind.as_str(), g.owner.name.as_str()),
        e.owner,
        "{label}: owner"
    );
    assert_eq!(g.min_member, e.min, "{label}: minMember");
    let want: Vec<(String, i32)> = e.subs.iter().map(|(n, m)| ((*n).to_owned(), *m)).collect();
    assert_eq!(subs(g), want, "{label}: subgroups");
    assert_eq!(g.pod_sub_group.as_deref(), e.pod_sub, "{label}: pod subgroup");
    assert_eq!(g.queue, e.queue, "{label}: queue");
    assert_eq!(g.priority_class_name, e.priority, "{label}: priority");
}

fn job(name: &str, spec: serde_json::Value) -> Object {
    obj("batch/v1", "Job", name, &format!("uid-{name}"), spec)
}

#[test]
fn one_row_per_kind() {
    let view = View::chart();
    let dq = "default-queue";

    // Bare pod.
    row(
        "bare pod",
        &pod("p"),
        &[],
        &view,
        &Expect {
            name: "pg-p-uid-p",
            owner: ("Pod", "p"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // Batch Job: per pod, owned by the Job.
    let j = job("train", json!({"parallelism": 2}));
    row(
        "job per pod",
        &pod("train-abc").owned_by(&j),
        std::slice::from_ref(&j),
        &view,
        &Expect {
            name: "pg-train-abc-uid-train",
            owner: ("Job", "train"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // Indexed Job: one gang of min(parallelism, completions).
    let j = job(
        "ranks",
        json!({"completionMode": "Indexed", "parallelism": 4, "completions": 3}),
    );
    row(
        "indexed job",
        &pod("ranks-0").owned_by(&j),
        std::slice::from_ref(&j),
        &view,
        &Expect {
            name: "pg-ranks-uid-ranks",
            owner: ("Job", "ranks"),
            min: 3,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // Any Job opts into a gang with the annotation.
    let j = with_annotations(
        job("ddp", json!({"parallelism": 4, "completions": 4})),
        &[(keys::GANG_SCHEDULING, "true")],
    );
    row(
        "gang job",
        &pod("ddp-x").owned_by(&j),
        std::slice::from_ref(&j),
        &view,
        &Expect {
            name: "pg-ddp-uid-ddp",
            owner: ("Job", "ddp"),
            min: 4,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // An Indexed Job opts out.
    let j = with_annotations(
        job("idx", json!({"completionMode": "Indexed", "parallelism": 4})),
        &[(keys::GANG_SCHEDULING, "false")],
    );
    row(
        "indexed opt-out",
        &pod("idx-1").owned_by(&j),
        std::slice::from_ref(&j),
        &view,
        &Expect {
            name: "pg-idx-1-uid-idx",
            owner: ("Job", "idx"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // CronJob: its Job's rules, with the CronJob's labels.
    let cron = with_labels(
        obj("batch/v1", "CronJob", "nightly", "uid-cron", json!({})),
        &[(keys::QUEUE_LABEL, "q-night")],
    );
    let j = job("nightly-2791", json!({"parallelism": 1}));
    row(
        "cronjob",
        &pod("nightly-2791-x").owned_by(&j),
        &[j.clone(), cron],
        &view.clone_with_queue("q-night"),
        &Expect {
            name: "pg-nightly-2791-x-uid-nightly-2791",
            owner: ("Job", "nightly-2791"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: "q-night",
            priority: "train",
        },
    );

    // Deployment: per pod, owned by the pod, inference.
    let d = with_labels(
        obj("apps/v1", "Deployment", "web", "uid-web", json!({"replicas": 3})),
        &[(keys::QUEUE_LABEL, "serve")],
    );
    let rs = obj(
        "apps/v1",
        "ReplicaSet",
        "web-7f",
        "uid-rs",
        json!({"replicas": 3}),
    );
    row(
        "deployment",
        &pod("web-7f-a").owned_by(&rs),
        &[rs.clone(), d],
        &View::chart().with_queue("serve"),
        &Expect {
            name: "pg-web-7f-a-uid-web-7f-a",
            owner: ("Pod", "web-7f-a"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: "serve",
            priority: "inference",
        },
    );

    // Standalone ReplicaSet and StatefulSet: one group, minMember 1; gang opt-in uses replicas.
    let rs = obj(
        "apps/v1",
        "ReplicaSet",
        "cache",
        "uid-cache",
        json!({"replicas": 3}),
    );
    row(
        "replicaset",
        &pod("cache-a").owned_by(&rs),
        std::slice::from_ref(&rs),
        &view,
        &Expect {
            name: "pg-cache-uid-cache",
            owner: ("ReplicaSet", "cache"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );
    let sts = with_annotations(
        obj("apps/v1", "StatefulSet", "db", "uid-db", json!({"replicas": 3})),
        &[(keys::GANG_SCHEDULING, "true")],
    );
    row(
        "statefulset gang",
        &pod("db-0").owned_by(&sts),
        std::slice::from_ref(&sts),
        &view,
        &Expect {
            name: "pg-db-uid-db",
            owner: ("StatefulSet", "db"),
            min: 3,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // JobSet, absent startup policy: per replicated job (KAI scenario 25).
    let js = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        "u1",
        json!({"replicatedJobs": [
            {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
            {"name": "worker", "replicas": 3, "template": {"spec": {"parallelism": 8}}},
        ]}),
    );
    let child = job("js-worker-0", json!({}));
    row(
        "jobset per replicated job",
        &pod("js-worker-0-0")
            .owned_by(&child)
            .label(keys::JOBSET_REPLICATED_JOB, "worker"),
        &[child.clone(), js.clone()],
        &view,
        &Expect {
            name: "pg-js-u1-worker",
            owner: ("JobSet", "js"),
            min: 24,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // JobSet AnyOrder: one group with a sub-group per replicated job (KAI scenario 27, plus sub-groups).
    let js_any = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "any",
        "u2",
        json!({
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
        "replicatedJobs": [
            {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
            {"name": "worker", "replicas": 2, "template": {"spec": {"parallelism": 4}}},
        ]}),
    );
    row(
        "jobset any order",
        &pod("any-worker-0-0")
            .owned_by(&child)
            .label(keys::JOBSET_REPLICATED_JOB, "worker"),
        &[child.clone(), js_any],
        &view,
        &Expect {
            name: "pg-any-u2",
            owner: ("JobSet", "any"),
            min: 9,
            subs: &[("leader", 1), ("worker", 8)],
            pod_sub: Some("worker"),
            queue: dq,
            priority: "train",
        },
    );

    // TrainJob (seed 001): grouped through its JobSet, the TrainJob's queue label flows down.
    let tj = with_labels(
        obj(
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            "pytorch-kai-job",
            "u-tj",
            json!({"trainer": {"numNodes": 4}}),
        ),
        &[(keys::QUEUE_LABEL, "prod-queue")],
    );
    let tjs = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "pytorch-kai-job",
        "u-tjs",
        json!({"replicatedJobs": [
            {"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 4, "completions": 4}}},
        ]}),
    );
    let tjob = job("pytorch-kai-job-node-0", json!({"parallelism": 4}));
    row(
        "trainjob",
        &pod("pytorch-kai-job-node-0-0")
            .owned_by(&tjob)
            .label(keys::JOBSET_REPLICATED_JOB, "node"),
        &[tjob, tjs, tj],
        &View::chart().with_queue("prod-queue"),
        &Expect {
            name: "pg-pytorch-kai-job-u-tjs-node",
            owner: ("JobSet", "pytorch-kai-job"),
            min: 4,
            subs: &[],
            pod_sub: None,
            queue: "prod-queue",
            priority: "train",
        },
    );

    // RayCluster (KAI scenario 33) with numOfHosts and a suspended group.
    let rc = obj(
        "ray.io/v1",
        "RayCluster",
        "rc",
        "u-rc",
        json!({
        "headGroupSpec": {"template": {}},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 3, "minReplicas": 2, "numOfHosts": 2},
            {"replicas": 3, "minReplicas": 1},
            {"groupName": "off", "replicas": 5, "suspended": true},
            {"groupName": "none", "replicas": 0, "minReplicas": 0},
        ]}),
    );
    row(
        "raycluster",
        &pod("rc-gpu-x").owned_by(&rc).label(keys::RAY_GROUP, "gpu"),
        std::slice::from_ref(&rc),
        &view,
        &Expect {
            name: "pg-rc-u-rc",
            owner: ("RayCluster", "rc"),
            min: 6,
            subs: &[("headgroup", 1), ("gpu", 4), ("worker-group-1", 1)],
            pod_sub: Some("gpu"),
            queue: dq,
            priority: "train",
        },
    );

    // RayJob: named after the RayJob, sized by the cluster in the chain.
    let rj = obj("ray.io/v1", "RayJob", "rj", "u-rj", json!({}));
    row(
        "rayjob",
        &pod("rc-head").owned_by(&rc).label(keys::RAY_GROUP, "headgroup"),
        &[rc.clone(), rj],
        &view,
        &Expect {
            name: "pg-rj-u-rj",
            owner: ("RayJob", "rj"),
            min: 6,
            subs: &[("headgroup", 1), ("gpu", 4), ("worker-group-1", 1)],
            pod_sub: Some("headgroup"),
            queue: dq,
            priority: "train",
        },
    );

    // RayService: each cluster is its own group, owned by the cluster.
    let rsvc = with_labels(
        obj("ray.io/v1", "RayService", "svc", "u-svc", json!({})),
        &[(keys::QUEUE_LABEL, "serve")],
    );
    row(
        "rayservice",
        &pod("rc-head").owned_by(&rc).label(keys::RAY_GROUP, "headgroup"),
        &[rc.clone(), rsvc],
        &View::chart().with_queue("serve"),
        &Expect {
            name: "pg-rc-u-rc",
            owner: ("RayCluster", "rc"),
            min: 6,
            subs: &[("headgroup", 1), ("gpu", 4), ("worker-group-1", 1)],
            pod_sub: Some("headgroup"),
            queue: "serve",
            priority: "train",
        },
    );

    // PyTorchJob: Master 1 + Worker 4, sub-groups.
    let pt = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pt",
        "u-pt",
        json!({"pytorchReplicaSpecs": {
        "Master": {"replicas": 1}, "Worker": {"replicas": 4}}}),
    );
    row(
        "pytorchjob",
        &pod("pt-worker-2")
            .owned_by(&pt)
            .label(keys::KUBEFLOW_REPLICA_TYPE, "worker"),
        std::slice::from_ref(&pt),
        &view,
        &Expect {
            name: "pg-pt-u-pt",
            owner: ("PyTorchJob", "pt"),
            min: 5,
            subs: &[("master", 1), ("worker", 4)],
            pod_sub: Some("worker"),
            queue: dq,
            priority: "train",
        },
    );

    // TFJob / XGBoostJob / JAXJob / MPIJob: sum of replicas (absent counts 1), minAvailable wins.
    let tf = obj(
        "kubeflow.org/v1",
        "TFJob",
        "tf",
        "u-tf",
        json!({"tfReplicaSpecs": {"PS": {"replicas": 2}, "Worker": {"replicas": 4}, "Chief": {}}}),
    );
    row(
        "tfjob",
        &pod("tf-worker-0").owned_by(&tf),
        std::slice::from_ref(&tf),
        &view,
        &Expect {
            name: "pg-tf-u-tf",
            owner: ("TFJob", "tf"),
            min: 7,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );
    let xgb = obj(
        "kubeflow.org/v1",
        "XGBoostJob",
        "xgb",
        "u-x",
        json!({
        "runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
        "xgbReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}),
    );
    row(
        "xgboostjob",
        &pod("xgb-worker-0").owned_by(&xgb),
        std::slice::from_ref(&xgb),
        &view,
        &Expect {
            name: "pg-xgb-u-x",
            owner: ("XGBoostJob", "xgb"),
            min: 2,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );
    let jax = obj(
        "kubeflow.org/v1",
        "JAXJob",
        "jax",
        "u-j",
        json!({"jaxReplicaSpecs": {"Worker": {"replicas": 8}}}),
    );
    row(
        "jaxjob",
        &pod("jax-worker-0").owned_by(&jax),
        std::slice::from_ref(&jax),
        &view,
        &Expect {
            name: "pg-jax-u-j",
            owner: ("JAXJob", "jax"),
            min: 8,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );
    let mpi = obj(
        "kubeflow.org/v2beta1",
        "MPIJob",
        "mpi",
        "u-m",
        json!({"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}}),
    );
    row(
        "mpijob",
        &pod("mpi-worker-0").owned_by(&mpi),
        std::slice::from_ref(&mpi),
        &view,
        &Expect {
            name: "pg-mpi-u-m",
            owner: ("MPIJob", "mpi"),
            min: 3,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // LeaderWorkerSet: one gang per replica group (KAI scenario 47).
    let lws = obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "lws",
        "u-lws",
        json!({"leaderWorkerTemplate": {"size": 3}}),
    );
    let leader_sts = obj("apps/v1", "StatefulSet", "lws", "u-lsts", json!({}));
    let leader_pod = std::sync::Arc::new(super::names::pod_as_object(
        &pod("lws-1")
            .label(keys::LWS_GROUP_INDEX, "1")
            .label(keys::LWS_WORKER_INDEX, "0")
            .build(),
    ));
    let worker_sts = obj("apps/v1", "StatefulSet", "lws-1", "u-wsts", json!({}));
    row(
        "lws worker",
        &pod("lws-1-2")
            .owned_by(&worker_sts)
            .label(keys::LWS_GROUP_INDEX, "1")
            .label(keys::LWS_WORKER_INDEX, "2"),
        &[worker_sts, leader_pod, leader_sts.clone(), lws.clone()],
        &view,
        &Expect {
            name: "pg-lws-u-lws-group-1",
            owner: ("LeaderWorkerSet", "lws"),
            min: 3,
            subs: &[("leader", 1), ("workers", 2)],
            pod_sub: Some("workers"),
            queue: dq,
            priority: "train",
        },
    );

    // Knative: one gang per revision of min-scale pods, inference.
    let ksvc = obj("serving.knative.dev/v1", "Service", "hello", "u-ks", json!({}));
    let cfg = obj(
        "serving.knative.dev/v1",
        "Configuration",
        "hello",
        "u-cfg",
        json!({}),
    );
    let rev = with_annotations(
        obj(
            "serving.knative.dev/v1",
            "Revision",
            "hello-00001",
            "u-rev",
            json!({}),
        ),
        &[(keys::KNATIVE_MIN_SCALE, "3")],
    );
    let kd = obj(
        "apps/v1",
        "Deployment",
        "hello-00001-deployment",
        "u-kd",
        json!({}),
    );
    let krs = obj(
        "apps/v1",
        "ReplicaSet",
        "hello-00001-deployment-5c",
        "u-krs",
        json!({}),
    );
    let kchain = [krs.clone(), kd, rev, cfg, ksvc];
    row(
        "knative",
        &pod("hello-x").owned_by(&krs),
        &kchain,
        &view,
        &Expect {
            name: "pg-hello-00001-u-rev",
            owner: ("Revision", "hello-00001"),
            min: 3,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "inference",
        },
    );
    let per_pod = Settings {
        knative_gang: false,
        ..Settings::default()
    };
    let g = run_with(&pod("hello-x").owned_by(&krs), &kchain, &view, &per_pod);
    assert_eq!(applied(&g).name, "pg-hello-x-uid-hello-x");
    assert_eq!(applied(&g).owner.kind, "Pod");

    // Spark without an operator: driver and executors share the application's group.
    let driver = pod("spark-driver")
        .label(keys::SPARK_APP_NAME, "etl")
        .label(keys::SPARK_APP_SELECTOR, "spark-0a1b2c");
    let driver_obj = std::sync::Arc::new(super::names::pod_as_object(&driver.build()));
    row(
        "spark executor",
        &pod("etl-exec-1").owned_by(&driver_obj),
        std::slice::from_ref(&driver_obj),
        &view,
        &Expect {
            name: "spark-0a1b2c",
            owner: ("Pod", "spark-driver"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );
    row(
        "spark driver",
        &driver,
        &[],
        &view,
        &Expect {
            name: "spark-0a1b2c",
            owner: ("Pod", "spark-driver"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // Spark operator: one group per SparkApplication.
    let app = obj(
        "sparkoperator.k8s.io/v1beta2",
        "SparkApplication",
        "etl",
        "u-app",
        json!({}),
    );
    row(
        "spark application",
        &pod("etl-driver").owned_by(&app),
        std::slice::from_ref(&app),
        &view,
        &Expect {
            name: "pg-etl-u-app",
            owner: ("SparkApplication", "etl"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // Notebook: build priority. Unknown kinds: default.
    let nb = obj("kubeflow.org/v1beta1", "Notebook", "nb", "u-nb", json!({}));
    row(
        "notebook",
        &pod("nb-0").owned_by(&nb),
        std::slice::from_ref(&nb),
        &view,
        &Expect {
            name: "pg-nb-u-nb",
            owner: ("Notebook", "nb"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "build",
        },
    );
    let tr = obj("tekton.dev/v1", "TaskRun", "tr", "u-tr", json!({}));
    row(
        "unknown kind",
        &pod("tr-pod").owned_by(&tr),
        std::slice::from_ref(&tr),
        &view,
        &Expect {
            name: "pg-tr-u-tr",
            owner: ("TaskRun", "tr"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: dq,
            priority: "train",
        },
    );

    // Argo Workflow wrapping pods: per pod (KAI scenario 3).
    let wf = with_labels(
        obj("argoproj.io/v1alpha1", "Workflow", "wf", "u-wf", json!({})),
        &[(keys::QUEUE_LABEL, "test")],
    );
    row(
        "argo workflow",
        &pod("argo-pod").owned_by(&wf),
        std::slice::from_ref(&wf),
        &View::chart().with_queue("test"),
        &Expect {
            name: "pg-argo-pod-uid-argo-pod",
            owner: ("Pod", "argo-pod"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: "test",
            priority: "train",
        },
    );
}

impl View {
    fn clone_with_queue(&self, q: &str) -> Self {
        View {
            objects: self.objects.clone(),
            pods: self.pods.clone(),
            priority_classes: self.priority_classes.clone(),
            queues: self.queues.clone(),
            pod_groups: self.pod_groups.clone(),
            kind_defaults: self.kind_defaults.clone(),
        }
        .with_queue(q)
    }
}

#[test]
fn jobset_parallelism_edge_cases() {
    // KAI scenario 26: replicas × min(parallelism, completions), non-positive values count 1.
    for (rj, want) in [
        (json!({"name": "w", "replicas": 2}), 2),
        (
            json!({"name": "w", "replicas": 1, "template": {"spec": {"parallelism": 0}}}),
            1,
        ),
        (
            json!({"name": "w", "replicas": 1, "template": {"spec": {"parallelism": -1}}}),
            1,
        ),
        (
            json!({"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 3}}}),
            6,
        ),
        (
            json!({"name": "w", "replicas": 3, "template": {"spec": {"parallelism": 2, "completions": 5}}}),
            6,
        ),
    ] {
        let js = obj(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            "js",
            "u",
            json!({"replicatedJobs": [rj.clone()]}),
        );
        let out = run(
            &pod("p").owned_by(&js).label(keys::JOBSET_REPLICATED_JOB, "w"),
            &[js],
            &View::default(),
        );
        assert_eq!(applied(&out).min_member, want, "{rj}");
    }
}

#[test]
fn jobset_pod_counts_past_i64_saturate() {
    let replicated = |name: &str| json!({"name": name, "replicas": i64::MAX, "template": {"spec": {"parallelism": i64::MAX}}});
    let js = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        "u",
        json!({"startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "replicatedJobs": [replicated("a"), replicated("b")]}),
    );
    let p = pod("p").owned_by(&js).label(keys::JOBSET_REPLICATED_JOB, "a");
    let out = run(&p, &[js], &View::default());
    assert_eq!(applied(&out).min_member, i32::MAX);
}

#[test]
fn jobset_with_dependencies_splits_even_in_any_order() {
    let js = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        "u",
        json!({
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
        "replicatedJobs": [
            {"name": "init", "replicas": 1},
            {"name": "node", "replicas": 4, "dependsOn": [{"name": "init", "status": "Complete"}]},
        ]}),
    );
    let out = run(
        &pod("p").owned_by(&js).label(keys::JOBSET_REPLICATED_JOB, "node"),
        &[js],
        &View::default(),
    );
    assert_eq!(applied(&out).name, "pg-js-u-node");
    assert_eq!(applied(&out).min_member, 4);
}

#[test]
fn jobset_pod_without_replicated_job_label_falls_back_with_a_warning() {
    let js = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        "u",
        json!({"replicatedJobs": [{"name": "w", "replicas": 3}]}),
    );
    let out = run(&pod("p").owned_by(&js), &[js], &View::default());
    assert_eq!(applied(&out).name, "pg-js-u");
    assert_eq!(applied(&out).min_member, 1);
    assert!(
        matches!(out.warnings.as_slice(), [Warning::Workload { .. }]),
        "{:?}",
        out.warnings
    );
}

#[test]
fn ray_cluster_with_more_worker_groups_than_the_cap_gets_no_sub_groups() {
    // Sub-groups listed in the spec rather than cut by a number meet the same cap, in `finish`.
    let groups: Vec<serde_json::Value> = (0..super::MAX_SUB_GROUPS)
        .map(|i| json!({"groupName": format!("g{i}"), "replicas": 1}))
        .collect();
    let rc = obj(
        "ray.io/v1",
        "RayCluster",
        "rc",
        "u",
        json!({"headGroupSpec": {}, "workerGroupSpecs": groups}),
    );
    let p = pod("rc-g1-x").owned_by(&rc).label(keys::RAY_GROUP, "g1");
    let out = run(&p, &[rc], &View::default());
    let g = applied(&out);
    // Head plus 10,000 worker groups is one too many.
    assert!(g.sub_groups.is_empty(), "{} sub-groups", g.sub_groups.len());
    assert_eq!(g.pod_sub_group, None);
    assert_eq!(g.min_member, 10_001);
    assert_eq!(reasons(&out), ["TooManySubGroups"], "{:?}", out.warnings);
    assert!(
        out.warnings[0].to_string().contains("10001"),
        "{}",
        out.warnings[0]
    );
}

#[test]
fn ray_gang_annotation_and_seed_000_worker_template_queue() {
    // Seed 000 step 6: gang-scheduling "true", 1 head + 4 workers, the queue label only on the workers'
    // template. Head and worker pods compute the same group and queue.
    let rc = with_annotations(
        obj(
            "ray.io/v1",
            "RayCluster",
            "ray-cluster",
            "u",
            json!({
            "headGroupSpec": {"template": {"spec": {"schedulerName": "kai-scheduler"}}},
            "workerGroupSpecs": [{"groupName": "gpu-workers", "replicas": 4, "minReplicas": 4, "maxReplicas": 4,
                "template": {"metadata": {"labels": {"runai/queue": "training"}}}}]}),
        ),
        &[(keys::GANG_SCHEDULING, "true")],
    );
    let view = View::chart().with_queue("training");
    let head = run(
        &pod("ray-cluster-head")
            .owned_by(&rc)
            .label(keys::RAY_GROUP, "headgroup"),
        std::slice::from_ref(&rc),
        &view,
    );
    let worker = run(
        &pod("ray-cluster-gpu-workers-x")
            .owned_by(&rc)
            .label(keys::RAY_GROUP, "gpu-workers")
            .label("runai/queue", "training"),
        std::slice::from_ref(&rc),
        &view,
    );
    let (h, w) = (applied(&head), applied(&worker));
    assert_eq!((h.min_member, h.queue.as_str()), (5, "training"));
    assert_eq!(h.name, w.name);
    assert_eq!(
        (h.queue.as_str(), h.min_member, &h.sub_groups),
        (w.queue.as_str(), w.min_member, &w.sub_groups)
    );
    assert!(head.warnings.is_empty(), "{:?}", head.warnings);

    // Opting out: no gang.
    let off = with_annotations(rc, &[(keys::GANG_SCHEDULING, "false")]);
    let out = run(&pod("ray-cluster-head").owned_by(&off), &[off], &view);
    assert_eq!(applied(&out).min_member, 1);
    assert!(applied(&out).sub_groups.is_empty());
}

#[test]
fn ray_priority_label_and_template_topology() {
    let rc = with_labels(
        obj(
            "ray.io/v1",
            "RayCluster",
            "rc",
            "u",
            json!({
            "headGroupSpec": {"template": {"metadata": {"annotations": {
                keys::TOPOLOGY: "topo", keys::TOPOLOGY_REQUIRED: "rack", keys::TOPOLOGY_PREFERRED: "node"}}}},
            "workerGroupSpecs": [
                {"groupName": "cpu", "replicas": 1, "template": {"metadata": {"annotations": {keys::TOPOLOGY_PREFERRED: "host"}}}},
            ]}),
        ),
        &[(keys::RAY_PRIORITY_CLASS_LABEL, "ray-high")],
    );
    let out = run(
        &pod("h").owned_by(&rc),
        &[rc],
        &View::chart().with_priority_class("ray-high"),
    );
    let g = applied(&out);
    assert_eq!(g.priority_class_name, "ray-high");
    let head = g.sub_groups[0]
        .topology_constraint
        .clone()
        .expect("head topology");
    assert_eq!(
        (head.topology.as_deref(), head.required_topology_level.as_deref()),
        (Some("topo"), Some("rack"))
    );
    // The worker template sets a placement without a topology name: dropped, with a warning.
    assert_eq!(g.sub_groups[1].topology_constraint, None);
    assert!(
        out.warnings.iter().any(|w| matches!(w, Warning::Workload { .. })),
        "{:?}",
        out.warnings
    );
}

#[test]
fn rayjob_sizes_from_its_spec_or_the_cluster_in_its_status() {
    let spec = json!({"headGroupSpec": {}, "workerGroupSpecs": [{"groupName": "w", "replicas": 2}]});
    // A RayJob's submitter pod: RayJob -> Job -> pod; the RayJob carries rayClusterSpec.
    let rj = obj(
        "ray.io/v1",
        "RayJob",
        "rj",
        "u",
        json!({"rayClusterSpec": spec.clone()}),
    );
    let submitter = job("rj-submit", json!({}));
    let out = run(
        &pod("rj-submit-x").owned_by(&submitter),
        &[submitter.clone(), rj],
        &View::default(),
    );
    assert_eq!(
        (applied(&out).name.as_str(), applied(&out).min_member),
        ("pg-rj-u", 3)
    );
    assert_eq!(
        applied(&out).pod_sub_group,
        None,
        "the submitter is in no sub-group"
    );

    // Cluster selected by status, read from the view.
    let rj = with_status(
        obj("ray.io/v1", "RayJob", "rj", "u", json!({})),
        json!({"rayClusterName": "shared"}),
    );
    let view = View {
        objects: vec![obj("ray.io/v1", "RayCluster", "shared", "u-s", spec)],
        ..View::default()
    };
    let out = run(
        &pod("rj-submit-x").owned_by(&submitter),
        &[submitter.clone(), rj.clone()],
        &view,
    );
    assert_eq!(applied(&out).min_member, 3);

    // Not known yet: a retryable error, no group.
    let p = pod("rj-submit-x").owned_by(&submitter).build();
    let owners = [submitter, rj];
    let err = group(
        &Input {
            pod: &p,
            owners: &owners,
            chain_break: None,
        },
        &Settings::default(),
        &View::default(),
    );
    assert!(
        matches!(err, Err(super::GroupingError::NotReady { .. })),
        "{err:?}"
    );
}

#[test]
fn kubeflow_min_member_sources() {
    let specs = json!({"Master": {"replicas": 2}, "Worker": {"replicas": 4}});
    for (extra, want) in [
        (json!({}), 6),
        (json!({"elasticPolicy": {"minReplicas": 3}}), 3),
        (json!({"runPolicy": {"schedulingPolicy": {"minAvailable": 5}}}), 5),
        (
            json!({"elasticPolicy": {"minReplicas": 3}, "runPolicy": {"schedulingPolicy": {"minAvailable": 4}}}),
            4,
        ),
    ] {
        let mut spec = json!({"pytorchReplicaSpecs": specs.clone()});
        spec.as_object_mut()
            .expect("object")
            .extend(extra.as_object().cloned().unwrap_or_default());
        let pt = obj("kubeflow.org/v1", "PyTorchJob", "pt", "u", spec);
        let out = run(
            &pod("pt-master-0")
                .owned_by(&pt)
                .label(keys::KUBEFLOW_REPLICA_TYPE, "master"),
            &[pt],
            &View::default(),
        );
        let g = applied(&out);
        assert_eq!(g.min_member, want, "{extra}");
        assert_eq!(
            subs(g),
            vec![("master".to_owned(), 2), ("worker".to_owned(), want - 2)]
        );
        assert_eq!(g.pod_sub_group.as_deref(), Some("master"));
    }
}

#[test]
fn kubeflow_min_above_replicas_is_reported() {
    let pt = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pt",
        "u",
        json!({
        "elasticPolicy": {"minReplicas": 66}, "pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}),
    );
    let out = run(&pod("pt-worker-0").owned_by(&pt), &[pt], &View::default());
    assert_eq!(applied(&out).min_member, 66);
    assert!(
        out.warnings
            .iter()
            .any(|w| w.to_string().contains("cannot start")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn pytorch_segments() {
    // KAI scenario 43: Master 1, Worker 5, segment size 2 -> worker-0 (2), worker-1 (2), worker-2 (1).
    let pt = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pt",
        "u",
        json!({"pytorchReplicaSpecs": {
        "Master": {"replicas": 1},
        "Worker": {"replicas": 5, "template": {"metadata": {"annotations": {
            keys::SEGMENT_SIZE: "2", keys::TOPOLOGY: "topo", keys::SEGMENT_TOPOLOGY_REQUIRED: "rack"}}}}}}),
    );
    let p = pod("pt-worker-4")
        .owned_by(&pt)
        .label(keys::KUBEFLOW_REPLICA_TYPE, "worker")
        .label(keys::KUBEFLOW_REPLICA_INDEX, "4");
    let out = run(&p, std::slice::from_ref(&pt), &View::default());
    let g = applied(&out);
    assert_eq!(g.min_member, 6);
    let names: Vec<(String, i32)> = subs(g);
    assert_eq!(
        names,
        [
            ("master", 1),
            ("worker", 5),
            ("worker-0", 2),
            ("worker-1", 2),
            ("worker-2", 1)
        ]
        .map(|(n, m)| (n.to_owned(), m))
        .to_vec()
    );
    assert_eq!(g.pod_sub_group.as_deref(), Some("worker-2"));
    assert_eq!(g.sub_groups[2].parent.as_deref(), Some("worker"));
    let c = g.sub_groups[2]
        .topology_constraint
        .clone()
        .expect("segment topology");
    assert_eq!(
        (c.topology.as_deref(), c.required_topology_level.as_deref()),
        (Some("topo"), Some("rack"))
    );

    // A bad size is reported and ignored.
    let bad = pod("pt-worker-0")
        .owned_by(&pt)
        .label(keys::KUBEFLOW_REPLICA_TYPE, "worker")
        .annotation(keys::SEGMENT_SIZE, "two");
    let out = run(&bad, &[pt], &View::default());
    assert_eq!(applied(&out).sub_groups.len(), 2);
    assert!(
        matches!(out.warnings.as_slice(), [Warning::InvalidValue { .. }]),
        "{:?}",
        out.warnings
    );
}

#[test]
fn mpi_launcher_counted_only_once_it_exists_when_created_late() {
    let mpi = obj(
        "kubeflow.org/v2beta1",
        "MPIJob",
        "mpi",
        "u",
        json!({
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}}),
    );
    let worker = pod("mpi-worker-0").owned_by(&mpi);
    let out = run(&worker, std::slice::from_ref(&mpi), &View::default());
    assert_eq!(applied(&out).min_member, 2);
    let launcher = pod("mpi-launcher")
        .label(keys::KUBEFLOW_JOB_NAME, "mpi")
        .label(keys::KUBEFLOW_JOB_ROLE, "launcher")
        .build();
    let view = View {
        pods: vec![std::sync::Arc::new(launcher)],
        ..View::default()
    };
    let out = run(&worker, &[mpi], &view);
    assert_eq!(applied(&out).min_member, 3);
}

#[test]
fn lws_leader_ready_depends_on_the_leader_not_on_the_triggering_pod() {
    let lws = obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "lws",
        "u",
        json!({
        "startupPolicy": "LeaderReady", "leaderWorkerTemplate": {"size": 5}}),
    );
    let sts = obj("apps/v1", "StatefulSet", "lws", "u-sts", json!({}));
    let leader = pod("lws-0")
        .owned_by(&sts)
        .label(keys::LWS_NAME, "lws")
        .label(keys::LWS_GROUP_INDEX, "0")
        .label(keys::LWS_WORKER_INDEX, "0");
    let out = run(&leader, &[sts.clone(), lws.clone()], &View::default());
    assert_eq!(
        (applied(&out).min_member, subs(applied(&out))),
        (1, vec![("leader".to_owned(), 1)])
    );

    let bound = leader.clone().node("n1");
    let out = run(&bound, &[sts.clone(), lws.clone()], &View::default());
    assert_eq!(applied(&out).min_member, 5);

    // A worker computes the same as the leader, from the leader's state in the cache.
    let leader_obj = std::sync::Arc::new(super::names::pod_as_object(&bound.build()));
    let wsts = obj("apps/v1", "StatefulSet", "lws-0", "u-w", json!({}));
    let worker = pod("lws-0-3")
        .owned_by(&wsts)
        .label(keys::LWS_NAME, "lws")
        .label(keys::LWS_GROUP_INDEX, "0")
        .label(keys::LWS_WORKER_INDEX, "3");
    let view = View {
        pods: vec![std::sync::Arc::new(bound.build())],
        ..View::default()
    };
    let out = run(
        &worker,
        &[wsts.clone(), leader_obj.clone(), sts.clone(), lws.clone()],
        &view,
    );
    assert_eq!(applied(&out).min_member, 5);
    assert_eq!(applied(&out).pod_sub_group.as_deref(), Some("workers"));
    let view = View {
        pods: vec![std::sync::Arc::new(leader.build())],
        ..View::default()
    };
    let out = run(&worker, &[wsts, leader_obj, sts, lws], &view);
    assert_eq!(applied(&out).min_member, 1);
}

#[test]
fn lws_segments() {
    let lws = |size: i32, seg: i32, policy: &str| {
        obj(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "lws",
            "u",
            json!({"leaderWorkerTemplate": {
            "size": size, "subGroupPolicy": {"subGroupSize": seg, "subGroupPolicyType": policy}}}),
        )
    };
    let member = |i: i32| {
        pod(&format!("lws-0-{i}"))
            .label(keys::LWS_GROUP_INDEX, "0")
            .label(keys::LWS_WORKER_INDEX, &i.to_string())
    };
    let pairs = |v: &[(&str, i32)]| v.iter().map(|(n, m)| ((*n).to_owned(), *m)).collect::<Vec<_>>();

    // KAI scenario 50: size 5, segments of 2, LeaderWorker.
    let set = lws(5, 2, "LeaderWorker");
    let out = run(&member(0), std::slice::from_ref(&set), &View::default());
    assert_eq!(
        subs(applied(&out)),
        pairs(&[("segment-0", 3), ("segment-1", 2), ("leader", 1), ("workers", 2)])
    );
    assert_eq!(applied(&out).pod_sub_group.as_deref(), Some("leader"));
    assert_eq!(
        applied(&run(&member(1), std::slice::from_ref(&set), &View::default()))
            .pod_sub_group
            .as_deref(),
        Some("workers")
    );
    assert_eq!(
        applied(&run(&member(3), std::slice::from_ref(&set), &View::default()))
            .pod_sub_group
            .as_deref(),
        Some("segment-1")
    );

    // KAI scenario 51: size 4, segments of 2; LeaderExcluded with size 5.
    let out = run(&member(1), &[lws(4, 2, "LeaderWorker")], &View::default());
    assert_eq!(
        subs(applied(&out)),
        pairs(&[("segment-0", 2), ("segment-1", 2), ("leader", 1), ("workers", 1)])
    );
    let set = lws(5, 2, "LeaderExcluded");
    let out = run(&member(3), std::slice::from_ref(&set), &View::default());
    assert_eq!(
        subs(applied(&out)),
        pairs(&[("leader", 1), ("segment-0", 2), ("segment-1", 2)])
    );
    assert_eq!(applied(&out).pod_sub_group.as_deref(), Some("segment-1"));
    assert_eq!(
        applied(&run(&member(1), &[set], &View::default()))
            .pod_sub_group
            .as_deref(),
        Some("segment-0")
    );

    // Invalid: a segment larger than the group.
    let out = run(&member(1), &[lws(3, 4, "LeaderWorker")], &View::default());
    assert_eq!(subs(applied(&out)), pairs(&[("leader", 1), ("workers", 2)]));
    assert!(!out.warnings.is_empty());
}

/// Groups `p` and fails when that takes long: a hostile size must be refused, not worked through.
fn run_quickly(label: &str, p: &super::testkit::PodB, owners: &[Object]) -> super::Outcome {
    let started = std::time::Instant::now();
    let out = run(p, owners, &View::default());
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(5), "{label}: took {took:?}");
    out
}

/// The reasons of an outcome's warnings.
fn reasons(out: &super::Outcome) -> Vec<&'static str> {
    out.warnings.iter().map(Warning::reason).collect()
}

/// A PyTorchJob of `workers` workers (no master) whose worker template asks for `segment_size`.
fn pytorch_workers(workers: i64, segment_size: &str) -> Object {
    obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pt",
        "u",
        json!({"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {"metadata": {
            "annotations": {keys::SEGMENT_SIZE: segment_size}}}}}}),
    )
}

fn pytorch_worker_pod(pt: &Object) -> super::testkit::PodB {
    pod("pt-worker-1")
        .owned_by(pt)
        .label(keys::KUBEFLOW_REPLICA_TYPE, "worker")
        .label(keys::KUBEFLOW_REPLICA_INDEX, "1")
}

#[test]
fn pytorch_segment_size_i32_max_is_reported_not_overflowed() {
    // 4 workers + i32::MAX - 1 overflows the segment count: reported, workers not segmented.
    let pt = pytorch_workers(4, &i32::MAX.to_string());
    let out = run_quickly("segment size i32::MAX", &pytorch_worker_pod(&pt), &[pt]);
    let g = applied(&out);
    assert_eq!(subs(g), vec![("worker".to_owned(), 4)]);
    assert_eq!(g.pod_sub_group.as_deref(), Some("worker"));
    assert_eq!(reasons(&out), ["InvalidValue"], "{:?}", out.warnings);
    assert!(
        out.warnings[0].to_string().contains(keys::SEGMENT_SIZE),
        "{}",
        out.warnings[0]
    );
}

#[test]
fn pytorch_segment_size_1_with_i32_max_workers_is_capped() {
    // i32::MAX segments of one worker each would be built one by one: refused at the cap instead.
    let pt = pytorch_workers(i64::from(i32::MAX), "1");
    let out = run_quickly("size 1, i32::MAX workers", &pytorch_worker_pod(&pt), &[pt]);
    let g = applied(&out);
    assert_eq!(subs(g), vec![("worker".to_owned(), i32::MAX)]);
    assert_eq!(g.pod_sub_group.as_deref(), Some("worker"));
    assert_eq!(reasons(&out), ["TooManySubGroups"], "{:?}", out.warnings);
    let text = out.warnings[0].to_string();
    assert!(text.contains("2147483647") && text.contains("10000"), "{text}");
}

#[test]
fn pytorch_worker_count_plus_segment_size_overflow_is_reported() {
    // worker_min + size - 1 = i32::MAX + 1: reported, workers not segmented.
    let pt = pytorch_workers(i64::from(i32::MAX), "2");
    let out = run_quickly("i32::MAX workers, size 2", &pytorch_worker_pod(&pt), &[pt]);
    let g = applied(&out);
    assert_eq!(subs(g), vec![("worker".to_owned(), i32::MAX)]);
    assert_eq!(g.pod_sub_group.as_deref(), Some("worker"));
    assert!(!out.warnings.is_empty(), "nothing reported");

    // Replica counts beyond i64 still sum without overflowing.
    let huge = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pt",
        "u",
        json!({"pytorchReplicaSpecs": {"Master": {"replicas": i64::MAX}, "Worker": {"replicas": i64::MAX}}}),
    );
    let out = run_quickly("i64::MAX replicas", &pytorch_worker_pod(&huge), &[huge]);
    assert_eq!(applied(&out).min_member, i32::MAX);
}

#[test]
fn lws_size_i32_max_is_not_cut_into_a_billion_segments() {
    let lws = |segment: i32, policy: &str| {
        obj(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "lws",
            "u",
            json!({"leaderWorkerTemplate": {"size": i32::MAX,
                "subGroupPolicy": {"subGroupSize": segment, "subGroupPolicyType": policy}}}),
        )
    };
    let worker = pod("lws-0-3")
        .label(keys::LWS_GROUP_INDEX, "0")
        .label(keys::LWS_WORKER_INDEX, "3");
    let unsegmented = vec![("leader".to_owned(), 1), ("workers".to_owned(), i32::MAX - 1)];

    for policy in ["LeaderWorker", "LeaderExcluded"] {
        let out = run_quickly(policy, &worker, &[lws(2, policy)]);
        let g = applied(&out);
        assert_eq!(g.min_member, i32::MAX, "{policy}");
        assert_eq!(subs(g), unsegmented, "{policy}");
        assert_eq!(g.pod_sub_group.as_deref(), Some("workers"), "{policy}");
        assert_eq!(
            reasons(&out),
            ["TooManySubGroups"],
            "{policy}: {:?}",
            out.warnings
        );
    }

    // One segment of the whole group is fine, and must not walk every worker index to find that out.
    let out = run_quickly("one segment", &worker, &[lws(i32::MAX, "LeaderWorker")]);
    assert_eq!(
        subs(applied(&out)),
        vec![
            ("segment-0".to_owned(), i32::MAX),
            ("leader".to_owned(), 1),
            ("workers".to_owned(), i32::MAX - 1)
        ]
    );
    assert_eq!(applied(&out).pod_sub_group.as_deref(), Some("workers"));
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
}

#[test]
fn seed_000_explicit_group_is_joined_not_duplicated() {
    // Seed 000 step 3: the Job's pods carry scheduling.run.ai/pod-group and runai/queue.
    let j = job("pytorch-ddp", json!({"parallelism": 4, "completions": 4}));
    let p = pod("pytorch-ddp-abc")
        .owned_by(&j)
        .label("runai/queue", "training")
        .annotation(keys::POD_GROUP_SEED, "pytorch-ddp-training");
    let mut view = View::chart().with_queue("training");
    view.pod_groups.push(std::sync::Arc::new(super::testkit::pg(
        "pytorch-ddp-training",
        api::PodGroupSpec::default(),
    )));
    let out = run(&p, &[j], &view);
    let Decision::Join(join) = &out.decision else {
        panic!("expected a join: {:?}", out.decision)
    };
    assert_eq!(
        (join.group.as_str(), join.key, join.annotate),
        ("pytorch-ddp-training", keys::POD_GROUP_SEED, true)
    );
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let patch = super::pod_patch(&p.build(), &out.decision, &Settings::default()).expect("annotate");
    assert_eq!(
        patch.0["metadata"]["annotations"][keys::POD_GROUP_NAME],
        "pytorch-ddp-training"
    );
}

#[test]
fn explicit_group_rules() {
    let j = job("j", json!({}));
    let base = pod("j-x").owned_by(&j);
    // User-written pod-group-name (not managed by the podgrouper): joined; the missing group is reported.
    let out = run(
        &base.clone().annotation(keys::POD_GROUP_NAME, "mine"),
        std::slice::from_ref(&j),
        &View::default(),
    );
    assert!(matches!(&out.decision, Decision::Join(jn) if jn.group == "mine"));
    assert!(
        matches!(out.warnings.as_slice(), [Warning::NamedGroupMissing { .. }]),
        "{:?}",
        out.warnings
    );

    // The podgrouper's own earlier annotation is not a user choice.
    let ours = base
        .clone()
        .annotation(keys::POD_GROUP_NAME, "stale")
        .group_annotation_managed_by(keys::FIELD_MANAGER_PODGROUPER);
    let out = run(&ours, std::slice::from_ref(&j), &View::default());
    assert_eq!(applied(&out).name, "pg-j-x-uid-j");

    // KAI's own annotation equal to the computed name (a migrated cluster): still maintained.
    let migrated = base
        .clone()
        .annotation(keys::POD_GROUP_NAME, "pg-j-x-uid-j")
        .group_annotation_managed_by("pod-grouper");
    assert!(matches!(
        run(&migrated, std::slice::from_ref(&j), &View::default()).decision,
        Decision::Apply(_)
    ));

    // Two different names: the first in precedence wins, with a warning.
    let both = base
        .clone()
        .annotation(keys::POD_GROUP_SEED, "a")
        .annotation(keys::VOLCANO_GROUP_NAME, "b");
    let out = run(&both, std::slice::from_ref(&j), &View::default());
    assert!(matches!(&out.decision, Decision::Join(jn) if jn.group == "a"));
    assert!(
        out.warnings
            .iter()
            .any(|w| matches!(w, Warning::ConflictingGroupNames { .. })),
        "{:?}",
        out.warnings
    );

    // Volcano's group: joined, pod not annotated with KAI's key, group not checked here.
    let out = run(
        &base.annotation(keys::VOLCANO_GROUP_NAME, "vc"),
        &[j],
        &View::default(),
    );
    assert!(matches!(&out.decision, Decision::Join(jn) if jn.group == "vc" && !jn.annotate));
    assert!(out.warnings.is_empty());

    // A bare pod naming a group (KAI's orphan rule) joins it.
    let out = run(
        &pod("solo").annotation(keys::POD_GROUP_NAME, "g"),
        &[],
        &View::default(),
    );
    assert!(matches!(&out.decision, Decision::Join(jn) if jn.group == "g"));
}

#[test]
fn queue_rules() {
    let j = job("j", json!({}));
    let p = pod("j-x").owned_by(&j);
    let q = |labels: &[(&str, &str)], pod: &super::testkit::PodB| {
        let owner = with_labels(j.clone(), labels);
        applied(&run(pod, &[owner], &View::default())).queue.clone()
    };
    assert_eq!(q(&[], &p), "default-queue");
    assert_eq!(
        q(
            &[(keys::QUEUE_LABEL, "a")],
            &p.clone().label(keys::QUEUE_LABEL, "b")
        ),
        "a",
        "owner before pod"
    );
    assert_eq!(q(&[], &p.clone().label(keys::QUEUE_LABEL, "b")), "b");
    assert_eq!(
        q(&[(keys::QUEUE_LABEL_LEGACY, "legacy")], &p),
        "legacy",
        "seed key on the owner"
    );
    assert_eq!(
        q(&[], &p.clone().label(keys::QUEUE_LABEL_LEGACY, "legacy")),
        "legacy",
        "seed key on the pod"
    );
    assert_eq!(
        q(
            &[(keys::QUEUE_LABEL, "a"), (keys::QUEUE_LABEL_LEGACY, "legacy")],
            &p
        ),
        "a",
        "KAI key first"
    );

    // Configurable key and default.
    let settings = Settings {
        queue_label_key: "team/queue".into(),
        default_queue: "fallback".into(),
        ..Settings::default()
    };
    let out = run_with(
        &p.clone().label("team/queue", "t"),
        std::slice::from_ref(&j),
        &View::default(),
        &settings,
    );
    assert_eq!(applied(&out).queue, "t");
    assert_eq!(
        applied(&run_with(
            &p,
            std::slice::from_ref(&j),
            &View::default(),
            &settings
        ))
        .queue,
        "fallback"
    );

    // KAI's project rule, after every queue label: the owner's project, else the pod's, suffixed with
    // the pod's node pool.
    let project = |labels: &[(&str, &str)], pod: &super::testkit::PodB, settings: &Settings| {
        let owner = with_labels(j.clone(), labels);
        applied(&run_with(pod, &[owner], &View::default(), settings))
            .queue
            .clone()
    };
    let defaults = Settings::default();
    assert_eq!(
        project(&[(keys::PROJECT_LABEL, "vision")], &p, &defaults),
        "vision"
    );
    assert_eq!(
        project(&[], &p.clone().label(keys::PROJECT_LABEL, "nlp"), &defaults),
        "nlp"
    );
    assert_eq!(
        project(
            &[(keys::PROJECT_LABEL, "vision")],
            &p.clone().label(keys::PROJECT_LABEL, "nlp"),
            &defaults
        ),
        "vision",
        "owner before pod"
    );
    assert_eq!(
        project(
            &[(keys::PROJECT_LABEL, "vision")],
            &p.clone().label(keys::NODE_POOL, "a100"),
            &defaults
        ),
        "vision-a100",
        "the pod's node pool"
    );
    assert_eq!(
        project(
            &[(keys::PROJECT_LABEL, "vision")],
            &p.clone().label("pool", "h100"),
            &Settings {
                node_pool_label_key: "pool".into(),
                ..Settings::default()
            }
        ),
        "vision-h100",
        "the configured node pool label"
    );
    assert_eq!(
        project(
            &[(keys::PROJECT_LABEL, "vision")],
            &p.clone().label(keys::QUEUE_LABEL, "q"),
            &defaults
        ),
        "q",
        "a queue label wins"
    );
    assert_eq!(
        project(&[(keys::PROJECT_LABEL, "")], &p, &defaults),
        "default-queue",
        "an empty project names nothing"
    );

    // A queue that does not exist is used and reported.
    let out = run(
        &p.clone().label(keys::QUEUE_LABEL, "nope"),
        std::slice::from_ref(&j),
        &View::chart(),
    );
    assert_eq!(applied(&out).queue, "nope");
    assert_eq!(
        out.warnings,
        vec![Warning::QueueNotFound { queue: "nope".into() }]
    );

    // An existing PodGroup keeps its queue.
    let mut view = View::default();
    let existing = super::testkit::pg(
        "pg-j-x-uid-j",
        api::PodGroupSpec {
            queue: Some("first".into()),
            ..Default::default()
        },
    );
    view.pod_groups.push(std::sync::Arc::new(existing));
    let out = run(&p.label(keys::QUEUE_LABEL, "second"), &[j], &view);
    assert_eq!(applied(&out).queue, "first");
    assert!(
        matches!(out.warnings.as_slice(), [Warning::QueueFixed { .. }]),
        "{:?}",
        out.warnings
    );
}

#[test]
fn priority_and_preemptibility_rules() {
    let view = View::chart().with_priority_class("high");
    let j = job("j", json!({}));
    let p = pod("j-x").owned_by(&j);
    let prio = |owner: &Object, pod: &super::testkit::PodB| {
        let out = run(pod, std::slice::from_ref(owner), &view);
        (applied(&out).priority_class_name.clone(), out.warnings)
    };
    assert_eq!(
        prio(
            &with_labels(j.clone(), &[(keys::PRIORITY_CLASS_LABEL, "high")]),
            &p
        )
        .0,
        "high"
    );
    assert_eq!(
        prio(&j, &p.clone().label(keys::PRIORITY_CLASS_LABEL, "high")).0,
        "high"
    );
    assert_eq!(prio(&j, &p.clone().priority_class("build")).0, "build");
    assert_eq!(
        prio(
            &with_labels(j.clone(), &[(keys::PRIORITY_CLASS_LABEL, "high")]),
            &p.clone().priority_class("build")
        )
        .0,
        "high"
    );
    let (class, warnings) = prio(
        &with_labels(j.clone(), &[(keys::PRIORITY_CLASS_LABEL, "missing")]),
        &p,
    );
    assert_eq!(class, "train");
    assert!(
        matches!(warnings.as_slice(), [Warning::PriorityClassNotFound { name, .. }] if name == "missing"),
        "{warnings:?}"
    );

    // Unknown classes (cache not synced) are trusted.
    assert_eq!(
        applied(&run(
            &p.clone().label(keys::PRIORITY_CLASS_LABEL, "x"),
            std::slice::from_ref(&j),
            &View::default()
        ))
        .priority_class_name,
        "x"
    );

    // Preemptibility: owner before pod, invalid values reported and skipped.
    let pre = |owner: Object, pod: &super::testkit::PodB| {
        let out = run(pod, &[owner], &View::default());
        (applied(&out).preemptibility, out.warnings.len())
    };
    use api::Preemptibility::{NonPreemptible, Preemptible};
    assert_eq!(
        pre(
            with_labels(j.clone(), &[(keys::PREEMPTIBILITY_LABEL, "non-preemptible")]),
            &p.clone().label(keys::PREEMPTIBILITY_LABEL, "preemptible")
        ),
        (Some(NonPreemptible), 0)
    );
    assert_eq!(
        pre(
            with_labels(j.clone(), &[(keys::PREEMPTIBILITY_LABEL, "bogus")]),
            &p.clone().label(keys::PREEMPTIBILITY_LABEL, "preemptible")
        ),
        (Some(Preemptible), 1)
    );
    assert_eq!(pre(j, &p), (None, 0));
}

#[test]
fn metadata_copy_topology_and_min_member_override() {
    let j = with_annotations(
        with_labels(
            job("j", json!({"parallelism": 8, "completionMode": "Indexed"})),
            &[("team", "a")],
        ),
        &[
            (keys::LAST_APPLIED_CONFIGURATION, "{...}"),
            ("note", "kept"),
            (keys::TOPOLOGY, "net"),
            (keys::TOPOLOGY_REQUIRED, "zone"),
            (keys::MIN_MEMBER_OVERRIDE, "6"),
        ],
    );
    let out = run(
        &pod("j-0").owned_by(&j).label(keys::NODE_POOL, "pool-a"),
        &[j],
        &View::default(),
    );
    let g = applied(&out);
    assert_eq!(g.min_member, 6);
    assert_eq!(g.labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(g.labels.get(keys::NODE_POOL).map(String::as_str), Some("pool-a"));
    // Under the configured node pool label.
    let pooled = with_labels(job("k", json!({})), &[]);
    let out = run_with(
        &pod("k-0").owned_by(&pooled).label("example.com/pool", "pool-b"),
        &[pooled],
        &View::default(),
        &Settings {
            node_pool_label_key: "example.com/pool".into(),
            ..Settings::default()
        },
    );
    assert_eq!(
        applied(&out).labels.get("example.com/pool").map(String::as_str),
        Some("pool-b")
    );
    assert!(!g.annotations.contains_key(keys::LAST_APPLIED_CONFIGURATION));
    assert_eq!(g.annotations.get("note").map(String::as_str), Some("kept"));
    let meta: serde_json::Value =
        serde_yaml::from_str(&g.annotations[keys::TOP_OWNER_METADATA]).expect("yaml");
    assert_eq!(
        meta,
        json!({"name": "j", "uid": "uid-j", "group": "batch", "version": "v1", "kind": "Job"})
    );
    let t = g.topology.clone().expect("topology");
    assert_eq!(
        (t.topology.as_deref(), t.required_topology_level.as_deref()),
        (Some("net"), Some("zone"))
    );

    // The override does not apply to per-pod groups.
    let per_pod = with_annotations(job("k", json!({})), &[(keys::MIN_MEMBER_OVERRIDE, "3")]);
    let out = run(&pod("k-0").owned_by(&per_pod), &[per_pod], &View::default());
    assert_eq!(applied(&out).min_member, 1);
    assert!(matches!(out.warnings.as_slice(), [Warning::InvalidValue { .. }]));
}

#[test]
fn broken_chain_falls_back_and_says_so() {
    let rs = obj("apps/v1", "ReplicaSet", "rs", "u-rs", json!({}));
    let p = pod("rs-x").owned_by(&rs).build();
    let brk = ChainBreak {
        api_version: "example.com/v1".into(),
        kind: "Thing".into(),
        name: "t".into(),
        reason: BreakReason::Forbidden,
    };
    let out = group(
        &Input {
            pod: &p,
            owners: &[rs],
            chain_break: Some(&brk),
        },
        &Settings::default(),
        &View::default(),
    )
    .expect("ok");
    assert_eq!(applied(&out).owner.kind, "ReplicaSet");
    assert_eq!(out.warnings, vec![Warning::ChainBroken(brk.clone())]);
    assert_eq!(out.warnings[0].reason(), "OwnerForbidden");
    // No owner readable: the pod itself.
    let out = group(
        &Input {
            pod: &p,
            owners: &[],
            chain_break: Some(&brk),
        },
        &Settings::default(),
        &View::default(),
    )
    .expect("ok");
    assert_eq!(applied(&out).owner.kind, "Pod");
}

#[test]
fn long_owner_names_are_hashed() {
    let long = "w".repeat(240);
    let a = job(&long, json!({"completionMode": "Indexed"}));
    let out = run(&pod("x").owned_by(&a), &[a], &View::default());
    let name = &applied(&out).name;
    assert!(name.len() <= 253 && name.starts_with("pg-www"), "{name}");
    let b = job(&format!("{long}x"), json!({"completionMode": "Indexed"}));
    assert_ne!(
        &applied(&run(&pod("x").owned_by(&b), &[b], &View::default())).name,
        name
    );

    // Sub-group names become valid label values.
    let rc = obj(
        "ray.io/v1",
        "RayCluster",
        "rc",
        "u",
        json!({"workerGroupSpecs": [{"groupName": "g".repeat(80), "replicas": 1}]}),
    );
    let out = run(&pod("h").owned_by(&rc), &[rc], &View::default());
    assert!(applied(&out).sub_groups.iter().all(|s| s.name.len() <= 63));
}

#[test]
fn manifest_and_pod_patch() {
    let rc = obj(
        "ray.io/v1",
        "RayCluster",
        "rc",
        "u",
        json!({"workerGroupSpecs": [{"groupName": "w", "replicas": 2}]}),
    );
    let p = pod("rc-w-1").owned_by(&rc).label(keys::RAY_GROUP, "w");
    let out = run(&p, std::slice::from_ref(&rc), &View::default());
    let g = applied(&out);
    let pg = super::pod_group_manifest(g, "ns");
    let v = serde_json::to_value(&pg).expect("json");
    assert_eq!(v["apiVersion"], "scheduling.run.ai/v2alpha2");
    assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u");
    assert_eq!(v["spec"]["minMember"], 3);
    assert!(
        v["spec"].get("markUnschedulable").is_none() && v.get("status").is_none(),
        "only owned fields: {v}"
    );
    let fm = keys::FIELD_MANAGER_PODGROUPER;
    assert!(super::pod_group_up_to_date(&pg, &pg, fm));
    let mut other = pg.clone();
    other.spec.min_member = Some(2);
    assert!(!super::pod_group_up_to_date(&other, &pg, fm));
    // A label the podgrouper applied earlier and no longer wants needs an apply to go away; one
    // written by someone else does not.
    let mut stale = pg.clone();
    stale
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("old".into(), "x".into());
    stale.metadata.managed_fields = Some(vec![
        serde_json::from_value(json!({
        "manager": fm, "operation": "Apply", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:old": {}}}}}))
        .expect("entry"),
    ]);
    assert!(!super::pod_group_up_to_date(&stale, &pg, fm));
    assert!(super::pod_group_up_to_date(&stale, &pg, "someone-else"));

    let patch = super::pod_patch(&p.build(), &out.decision, &Settings::default()).expect("patch");
    assert_eq!(
        patch.0["metadata"]["annotations"][keys::POD_GROUP_NAME],
        "pg-rc-u"
    );
    assert_eq!(patch.0["metadata"]["labels"][keys::SUBGROUP_NAME], "w");
    let done = p
        .clone()
        .annotation(keys::POD_GROUP_NAME, "pg-rc-u")
        .label(keys::SUBGROUP_NAME, "w");
    assert_eq!(
        super::pod_patch(&done.build(), &out.decision, &Settings::default()),
        None
    );
}

#[test]
fn every_pod_of_a_group_computes_the_same_group() {
    // Determinism across triggering pods: the JobSet AnyOrder and PyTorch cases.
    let pt = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pt",
        "u",
        json!({"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}),
    );
    let a = run(
        &pod("m")
            .owned_by(&pt)
            .label(keys::KUBEFLOW_REPLICA_TYPE, "master"),
        std::slice::from_ref(&pt),
        &View::default(),
    );
    let b = run(
        &pod("w")
            .owned_by(&pt)
            .label(keys::KUBEFLOW_REPLICA_TYPE, "worker"),
        &[pt],
        &View::default(),
    );
    let (ga, gb) = (applied(&a), applied(&b));
    assert_eq!(
        (&ga.name, ga.min_member, &ga.sub_groups, &ga.queue),
        (&gb.name, gb.min_member, &gb.sub_groups, &gb.queue)
    );
}

#[test]
fn a_joined_pod_hears_only_about_its_own_group() {
    // The computed group would warn (missing replicated-job label, unknown default priority); the pod
    // names its own group, so only that group's problems are reported.
    let js = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        "u",
        json!({"replicatedJobs": [{"name": "w"}]}),
    );
    let p = pod("p").owned_by(&js).annotation(keys::POD_GROUP_SEED, "mine");
    let view = View {
        priority_classes: Some(std::collections::BTreeSet::new()),
        ..View::default()
    };
    let out = run(&p, &[js], &view);
    assert!(matches!(&out.decision, Decision::Join(j) if j.group == "mine"));
    assert_eq!(
        out.warnings,
        vec![Warning::NamedGroupMissing { group: "mine".into() }]
    );
}

#[test]
fn kind_defaults_come_after_labels_and_before_the_kinds_own_default() {
    use api::Preemptibility::NonPreemptible;
    let view = View::chart().with_kind_defaults(
        r#"[{"typeName":"Deployment","group":"apps","priorityName":"build","preemptibility":"preemptible"},
            {"typeName":"Job","group":"batch","priorityName":"missing-class"},
            {"typeName":"Pod","priorityName":"train","preemptibility":"non-preemptible"},
            {"typeName":"ReplicaSet","group":"apps","preemptibility":"non-preemptible"}]"#,
    );
    let d = obj("apps/v1", "Deployment", "web", "uid-web", json!({"replicas": 3}));
    let rs = obj(
        "apps/v1",
        "ReplicaSet",
        "web-7f",
        "uid-rs",
        json!({"replicas": 3}),
    );
    let p = pod("web-7f-a").owned_by(&rs);
    let out = run(&p, &[rs.clone(), d.clone()], &view);
    let g = applied(&out);
    assert_eq!(
        g.priority_class_name, "build",
        "the Deployment's default instead of inference"
    );
    assert_eq!(
        g.preemptibility,
        Some(NonPreemptible),
        "the nearest owner's entry first (the ReplicaSet's)"
    );

    // A label still wins.
    let out = run(
        &p.clone().label(keys::PRIORITY_CLASS_LABEL, "inference"),
        &[rs.clone(), d.clone()],
        &view,
    );
    assert_eq!(applied(&out).priority_class_name, "inference");

    // A default naming a class that does not exist is reported; the kind's own default is used.
    let j = job("j", json!({}));
    let out = run(&pod("j-x").owned_by(&j), std::slice::from_ref(&j), &view);
    assert_eq!(applied(&out).priority_class_name, "train");
    assert!(
        matches!(out.warnings.as_slice(), [Warning::PriorityClassNotFound { name, source }]
            if name == "missing-class" && source.contains("Job")),
        "{:?}",
        out.warnings
    );
    assert_eq!(applied(&out).preemptibility, None);

    // A bare pod is its own owner: the entry for Pod.
    let out = run(&pod("solo"), &[], &view);
    assert_eq!(applied(&out).priority_class_name, "train");
    assert_eq!(applied(&out).preemptibility, Some(NonPreemptible));

    // Without the ConfigMap, the kind's own default.
    let out = run(&p, &[rs, d], &View::chart());
    assert_eq!(applied(&out).priority_class_name, "inference");
    assert_eq!(applied(&out).preemptibility, None);
}

#[test]
fn aml_jobs_are_gangs_of_their_node_count_and_spot_requests_inference() {
    let view = View::chart();
    let aml = |envs: serde_json::Value| {
        obj(
            "amlarc.azureml.com/v1alpha1",
            "AmlJob",
            "train",
            "uid-train",
            json!({"job": {"options": {"envs": envs}}}),
        )
    };
    let expect = Expect {
        name: "pg-train-uid-train",
        owner: ("AmlJob", "train"),
        min: 4,
        subs: &[],
        pod_sub: None,
        queue: "default-queue",
        priority: "train",
    };
    let job = aml(json!({"AZUREML_NODE_COUNT": 4}));
    row(
        "amljob",
        &pod("train-0").owned_by(&job),
        std::slice::from_ref(&job),
        &view,
        &expect,
    );
    let job = aml(json!({"AZUREML_NODE_COUNT": "4"}));
    row(
        "amljob, count as a string",
        &pod("train-0").owned_by(&job),
        std::slice::from_ref(&job),
        &view,
        &expect,
    );
    for envs in [
        json!({}),
        json!({"AZUREML_NODE_COUNT": 0}),
        json!({"AZUREML_NODE_COUNT": "x"}),
    ] {
        let job = aml(envs.clone());
        let out = run(&pod("train-0").owned_by(&job), std::slice::from_ref(&job), &view);
        assert_eq!(applied(&out).min_member, 1, "{envs}");
        assert!(
            matches!(out.warnings.as_slice(), [Warning::Workload { detail }] if detail.contains("AZUREML_NODE_COUNT")),
            "{envs}: {:?}",
            out.warnings
        );
    }

    let spot = obj("egx.nvidia.io/v1", "SPOTRequest", "serve", "uid-serve", json!({}));
    row(
        "spotrequest",
        &pod("serve-0").owned_by(&spot),
        std::slice::from_ref(&spot),
        &view,
        &Expect {
            name: "pg-serve-uid-serve",
            owner: ("SPOTRequest", "serve"),
            min: 1,
            subs: &[],
            pod_sub: None,
            queue: "default-queue",
            priority: "inference",
        },
    );
}

#[test]
fn runai_jobs_get_a_group_per_pod_named_after_the_pod_without_its_last_suffix() {
    let view = View::chart();
    let job = with_labels(
        obj("run.ai/v1", "RunaiJob", "rj", "uid-rj", json!({"parallelism": 2})),
        &[(keys::QUEUE_LABEL, "default-queue")],
    );
    for (pod_name, group) in [
        ("rj-0-0", "pg-rj-0-uid-rj"),
        ("rj-1-0", "pg-rj-1-uid-rj"),
        ("single", "pg-single-uid-rj"),
    ] {
        row(
            pod_name,
            &pod(pod_name).owned_by(&job),
            std::slice::from_ref(&job),
            &view,
            &Expect {
                name: group,
                owner: ("RunaiJob", "rj"),
                min: 1,
                subs: &[],
                pod_sub: None,
                queue: "default-queue",
                priority: "train",
            },
        );
    }
    // A pod recreated under the same prefix finds its group again.
    let again = run(&pod("rj-0-1").owned_by(&job), std::slice::from_ref(&job), &view);
    assert_eq!(applied(&again).name, "pg-rj-0-uid-rj");
}
