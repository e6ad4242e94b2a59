//! The `[monitor]` table: the live dashboard, `/metrics` and the history file
//! (`docs/monitor.md`). Off unless `listen` is set (or `braid up --monitor ADDR`).
//!
//! ```toml
//! [monitor]
//! listen = "127.0.0.1:9190"           # a loopback address needs no token
//! token_file = "/etc/braid/monitor.token"   # required for any other address
//! state_dir = "/var/lib/braid"        # where the history file is kept
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{at, VResult, S};

/// Longest token file read.
const TOKEN_MAX: u64 = 4096;
/// Shortest token accepted (characters, after trimming).
pub const TOKEN_MIN: usize = 16;
/// Where the history file goes by default: systemd's `StateDirectory=braid`
/// (`$STATE_DIRECTORY`), else this.
pub const STATE_DIR_DEFAULT: &str = "/var/lib/braid";

/// A validated `[monitor]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorSettings {
    /// Where the HTTP listener binds (none: the monitor is off, unless `braid up
    /// --monitor ADDR` gives an address).
    pub listen: Option<SocketAddr>,
    /// The token a client must present (required for a non-loopback `listen`).
    pub token: Option<Token>,
    /// The token file it was read from (for messages).
    pub token_file: Option<PathBuf>,
    /// The directory of the history file (`<interface>.history`); `None`: no file.
    pub state_dir: Option<PathBuf>,
}

/// A secret token; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The token's bytes, for the constant-time comparison.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMonitor {
    listen: Option<S<String>>,
    token_file: Option<S<String>>,
    state_dir: Option<S<String>>,
    history: Option<S<bool>>,
}

/// Validate `[monitor]`; `base` is the config file's directory. Without `listen` nothing
/// listens (unless `braid up --monitor ADDR`).
pub(super) fn validate(raw: S<RawMonitor>, base: &Path) -> VResult<MonitorSettings> {
    let span = raw.span();
    let r = raw.into_inner();
    let token_file = r.token_file.as_ref().map(|t| base.join(t.get_ref()));
    let token = match (&r.token_file, &token_file) {
        (Some(s), Some(p)) => {
            Some(read_token(p).map_err(|e| at(s, format!("monitor.token_file: {e}")))?)
        }
        _ => None,
    };
    let state_dir = match (&r.history, &r.state_dir) {
        (Some(h), _) if !*h.get_ref() => None,
        (_, Some(d)) if d.get_ref().is_empty() => {
            return Err(at(d, "monitor.state_dir: must not be empty".into()))
        }
        (_, Some(d)) => Some(base.join(d.get_ref())),
        (_, None) => Some(default_state_dir()),
    };
    let listen = match &r.listen {
        Some(l) => {
            Some(parse_listen(l.get_ref()).map_err(|e| at(l, format!("monitor.listen: {e}")))?)
        }
        None => None,
    };
    let s = MonitorSettings {
        listen,
        token,
        token_file,
        state_dir,
    };
    check_exposure(&s).map_err(|e| (Some(span), format!("monitor.listen: {e}")))?;
    Ok(s)
}

/// The default history directory: `$STATE_DIRECTORY` (systemd's `StateDirectory=`; the
/// first of a colon-separated list), else [`STATE_DIR_DEFAULT`].
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|v| {
            v.to_str()
                .and_then(|s| s.split(':').next())
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(STATE_DIR_DEFAULT))
}

/// `ADDR:PORT` (`[ADDR]:PORT` for IPv6); `localhost:PORT` is 127.0.0.1.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s2 = s
        .strip_prefix("localhost:")
        .map_or_else(|| s.to_owned(), |p| format!("127.0.0.1:{p}"));
    s2.parse::<SocketAddr>()
        .map_err(|_| format!("{s:?} is not ADDR:PORT (such as 127.0.0.1:9190)"))
}

/// A listener on anything but loopback must have a token: the page shows the bond's
/// addresses and figures to whoever reaches it.
pub fn check_exposure(s: &MonitorSettings) -> Result<(), String> {
    match s.listen {
        Some(a) if !a.ip().is_loopback() && s.token.is_none() => Err(format!(
            "{a} is not a loopback address: set monitor.token_file (a file of at least {TOKEN_MIN} characters, mode 0600) so that clients must present the token, or listen on 127.0.0.1 and use an SSH tunnel"
        )),
        _ => Ok(()),
    }
}

/// Read a token file: a regular file that only its owner (root or braid's user) may
/// access, holding one token of at least [`TOKEN_MIN`] printable characters.
pub fn read_token(path: &Path) -> Result<Token, String> {
    let (file, meta) =
        crate::files::open_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::keys::check_secret_access(path, crate::keys::Access::of(&meta), "a monitor token file")?;
    let text = crate::files::read_limited(file, TOKEN_MAX)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let t = text.trim();
    if t.chars().count() < TOKEN_MIN || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{}: a token file holds one token of at least {TOKEN_MIN} characters without spaces (make one with `(umask 077; braid genkey > {})`)",
            path.display(),
            path.display()
        ));
    }
    Ok(Token(t.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("localhost:9190").unwrap(),
            "127.0.0.1:9190".parse().unwrap()
        );
        assert_eq!(parse_listen("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert_eq!(
            parse_listen("9190").unwrap_err(),
            "\"9190\" is not ADDR:PORT (such as 127.0.0.1:9190)"
        );
    }

    #[test]
    fn a_public_listener_needs_a_token() {
        let mut s = MonitorSettings {
            listen: Some("0.0.0.0:9190".parse().unwrap()),
            token: None,
            token_file: None,
            state_dir: None,
        };
        let e = check_exposure(&s).unwrap_err();
        assert!(e.contains("monitor.token_file"), "{e}");
        s.token = Some(Token("x".repeat(20)));
        assert!(check_exposure(&s).is_ok());
        s.token = None;
        s.listen = Some("[::1]:9190".parse().unwrap());
        assert!(check_exposure(&s).is_ok());
    }

    fn parse(monitor: &str) -> Result<crate::config::Config, String> {
        let text = format!(
            "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n[monitor]\n{monitor}"
        );
        crate::config::Config::parse(&text, "t.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn monitor_table() {
        let c = parse("listen = \"127.0.0.1:9190\"\nstate_dir = \"/tmp/x\"\n").unwrap();
        let m = c.monitor.unwrap();
        assert_eq!(m.listen, Some("127.0.0.1:9190".parse().unwrap()));
        assert_eq!(m.state_dir.as_deref(), Some(Path::new("/tmp/x")));
        assert!(m.token.is_none());
        let c = parse("listen = \"127.0.0.1:9190\"\nhistory = false\n").unwrap();
        assert_eq!(c.monitor.unwrap().state_dir, None);
        // No listen: checked, but off.
        assert_eq!(
            parse("history = false\n").unwrap().monitor.unwrap().listen,
            None
        );
        assert_eq!(
            parse("listen = \"0.0.0.0:9190\"\n").unwrap_err(),
            "t.toml:4:1: monitor.listen: 0.0.0.0:9190 is not a loopback address: set monitor.token_file (a file of at least 16 characters, mode 0600) so that clients must present the token, or listen on 127.0.0.1 and use an SSH tunnel"
        );
        assert_eq!(
            parse("listen = \"nowhere\"\n").unwrap_err(),
            "t.toml:5:10: monitor.listen: \"nowhere\" is not ADDR:PORT (such as 127.0.0.1:9190)"
        );
        let e = parse("port = 1\n").unwrap_err();
        assert!(e.contains("monitor.port: unknown key in [monitor]"), "{e}");
    }

    #[test]
    fn token_files_are_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("braid-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t");
        crate::files::write_private(&f, "short\n").unwrap();
        assert!(read_token(&f).unwrap_err().contains("at least 16"));
        crate::files::write_private(&f, "0123456789abcdef0123\n").unwrap();
        assert_eq!(read_token(&f).unwrap().as_bytes(), b"0123456789abcdef0123");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token(&f).unwrap_err().contains("mode 0644"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
