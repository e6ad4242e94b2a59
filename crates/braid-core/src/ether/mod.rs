//! A sans-IO Ethernet bond with the Linux bonding driver's modes.
//!
//! One [`EtherBond`] decides, for each frame the host sends through the bond (a TAP),
//! which member port carries it ([`EtherBond::transmit`]), and for each frame a member
//! receives whether the host gets it ([`EtherBond::receive`]). It makes the bond's own
//! frames (LACPDUs, gratuitous ARPs, unsolicited NAs, ARP monitor probes) for the driver
//! to send ([`EtherBond::poll_transmit`]) and watches the members' carrier and, with the
//! ARP monitor, their traffic. Nothing here reads a clock or allocates per frame.
//!
//! The modes follow `drivers/net/bonding/bond_main.c` (Linux 6.x):
//!
//! | [`Mode`] | bonding | transmit | receive |
//! | --- | --- | --- | --- |
//! | `RoundRobin` | balance-rr | `bond_xmit_roundrobin_slave_get` | every member |
//! | `ActiveBackup` | active-backup | the active member | the active member only |
//! | `Xor` | balance-xor | `hash % usable` (`bond_xmit_xor_slave_get`) | every member |
//! | `Broadcast` | broadcast | every usable member | every member |
//! | `Lacp` | 802.3ad | `hash % distributing` (`bond_3ad_xor_xmit`) | collecting members |
//!
//! See `docs/ethernet.md` ("Modes") for the details and the deliberate differences.

mod arp_mon;
mod frames;
mod status;
mod types;

#[cfg(test)]
mod frames_tests;
#[cfg(test)]
mod lacp_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr};

pub use status::{DropCounts, EtherStatus, MemberStatus};
pub use types::{
    Announce, ArpMonitor, DropReason, Egress, EtherConfig, EtherConfigError, EtherEvent, Ingress,
    LacpSettings, MemberConfig, MemberId, Mode, MAX_ARP_TARGETS,
};

use crate::hash::hash_frame;
use crate::lacp::{self, Lacp, LacpConfig, PortConfig, PortId, State};
use crate::Instant;

use arp_mon::ArpState;
use frames::ETH_HLEN;

/// A frame the bond will make at [`EtherBond::poll_transmit`].
#[derive(Clone, Copy, Debug)]
enum Control {
    GratuitousArp(usize, Ipv4Addr),
    Learning(usize, [u8; 6]),
    UnsolicitedNa(usize, Ipv6Addr),
    ArpProbe(usize, Ipv4Addr),
}

/// Counters of one member.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    tx_frames: u64,
    tx_bytes: u64,
    rx_frames: u64,
    rx_bytes: u64,
    control_tx: u64,
    drops: DropCounts,
}

#[derive(Debug)]
struct Member {
    id: MemberId,
    mac: [u8; 6],
    carrier: bool,
    /// Its LACP port (802.3ad).
    port: Option<PortId>,
    arp: ArpState,
    /// The link last reported (MemberUp/MemberDown).
    reported_up: bool,
    /// May carry traffic now (refreshed after every change).
    usable: bool,
    /// 802.3ad: its actor state has Collecting.
    collecting: bool,
    counters: Counters,
}

/// Events kept for [`EtherBond::poll_event`] before the oldest are dropped.
const EVENT_QUEUE: usize = 256;

/// An Ethernet bond. See the module documentation.
#[derive(Debug)]
pub struct EtherBond {
    config: EtherConfig,
    members: Vec<Member>,
    lacp: Option<Lacp>,
    /// active-backup's active member; in the other modes (but 802.3ad), bonding's
    /// `curr_active_slave`, which round-robin uses for IGMP.
    active: Option<usize>,
    /// Round-robin's `rr_tx_counter`.
    rr_counter: u32,
    usable_count: usize,
    carrier: bool,
    control: VecDeque<Control>,
    control_cap: usize,
    control_dropped: u64,
    events: VecDeque<EtherEvent>,
    events_dropped: u64,
    /// The ARP monitor's next run.
    arp_next: Option<Instant>,
    /// active-backup ARP monitor: the member probed while none is active
    /// (`current_arp_slave`).
    arp_candidate: Option<usize>,
    tx_drops: DropCounts,
    unknown_member_rx: u64,
    /// active-backup: source MACs other than the bond's seen in frames it sent (a bridge
    /// or VMs behind the TAP), announced by learning frames on failover; at most
    /// [`LEARNED_MAX`], the oldest replaced.
    learned: Vec<[u8; 6]>,
    learned_next: usize,
}

/// The most MACs behind the bond announced on failover.
const LEARNED_MAX: usize = 64;

impl EtherBond {
    /// A bond with no members.
    pub fn new(config: EtherConfig) -> Result<EtherBond, EtherConfigError> {
        if let Some(arp) = &config.arp_monitor {
            if config.mode == Mode::Lacp {
                return Err(EtherConfigError::ArpMonitorWithLacp);
            }
            if arp.interval.is_zero() {
                return Err(EtherConfigError::ArpIntervalZero);
            }
            if arp.targets.is_empty() {
                return Err(EtherConfigError::ArpNoTargets);
            }
            if arp.targets.len() > MAX_ARP_TARGETS {
                return Err(EtherConfigError::ArpTooManyTargets(arp.targets.len()));
            }
        }
        let lacp = (config.mode == Mode::Lacp).then(|| {
            Lacp::new(LacpConfig {
                system_mac: config.mac,
                system_priority: config.lacp.system_priority,
                key: config.lacp.key,
                rate: config.lacp.rate,
                mode: config.lacp.mode,
                min_links: config.min_links,
                fallback_ab: config.lacp.fallback_ab,
            })
        });
        let mut bond = EtherBond {
            config,
            members: Vec::new(),
            lacp,
            active: None,
            rr_counter: 0,
            usable_count: 0,
            carrier: false,
            control: VecDeque::new(),
            control_cap: 0,
            control_dropped: 0,
            events: VecDeque::with_capacity(EVENT_QUEUE),
            events_dropped: 0,
            arp_next: None,
            arp_candidate: None,
            learned: Vec::with_capacity(LEARNED_MAX),
            learned_next: 0,
            tx_drops: DropCounts::default(),
            unknown_member_rx: 0,
        };
        bond.reserve_control();
        Ok(bond)
    }

    /// Adds a member; ids are 0, 1, 2... in order.
    pub fn add_member(&mut self, now: Instant, m: MemberConfig) -> MemberId {
        let index = self.members.len();
        let id = MemberId(u16::try_from(index).unwrap_or(u16::MAX));
        let port = self.lacp.as_mut().and_then(|l| {
            // Port numbers 1, 2, ...; a bond past 65535 members leaves the rest out of
            // LACP (never distributing) rather than failing.
            let number = id.0.checked_add(1)?;
            let cfg = PortConfig {
                mac: m.mac,
                number,
                priority: 255,
            };
            l.add_port(now, cfg, m.link_up).ok()
        });
        let interval = self.config.arp_monitor.as_ref().map(|a| a.interval);
        self.members.push(Member {
            id,
            mac: m.mac,
            carrier: m.link_up,
            port,
            arp: ArpState::new(now, m.link_up, interval),
            reported_up: false,
            usable: false,
            collecting: false,
            counters: Counters::default(),
        });
        if interval.is_some() && self.arp_next.is_none() {
            // bond_open queues the ARP monitor's first run at once.
            self.arp_next = Some(now);
        }
        self.reserve_control();
        self.refresh(now);
        id
    }

    /// A member's carrier changed.
    pub fn set_link(&mut self, now: Instant, m: MemberId, up: bool) {
        let Some(i) = self.index(m) else { return };
        let member = &mut self.members[i];
        if member.carrier == up {
            return;
        }
        member.carrier = up;
        if !up {
            // With the ARP monitor, a member whose carrier went is down until it is
            // heard again (bonding would find it so within 2.5 intervals, no probes
            // going out on it).
            member.arp.up = false;
        }
        if let (Some(l), Some(p)) = (self.lacp.as_mut(), member.port) {
            let _ = l.set_link(now, p, up);
        }
        self.refresh(now);
    }

    /// Where a frame from the host (Ethernet, destination first, no FCS) goes.
    pub fn transmit(&mut self, _now: Instant, frame: &[u8]) -> Egress {
        if frame.len() < ETH_HLEN {
            self.tx_drops.short += 1;
            return Egress::Drop(DropReason::Short);
        }
        let chosen = match self.config.mode {
            Mode::RoundRobin => self.rr_member(frame),
            Mode::ActiveBackup => {
                self.learn(frame);
                self.active.filter(|&i| self.members[i].usable)
            }
            Mode::Xor | Mode::Lacp => self.hashed_member(frame),
            Mode::Broadcast => {
                if self.usable_count == 0 {
                    self.tx_drops.no_member += 1;
                    return Egress::Drop(DropReason::NoMember);
                }
                let len = frame.len() as u64;
                for m in self.members.iter_mut().filter(|m| m.usable) {
                    m.counters.tx_frames += 1;
                    m.counters.tx_bytes += len;
                }
                return Egress::All;
            }
        };
        match chosen {
            Some(i) => {
                let m = &mut self.members[i];
                m.counters.tx_frames += 1;
                m.counters.tx_bytes += frame.len() as u64;
                Egress::One(m.id)
            }
            None => {
                self.tx_drops.no_member += 1;
                Egress::Drop(DropReason::NoMember)
            }
        }
    }

    /// `bond_xmit_roundrobin_slave_get`: IGMP on the current active member (or the
    /// first usable one); the rest on member `++rr_tx_counter % members`, or the first
    /// usable one after it (`bond_get_slave_by_id`).
    fn rr_member(&mut self, frame: &[u8]) -> Option<usize> {
        if frames::is_igmp(frame) {
            if let Some(a) = self.active.filter(|&i| self.members[i].usable) {
                return Some(a);
            }
            return self.first_usable_from(0);
        }
        let n = self.members.len();
        if n == 0 {
            return None;
        }
        self.rr_counter = self.rr_counter.wrapping_add(1);
        self.first_usable_from(self.rr_counter as usize % n)
    }

    fn first_usable_from(&self, start: usize) -> Option<usize> {
        let n = self.members.len();
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.members[i].usable)
    }

    /// `bond_xmit_xor_slave_get` / `bond_xmit_3ad_xor_slave_get`: the usable members in
    /// order (bonding's `usable_slaves` array), member `hash % count`.
    fn hashed_member(&self, frame: &[u8]) -> Option<usize> {
        if self.usable_count == 0 {
            return None;
        }
        let hash = hash_frame(self.config.hash, frame) as usize;
        let k = hash % self.usable_count;
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.usable)
            .nth(k)
            .map(|(i, _)| i)
    }

    /// What becomes of a frame (Ethernet, destination first, no FCS) member `m`
    /// received.
    pub fn receive(&mut self, now: Instant, m: MemberId, frame: &[u8]) -> Ingress {
        let Some(i) = self.index(m) else {
            self.unknown_member_rx += 1;
            return Ingress::Drop(DropReason::UnknownMember);
        };
        if frame.len() < ETH_HLEN {
            self.members[i].counters.drops.short += 1;
            return Ingress::Drop(DropReason::Short);
        }
        // bond_handle_frame runs recv_probe first: with arp_validate=none,
        // bond_rcv_validate marks every frame as the member's last receive, even on a
        // backup member, before bond_should_deliver_exact_match drops it.
        if self.config.arp_monitor.is_some() {
            self.members[i].arp.received(now);
        }
        // 802.3ad: bond_3ad_lacpdu_recv takes the Slow Protocols frames.
        if frames::ethertype(frame) == lacp::SLOW_PROTOCOLS_ETHERTYPE {
            if let (Some(l), Some(p)) = (self.lacp.as_mut(), self.members[i].port) {
                let r = l.handle_frame(now, p, frame);
                self.refresh(now);
                return match r {
                    Ok(()) => Ingress::Consumed,
                    Err(_) => {
                        self.members[i].counters.drops.lacp_bad += 1;
                        Ingress::Drop(DropReason::LacpBad)
                    }
                };
            }
        }
        if frames::src_mac(frame) == Some(self.config.mac) {
            self.members[i].counters.drops.looped += 1;
            return Ingress::Drop(DropReason::Looped);
        }
        let inactive = match self.config.mode {
            Mode::ActiveBackup => self.active != Some(i),
            Mode::Lacp => !self.members[i].collecting,
            Mode::RoundRobin | Mode::Xor | Mode::Broadcast => false,
        };
        if inactive {
            // bond_should_deliver_exact_match: an inactive slave's frames stay off the
            // bond. The ARP monitor's replies were taken above (last_rx).
            if self.is_arp_monitor_reply(frame) {
                return Ingress::Consumed;
            }
            self.members[i].counters.drops.inactive += 1;
            return Ingress::Drop(DropReason::Inactive);
        }
        let c = &mut self.members[i].counters;
        c.rx_frames += 1;
        c.rx_bytes += frame.len() as u64;
        Ingress::Deliver
    }

    fn is_arp_monitor_reply(&self, frame: &[u8]) -> bool {
        let Some(arp) = &self.config.arp_monitor else {
            return false;
        };
        frames::arp_reply(frame)
            .is_some_and(|(sender, target)| target == arp.source && arp.targets.contains(&sender))
    }

    /// The next frame the bond itself sends (LACPDUs, markers, gratuitous ARPs,
    /// unsolicited NAs, ARP probes), written into `buf`: the member to send it on and
    /// its length. Call until `None` after every input and timeout.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8; 1518],
    ) -> Option<(MemberId, usize)> {
        while let Some(c) = self.control.pop_front() {
            let i = match c {
                Control::GratuitousArp(i, _)
                | Control::Learning(i, _)
                | Control::UnsolicitedNa(i, _)
                | Control::ArpProbe(i, _) => i,
            };
            let Some(m) = self.members.get(i).filter(|m| m.carrier) else {
                // Its member lost carrier since: nothing to send it on.
                self.control_dropped += 1;
                continue;
            };
            let id = m.id;
            let mac = self.config.mac;
            let len = match c {
                Control::GratuitousArp(_, ip) => frames::emit_arp_request(buf, mac, ip, ip),
                Control::Learning(_, behind) => frames::emit_learning(buf, behind),
                Control::UnsolicitedNa(_, ip) => frames::emit_unsolicited_na(buf, mac, ip),
                Control::ArpProbe(_, target) => {
                    let source = self
                        .config
                        .arp_monitor
                        .as_ref()
                        .map_or(Ipv4Addr::UNSPECIFIED, |a| a.source);
                    frames::emit_arp_request(buf, mac, source, target)
                }
            };
            self.members[i].counters.control_tx += 1;
            return Some((id, len));
        }
        let l = self.lacp.as_mut()?;
        let out = buf.first_chunk_mut::<{ lacp::FRAME_LEN }>()?;
        let sent = l.poll_transmit(now, out);
        self.refresh(now);
        let (port, len) = sent?;
        let m = self.members.iter_mut().find(|m| m.port == Some(port))?;
        m.counters.control_tx += 1;
        Some((m.id, len))
    }

    /// When [`EtherBond::handle_timeout`] next has work; at or before now means at once.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let lacp = self.lacp.as_ref().and_then(Lacp::poll_timeout);
        match (lacp, self.arp_next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(l) = self.lacp.as_mut() {
            l.handle_timeout(now);
        }
        if self.arp_next.is_some_and(|t| t <= now) {
            self.arp_tick(now);
        }
        self.refresh(now);
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<EtherEvent> {
        self.events.pop_front()
    }

    /// The members traffic may go on now (all of them receive [`Egress::All`]).
    pub fn usable(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.members.iter().filter(|m| m.usable).map(|m| m.id)
    }

    /// Whether the bond has a usable member (802.3ad: `min_links` distributing).
    pub fn carrier(&self) -> bool {
        self.carrier
    }

    /// The active member (active-backup).
    pub fn active(&self) -> Option<MemberId> {
        match self.config.mode {
            Mode::ActiveBackup => self.active.map(|i| self.members[i].id),
            _ => None,
        }
    }

    /// Everything `braid status` shows.
    pub fn status(&self) -> EtherStatus {
        status::build(self)
    }

    fn index(&self, m: MemberId) -> Option<usize> {
        let i = usize::from(m.0);
        (i < self.members.len()).then_some(i)
    }

    /// A member's link as the bond sees it: carrier, and the ARP monitor when on.
    fn link_ok(&self, i: usize) -> bool {
        let m = &self.members[i];
        m.carrier && (self.config.arp_monitor.is_none() || m.arp.up)
    }

    fn push(&mut self, e: EtherEvent) {
        if self.events.len() >= EVENT_QUEUE {
            self.events.pop_front();
            self.events_dropped += 1;
        }
        self.events.push_back(e);
    }

    /// Room for one failover's announcements and two rounds of ARP probes, reserved at
    /// setup so that queueing never allocates.
    fn reserve_control(&mut self) {
        let a = &self.config.announce;
        let announce = usize::from(a.count) * (a.ipv4.len() + a.ipv6.len());
        let probes = self
            .config
            .arp_monitor
            .as_ref()
            .map_or(0, |arp| 2 * arp.targets.len() * self.members.len().max(1));
        self.control_cap = announce + LEARNED_MAX + probes + 4;
        let extra = self.control_cap.saturating_sub(self.control.len());
        self.control.reserve(extra);
    }

    fn queue(&mut self, c: Control) {
        if self.control.len() >= self.control_cap {
            self.control.pop_front();
            self.control_dropped += 1;
        }
        self.control.push_back(c);
    }

    /// After every change: LACP's events, each member's link and usability, the active
    /// member, the bond's carrier, and the events that report them.
    fn refresh(&mut self, now: Instant) {
        if let Some(l) = self.lacp.as_mut() {
            while let Some(e) = l.poll_event() {
                if self.events.len() >= EVENT_QUEUE {
                    self.events.pop_front();
                    self.events_dropped += 1;
                }
                self.events.push_back(EtherEvent::Lacp(e));
            }
        }
        for i in 0..self.members.len() {
            let up = self.link_ok(i);
            if up != self.members[i].reported_up {
                self.members[i].reported_up = up;
                let id = self.members[i].id;
                self.push(if up {
                    EtherEvent::MemberUp(id)
                } else {
                    EtherEvent::MemberDown(id)
                });
            }
        }
        if self.config.mode != Mode::Lacp {
            self.select_active(now);
        }
        let mode = self.config.mode;
        let mut count = 0;
        for i in 0..self.members.len() {
            let usable = match mode {
                Mode::ActiveBackup => self.active == Some(i),
                Mode::RoundRobin | Mode::Xor | Mode::Broadcast => self.link_ok(i),
                Mode::Lacp => {
                    let port = self.members[i].port;
                    let l = self.lacp.as_ref();
                    let collecting = port
                        .and_then(|p| l.and_then(|l| l.actor_state(p)))
                        .is_some_and(|s| s.has(State::COLLECTING));
                    self.members[i].collecting = collecting;
                    port.is_some_and(|p| l.is_some_and(|l| l.distributing_ports().any(|d| d == p)))
                }
            };
            self.members[i].usable = usable;
            count += usize::from(usable);
        }
        self.usable_count = count;
        let carrier = count > 0;
        if carrier != self.carrier {
            self.carrier = carrier;
            self.push(if carrier {
                EtherEvent::CarrierUp
            } else {
                EtherEvent::CarrierDown
            });
        }
    }

    /// `bond_select_active_slave` with `bond_find_best_slave` and
    /// `bond_choose_primary_or_current` (primary_reselect=always): the primary when its
    /// link is up, else the current active member while its link is up, else the first
    /// member whose link is up. A new active member in active-backup mode announces the
    /// bond's addresses on it (`bond_change_active_slave` sets `send_peer_notif`).
    fn select_active(&mut self, now: Instant) {
        let primary = self
            .config
            .primary
            .and_then(|p| self.index(p))
            .filter(|&p| self.link_ok(p));
        let current = self.active.filter(|&c| self.link_ok(c));
        let best = primary
            .or(current)
            .or_else(|| (0..self.members.len()).find(|&i| self.link_ok(i)));
        if best == self.active {
            return;
        }
        let from = self.active.map(|i| self.members[i].id);
        self.active = best;
        if self.config.mode != Mode::ActiveBackup {
            return;
        }
        let to = best.map(|i| self.members[i].id);
        self.push(EtherEvent::ActiveChanged { from, to });
        if let Some(b) = best {
            self.members[b].arp.made_active(now);
            self.arp_candidate = None;
            self.announce(b);
        }
    }

    /// Remember the source MAC of a frame sent (if it is not the bond's own, and
    /// unicast), for the learning frames of the next failover.
    fn learn(&mut self, frame: &[u8]) {
        let Some(src) = frames::src_mac(frame) else {
            return;
        };
        if src == self.config.mac || src[0] & 1 != 0 || self.learned.contains(&src) {
            return;
        }
        if self.learned.len() < LEARNED_MAX {
            self.learned.push(src);
        } else {
            self.learned[self.learned_next] = src;
            self.learned_next = (self.learned_next + 1) % LEARNED_MAX;
        }
    }

    /// A learning frame (Open vSwitch's) for each MAC seen behind the bond, then `count`
    /// rounds of a gratuitous ARP per IPv4 address and an unsolicited NA per
    /// IPv6 address, on member `i` (NETDEV_NOTIFY_PEERS: `inet_gratuitous_arp`,
    /// `ndisc_send_unsol_na`).
    fn announce(&mut self, i: usize) {
        for k in 0..self.learned.len() {
            let mac = self.learned[k];
            self.queue(Control::Learning(i, mac));
        }
        for _ in 0..self.config.announce.count {
            for k in 0..self.config.announce.ipv4.len() {
                let ip = self.config.announce.ipv4[k];
                self.queue(Control::GratuitousArp(i, ip));
            }
            for k in 0..self.config.announce.ipv6.len() {
                let ip = self.config.announce.ipv6[k];
                self.queue(Control::UnsolicitedNa(i, ip));
            }
        }
    }
}
