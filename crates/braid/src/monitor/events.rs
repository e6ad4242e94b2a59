//! The event timeline: the daemon's own log lines (paths up and down, sessions made,
//! reloads, a peer's restart: info and above) and what a sample shows changed (drops).
//!
//! Log lines reach the monitor through a tap in [`crate::log::write`]: on the daemon's
//! thread, once the monitor is on ([`enable_tap`]), each line is kept in a thread-local
//! list (at most [`TAP_MAX`]) that [`super::Monitor::publish`] hands over with the next
//! snapshot. No lock is taken.
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use serde::Serialize;

use crate::log::Level;

/// Most log lines kept between two snapshots (more are counted, not kept).
pub const TAP_MAX: usize = 64;
/// Events the timeline keeps.
pub const TIMELINE_MAX: usize = 500;

/// One event of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Note {
    /// Unix time, ms.
    pub t: u64,
    /// `error`, `warn`, `info`.
    pub level: &'static str,
    /// What happened.
    pub text: String,
}

thread_local! {
    static TAP_ON: Cell<bool> = const { Cell::new(false) };
    static TAP: RefCell<Vec<Note>> = const { RefCell::new(Vec::new()) };
    static TAP_LOST: Cell<u64> = const { Cell::new(0) };
}

/// Start keeping this thread's log lines (the daemon's thread, when its monitor starts).
pub fn enable_tap() {
    TAP_ON.with(|c| c.set(true));
}

/// Keep a log line for the timeline (called by the log for every line at info or above,
/// whether written or not).
pub fn tap(level: Level, msg: &std::fmt::Arguments<'_>) {
    if level > Level::Info || !TAP_ON.with(Cell::get) {
        return;
    }
    TAP.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() < TAP_MAX {
            t.push(Note {
                t: super::unix_ms(),
                level: level.name(),
                text: msg.to_string(),
            });
        } else {
            TAP_LOST.with(|l| l.set(l.get() + 1));
        }
    });
}

/// The lines kept since the last call (and one saying how many were not kept).
pub fn drain_tap() -> Vec<Note> {
    let mut v = TAP.with(|t| std::mem::take(&mut *t.borrow_mut()));
    let lost = TAP_LOST.with(|l| l.replace(0));
    if lost > 0 {
        v.push(Note {
            t: super::unix_ms(),
            level: "info",
            text: format!("{lost} more log lines in this second (see the log)"),
        });
    }
    v
}

/// The timeline: the last [`TIMELINE_MAX`] events, each with a number that SSE clients
/// use to ask for what is new.
#[derive(Debug, Default)]
pub struct Timeline {
    events: VecDeque<(u64, Note)>,
    next: u64,
}

impl Timeline {
    /// Add an event.
    pub fn push(&mut self, n: Note) {
        if self.events.len() == TIMELINE_MAX {
            self.events.pop_front();
        }
        self.events.push_back((self.next, n));
        self.next += 1;
    }

    /// The number the next event will get.
    pub fn next_id(&self) -> u64 {
        self.next
    }

    /// Events numbered `from` and later.
    pub fn since(&self, from: u64) -> Vec<&Note> {
        self.events
            .iter()
            .filter(|(i, _)| *i >= from)
            .map(|(_, n)| n)
            .collect()
    }

    /// Every event kept, oldest first.
    pub fn all(&self) -> Vec<&Note> {
        self.since(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tap_keeps_lines_only_once_enabled_and_bounded() {
        std::thread::spawn(|| {
            tap(Level::Info, &format_args!("before"));
            assert!(drain_tap().is_empty());
            enable_tap();
            tap(Level::Debug, &format_args!("debug is not an event"));
            tap(Level::Warn, &format_args!("path p1 (path#1) down"));
            let v = drain_tap();
            assert_eq!(v.len(), 1);
            assert_eq!(
                (v[0].level, v[0].text.as_str()),
                ("warn", "path p1 (path#1) down")
            );
            for i in 0..TAP_MAX + 3 {
                tap(Level::Info, &format_args!("line {i}"));
            }
            let v = drain_tap();
            assert_eq!(v.len(), TAP_MAX + 1);
            assert!(
                v[TAP_MAX].text.starts_with("3 more log lines"),
                "{:?}",
                v[TAP_MAX]
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_timeline_is_bounded_and_numbered() {
        let mut t = Timeline::default();
        for i in 0..TIMELINE_MAX + 10 {
            t.push(Note {
                t: i as u64,
                level: "info",
                text: format!("{i}"),
            });
        }
        assert_eq!(t.all().len(), TIMELINE_MAX);
        assert_eq!(t.all()[0].text, "10");
        assert_eq!(t.next_id(), (TIMELINE_MAX + 10) as u64);
        let new = t.since(t.next_id() - 2);
        assert_eq!(new.len(), 2);
        assert_eq!(new[1].text, format!("{}", TIMELINE_MAX + 9));
    }
}
