//! The progress line on stderr while the lab runs.
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::netns::now;

/// A one-line progress display: scenario, phase, elapsed/total seconds. On a terminal it
/// redraws in place; otherwise it prints one line per phase.
#[derive(Debug)]
pub struct Progress {
    state: Mutex<State>,
    tty: bool,
    enabled: bool,
}

#[derive(Debug)]
struct State {
    scenario: String,
    index: usize,
    count: usize,
    phase: String,
    phase_start: Instant,
    phase_secs: u64,
    last_draw: Option<Instant>,
}

impl Progress {
    /// A progress display on stderr (`enabled == false`: silent).
    pub fn new(enabled: bool) -> Self {
        Self {
            state: Mutex::new(State {
                scenario: String::new(),
                index: 0,
                count: 0,
                phase: String::new(),
                phase_start: now(),
                phase_secs: 0,
                last_draw: None,
            }),
            tty: std::io::stderr().is_terminal(),
            enabled,
        }
    }

    /// Scenario `index` (1-based) of `count` starts.
    pub fn set_count(&self, index: usize, count: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.index = index;
            s.count = count;
        }
    }

    /// A scenario starts.
    pub fn scenario(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.scenario = name.to_string();
        }
        self.phase("setting up namespaces", 0);
    }

    /// A phase of about `secs` seconds starts.
    pub fn phase(&self, label: &str, secs: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.phase = label.to_string();
            s.phase_start = now();
            s.phase_secs = secs;
            s.last_draw = None;
        }
        if !self.tty {
            self.draw(true);
        } else {
            self.tick();
        }
    }

    /// Redraw if due (about four times a second on a terminal).
    pub fn tick(&self) {
        if self.tty {
            self.draw(false);
        }
    }

    fn draw(&self, newline: bool) {
        if !self.enabled {
            return;
        }
        let Ok(mut s) = self.state.lock() else { return };
        let t = now();
        if !newline
            && s.last_draw
                .is_some_and(|d| t - d < Duration::from_millis(250))
        {
            return;
        }
        s.last_draw = Some(t);
        let el = (t - s.phase_start).as_secs();
        let counter = if s.count > 1 {
            format!("[{}/{}] ", s.index, s.count)
        } else {
            String::new()
        };
        let time = if s.phase_secs > 0 {
            format!("  {el}/{} s", s.phase_secs)
        } else {
            format!("  {el} s")
        };
        let line = format!("braid lab {counter}{}: {}{time}", s.scenario, s.phase);
        let mut err = std::io::stderr().lock();
        if newline {
            let _ = writeln!(err, "{line}");
        } else {
            let _ = write!(err, "\r\x1b[K{line}");
            let _ = err.flush();
        }
    }

    /// Clear the line (before printing results).
    pub fn clear(&self) {
        if self.enabled && self.tty {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}
