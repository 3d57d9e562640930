//! `kai`: explains the gang scheduler's decisions (see the `kai_cli` library).

// `kai sim` builds and drops small collections by the million per replay; glibc's allocator spent a
// sixth of a whole-trace replay in malloc and free (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    kai_cli::app::main()
}
