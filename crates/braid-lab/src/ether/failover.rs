//! One failover measurement: a 1 ms probe stream through a bond, the member that carries
//! it cut (carrier: `ip link set down`, the veth's peer loses carrier too) or silenced
//! (a blackhole qdisc on the egress of both its ends: no frame, no LACPDU either way,
//! carrier up, so only LACP's partner expiry can notice), and the stream's longest
//! silence from the cut.
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use anyhow::{bail, Result};
use serde::Serialize;

use super::net;
use super::probe::{self, Gap};
use crate::capture::realtime_ns;
use crate::netns;

/// How a member is taken away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Cut {
    /// Link down on the sending side's port: both ends lose carrier.
    Carrier,
    /// Neither end of the member sends anything (LACPDUs included); carrier stays up.
    Silence,
}

impl Cut {
    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Cut::Carrier => "carrier",
            Cut::Silence => "silent partner",
        }
    }
}

/// A member port on the stream's sending side.
#[derive(Clone, Debug)]
pub struct Port {
    /// Its namespace.
    pub ns: String,
    /// Its device.
    pub dev: String,
    /// Its tbf rate, to put back after a silence (None: unshaped).
    pub rate_mbit: Option<f64>,
    /// The other end of its veth (namespace, device): silenced too, so that the member
    /// is dead both ways with carrier up (a dead media converter, a hung partner).
    pub peer: Option<(String, String)>,
}

/// Where the probe stream goes.
#[derive(Clone, Debug)]
pub struct Flow {
    /// Sender's namespace.
    pub src_ns: String,
    /// Sender's address.
    pub src: Ipv4Addr,
    /// Receiver's namespace.
    pub dst_ns: String,
    /// Receiver's address.
    pub dst: Ipv4Addr,
}

/// The result of one failover.
#[derive(Clone, Debug, Serialize)]
pub struct Failover {
    /// How the member was taken away.
    pub cut: Cut,
    /// The port that was cut (the one carrying the stream).
    pub port: String,
    /// The stream from the cut to the end of the hold.
    pub gap: Gap,
    /// Datagrams sent / lost over the whole stream.
    pub sent: u64,
    /// Lost over the whole stream.
    pub lost: u64,
    /// Received twice or more over the whole stream.
    pub duplicates: u64,
}

impl Failover {
    /// One line for the report.
    pub fn line(&self) -> String {
        format!(
            "{:<15} {:>6}: gap {:>8.1} ms, {} of {} datagrams lost ({} in the gap), {} duplicated{}",
            self.cut.name(),
            self.port,
            self.gap.gap_ms,
            self.lost,
            self.sent,
            self.gap.lost,
            self.duplicates,
            if self.gap.after == 0 {
                ", never came back"
            } else {
                ""
            }
        )
    }
}

/// Stream `flow` (one datagram per ms to UDP port 9100), find which of `ports` carries
/// it, take that one away by `cut` at 1.5 s for `hold` (then put it back), and measure the
/// stream's longest silence from the cut to the end of the hold.
pub fn measure(flow: &Flow, ports: &[Port], cut: Cut, hold: Duration) -> Result<Failover> {
    if ports.is_empty() {
        bail!("no member ports to cut");
    }
    let interval = Duration::from_millis(1);
    let secs = 1.5 + hold.as_secs_f64() + 1.0;
    let stream = probe::start(
        &flow.src_ns,
        flow.src,
        &flow.dst_ns,
        SocketAddrV4::new(flow.dst, 9100),
        interval,
        secs,
    )?;
    // The probe starts 300 ms from now; look at the members' counters over 0.5 s of it.
    netns::sleep(Duration::from_millis(800))?;
    let before = counters(ports)?;
    netns::sleep(Duration::from_millis(500))?;
    let after = counters(ports)?;
    let busiest = before
        .iter()
        .zip(&after)
        .enumerate()
        .max_by_key(|(_, (b, a))| a.saturating_sub(**b))
        .map_or(0, |(i, _)| i);
    let port = &ports[busiest];
    netns::sleep(Duration::from_millis(500))?;
    let t0 = realtime_ns();
    match cut {
        Cut::Carrier => net::set_link(&port.ns, &port.dev, false)?,
        Cut::Silence => {
            net::silence(&port.ns, &port.dev, true, port.rate_mbit)?;
            if let Some((ns, dev)) = &port.peer {
                net::silence(ns, dev, true, port.rate_mbit)?;
            }
        }
    }
    netns::sleep(hold)?;
    let t1 = realtime_ns();
    match cut {
        Cut::Carrier => {
            net::set_link(&port.ns, &port.dev, true)?;
            if let Some(m) = port.rate_mbit {
                net::shape(&port.ns, &port.dev, m)?;
            }
        }
        Cut::Silence => {
            net::silence(&port.ns, &port.dev, false, port.rate_mbit)?;
            if let Some((ns, dev)) = &port.peer {
                net::silence(ns, dev, false, port.rate_mbit)?;
            }
        }
    }
    let arrivals = stream.finish()?;
    Ok(Failover {
        cut,
        port: port.dev.clone(),
        gap: arrivals.gap(t0, t1),
        sent: arrivals.sent,
        lost: arrivals.lost(),
        duplicates: arrivals.duplicates(),
    })
}

fn counters(ports: &[Port]) -> Result<Vec<u64>> {
    ports
        .iter()
        .map(|p| net::tx_packets(&p.ns, &p.dev))
        .collect()
}
