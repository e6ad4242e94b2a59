//! Handshake rate limiting: a token bucket per source address (WireGuard's
//! `ratelimiter.c`: 20 initiations per second, burst 5; IPv6 sources share a bucket per
//! /64), a load meter that says when the responder is "under load" and should answer
//! with cookies instead of doing Diffie-Hellman, and one [`Budget`] for the whole
//! responder that bounds the initiations it works on per second.
//!
//! The table is allocated once with a fixed capacity; when it is full, idle entries are
//! swept and, if it is still full, the initiation is refused (counted `rate_limited`), so
//! a flood from many addresses never grows memory. Only datagrams with a valid mac1
//! (senders who know our public key) reach the limiter.

use crate::Instant;
use core::time::Duration;
use std::collections::HashMap;
use std::net::IpAddr;

/// Sustained initiations per second per source.
pub(super) const PACKETS_PER_SECOND: u64 = 20;
/// Initiations a source may send at once.
pub(super) const PACKETS_BURSTABLE: u64 = 5;
/// Default capacity of the per-source table.
pub(super) const DEFAULT_TABLE_SIZE: usize = 4096;

const COST: u64 = 1_000_000 / PACKETS_PER_SECOND; // µs of tokens per packet
const TOKEN_MAX: u64 = COST * PACKETS_BURSTABLE;
const IDLE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
struct Bucket {
    last: Instant,
    tokens: u64,
}

/// The bucket key: an IPv4 address, or the /64 of an IPv6 address (an attacker usually
/// owns a whole /64).
fn key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                u128::from(u32::from(v4))
            } else {
                (u128::from(a) & !((1u128 << 64) - 1)) | 1
            }
        }
    }
}

/// Per-source token buckets.
pub(super) struct RateLimiter {
    table: HashMap<u128, Bucket>,
    capacity: usize,
    last_sweep: Instant,
}

impl RateLimiter {
    /// A limiter holding at most `capacity` sources.
    pub(super) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            table: HashMap::with_capacity(capacity),
            capacity,
            last_sweep: Instant::ZERO,
        }
    }

    /// May an initiation from `ip` be processed now? Takes a token if so.
    pub(super) fn allow(&mut self, now: Instant, ip: IpAddr) -> bool {
        let k = key(ip);
        if let Some(b) = self.table.get_mut(&k) {
            let elapsed = now.saturating_since(b.last).as_micros();
            let elapsed = u64::try_from(elapsed).unwrap_or(u64::MAX);
            b.tokens = b.tokens.saturating_add(elapsed).min(TOKEN_MAX);
            b.last = now;
            if b.tokens >= COST {
                b.tokens -= COST;
                return true;
            }
            return false;
        }
        if self.table.len() >= self.capacity {
            self.sweep(now);
            if self.table.len() >= self.capacity {
                return false;
            }
        }
        self.table.insert(
            k,
            Bucket {
                last: now,
                tokens: TOKEN_MAX - COST,
            },
        );
        true
    }

    /// Drop buckets idle for a second (they are full again anyway).
    pub(super) fn sweep(&mut self, now: Instant) {
        self.last_sweep = now;
        self.table
            .retain(|_, b| now.saturating_since(b.last) < IDLE);
    }

    /// Sweep if a second has passed since the last sweep (call from `handle_timeout`).
    pub(super) fn maybe_sweep(&mut self, now: Instant) {
        if now.saturating_since(self.last_sweep) >= IDLE {
            self.sweep(now);
        }
    }

    #[cfg(test)]
    /// Sources currently tracked.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    #[cfg(test)]
    /// No source tracked.
    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

/// One token bucket for every source together: the handshake work (a Diffie-Hellman or a
/// cookie reply) a flood can make the responder do per second. Only initiations that
/// passed the exact-length and mac1 checks and carry no valid mac2 take a token, so
/// junk costs no token (review H1), and neither does a reply to our own handshake.
pub(super) struct Budget {
    /// µs of refill per token.
    cost: u64,
    /// Most µs of tokens held (the burst).
    cap: u64,
    tokens: u64,
    last: Instant,
}

impl Budget {
    /// `per_second` tokens a second (at least 1), up to `burst` at once (at least 1).
    pub(super) fn new(per_second: u32, burst: u32) -> Self {
        let cost = (1_000_000 / u64::from(per_second.max(1))).max(1);
        let cap = cost * u64::from(burst.max(1));
        Self {
            cost,
            cap,
            tokens: cap,
            last: Instant::ZERO,
        }
    }

    /// Take a token if one is there.
    pub(super) fn take(&mut self, now: Instant) -> bool {
        let elapsed =
            u64::try_from(now.saturating_since(self.last).as_micros()).unwrap_or(u64::MAX);
        self.last = self.last.max(now);
        self.tokens = self.tokens.saturating_add(elapsed).min(self.cap);
        if self.tokens < self.cost {
            return false;
        }
        self.tokens -= self.cost;
        true
    }
}

/// Counts initiations with a valid mac1 in one-second intervals; "under load" while the
/// count of the current or the previous interval reached the threshold (so the state
/// lasts at least one second, as in wireguard-go).
pub(super) struct LoadMeter {
    threshold: u32,
    start: Instant,
    current: u32,
    previous: u32,
}

impl LoadMeter {
    /// Under load from `threshold` initiations per second.
    pub(super) fn new(threshold: u32) -> Self {
        Self {
            threshold: threshold.max(1),
            start: Instant::ZERO,
            current: 0,
            previous: 0,
        }
    }

    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_since(self.start);
        if elapsed >= 2 * IDLE {
            self.previous = 0;
            self.current = 0;
            self.start = now;
        } else if elapsed >= IDLE {
            self.previous = self.current;
            self.current = 0;
            self.start += IDLE;
        }
    }

    /// Count one initiation; returns whether the responder is now under load.
    pub(super) fn record(&mut self, now: Instant) -> bool {
        self.roll(now);
        self.current = self.current.saturating_add(1);
        self.under_load(now)
    }

    /// Is the responder under load?
    pub(super) fn under_load(&mut self, now: Instant) -> bool {
        self.roll(now);
        self.current > self.threshold || self.previous > self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// In the style of WireGuard's ratelimiter self-test: a burst of 5, then one packet
    /// per 50 ms; a separate address has its own bucket; an IPv6 /64 shares one.
    #[test]
    fn token_bucket_vectors() {
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [192, 0, 2, 2].into();
        let mut r = RateLimiter::new(16);
        let t0 = ms(1000);
        for i in 0..PACKETS_BURSTABLE {
            assert!(r.allow(t0, a), "burst packet {i}");
        }
        assert!(!r.allow(t0, a));
        assert!(r.allow(t0, b));
        // 49 ms: not yet a whole token.
        assert!(!r.allow(ms(1049), a));
        // 50 ms after the refusals' last refill: one more.
        assert!(r.allow(ms(1099), a));
        assert!(!r.allow(ms(1099), a));
        // 20 per second sustained: 1 s of packets every 50 ms all pass.
        let mut passed = 0;
        for i in 1..=20 {
            if r.allow(ms(1099 + 50 * i), a) {
                passed += 1;
            }
        }
        assert_eq!(passed, 20);
        // Faster than 20/s: about half of 40 packets at 25 ms spacing pass (after the
        // bucket is drained).
        let mut passed = 0;
        for i in 1..=40 {
            if r.allow(ms(2099 + 25 * i), a) {
                passed += 1;
            }
        }
        assert_eq!(passed, 20);
        // A long pause refills only up to the burst.
        let t = ms(60_000);
        assert_eq!((0..10).filter(|_| r.allow(t, a)).count(), 5);

        let v6a: IpAddr = "2001:db8:1:2::1".parse().unwrap_or(a);
        let v6b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap_or(a);
        let v6c: IpAddr = "2001:db8:1:3::1".parse().unwrap_or(a);
        assert_eq!((0..10).filter(|_| r.allow(t, v6a)).count(), 5);
        assert!(!r.allow(t, v6b), "same /64 shares the bucket");
        assert!(r.allow(t, v6c));
    }

    #[test]
    fn full_table_refuses_new_sources_until_swept() {
        let mut r = RateLimiter::new(2);
        let t0 = ms(0);
        assert!(r.allow(t0, [10, 0, 0, 1].into()));
        assert!(r.allow(t0, [10, 0, 0, 2].into()));
        assert!(!r.allow(t0, [10, 0, 0, 3].into()));
        assert_eq!(r.len(), 2);
        // A second later the idle entries are swept and room is made.
        assert!(r.allow(ms(1000), [10, 0, 0, 3].into()));
        assert_eq!(r.len(), 1);
        r.maybe_sweep(ms(5000));
        assert!(r.is_empty());
    }

    #[test]
    fn budget_refills_at_its_rate_up_to_the_burst() {
        let mut b = Budget::new(1000, 100);
        let t = ms(5000);
        assert_eq!((0..500).filter(|_| b.take(t)).count(), 100);
        // One token per ms.
        assert!(!b.take(t + Duration::from_micros(999)));
        assert!(b.take(t + Duration::from_micros(1000)));
        // A long pause refills only the burst; time going back refills nothing.
        assert_eq!((0..500).filter(|_| b.take(ms(60_000))).count(), 100);
        assert!(!b.take(ms(1000)));
    }

    #[test]
    fn load_meter() {
        let mut m = LoadMeter::new(3);
        let t = ms(10_000);
        assert!(!m.record(t));
        assert!(!m.record(t));
        assert!(!m.record(t));
        assert!(m.record(t));
        // Stays under load through the next second, then clears.
        assert!(m.under_load(ms(10_900)));
        assert!(m.under_load(ms(11_500)));
        assert!(!m.under_load(ms(12_100)));
        assert!(!m.record(ms(12_200)));
    }
}
