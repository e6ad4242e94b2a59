//! A serial path's IO: the tty around the core's line model
//! ([`braid_core::serial::Line`]: the frame codec, the two lanes, the line clock, the
//! rate). The tty is opened, read, written and closed here; what to write when, and what
//! the bytes read mean, is the line's (`docs/serial.md`).
//!
//! **Pacing.** The line offers bytes only while its own clock is less than
//! [`braid_core::serial::line::AHEAD`] ahead of the line (a pty takes ~20 KB before it
//! blocks and TIOCOUTQ on it is always 0, and a UART's buffer would hide a queue from
//! braid's scheduler just as well); [`SerialPath::flush`] hands them to the tty. Frames
//! waiting for the line are bounded ([`SerialPath::send`] refuses a frame beyond it,
//! counted); the bond's pacer is held to the line's datagram rate
//! ([`SerialPath::rate_update`]) so that buffer stays short.
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use braid_core::serial::{Line, LineConfig};
use braid_core::Instant;
use serde_json::{json, Value};

use crate::config::{termios_baud, SerialMode, SerialSettings};
use crate::sys::tty::Tty;

/// Counters of a serial path (the line's).
pub use braid_core::serial::LineCounters as SerialCounters;

/// The line model's settings for a path's.
fn line_config(cfg: &SerialSettings) -> LineConfig {
    LineConfig {
        baud: cfg.baud,
        framing: cfg.framing,
        mtu: cfg.mtu,
        raw_ip: cfg.mode == SerialMode::RawIp,
        crc: cfg.mode == SerialMode::Bond && cfg.crc,
        auto_bps: cfg.auto_bps,
    }
}

/// One serial path: the tty (re-opened when it fails) and its line.
#[derive(Debug)]
pub struct SerialPath {
    /// The configured line.
    pub cfg: SerialSettings,
    tty: Option<Tty>,
    line: Line,
}

impl SerialPath {
    /// A serial path; the tty is opened by [`SerialPath::open`].
    pub fn new(cfg: SerialSettings, initial_bps: u64) -> SerialPath {
        SerialPath {
            line: Line::new(line_config(&cfg), initial_bps),
            tty: None,
            cfg,
        }
    }

    /// Open the tty (raw 8N1 at [`termios_baud`]); the line starts afresh (CSLIP: the
    /// peer's decompressor resynchronises on the next uncompressed packet).
    pub fn open(&mut self) -> io::Result<()> {
        self.close();
        let tty = Tty::open(&self.cfg.device, termios_baud(self.cfg.baud))?;
        self.line.open();
        self.tty = Some(tty);
        Ok(())
    }

    /// Close the tty (after an error); pending bytes are discarded.
    pub fn close(&mut self) {
        self.tty = None;
        self.line.close();
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

    /// The line model.
    pub fn line(&self) -> &Line {
        &self.line
    }

    /// The counters.
    pub fn counters(&self) -> SerialCounters {
        self.line.counters()
    }

    /// Frame one datagram for the line, behind the other data frames. False (counted)
    /// when the tty is closed or the path's buffer is full.
    pub fn send(&mut self, datagram: &[u8]) -> bool {
        self.send_as(datagram, false)
    }

    /// Frame one datagram; a `control` one (probe, probe answer, ack, handshake) goes
    /// on the line before the data frames that wait (after the one being written).
    pub fn send_as(&mut self, datagram: &[u8], control: bool) -> bool {
        self.line.send(datagram, control)
    }

    /// Write what the line clock allows. An error means the tty failed (closed already).
    pub fn flush(&mut self, now: Instant) -> io::Result<()> {
        let Some(tty) = &mut self.tty else {
            return Ok(());
        };
        while let Some(chunk) = self.line.poll_write(now) {
            let offered = chunk.len();
            match tty.write(chunk) {
                Ok(w) => {
                    self.line.wrote(w);
                    if w < offered {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.line.would_block();
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

    /// When the writer next has room (if it has bytes waiting).
    pub fn next_write(&self) -> Option<Instant> {
        self.line.next_write()
    }

    /// Read what the tty has (at most `batch` reads into `buf`) and hand each datagram to
    /// `on_datagram`. An error other than WouldBlock means the tty failed (closed already).
    pub fn read(
        &mut self,
        buf: &mut [u8],
        batch: usize,
        on_datagram: &mut impl FnMut(&[u8]),
    ) -> io::Result<()> {
        for _ in 0..batch {
            let Some(tty) = &mut self.tty else {
                return Ok(());
            };
            match tty.read(buf) {
                Ok(n) => {
                    if let Some(bytes) = buf.get(..n) {
                        self.line.receive(bytes, on_datagram);
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

    /// The data datagram rate (bit/s) the line can carry now, when it is time to
    /// recompute it and the path's `bps` is automatic ([`Line::rate_update`]).
    pub fn rate_update(&mut self, now: Instant) -> Option<u64> {
        self.line.rate_update(now)
    }

    /// The backlog above which the rate is lowered ([`Line::backlog_target`]).
    pub fn backlog_target(&self) -> Duration {
        self.line.backlog_target()
    }

    /// When [`SerialPath::rate_update`] next has something to say.
    pub fn next_rate_update(&self) -> Instant {
        self.line.next_rate_update()
    }

    /// Line time of everything written but not yet sent, plus what waits in the buffer.
    pub fn backlog(&self, now: Instant) -> Duration {
        self.line.backlog(now)
    }

    /// For `status`.
    pub fn json(&self, now: Instant) -> Value {
        let s = self.line.status(now);
        json!({
            "device": self.cfg.device.display().to_string(),
            "baud": self.cfg.baud,
            "termios_baud": termios_baud(self.cfg.baud),
            "framing": self.cfg.framing.as_str(),
            "mode": self.cfg.mode.as_str(),
            "mtu": self.cfg.mtu,
            "tty": if self.tty.is_some() { "open" } else { "closed" },
            "backlog_ms": s.backlog_ms,
            "datagram_per_line_byte": s.datagram_per_line_byte,
            "cslip_tx": s.cslip_tx,
            "counters": s.counters,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use braid_core::serial::cslip::ip_checksum;
    use braid_core::serial::{FrameCodec, Framing};
    use braid_core::wire::{self, Header, Message, MessageType, DATA_HEADER_LEN};

    use super::*;
    use crate::sys::tty::open_pty;

    /// An IPv4/TCP packet with ACK set, `data` bytes of payload, seq `seq`.
    fn tcp(seq: u32, data: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + data];
        let len = u16::try_from(p.len()).unwrap();
        p[0] = 0x45;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p[4..6].copy_from_slice(&(seq as u16).to_be_bytes()); // id
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 200, 0, 1]);
        p[16..20].copy_from_slice(&[10, 200, 0, 2]);
        let c = ip_checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&5000u16.to_be_bytes());
        p[22..24].copy_from_slice(&5201u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&7u32.to_be_bytes());
        p[32] = 0x50;
        p[33] = 0x10;
        p[34..36].copy_from_slice(&1000u16.to_be_bytes());
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = (i * 7 + seq as usize) as u8; // includes 0xC0 and 0xDB now and then
        }
        p
    }

    fn data(seq: u64, ip: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; DATA_HEADER_LEN + ip.len()];
        let h = Header {
            path: 3,
            timestamp: 77,
        };
        wire::emit_data_header_as(&h, MessageType::Data, seq, seq as u32, &mut d).unwrap();
        d[DATA_HEADER_LEN..].copy_from_slice(ip);
        d
    }

    fn probe() -> Vec<u8> {
        let mut d = vec![0u8; 64];
        let h = Header {
            path: 1,
            timestamp: 5,
        };
        let n = wire::emit(
            &h,
            &Message::Probe {
                probe_seq: 9,
                epoch: Some(1),
            },
            &mut d,
        )
        .unwrap();
        d.truncate(n);
        d
    }

    fn settings(device: &std::path::Path, baud: u32) -> SerialSettings {
        SerialSettings {
            device: device.to_owned(),
            baud,
            framing: Framing::Slip,
            mtu: 1420,
            auto_bps: true,
            mode: SerialMode::Bond,
            crc: false,
        }
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

    /// Flush every ms from `from` to `to` (inclusive).
    fn step(p: &mut SerialPath, from: u64, to: u64) {
        for ms in from..=to {
            p.flush(at_ms(ms)).unwrap();
        }
    }

    #[test]
    fn writer_keeps_to_the_line_clock() {
        let (mut master, slave) = open_pty(9600).unwrap();
        let mut p = SerialPath::new(settings(slave.path(), 9600), 7000);
        p.open().unwrap();
        assert!(p.is_open());
        // 960 bytes/s: 10 ms is 9.6 bytes.
        assert!(p.send(&vec![0x11; 1000]));
        p.flush(at_ms(1000)).unwrap();
        assert_eq!(drain(&mut master), 9, "AHEAD = 10 ms at 960 B/s");
        // Nothing more until the line has sent some.
        p.flush(at_ms(1000)).unwrap();
        assert_eq!(drain(&mut master), 0);
        let next = p.next_write().unwrap();
        assert!(next > at_ms(1000) && next <= at_ms(1006), "{next:?}");
        // A late flush still writes only AHEAD: the line sent nothing meanwhile.
        p.flush(at_ms(1200)).unwrap();
        assert_eq!(drain(&mut master), 9);
        // Flushing every ms for 300 ms: 288 more bytes.
        step(&mut p, 1201, 1500);
        let n = drain(&mut master);
        assert!((287..=289).contains(&n), "{n}");
        step(&mut p, 1501, 3000);
        assert_eq!(
            drain(&mut master),
            1002 - 18 - n,
            "the rest, END bytes included"
        );
        assert_eq!(p.counters().tx_line_bytes, 1002);
        assert_eq!(p.next_write(), None);
        // Idle: the next frame starts from now, not from the past.
        assert!(p.send(&[1, 2, 3]));
        p.flush(at_ms(10_000)).unwrap();
        assert_eq!(drain(&mut master), 5);
        // The buffer holds two full frames (more than 0.5 s at this rate).
        assert!(p.send(&vec![0x11; 1400]));
        assert!(p.send(&vec![0x11; 1400]));
        assert!(!p.send(&vec![0x11; 1400]));
        assert_eq!(p.counters().tx_overflow, 1);
    }

    /// Everything the pty passes on, as bytes.
    fn drain_bytes(master: &mut std::fs::File) -> Vec<u8> {
        let mut buf = [0u8; 65536];
        let mut out = Vec::new();
        loop {
            let mut fds = [crate::sys::poll::readable(master.as_raw_fd())];
            match crate::sys::poll::wait(&mut fds, Some(Duration::from_millis(50))) {
                Ok(r) if r > 0 => {}
                _ => return out,
            }
            match master.read(&mut buf) {
                Ok(k) if k > 0 => out.extend_from_slice(&buf[..k]),
                _ => return out,
            }
        }
    }

    #[test]
    fn control_frames_go_before_waiting_data_but_never_inside_a_frame() {
        let (mut master, slave) = open_pty(9600).unwrap();
        let mut p = SerialPath::new(settings(slave.path(), 9600), 7000);
        p.open().unwrap();
        let d1 = data(1, &tcp(1, 100));
        let d2 = data(2, &tcp(2, 100));
        assert!(p.send(&d1));
        assert!(p.send(&d2));
        // The first frame starts now; the probe comes while it is on the line.
        p.flush(at_ms(1000)).unwrap();
        assert!(p.send_as(&probe(), true));
        step(&mut p, 1001, 1600);
        let line = drain_bytes(&mut master);
        let mut rx = FrameCodec::new(Framing::Slip, 1420);
        let mut got = Vec::new();
        rx.decode(&line, &mut |d| got.push(d.to_vec()));
        assert_eq!(got, vec![d1, probe(), d2]);
        assert_eq!(rx.counters().rx_bad_frames, 0);
        // The control lane is bounded on its own: a full data buffer does not stop it.
        let big = vec![0x11; 1400];
        while p.send(&big) {}
        assert!(p.send_as(&probe(), true));
    }

    #[test]
    fn rate_follows_the_measured_line_bytes_and_the_backlog() {
        let (mut master, slave) = open_pty(115200).unwrap();
        let cfg = settings(slave.path(), 115200);
        let initial = crate::config::serial_bps(115200, Framing::Cslip, 1420);
        let mut p = SerialPath::new(
            SerialSettings {
                framing: Framing::Cslip,
                ..cfg
            },
            initial,
        );
        p.open().unwrap();
        assert!(p
            .rate_update(at_ms(0))
            .is_some_and(|b| b.abs_diff(initial) < 100));
        // Compressed TCP: fewer line bytes than datagram bytes, so the rate goes up.
        for round in 1..=20u64 {
            for k in 0..4u32 {
                let seq = (round as u32) * 4 + k;
                assert!(
                    p.send(&data(u64::from(seq), &tcp(seq * 1000, 1000))),
                    "{round} {k} {:?} {}",
                    p.counters(),
                    p.line().pending()
                );
            }
            // Let the line take it all (no backlog).
            step(&mut p, round * 1000, round * 1000 + 900);
            drain(&mut master);
            let _ = p.rate_update(at_ms(round * 1000 + 950));
        }
        let bps = p.rate_update(at_ms(30_000)).unwrap();
        assert!(
            bps > 92_160,
            "{bps} above 80% of 115200: headers compressed"
        );
        // A backlog lowers it.
        for k in 0..4u32 {
            assert!(p.send(&data(u64::from(k), &tcp(k * 1000, 1000))));
        }
        let slow = p.rate_update(at_ms(31_000)).unwrap();
        assert!(slow < bps * 9 / 10, "{slow} {bps}");
        // A fixed bps is left alone.
        let mut fixed = SerialPath::new(
            SerialSettings {
                auto_bps: false,
                ..settings(slave.path(), 115200)
            },
            5000,
        );
        assert_eq!(fixed.rate_update(at_ms(0)), None);
    }

    #[test]
    fn a_vanished_device_is_an_error_that_names_it() {
        let mut p = SerialPath::new(
            settings(std::path::Path::new("/dev/braid-no-tty"), 9600),
            7000,
        );
        let e = p.open().unwrap_err();
        assert!(e.to_string().contains("/dev/braid-no-tty"), "{e}");
        assert!(!p.is_open());
        assert!(!p.send(&[1, 2, 3]));
        assert_eq!(p.counters().tx_closed, 1);
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
            ..settings(std::path::Path::new("/dev/braid-no-tty"), 9600)
        };
        let v = SerialPath::new(cfg, 7000).json(at_ms(0));
        assert_eq!(
            keys(&v),
            [
                "backlog_ms",
                "baud",
                "counters",
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
        assert_eq!(v["tty"], "closed");
        assert_eq!(v["backlog_ms"], 0.0);
        assert!(v["datagram_per_line_byte"].as_f64().is_some());
        let slip = SerialPath::new(settings(std::path::Path::new("/x"), 9600), 7000);
        assert!(slip.json(at_ms(0))["cslip_tx"].is_null());
    }
}
