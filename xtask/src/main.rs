// deploy: `cargo xtask helm ...` is dispatched here until the clap task list (branch infra) lands.
mod helm;

use clap::Parser as _;

/// `cargo xtask helm <task>`.
#[derive(Debug, clap::Parser)]
#[command(name = "cargo xtask helm")]
struct HelmCli {
    #[command(subcommand)]
    task: helm::HelmTask,
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("helm") {
        return helm::run(HelmCli::parse_from(args).task);
    }
    for f in api::crds() {
        println!("# {}\n{}", f.path, serde_yaml::to_string(&f.crd)?);
    }
    Ok(())
}
