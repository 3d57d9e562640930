//! Small readers over workload objects held as JSON (`DynamicObject`): typed access to the few spec
//! fields the rules need, without depending on third-party Rust types.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::Value;

/// `(group, kind)` of an object; the core group is `""`.
pub(crate) fn group_kind(obj: &DynamicObject) -> (&str, &str) {
    obj.types
        .as_ref()
        .map_or(("", ""), |t| (group_of(&t.api_version), t.kind.as_str()))
}

/// The group part of an `apiVersion` (`""` for `v1`).
pub(crate) fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The value at `path` under `value`.
pub(crate) fn at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

/// An integer at `path`; also accepts integers written as strings.
pub(crate) fn int_at(value: &Value, path: &[&str]) -> Option<i64> {
    match at(value, path)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A string at `path`.
pub(crate) fn str_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    at(value, path)?.as_str()
}

/// A boolean at `path`.
pub(crate) fn bool_at(value: &Value, path: &[&str]) -> Option<bool> {
    at(value, path)?.as_bool()
}

/// The string map at `path` (labels or annotations of a pod template).
pub(crate) fn string_map_at(value: &Value, path: &[&str]) -> BTreeMap<String, String> {
    at(value, path)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Saturating conversion for counts read from specs.
pub(crate) fn clamp_i32(n: i64) -> i32 {
    i32::try_from(n.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).unwrap_or(i32::MAX)
}
