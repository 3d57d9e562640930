//! The chart's RBAC in the cluster, and the components' credentials under it: the e2e tier runs the
//! scheduler and the podgrouper with the tokens of the ServiceAccounts the chart makes, never with the
//! admin's, so a permission the chart lacks fails a test (and `cargo xtask rbac-audit` finds the ones it
//! grants in vain).
//!
//! [`install`] renders the chart as `helm upgrade -i kai-scheduler deploy/chart/kai-scheduler -n
//! kai-scheduler` would with [`E2E_VALUES`] (GPU sharing and leader election on, so every RBAC object the
//! chart can make is there) and server-side applies exactly its RBAC objects: ServiceAccounts, ClusterRoles,
//! ClusterRoleBindings, Roles, RoleBindings, and the GPU reservation Namespace they live in. Idempotent.
//! The objects carry Helm's ownership annotations, so a later `helm upgrade -i kai-scheduler` (`cargo xtask
//! demo`) adopts them. Objects the tests themselves make (namespaces, nodes, pods, PodGroups, queues) keep
//! the admin's credentials.
//!
//! Must not: grant anything the chart does not render. The one liberty: the chart's lease Role of a
//! component is copied, rules and subjects unchanged, into a test's own namespace
//! ([`ChartRbac::lease_objects`]), so tests with leader election keep their leases apart.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use serde_json::Value;

use crate::apply::{Applier, Placement};
use crate::chart::{self, ComponentSpec, Rendered};
use crate::connect::KubeconfigSource;
use crate::helm::Helm;

/// The chart values of the e2e tier's install (`--set` pairs): GPU sharing on (the reservation RBAC) and
/// leader election on for both components (their lease Roles).
pub const E2E_VALUES: [(&str, &str); 3] = [
    ("global.gpuSharing", "true"),
    ("scheduler.leaderElection", "true"),
    ("podgrouper.leaderElection", "true"),
];

/// The kinds [`install`] applies.
pub const RBAC_KINDS: [&str; 6] = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// Annotations by which Helm recognises objects of its release (it adopts them on `upgrade -i`).
const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
/// See [`HELM_RELEASE_NAME`].
const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";

/// The chart's RBAC objects of a render, in render order, with Helm's ownership annotations of the
/// release `release` in `namespace`.
#[must_use]
pub fn rbac_objects(rendered: &Rendered, release: &str, namespace: &str) -> Vec<Value> {
    rendered
        .objects()
        .iter()
        .filter(|o| RBAC_KINDS.contains(&o["kind"].as_str().unwrap_or_default()))
        .cloned()
        .map(|mut o| {
            if let Some(metadata) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                let annotations = metadata
                    .entry("annotations")
                    .or_insert_with(|| Value::Object(serde_json::Map::new()));
                if let Some(annotations) = annotations.as_object_mut() {
                    annotations.insert(HELM_RELEASE_NAME.into(), release.into());
                    annotations.insert(HELM_RELEASE_NAMESPACE.into(), namespace.into());
                }
            }
            o
        })
        .collect()
}

/// What the e2e tier knows after [`install`]: the components as rendered and a token of each one's
/// ServiceAccount. Plain data, shared by every test of a process.
#[derive(Clone)]
pub struct ChartRbac {
    rendered: Rendered,
    components: Vec<ComponentSpec>,
    /// ServiceAccount name -> token.
    tokens: BTreeMap<String, String>,
}

impl std::fmt::Debug for ChartRbac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChartRbac")
            .field("service_accounts", &self.tokens.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Renders the chart with [`E2E_VALUES`] (fetching Helm when needed), applies its RBAC objects and reads
/// a token of each component's ServiceAccount.
///
/// # Errors
/// When Helm fails, the server rejects an object, or a token does not appear within 60 s.
pub async fn install(client: &Client) -> anyhow::Result<ChartRbac> {
    let helm = tokio::task::spawn_blocking(Helm::find_or_fetch).await??;
    let rendered = Rendered::render(&helm, chart::RELEASE, chart::NAMESPACE, &E2E_VALUES)?;
    let mut applier = Applier::new(client.clone());
    for object in rbac_objects(&rendered, chart::RELEASE, chart::NAMESPACE) {
        applier
            .apply_value(object, Placement::AsWritten)
            .await
            .context("installing the chart's RBAC")?;
    }
    let components = rendered.components()?;
    let mut tokens = BTreeMap::new();
    for spec in &components {
        let token = crate::serviceaccount::token(
            client,
            &spec.namespace,
            &spec.service_account,
            Duration::from_secs(60),
        )
        .await?;
        tokens.insert(spec.service_account.clone(), token);
    }
    Ok(ChartRbac {
        rendered,
        components,
        tokens,
    })
}

impl ChartRbac {
    /// The chart's component that runs `binary` (`kai-scheduler`, `kai-podgrouper`).
    ///
    /// # Errors
    /// When the chart runs no such binary.
    pub fn component(&self, binary: &str) -> anyhow::Result<&ComponentSpec> {
        self.components
            .iter()
            .find(|c| c.binary == binary)
            .with_context(|| format!("the chart runs no binary {binary}: not a component, no ServiceAccount"))
    }

    /// A kubeconfig for `binary`: the cluster of `admin` (its server and certificate authority) with the
    /// token of the binary's ServiceAccount.
    ///
    /// # Errors
    /// When `binary` is no component or the admin kubeconfig cannot be read.
    pub fn kubeconfig(&self, binary: &str, admin: &KubeconfigSource) -> anyhow::Result<String> {
        let spec = self.component(binary)?;
        let token = self
            .tokens
            .get(&spec.service_account)
            .with_context(|| format!("no token of {}", spec.service_account))?;
        let admin_text = match admin {
            KubeconfigSource::Local(path) => {
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
            }
            KubeconfigSource::Env(_) => {
                serde_yaml::to_string(&kube::config::Kubeconfig::read().context("reading KUBECONFIG")?)?
            }
        };
        let user = format!(
            "system:serviceaccount:{}:{}",
            spec.namespace, spec.service_account
        );
        crate::serviceaccount::kubeconfig_with_token(&admin_text, &user, token)
    }

    /// Writes [`ChartRbac::kubeconfig`] to `dir/<service account>.kubeconfig` (private) and returns the
    /// path.
    ///
    /// # Errors
    /// See [`ChartRbac::kubeconfig`]; when the file cannot be written.
    pub fn write_kubeconfig(
        &self,
        binary: &str,
        admin: &KubeconfigSource,
        dir: &Path,
    ) -> anyhow::Result<std::path::PathBuf> {
        let text = self.kubeconfig(binary, admin)?;
        let spec = self.component(binary)?;
        let path = dir.join(format!("{}.kubeconfig", spec.service_account));
        crate::serviceaccount::write_private(&path, &text)?;
        Ok(path)
    }

    /// The chart's lease Role and RoleBinding of `binary`'s component, moved into `namespace` (rules,
    /// role reference and subjects unchanged), and the lease name they allow. With them the component
    /// elects its leader in `namespace`: `--lease-namespace <namespace> --lease-name <name>`.
    ///
    /// # Errors
    /// When `binary` is no component or the chart renders no lease Role for it.
    pub fn lease_objects(&self, binary: &str, namespace: &str) -> anyhow::Result<(Vec<Value>, String)> {
        let spec = self.component(binary)?;
        let lease = spec
            .flag("lease-name")
            .with_context(|| format!("{binary}: the chart renders no --lease-name (leader election off)"))?
            .to_owned();
        let role = format!("{}-leader-election", spec.deployment);
        let mut objects = Vec::new();
        for kind in ["Role", "RoleBinding"] {
            let mut object = self
                .rendered
                .find(kind, &role)
                .with_context(|| format!("the chart renders no {kind} {role}"))?
                .clone();
            object["metadata"]["namespace"] = namespace.into();
            objects.push(object);
        }
        Ok((objects, lease))
    }

    /// The chart's rendering, for objects a test takes over.
    #[must_use]
    pub fn rendered(&self) -> &Rendered {
        &self.rendered
    }

    /// The chart's GPU-sharing webhook, moved to one test: the chart's MutatingWebhookConfiguration
    /// renamed `configuration`, calling `url` and sent only the pods of namespaces labelled
    /// `<scope_label>=<namespace>`; the chart's (empty) webhook Secret and its Role and RoleBinding moved
    /// into `namespace` (rules and subjects unchanged); and the chart's ClusterRole rule on the
    /// configuration, granted for `configuration` by a ClusterRole and ClusterRoleBinding of that name (the
    /// one liberty, as with the lease Roles: the rule names the test's configuration, not the chart's),
    /// with the chart's rule on ConfigMaps beside it.
    /// Every cluster-scoped object gets `owner` (the test's Namespace) as its owner, so the garbage
    /// collector removes it with the namespace whatever becomes of the test.
    ///
    /// # Errors
    /// When the chart renders no webhook (GPU sharing off in the e2e values).
    pub fn webhook_objects(
        &self,
        namespace: &str,
        configuration: &str,
        url: &str,
        scope_label: &str,
        owner: &Value,
    ) -> anyhow::Result<Vec<Value>> {
        let mut objects = Vec::new();
        let scheduler = self.component("kai-scheduler")?;
        let secret = scheduler
            .flag("webhook-secret")
            .context("the chart renders no --webhook-secret (GPU sharing off?)")?;
        let mut object = self
            .rendered
            .find("Secret", secret)
            .with_context(|| format!("the chart renders no Secret {secret}"))?
            .clone();
        object["metadata"]["namespace"] = namespace.into();
        objects.push(object);
        let role = format!("{}-webhook-tls", scheduler.deployment);
        for kind in ["Role", "RoleBinding"] {
            let mut object = self
                .rendered
                .find(kind, &role)
                .with_context(|| format!("the chart renders no {kind} {role}"))?
                .clone();
            object["metadata"]["namespace"] = namespace.into();
            objects.push(object);
        }
        let chart_configuration = scheduler
            .flag("webhook-configuration")
            .context("the chart renders no --webhook-configuration")?;
        let cluster_role = self
            .rendered
            .find("ClusterRole", &scheduler.deployment)
            .context("the chart renders no scheduler ClusterRole")?;
        let mut rule = cluster_role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|res| res.iter().any(|x| x == "mutatingwebhookconfigurations"))
            })
            .context("the scheduler's ClusterRole has no rule on mutatingwebhookconfigurations")?
            .clone();
        anyhow::ensure!(
            rule["resourceNames"] == serde_json::json!([chart_configuration]),
            "the chart's rule names {} rather than its configuration {chart_configuration}",
            rule["resourceNames"]
        );
        rule["resourceNames"] = serde_json::json!([configuration]);
        // The chart's rule on the pods' GPU-sharing ConfigMaps, copied unchanged: the test's grant keeps
        // it even while another checkout's e2e run installs a chart without it.
        let configmaps = cluster_role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|res| res.iter().any(|x| x == "configmaps"))
            })
            .context("the scheduler's ClusterRole has no rule on configmaps")?
            .clone();
        let binding = self
            .rendered
            .find("ClusterRoleBinding", &scheduler.deployment)
            .context("the chart renders no scheduler ClusterRoleBinding")?;
        let owned = |mut o: Value| {
            o["metadata"]["ownerReferences"] = serde_json::json!([owner]);
            o
        };
        objects.push(owned(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": configuration },
            "rules": [rule, configmaps],
        })));
        objects.push(owned(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": configuration },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": configuration },
            "subjects": binding["subjects"].clone(),
        })));
        let mut webhook = self
            .rendered
            .find("MutatingWebhookConfiguration", chart_configuration)
            .with_context(|| {
                format!("the chart renders no MutatingWebhookConfiguration {chart_configuration}")
            })?
            .clone();
        webhook["metadata"]["name"] = configuration.into();
        for w in webhook["webhooks"].as_array_mut().into_iter().flatten() {
            w["clientConfig"] = serde_json::json!({ "url": url });
            w["namespaceSelector"] = serde_json::json!({ "matchLabels": { scope_label: namespace } });
        }
        objects.push(owned(webhook));
        Ok(objects)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENDERED: &str = r"
apiVersion: v1
kind: Namespace
metadata: {name: reserved, labels: {pod-security.kubernetes.io/enforce: restricted}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: kai-scheduler, namespace: kai-scheduler}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config, namespace: kai-scheduler}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kai-scheduler, annotations: {keep: me}}
rules: [{apiGroups: [''], resources: [pods], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: kai-scheduler-leader-election, namespace: kai-scheduler}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [kai-scheduler], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: kai-scheduler-leader-election, namespace: kai-scheduler}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: kai-scheduler-leader-election}
subjects: [{kind: ServiceAccount, name: kai-scheduler, namespace: kai-scheduler}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: kai-scheduler, namespace: kai-scheduler, labels: {app.kubernetes.io/component: scheduler}}
spec:
  template:
    spec:
      serviceAccountName: kai-scheduler
      containers:
        - name: scheduler
          command: [/usr/local/bin/kai-scheduler]
          args: [--leader-elect=true, --lease-name=kai-scheduler, --lease-namespace=kai-scheduler]
";

    fn chart() -> ChartRbac {
        let rendered = Rendered::parse(RENDERED).expect("parse");
        let components = rendered.components().expect("components");
        ChartRbac {
            rendered,
            components,
            tokens: [("kai-scheduler".to_owned(), "t0k3n".to_owned())].into(),
        }
    }

    #[test]
    fn only_rbac_objects_are_installed_and_helm_may_adopt_them() {
        let objects = rbac_objects(&chart().rendered, "kai-scheduler", "kai-scheduler");
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "Role",
                "RoleBinding"
            ],
            "no ConfigMap, no Deployment"
        );
        for object in &objects {
            let annotations = &object["metadata"]["annotations"];
            assert_eq!(annotations[HELM_RELEASE_NAME], "kai-scheduler", "{object}");
            assert_eq!(annotations[HELM_RELEASE_NAMESPACE], "kai-scheduler");
        }
        assert_eq!(objects[2]["metadata"]["annotations"]["keep"], "me");
        assert_eq!(objects[2]["rules"][0]["resources"][0], "pods", "rules unchanged");
    }

    #[test]
    fn a_component_gets_its_service_account_s_token_and_nothing_else_does() {
        let chart = chart();
        let dir = std::env::temp_dir().join(format!("chart-rbac-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let admin = dir.join("admin");
        std::fs::write(
            &admin,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://127.0.0.1:1}\nusers:\n- name: admin\n  user: {token: admin-secret}\ncontexts:\n- name: c\n  context: {cluster: c, user: admin}\ncurrent-context: c\n",
        )
        .expect("write");
        let source = KubeconfigSource::Local(admin);
        let path = chart
            .write_kubeconfig("kai-scheduler", &source, &dir)
            .expect("kubeconfig");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains("t0k3n") && !text.contains("admin-secret"), "{text}");
        assert!(text.contains("system:serviceaccount:kai-scheduler:kai-scheduler"));
        assert!(
            chart.kubeconfig("kai-podgrouper", &source).is_err(),
            "no token for a component the render lacks"
        );
        assert!(chart.kubeconfig("kubectl", &source).is_err());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    const WEBHOOK: &str = r"
apiVersion: v1
kind: Secret
metadata: {name: kai-scheduler-webhook-tls, namespace: kai-scheduler}
type: Opaque
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kai-scheduler}
rules:
  - {apiGroups: [''], resources: [pods], verbs: [list]}
  - {apiGroups: [''], resources: [configmaps], verbs: [create, patch]}
  - {apiGroups: [admissionregistration.k8s.io], resources: [mutatingwebhookconfigurations], resourceNames: [kai-scheduler-gpu-sharing], verbs: [get, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kai-scheduler}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kai-scheduler}
subjects: [{kind: ServiceAccount, name: kai-scheduler, namespace: kai-scheduler}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: kai-scheduler-webhook-tls, namespace: kai-scheduler}
rules: [{apiGroups: [''], resources: [secrets], resourceNames: [kai-scheduler-webhook-tls], verbs: [get, update]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: kai-scheduler-webhook-tls, namespace: kai-scheduler}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: kai-scheduler-webhook-tls}
subjects: [{kind: ServiceAccount, name: kai-scheduler, namespace: kai-scheduler}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: kai-scheduler-gpu-sharing}
webhooks:
  - name: gpu-sharing.kai.scheduler
    failurePolicy: Ignore
    clientConfig: {service: {name: kai-scheduler-webhook, namespace: kai-scheduler, path: /mutate-pods}}
    namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kai-scheduler]}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: kai-scheduler, namespace: kai-scheduler, labels: {app.kubernetes.io/component: scheduler}}
spec:
  template:
    spec:
      serviceAccountName: kai-scheduler
      containers:
        - name: scheduler
          command: [/usr/local/bin/kai-scheduler]
          args: [--webhook-secret=kai-scheduler-webhook-tls, --webhook-configuration=kai-scheduler-gpu-sharing]
";

    #[test]
    fn webhook_objects_select_only_the_test_namespace_and_are_owned_by_it() {
        let rendered = Rendered::parse(WEBHOOK).expect("parse");
        let components = rendered.components().expect("components");
        let chart = ChartRbac {
            rendered,
            components,
            tokens: BTreeMap::new(),
        };
        let owner =
            serde_json::json!({ "apiVersion": "v1", "kind": "Namespace", "name": "e2e-t", "uid": "u" });
        let objects = chart
            .webhook_objects(
                "e2e-t",
                "e2e-t-gpu-sharing",
                "https://127.0.0.1:1/mutate-pods",
                "scope",
                &owner,
            )
            .expect("objects");
        let find = |kind: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind)
                .unwrap_or_else(|| panic!("no {kind}"))
        };
        for kind in ["Secret", "Role", "RoleBinding"] {
            assert_eq!(find(kind)["metadata"]["namespace"], "e2e-t", "{kind}");
        }
        assert_eq!(find("RoleBinding")["subjects"][0]["namespace"], "kai-scheduler");
        let webhook = find("MutatingWebhookConfiguration");
        assert_eq!(webhook["metadata"]["name"], "e2e-t-gpu-sharing");
        let w = &webhook["webhooks"][0];
        assert_eq!(
            w["clientConfig"],
            serde_json::json!({ "url": "https://127.0.0.1:1/mutate-pods" })
        );
        assert_eq!(
            w["namespaceSelector"],
            serde_json::json!({ "matchLabels": { "scope": "e2e-t" } })
        );
        assert_eq!(w["failurePolicy"], "Ignore", "the chart's settings stay");
        let role = find("ClusterRole");
        assert_eq!(
            role["rules"][0]["resourceNames"],
            serde_json::json!(["e2e-t-gpu-sharing"])
        );
        assert_eq!(role["rules"][1]["resources"], serde_json::json!(["configmaps"]));
        assert_eq!(find("ClusterRoleBinding")["subjects"][0]["name"], "kai-scheduler");
        for kind in [
            "MutatingWebhookConfiguration",
            "ClusterRole",
            "ClusterRoleBinding",
        ] {
            assert_eq!(find(kind)["metadata"]["ownerReferences"][0], owner, "{kind}");
        }
    }

    #[test]
    fn lease_objects_move_only_the_namespace() {
        let (objects, lease) = chart()
            .lease_objects("kai-scheduler", "e2e-test")
            .expect("lease objects");
        assert_eq!(lease, "kai-scheduler");
        let [role, binding] = objects.as_slice() else {
            panic!("{objects:?}")
        };
        assert_eq!(role["metadata"]["namespace"], "e2e-test");
        assert_eq!(role["rules"][0]["resourceNames"][0], "kai-scheduler");
        assert_eq!(binding["metadata"]["namespace"], "e2e-test");
        assert_eq!(
            binding["subjects"][0]["namespace"], "kai-scheduler",
            "still the chart's ServiceAccount"
        );
    }
}
