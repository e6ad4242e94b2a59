//! The braid program.
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = braid::cli::Cli::parse();
    match braid::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("braid: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
