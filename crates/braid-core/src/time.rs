//! braid's own clock type: integer microseconds from an arbitrary zero.
//!
//! The core never reads a clock. The daemon converts its monotonic clock into an
//! [`Instant`] once per loop turn; tests and simulations start at [`Instant::ZERO`] and
//! move time forward themselves, so a run is reproducible to the microsecond.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in microseconds since an arbitrary zero chosen by the driver.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Instant {
    micros: u64,
}

impl Instant {
    /// The driver's zero.
    pub const ZERO: Self = Self { micros: 0 };
    /// Later than any time a run will reach; handy as "never".
    pub const FAR_FUTURE: Self = Self {
        micros: u64::MAX / 2,
    };

    /// An instant `micros` microseconds after zero.
    pub const fn from_micros(micros: u64) -> Self {
        Self { micros }
    }

    /// An instant `millis` milliseconds after zero.
    pub const fn from_millis(millis: u64) -> Self {
        Self {
            micros: millis * 1000,
        }
    }

    /// Microseconds since zero.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.micros.saturating_sub(earlier.micros))
    }

    /// The low 32 bits of the microsecond count, as carried in wire timestamps.
    pub const fn wire_micros(self) -> u32 {
        self.micros as u32
    }
}

fn micros_of(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 4)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant {
            micros: self.micros.saturating_add(micros_of(rhs)),
        }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant {
            micros: self.micros.saturating_sub(micros_of(rhs)),
        }
    }
}

/// `a - b` saturates at zero, like [`Instant::saturating_since`].
impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.micros / 1_000_000,
            self.micros % 1_000_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_micros(7), Instant::from_micros(5007));
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::ZERO, Duration::from_millis(5));
        assert_eq!(Instant::from_micros((1 << 32) + 3).wire_micros(), 3);
    }
}
