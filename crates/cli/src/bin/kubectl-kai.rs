//! `kubectl-kai`: the same program as `kai`, named so that `kubectl kai ...` runs it as a plugin.

fn main() -> std::process::ExitCode {
    kai_cli::app::main()
}
