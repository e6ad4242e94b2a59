//! The TUN side of the loop, with or without offloads. Offloaded (`IFF_VNET_HDR` with
//! TSO/USO), one read may be a superframe of up to 64 KB that is cut into MTU-sized packets
//! for the endpoint (`braid_core::offload::split`), and the packets the endpoint delivers
//! are merged into superframes (`braid_core::offload::coalesce`, TCP GRO) and written at
//! the end of the turn, a few writes for a burst instead of one per packet. Without
//! offloads, one packet per read and per write, as before.

use braid_core::offload::coalesce::{Coalescer, PushError};
use braid_core::offload::split::{read_frame, Frame};
use braid_core::offload::MAX_FRAME;

use super::Device;

/// Frames a turn's deliveries may fill before they are written.
const GRO_FRAMES: usize = 64;

/// TUN traffic counters (shown in `status` as `tun`).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct TunCounters {
    /// Reads that returned a packet or a superframe.
    pub reads: u64,
    /// Packets those reads held (superframes cut apart).
    pub read_packets: u64,
    /// Reads dropped: a virtio header or superframe that did not parse.
    pub read_errors: u64,
    /// Writes (each one packet, or a superframe).
    pub writes: u64,
    /// Packets those writes held.
    pub write_packets: u64,
    /// Packets not written: the device refused the write, or a packet did not fit a frame.
    pub write_errors: u64,
}

/// Reads and writes of the bond's device, offloaded or not.
#[derive(Debug)]
pub struct TunFrames {
    /// One read (a superframe, with its virtio header, when offloaded).
    frame: Vec<u8>,
    /// The packet handed out: a copy of a read packet, or one cut from a superframe.
    /// The receiver may swap it for a buffer of its own ([`Endpoint::handle_tun_vec`]).
    ///
    /// [`Endpoint::handle_tun_vec`]: braid_core::endpoint::Endpoint::handle_tun_vec
    packet: Vec<u8>,
    /// Offloaded: the coalescer for writes.
    offloaded: Option<Coalescer>,
    /// Packets in the coalescer.
    pending: u64,
    /// What went through.
    pub counters: TunCounters,
}

impl TunFrames {
    /// For a device that carries the virtio header (`vnet_hdr`), merging UDP too when it
    /// has USO.
    pub fn new(vnet_hdr: bool, uso: bool) -> TunFrames {
        TunFrames {
            frame: vec![0; MAX_FRAME],
            packet: Vec::new(),
            offloaded: vnet_hdr.then(|| Coalescer::new(GRO_FRAMES, MAX_FRAME).with_udp(uso)),
            pending: 0,
            counters: TunCounters::default(),
        }
    }

    /// One read from `dev`, its packets handed to `each`. False when there was nothing to
    /// read (or a transient error: the next turn tries again).
    pub fn read(&mut self, dev: &dyn Device, mut each: impl FnMut(&mut Vec<u8>)) -> bool {
        let n = match dev.read(&mut self.frame) {
            Ok(n) if n > 0 => n,
            _ => return false,
        };
        self.counters.reads += 1;
        let Some(buf) = self.frame.get_mut(..n) else {
            return true;
        };
        let packet = &mut self.packet;
        let mut whole = |p: &[u8]| {
            packet.clear();
            packet.extend_from_slice(p);
            each(packet);
        };
        if self.offloaded.is_none() {
            self.counters.read_packets += 1;
            whole(buf);
            return true;
        }
        match read_frame(buf) {
            Ok(Frame::Packet(p)) => {
                self.counters.read_packets += 1;
                whole(p);
            }
            // Each segment is cut straight into the buffer handed out.
            Ok(Frame::Segments(mut s)) => loop {
                packet.resize(s.segment_len(), 0);
                match s.next_into(packet) {
                    Ok(Some(len)) => {
                        self.counters.read_packets += 1;
                        packet.truncate(len);
                        each(packet);
                    }
                    Ok(None) => break,
                    Err(_) => {
                        self.counters.read_errors += 1;
                        break;
                    }
                }
            },
            Err(_) => self.counters.read_errors += 1,
        }
        true
    }

    /// A packet the endpoint delivered: written at once, or (offloaded) merged into the
    /// turn's frames, which [`TunFrames::flush`] writes.
    pub fn deliver(&mut self, dev: &dyn Device, packet: &[u8]) {
        let Some(gro) = self.offloaded.as_mut() else {
            self.counters.writes += 1;
            self.counters.write_packets += 1;
            if dev.write(packet).is_err() {
                self.counters.write_errors += 1;
            }
            return;
        };
        match gro.push(packet) {
            Ok(_) => self.pending += 1,
            Err(PushError::TooLarge) => self.counters.write_errors += 1,
            Err(PushError::Full) => {
                self.flush(dev);
                self.deliver(dev, packet);
            }
        }
    }

    /// Write the merged frames (offloaded; nothing to do otherwise).
    pub fn flush(&mut self, dev: &dyn Device) {
        let Some(gro) = self.offloaded.as_mut() else {
            return;
        };
        for frame in gro.frames() {
            self.counters.writes += 1;
            // A refused frame loses its packets together; it counts once.
            if dev.write(frame).is_err() {
                self.counters.write_errors += 1;
            }
        }
        self.counters.write_packets += self.pending;
        self.pending = 0;
        gro.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::offload::vnet::{self, VnetHdr};
    use std::cell::RefCell;
    use std::io;
    use std::os::fd::RawFd;

    /// A device that hands out `reads` one by one and keeps what is written.
    #[derive(Debug, Default)]
    struct Fake {
        reads: RefCell<Vec<Vec<u8>>>,
        writes: RefCell<Vec<Vec<u8>>>,
    }

    impl Device for Fake {
        fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
            let Some(r) = self.reads.borrow_mut().pop() else {
                return Err(io::ErrorKind::WouldBlock.into());
            };
            buf[..r.len()].copy_from_slice(&r);
            Ok(r.len())
        }
        fn write(&self, packet: &[u8]) -> io::Result<usize> {
            self.writes.borrow_mut().push(packet.to_vec());
            Ok(packet.len())
        }
        fn fd(&self) -> RawFd {
            -1
        }
    }

    /// An ICMP echo of `len` bytes (never merged).
    fn icmp(len: usize, id: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 1;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, id]);
        p
    }

    fn with_header(p: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; vnet::LEN];
        VnetHdr::NONE.emit(&mut f).expect("room");
        f.extend_from_slice(p);
        f
    }

    #[test]
    fn without_offloads_a_read_is_a_packet_and_a_delivery_a_write() {
        let dev = Fake::default();
        dev.reads.borrow_mut().push(icmp(84, 2));
        let mut t = TunFrames::new(false, false);
        let mut got = Vec::new();
        assert!(t.read(&dev, |p| got.push(p.to_vec())));
        assert!(!t.read(&dev, |_| panic!("nothing more")));
        assert_eq!(got, [icmp(84, 2)]);
        t.deliver(&dev, &icmp(60, 3));
        assert_eq!(*dev.writes.borrow(), [icmp(60, 3)], "written at once");
        t.flush(&dev);
        assert_eq!(dev.writes.borrow().len(), 1);
        assert_eq!((t.counters.reads, t.counters.writes), (1, 1));
    }

    /// Offloaded, the virtio header comes off what is read and goes on what is written;
    /// deliveries wait for the end of the turn; a read that is not a frame is a counted
    /// drop.
    #[test]
    fn with_offloads_the_header_comes_off_and_goes_on() {
        let dev = Fake::default();
        dev.reads.borrow_mut().push(with_header(&icmp(84, 2)));
        dev.reads.borrow_mut().push(vec![0xff; 5]); // read first: shorter than a header
        let mut t = TunFrames::new(true, false);
        let mut got = Vec::new();
        assert!(t.read(&dev, |p| got.push(p.to_vec())));
        assert!(got.is_empty());
        assert_eq!(t.counters.read_errors, 1);
        assert!(t.read(&dev, |p| got.push(p.to_vec())));
        assert_eq!(got, [icmp(84, 2)]);
        t.deliver(&dev, &icmp(60, 3));
        t.deliver(&dev, &icmp(70, 4));
        assert!(dev.writes.borrow().is_empty(), "held for the turn's end");
        t.flush(&dev);
        assert_eq!(
            *dev.writes.borrow(),
            [with_header(&icmp(60, 3)), with_header(&icmp(70, 4))]
        );
        let c = t.counters;
        assert_eq!(
            (c.reads, c.read_packets, c.writes, c.write_packets),
            (2, 1, 2, 2)
        );
    }
}
