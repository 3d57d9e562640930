//! `kai`: explains the gang scheduler's decisions (see the `kai_cli` library).

fn main() -> std::process::ExitCode {
    kai_cli::app::main()
}
