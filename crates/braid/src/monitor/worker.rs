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
}

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
        if let Some(n) = drop_note(&st.latest, &snap) {
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

/// "drops: queue +12, shaper +40" when the bond's drop counters grew since `prev`.
fn drop_note(prev: &Option<Arc<Snapshot>>, cur: &Snapshot) -> Option<Note> {
    let prev = prev.as_ref()?;
    let c = |s: &Snapshot, k: &str| {
        s.status
            .get("status")
            .and_then(|v| v.get("counters"))
            .and_then(|v| v.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let parts: Vec<String> = [
        ("drop_no_path", "no path"),
        ("drop_queue", "queue"),
        ("drop_too_big", "too big"),
        ("drop_shaper", "shaper"),
        ("drop_partial", "partial"),
        ("bad_datagram", "bad datagram"),
    ]
    .iter()
    .filter_map(|(k, name)| {
        let d = c(cur, k).saturating_sub(c(prev, k));
        (d > 0).then(|| format!("{name} +{d}"))
    })
    .collect();
    (!parts.is_empty()).then(|| Note {
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
        let st = sh.lock();
        assert_eq!(st.seq, 2);
        assert_eq!(st.history.short().count(), 2);
        let texts: Vec<&str> = st.timeline.all().iter().map(|n| n.text.as_str()).collect();
        assert_eq!(texts, ["at 1000", "at 2000", "drops: queue +5"]);
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
