//! A probe stream through the bond: namespace a sends a small UDP datagram to b every
//! 50 ms, b echoes it, a records when each echo came back. The echoes' arrival times give
//! every fault's outage ([`outage`]): the longest time without an echo from the fault until
//! data flows again after it.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::transfer::BOND_B;
use crate::netns::{self, now, Topology};

/// Time between probes.
pub const INTERVAL: Duration = Duration::from_millis(50);
/// The echo port in namespace b.
const ECHO_PORT: u16 = 5399;

/// A running probe stream; stopped when dropped.
pub struct Probe {
    started: Instant,
    stop: Arc<AtomicBool>,
    /// Echo arrival times, ms since `started`, in order.
    arrivals: Arc<Mutex<Vec<f64>>>,
    threads: Vec<JoinHandle<Result<()>>>,
}

impl Probe {
    /// Start the echo in b and the prober in a; times count from `started`.
    pub fn start(topo: &Topology, started: Instant) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let st = Arc::clone(&stop);
        let echo = netns::spawn_in_netns(&topo.ns_b, move || -> Result<()> {
            let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, ECHO_PORT))
                .context("binding the probe echo in b")?;
            sock.set_read_timeout(Some(Duration::from_millis(100)))?;
            let mut buf = [0u8; 64];
            while !st.load(Ordering::SeqCst) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
            Ok(())
        })?;
        std::thread::sleep(Duration::from_millis(50));
        let (st, arr) = (Arc::clone(&stop), Arc::clone(&arrivals));
        let prober = netns::spawn_in_netns(&topo.ns_a, move || -> Result<()> {
            let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
                .context("binding the prober in a")?;
            sock.set_read_timeout(Some(Duration::from_millis(5)))?;
            let to = SocketAddr::V4(SocketAddrV4::new(BOND_B, ECHO_PORT));
            let mut next = now();
            let mut seq = 0u64;
            let mut buf = [0u8; 64];
            while !st.load(Ordering::SeqCst) {
                if now() >= next {
                    // Errors (no route while a's TUN is gone) are part of an outage.
                    let _ = sock.send_to(&seq.to_be_bytes(), to);
                    seq += 1;
                    next += INTERVAL;
                }
                if let Ok((8, from)) = sock.recv_from(&mut buf) {
                    if from == to {
                        let t = now().duration_since(started).as_secs_f64() * 1000.0;
                        if let Ok(mut a) = arr.lock() {
                            a.push(t);
                        }
                    }
                }
            }
            Ok(())
        })?;
        Ok(Self {
            started,
            stop,
            arrivals,
            threads: vec![echo, prober],
        })
    }

    /// Echo arrival times so far, ms since the start.
    pub fn arrivals(&self) -> Vec<f64> {
        self.arrivals.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Milliseconds since the start.
    pub fn elapsed_ms(&self) -> f64 {
        now().duration_since(self.started).as_secs_f64() * 1000.0
    }

    /// Wait (bounded) for an echo that arrives after now; true if one came.
    pub fn wait_echo(&self, within: Duration) -> Result<bool> {
        let from = self.elapsed_ms();
        let end = now() + within;
        while now() < end {
            netns::check_interrupted()?;
            if self.arrivals().last().is_some_and(|&t| t > from) {
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(false)
    }

    /// Stop both threads; the arrival times.
    pub fn stop(mut self) -> Result<Vec<f64>> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            t.join().map_err(|_| anyhow!("probe thread panicked"))??;
        }
        Ok(self.arrivals())
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A fault's outage, from the echoes' arrival times (ms, sorted): the longest time without
/// an echo between the fault's start and the first echo after its end. `None` when no
/// echo came after its end before `until` (the bond did not recover within the case);
/// then `until - start` is how long it was out at least.
pub fn outage(arrivals: &[f64], start: f64, end: f64, until: f64) -> Option<f64> {
    let first_after = arrivals.iter().copied().find(|&t| t > end)?;
    if first_after > until {
        return None;
    }
    let mut longest = 0.0_f64;
    let mut prev = start;
    for &t in arrivals.iter().filter(|&&t| t > start && t <= first_after) {
        longest = longest.max(t - prev);
        prev = t;
    }
    Some(longest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outage_is_the_longest_silence_until_data_flows_after_the_fault() {
        // Echoes every 50 ms, a hole from 1000 to 1800.
        let mut a: Vec<f64> = (0..20).map(|i| f64::from(i) * 50.0).collect();
        a.extend((36..60).map(|i| f64::from(i) * 50.0));
        // A fault at 990 that ends at 1200: out until 1800.
        assert_eq!(outage(&a, 990.0, 1200.0, 5000.0), Some(810.0));
        // A fault that ends after the hole: the hole still counts.
        assert_eq!(outage(&a, 900.0, 2000.0, 5000.0), Some(850.0));
        // A fault before the hole that is over before it: not its outage.
        assert_eq!(outage(&a, 100.0, 200.0, 5000.0), Some(50.0));
        // No echo after the end: not recovered.
        assert_eq!(outage(&a, 2500.0, 3000.0, 5000.0), None);
        assert_eq!(outage(&a, 990.0, 1200.0, 1500.0), None);
    }
}
