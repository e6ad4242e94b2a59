//! Commands the daemon runs at start and stop: `post_up`/`pre_down` hooks (`sh -c`) and
//! `ip`. Each runs in a process group of its own, bounded in time: past its time the group
//! is killed and the command counts as failed. Only at start and stop, never in the loop.
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use braid_core::Instant;

use crate::log::dlog;

/// How long one hook may run.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one `ip` command may run.
pub const IP_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a command failed, in words for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError(pub String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// What a command that succeeded printed.
#[derive(Debug, Default)]
pub struct Printed {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Run `cmd` (described as `what`) for at most `timeout`; what it printed on success. Its
/// stderr is quoted (last line) when it fails.
#[expect(
    clippy::disallowed_methods,
    reason = "a command's deadline, at start or stop, outside the loop and its clock"
)]
pub fn run(what: &str, cmd: &mut Command, timeout: Duration) -> Result<Printed, CommandError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| CommandError(format!("{what}: cannot start: {e}")))?;
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let start = std::time::Instant::now();
    let status: ExitStatus = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                // Our child's group (process_group(0): its pid), then the child itself.
                if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                    // SAFETY: kill has no memory preconditions; the group is the one our
                    // unreaped child leads.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(CommandError(format!(
                    "{what}: did not finish within {} s and was killed",
                    timeout.as_secs_f64()
                )));
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        return Ok(Printed { stdout, stderr });
    }
    let how = match status.code() {
        Some(c) => format!("exited with status {c}"),
        None => "was killed by a signal".to_string(),
    };
    let said = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!(": {}", l.trim()))
        .unwrap_or_default();
    Err(CommandError(format!("{what}: {how}{said}")))
}

fn reader<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut r) = r {
            // At most 64 KiB kept; the rest is read and dropped so the child never blocks.
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if bytes.len() < 65536 {
                    bytes.extend_from_slice(buf.get(..n).unwrap_or_default());
                }
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Run one hook: `sh -c COMMAND` with `%i` replaced by the interface name (as wg-quick)
/// and `BRAID_INTERFACE` set; its output goes to the daemon's log, a line each.
pub fn hook(now: Instant, key: &str, command: &str, interface: &str) -> Result<(), CommandError> {
    let line = command.replace("%i", interface);
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(&line).env("BRAID_INTERFACE", interface);
    let out = run(&format!("{key} `{line}`"), &mut cmd, HOOK_TIMEOUT)?;
    for l in [out.stdout, out.stderr]
        .iter()
        .flat_map(|o| o.lines())
        .filter(|l| !l.trim().is_empty())
    {
        dlog!(now, "{key}: {l}");
    }
    Ok(())
}

/// `ip ARGS...`, bounded.
pub fn ip(args: &[&str]) -> Result<String, CommandError> {
    run(
        &format!("ip {}", args.join(" ")),
        Command::new("ip").args(args),
        IP_TIMEOUT,
    )
    .map(|p| p.stdout)
}

/// `nft ARGS...`, bounded.
pub fn nft(args: &[&str]) -> Result<String, CommandError> {
    run(
        &format!("nft {}", args.join(" ")),
        Command::new("nft").args(args),
        IP_TIMEOUT,
    )
    .map(|p| p.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_sees_the_interface() {
        let dir = std::env::temp_dir().join(format!("braid-hook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("out");
        let cmd = format!("echo %i $BRAID_INTERFACE > {}", f.display());
        hook(Instant::ZERO, "bond.post_up", &cmd, "brx0").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "brx0 brx0\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failures_say_what_and_why() {
        let e = hook(
            Instant::ZERO,
            "bond.post_up",
            "echo nope >&2; exit 3",
            "brx0",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "bond.post_up `echo nope >&2; exit 3`: exited with status 3: nope"
        );
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "bounds the test's own run time")]
    fn a_hook_that_hangs_is_killed() {
        let start = std::time::Instant::now();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & sleep 30"]);
        let e = run("hang", &mut cmd, Duration::from_millis(300)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "hang: did not finish within 0.3 s and was killed"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
