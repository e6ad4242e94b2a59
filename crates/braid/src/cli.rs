//! The command line.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use crate::config::Config;
use crate::{classes, control, daemon, lab, status};

/// braid: join several links into one TUN interface.
///
/// Run `braid up --config FILE` on both hosts; manage the running bond with `status`,
/// `reload`, `enslave`, `emancipate` and `set` (through the daemon's control socket,
/// root-only).
#[derive(Parser, Debug)]
#[command(name = "braid", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--control PATH` or `--interface NAME`, shared by the client commands.
#[derive(clap::Args, Debug, Clone)]
pub struct ControlArg {
    /// control socket of the daemon [default: the only socket in /run/braid]
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// the daemon of this bond interface (its socket /run/braid/NAME.sock)
    #[arg(long, short = 'i', value_name = "NAME", conflicts_with = "control")]
    pub interface: Option<String>,
}

impl ControlArg {
    fn socket(&self) -> anyhow::Result<PathBuf> {
        match (&self.control, &self.interface) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(name)) => control::socket_of_interface(name),
            (None, None) => control::find_socket(),
        }
    }
}

/// `braid class ...`.
#[derive(Subcommand, Debug)]
pub enum ClassCommand {
    /// Each class's rate, ceil, mode, measured rate, lends, borrows, drops and backlog
    /// (like `tc -s class show`).
    Show {
        /// print the daemon's answer as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Change a class's settings without restarting the bond, e.g. `braid class change
    /// 1:10 rate=2mbit ceil=10mbit` (rate, ceil, burst, cburst, prio, quantum, limit).
    Change {
        /// class id (`1:10`)
        id: String,
        /// KEY=VALUE settings, in tc's units
        #[arg(required = true, value_name = "KEY=VALUE")]
        settings: Vec<String>,
        #[command(flatten)]
        control: ControlArg,
    },
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create the TUN interface and run the bond in the foreground (until SIGINT/SIGTERM;
    /// SIGHUP reloads the config file, as `braid reload`).
    Up {
        /// the config file (TOML, see docs/config.md)
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
        /// control socket to create [default: /run/braid/<interface>.sock]
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
        /// once the TUN, sockets and ttys are open, run as this user (keeping only the
        /// capabilities it still needs) [default: bond.user]
        #[arg(long, value_name = "NAME")]
        user: Option<String>,
        /// with --user: run with this group [default: bond.group, else the user's]
        #[arg(long, value_name = "NAME", requires = "user")]
        group: Option<String>,
        /// log more: debug lines too
        #[arg(long, short, action = clap::ArgAction::Count, conflicts_with = "quiet")]
        verbose: u8,
        /// log less: warnings and errors only (-qq: errors only)
        #[arg(long, short, action = clap::ArgAction::Count)]
        quiet: u8,
        /// serve the dashboard and /metrics on ADDR:PORT (as `[monitor] listen`; any
        /// address but loopback needs `[monitor] token_file`)
        #[arg(long, value_name = "ADDR:PORT")]
        monitor: Option<String>,
    },
    /// Check a config file, and what it names on this host (devices, addresses); exit 0
    /// if valid (warnings on stderr for what `up` would wait for).
    Check {
        /// the config file
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
    },
    /// Show each path's state, RTT, loss, capacity and traffic, and the bond's counters.
    Status {
        /// print the daemon's status as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Live figures per path and class in the terminal, redrawn every second (`q` quits).
    Top {
        /// read a monitor's /api/status (http://HOST:PORT) instead of the control socket
        #[arg(long, value_name = "URL")]
        monitor: Option<String>,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Add a path to the running bond.
    Enslave {
        /// path name (the same on both ends)
        name: String,
        /// local ADDR:PORT to bind ([ADDR]:PORT for IPv6)
        #[arg(long, value_name = "ADDR:PORT")]
        local: String,
        /// the peer's ADDR:PORT for this path
        #[arg(long, value_name = "ADDR:PORT")]
        remote: String,
        /// configured speed in bit/s, or a rate like 20mbit (EQL priority, weighted's weight)
        #[arg(long, value_name = "N", value_parser = crate::config::parse_bps)]
        bps: Option<u64>,
        /// bind the path's socket to this interface (SO_BINDTODEVICE)
        #[arg(long, value_name = "IFACE")]
        dev: Option<String>,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Remove a path from the running bond; its queued packets move to the others.
    Emancipate {
        /// path name
        name: String,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Change a path's settings at run time: `braid set p0 bps=20mbit` (or bps=20000000).
    Set {
        /// path name
        name: String,
        /// KEY=VALUE settings (only `bps` for now)
        #[arg(required = true, value_name = "KEY=VALUE")]
        settings: Vec<String>,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Re-read the daemon's config file and apply what changed (as SIGHUP does); prints
    /// each change. Exits 1, changing nothing, when the file has an error or changes what
    /// needs a restart (interface, address, mtu, keys).
    Reload {
        #[command(flatten)]
        control: ControlArg,
    },
    /// Stop a running bond (as SIGTERM does): it removes its interface, its routes and,
    /// for an Ethernet bond, puts the members' addresses back. Waits until it has gone.
    Down {
        #[command(flatten)]
        control: ControlArg,
    },
    /// The shaper's classes: `show` their live figures, `change` one at run time.
    #[command(subcommand)]
    Class(ClassCommand),
    /// Read a tc script (`tc qdisc/class/filter add ... htb/u32`) and print the
    /// equivalent `[shape]` TOML.
    TcImport {
        /// the tc script
        file: PathBuf,
    },
    /// Print a new random private key (base64, as `wg genkey`).
    Genkey,
    /// Read a private key on stdin and print its public key (as `wg pubkey`).
    Pubkey,
    /// Run lab scenarios: two network namespaces joined by emulated paths (needs root).
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Lab {
        /// scenarios and options, for the lab's program `braid-lab` (`braid lab --help`
        /// lists them)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run the default lab scenario (needs root).
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Demo {
        /// for the lab's program `braid-lab` (`braid demo --help`); hidden: `demo` takes
        /// none, as the lab's usage error says
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<OsString>,
    },
    /// Write the man pages and shell completions into DIR (scripts/package runs it).
    #[command(hide = true)]
    GenAssets {
        /// where to write man/ and completions/
        dir: PathBuf,
    },
}

/// Parse `KEY=VALUE` settings for `braid set` into a request.
pub fn set_request(name: &str, settings: &[String]) -> anyhow::Result<Value> {
    let mut bps = None;
    for s in settings {
        let Some((k, v)) = s.split_once('=') else {
            anyhow::bail!("{s:?}: expected KEY=VALUE, such as bps=20000000");
        };
        match k {
            "bps" => {
                bps = Some(crate::config::parse_bps(v).map_err(|_| {
                    anyhow::anyhow!("bps: {v:?} is not a speed (bit/s, or a rate like \"20mbit\")")
                })?)
            }
            _ => anyhow::bail!("unknown setting {k:?} (settable: bps)"),
        }
    }
    let Some(bps) = bps else {
        anyhow::bail!("nothing to set")
    };
    Ok(json!({"cmd": "set", "name": name, "bps": bps}))
}

/// A command's result that is not an error but a non-zero exit status (`braid status`
/// of a degraded bond): nothing more is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// Write to stdout; a closed pipe (`braid status | head`) is not an error.
fn print_out(s: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(s.as_bytes()).and_then(|()| o.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn load(config: &Path) -> anyhow::Result<Config> {
    Config::load(config).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Up {
            config,
            control,
            user,
            group,
            verbose,
            quiet,
            monitor,
        } => {
            crate::log::init(verbose, quiet);
            let loaded = load(&config)?;
            let mut cfg = loaded.clone();
            if let Some(addr) = monitor {
                cfg.monitor = Some(crate::monitor::cli_settings(
                    &addr,
                    loaded.monitor.as_ref(),
                )?);
            }
            if let Some(user) = user {
                for n in std::iter::once(&user).chain(&group) {
                    crate::privileges::check_account_name(n).map_err(|e| anyhow::anyhow!("{e}"))?;
                }
                cfg.bond.run_as = Some(crate::privileges::RunAs { user, group });
            }
            daemon::run(&cfg, (&config, &loaded), control.as_deref())
        }
        Command::Check { config } => {
            let cfg = load(&config)?;
            // Then the host: what would make `up` loop or wait here.
            let findings = crate::config::host::check(&cfg, &crate::config::host::ThisHost);
            for f in &findings {
                let level = if f.error { "" } else { "warning: " };
                eprintln!("braid: {level}{}: {}", config.display(), f.message);
            }
            if findings.iter().any(|f| f.error) {
                return Err(Exit(1).into());
            }
            let what = match &cfg.ether {
                Some(e) => format!(
                    "Ethernet bond, scheduler {}, {} member(s): {}",
                    e.scheduler.name(),
                    e.members.len(),
                    e.members
                        .iter()
                        .map(|m| m.dev.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => format!(
                    "{}scheduler {}, {} path(s), encryption {}",
                    match cfg.bond.layer {
                        crate::config::Layer::Ethernet => "Ethernet frames, ",
                        crate::config::Layer::Ip => "",
                    },
                    cfg.bond.core.scheduler.name(),
                    cfg.paths.len(),
                    cfg.bond.encryption.name()
                ),
            };
            print_out(&format!(
                "{}: ok ({} {}, {what})\n",
                config.display(),
                cfg.bond.interface,
                cfg.bond.address,
            ))
        }
        Command::Status { json, control } => {
            let resp = control::request(&control.socket()?, &json!({"cmd": "status"}))?;
            let mut out = if json {
                serde_json::to_string_pretty(&resp)?
            } else {
                status::render(&resp)
            };
            if !out.ends_with('\n') {
                out.push('\n');
            }
            print_out(&out)?;
            match status::health(&resp).exit_code() {
                0 => Ok(()),
                code => Err(Exit(code).into()),
            }
        }
        Command::Top { monitor, control } => {
            let source = match monitor {
                Some(url) => crate::top::Source::monitor(&url)?,
                None => crate::top::Source::Control(control.socket()?),
            };
            crate::top::run(&source)
        }
        Command::Enslave {
            name,
            local,
            remote,
            bps,
            dev,
            control,
        } => {
            crate::config::check_endpoints(&local, &remote).map_err(|e| anyhow::anyhow!("{e}"))?;
            let req = json!({"cmd": "enslave", "name": name, "local": local, "remote": remote, "bps": bps, "dev": dev});
            let resp = control::request(&control.socket()?, &req)?;
            if let Some(w) = resp.get("warning").and_then(Value::as_str) {
                eprintln!("braid: warning: {w}");
            }
            print_out(&format!("enslaved {name}\n"))
        }
        Command::Emancipate { name, control } => {
            control::request(
                &control.socket()?,
                &json!({"cmd": "emancipate", "name": name}),
            )?;
            print_out(&format!("emancipated {name}\n"))
        }
        Command::Set {
            name,
            settings,
            control,
        } => {
            let req = set_request(&name, &settings)?;
            control::request(&control.socket()?, &req)?;
            Ok(())
        }
        Command::Reload { control } => {
            let resp = control::request(&control.socket()?, &json!({"cmd": "reload"}))?;
            let changes: Vec<&str> = resp
                .get("changes")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if changes.is_empty() {
                print_out("reloaded: no changes\n")
            } else {
                print_out(&format!("reloaded:\n  {}\n", changes.join("\n  ")))
            }
        }
        Command::Down { control } => {
            let socket = control.socket()?;
            control::request(&socket, &json!({"cmd": "down"}))?;
            if control::wait_gone(&socket, std::time::Duration::from_secs(10)) {
                print_out("down\n")
            } else {
                anyhow::bail!(
                    "the daemon took the request but is still running after 10 s (control socket {})",
                    socket.display()
                )
            }
        }
        Command::Class(ClassCommand::Show { json, control }) => {
            let resp = control::request(&control.socket()?, &json!({"cmd": "class-show"}))?;
            let out = if json {
                serde_json::to_string_pretty(&resp)? + "\n"
            } else {
                classes::render(&resp)
            };
            print_out(&out)
        }
        Command::Class(ClassCommand::Change {
            id,
            settings,
            control,
        }) => {
            let req = classes::change_request(&id, &settings)?;
            let resp = control::request(&control.socket()?, &req)?;
            for w in resp
                .get("warnings")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
            {
                eprintln!("braid: warning: {}", w.as_str().unwrap_or_default());
            }
            print_out(&format!("changed {id}\n"))
        }
        Command::TcImport { file } => {
            let text = crate::files::read_text(&file, crate::files::TEXT_MAX)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
            let script = crate::config::tc::parse_script(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            for n in &script.notes {
                eprintln!("braid: note: {n}");
            }
            print_out(&crate::config::tc::to_toml(&script.spec))
        }
        Command::Genkey => {
            if let Some(w) = crate::keys::genkey_output_warning() {
                eprintln!("braid: warning: {w}");
            }
            print_out(&(crate::keys::genkey() + "\n"))
        }
        Command::Pubkey => print_out(&(crate::keys::pubkey_from_stdin()? + "\n")),
        Command::Lab { args } => lab::exec("lab", &args),
        Command::Demo { args } => lab::exec("demo", &args),
        Command::GenAssets { dir } => {
            let files = crate::assets::write_all(&dir)
                .map_err(|e| anyhow::anyhow!("cannot write to {}: {e}", dir.display()))?;
            print_out(&format!("{} files in {}\n", files.len(), dir.display()))
        }
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
    fn parses_commands() {
        let c = Cli::try_parse_from(["braid", "up", "--config", "x.toml", "--control", "/tmp/s"])
            .unwrap();
        assert!(
            matches!(c.command, Command::Up { ref config, control: Some(_), user: None, .. } if config == Path::new("x.toml"))
        );
        let c = Cli::try_parse_from([
            "braid",
            "enslave",
            "p3",
            "--local",
            "1.2.3.4:5",
            "--remote",
            "1.2.3.5:5",
            "--bps",
            "9",
        ])
        .unwrap();
        assert!(matches!(
            c.command,
            Command::Enslave {
                bps: Some(9),
                dev: None,
                ..
            }
        ));
        assert!(Cli::try_parse_from(["braid", "enslave", "p3", "--local", "1.2.3.4:5"]).is_err());
        assert!(Cli::try_parse_from(["braid", "set", "p3"]).is_err());
        let c = Cli::try_parse_from(["braid", "status", "--interface", "braid1"]).unwrap();
        assert!(
            matches!(c.command, Command::Status { ref control, .. } if control.interface.as_deref() == Some("braid1"))
        );
        assert!(Cli::try_parse_from(["braid", "status", "-i", "b0", "--control", "/x"]).is_err());
        // The lab's arguments go to the lab's program as they are, --help included.
        let c =
            Cli::try_parse_from(["braid", "lab", "a.toml", "--duration", "5", "--help"]).unwrap();
        assert!(
            matches!(c.command, Command::Lab { ref args } if args == &["a.toml", "--duration", "5", "--help"])
        );
        let c = Cli::try_parse_from(["braid", "demo", "-h"]).unwrap();
        assert!(matches!(c.command, Command::Demo { ref args } if args == &["-h"]));
    }

    #[test]
    fn set_settings() {
        assert_eq!(
            set_request("p0", &["bps=20".into()]).unwrap(),
            json!({"cmd":"set","name":"p0","bps":20})
        );
        assert_eq!(
            set_request("p0", &["bps=20mbit".into()]).unwrap(),
            json!({"cmd":"set","name":"p0","bps":20_000_000})
        );
        assert_eq!(
            set_request("p0", &["bps".into()]).unwrap_err().to_string(),
            "\"bps\": expected KEY=VALUE, such as bps=20000000"
        );
        assert_eq!(
            set_request("p0", &["bps=-1".into()])
                .unwrap_err()
                .to_string(),
            "bps: \"-1\" is not a speed (bit/s, or a rate like \"20mbit\")"
        );
        assert_eq!(
            set_request("p0", &["prio=1".into()])
                .unwrap_err()
                .to_string(),
            "unknown setting \"prio\" (settable: bps)"
        );
    }
}
