//! The braid program.
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = braid::cli::Cli::parse_from(braid::lab::help_args(std::env::args_os().collect()));
    match braid::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if let Some(braid::cli::Exit(code)) = e.downcast_ref::<braid::cli::Exit>() {
                return std::process::ExitCode::from(*code);
            }
            eprintln!("braid: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
