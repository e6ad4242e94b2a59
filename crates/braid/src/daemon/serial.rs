//! A serial path's tty. What goes on the line and when is the endpoint's
//! ([`braid_core::serial::Line`] inside [`Endpoint`]: the frame codec, the two lanes, the
//! line clock, the rate); this file opens, reads, writes and closes the tty, and hands the
//! bytes between it and the endpoint (`docs/serial.md`).
//!
//! **Pacing.** The line offers bytes only while its own clock is less than
//! [`braid_core::serial::AHEAD`] ahead of the line (a pty takes ~20 KB before it
//! blocks and TIOCOUTQ on it is always 0, and a UART's buffer would hide a queue from
//! braid's scheduler just as well); [`SerialPath::flush`] hands them to the tty.
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use braid_core::serial::Line;
use braid_core::Endpoint;
use braid_core::{Instant, PathId};
use serde_json::{json, Value};

use crate::config::{termios_baud, SerialMode, SerialSettings};
use crate::sys::tty::Tty;

/// Counters of a serial path (the line's).
pub use braid_core::serial::LineCounters as SerialCounters;

/// One serial path's tty (re-opened when it fails).
#[derive(Debug)]
pub struct SerialPath {
    /// The configured line.
    pub cfg: SerialSettings,
    tty: Option<Tty>,
    /// Opened (true) or closed (false) since the endpoint's line was last told
    /// ([`SerialPath::take_change`]).
    change: Option<bool>,
}

impl SerialPath {
    /// A serial path; the tty is opened by [`SerialPath::open`].
    pub fn new(cfg: SerialSettings) -> SerialPath {
        SerialPath {
            tty: None,
            change: None,
            cfg,
        }
    }

    /// Open the tty (raw 8N1 at [`termios_baud`]).
    pub fn open(&mut self) -> io::Result<()> {
        self.close();
        let tty = Tty::open(&self.cfg.device, termios_baud(self.cfg.baud))?;
        self.tty = Some(tty);
        self.change = Some(true);
        Ok(())
    }

    /// Close the tty (after an error).
    pub fn close(&mut self) {
        if self.tty.take().is_some() {
            self.change = Some(false);
        }
    }

    /// Whether the tty was opened (`Some(true)`: the line starts afresh) or closed
    /// (`Some(false)`: what waits for it is discarded) since the last call.
    pub fn take_change(&mut self) -> Option<bool> {
        self.change.take()
    }

    /// True for `mode = "raw-ip"`: frames carry the TUN's IP packets, not braid datagrams.
    pub fn is_raw_ip(&self) -> bool {
        self.cfg.mode == SerialMode::RawIp
    }

    /// True while the tty is open.
    pub fn is_open(&self) -> bool {
        self.tty.is_some()
    }

    /// The tty's fd, for poll.
    pub fn fd(&self) -> Option<RawFd> {
        self.tty.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Write what path `id`'s line clock allows. An error means the tty failed (closed
    /// already).
    pub fn flush(&mut self, now: Instant, ep: &mut Endpoint, id: PathId) -> io::Result<()> {
        let Some(tty) = &mut self.tty else {
            return Ok(());
        };
        while let Some(chunk) = ep.poll_line_write(now, id) {
            let offered = chunk.len();
            match tty.write(chunk) {
                Ok(w) => {
                    ep.line_wrote(id, w);
                    if w < offered {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ep.line_would_block(id);
                    break;
                }
                Err(e) => {
                    self.close();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Read what the tty has (at most `batch` reads into `buf`) and hand the bytes to
    /// `on_bytes`. An error other than WouldBlock means the tty failed (closed already).
    pub fn read(
        &mut self,
        buf: &mut [u8],
        batch: usize,
        on_bytes: &mut impl FnMut(&[u8]),
    ) -> io::Result<()> {
        for _ in 0..batch {
            let Some(tty) = &mut self.tty else {
                return Ok(());
            };
            match tty.read(buf) {
                Ok(n) => {
                    if let Some(bytes) = buf.get(..n) {
                        on_bytes(bytes);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    self.close();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// For `status`: the settings, the tty, and `line`'s figures.
    pub fn json(&self, now: Instant, line: Option<&Line>) -> Value {
        let s = line.map(|l| l.status(now));
        json!({
            "device": self.cfg.device.display().to_string(),
            "baud": self.cfg.baud,
            "termios_baud": termios_baud(self.cfg.baud),
            "framing": self.cfg.framing.as_str(),
            "mode": self.cfg.mode.as_str(),
            "mtu": self.cfg.mtu,
            "tty": if self.tty.is_some() { "open" } else { "closed" },
            "backlog_ms": s.as_ref().map(|s| s.backlog_ms),
            "datagram_per_line_byte": s.as_ref().map(|s| s.datagram_per_line_byte),
            "cslip_tx": s.as_ref().map(|s| s.cslip_tx),
            "cslip_rx": s.as_ref().map(|s| s.cslip_rx),
            "counters": s.as_ref().map(|s| s.counters),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::time::Duration;

    use braid_core::serial::Framing;
    use braid_core::PathKind;

    use super::*;
    use crate::sys::tty::open_pty;

    fn settings(device: &std::path::Path, baud: u32, mode: SerialMode) -> SerialSettings {
        SerialSettings {
            device: device.to_owned(),
            baud,
            framing: Framing::Slip,
            mtu: 1420,
            auto_bps: true,
            mode,
            crc: false,
        }
    }

    /// An endpoint with one serial path of `cfg`.
    fn endpoint(cfg: &SerialSettings) -> (Endpoint, PathId) {
        let c = crate::config::Config::parse(
            "[bond]\naddress = \"10.0.0.1/30\"\nencryption = \"none\"\n",
            "t.toml",
        )
        .unwrap();
        let (mut ep, _) = c.build_endpoint(Instant::ZERO).unwrap();
        let pc = crate::config::path_config("s0", 7000, 0);
        let kind = PathKind::Line(cfg.line_config());
        let id = ep.add_path(Instant::ZERO, pc, kind, None).unwrap();
        (ep, id)
    }

    fn at_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    /// Everything the pty passes on (a pty hands bytes over through a work queue: wait
    /// until it has been quiet for 50 ms).
    fn drain(master: &mut std::fs::File) -> usize {
        let mut buf = [0u8; 65536];
        let mut n = 0;
        loop {
            let mut fds = [crate::sys::poll::readable(master.as_raw_fd())];
            match crate::sys::poll::wait(&mut fds, Some(Duration::from_millis(50))) {
                Ok(r) if r > 0 => {}
                _ => return n,
            }
            match master.read(&mut buf) {
                Ok(k) if k > 0 => n += k,
                _ => return n,
            }
        }
    }

    /// The tty gets what the line clock allows and no more: a raw-ip line at 9600 bd
    /// (960 bytes a second) written through a pty.
    #[test]
    fn the_tty_gets_what_the_line_clock_allows() {
        let (mut master, slave) = open_pty(9600).unwrap();
        let cfg = settings(slave.path(), 9600, SerialMode::RawIp);
        let (mut ep, id) = endpoint(&cfg);
        let mut p = SerialPath::new(cfg);
        p.open().unwrap();
        assert_eq!(p.take_change(), Some(true));
        ep.line_opened(id);
        // A raw-ip line carries the TUN's packet as it is.
        ep.handle_tun_packet(at_ms(1000), &[0x45; 1000]);
        p.flush(at_ms(1000), &mut ep, id).unwrap();
        assert_eq!(drain(&mut master), 9, "AHEAD = 10 ms at 960 B/s");
        p.flush(at_ms(1000), &mut ep, id).unwrap();
        assert_eq!(
            drain(&mut master),
            0,
            "nothing more until the line sent some"
        );
        for ms in 1001..=1300 {
            p.flush(at_ms(ms), &mut ep, id).unwrap();
        }
        let n = drain(&mut master);
        assert!((287..=289).contains(&n), "{n}");
        for ms in 1301..=3000 {
            p.flush(at_ms(ms), &mut ep, id).unwrap();
        }
        assert_eq!(
            drain(&mut master),
            1002 - 9 - n,
            "the rest, END bytes included"
        );
        assert_eq!(ep.line(id).unwrap().counters().tx_line_bytes, 1002);
        // Closed: what waits is discarded and sends are refused (counted).
        p.close();
        assert_eq!(p.take_change(), Some(false));
        ep.line_closed(id);
        ep.handle_tun_packet(at_ms(4000), &[0x45; 100]);
        assert_eq!(ep.line(id).unwrap().counters().tx_closed, 1);
    }

    #[test]
    fn a_vanished_device_is_an_error_that_names_it() {
        let mut p = SerialPath::new(settings(
            std::path::Path::new("/dev/braid-no-tty"),
            9600,
            SerialMode::Bond,
        ));
        let e = p.open().unwrap_err();
        assert!(e.to_string().contains("/dev/braid-no-tty"), "{e}");
        assert!(!p.is_open());
        assert_eq!(p.take_change(), None);
    }

    /// `braid status --json` shows these names for a serial path (scripts read them).
    #[test]
    fn status_names_stay_as_they_were() {
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let cfg = SerialSettings {
            framing: Framing::Cslip,
            ..settings(
                std::path::Path::new("/dev/braid-no-tty"),
                9600,
                SerialMode::Bond,
            )
        };
        let (ep, id) = endpoint(&cfg);
        let v = SerialPath::new(cfg).json(at_ms(0), ep.line(id));
        assert_eq!(
            keys(&v),
            [
                "backlog_ms",
                "baud",
                "counters",
                "cslip_rx",
                "cslip_tx",
                "datagram_per_line_byte",
                "device",
                "framing",
                "mode",
                "mtu",
                "termios_baud",
                "tty"
            ]
        );
        assert_eq!(
            keys(&v["counters"]),
            [
                "rx_bad_frames",
                "rx_crc_errors",
                "rx_cslip_errors",
                "rx_frames",
                "rx_line_bytes",
                "rx_short_dropped",
                "tx_closed",
                "tx_frames",
                "tx_line_bytes",
                "tx_overflow",
                "tx_would_block"
            ]
        );
        assert_eq!(
            keys(&v["cslip_tx"]),
            ["compressed", "nontcp", "tcp", "uncompressed"]
        );
        assert_eq!(
            keys(&v["cslip_rx"]),
            [
                "badcheck",
                "compressed",
                "errors",
                "ip",
                "runts",
                "tossed",
                "uncompressed"
            ]
        );
        assert_eq!(v["tty"], "closed");
        assert_eq!(v["backlog_ms"], 0.0);
        assert!(v["datagram_per_line_byte"].as_f64().is_some());
    }
}
