//! Credentials of a ServiceAccount, so a test runs a component with exactly the permissions the chart
//! grants it: a long-lived token and a kubeconfig that uses it.
//!
//! The token comes from a Secret of type `kubernetes.io/service-account-token` annotated with the
//! account's name, which the controller manager's token controller fills in. That works on 1.20 (which
//! also makes one such Secret per account by itself) and on 1.24+ (which no longer does).
//!
//! Must not: grant anything; the permissions are the chart's.

use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// The annotation that ties a token Secret to its account.
const SERVICE_ACCOUNT_ANNOTATION: &str = "kubernetes.io/service-account.name";

/// A token of `namespace/service_account`, from the Secret `<service_account>-e2e-token` (made when
/// missing), waiting up to `timeout` for the token controller to fill it in.
///
/// # Errors
/// When the Secret cannot be made or read, or stays empty (the account does not exist, or the controller
/// manager runs without `--service-account-private-key-file`).
pub async fn token(
    client: &Client,
    namespace: &str,
    service_account: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = format!("{service_account}-e2e-token");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some([(SERVICE_ACCOUNT_ANNOTATION.to_owned(), service_account.to_owned())].into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/service-account-token".to_owned()),
        ..Secret::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(e).with_context(|| format!("creating Secret {namespace}/{name}")),
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let current = secrets
            .get_opt(&name)
            .await
            .with_context(|| format!("reading Secret {namespace}/{name}"))?;
        let token = current
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get("token"))
            .map(|ByteString(bytes)| String::from_utf8_lossy(bytes).into_owned())
            .filter(|t| !t.is_empty());
        if let Some(token) = token {
            return Ok(token);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no token in Secret {namespace}/{name} after {timeout:?} (does ServiceAccount {service_account} exist? \
                 the token controller deletes Secrets of missing accounts)"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A kubeconfig for `token` against the cluster of `admin_kubeconfig`'s current context (same server
/// and certificate authority), with a user named `user`.
///
/// # Errors
/// When `admin_kubeconfig` is not a kubeconfig or its current context is missing.
pub fn kubeconfig_with_token(admin_kubeconfig: &str, user: &str, token: &str) -> anyhow::Result<String> {
    let config: serde_yaml::Value =
        serde_yaml::from_str(admin_kubeconfig).context("parsing the kubeconfig")?;
    let current = config
        .get("current-context")
        .and_then(serde_yaml::Value::as_str)
        .context("the kubeconfig has no current-context")?;
    let named = |list: &str, name: &str| -> anyhow::Result<serde_yaml::Value> {
        config
            .get(list)
            .and_then(serde_yaml::Value::as_sequence)
            .into_iter()
            .flatten()
            .find(|entry| entry.get("name").and_then(serde_yaml::Value::as_str) == Some(name))
            .cloned()
            .with_context(|| format!("the kubeconfig has no {list} entry {name}"))
    };
    let context = named("contexts", current)?;
    let cluster_name = context
        .get("context")
        .and_then(|c| c.get("cluster"))
        .and_then(serde_yaml::Value::as_str)
        .context("the current context names no cluster")?
        .to_owned();
    let cluster = named("clusters", &cluster_name)?;
    let namespace = context.get("context").and_then(|c| c.get("namespace")).cloned();
    let mut new_context = serde_yaml::Mapping::new();
    new_context.insert("cluster".into(), cluster_name.into());
    new_context.insert("user".into(), user.into());
    if let Some(namespace) = namespace {
        new_context.insert("namespace".into(), namespace);
    }
    let out = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [serde_json::to_value(&cluster)?],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": serde_json::to_value(&new_context)?}],
        "current-context": user,
    });
    Ok(serde_yaml::to_string(&out)?)
}

/// Writes a kubeconfig (it holds a token) to `path`, readable and writable by its owner only.
///
/// # Errors
/// When the file cannot be written.
pub fn write_private(path: &std::path::Path, kubeconfig: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    // An older file keeps its mode through `open`.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(kubeconfig.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_keeps_the_cluster_and_swaps_the_user() {
        let admin = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: Q0E=\n- name: other\n  cluster: {server: https://x}\nusers:\n- name: admin\n  user: {token: secret-admin}\ncontexts:\n- name: ctx\n  context: {cluster: c, user: admin}\ncurrent-context: ctx\n";
        let out = kubeconfig_with_token(admin, "kai-scheduler", "t0k3n").expect("kubeconfig");
        let v: serde_yaml::Value = serde_yaml::from_str(&out).expect("yaml");
        assert_eq!(v["current-context"], "kai-scheduler");
        assert_eq!(v["clusters"][0]["cluster"]["server"], "https://127.0.0.1:6443");
        assert_eq!(v["clusters"][0]["cluster"]["certificate-authority-data"], "Q0E=");
        assert_eq!(v["users"][0]["user"]["token"], "t0k3n");
        assert_eq!(v["contexts"][0]["context"]["cluster"], "c");
        assert!(
            !out.contains("secret-admin"),
            "the admin credentials must not leak: {out}"
        );
        assert!(kubeconfig_with_token("kind: Config\n", "u", "t").is_err());
    }
}
