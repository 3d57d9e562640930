//! Server-side apply of YAML documents (typed or dynamic), multi-document files included.
//!
//! Owns: splitting YAML streams, resolving each document's kind through discovery, placing namespaced
//! objects, and applying with a named field manager. Must not: guess resource plurals or scopes.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Field manager of objects the tests and `cargo xtask` apply.
pub const FIELD_MANAGER: &str = "kai-dev";

/// Splits a YAML stream into documents, skipping empty ones (comments only, `---` alone).
///
/// # Errors
/// When a document is not valid YAML.
pub fn split_documents(yaml: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut documents = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let value = <serde_json::Value as serde::Deserialize>::deserialize(document)
            .with_context(|| format!("YAML document {} is invalid", index + 1))?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// `apiVersion` + `kind` of a document.
///
/// # Errors
/// When either is missing.
pub fn gvk_of(document: &serde_json::Value) -> anyhow::Result<GroupVersionKind> {
    let api_version = document.get("apiVersion").and_then(serde_json::Value::as_str);
    let kind = document.get("kind").and_then(serde_json::Value::as_str);
    let (Some(api_version), Some(kind)) = (api_version, kind) else {
        bail!("document has no apiVersion or kind: {}", short(document));
    };
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Ok(GroupVersionKind::gvk(group, version, kind))
}

fn short(document: &serde_json::Value) -> String {
    let text = document.to_string();
    if text.len() > 200 {
        format!("{}...", &text[..text.floor_char_boundary(200)])
    } else {
        text
    }
}

/// Where namespaced documents go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement<'a> {
    /// Keep the namespace the document names (an error for namespaced documents that name none).
    AsWritten,
    /// Put every namespaced document into this namespace, replacing the one it names.
    Into(&'a str),
    /// Use this namespace for namespaced documents that name none.
    DefaultTo(&'a str),
}

/// Applies documents with discovery cached per kind.
pub struct Applier {
    client: Client,
    params: PatchParams,
    kinds: HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>,
}

impl Applier {
    /// An applier with field manager [`FIELD_MANAGER`], forcing ownership of conflicting fields.
    #[must_use]
    pub fn new(client: Client) -> Self {
        Self::with_field_manager(client, FIELD_MANAGER)
    }

    /// An applier with the given field manager, forcing ownership of conflicting fields.
    #[must_use]
    pub fn with_field_manager(client: Client, field_manager: &str) -> Self {
        Self {
            client,
            params: PatchParams::apply(field_manager).force(),
            kinds: HashMap::new(),
        }
    }

    /// Resolves a kind through discovery (cached).
    ///
    /// # Errors
    /// When the server does not serve the kind.
    pub async fn resolve(
        &mut self,
        gvk: &GroupVersionKind,
    ) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
        if let Some(found) = self.kinds.get(gvk) {
            return Ok(found.clone());
        }
        let found = kube::discovery::pinned_kind(&self.client, gvk)
            .await
            .with_context(|| {
                format!(
                    "the server does not serve {}/{} {} (is its CRD installed?)",
                    gvk.group, gvk.version, gvk.kind
                )
            })?;
        self.kinds.insert(gvk.clone(), found.clone());
        Ok(found)
    }

    /// Applies every document of a YAML stream, in order.
    ///
    /// # Errors
    /// On the first document the server rejects; the error names it.
    pub async fn apply_yaml(
        &mut self,
        yaml: &str,
        placement: Placement<'_>,
    ) -> anyhow::Result<Vec<DynamicObject>> {
        let mut applied = Vec::new();
        for document in split_documents(yaml)? {
            applied.push(self.apply_value(document, placement).await?);
        }
        Ok(applied)
    }

    /// Applies every document of a YAML file.
    ///
    /// # Errors
    /// When the file cannot be read or a document is rejected.
    pub async fn apply_file(
        &mut self,
        path: &Path,
        placement: Placement<'_>,
    ) -> anyhow::Result<Vec<DynamicObject>> {
        let yaml = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        self.apply_yaml(&yaml, placement)
            .await
            .with_context(|| format!("applying {}", path.display()))
    }

    /// Applies one document.
    ///
    /// # Errors
    /// When the kind is unknown, a namespaced document has no namespace, or the server rejects it.
    pub async fn apply_value(
        &mut self,
        mut document: serde_json::Value,
        placement: Placement<'_>,
    ) -> anyhow::Result<DynamicObject> {
        let gvk = gvk_of(&document)?;
        let (resource, capabilities) = self.resolve(&gvk).await?;
        let name = document
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("{} without metadata.name", gvk.kind))?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
            Scope::Namespaced => {
                let written = document
                    .pointer("/metadata/namespace")
                    .and_then(serde_json::Value::as_str);
                let namespace = match (placement, written) {
                    (Placement::Into(ns), _) | (Placement::DefaultTo(ns), None) => ns.to_owned(),
                    (_, Some(ns)) => ns.to_owned(),
                    (Placement::AsWritten, None) => {
                        bail!("{} {name} is namespaced but names no namespace", gvk.kind)
                    }
                };
                if let Some(metadata) = document
                    .get_mut("metadata")
                    .and_then(serde_json::Value::as_object_mut)
                {
                    metadata.insert("namespace".into(), namespace.clone().into());
                }
                Api::namespaced_with(self.client.clone(), &namespace, &resource)
            }
        };
        quantities_as_strings(&mut document);
        api.patch(&name, &self.params, &Patch::Apply(&document))
            .await
            .with_context(|| format!("applying {} {name}", gvk.kind))
    }
}

/// Writes numeric resource quantities (`nvidia.com/gpu: 2`) as strings. Users' manifests have them as numbers
/// and `kubectl apply` accepts that, but the typed server-side apply of Kubernetes before 1.21 rejects a
/// number where a quantity is due ("expected string").
fn quantities_as_strings(value: &mut serde_json::Value) {
    const QUANTITY_MAPS: [&str; 5] = ["limits", "requests", "capacity", "allocatable", "hard"];
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if QUANTITY_MAPS.contains(&key.as_str())
                    && let serde_json::Value::Object(quantities) = child
                {
                    for quantity in quantities.values_mut() {
                        if let serde_json::Value::Number(n) = quantity {
                            *quantity = serde_json::Value::String(n.to_string());
                        }
                    }
                } else {
                    quantities_as_strings(child);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(quantities_as_strings),
        _ => {}
    }
}

/// Server-side applies a typed object with field manager [`FIELD_MANAGER`] (namespace from its metadata).
///
/// # Errors
/// When the server rejects it.
pub async fn apply_typed<K>(client: &Client, object: &K) -> anyhow::Result<K>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
    K::Scope: ScopeOf,
{
    let name = object.name_any();
    let api: Api<K> = K::Scope::api(client.clone(), object.namespace().as_deref());
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying {} {name}", K::kind(&())))
}

/// Picks `Api::all` or `Api::namespaced` from a resource's scope type.
pub trait ScopeOf {
    /// The API for objects of this scope.
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = Self>;
}

impl ScopeOf for k8s_openapi::ClusterResourceScope {
    fn api<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = Self>,
    {
        Api::all(client)
    }
}

impl ScopeOf for k8s_openapi::NamespaceResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = Self>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::default_namespaced(client),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_quantities_become_strings_and_nothing_else_changes() {
        let mut doc = serde_json::json!({
            "spec": { "replicas": 2, "template": { "spec": { "containers": [{
                "resources": { "limits": { "nvidia.com/gpu": 2, "cpu": "500m" }, "requests": { "memory": 1.5 } },
                "ports": [{ "containerPort": 80 }] }] } } },
        });
        quantities_as_strings(&mut doc);
        assert_eq!(
            doc,
            serde_json::json!({
                "spec": { "replicas": 2, "template": { "spec": { "containers": [{
                    "resources": { "limits": { "nvidia.com/gpu": "2", "cpu": "500m" }, "requests": { "memory": "1.5" } },
                    "ports": [{ "containerPort": 80 }] }] } } },
            })
        );
    }

    #[test]
    fn splits_multi_document_streams_and_skips_empty_documents() {
        let yaml = "# header only\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n\
                    apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\n";
        let documents = split_documents(yaml).expect("valid YAML");
        assert_eq!(documents.len(), 2);
        assert_eq!(
            gvk_of(&documents[0]).expect("gvk"),
            GroupVersionKind::gvk("", "v1", "ConfigMap")
        );
        assert_eq!(
            gvk_of(&documents[1]).expect("gvk"),
            GroupVersionKind::gvk("scheduling.run.ai", "v2", "Queue")
        );
    }

    #[test]
    fn reports_documents_without_a_kind() {
        let documents = split_documents("metadata: {name: a}\n").expect("valid YAML");
        let err = gvk_of(&documents[0]).expect_err("no kind");
        assert!(err.to_string().contains("no apiVersion or kind"), "{err}");
    }

    #[test]
    fn seed_fixtures_parse() {
        let dir = crate::paths::fixtures_dir().join("seeds");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).expect("seeds dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let yaml = std::fs::read_to_string(&path).expect("read");
                for document in split_documents(&yaml).expect("valid YAML") {
                    gvk_of(&document).expect("every seed document has a kind");
                    count += 1;
                }
            }
        }
        assert!(count >= 10, "expected the seed documents, found {count}");
    }
}
