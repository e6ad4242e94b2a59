//! What the bond reports about itself: per-path figures, counters, events.

use crate::reorder::ReorderStats;
use crate::PathId;

/// Something the driver may want to know or log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A path came up.
    PathUp(PathId),
    /// A path went down.
    PathDown(PathId),
    /// The peer announced a new epoch: it restarted. What the bond knew of its previous
    /// run (sequence numbers, acks, clock offset) is forgotten.
    PeerRestarted,
}

/// A path's figures, for `braid status`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PathStatus {
    /// Path id.
    pub id: u16,
    /// Name.
    pub name: String,
    /// "up", "stalled" (up, but data has gone unacknowledged too long: it takes no new
    /// packets until an ack or a probe answer comes) or "down".
    pub state: &'static str,
    /// Configured bit/s.
    pub bps: u64,
    /// Estimated capacity, bit/s.
    pub capacity_bps: u64,
    /// Pacing rate, bit/s.
    pub pacing_bps: u64,
    /// Smoothed RTT, µs (0 = unknown).
    pub srtt_us: u64,
    /// Minimum RTT over the last 10 s from data acks, µs (0 = unknown).
    pub min_rtt_us: u64,
    /// Jitter: the RTT's mean deviation from probes (RFC 6298 RTTVAR), µs.
    pub rttvar_us: u64,
    /// Loss ratio 0-1.
    pub loss: f64,
    /// Bytes queued in braid for this path.
    pub queued_bytes: u64,
    /// Bytes in flight.
    pub inflight_bytes: u64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// The congestion model's mode: "startup", "drain" or "probe_bw".
    pub cc_mode: &'static str,
    /// Time the path had packets queued but its congestion window was full, ms since
    /// the daemon started (window-limited, as Linux's `tcpi_rwnd_limited`): where it grows
    /// while the path sends below its pace, acks are coming back late.
    pub window_limited_ms: u64,
    /// The one-way delay the scheduler counts for the path, µs: half the minimum RTT
    /// plus what is in flight beyond one BDP at the capacity estimate, drained at it
    /// (in Startup, no more than the smoothed RTT exceeds the minimum).
    pub owd_us: u64,
    /// Data datagrams sent.
    pub tx_packets: u64,
    /// Data bytes sent.
    pub tx_bytes: u64,
    /// Data datagrams received.
    pub rx_packets: u64,
    /// Data bytes received.
    pub rx_bytes: u64,
    /// Times the path went down.
    pub downs: u64,
    /// Microseconds since the last datagram from the peer on this path (`None`: never).
    pub last_rx_us: Option<u64>,
}

/// Bond-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BondCounters {
    /// Packets read from the TUN.
    pub tun_rx: u64,
    /// Packets delivered to the TUN.
    pub tun_tx: u64,
    /// Dropped: no usable path.
    pub drop_no_path: u64,
    /// Dropped: waited too long in braid's queue.
    pub drop_queue: u64,
    /// Dropped: an IP fragment whose datagram already lost another fragment here (the
    /// rest of it would be sent for nothing; `braid_core::fragments`).
    pub drop_fragment_group: u64,
    /// Dropped: too large for the MTU (a frame: the MTU plus its header and one VLAN
    /// tag), or empty (a frame: shorter than its Ethernet header).
    pub drop_too_big: u64,
    /// Dropped: a TCP retransmission of a segment still in a path's queue (the queued
    /// copy goes out; see `bond/retransmit.rs`).
    pub drop_redundant_retransmit: u64,
    /// Packets the shaper dropped (a leaf queue was full).
    pub drop_shaper: u64,
    /// Datagrams from a path that failed to parse.
    pub bad_datagram: u64,
    /// Datagrams for a path the bond does not know.
    pub unknown_path: u64,
    /// Data datagrams whose payload is larger than the bond's MTU, or (frames) shorter
    /// than an Ethernet header (dropped).
    pub drop_rx_too_big: u64,
    /// Data datagrams held somewhere through an outage of their path (a dead link's ARP
    /// queue keeps what was sent into it): more than 1 s (`bond::HELD_AFTER_DOWN`) later
    /// than the path's lowest delay, with the path down in between. Dropped: TCP gave
    /// them up long ago, and their acks would tell it the path's delay is seconds.
    pub drop_rx_held: u64,
    /// Packets that came in parts and could not be joined (a part was lost or moved to
    /// another path), and parts that continued nothing: dropped.
    pub drop_partial: u64,
    /// TCP SYNs whose MSS was lowered to fit one datagram (`bond.mss_clamp`).
    pub mss_clamped: u64,
    /// Times the peer announced a new epoch (it restarted).
    pub peer_restarts: u64,
    /// Times a stalled path's in-flight data was declared lost because the peer still
    /// answered its probes (the acks it waited for were not coming).
    pub stall_recoveries: u64,
    /// Packets moved off a path that went down onto live ones.
    pub rescheduled: u64,
}

/// The whole bond's figures.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BondStatus {
    /// Scheduler name.
    pub scheduler: &'static str,
    /// Paths, in the order added.
    pub paths: Vec<PathStatus>,
    /// Bond counters.
    pub counters: BondCounters,
    /// Reorder buffer counters.
    pub reorder: ReorderStats,
    /// Current reorder deadline, µs.
    pub reorder_deadline_us: u64,
    /// Delay equalisation: how long a packet on the quickest path is held now, µs (the
    /// spread of base delays being equalised; 0 when off or nothing to equalise).
    pub equalize_us: u64,
    /// The most a queued datagram left after its pacing time in the last 1-2 s, µs: how
    /// late the daemon's loop ran (a busy host). The pacers catch up that much (at most
    /// 10 ms) in a burst.
    pub pacing_lag_us: u64,
}
