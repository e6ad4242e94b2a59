//! The monitor: a dashboard page, `/metrics`, live Server-Sent Events and history, served
//! by braid itself on `[monitor] listen` (`docs/monitor.md`).
//!
//! The data path never waits for it. Once a second the daemon's loop builds a
//! [`Snapshot`] (the same JSON `braid status` and `braid class show` answer) and offers it
//! with a `try_lock` ([`Monitor::publish`]); if the worker happens to hold the lock, the
//! loop tries again a few ms later. Everything else runs in the monitor's own threads:
//!
//! | thread | what it does |
//! | --- | --- |
//! | worker ([`worker`]) | turns each snapshot into a 1 s sample (rates from counter deltas), the events, the 10 s history and its file |
//! | listener ([`http`]) | accepts at most [`http::MAX_CONNECTIONS`] connections, each in its own thread, one request each, bounded in size and time |
//!
//! | module | what it is |
//! | --- | --- |
//! | [`http`] | the listener, request parsing (`httparse`), routing, the token check |
//! | [`metrics`] | `/metrics` in the Prometheus text format |
//! | [`sample`] | one second's figures (per path and per class), as graphed |
//! | [`history`] | the last 10 min of 1 s samples, 24 h of 10 s samples, the history file |
//! | [`events`] | the event timeline: log lines of the daemon and changes seen in samples |
//! | [`sse`] | the `/events` stream |
//! | [`summary`] | the config summary the page shows |
//! | [`assets`] | the page, its script and style, embedded in the binary |
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use braid_core::Instant;
use serde_json::Value;

use crate::config::MonitorSettings;

pub mod assets;
pub mod events;
pub mod history;
pub mod http;
pub mod metrics;
pub mod sample;
pub mod sse;
pub mod summary;
pub mod worker;

pub use events::tap;

/// How often the daemon publishes a snapshot.
pub const PERIOD: Duration = Duration::from_secs(1);
/// How soon the daemon tries again when the worker held the inbox.
const RETRY: Duration = Duration::from_millis(5);

/// What the daemon hands over once a second: its `status` and `class-show` answers.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Unix time, ms.
    pub unix_ms: u64,
    /// The control socket's `status` answer (as `braid status --json`).
    pub status: Value,
    /// The `class-show` answer's `classes` (none without a shaper).
    pub classes: Option<Value>,
    /// Log lines since the last snapshot (info and above), for the timeline.
    pub notes: Vec<events::Note>,
}

/// What the daemon and the worker share: the inbox, guarded by a lock the daemon only
/// ever `try_lock`s.
#[derive(Debug, Default)]
pub struct Inbox {
    slot: Mutex<Option<Snapshot>>,
    ready: Condvar,
    stop: AtomicBool,
}

/// The daemon's handle on its monitor: publishes snapshots, stops the threads when
/// dropped (the worker writes the history file a last time).
#[derive(Debug)]
pub struct Monitor {
    inbox: Arc<Inbox>,
    next: Instant,
    pending: Vec<events::Note>,
    worker: Option<JoinHandle<()>>,
    addr: std::net::SocketAddr,
}

/// The listener, bound at start (before privileges are dropped).
#[derive(Debug)]
pub struct Bound {
    listener: std::net::TcpListener,
    settings: MonitorSettings,
}

/// Bind the monitor's listener (none when `settings` has no address): an address in use
/// is an error at start.
pub fn bind(settings: &MonitorSettings) -> anyhow::Result<Option<Bound>> {
    let Some(addr) = settings.listen else {
        return Ok(None);
    };
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("monitor: cannot listen on {addr}: {e}"))?;
    Ok(Some(Bound {
        listener,
        settings: settings.clone(),
    }))
}

impl Bound {
    /// The address it listens on (the port, when 0 was asked).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.listener.local_addr().ok()
    }
}

impl Monitor {
    /// Start the worker and the listener threads. `interface` names the bond (metrics'
    /// `bond` label, the history file); `summary` is the config summary the page shows.
    pub fn start(
        bound: Bound,
        interface: &str,
        summary: Value,
        now: Instant,
    ) -> anyhow::Result<Monitor> {
        let addr = bound
            .listener
            .local_addr()
            .map_err(|e| anyhow::anyhow!("monitor: {e}"))?;
        let inbox = Arc::new(Inbox::default());
        let history_file = bound
            .settings
            .state_dir
            .as_ref()
            .map(|d| d.join(format!("{interface}.history")));
        let shared = Arc::new(worker::Shared::new(interface, summary, history_file));
        let w = {
            let (inbox, shared) = (inbox.clone(), shared.clone());
            std::thread::Builder::new()
                .name("braid-monitor".into())
                .spawn(move || worker::run(&inbox, &shared))
                .map_err(|e| anyhow::anyhow!("monitor: cannot start its thread: {e}"))?
        };
        http::serve(bound.listener, bound.settings.token, shared)?;
        events::enable_tap();
        Ok(Monitor {
            inbox,
            next: now,
            pending: Vec::new(),
            worker: Some(w),
            addr,
        })
    }

    /// The address the listener is bound to.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// When [`Monitor::publish`] is next due.
    pub fn next_due(&self) -> Instant {
        self.next
    }

    /// Whether a snapshot is due.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Offer a snapshot to the worker without waiting: when the worker holds the inbox,
    /// the snapshot is dropped and the next try is in a few ms (the log lines are kept
    /// for it).
    pub fn publish(&mut self, now: Instant, mut snap: Snapshot) {
        self.pending.extend(events::drain_tap());
        let Ok(mut slot) = self.inbox.slot.try_lock() else {
            self.next = now + RETRY;
            return;
        };
        snap.notes = std::mem::take(&mut self.pending);
        // A snapshot the worker has not taken yet: its notes go with the new one.
        if let Some(old) = slot.take() {
            let mut notes = old.notes;
            notes.append(&mut snap.notes);
            snap.notes = notes;
        }
        *slot = Some(snap);
        drop(slot);
        self.inbox.ready.notify_one();
        // Keep to the second's grid, also after a late turn.
        while self.next <= now {
            self.next += PERIOD;
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.inbox.stop.store(true, Ordering::Relaxed);
        self.inbox.ready.notify_one();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// `braid up --monitor ADDR`: listen there, with the file's token and history settings
/// (if it has a `[monitor]` table).
pub fn cli_settings(addr: &str, file: Option<&MonitorSettings>) -> anyhow::Result<MonitorSettings> {
    use crate::config::monitor::{check_exposure, default_state_dir, parse_listen};
    let listen = parse_listen(addr).map_err(|e| anyhow::anyhow!("--monitor: {e}"))?;
    let listen = Some(listen);
    let s = match file {
        Some(f) => MonitorSettings {
            listen,
            ..f.clone()
        },
        None => MonitorSettings {
            listen,
            token: None,
            token_file: None,
            state_dir: Some(default_state_dir()),
        },
    };
    check_exposure(&s).map_err(|e| anyhow::anyhow!("--monitor: {e}"))?;
    Ok(s)
}

/// Unix time now, ms.
#[expect(
    clippy::disallowed_methods,
    reason = "the monitor's wall-clock stamp for samples and the history file (graphs and restarts need calendar time)"
)]
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
