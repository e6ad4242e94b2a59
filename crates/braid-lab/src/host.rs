//! How much of the machine a test actually had: the hypervisor's steal time, and how late
//! the lab's own 10 ms sleeps woke. A run on a starved host (a noisy neighbour, a burst of
//! other work) shows it here, so a missed target can be told from a braid fault.
use std::time::Duration;

use serde::Serialize;

/// What the host took from a test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HostLoad {
    /// CPU time the hypervisor gave to others, percent of all this machine's CPUs.
    pub steal_pct: f64,
    /// Longest time the lab's loop woke late from a short sleep, ms: every process on the
    /// machine stood still about that long.
    pub lag_max_ms: f64,
}

/// The machine's CPU counters (`/proc/stat`'s first line): (steal, total), in ticks.
fn cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]; guest time is
    // already counted in user and nice.
    let steal = *fields.get(7)?;
    let total = fields.iter().take(8).sum();
    Some((steal, total))
}

/// Measures one test: create it at the start, call [`Meter::slept`] after each sleep of
/// the loop, [`Meter::finish`] at the end.
pub struct Meter {
    start: Option<(u64, u64)>,
    lag_max: Duration,
}

impl Meter {
    /// Starts measuring now.
    pub fn start() -> Self {
        Self {
            start: read_ticks(),
            lag_max: Duration::ZERO,
        }
    }

    /// A sleep of `asked` took `took`.
    pub fn slept(&mut self, asked: Duration, took: Duration) {
        self.lag_max = self.lag_max.max(took.saturating_sub(asked));
    }

    /// The figures since [`Meter::start`]; steal is 0 where `/proc/stat` cannot be read.
    pub fn finish(&self) -> HostLoad {
        let steal_pct = match (self.start, read_ticks()) {
            (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
                s1.saturating_sub(s0) as f64 / (t1 - t0) as f64 * 100.0
            }
            _ => 0.0,
        };
        HostLoad {
            steal_pct,
            lag_max_ms: self.lag_max.as_secs_f64() * 1000.0,
        }
    }
}

fn read_ticks() -> Option<(u64, u64)> {
    cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_and_total_from_proc_stat() {
        let stat = "cpu  2702541 25197 694090 5055719 20216 0 126089 216883 7 0\n\
                    cpu0 1306932 12592 347876 2575371 4955 0 62266 109922 0 0\n";
        let total = 2702541 + 25197 + 694090 + 5055719 + 20216 + 126089 + 216883;
        assert_eq!(cpu_ticks(stat), Some((216883, total)));
        // An old kernel without a steal column, or garbage: no figure.
        assert_eq!(cpu_ticks("cpu  1 2 3 4 5 6 7\n"), None);
        assert_eq!(cpu_ticks("cpu  1 2 x 4 5 6 7 8\n"), None);
        assert_eq!(cpu_ticks("intr 5\n"), None);
    }

    #[test]
    fn lag_is_the_longest_oversleep() {
        let mut m = Meter {
            start: None,
            lag_max: Duration::ZERO,
        };
        let ms = Duration::from_millis;
        m.slept(ms(10), ms(11));
        m.slept(ms(10), ms(130));
        m.slept(ms(10), ms(9));
        let h = m.finish();
        assert_eq!(h.lag_max_ms, 120.0);
        assert_eq!(h.steal_pct, 0.0);
    }
}
