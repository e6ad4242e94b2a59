//! Network namespaces, veth pairs, tbf, and the processes the lab starts in them.
//!
//! Everything here cleans up after itself: a [`Topology`] deletes its namespaces when
//! dropped, a [`Proc`] stops its process (by PID, SIGTERM then SIGKILL) when dropped, and
//! every wait is bounded. A SIGINT/SIGTERM handler ([`install_signal_handler`]) only sets a
//! flag ([`interrupted`]); the lab's loops check it and return an error, so the guards run
//! on Ctrl-C as on any other error.
use std::fs::File;
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

static STOP: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The lab's clock (it measures real time; the core never reads a clock).
#[expect(clippy::disallowed_methods, reason = "the lab measures real time")]
pub fn now() -> Instant {
    Instant::now()
}

/// Make SIGINT and SIGTERM set the [`interrupted`] flag instead of killing the process, so
/// that the lab's guards can clean up.
pub fn install_signal_handler() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction struct is zeroed and fully initialised before the call.
        #[allow(unsafe_code)]
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once SIGINT or SIGTERM arrived (after [`install_signal_handler`]).
pub fn interrupted() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// An error if the run was interrupted.
pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

/// Sleep `d`, waking early (with an error) if interrupted.
pub fn sleep(d: Duration) -> Result<()> {
    let end = now() + d;
    loop {
        check_interrupted()?;
        let now = now();
        if now >= end {
            return Ok(());
        }
        thread::sleep((end - now).min(Duration::from_millis(20)));
    }
}

/// True when running as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::geteuid() == 0
    }
}

/// The full path of `prog` found on `PATH` (and the sbin directories, which a non-login
/// root shell may miss).
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Run `cmd` to completion, killing it after `timeout` or on an interrupt; its output.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    run(cmd, timeout, true)
}

/// [`run_timeout`] for cleaning up (deleting a namespace): an interrupt does not stop it,
/// since cleaning up is what an interrupted run does next.
pub fn run_cleanup(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    run(cmd, timeout, false)
}

fn run(cmd: &mut Command, timeout: Duration, interruptible: bool) -> Result<Output> {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {desc}"))?;
    let out_reader = reader(child.stdout.take());
    let err_reader = reader(child.stderr.take());
    let end = now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        let stop = interruptible && interrupted();
        if now() >= end || stop {
            let _ = child.kill();
            let _ = child.wait();
            if stop {
                bail!("interrupted");
            }
            bail!("{desc} did not finish within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

fn reader<R: Read + Send + 'static>(r: Option<R>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = r {
            let mut bytes = Vec::new();
            let _ = r.read_to_end(&mut bytes);
            s = String::from_utf8_lossy(&bytes).into_owned();
        }
        s
    })
}

/// Run a command (10 s bound) and fail with its stderr unless it succeeds.
pub fn run_ok(cmd: &mut Command) -> Result<String> {
    let desc = format!("{cmd:?}");
    let out = run_timeout(cmd, Duration::from_secs(10))?;
    if !out.status.success() {
        bail!("{desc} failed ({}): {}", out.status, out.stderr.trim());
    }
    Ok(out.stdout)
}

/// `ip ARGS...`.
pub fn ip(args: &[&str]) -> Result<String> {
    run_ok(Command::new("ip").args(args))
}

/// A command that runs `prog` inside namespace `ns` (`ip netns exec`, which execs, so the
/// child's PID is the program's own).
pub fn ns_command(ns: &str, prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(prog);
    c
}

/// A process the lab started; stopped by PID when dropped.
#[derive(Debug)]
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    child: Option<Child>,
    /// Where its stderr goes (for error messages).
    pub log: Option<PathBuf>,
    out: Option<thread::JoinHandle<String>>,
    err: Option<thread::JoinHandle<String>>,
}

impl Proc {
    /// Start `cmd`; stdout is captured into a pipe for [`Proc::wait_output`] when
    /// `capture_stdout`, and stderr goes to `log` (or is discarded).
    pub fn spawn(
        name: &str,
        cmd: &mut Command,
        capture_stdout: bool,
        log: Option<&Path>,
    ) -> Result<Self> {
        cmd.stdin(Stdio::null());
        cmd.stdout(if capture_stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        match log {
            Some(p) => {
                let f = File::create(p).with_context(|| format!("creating {}", p.display()))?;
                cmd.stderr(f);
            }
            None => {
                cmd.stderr(Stdio::piped());
            }
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        // Read pipes from the start, so a chatty child never blocks on a full pipe.
        let out = child.stdout.take().map(|o| reader(Some(o)));
        let err = child.stderr.take().map(|e| reader(Some(e)));
        Ok(Self {
            name: name.to_string(),
            child: Some(child),
            log: log.map(Path::to_path_buf),
            out,
            err,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Send `signal` to the process (by PID; nothing if it has been reaped).
    pub fn signal(&mut self, signal: libc::c_int) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            bail!("{}: no process", self.name)
        };
        if child.try_wait()?.is_some() {
            bail!("{} has already exited", self.name);
        }
        let pid = libc::pid_t::try_from(child.id()).context("pid out of range")?;
        // SAFETY: kill has no memory preconditions; the pid is our own unreaped child, so
        // it cannot have been reused.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(pid, signal) };
        if rc != 0 {
            bail!("kill {pid}: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait (bounded by `within`) for the process to exit and reap it; its exit status.
    /// Killed (and an error) if it is still running after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            bail!("{}: no process", self.name)
        };
        let end = now() + within;
        loop {
            if let Some(st) = child.try_wait()? {
                return Ok(st);
            }
            if now() >= end {
                stop_child(child);
                bail!("{} did not exit within {within:?}", self.name);
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Its exit status if it has exited, without waiting.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Wait (bounded) for the process to exit; its stdout and stderr. Killed on timeout.
    pub fn wait_output(mut self, timeout: Duration) -> Result<Output> {
        let Some(mut child) = self.child.take() else {
            bail!("{}: no process", self.name)
        };
        let end = now() + timeout;
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if now() >= end || interrupted() {
                stop_child(&mut child);
                if interrupted() {
                    bail!("interrupted");
                }
                bail!("{} did not finish within {timeout:?}", self.name);
            }
            thread::sleep(Duration::from_millis(10));
        };
        let join = |h: Option<thread::JoinHandle<String>>| {
            h.and_then(|h| h.join().ok()).unwrap_or_default()
        };
        let stdout = join(self.out.take());
        let mut stderr = join(self.err.take());
        if let Some(log) = &self.log {
            stderr = std::fs::read_to_string(log).unwrap_or_default();
        }
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Stop it now (SIGTERM, then SIGKILL after 2 s).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn stop_child(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill has no memory preconditions; the pid is our own unreaped child, so
        // it cannot have been reused.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    let end = now() + Duration::from_secs(2);
    while now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// CPU time (user + system) a process has used so far, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after ')'.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tck = u64::try_from(tck).ok().filter(|&t| t > 0).unwrap_or(100);
    Some(Duration::from_micros((utime + stime) * 1_000_000 / tck))
}

/// Datagrams the kernel dropped for want of room in a UDP socket's receive buffer, in the
/// network namespace of process `pid` (`RcvbufErrors` of `/proc/<pid>/net/snmp`).
pub fn udp_rcvbuf_errors(pid: u32) -> Option<u64> {
    let snmp = std::fs::read_to_string(format!("/proc/{pid}/net/snmp")).ok()?;
    snmp_udp_field(&snmp, "RcvbufErrors")
}

/// Field `name` of the `Udp:` lines of a `/proc/net/snmp` (a line of names, then one of
/// values).
fn snmp_udp_field(snmp: &str, name: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// `tc qdisc replace dev DEV root QDISC...` in `ns`.
pub fn root_qdisc(ns: &str, dev: &str, qdisc: &[&str]) -> Result<()> {
    let mut c = Command::new("tc");
    c.args(["-n", ns, "qdisc", "replace", "dev", dev, "root"])
        .args(qdisc);
    run_ok(&mut c)?;
    Ok(())
}

/// Shape `dev` in `ns` to `rate_bps` with tbf: a bucket of `burst` bytes (default 2 ms at
/// rate, at least two full-size packets) and a queue of 50 ms: a link that serialises
/// packets, not one that passes 10 ms bursts at line rate.
pub fn tbf(ns: &str, dev: &str, rate_bps: u64, burst: Option<u64>) -> Result<()> {
    let burst = burst.unwrap_or((rate_bps / 8 / 500).max(3_200));
    let (rate, burst) = (format!("{rate_bps}bit"), burst.to_string());
    root_qdisc(
        ns,
        dev,
        &["tbf", "rate", &rate, "burst", &burst, "latency", "50ms"],
    )?;
    Ok(())
}

/// One veth pair between the two namespaces: path `index` of a topology.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Link {
    /// Path index (0-based).
    pub index: usize,
    /// Device name in namespace a.
    pub dev_a: String,
    /// Device name in namespace b.
    pub dev_b: String,
    /// Address in namespace a (10.201.i.1).
    pub addr_a: Ipv4Addr,
    /// Address in namespace b (10.201.i.2).
    pub addr_b: Ipv4Addr,
}

/// Two network namespaces joined by veth pairs; deleted on drop.
#[derive(Debug)]
pub struct Topology {
    /// Namespace a (the sending side in the lab), `braid-<pid>-<n>-a`.
    pub ns_a: String,
    /// Namespace b, `braid-<pid>-<n>-b`.
    pub ns_b: String,
    /// The links, path i = `links[i]`.
    pub links: Vec<Link>,
    /// A private scratch directory (configs, sockets, logs), removed on drop.
    pub dir: PathBuf,
    created: Vec<String>,
}

impl Topology {
    /// Create namespaces `braid-<pid>-<n>-{a,b}` with `paths` veth pairs: path i is
    /// 10.201.i.1/30 (a) ↔ 10.201.i.2/30 (b). Loopback is up in both.
    pub fn new(paths: usize) -> Result<Self> {
        if paths == 0 || paths > 250 {
            bail!("a topology needs 1 to 250 paths, not {paths}");
        }
        let pid = std::process::id();
        let n = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let tag = format!("braid-{pid}-{n}");
        let dir = std::env::temp_dir().join(format!("{tag}-lab"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut topo = Self {
            ns_a: format!("{tag}-a"),
            ns_b: format!("{tag}-b"),
            links: Vec::new(),
            dir,
            created: Vec::new(),
        };
        for ns in [topo.ns_a.clone(), topo.ns_b.clone()] {
            ip(&["netns", "add", &ns])?;
            topo.created.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        for i in 0..paths {
            let i8 = u8::try_from(i).map_err(|_| anyhow!("too many paths"))?;
            let link = Link {
                index: i,
                dev_a: format!("bra{i}"),
                dev_b: format!("brb{i}"),
                addr_a: Ipv4Addr::new(10, 201, i8, 1),
                addr_b: Ipv4Addr::new(10, 201, i8, 2),
            };
            let (a, b) = (topo.ns_a.clone(), topo.ns_b.clone());
            ip(&[
                "-n",
                &a,
                "link",
                "add",
                &link.dev_a,
                "type",
                "veth",
                "peer",
                "name",
                &link.dev_b,
                "netns",
                &b,
            ])?;
            ip(&[
                "-n",
                &a,
                "addr",
                "add",
                &format!("{}/30", link.addr_a),
                "dev",
                &link.dev_a,
            ])?;
            ip(&[
                "-n",
                &b,
                "addr",
                "add",
                &format!("{}/30", link.addr_b),
                "dev",
                &link.dev_b,
            ])?;
            ip(&["-n", &a, "link", "set", &link.dev_a, "up"])?;
            ip(&["-n", &b, "link", "set", &link.dev_b, "up"])?;
            topo.links.push(link);
        }
        Ok(topo)
    }

    /// Limit path `i` to `rate_bps` with tbf on both ends' egress.
    /// Turn TCP timestamps off in both namespaces (as in the serial seeds: RFC 1144
    /// header compression cannot compress TCP options).
    pub fn tcp_timestamps_off(&self) -> Result<()> {
        for ns in [&self.ns_a, &self.ns_b] {
            run_ok(ns_command(ns, "sysctl").args(["-q", "-w", "net.ipv4.tcp_timestamps=0"]))?;
        }
        Ok(())
    }

    pub fn set_rate(&self, i: usize, rate_bps: u64) -> Result<()> {
        let link = self.links.get(i).ok_or_else(|| anyhow!("no path {i}"))?;
        for (ns, dev) in [(&self.ns_a, &link.dev_a), (&self.ns_b, &link.dev_b)] {
            tbf(ns, dev, rate_bps, None)?;
        }
        Ok(())
    }

    /// Set path `i`'s veth down (`up == false`) or up, on both ends.
    pub fn set_link(&self, i: usize, up: bool) -> Result<()> {
        let link = self.links.get(i).ok_or_else(|| anyhow!("no path {i}"))?;
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.ns_a, "link", "set", &link.dev_a, state])?;
        ip(&["-n", &self.ns_b, "link", "set", &link.dev_b, state])?;
        Ok(())
    }

    /// A file in the scratch directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in self.created.drain(..) {
            let _ = run_cleanup(
                Command::new("ip").args(["netns", "del", &ns]),
                Duration::from_secs(10),
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run `f` on a new thread that has entered network namespace `ns` (setns affects only the
/// calling thread). Used by tests to open sockets inside a namespace without a helper
/// program.
pub fn spawn_in_netns<T, F>(ns: &str, f: F) -> Result<thread::JoinHandle<Result<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let file = File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    Ok(thread::spawn(move || {
        // SAFETY: setns on a valid namespace fd; it changes only this thread's namespace.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            bail!("setns: {}", std::io::Error::last_os_error());
        }
        drop(file);
        f()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_of_self() {
        assert!(cpu_time(std::process::id()).is_some());
        assert!(cpu_time(u32::MAX).is_none());
    }

    #[test]
    fn udp_receive_buffer_errors_from_snmp() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
            Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
            Udp: 100 2 7 90 5 0\n\
            UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
            UdpLite: 0 0 0 0 9 0\n";
        assert_eq!(snmp_udp_field(snmp, "RcvbufErrors"), Some(5));
        assert_eq!(snmp_udp_field(snmp, "InErrors"), Some(7));
        assert_eq!(snmp_udp_field(snmp, "Nothing"), None);
        assert_eq!(snmp_udp_field("Udp: RcvbufErrors\n", "RcvbufErrors"), None);
        assert!(udp_rcvbuf_errors(std::process::id()).is_some());
        assert!(udp_rcvbuf_errors(u32::MAX).is_none());
    }

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("no-such-program-braid").is_none());
    }

    #[test]
    fn run_timeout_kills() {
        let err = run_timeout(Command::new("sleep").arg("5"), Duration::from_millis(100));
        assert!(err.is_err());
        let out = run_timeout(Command::new("echo").arg("hi"), Duration::from_secs(5)).unwrap();
        assert_eq!(out.stdout.trim(), "hi");
    }
}
