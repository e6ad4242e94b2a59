//! Changing a running bond's settings (a config reload): the scheduler and its options,
//! path monitoring, the reorder wait, the queue limit, delay equalisation, a path's
//! priority, and the shaper. Queued packets, path state, sequence numbers and counters
//! are kept.

use super::{Bond, BondConfig, BondError};
use crate::path::HealthConfig;
use crate::shape::Shaper;
use crate::{Instant, PathId};

impl Bond {
    /// The settings in force.
    pub fn config(&self) -> &BondConfig {
        &self.cfg
    }

    /// Apply new settings at run time. `mtu` and `reorder_capacity` size buffers and are
    /// kept as they are (the program refuses to change them), as is `frames` (a TUN does
    /// not become a TAP); so is `epoch`, this run's
    /// identity (a new one would tell the peer this end restarted). A new scheduler (or new
    /// options, seed or equalisation) starts fresh on the same paths: it learns which are
    /// up at its first choice, as a scheduler does at start. For active-backup, `primary`
    /// must be the running path's id.
    pub fn reconfigure(&mut self, now: Instant, mut cfg: BondConfig) {
        self.end_run();
        self.now = now;
        cfg.mtu = self.cfg.mtu;
        cfg.frames = self.cfg.frames;
        cfg.reorder_capacity = self.cfg.reorder_capacity;
        cfg.epoch = self.cfg.epoch;
        if cfg.scheduler != self.cfg.scheduler
            || cfg.seed != self.cfg.seed
            || cfg.equalize_max != self.cfg.equalize_max
        {
            self.scheduler = cfg.scheduler.build(cfg.seed, cfg.equalize_max, cfg.frames);
            for l in &self.links {
                self.scheduler.path_added(now, l.id);
            }
            self.cursor = 0;
        }
        if cfg.health != self.cfg.health {
            self.set_health(now, cfg.health);
        }
        if cfg.reorder_max != self.cfg.reorder_max {
            self.deadline.set_max(cfg.reorder_max);
        }
        self.cfg = cfg;
    }

    fn set_health(&mut self, now: Instant, health: HealthConfig) {
        for l in &mut self.links {
            l.health.set_config(health, now);
        }
    }

    /// Change a path's active-backup priority.
    pub fn set_path_prio(&mut self, id: PathId, prio: i32) -> Result<(), BondError> {
        self.end_run();
        let i = self.index(id).ok_or(BondError::NoSuchPath)?;
        self.links[i].cfg.prio = prio;
        Ok(())
    }

    /// Replace the shaper (or put one on, or take it off) at run time; returns how many
    /// packets queued in the old one were dropped (counted as shaper drops). To change a
    /// class's parameters and keep its queue, use [`Bond::shaper_mut`] instead.
    pub fn replace_shaper(
        &mut self,
        now: Instant,
        shaper: Option<Shaper>,
        auto_rate: bool,
    ) -> usize {
        let dropped = self.shaper.as_ref().map_or(0, Shaper::backlog_packets);
        self.counters.drop_shaper += dropped as u64;
        self.set_shaper(now, shaper, auto_rate);
        dropped
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::bond::PathConfig;
    use crate::sched::SchedulerConfig;

    fn bond() -> (Bond, PathId, PathId) {
        let now = Instant::ZERO;
        let cfg = BondConfig {
            epoch: 77,
            ..BondConfig::default()
        };
        let mut b = Bond::new(cfg, now);
        let a = b
            .add_path(
                now,
                PathConfig {
                    name: "a".into(),
                    ..PathConfig::default()
                },
            )
            .unwrap();
        let c = b
            .add_path(
                now,
                PathConfig {
                    name: "b".into(),
                    ..PathConfig::default()
                },
            )
            .unwrap();
        (b, a, c)
    }

    #[test]
    fn settings_change_and_buffers_stay() {
        let (mut b, a, _) = bond();
        let mut cfg = b.config().clone();
        cfg.scheduler = SchedulerConfig::Eql;
        cfg.health.probe_interval = Duration::from_millis(250);
        cfg.reorder_max = Duration::from_millis(50);
        cfg.queue_max_delay = Duration::from_millis(30);
        cfg.mtu = 9000;
        cfg.epoch = 5;
        b.reconfigure(Instant::from_millis(10), cfg);
        assert_eq!(b.status().scheduler, "eql");
        assert_eq!(b.config().health.probe_interval, Duration::from_millis(250));
        assert_eq!(b.config().reorder_max, Duration::from_millis(50));
        assert_eq!(b.config().queue_max_delay, Duration::from_millis(30));
        assert_eq!(b.config().mtu, 1400, "the MTU sizes buffers: kept");
        assert_eq!(
            b.config().epoch,
            77,
            "the same run: the peer must not see a restart"
        );
        assert_eq!(b.set_path_prio(a, 7), Ok(()));
        assert_eq!(b.links[0].cfg.prio, 7);
        assert_eq!(b.set_path_prio(PathId(9), 1), Err(BondError::NoSuchPath));
    }

    #[test]
    fn probes_follow_a_new_interval_at_once() {
        let (mut b, _, _) = bond();
        let t0 = Instant::ZERO;
        // Slow probing, then a reload makes it quick: the next probe is due within the
        // new interval, not the old one.
        let mut cfg = b.config().clone();
        cfg.health.probe_interval = Duration::from_secs(10);
        b.reconfigure(t0, cfg.clone());
        let mut buf = [0u8; 2048];
        while b.poll_transmit(t0, &mut buf).is_some() {}
        b.handle_timeout(t0);
        while b.poll_transmit(t0, &mut buf).is_some() {}
        let slow = b.poll_timeout().unwrap();
        assert!(slow >= t0 + Duration::from_secs(1), "{slow:?}");
        cfg.health.probe_interval = Duration::from_millis(100);
        let t1 = Instant::from_millis(500);
        b.reconfigure(t1, cfg);
        let quick = b.poll_timeout().unwrap();
        assert!(quick <= t1 + Duration::from_millis(100), "{quick:?}");
    }
}
