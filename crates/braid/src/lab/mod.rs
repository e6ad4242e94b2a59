//! `braid lab` and `braid demo`. PLACEHOLDER: the lab is being written in another branch;
//! these names are the contract the CLI calls.
use std::path::PathBuf;

/// Arguments of `braid lab`.
#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    /// scenario files or names of built-in scenarios
    pub scenarios: Vec<String>,
    /// list the built-in scenarios and exit
    #[arg(long)]
    pub list: bool,
    /// override each scenario's duration, seconds
    #[arg(long)]
    pub duration: Option<u64>,
    /// also write the results as JSON to this file
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Run `braid lab`.
pub fn main(_args: LabArgs) -> anyhow::Result<()> {
    anyhow::bail!("braid lab: not built yet")
}

/// Run `braid demo`: the default lab scenario.
pub fn demo() -> anyhow::Result<()> {
    anyhow::bail!("braid demo: not built yet")
}
