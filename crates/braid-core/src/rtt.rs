//! RFC 6298 round-trip-time smoothing, shared by path health (probe RTTs) and congestion
//! control (data-ack RTTs).

use core::time::Duration;

/// Smoothed RTT and its mean deviation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
}

impl RttEstimator {
    /// Take one RTT sample: the first sets `srtt = r, rttvar = r/2`; later ones
    /// `rttvar = 3/4 rttvar + 1/4 |srtt - r|`, `srtt = 7/8 srtt + 1/8 r`.
    pub(crate) fn sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                self.srtt = Some(s * 7 / 8 + r / 8);
            }
        }
    }

    /// Smoothed RTT, once there is a sample.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Mean deviation.
    pub(crate) fn rttvar(&self) -> Duration {
        self.rttvar
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_values() {
        let ms = Duration::from_millis;
        let mut r = RttEstimator::default();
        assert_eq!(r.srtt(), None);
        r.sample(ms(40));
        assert_eq!((r.srtt(), r.rttvar()), (Some(ms(40)), ms(20)));
        r.sample(ms(20));
        // rttvar = 3/4·20 + 1/4·20 = 20; srtt = 7/8·40 + 1/8·20 = 37.5
        assert_eq!(
            (r.srtt(), r.rttvar()),
            (Some(Duration::from_micros(37_500)), ms(20))
        );
    }
}
