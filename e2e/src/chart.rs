//! The Helm chart (`deploy/chart/kai-scheduler`) as the tests see it: rendered with `helm template`, parsed
//! into objects, and cut into what each component's container gets (command, arguments, environment,
//! mounted configuration files), so the e2e tier runs the binaries as local processes with exactly what
//! the chart renders. Also the plain manifests (`deploy/manifests/`) and the chart's copies of the CRDs,
//! with the freshness checks `cargo xtask helm` runs.
//!
//! Must not: install anything (see `cargo xtask helm install` and [`crate::serviceaccount`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::helm::Helm;

/// The release name and namespace users install with (seed 002).
pub const RELEASE: &str = "kai-scheduler";
/// See [`RELEASE`].
pub const NAMESPACE: &str = "kai-scheduler";

/// The workspace root (the directory holding the top-level `Cargo.toml`).
#[must_use]
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// `deploy/chart/kai-scheduler`.
#[must_use]
pub fn chart_dir() -> PathBuf {
    workspace_root()
        .join("deploy")
        .join("chart")
        .join("kai-scheduler")
}

/// `deploy/manifests`.
#[must_use]
pub fn manifests_dir() -> PathBuf {
    workspace_root().join("deploy").join("manifests")
}

/// Renders the chart with `helm template`. `values` are `--set` pairs; `include_crds` adds the chart's
/// `crds/` folder to the output.
///
/// # Errors
/// When Helm fails (a template error, a `fail` in the chart, a bad value).
pub fn template(
    helm: &Helm,
    release: &str,
    namespace: &str,
    values: &[(&str, &str)],
    include_crds: bool,
) -> anyhow::Result<String> {
    let mut args: Vec<String> = vec![
        "template".into(),
        release.into(),
        chart_dir().display().to_string(),
        "--namespace".into(),
        namespace.into(),
    ];
    for (key, value) in values {
        args.push("--set".into());
        args.push(format!("{key}={value}"));
    }
    if include_crds {
        args.push("--include-crds".into());
    }
    helm.run(&args)
}

/// The objects of a `helm template` output.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    objects: Vec<Value>,
}

impl Rendered {
    /// Parses a multi-document YAML stream; empty documents are skipped.
    ///
    /// # Errors
    /// When a document is not YAML or is not an object with a kind.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut objects = Vec::new();
        for document in serde_yaml::Deserializer::from_str(text) {
            let value: Value = serde::Deserialize::deserialize(document).context("rendered YAML")?;
            if value.is_null() {
                continue;
            }
            if value.get("kind").and_then(Value::as_str).is_none() {
                bail!("rendered document without a kind: {value}");
            }
            objects.push(value);
        }
        Ok(Self { objects })
    }

    /// Renders with `helm template` (CRDs left out) and parses.
    ///
    /// # Errors
    /// See [`template`] and [`Rendered::parse`].
    pub fn render(
        helm: &Helm,
        release: &str,
        namespace: &str,
        values: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::parse(&template(helm, release, namespace, values, false)?)
    }

    /// Every object, in Helm's install order.
    #[must_use]
    pub fn objects(&self) -> &[Value] {
        &self.objects
    }

    /// The objects of one kind.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| kind_of(o) == kind)
    }

    /// The object of `kind` named `name`, if rendered.
    #[must_use]
    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| kind_of(o) == kind && name_of(o) == name)
    }

    /// What each Deployment's single container runs, in the order rendered.
    ///
    /// # Errors
    /// When a Deployment has no or several containers, or mounts or references something this cannot
    /// reproduce locally (a volume other than a rendered ConfigMap, an environment source other than a
    /// value or the pod's name or namespace).
    pub fn components(&self) -> anyhow::Result<Vec<ComponentSpec>> {
        self.of_kind("Deployment").map(|d| self.component(d)).collect()
    }

    fn component(&self, deployment: &Value) -> anyhow::Result<ComponentSpec> {
        let name = name_of(deployment);
        let namespace = deployment
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let pod = deployment
            .pointer("/spec/template/spec")
            .with_context(|| format!("Deployment {name} has no pod template"))?;
        let containers = pod
            .get("containers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let [container] = containers else {
            bail!(
                "Deployment {name} has {} containers; expected one",
                containers.len()
            );
        };
        let command = strings(container.get("command"));
        let binary = command
            .first()
            .and_then(|c| Path::new(c).file_name())
            .and_then(|f| f.to_str())
            .with_context(|| format!("Deployment {name}: the container names no command"))?
            .to_owned();
        // Any further command words come before the arguments, as the container runtime joins them.
        let mut args: Vec<String> = command.iter().skip(1).cloned().collect();
        args.extend(strings(container.get("args")));

        let mut env = Vec::new();
        for var in container
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let var_name = var.get("name").and_then(Value::as_str).unwrap_or_default();
            let value = if let Some(v) = var.get("value") {
                v.as_str().unwrap_or_default().to_owned()
            } else {
                match var
                    .pointer("/valueFrom/fieldRef/fieldPath")
                    .and_then(Value::as_str)
                {
                    Some("metadata.namespace") => namespace.clone(),
                    Some("metadata.name") => format!("{name}-local"),
                    _ => bail!("Deployment {name}: env {var_name} has a source a local process cannot get"),
                }
            };
            env.push((var_name.to_owned(), value));
        }

        let volumes: BTreeMap<&str, &Value> = pod
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| (v.get("name").and_then(Value::as_str).unwrap_or_default(), v))
            .collect();
        let mut config_files = Vec::new();
        for mount in container
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let volume_name = mount.get("name").and_then(Value::as_str).unwrap_or_default();
            let mount_path = mount.get("mountPath").and_then(Value::as_str).unwrap_or_default();
            let volume = volumes
                .get(volume_name)
                .with_context(|| format!("Deployment {name}: volume {volume_name} is not declared"))?;
            let map_name = volume
                .pointer("/configMap/name")
                .and_then(Value::as_str)
                .with_context(|| format!("Deployment {name}: volume {volume_name} is not a ConfigMap"))?;
            let map = self
                .find("ConfigMap", map_name)
                .with_context(|| format!("Deployment {name}: ConfigMap {map_name} is not rendered"))?;
            let data = map
                .get("data")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            // `items` picks keys and names their files; without it every key is a file of its name.
            let items: Vec<(String, String)> =
                match volume.pointer("/configMap/items").and_then(Value::as_array) {
                    Some(items) => items
                        .iter()
                        .map(|i| {
                            (
                                i.get("key")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_owned(),
                                i.get("path")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_owned(),
                            )
                        })
                        .collect(),
                    None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
                };
            let sub_path = mount.get("subPath").and_then(Value::as_str);
            for (key, file) in items {
                if sub_path.is_some_and(|s| s != file) {
                    continue;
                }
                let content = data
                    .get(&key)
                    .and_then(Value::as_str)
                    .with_context(|| format!("ConfigMap {map_name} has no key {key}"))?
                    .to_owned();
                let path = if sub_path.is_some() {
                    PathBuf::from(mount_path)
                } else {
                    Path::new(mount_path).join(&file)
                };
                config_files.push(ConfigFile { path, content });
            }
        }

        Ok(ComponentSpec {
            component: deployment
                .pointer("/metadata/labels/app.kubernetes.io~1component")
                .and_then(Value::as_str)
                .unwrap_or(name)
                .to_owned(),
            deployment: name.to_owned(),
            namespace,
            service_account: pod
                .get("serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_owned(),
            replicas: deployment
                .pointer("/spec/replicas")
                .and_then(Value::as_u64)
                .unwrap_or(1),
            binary,
            args,
            env,
            config_files,
        })
    }
}

/// A file a component's container finds mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// Path inside the container.
    pub path: PathBuf,
    /// Content.
    pub content: String,
}

/// What the chart runs for one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentSpec {
    /// `scheduler` or `podgrouper` (the `app.kubernetes.io/component` label).
    pub component: String,
    /// The Deployment's name.
    pub deployment: String,
    /// The release namespace.
    pub namespace: String,
    /// The ServiceAccount the pods run as; give the local process a token of it.
    pub service_account: String,
    /// Replicas of the Deployment.
    pub replicas: u64,
    /// The binary (`kai-scheduler`, `kai-podgrouper`): the file name of the container's command.
    pub binary: String,
    /// The container's arguments, as rendered.
    pub args: Vec<String>,
    /// The container's environment.
    pub env: Vec<(String, String)>,
    /// Files mounted from ConfigMaps, with their in-container paths.
    pub config_files: Vec<ConfigFile>,
}

impl ComponentSpec {
    /// The value of `--flag=value` among the arguments (`flag` without dashes), the last one winning.
    #[must_use]
    pub fn flag(&self, flag: &str) -> Option<&str> {
        let prefix = format!("--{flag}=");
        self.args.iter().rev().find_map(|a| a.strip_prefix(&prefix))
    }

    /// Arguments for running the component as a local process: writes every mounted file under `dir`
    /// (keeping its in-container path below it), points the arguments at those copies, then applies
    /// `overrides` (`("admin-address", "127.0.0.1:0")` replaces `--admin-address=...`, or is appended
    /// when the chart does not set it).
    ///
    /// # Errors
    /// When a file cannot be written.
    pub fn local_args(&self, dir: &Path, overrides: &[(&str, &str)]) -> anyhow::Result<Vec<String>> {
        let mut args = self.args.clone();
        for file in &self.config_files {
            let relative = file.path.strip_prefix("/").unwrap_or(&file.path);
            let local = dir.join(relative);
            if let Some(parent) = local.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&local, &file.content).with_context(|| format!("writing {}", local.display()))?;
            let container_path = file.path.display().to_string();
            let local_path = local.display().to_string();
            for arg in &mut args {
                if let Some((flag, value)) = arg.split_once('=')
                    && value == container_path
                {
                    *arg = format!("{flag}={local_path}");
                } else if *arg == container_path {
                    arg.clone_from(&local_path);
                }
            }
        }
        for (flag, value) in overrides {
            let prefix = format!("--{flag}=");
            let replacement = format!("{prefix}{value}");
            let mut replaced = false;
            for arg in &mut args {
                if arg.starts_with(&prefix) {
                    arg.clone_from(&replacement);
                    replaced = true;
                }
            }
            if !replaced {
                args.push(replacement);
            }
        }
        Ok(args)
    }
}

/// The components as the chart renders them for `helm upgrade -i kai-scheduler <chart> -n kai-scheduler`
/// with `values` (`--set` pairs, e.g. `("global.gpuSharing", "true")`). Fetches Helm when needed.
///
/// # Errors
/// See [`Helm::find_or_fetch`] and [`Rendered::components`].
pub fn rendered_components(values: &[(&str, &str)]) -> anyhow::Result<Vec<ComponentSpec>> {
    let helm = Helm::find_or_fetch()?;
    Rendered::render(&helm, RELEASE, NAMESPACE, values)?.components()
}

/// Installs (or upgrades) the chart as `release` in `namespace` (created when missing) on the cluster of
/// `kubeconfig`, waiting for nothing (the Deployments' pods never start without a kubelet). `skip_crds`
/// leaves the chart's CRDs out, for clusters that already have them (`cargo xtask cluster up` installs
/// them). Objects are created client-side: Helm 4's default server-side apply is refused by servers older
/// than 1.23 for CRDs that carry CEL rules.
///
/// # Errors
/// When Helm fails.
pub fn install(
    helm: &Helm,
    kubeconfig: &Path,
    release: &str,
    namespace: &str,
    values: &[(&str, &str)],
    skip_crds: bool,
) -> anyhow::Result<String> {
    let mut args: Vec<String> = vec![
        "upgrade".into(),
        "--install".into(),
        release.into(),
        chart_dir().display().to_string(),
        "--namespace".into(),
        namespace.into(),
        "--create-namespace".into(),
        "--server-side=false".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ];
    if skip_crds {
        args.push("--skip-crds".into());
    }
    for (key, value) in values {
        args.push("--set".into());
        args.push(format!("{key}={value}"));
    }
    helm.run(&args)
}

/// Uninstalls `release` (what Helm keeps stays: CRDs, default queues, Volcano's CRD).
///
/// # Errors
/// When Helm fails.
pub fn uninstall(helm: &Helm, kubeconfig: &Path, release: &str, namespace: &str) -> anyhow::Result<String> {
    helm.run([
        "uninstall".as_ref(),
        release.as_ref(),
        "--namespace".as_ref(),
        namespace.as_ref(),
        "--kubeconfig".as_ref(),
        kubeconfig.as_os_str(),
    ])
}

/// `--set` values of the plain manifests: the Namespace object included (no `--create-namespace` there),
/// Volcano's CRD left out (it is in `crds/volcano/` for clusters without Volcano).
pub const PLAIN_MANIFEST_VALUES: [(&str, &str); 2] =
    [("namespace.create", "true"), ("volcano.installCRD", "false")];

/// The plain manifests as they should be: `(path, content)` of `deploy/manifests/crds.yaml` (the
/// project's CRDs; apply first) and `deploy/manifests/kai-scheduler.yaml` (everything else).
///
/// # Errors
/// When rendering fails.
pub fn plain_manifests(helm: &Helm) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let command = "cargo xtask helm render";
    let crds_header = format!(
        "# Generated by `{command}` from deploy/chart/kai-scheduler/crds; do not edit.\n\
         # Apply first, then kai-scheduler.yaml once they are Established:\n\
         #   kubectl apply --server-side -f deploy/manifests/crds.yaml\n\
         #   kubectl wait --for condition=Established crd --all\n"
    );
    let mut crds = crds_header;
    let chart_crds = chart_dir().join("crds");
    for (file, _) in chart_crd_copies()?
        .into_iter()
        .filter(|(copy, _)| copy.starts_with(&chart_crds))
    {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        crds.push_str("---\n");
        crds.push_str(strip_comment_header(&text));
    }
    let values: Vec<String> = PLAIN_MANIFEST_VALUES
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let body = template(helm, RELEASE, NAMESPACE, &PLAIN_MANIFEST_VALUES, false)?;
    let main = format!(
        "# Generated by `{command}`: `helm template {RELEASE} deploy/chart/kai-scheduler -n {NAMESPACE} --set {}`;\n\
         # do not edit. The same objects `helm upgrade -i {RELEASE} deploy/chart/kai-scheduler -n {NAMESPACE}\n\
         # --create-namespace` installs (default values: GPU sharing off), for clusters without Helm:\n\
         #   kubectl apply --server-side -f deploy/manifests/crds.yaml\n\
         #   kubectl apply --server-side -f deploy/manifests/kai-scheduler.yaml\n\
         {body}",
        values.join(",")
    );
    let dir = manifests_dir();
    Ok(vec![
        (dir.join("crds.yaml"), crds),
        (dir.join("kai-scheduler.yaml"), main),
    ])
}

fn strip_comment_header(text: &str) -> &str {
    let mut rest = text;
    while rest.starts_with('#') {
        rest = rest.split_once('\n').map_or("", |(_, r)| r);
    }
    rest
}

/// The chart's copies of the repository's CRDs: `(copy in the chart, source)` pairs. The project's own
/// CRDs go to the chart's `crds/` (installed before the templates, never upgraded or deleted by Helm);
/// Volcano's goes to `files/volcano/`, rendered by a template only where the cluster lacks it.
///
/// # Errors
/// When `crds/` cannot be read.
pub fn chart_crd_copies() -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let source = workspace_root().join("crds");
    let chart = chart_dir();
    let mut pairs = Vec::new();
    for (from, to) in [
        (source.clone(), chart.join("crds")),
        (source.join("volcano"), chart.join("files").join("volcano")),
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&from)
            .with_context(|| format!("reading {}", from.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let name = file.file_name().context("file without a name")?;
            pairs.push((to.join(name), file));
        }
    }
    Ok(pairs)
}

fn kind_of(o: &Value) -> &str {
    o.get("kind").and_then(Value::as_str).unwrap_or_default()
}

fn name_of(o: &Value) -> &str {
    o.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r"
# Source: x
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ns}
data:
  a.yaml: 'alpha: 1'
  b.yaml: 'beta: 2'
---
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: thing
  namespace: ns
  labels: {app.kubernetes.io/component: thing}
spec:
  replicas: 2
  template:
    spec:
      serviceAccountName: thing-sa
      containers:
        - name: c
          command: [/usr/local/bin/kai-thing, serve]
          args: [--config=/etc/x/a.yaml, --other=/etc/y/renamed.yaml, --n=1]
          env:
            - {name: PLAIN, value: v}
            - name: NS
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
          volumeMounts:
            - {name: whole, mountPath: /etc/x}
            - {name: picked, mountPath: /etc/y}
      volumes:
        - name: whole
          configMap: {name: cfg}
        - name: picked
          configMap: {name: cfg, items: [{key: b.yaml, path: renamed.yaml}]}
";

    #[test]
    fn components_reproduce_the_container() {
        let rendered = Rendered::parse(MANIFEST).expect("parse");
        assert_eq!(rendered.objects().len(), 2, "empty documents are skipped");
        let [spec] = rendered
            .components()
            .expect("components")
            .try_into()
            .expect("one");
        assert_eq!(spec.component, "thing");
        assert_eq!(spec.service_account, "thing-sa");
        assert_eq!(spec.replicas, 2);
        assert_eq!(spec.binary, "kai-thing");
        assert_eq!(
            spec.args,
            [
                "serve",
                "--config=/etc/x/a.yaml",
                "--other=/etc/y/renamed.yaml",
                "--n=1"
            ]
        );
        assert_eq!(
            spec.env,
            [
                ("PLAIN".to_owned(), "v".to_owned()),
                ("NS".to_owned(), "ns".to_owned())
            ]
        );
        let files: Vec<(String, &str)> = spec
            .config_files
            .iter()
            .map(|f| (f.path.display().to_string(), f.content.as_str()))
            .collect();
        assert_eq!(
            files,
            [
                ("/etc/x/a.yaml".to_owned(), "alpha: 1"),
                ("/etc/x/b.yaml".to_owned(), "beta: 2"),
                ("/etc/y/renamed.yaml".to_owned(), "beta: 2"),
            ]
        );
        assert_eq!(spec.flag("n"), Some("1"));
        assert_eq!(spec.flag("missing"), None);
    }

    #[test]
    fn unreproducible_containers_are_refused() {
        let secret_env = MANIFEST.replace("fieldPath: metadata.namespace", "fieldPath: spec.nodeName");
        assert!(Rendered::parse(&secret_env).expect("parse").components().is_err());
        let secret_volume = MANIFEST.replace("configMap: {name: cfg}", "secret: {secretName: s}");
        assert!(
            Rendered::parse(&secret_volume)
                .expect("parse")
                .components()
                .is_err()
        );
        assert!(
            Rendered::parse("metadata: {name: x}\n").is_err(),
            "a document without a kind"
        );
    }
}
