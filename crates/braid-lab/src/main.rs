//! `braid-lab`: the lab's program. The user runs it as `braid lab ...` and `braid demo`
//! (the `braid` program runs this one, as cargo runs `cargo-NAME`); `braid-lab lab ...`
//! and `braid-lab demo` do the same directly.
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = braid_lab::cli::Cli::parse();
    match braid_lab::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("braid: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
