//! The daemon's log: one line per event on stderr, each with a level.
//!
//! ```text
//! [     5.300] info: path p0 (path#0) up
//! [     9.014] warn: path p1: send: Network is unreachable (os error 101); retrying every 1s
//! ```
//!
//! The bracketed figure is seconds since start (the daemon's one clock, passed in as
//! `now`). When stderr is the systemd journal (`JOURNAL_STREAM` names stderr's device and
//! inode, as `systemd.exec(5)` documents), each line starts with its syslog priority
//! instead (`<4>path p1: ...`): the journal adds the time and files the line at that
//! priority. `braid up -v` shows debug lines, `-q` hides info lines, `-qq` warnings too.
//!
//! Lines that repeat (a dead uplink fails twice a second) go through [`limited`]: the
//! first is written, then at most one summary per [`REPEAT_INTERVAL`] (`... (repeated 119
//! times in the last 60 s)`).
//!
//! Only the program logs: the core returns events and counters, and the daemon words them.
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use braid_core::Instant;

/// A line's level; the numbers are syslog's priorities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed and braid cannot fix it by itself.
    Error = 3,
    /// Something is wrong or risky; braid goes on.
    Warn = 4,
    /// Normal events: start, paths up and down, run-time changes.
    Info = 6,
    /// Details for finding out why (`braid up -v`).
    Debug = 7,
}

impl Level {
    /// The word written before the message.
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    /// The syslog priority (`<N>` in the journal).
    pub fn priority(self) -> u8 {
        self as u8
    }

    fn from_priority(p: u8) -> Level {
        match p {
            0..=3 => Level::Error,
            4 | 5 => Level::Warn,
            6 => Level::Info,
            _ => Level::Debug,
        }
    }
}

/// How long repeats of a line are counted before one summary line is written.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(60);

/// Most distinct repeating lines tracked at once; beyond that, lines are written as they
/// come (the keys are path names and error kinds, so this is not reached in practice).
const MAX_TRACKED: usize = 64;

static THRESHOLD: AtomicU8 = AtomicU8::new(Level::Info as u8);
static JOURNAL: AtomicBool = AtomicBool::new(false);
static REPEATS: Mutex<Repeats> = Mutex::new(Repeats::new(REPEAT_INTERVAL));

/// The threshold for `-v` given `verbose` times and `-q` given `quiet` times: info by
/// default, debug with `-v`, warnings and errors with `-q`, errors only with `-qq`.
pub fn threshold(verbose: u8, quiet: u8) -> Level {
    match i16::from(verbose) - i16::from(quiet) {
        1.. => Level::Debug,
        0 => Level::Info,
        -1 => Level::Warn,
        _ => Level::Error,
    }
}

/// Set up the log for `braid up`: the threshold, and whether stderr is the journal.
pub fn init(verbose: u8, quiet: u8) {
    THRESHOLD.store(threshold(verbose, quiet).priority(), Ordering::Relaxed);
    let journal = std::env::var("JOURNAL_STREAM")
        .ok()
        .is_some_and(|v| fd_is_stream(libc::STDERR_FILENO, &v));
    JOURNAL.store(journal, Ordering::Relaxed);
}

/// Whether lines of `level` are written.
pub fn enabled(level: Level) -> bool {
    level <= Level::from_priority(THRESHOLD.load(Ordering::Relaxed))
}

/// Whether `fd` is the stream `journal_stream` names (`DEVICE:INODE`, decimal, as systemd
/// sets `JOURNAL_STREAM` for a service whose stderr goes to the journal).
pub fn fd_is_stream(fd: i32, journal_stream: &str) -> bool {
    let Some((dev, ino)) = journal_stream.trim().split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // SAFETY: fstat writes at most one `stat` into `st`, which is plain data.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return false;
        }
        st
    };
    st.st_dev == dev && st.st_ino == ino
}

/// One log line (without its newline): `[  uptime] level: msg`, or `<N>msg` for the
/// journal.
pub fn format_line(now: Instant, level: Level, journal: bool, msg: fmt::Arguments<'_>) -> String {
    if journal {
        return format!("<{}>{msg}", level.priority());
    }
    let us = now.as_micros();
    format!(
        "[{:>6}.{:03}] {}: {msg}",
        us / 1_000_000,
        (us / 1000) % 1000,
        level.name()
    )
}

/// Write one line at `level` (if enabled).
pub fn write(now: Instant, level: Level, msg: fmt::Arguments<'_>) {
    crate::monitor::tap(level, &msg);
    if enabled(level) {
        eprintln!(
            "{}",
            format_line(now, level, JOURNAL.load(Ordering::Relaxed), msg)
        );
    }
}

/// Write `msg` unless a line of the same `key` was written less than [`REPEAT_INTERVAL`]
/// ago; repeats are counted and summed up by [`flush_repeats`].
pub fn limited(now: Instant, level: Level, key: &str, msg: String) {
    if !enabled(level) {
        return;
    }
    let first = repeats().check(now, level, key, msg);
    if let Some(line) = first {
        write(now, level, format_args!("{line}"));
    }
}

/// Write the summaries of repeated lines whose interval has ended. Call once per loop
/// turn; [`next_repeat_due`] says when it is next needed.
pub fn flush_repeats(now: Instant) {
    let due = repeats().due(now);
    for (level, line) in due {
        write(now, level, format_args!("{line}"));
    }
}

/// When [`flush_repeats`] next has something to write.
pub fn next_repeat_due() -> Option<Instant> {
    repeats().next_due()
}

fn repeats() -> std::sync::MutexGuard<'static, Repeats> {
    REPEATS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Lines of one key counted in the current interval.
#[derive(Debug)]
struct Entry {
    key: String,
    level: Level,
    /// The latest message of the key (summaries quote it).
    last: String,
    since: Instant,
    count: u64,
}

/// Rate limit for repeated lines: the first line of a key is written, later ones within
/// `interval` are counted, and when the interval ends one summary line says how many there
/// were. A key with no repeat in a whole interval is forgotten, so its next line is
/// written at once.
#[derive(Debug)]
pub struct Repeats {
    interval: Duration,
    entries: Vec<Entry>,
}

impl Repeats {
    /// No lines seen yet.
    pub const fn new(interval: Duration) -> Repeats {
        Repeats {
            interval,
            entries: Vec::new(),
        }
    }

    /// A line of `key`: `Some(line)` to write it now, `None` when it is a repeat.
    pub fn check(&mut self, now: Instant, level: Level, key: &str, msg: String) -> Option<String> {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.count += 1;
            e.last = msg;
            e.level = e.level.min(level);
            return None;
        }
        if self.entries.len() < MAX_TRACKED {
            self.entries.push(Entry {
                key: key.to_owned(),
                level,
                last: msg.clone(),
                since: now,
                count: 0,
            });
        }
        Some(msg)
    }

    /// Summary lines of the keys whose interval ended by `now`.
    pub fn due(&mut self, now: Instant) -> Vec<(Level, String)> {
        let mut out = Vec::new();
        let interval = self.interval;
        self.entries.retain_mut(|e| {
            if now < e.since + interval {
                return true;
            }
            if e.count == 0 {
                return false;
            }
            let secs = now.saturating_since(e.since).as_secs();
            out.push((
                e.level,
                format!(
                    "{} (repeated {} time{} in the last {secs} s)",
                    e.last,
                    e.count,
                    if e.count == 1 { "" } else { "s" }
                ),
            ));
            e.since = now;
            e.count = 0;
            true
        });
        out
    }

    /// When the next interval ends.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.since + self.interval).min()
    }
}

/// Log at info: `dlog!(now, "path {name} up")`.
macro_rules! dlog {
    ($now:expr, $($arg:tt)*) => {
        $crate::log::write($now, $crate::log::Level::Info, format_args!($($arg)*))
    };
}

/// Log at warn.
macro_rules! dwarn {
    ($now:expr, $($arg:tt)*) => {
        $crate::log::write($now, $crate::log::Level::Warn, format_args!($($arg)*))
    };
}

/// Log at error.
macro_rules! derror {
    ($now:expr, $($arg:tt)*) => {
        $crate::log::write($now, $crate::log::Level::Error, format_args!($($arg)*))
    };
}

/// Log at debug (shown with `braid up -v`).
macro_rules! ddebug {
    ($now:expr, $($arg:tt)*) => {
        $crate::log::write($now, $crate::log::Level::Debug, format_args!($($arg)*))
    };
}

pub(crate) use {ddebug, derror, dlog, dwarn};

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn lines_carry_the_level_or_the_syslog_priority() {
        assert_eq!(
            format_line(at(5300), Level::Info, false, format_args!("path p0 up")),
            "[     5.300] info: path p0 up"
        );
        assert_eq!(
            format_line(at(9014), Level::Warn, false, format_args!("x")),
            "[     9.014] warn: x"
        );
        assert_eq!(
            format_line(at(1), Level::Warn, true, format_args!("path p1: send")),
            "<4>path p1: send"
        );
        assert_eq!(
            format_line(at(1), Level::Error, true, format_args!("e")),
            "<3>e"
        );
        assert_eq!(
            format_line(at(1), Level::Debug, true, format_args!("d")),
            "<7>d"
        );
    }

    #[test]
    fn verbosity_picks_the_threshold() {
        assert_eq!(threshold(0, 0), Level::Info);
        assert_eq!(threshold(1, 0), Level::Debug);
        assert_eq!(threshold(3, 0), Level::Debug);
        assert_eq!(threshold(0, 1), Level::Warn);
        assert_eq!(threshold(0, 2), Level::Error);
        assert_eq!(threshold(0, 5), Level::Error);
        assert_eq!(threshold(1, 1), Level::Info);
    }

    #[test]
    fn journal_stream_is_matched_by_device_and_inode() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("braid-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (p, q) = (dir.join("a"), dir.join("b"));
        let f = std::fs::File::create(&p).unwrap();
        let g = std::fs::File::create(&q).unwrap();
        let m = f.metadata().unwrap();
        let stream = format!("{}:{}", m.dev(), m.ino());
        assert!(fd_is_stream(f.as_raw_fd(), &stream));
        assert!(!fd_is_stream(g.as_raw_fd(), &stream), "another file");
        assert!(!fd_is_stream(f.as_raw_fd(), ""));
        assert!(!fd_is_stream(f.as_raw_fd(), "8:x"));
        assert!(!fd_is_stream(f.as_raw_fd(), &format!("{}", m.dev())));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn repeats_are_summed_up_once_per_interval() {
        let mut r = Repeats::new(Duration::from_secs(60));
        let msg = "path p1: send: Network is unreachable; retrying every 1s";
        // A dead uplink: a failure every 500 ms for 150 s.
        let mut written = Vec::new();
        for i in 0..300 {
            let now = at(i * 500);
            for (_, line) in r.due(now) {
                written.push((i * 500, line));
            }
            if let Some(line) = r.check(now, Level::Warn, msg, msg.to_owned()) {
                written.push((i * 500, line));
            }
        }
        assert_eq!(written.len(), 3, "{written:#?}");
        assert_eq!(written[0], (0, msg.to_owned()));
        assert_eq!(
            written[1],
            (
                60_000,
                format!("{msg} (repeated 119 times in the last 60 s)")
            )
        );
        assert_eq!(written[2].0, 120_000);
        // The uplink comes back: one last summary, then the key is forgotten and the next
        // failure is written at once.
        let quiet = at(150_000);
        assert_eq!(r.next_due(), Some(at(180_000)));
        assert!(r.due(quiet).is_empty());
        let s = r.due(at(180_000));
        assert_eq!(s.len(), 1);
        assert!(
            s[0].1.ends_with("(repeated 60 times in the last 60 s)"),
            "{s:?}"
        );
        assert!(r.due(at(240_000)).is_empty());
        assert_eq!(r.next_due(), None, "forgotten after a quiet interval");
        assert_eq!(
            r.check(at(250_000), Level::Warn, msg, msg.to_owned()),
            Some(msg.to_owned())
        );
    }

    #[test]
    fn repeats_of_a_key_quote_the_latest_message() {
        let mut r = Repeats::new(Duration::from_secs(60));
        assert!(r
            .check(at(0), Level::Warn, "hs", "from 10.0.0.2:7000".into())
            .is_some());
        assert!(r.check(at(1), Level::Warn, "other", "x".into()).is_some());
        assert!(r
            .check(at(2), Level::Warn, "hs", "from 10.0.0.9:7000".into())
            .is_none());
        let s = r.due(at(60_000));
        assert_eq!(
            s,
            vec![(
                Level::Warn,
                "from 10.0.0.9:7000 (repeated 1 time in the last 60 s)".to_owned()
            )]
        );
    }
}
