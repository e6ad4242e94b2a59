//! The monitor's snapshot: once a second, the same `status` and `class-show` answers the
//! control socket gives, handed to the monitor's worker without waiting
//! ([`crate::monitor::Monitor::publish`]).
use braid_core::Instant;

use super::requests::{add_session, handle_request, raw_ip_status};
use super::Daemon;
use crate::config::Config;
use crate::control::Request;
use crate::monitor::{self, Monitor, Snapshot};

/// Start the monitor's threads on its bound listener.
pub(super) fn start(bound: monitor::Bound, cfg: &Config, now: Instant) -> anyhow::Result<Monitor> {
    let m = Monitor::start(bound, &cfg.bond.interface, monitor::summary::of(cfg), now)?;
    crate::log::dlog!(
        now,
        "monitor: dashboard on http://{}/ (metrics on /metrics){}",
        m.addr(),
        if cfg.monitor.as_ref().is_some_and(|s| s.token.is_some()) {
            ", token required"
        } else {
            ""
        }
    );
    Ok(m)
}

impl Daemon {
    /// When due, build the snapshot and offer it to the monitor.
    pub(super) fn publish_snapshot(&mut self, now: Instant) {
        if !self.monitor.as_ref().is_some_and(|m| m.due(now)) {
            return;
        }
        let mut status = handle_request(
            now,
            &mut self.ep,
            &mut self.paths,
            Request::Status,
            (&self.interface, &self.address),
            self.tun_frames.counters,
            self.sock,
        );
        if self.raw_ip {
            raw_ip_status(&mut status, &self.ep, &self.paths);
        }
        add_session(&mut status, now, &self.ep, &self.notices, &self.privileges);
        let classes = self.ep.bond().shaper().and_then(|_| {
            crate::classes::show(now, self.ep.bond())
                .get("classes")
                .cloned()
        });
        let snap = Snapshot {
            unix_ms: monitor::unix_ms(),
            status,
            classes,
            notes: Vec::new(),
        };
        if let Some(m) = &mut self.monitor {
            m.publish(now, snap);
        }
    }
}
