//! Bonding's ARP monitor with `arp_validate=none` and `missed_max=2`:
//! `bond_loadbalance_arp_mon` for balance-rr, balance-xor and broadcast,
//! `bond_activebackup_arp_mon` (inspect, commit, probe) for active-backup.
//!
//! Every `interval`, ARP requests for each target go out; with `arp_validate=none` any
//! frame received on a member counts as its last receive (`bond_rcv_validate`). The
//! windows are `bond_time_in_interval(last, k)`: `now <= last + k * interval +
//! interval / 2`.

use core::time::Duration;

use super::{Control, EtherBond, Mode};
use crate::Instant;

/// Bonding's default `missed_max`: intervals without traffic before a member is down.
const MISSED_MAX: i64 = 2;

/// A time in signed microseconds, so that "an interval and a tick before the start"
/// exists even when the driver's clock starts at zero.
type Stamp = i64;

/// Long before any window.
const NEVER: Stamp = i64::MIN / 4;

fn stamp(now: Instant) -> Stamp {
    i64::try_from(now.as_micros()).unwrap_or(i64::MAX / 4)
}

/// One member's ARP monitor state (bonding's `slave->link`, `last_rx`, `last_tx`,
/// `last_link_up`).
#[derive(Clone, Copy, Debug)]
pub(super) struct ArpState {
    pub(super) up: bool,
    last_rx: Stamp,
    last_tx: Stamp,
    last_link_up: Stamp,
}

impl ArpState {
    /// As `bond_enslave` leaves it with `arp_interval`: up with its carrier, last sent
    /// and received an interval and a tick ago (`jiffies - (arp_interval + 1)`).
    pub(super) fn new(now: Instant, carrier: bool, interval: Option<Duration>) -> Self {
        let iv = interval.map_or(0, micros);
        let before = stamp(now) - iv - 1;
        Self {
            up: carrier,
            last_rx: before,
            last_tx: before,
            last_link_up: if carrier { stamp(now) } else { NEVER },
        }
    }

    /// Something was received now.
    pub(super) fn received(&mut self, now: Instant) {
        self.last_rx = stamp(now);
    }

    /// It became the active member (`bond_change_active_slave`).
    pub(super) fn made_active(&mut self, now: Instant) {
        self.last_link_up = stamp(now);
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 4)
}

impl EtherBond {
    /// `bond_time_in_interval`.
    fn in_interval(&self, now: Instant, last: Stamp, k: i64) -> bool {
        let Some(arp) = &self.config.arp_monitor else {
            return false;
        };
        let iv = micros(arp.interval);
        let now = stamp(now);
        last - iv <= now && now <= last.saturating_add(k * iv + iv / 2)
    }

    /// One run of the monitor at `now`; the next is an interval later.
    pub(super) fn arp_tick(&mut self, now: Instant) {
        let Some(interval) = self.config.arp_monitor.as_ref().map(|a| a.interval) else {
            self.arp_next = None;
            return;
        };
        self.arp_next = Some(now + interval);
        if self.config.mode == Mode::ActiveBackup {
            self.ab_inspect_commit(now);
            self.refresh(now);
            self.ab_probe(now);
        } else {
            self.loadbalance(now);
            self.refresh(now);
        }
    }

    /// `bond_loadbalance_arp_mon`: a down member comes up when it has both sent and
    /// received within one interval; an up member goes down when it has not sent or not
    /// received within `missed_max` intervals. Then requests on every member with
    /// carrier.
    fn loadbalance(&mut self, now: Instant) {
        for i in 0..self.members.len() {
            let a = self.members[i].arp;
            let up = if !a.up {
                self.in_interval(now, a.last_tx, 1) && self.in_interval(now, a.last_rx, 1)
            } else {
                self.in_interval(now, a.last_tx, MISSED_MAX)
                    && self.in_interval(now, a.last_rx, MISSED_MAX)
            };
            self.members[i].arp.up = up && self.members[i].carrier;
            if self.members[i].carrier {
                self.probe(i, now);
            }
        }
    }

    /// `bond_ab_arp_inspect` and `bond_ab_arp_commit`: a down member comes up when it
    /// received within one interval; a member up (or made active) less than two
    /// intervals ago is left alone; the active (or probed) member goes down when it has
    /// not sent or not received within `missed_max` intervals, a backup when it has not
    /// received within `missed_max + 1` while no member is being probed.
    fn ab_inspect_commit(&mut self, now: Instant) {
        for i in 0..self.members.len() {
            let a = self.members[i].arp;
            if !a.up {
                if self.members[i].carrier && self.in_interval(now, a.last_rx, 1) {
                    let m = &mut self.members[i];
                    m.arp.up = true;
                    m.arp.last_link_up = stamp(now);
                    // A member heard: the search for one is over.
                    self.arp_candidate = None;
                }
                continue;
            }
            if self.in_interval(now, a.last_link_up, 2) {
                continue;
            }
            let active = self.active == Some(i) || self.arp_candidate == Some(i);
            let down = if active {
                !self.in_interval(now, a.last_tx, MISSED_MAX)
                    || !self.in_interval(now, a.last_rx, MISSED_MAX)
            } else {
                self.arp_candidate.is_none() && !self.in_interval(now, a.last_rx, MISSED_MAX + 1)
            };
            if down {
                self.members[i].arp.up = false;
                if self.arp_candidate == Some(i) {
                    self.arp_candidate = None;
                }
            }
        }
    }

    /// `bond_ab_arp_probe`: requests on the active member; with none, on the next member
    /// with carrier after the one probed last (`current_arp_slave`), which gets two
    /// intervals to be heard.
    fn ab_probe(&mut self, now: Instant) {
        if let Some(a) = self.active {
            self.probe(a, now);
            return;
        }
        let n = self.members.len();
        if n == 0 {
            return;
        }
        // With no member probed yet, bonding starts from the first slave and takes the
        // next one after it.
        let start = self.arp_candidate.map_or(1, |c| c + 1);
        let next = (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.members[i].carrier);
        if let Some(i) = next {
            self.arp_candidate = Some(i);
            self.members[i].arp.last_link_up = stamp(now);
            self.probe(i, now);
        }
    }

    /// `bond_arp_send_all`: a request for every target on member `i`.
    fn probe(&mut self, i: usize, now: Instant) {
        let n = self
            .config
            .arp_monitor
            .as_ref()
            .map_or(0, |a| a.targets.len());
        for k in 0..n {
            let Some(target) = self
                .config
                .arp_monitor
                .as_ref()
                .and_then(|a| a.targets.get(k).copied())
            else {
                continue;
            };
            self.queue(Control::ArpProbe(i, target));
        }
        self.members[i].arp.last_tx = stamp(now);
    }
}
