//! The Helm chart as rendered by Helm (no cluster needed): what it gives each component, its RBAC, its
//! hardening, and the freshness of its generated copies. Helm is fetched into the tool cache when missing.

use std::collections::BTreeSet;

use e2e::chart::{self, ComponentSpec, Rendered};
use e2e::helm::Helm;
use serde_json::Value;

fn helm() -> Helm {
    Helm::find_or_fetch().expect("Helm (fetched with npm when missing)")
}

fn render(values: &[(&str, &str)]) -> Rendered {
    Rendered::render(&helm(), chart::RELEASE, chart::NAMESPACE, values).expect("helm template")
}

fn component<'a>(components: &'a [ComponentSpec], name: &str) -> &'a ComponentSpec {
    components
        .iter()
        .find(|c| c.component == name)
        .unwrap_or_else(|| panic!("no {name} among {components:?}"))
}

fn scheduler_config(spec: &ComponentSpec) -> scheduler_core::config::Config {
    let path = spec.flag("config").expect("--config");
    let file = spec
        .config_files
        .iter()
        .find(|f| f.path.display().to_string() == path)
        .unwrap_or_else(|| panic!("--config={path} is not a mounted file: {:?}", spec.config_files));
    scheduler_core::config::Config::from_yaml(&file.content)
        .expect("the binary loads the chart's configuration")
}

#[test]
fn seed_002_install_renders_both_components_with_gpu_sharing() {
    let components = render(&[("global.gpuSharing", "true")])
        .components()
        .expect("components");
    assert_eq!(components.len(), 2, "{components:?}");

    let scheduler = component(&components, "scheduler");
    assert_eq!(scheduler.binary, "kai-scheduler");
    assert_eq!(scheduler.deployment, "kai-scheduler");
    assert_eq!(scheduler.service_account, "kai-scheduler");
    assert_eq!(scheduler.namespace, "kai-scheduler");
    assert_eq!(scheduler.flag("scheduler-name"), Some("kai-scheduler"));
    assert_eq!(scheduler.flag("default-queue"), Some("default-queue"));
    assert_eq!(scheduler.flag("node-pool-label"), Some("kai.scheduler/node-pool"));
    assert_eq!(
        scheduler.flag("node-pool"),
        None,
        "no pool: serve what carries no pool label"
    );
    let config = scheduler_config(scheduler);
    assert!(
        config.plugins.gpusharing.enabled,
        "global.gpuSharing=true turns GPU sharing on"
    );
    assert_eq!(
        config.plugins.gpusharing.reservation_image, "ghcr.io/kai-rs/kai-scheduler:0.1.0",
        "reservation pods run the scheduler's own image"
    );

    let podgrouper = component(&components, "podgrouper");
    assert_eq!(podgrouper.binary, "kai-podgrouper");
    assert_eq!(podgrouper.deployment, "kai-podgrouper");
    assert_eq!(podgrouper.service_account, "kai-podgrouper");
    assert_eq!(podgrouper.flag("scheduler-name"), Some("kai-scheduler"));
    assert_eq!(podgrouper.flag("queue-label-key"), Some("kai.scheduler/queue"));
    assert!(podgrouper.config_files.is_empty());
}

#[test]
fn default_configuration_is_the_binary_default() {
    let components = render(&[]).components().expect("components");
    let config = scheduler_config(component(&components, "scheduler"));
    let mut expected = scheduler_core::config::Config::default();
    // The one value the chart sets on purpose: the image of the reservation pods is its own.
    expected.plugins.gpusharing.reservation_image = "ghcr.io/kai-rs/kai-scheduler:0.1.0".to_owned();
    assert_eq!(
        config, expected,
        "values.yaml spells out the scheduler's defaults; keep them in step"
    );
    assert!(
        !config.plugins.gpusharing.enabled,
        "GPU sharing is off unless asked for"
    );
}

#[test]
fn rbac_names_every_verb_and_resource() {
    let rendered = render(&[
        ("global.gpuSharing", "true"),
        ("scheduler.replicas", "2"),
        ("podgrouper.replicas", "2"),
    ]);
    let allowed_verbs: BTreeSet<&str> =
        ["get", "list", "watch", "create", "patch", "update", "delete"].into();
    let mut roles = 0;
    for role in rendered.of_kind("ClusterRole").chain(rendered.of_kind("Role")) {
        roles += 1;
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        for rule in role["rules"].as_array().expect("rules") {
            for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                for item in rule[field].as_array().into_iter().flatten() {
                    let item = item.as_str().expect("string");
                    assert!(!item.contains('*'), "{name}: wildcard in {field}: {rule}");
                }
            }
            for verb in rule["verbs"].as_array().expect("verbs") {
                let verb = verb.as_str().unwrap_or_default();
                assert!(allowed_verbs.contains(verb), "{name}: verb {verb} ({rule})");
            }
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .expect("verbs")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert!(
                !resources.contains(&"serviceaccounts/token"),
                "{name}: no component mints tokens: {rule}"
            );
            // The one Secret: the webhook's certificate, by name, in the release's namespace.
            if resources.contains(&"secrets") {
                assert_eq!(
                    role["kind"], "Role",
                    "{name}: no cluster-wide Secret access: {rule}"
                );
                assert_eq!(
                    rule["resourceNames"],
                    serde_json::json!(["kai-scheduler-webhook-tls"]),
                    "{name}: only the webhook's Secret: {rule}"
                );
                assert_eq!(resources, ["secrets"], "{rule}");
            }
            // ConfigMaps are written (the pods' GPU-sharing ones), never read.
            if resources.contains(&"configmaps") {
                assert!(
                    verbs.iter().all(|v| ["create", "patch"].contains(v)),
                    "{name}: no component reads ConfigMaps: {rule}"
                );
            }
            if role["kind"] == "ClusterRole" {
                assert!(
                    !verbs.contains(&"delete"),
                    "{name}: no cluster-wide delete: {rule}"
                );
            }
        }
    }
    // Two ClusterRoles, two lease Roles, the reservation Role and the scheduler's Role beside it, and the
    // webhook certificate's Role.
    assert_eq!(roles, 7);
    let reservation = rendered
        .find("Role", "kai-scheduler-gpu-reservation")
        .expect("the scheduler's Role for reservation pods");
    assert_eq!(reservation["metadata"]["namespace"], "kai-resource-reservation");
    for binding in rendered
        .of_kind("ClusterRoleBinding")
        .chain(rendered.of_kind("RoleBinding"))
    {
        let role = binding["roleRef"]["name"].as_str().expect("roleRef");
        let kind = binding["roleRef"]["kind"].as_str().expect("roleRef kind");
        assert!(
            rendered.find(kind, role).is_some(),
            "binding to a role the chart does not make: {binding}"
        );
    }
}

/// Whether `role` has a rule granting `verb` on `resource` of `group`.
fn grants(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |rule: &Value, field: &str, item: &str| {
        rule[field]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i == item))
    };
    role["rules"].as_array().into_iter().flatten().any(|rule| {
        has(rule, "apiGroups", group) && has(rule, "resources", resource) && has(rule, "verbs", verb)
    })
}

/// Cluster-wide `pods` `patch` only where the code patches pods: the scheduler labels a shared-GPU pod
/// before its bind (apply/bind.rs `prepare_shared`) and writes no pod otherwise, so it gets the verb with
/// `global.gpuSharing` only; the podgrouper annotates every pod it groups (controller/mod.rs, apply patch).
#[test]
fn pods_patch_only_where_the_code_patches_pods() {
    for (sharing, scheduler_patches) in [("false", false), ("true", true)] {
        let rendered = render(&[("global.gpuSharing", sharing)]);
        let scheduler = rendered
            .find("ClusterRole", "kai-scheduler")
            .expect("the scheduler's ClusterRole");
        assert_eq!(
            grants(scheduler, "", "pods", "patch"),
            scheduler_patches,
            "scheduler pods patch with global.gpuSharing={sharing}"
        );
        let podgrouper = rendered
            .find("ClusterRole", "kai-podgrouper")
            .expect("the podgrouper's ClusterRole");
        assert!(grants(podgrouper, "", "pods", "patch"));
        assert!(
            grants(scheduler, "", "pods/status", "patch"),
            "PodScheduled conditions go through /status in every setup"
        );
    }
}

/// The GPU reservation namespace admits only pods of Pod Security's `restricted` profile, the strictest
/// the scheduler's reservation pods meet (`kai-scheduler` unit test
/// `reservation_pod_meets_the_restricted_pod_security_profile`).
#[test]
fn reservation_namespace_enforces_restricted_pod_security() {
    let rendered = render(&[("global.gpuSharing", "true")]);
    let namespace = rendered
        .find("Namespace", "kai-resource-reservation")
        .expect("the reservation namespace");
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            namespace["metadata"]["labels"][format!("pod-security.kubernetes.io/{mode}")],
            "restricted",
            "{mode}: {namespace}"
        );
    }
}

/// Checks that `spec` elects a leader through the lease named after its Deployment, which the chart
/// lets it get and update (and nothing else), and that its Deployment rolls (a lease keeps one writer).
fn assert_elects_a_leader(rendered: &Rendered, spec: &ComponentSpec) {
    assert_eq!(spec.flag("leader-elect"), Some("true"), "{spec:?}");
    assert_eq!(spec.flag("lease-name"), Some(spec.deployment.as_str()));
    assert_eq!(spec.flag("lease-namespace"), Some(chart::NAMESPACE));
    let role = rendered
        .find("Role", &format!("{}-leader-election", spec.deployment))
        .expect("lease Role");
    let named: Vec<&Value> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["resourceNames"].as_array())
        .flatten()
        .collect();
    assert_eq!(
        named,
        [&Value::from(spec.deployment.clone())],
        "get/update only the component's lease"
    );
    let binding = rendered
        .find("RoleBinding", &format!("{}-leader-election", spec.deployment))
        .expect("lease RoleBinding");
    assert_eq!(binding["subjects"][0]["name"], spec.service_account.as_str());
    let deployment = rendered.find("Deployment", &spec.deployment).expect("deployment");
    assert!(
        deployment["spec"]["strategy"].is_null(),
        "rolling updates are safe with a lease"
    );
}

/// As kube-scheduler: a lease at any replica count, since a single replica is two writers as soon as
/// its node is cut off and the Deployment starts a replacement elsewhere (Recreate waits only for a
/// pod the API server sees deleted, not for the process to stop).
#[test]
fn leader_election_is_on_by_default_at_any_replica_count() {
    for values in [
        &[][..],
        &[("scheduler.replicas", "3"), ("podgrouper.replicas", "2")][..],
        // The former default, kept as a synonym so that values files written for it still install.
        &[
            ("scheduler.leaderElection", "auto"),
            ("podgrouper.leaderElection", "auto"),
        ][..],
    ] {
        let rendered = render(values);
        let components = rendered.components().expect("components");
        assert_eq!(components.len(), 2);
        for spec in &components {
            assert_elects_a_leader(&rendered, spec);
        }
    }
}

#[test]
fn leader_election_can_be_turned_off_for_a_single_replica_only() {
    let off = [
        ("scheduler.leaderElection", "false"),
        ("podgrouper.leaderElection", "false"),
    ];
    let rendered = render(&off);
    for spec in rendered.components().expect("components") {
        // Said explicitly: the binaries elect by default.
        assert_eq!(spec.flag("leader-elect"), Some("false"), "{spec:?}");
        assert_eq!(spec.flag("lease-name"), None);
        let deployment = rendered.find("Deployment", &spec.deployment).expect("deployment");
        assert_eq!(
            deployment["spec"]["strategy"]["type"], "Recreate",
            "one writer at least during a rollout"
        );
    }
    for kind in ["Role", "RoleBinding"] {
        let lease_objects: Vec<&Value> = rendered
            .of_kind(kind)
            .map(|r| &r["metadata"]["name"])
            .filter(|name| name.as_str().is_some_and(|n| n.ends_with("-leader-election")))
            .collect();
        assert!(
            lease_objects.is_empty(),
            "no lease permissions: {lease_objects:?}"
        );
    }

    for component in ["scheduler", "podgrouper"] {
        let replicas = format!("{component}.replicas");
        let values = [off[0], off[1], (replicas.as_str(), "2")];
        let error = Rendered::render(&helm(), chart::RELEASE, chart::NAMESPACE, &values)
            .expect_err("two replicas without a lease are two writers");
        assert!(
            format!("{error:#}").contains("leaderElection"),
            "the error names the value: {error:#}"
        );
    }
    let error = Rendered::render(
        &helm(),
        chart::RELEASE,
        chart::NAMESPACE,
        &[("scheduler.leaderElection", "maybe")],
    )
    .expect_err("not a boolean");
    assert!(format!("{error:#}").contains("leaderElection"), "{error:#}");
}

#[test]
fn containers_are_hardened_and_probed() {
    let rendered = render(&[]);
    for deployment in rendered.of_kind("Deployment") {
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        for container in pod["containers"].as_array().expect("containers") {
            let security = &container["securityContext"];
            assert_eq!(security["readOnlyRootFilesystem"], true, "{container}");
            assert_eq!(security["allowPrivilegeEscalation"], false);
            assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
            assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
            assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
            assert_eq!(container["ports"][0]["name"], "admin");
            assert!(container["resources"]["requests"]["memory"].is_string());
            assert!(container["resources"]["limits"]["memory"].is_string());
        }
    }
    for service in rendered.of_kind("Service") {
        assert_eq!(service["spec"]["ports"][0]["name"], "metrics");
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "admin");
    }
}

/// The probe restarts a pod only after `/livez` has failed for a while, and `/livez` already waits out
/// the liveness timeout (60 s by default) before failing: the probe must add little on top of it (a hung
/// component is replaced within twice the timeout) and ride out one slow answer.
#[test]
fn liveness_probes_fit_the_liveness_timeout() {
    let default_timeout = runtime::liveness::default_timeout(std::time::Duration::from_secs(1)).as_secs();
    for spec in render(&[]).components().expect("components") {
        assert_eq!(
            spec.flag("liveness-timeout"),
            None,
            "the binary derives it from its period"
        );
    }
    let rendered = render(&[]);
    for deployment in rendered.of_kind("Deployment") {
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let probe = &container["livenessProbe"];
        let number = |field: &str| {
            probe[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{field}: {probe}"))
        };
        let (period, failures, timeout) = (
            number("periodSeconds"),
            number("failureThreshold"),
            number("timeoutSeconds"),
        );
        assert!(failures >= 2, "one slow answer is not a restart: {probe}");
        assert!(timeout < period, "{probe}");
        assert!(
            period * failures <= default_timeout,
            "a hung component is restarted within twice the liveness timeout: {probe}"
        );
    }
}

#[test]
fn install_objects_match_kai() {
    let rendered = render(&[]);
    let classes: Vec<(String, i64)> = rendered
        .of_kind("PriorityClass")
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                p["value"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    let expected: Vec<(String, i64)> = api::keys::PRIORITY_CLASSES
        .iter()
        .map(|(n, v)| ((*n).to_owned(), i64::from(*v)))
        .collect();
    assert_eq!(classes, expected);

    let parent = rendered
        .find("Queue", api::keys::DEFAULT_PARENT_QUEUE)
        .expect("default parent queue");
    let queue = rendered
        .find("Queue", api::keys::DEFAULT_QUEUE)
        .expect("default queue");
    assert_eq!(queue["spec"]["parentQueue"], api::keys::DEFAULT_PARENT_QUEUE);
    assert!(parent["spec"]["parentQueue"].is_null());
    for q in [parent, queue] {
        assert_eq!(
            q["metadata"]["annotations"]["helm.sh/hook"], "post-install",
            "made on install only"
        );
        assert_eq!(q["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
        for resource in ["cpu", "gpu", "memory"] {
            assert_eq!(
                q["spec"]["resources"][resource],
                serde_json::json!({"quota": 0, "limit": -1, "overQuotaWeight": 1})
            );
        }
    }
    // Off by default: with both CRDs `kubectl get podgroup` would resolve to Volcano's.
    assert_eq!(
        rendered
            .of_kind("CustomResourceDefinition")
            .filter(|c| c["metadata"]["name"] == "podgroups.scheduling.volcano.sh")
            .count(),
        0
    );
    // `helm template` cannot look up the cluster, so "auto" renders Volcano's CRD, kept on uninstall.
    let auto = render(&[("volcano.installCRD", "auto")]);
    let volcano = auto
        .find("CustomResourceDefinition", "podgroups.scheduling.volcano.sh")
        .expect("Volcano CRD");
    assert_eq!(
        volcano["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let without = render(&[("volcano.installCRD", "false")]);
    assert_eq!(without.of_kind("CustomResourceDefinition").count(), 0);
    assert!(
        Rendered::render(
            &helm(),
            chart::RELEASE,
            chart::NAMESPACE,
            &[("volcano.installCRD", "maybe")]
        )
        .is_err(),
        "a bad mode fails the render"
    );
}

#[test]
fn another_release_gets_its_own_cluster_scoped_names() {
    let rendered = Rendered::render(&helm(), "e2e-kai", "e2e-kai", &[]).expect("render");
    let names: BTreeSet<&str> = rendered
        .of_kind("ClusterRole")
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["e2e-kai-podgrouper", "e2e-kai-scheduler"].into());
    let components = rendered.components().expect("components");
    assert_eq!(component(&components, "scheduler").namespace, "e2e-kai");
}

#[test]
fn local_args_use_local_copies_of_mounted_files() {
    let components = render(&[]).components().expect("components");
    let scheduler = component(&components, "scheduler");
    let dir = std::env::temp_dir().join(format!("kai-chart-test-{}", std::process::id()));
    let args = scheduler
        .local_args(&dir, &[("admin-address", "127.0.0.1:0"), ("identity", "local")])
        .expect("local args");
    let config = args
        .iter()
        .find_map(|a| a.strip_prefix("--config="))
        .expect("--config");
    assert!(config.starts_with(dir.to_str().expect("utf-8")), "{config}");
    let text = std::fs::read_to_string(config).expect("the copy exists");
    assert_eq!(text, scheduler.config_files[0].content);
    assert!(args.contains(&"--admin-address=127.0.0.1:0".to_owned()));
    assert_eq!(
        args.iter().filter(|a| a.starts_with("--admin-address=")).count(),
        1
    );
    assert_eq!(
        args.last().map(String::as_str),
        Some("--identity=local"),
        "an unset flag is appended"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn chart_copies_and_plain_manifests_are_fresh() {
    for (copy, source) in chart::chart_crd_copies().expect("crds/") {
        assert_eq!(
            std::fs::read_to_string(&copy).ok(),
            std::fs::read_to_string(&source).ok(),
            "{} is stale: run `cargo xtask helm render`",
            copy.display()
        );
    }
    for (path, content) in chart::plain_manifests(&helm()).expect("render") {
        assert!(
            std::fs::read_to_string(&path).ok().as_deref() == Some(content.as_str()),
            "{} is stale: run `cargo xtask helm render`",
            path.display()
        );
        Rendered::parse(&content).expect("the manifest parses");
    }
}

/// `global.gpuSharing=true` installs the GPU-sharing webhook (served by the scheduler's Deployment, no
/// third one), its certificate's Secret and its RBAC, registered so that it can block no pod
/// (`failurePolicy: Ignore`, a short timeout, pod creations only, never the release's namespace), and the
/// scheduler then holds back sharing pods it did not prepare (`requireWebhook`).
#[test]
fn gpu_sharing_installs_the_webhook_its_certificate_and_its_rbac() {
    let rendered = render(&[("global.gpuSharing", "true")]);
    let components = rendered.components().expect("components");
    assert_eq!(components.len(), 2, "no third Deployment");
    let scheduler = component(&components, "scheduler");
    assert!(scheduler_config(scheduler).plugins.gpusharing.require_webhook);
    let configuration = rendered
        .find("MutatingWebhookConfiguration", "kai-scheduler-gpu-sharing")
        .expect("the webhook configuration");
    let [webhook] = configuration["webhooks"].as_array().expect("webhooks").as_slice() else {
        panic!("one webhook: {configuration}");
    };
    assert_eq!(webhook["failurePolicy"], "Ignore", "never blocks a pod");
    assert_eq!(webhook["sideEffects"], "None");
    assert!(
        webhook["timeoutSeconds"].as_u64().is_some_and(|t| t <= 10),
        "{webhook}"
    );
    assert_eq!(webhook["admissionReviewVersions"], serde_json::json!(["v1"]));
    assert_eq!(
        webhook["rules"],
        serde_json::json!([{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                             "resources": ["pods"], "scope": "Namespaced" }])
    );
    let excluded = &webhook["namespaceSelector"]["matchExpressions"][0];
    assert_eq!(excluded["operator"], "NotIn");
    for namespace in ["kai-scheduler", "kai-resource-reservation", "kube-system"] {
        assert!(
            excluded["values"]
                .as_array()
                .is_some_and(|v| v.iter().any(|n| n == namespace)),
            "{namespace} never goes through the webhook: {excluded}"
        );
    }
    assert!(
        webhook["clientConfig"].get("caBundle").is_none(),
        "the scheduler keeps the bundle"
    );
    let service = &webhook["clientConfig"]["service"];
    assert_eq!(service["path"], "/mutate-pods");
    let svc = rendered
        .find("Service", service["name"].as_str().unwrap_or_default())
        .expect("the webhook's Service");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "webhook");
    assert_eq!(
        svc["spec"]["selector"]["app.kubernetes.io/component"],
        "scheduler"
    );
    let deployment = rendered.find("Deployment", "kai-scheduler").expect("scheduler");
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    let port = ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "webhook")
        .expect("the container's webhook port");
    assert_eq!(
        scheduler.flag("webhook-address"),
        Some(format!("0.0.0.0:{}", port["containerPort"]).as_str())
    );
    let hosts = scheduler.flag("webhook-hosts").expect("hosts");
    assert!(
        hosts
            .split(',')
            .any(|h| h == "kai-scheduler-webhook.kai-scheduler.svc"),
        "the name the API server calls: {hosts}"
    );
    assert_eq!(scheduler.flag("webhook-certificates"), Some("self"));
    assert_eq!(
        scheduler.flag("webhook-configuration"),
        Some("kai-scheduler-gpu-sharing")
    );
    let secret = scheduler.flag("webhook-secret").expect("secret");
    let made = rendered
        .find("Secret", secret)
        .expect("the chart makes the Secret");
    assert!(made.get("data").is_none(), "empty: the scheduler fills it");
    assert_eq!(scheduler.flag("webhook-secret-namespace"), Some("kai-scheduler"));
    let role = rendered.find("Role", "kai-scheduler-webhook-tls").expect("Role");
    assert!(grants(role, "", "secrets", "update") && !grants(role, "", "secrets", "create"));
    let cluster_role = rendered
        .find("ClusterRole", "kai-scheduler")
        .expect("ClusterRole");
    assert!(grants(cluster_role, "", "configmaps", "patch"));
    assert!(grants(
        cluster_role,
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch"
    ));

    // Off by default, and off on request (sharing pods then see what the runtime gives them).
    for values in [
        vec![],
        vec![
            ("global.gpuSharing", "true"),
            ("gpuSharingWebhook.enabled", "false"),
        ],
    ] {
        let plain = render(&values);
        assert_eq!(
            plain.of_kind("MutatingWebhookConfiguration").count(),
            0,
            "{values:?}"
        );
        assert!(plain.find("Role", "kai-scheduler-webhook-tls").is_none());
        let components = plain.components().expect("components");
        let scheduler = component(&components, "scheduler");
        assert_eq!(scheduler.flag("webhook-address"), None);
        assert!(!scheduler_config(scheduler).plugins.gpusharing.require_webhook);
        let cluster_role = plain.find("ClusterRole", "kai-scheduler").expect("ClusterRole");
        assert!(!grants(cluster_role, "", "configmaps", "patch"));
    }
}

/// With cert-manager the chart renders a Certificate for the webhook's Secret and has cert-manager inject
/// the CA bundle; the scheduler only reads the Secret.
#[test]
fn the_webhook_certificate_can_come_from_cert_manager() {
    let rendered = render(&[
        ("global.gpuSharing", "true"),
        ("gpuSharingWebhook.certificates.source", "certManager"),
    ]);
    let components = rendered.components().expect("components");
    let scheduler = component(&components, "scheduler");
    assert_eq!(scheduler.flag("webhook-certificates"), Some("external"));
    assert_eq!(scheduler.flag("webhook-configuration"), None);
    let secret = scheduler.flag("webhook-secret").expect("secret");
    assert!(rendered.find("Secret", secret).is_none(), "cert-manager makes it");
    let certificate = rendered
        .of_kind("Certificate")
        .next()
        .expect("a cert-manager Certificate");
    assert_eq!(certificate["spec"]["secretName"], secret);
    assert!(
        certificate["spec"]["dnsNames"]
            .as_array()
            .is_some_and(|d| d.iter().any(|n| n == "kai-scheduler-webhook.kai-scheduler.svc"))
    );
    let configuration = rendered
        .find("MutatingWebhookConfiguration", "kai-scheduler-gpu-sharing")
        .expect("configuration");
    assert_eq!(
        configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!(
            "kai-scheduler/{}",
            certificate["metadata"]["name"].as_str().unwrap_or_default()
        )
    );
    let role = rendered.find("Role", "kai-scheduler-webhook-tls").expect("Role");
    assert!(grants(role, "", "secrets", "get") && !grants(role, "", "secrets", "update"));
    let cluster_role = rendered
        .find("ClusterRole", "kai-scheduler")
        .expect("ClusterRole");
    assert!(!grants(
        cluster_role,
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch"
    ));
    assert!(
        Rendered::render(
            &helm(),
            chart::RELEASE,
            chart::NAMESPACE,
            &[
                ("global.gpuSharing", "true"),
                ("gpuSharingWebhook.certificates.source", "vault")
            ]
        )
        .is_err(),
        "an unknown source fails the render"
    );
}

/// `podgrouper.kindDefaults` renders KAI's per-kind defaults ConfigMap, points the podgrouper at it and
/// lets it list and watch that one ConfigMap; an existing ConfigMap can be named instead.
#[test]
fn kind_defaults_render_a_configmap_the_podgrouper_may_read() {
    let rendered = render(&[
        ("podgrouper.kindDefaults[0].typeName", "Deployment"),
        ("podgrouper.kindDefaults[0].group", "apps"),
        ("podgrouper.kindDefaults[0].priorityName", "build"),
        ("podgrouper.kindDefaults[0].preemptibility", "preemptible"),
    ]);
    let components = rendered.components().expect("components");
    let podgrouper = component(&components, "podgrouper");
    assert_eq!(
        podgrouper.flag("default-priorities-configmap-name"),
        Some("kai-podgrouper-kind-defaults")
    );
    assert_eq!(
        podgrouper.flag("default-priorities-configmap-namespace"),
        Some("kai-scheduler")
    );
    let cm = rendered
        .find("ConfigMap", "kai-podgrouper-kind-defaults")
        .expect("the ConfigMap");
    let types: Value = serde_json::from_str(cm["data"]["types"].as_str().expect("types")).expect("JSON");
    assert_eq!(
        types,
        serde_json::json!([{"typeName": "Deployment", "group": "apps", "priorityName": "build",
                            "preemptibility": "preemptible"}])
    );
    let role = rendered
        .find("Role", "kai-podgrouper-kind-defaults")
        .expect("the Role");
    assert_eq!(role["metadata"]["namespace"], "kai-scheduler");
    assert!(grants(role, "", "configmaps", "list") && grants(role, "", "configmaps", "watch"));
    assert!(!grants(role, "", "configmaps", "get"), "{role}");
    assert_eq!(
        role["rules"][0]["resourceNames"],
        serde_json::json!(["kai-podgrouper-kind-defaults"])
    );
    assert!(
        rendered
            .find("RoleBinding", "kai-podgrouper-kind-defaults")
            .is_some()
    );

    let external = render(&[
        ("podgrouper.kindDefaultsConfigMap.name", "defaults"),
        ("podgrouper.kindDefaultsConfigMap.namespace", "platform"),
    ]);
    let components = external.components().expect("components");
    let podgrouper = component(&components, "podgrouper");
    assert_eq!(
        podgrouper.flag("default-priorities-configmap-name"),
        Some("defaults")
    );
    assert_eq!(
        podgrouper.flag("default-priorities-configmap-namespace"),
        Some("platform")
    );
    assert!(
        external
            .of_kind("ConfigMap")
            .all(|c| c["metadata"]["name"] != "kai-podgrouper-kind-defaults")
    );
    let role = external
        .find("Role", "kai-podgrouper-kind-defaults")
        .expect("the Role");
    assert_eq!(role["metadata"]["namespace"], "platform");

    let plain = render(&[]);
    let components = plain.components().expect("components");
    assert_eq!(
        component(&components, "podgrouper").flag("default-priorities-configmap-name"),
        None
    );
    assert!(plain.find("Role", "kai-podgrouper-kind-defaults").is_none());
}

/// `grafanaDashboard.enabled` renders the dashboard for Grafana's sidecar: a ConfigMap with its label
/// holding the dashboard file as valid JSON; off by default.
#[test]
fn grafana_dashboard_renders_for_the_sidecar_only_when_enabled() {
    let rendered = render(&[("grafanaDashboard.enabled", "true")]);
    let cm = rendered
        .of_kind("ConfigMap")
        .find(|c| {
            c["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("grafana-dashboard"))
        })
        .expect("the dashboard ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value = serde_json::from_str(
        cm["data"]["kai-scheduler.json"]
            .as_str()
            .expect("the dashboard file"),
    )
    .expect("the dashboard is JSON");
    assert!(
        dashboard["panels"].as_array().is_some_and(|p| !p.is_empty()),
        "{dashboard}"
    );
    assert!(
        render(&[]).of_kind("ConfigMap").all(|c| !c["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("grafana-dashboard"))),
        "off by default"
    );
}
