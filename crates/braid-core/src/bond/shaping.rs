//! The HTB shaper on the bond's egress (`[shape]`).
//!
//! ```text
//!  TUN ──handle_tun_packet──▶ shaper (classify, leaf queues) ──release──▶ scheduler ──▶ paths
//! ```
//!
//! With a shaper, packets from the TUN wait in its leaf queues, where HTB decides whose
//! turn it is, and go on to the scheduler only while the paths' own queues are short
//! ([`SHAPER_ROOM`] at their drain rates): the shaper feeds the bond as fast as the paths
//! drain and no faster, so a queue that builds up builds up in the shaper, by class, and
//! not in a path's FIFO. The link rate above every class is either configured
//! (`[shape] rate`) or `auto`: the sum of the up paths' drain rates plus [`AUTO_HEADROOM`],
//! refreshed at every timer, so that the paths' congestion controllers still see enough
//! traffic to find out when they get faster (the room check keeps the excess in the
//! shaper).

use core::time::Duration;

use super::Bond;
use crate::shape::{Enqueued, Shaper};
use crate::Instant;

/// The shaper releases packets while some up path holds less than this much queue.
pub const SHAPER_ROOM: Duration = Duration::from_millis(5);
/// In auto mode, the link rate is the paths' drain rate times this.
pub const AUTO_HEADROOM: f64 = 1.25;
/// Most packets released in one go (the rest at the next call).
const RELEASE_BATCH: usize = 256;

impl Bond {
    /// Put a shaper on the bond's egress (`None` removes it; queued packets are lost).
    /// `auto_rate`: follow the paths' measured capacity ([`AUTO_HEADROOM`]).
    /// The shaper is told what the bond's packets are ([`Shaper::set_frames`]).
    pub fn set_shaper(&mut self, now: Instant, mut shaper: Option<Shaper>, auto_rate: bool) {
        if let Some(s) = &mut shaper {
            s.set_frames(self.cfg.frames);
        }
        self.shaper = shaper;
        self.shaper_auto = auto_rate;
        self.refresh_link_rate(now);
    }

    /// The shaper, if any (for `braid class show`).
    pub fn shaper(&self) -> Option<&Shaper> {
        self.shaper.as_ref()
    }

    /// The shaper, if any, to change classes at run time.
    pub fn shaper_mut(&mut self) -> Option<&mut Shaper> {
        self.shaper.as_mut()
    }

    /// Offer a TUN packet to the shaper; false when there is none (the caller sends it
    /// straight on).
    pub(super) fn shape(&mut self, now: Instant, packet: &[u8]) -> bool {
        let Some(shaper) = &mut self.shaper else {
            return false;
        };
        if let Enqueued::Dropped(_) = shaper.enqueue(now, packet) {
            self.counters.drop_shaper += 1;
        }
        self.release(now);
        true
    }

    /// Move packets HTB lets go from the shaper into the bond, while there is room.
    pub(super) fn release(&mut self, now: Instant) {
        let Some(mut shaper) = self.shaper.take() else {
            return;
        };
        let room = self.cfg.frames.max_len(self.cfg.mtu).max(1);
        for _ in 0..RELEASE_BATCH {
            if shaper.backlog_packets() == 0 || !self.has_room() {
                break;
            }
            let mut buf = self.spare_buffer();
            buf.resize(room, 0);
            match shaper.dequeue(now, &mut buf) {
                Some((n, _class)) if n <= buf.len() => {
                    buf.truncate(n);
                    self.schedule_packet(now, buf);
                }
                Some(_) => self.recycle(buf),
                None => {
                    self.recycle(buf);
                    break;
                }
            }
        }
        self.shaper = Some(shaper);
    }

    /// True while some up path's queue drains within [`SHAPER_ROOM`].
    pub(super) fn has_room(&self) -> bool {
        self.links
            .iter()
            .any(|l| l.is_up() && l.queue_delay() < SHAPER_ROOM)
    }

    /// When the shaper next has something to release (only while there is room: when
    /// there is none, a path's transmit timer comes first and frees some).
    pub(super) fn shaper_timeout(&self) -> Option<Instant> {
        let shaper = self.shaper.as_ref()?;
        if shaper.backlog_packets() == 0 || !self.has_room() {
            return None;
        }
        shaper.poll_timeout()
    }

    /// In auto mode, set the shaper's link rate from the up paths' drain rates.
    pub(super) fn refresh_link_rate(&mut self, now: Instant) {
        if !self.shaper_auto {
            return;
        }
        let sum: u64 = self
            .links
            .iter()
            .filter(|l| l.is_up())
            .map(|l| l.drain_rate_bps())
            .sum();
        if let Some(shaper) = &mut self.shaper {
            shaper.set_link_bps(now, (sum as f64 * AUTO_HEADROOM) as u64);
        }
    }
}
