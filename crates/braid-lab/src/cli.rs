//! The lab's command line: `lab` and `demo`, as `braid lab` and `braid demo` (the usage
//! and help texts name `braid`, the program the user runs).
use clap::{Parser, Subcommand};

/// braid's lab: network namespaces joined by emulated paths, braid on both ends.
#[derive(Parser, Debug)]
#[command(name = "braid", bin_name = "braid", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The lab's subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run lab scenarios: two network namespaces joined by emulated paths (needs root).
    Lab(crate::LabArgs),
    /// Run the default lab scenario (needs root).
    Demo,
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Lab(args) => crate::main(args),
        Command::Demo => crate::demo(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_lab_arguments() {
        let c = Cli::try_parse_from(["braid", "lab", "a.toml", "b", "--duration", "5"]).unwrap();
        assert!(
            matches!(c.command, Command::Lab(ref a) if a.scenarios.len() == 2 && a.duration == Some(5))
        );
        let c = Cli::try_parse_from([
            "braid",
            "lab",
            "fault-matrix",
            "--cases",
            "3",
            "--seed",
            "9",
            "--reload",
            "on",
        ])
        .unwrap();
        assert!(
            matches!(c.command, Command::Lab(ref a) if a.cases == 3 && a.seed == Some(9) && a.reload == crate::matrix::ReloadMode::On)
        );
        let c = Cli::try_parse_from(["braid", "lab", "fault-matrix"]).unwrap();
        assert!(
            matches!(c.command, Command::Lab(ref a) if a.cases == 20 && a.seed.is_none() && a.reload == crate::matrix::ReloadMode::Auto)
        );
        assert!(matches!(
            Cli::try_parse_from(["braid", "demo"]).unwrap().command,
            Command::Demo
        ));
        assert!(Cli::try_parse_from(["braid", "demo", "extra"]).is_err());
    }
}
