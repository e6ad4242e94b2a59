//! Reads tc scripts (`tc qdisc|class|filter add ... htb|u32 ...`) into a [`ShapeSpec`].
//!
//! STUB: contract only.

use super::spec::ShapeSpec;

/// A reader error, naming the 1-based line of the script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcError {
    /// Line of the script (after joining `\` continuations, the first line of the command).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for TcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TcError {}

/// A successfully read script: the spec and notes on what was accepted but ignored
/// (`dev eth1`, `qdisc del`, ...), each with its line.
#[derive(Clone, Debug, PartialEq)]
pub struct TcScript {
    /// The shaper it describes.
    pub spec: ShapeSpec,
    /// Notes, e.g. "line 2: `tc qdisc del` ignored: braid starts with an empty shaper".
    pub notes: Vec<String>,
}

/// Reads a whole script.
pub fn parse_script(text: &str) -> Result<TcScript, TcError> {
    let _ = text;
    Err(TcError {
        line: 0,
        message: "not implemented".into(),
    })
}

/// The spec as braid's native TOML (`[shape]`, `[[shape.class]]`, `[[shape.filter]]`),
/// for `braid tc-import`.
pub fn to_toml(spec: &ShapeSpec) -> String {
    let _ = spec;
    String::new()
}
