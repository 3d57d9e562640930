//! `cargo xtask nodes create | delete | agent`: fake nodes on the cluster the tests use, through the same
//! code as the tests (`e2e::nodes`, `e2e::NodeAgent`).

use anyhow::{Context as _, bail};
use e2e::FakeNodes;

/// Owner label value of nodes made by `cargo xtask nodes` with this prefix.
pub(crate) fn owner(prefix: &str) -> anyhow::Result<String> {
    let owner = format!("xtask-{prefix}");
    let valid = owner.len() <= 63
        && owner
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && owner.chars().last().is_some_and(|c| c.is_ascii_alphanumeric());
    if !valid {
        bail!("prefix {prefix:?} must be a short DNS-style name (letters, digits, '-', '.')");
    }
    Ok(owner)
}

/// `key=value`.
pub(crate) fn parse_label(text: &str) -> anyhow::Result<(String, String)> {
    let (key, value) = text
        .split_once('=')
        .with_context(|| format!("label {text:?} is not key=value"))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// `key=value:Effect` or `key:Effect`.
pub(crate) fn parse_taint(text: &str) -> anyhow::Result<(String, String, String)> {
    let (rest, effect) = text
        .rsplit_once(':')
        .with_context(|| format!("taint {text:?} is not key[=value]:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        bail!("taint effect {effect:?} must be NoSchedule, PreferNoSchedule or NoExecute");
    }
    let (key, value) = rest.split_once('=').unwrap_or((rest, ""));
    Ok((key.to_owned(), value.to_owned(), effect.to_owned()))
}

/// Options of `nodes create`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CreateArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Name prefix: nodes are <prefix>-0 .. <prefix>-<count-1>.
    #[arg(long)]
    prefix: String,
    /// CPU capacity.
    #[arg(long, default_value = "64")]
    cpu: String,
    /// Memory capacity.
    #[arg(long, default_value = "256Gi")]
    memory: String,
    /// Whole GPUs (nvidia.com/gpu).
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Pod slots.
    #[arg(long, default_value_t = 110)]
    pods: u32,
    /// Extra label, key=value (repeatable).
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Taint, key=value:Effect (repeatable).
    #[arg(long = "taint")]
    taints: Vec<String>,
}

pub(crate) fn spec(args: &CreateArgs) -> anyhow::Result<FakeNodes> {
    let mut nodes = FakeNodes::new(args.prefix.clone())
        .owned_by(owner(&args.prefix)?)
        .count(args.count)
        .cpu(&args.cpu)
        .memory(&args.memory)
        .gpus(args.gpus)
        .pods(args.pods);
    for label in &args.labels {
        let (key, value) = parse_label(label)?;
        nodes = nodes.label(&key, &value);
    }
    for taint in &args.taints {
        let (key, value, effect) = parse_taint(taint)?;
        nodes = nodes.taint(&key, &value, &effect);
    }
    Ok(nodes)
}

pub(crate) async fn create(args: &CreateArgs) -> anyhow::Result<()> {
    let nodes = spec(args)?;
    let client = crate::cluster::connect().await?;
    let names = e2e::nodes::create(&client, &nodes).await?;
    println!("created {} fake nodes: {}", names.len(), names.join(" "));
    println!("selector: {}", nodes.owner_selector());
    println!(
        "run their kubelet with: cargo xtask nodes agent --prefix {}",
        args.prefix
    );
    Ok(())
}

pub(crate) async fn delete(prefix: &str) -> anyhow::Result<()> {
    let client = crate::cluster::connect().await?;
    let count = e2e::nodes::delete_by_prefix(&client, prefix).await?;
    println!("deleted {count} fake nodes starting with {prefix:?}");
    Ok(())
}

pub(crate) async fn agent(prefix: &str) -> anyhow::Result<()> {
    let client = crate::cluster::connect().await?;
    let selector = e2e::nodes::owner_selector(&owner(prefix)?);
    let agent = e2e::NodeAgent::start(client, &selector);
    println!("node agent running for nodes {selector}; Ctrl-C stops it");
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    agent.stop().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_and_taints() {
        assert_eq!(parse_label("a=b").expect("label"), ("a".into(), "b".into()));
        assert!(parse_label("ab").is_err());
        assert_eq!(
            parse_taint("k=v:NoSchedule").expect("taint"),
            ("k".into(), "v".into(), "NoSchedule".into())
        );
        assert_eq!(
            parse_taint("k:NoExecute").expect("taint"),
            ("k".into(), String::new(), "NoExecute".into())
        );
        assert!(parse_taint("k=v:Sometimes").is_err());
        assert!(owner("gpu").is_ok());
        assert!(owner("bad/prefix").is_err());
    }
}
