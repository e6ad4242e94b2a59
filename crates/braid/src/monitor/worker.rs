//! The monitor's worker thread: takes each snapshot the daemon publishes, makes the
//! sample, the events and the history, and wakes the `/events` streams.
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use super::events::{Note, Timeline};
use super::history::History;
use super::sample::{self, Sample};
use super::{Inbox, Snapshot};

/// What the worker keeps and the HTTP threads read.
#[derive(Debug)]
pub struct State {
    /// The bond's interface (the `bond` label).
    pub interface: String,
    /// The config summary the page shows.
    pub summary: Value,
    /// The latest snapshot.
    pub latest: Option<Arc<Snapshot>>,
    /// The latest sample.
    pub sample: Option<Sample>,
    /// Samples taken (each wakes the streams).
    pub seq: u64,
    /// 1 s and 10 s history.
    pub history: History,
    /// The event timeline.
    pub timeline: Timeline,
    /// Drops not yet in the timeline, by reason, and when drops were last noted (ms).
    drops: (Vec<(&'static str, u64)>, Option<u64>),
}

/// Drops are noted in the timeline at most this often (ms), summed.
pub const DROP_NOTE_EVERY_MS: u64 = 10_000;

/// The state and the condition the `/events` streams wait on.
#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    /// Notified after each sample.
    pub changed: Condvar,
}

impl Shared {
    /// Empty state; the history is read back from `history_file`.
    pub fn new(
        interface: &str,
        summary: Value,
        history_file: Option<std::path::PathBuf>,
    ) -> Shared {
        let history = History::open(history_file, super::unix_ms());
        let mut timeline = Timeline::default();
        if let (Some(e), Some(f)) = (&history.file_error, history.file()) {
            let text = format!("monitor: history file {} not read: {e}", f.display());
            crate::log::write(
                braid_core::Instant::ZERO,
                crate::log::Level::Warn,
                format_args!("{text}"),
            );
            timeline.push(Note {
                t: super::unix_ms(),
                level: "warn",
                text,
            });
        }
        Shared {
            state: Mutex::new(State {
                interface: interface.to_owned(),
                summary,
                latest: None,
                sample: None,
                seq: 0,
                history,
                timeline,
                drops: (Vec::new(), None),
            }),
            changed: Condvar::new(),
        }
    }

    /// The state (a poisoned lock is taken over: the state is plain data).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take in one snapshot: sample, events, history; wake the streams.
    pub fn ingest(&self, mut snap: Snapshot) {
        let notes = std::mem::take(&mut snap.notes);
        let mut st = self.lock();
        let s = sample::between(st.latest.as_deref(), &snap);
        for n in notes {
            st.timeline.push(n);
        }
        if let Some(n) = note_drops(&mut st, &snap) {
            st.timeline.push(n);
        }
        let had_error = st.history.file_error.is_some();
        st.history.push(s.clone());
        if !had_error {
            if let Some(e) = st.history.file_error.clone() {
                let text = format!("monitor: history file: {e} (the history stays in memory)");
                crate::log::write(
                    braid_core::Instant::ZERO,
                    crate::log::Level::Warn,
                    format_args!("{text}"),
                );
                st.timeline.push(Note {
                    t: snap.unix_ms,
                    level: "warn",
                    text,
                });
            }
        }
        st.sample = Some(s);
        st.latest = Some(Arc::new(snap));
        st.seq += 1;
        drop(st);
        self.changed.notify_all();
    }
}

/// "drops: queue +12, shaper +40": what the bond's drop counters grew by since the last
/// note, at most every [`DROP_NOTE_EVERY_MS`] (a shaper over its rate drops every second).
fn note_drops(st: &mut State, cur: &Snapshot) -> Option<Note> {
    let prev = st.latest.clone()?;
    let c = |s: &Snapshot, k: &str| {
        s.status
            .get("status")
            .and_then(|v| v.get("counters"))
            .and_then(|v| v.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    for (k, name) in [
        ("drop_no_path", "no path"),
        ("drop_queue", "queue"),
        ("drop_too_big", "too big"),
        ("drop_shaper", "shaper"),
        ("drop_partial", "partial"),
        ("bad_datagram", "bad datagram"),
    ] {
        let d = c(cur, k).saturating_sub(c(&prev, k));
        if d == 0 {
            continue;
        }
        match st.drops.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v += d,
            None => st.drops.0.push((name, d)),
        }
    }
    let due = st
        .drops
        .1
        .is_none_or(|last| cur.unix_ms >= last + DROP_NOTE_EVERY_MS);
    if st.drops.0.is_empty() || !due {
        return None;
    }
    let parts: Vec<String> = st
        .drops
        .0
        .drain(..)
        .map(|(name, d)| format!("{name} +{d}"))
        .collect();
    st.drops.1 = Some(cur.unix_ms);
    Some(Note {
        t: cur.unix_ms,
        level: "info",
        text: format!("drops: {}", parts.join(", ")),
    })
}

/// The worker's loop: until the daemon stops, take snapshots as they come; at the end,
/// write what the history has pending.
pub fn run(inbox: &Inbox, shared: &Shared) {
    loop {
        let snap = {
            let mut slot = inbox
                .slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while slot.is_none() && !inbox.stop.load(Ordering::Relaxed) {
                slot = inbox
                    .ready
                    .wait_timeout(slot, Duration::from_secs(1))
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            slot.take()
        };
        match snap {
            Some(s) => shared.ingest(s),
            None => break,
        }
        if inbox.stop.load(Ordering::Relaxed) {
            break;
        }
    }
    shared.lock().history.flush();
    shared.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap(ms: u64, drop_queue: u64) -> Snapshot {
        Snapshot {
            unix_ms: ms,
            status: json!({"status": {"paths": [], "counters": {"drop_queue": drop_queue}}}),
            classes: None,
            notes: vec![Note {
                t: ms,
                level: "info",
                text: format!("at {ms}"),
            }],
        }
    }

    #[test]
    fn ingest_samples_and_notes_drops() {
        let sh = Shared::new("braid0", json!({}), None);
        sh.ingest(snap(1000, 0));
        sh.ingest(snap(2000, 5));
        // More drops each second: summed into one note per 10 s.
        for (i, d) in [(3, 7), (4, 10), (12, 11), (13, 20)] {
            sh.ingest(snap(i * 1000, d));
        }
        let st = sh.lock();
        assert_eq!(st.seq, 6);
        assert_eq!(st.history.short().count(), 6);
        let texts: Vec<&str> = st
            .timeline
            .all()
            .iter()
            .map(|n| n.text.as_str())
            .filter(|t| t.starts_with("drops"))
            .collect();
        assert_eq!(texts, ["drops: queue +5", "drops: queue +6"]);
    }

    #[test]
    fn the_worker_stops_when_asked() {
        let inbox = Arc::new(Inbox::default());
        let sh = Arc::new(Shared::new("braid0", json!({}), None));
        let t = {
            let (i, s) = (inbox.clone(), sh.clone());
            std::thread::spawn(move || run(&i, &s))
        };
        *inbox.slot.lock().unwrap() = Some(snap(1000, 0));
        inbox.ready.notify_one();
        inbox.stop.store(true, Ordering::Relaxed);
        inbox.ready.notify_one();
        t.join().unwrap();
        assert!(inbox.slot.lock().unwrap().is_none() || sh.lock().seq == 0);
    }
}
