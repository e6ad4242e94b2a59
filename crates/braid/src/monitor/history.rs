//! History: the last [`SHORT_LEN`] 1 s samples in memory, and [`LONG_LEN`] samples of
//! [`LONG_STEP_MS`] (24 h of 10 s means) in memory and in a file, so that the graphs
//! survive a restart.
//!
//! The file is JSON lines, one long sample each, appended by the monitor's worker thread
//! (never the data path). When it holds [`LONG_LEN`] + [`COMPACT_SLACK`] lines it is
//! rewritten from memory (a temporary file renamed over it), so it stays below ~1.1 days
//! of samples. At start it is read back (at most [`FILE_MAX`] bytes; samples older than
//! a day, or unreadable lines, are skipped).
use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::sample::{mean, Sample};

/// 1 s samples kept: 10 minutes.
pub const SHORT_LEN: usize = 600;
/// Long samples' step, ms.
pub const LONG_STEP_MS: u64 = 10_000;
/// Long samples kept: 24 h.
pub const LONG_LEN: usize = 8640;
/// Lines the file may hold beyond [`LONG_LEN`] before it is rewritten.
pub const COMPACT_SLACK: usize = 360;
/// Largest history file read back.
pub const FILE_MAX: u64 = 64 << 20;

/// The history.
#[derive(Debug, Default)]
pub struct History {
    short: VecDeque<Sample>,
    long: VecDeque<Sample>,
    /// 1 s samples of the current long step.
    acc: Vec<Sample>,
    file: Option<PathBuf>,
    /// Lines in the file now.
    file_lines: usize,
    /// The last file error (said once).
    pub file_error: Option<String>,
}

impl History {
    /// A history kept in `file` (none: memory only), with what the file holds already
    /// (samples since `now_ms` - 24 h).
    pub fn open(file: Option<PathBuf>, now_ms: u64) -> History {
        let mut h = History {
            file,
            ..History::default()
        };
        if let Some(f) = &h.file {
            match load(f, now_ms) {
                Ok((samples, lines)) => {
                    h.long = samples.into();
                    h.file_lines = lines;
                }
                Err(e) => h.file_error = Some(e),
            }
        }
        h
    }

    /// Add a 1 s sample; every [`LONG_STEP_MS`] the mean of the last step becomes a long
    /// sample (and a line of the file).
    pub fn push(&mut self, s: Sample) {
        if self.short.len() == SHORT_LEN {
            self.short.pop_front();
        }
        let step = s.t / LONG_STEP_MS;
        if self.acc.first().is_some_and(|a| a.t / LONG_STEP_MS != step) {
            let acc = std::mem::take(&mut self.acc);
            if let Some(m) = mean(&acc) {
                self.push_long(m);
            }
        }
        self.acc.push(s.clone());
        self.short.push_back(s);
    }

    fn push_long(&mut self, m: Sample) {
        if self.long.len() == LONG_LEN {
            self.long.pop_front();
        }
        self.long.push_back(m);
        if let Err(e) = self.append() {
            self.file_error = Some(e);
        }
    }

    /// Write what is pending to the file (the worker calls this when it stops).
    pub fn flush(&mut self) {
        let acc = std::mem::take(&mut self.acc);
        if let Some(m) = mean(&acc) {
            self.push_long(m);
        }
    }

    /// The 1 s samples, oldest first.
    pub fn short(&self) -> impl Iterator<Item = &Sample> {
        self.short.iter()
    }

    /// The long samples, oldest first.
    pub fn long(&self) -> impl Iterator<Item = &Sample> {
        self.long.iter()
    }

    /// The history file, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    fn append(&mut self) -> Result<(), String> {
        let (Some(f), Some(last)) = (&self.file, self.long.back()) else {
            return Ok(());
        };
        if self.file_lines >= LONG_LEN + COMPACT_SLACK {
            return self.rewrite();
        }
        let line = serde_json::to_string(last).map_err(|e| e.to_string())?;
        make_dir(f)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode_private()
            .open(f)
            .map_err(|e| format!("{}: {e}", f.display()))?;
        file.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| format!("{}: {e}", f.display()))?;
        self.file_lines += 1;
        Ok(())
    }

    /// Rewrite the file from memory: a temporary file next to it, renamed over it.
    fn rewrite(&mut self) -> Result<(), String> {
        let Some(f) = &self.file else { return Ok(()) };
        let tmp = f.with_extension("history.tmp");
        let mut text = String::new();
        for s in &self.long {
            text.push_str(&serde_json::to_string(s).map_err(|e| e.to_string())?);
            text.push('\n');
        }
        let io = |e: std::io::Error| format!("{}: {e}", tmp.display());
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode_private()
            .open(&tmp)
            .map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        std::fs::rename(&tmp, f).map_err(|e| format!("{}: {e}", f.display()))?;
        self.file_lines = self.long.len();
        Ok(())
    }
}

/// Create the file's directory (mode 0700) if it is missing: `/var/lib/braid` when braid
/// runs without systemd's `StateDirectory=`.
fn make_dir(f: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    match f.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.exists() => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(|e| format!("{}: {e}", d.display())),
        _ => Ok(()),
    }
}

trait ModePrivate {
    fn mode_private(&mut self) -> &mut Self;
}

impl ModePrivate for std::fs::OpenOptions {
    fn mode_private(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// Read a history file: its samples of the last day (oldest first, at most [`LONG_LEN`])
/// and its line count. A missing file is an empty history.
fn load(f: &Path, now_ms: u64) -> Result<(Vec<Sample>, usize), String> {
    let text = match crate::files::read_regular_text(f, FILE_MAX) {
        Ok(t) => t,
        Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Vec::new(), 0))
        }
        Err(e) => return Err(format!("{}: {e}", f.display())),
    };
    let since = now_ms.saturating_sub(LONG_LEN as u64 * LONG_STEP_MS);
    let mut lines = 0;
    let mut out: VecDeque<Sample> = VecDeque::new();
    for l in text.lines() {
        lines += 1;
        let Ok(s) = serde_json::from_str::<Sample>(l) else {
            continue;
        };
        if s.t < since || s.t > now_ms.saturating_add(LONG_STEP_MS) {
            continue;
        }
        if out.len() == LONG_LEN {
            out.pop_front();
        }
        out.push_back(s);
    }
    Ok((out.into(), lines))
}

#[cfg(test)]
mod tests {
    use super::super::sample::PathSample;
    use super::*;

    fn s(t: u64, tx: f64) -> Sample {
        Sample {
            t,
            s: 1.0,
            p: vec![PathSample {
                n: "p0".into(),
                up: 1.0,
                tx,
                rx: 0.0,
                rtt: 1.0,
                jit: 0.0,
                loss: 0.0,
                q: 0.0,
                qd: 0.0,
            }],
            c: Vec::new(),
            dr: 0.0,
        }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("braid-history-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn short_is_bounded_and_long_is_the_mean_of_each_step() {
        let mut h = History::open(None, 0);
        let t0 = 1_700_000_000_000u64;
        for i in 0..(SHORT_LEN as u64 + 25) {
            h.push(s(t0 + i * 1000, (i % 10) as f64 * 1000.0));
        }
        assert_eq!(h.short().count(), SHORT_LEN);
        assert_eq!(h.short().next().unwrap().t, t0 + 25_000);
        // 625 s in whole 10 s steps: 62 finished steps, each the mean 0..9 k = 4.5 k.
        assert_eq!(h.long().count(), 62);
        assert!(h.long().all(|l| l.p[0].tx == 4500.0 && l.s == 10.0));
    }

    #[test]
    fn the_file_survives_a_restart_and_stays_bounded() {
        let d = tmpdir("restart");
        // Its directory is made when missing.
        let f = d.join("state").join("braid0.history");
        let t0 = 1_700_000_000_000u64;
        let mut h = History::open(Some(f.clone()), t0);
        for i in 0..60u64 {
            h.push(s(t0 + i * 1000, 8000.0));
        }
        h.flush();
        assert_eq!(h.file_error, None);
        let n = h.long().count();
        assert_eq!(n, 6);
        drop(h);
        // Started again a minute later: the graphs go on from the file.
        let h = History::open(Some(f.clone()), t0 + 120_000);
        assert_eq!(h.long().count(), n);
        assert_eq!(h.long().last().unwrap().p[0].tx, 8000.0);
        // A day later they are too old to show.
        let h = History::open(Some(f.clone()), t0 + 2 * 86_400_000);
        assert_eq!(h.long().count(), 0);
        // The file is rewritten once it holds LONG_LEN + COMPACT_SLACK lines.
        let mut h = History::open(Some(f.clone()), t0);
        for i in 0..(LONG_LEN + COMPACT_SLACK + 5) as u64 {
            h.push_long(s(t0 + i * LONG_STEP_MS, 1.0));
        }
        assert_eq!(h.file_error, None);
        let lines = std::fs::read_to_string(&f).unwrap().lines().count();
        assert!(lines <= LONG_LEN + COMPACT_SLACK, "{lines} lines");
        assert!(lines >= LONG_LEN, "{lines} lines");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_damaged_file_is_read_as_far_as_it_goes() {
        let d = tmpdir("damaged");
        let f = d.join("braid0.history");
        let t0 = 1_700_000_000_000u64;
        let good = serde_json::to_string(&s(t0, 5.0)).unwrap();
        std::fs::write(&f, format!("{good}\nnot json\n{{\"t\":1}}\n{good}")).unwrap();
        let h = History::open(Some(f.clone()), t0 + 1000);
        assert_eq!(h.long().count(), 2);
        assert_eq!(h.file_error, None);
        std::fs::remove_dir_all(&d).unwrap();
        // A directory where the file should be: an error, an empty history.
        let d = tmpdir("dir");
        std::fs::create_dir_all(d.join("braid0.history")).unwrap();
        let h = History::open(Some(d.join("braid0.history")), t0);
        assert!(h.file_error.is_some());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
