//! The braid program: CLI, config file, TUN, UDP paths, control socket and the daemon's
//! event loop. The lab is a crate of its own (`crates/braid-lab`), which uses the config,
//! file, status, tty and poll helpers from here.
//!
//! | module | what it is |
//! | --- | --- |
//! | [`assets`] | man pages and shell completions, generated from the CLI and `docs/config.md` |
//! | [`cli`] | the command line (clap) and what each subcommand does |
//! | [`classes`] | `braid class show/change`: the shaper's classes over the control socket |
//! | [`config`] | the TOML config: parsing, validation, mapping to the core |
//! | [`daemon`] | `braid up`: the single-threaded event loop around [`braid_core::Endpoint`] |
//! | [`files`] | bounded reads of configs, key files and scripts |
//! | [`keys`] | key files, `braid genkey` / `braid pubkey` |
//! | [`log`] | the daemon's log lines: levels, the journal's `<N>` prefix, repeats |
//! | [`monitor`] | the dashboard, `/metrics`, live events and history (`[monitor]`) |
//! | [`privileges`] | `braid up --user`: what is kept after start, and `status`'s account |
//! | [`seal`] | the sealing a config makes ([`seal::seal_config`]) and its status object |
//! | [`control`] | the control socket: JSON-lines protocol, server and client |
//! | [`status`] | `braid status`'s table |
//! | [`top`] | `braid top`: the live figures in the terminal |
//! | [`sys`] | Linux glue: TUN, UDP sockets, signals, poll |
//! | [`lab`] | `braid lab` / `braid demo`: runs the lab's program, `braid-lab` |

pub mod assets;
pub mod classes;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod files;
pub mod keys;
pub mod lab;
pub mod log;
pub mod monitor;
pub mod privileges;
pub mod seal;
pub mod status;
pub mod sys;
pub mod top;
