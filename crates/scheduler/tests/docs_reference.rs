//! The user reference in `docs/` names everything the scheduler accepts and exports:
//! `docs/configuration.md` every action, plugin and plugin argument `config.rs` accepts, and
//! `docs/metrics.md` every metric the scheduler registers. The names come from the code itself (serde's
//! lists of accepted names, the encoded registry), so a new one fails this test until it is documented.

use std::collections::BTreeSet;
use std::path::PathBuf;

use kai_scheduler::apply::ApplyMetrics;
use kai_scheduler::metrics::CycleMetrics;
use prometheus_client::registry::Registry;
use scheduler_core::config::Config;

fn doc(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The names serde lists as accepted in the error for an unknown one (``expected one of `a`, `b` ``).
fn accepted_names(yaml: &str) -> BTreeSet<String> {
    let message = Config::from_yaml(yaml)
        .expect_err("an unknown name is refused")
        .to_string();
    let (_, expected) = message
        .split_once("expected")
        .unwrap_or_else(|| panic!("no list of accepted names in {message:?}"));
    let names: BTreeSet<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!names.is_empty(), "no names in {message:?}");
    names
}

/// Names as written in the docs: in backticks.
fn missing(doc_text: &str, names: impl IntoIterator<Item = String>) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| !doc_text.contains(&format!("`{n}`")))
        .collect()
}

#[test]
fn configuration_doc_names_every_action_plugin_and_argument() {
    let text = doc("configuration.md");
    let actions = accepted_names("actions: [no-such-action]");
    assert!(actions.contains("allocate"), "{actions:?}");
    let plugins = accepted_names("plugins: {no-such-plugin: {}}");
    assert!(plugins.contains("gpusharing"), "{plugins:?}");

    let mut absent = missing(&text, actions.iter().cloned());
    absent.extend(missing(&text, plugins.iter().cloned()));
    for plugin in &plugins {
        let arguments = accepted_names(&format!("plugins: {{{plugin}: {{noSuchArgument: 1}}}}"));
        absent.extend(
            missing(&text, arguments)
                .into_iter()
                .map(|a| format!("{plugin}.{a}")),
        );
    }
    // The default configuration as the scheduler writes it: every argument with a default.
    let defaults = serde_yaml::to_value(Config::default()).expect("the default configuration serializes");
    let plugin_map = defaults["plugins"].as_mapping().expect("plugins is a map");
    for (plugin, arguments) in plugin_map {
        let plugin = plugin.as_str().expect("plugin names are strings");
        for argument in arguments
            .as_mapping()
            .expect("a plugin's arguments are a map")
            .keys()
        {
            let argument = argument.as_str().expect("argument names are strings");
            if !text.contains(&format!("`{argument}`")) {
                absent.push(format!("{plugin}.{argument}"));
            }
        }
    }
    for strategy in accepted_names("plugins: {nodeplacement: {gpu: no-such-strategy}}") {
        if !text.contains(&format!("`{strategy}`")) {
            absent.push(format!("placement strategy {strategy}"));
        }
    }
    for (section, yaml) in [
        ("usageDBConfig", "usageDBConfig: {noSuchKey: 1}"),
        (
            "usageDBConfig.usageParams",
            "usageDBConfig: {clientType: scheduler, usageParams: {noSuchKey: 1}}",
        ),
    ] {
        absent.extend(
            missing(&text, accepted_names(yaml))
                .into_iter()
                .map(|k| format!("{section}.{k}")),
        );
    }
    let absent: BTreeSet<String> = absent.into_iter().collect();
    assert!(
        absent.is_empty(),
        "docs/configuration.md does not name (in backticks): {absent:?}"
    );
}

/// The registry the scheduler serves (`kai_` for KAI's queue metrics, `kai_scheduler_` for the rest).
fn registry() -> Registry {
    kai_scheduler::metrics::registry(&CycleMetrics::default(), &ApplyMetrics::default())
}

/// Every registered metric's name with the prefix, and its type where the text encoder shows it. The
/// encoder leaves out a labelled family until it has a child, so the names come from the registry's
/// descriptors (its `Debug` form) and the types from the encoded text.
fn registered_metrics() -> Vec<(String, Option<String>)> {
    let registry = registry();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("the registry encodes");
    let types: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    kai_scheduler::metrics::registered_names(&registry)
        .into_iter()
        .map(|name| {
            let kind = types
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, k)| (*k).to_owned());
            (name, kind)
        })
        .collect()
}

/// The documented row of a metric: counters are scraped with the suffix `_total`.
fn row<'a>(text: &'a str, name: &str, kind: Option<&str>) -> Option<&'a str> {
    let candidates = match kind {
        Some("counter") => vec![format!("`{name}_total`")],
        Some(_) => vec![format!("`{name}`")],
        None => vec![format!("`{name}`"), format!("`{name}_total`")],
    };
    text.lines()
        .find(|l| l.starts_with('|') && candidates.iter().any(|c| l.contains(c.as_str())))
}

#[test]
fn metrics_doc_names_every_registered_metric_with_its_type() {
    let text = doc("metrics.md");
    let metrics = registered_metrics();
    assert!(metrics.len() >= 14, "{metrics:?}");
    let mut problems = Vec::new();
    for (name, kind) in &metrics {
        match row(&text, name, kind.as_deref()) {
            None => problems.push(format!("{name} is missing")),
            Some(line) => {
                let named_type = match kind {
                    Some(k) => line.contains(&format!("| {k} |")),
                    None => ["counter", "gauge", "histogram"]
                        .iter()
                        .any(|k| line.contains(&format!("| {k} |"))),
                };
                if !named_type {
                    problems.push(format!("{name}: its row does not name its type"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "docs/metrics.md: {problems:?}");
}
