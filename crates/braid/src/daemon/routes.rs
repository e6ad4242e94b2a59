//! `[bond] routes`, `fwmark`, `post_up`, `pre_down`: what wg-quick does around an
//! interface, done by the daemon around the bond.
//!
//! A route that is not a default route goes in the main table through the bond's
//! interface. A default route (`0.0.0.0/0`, `::/0`) goes in a table of its own, with
//! wg-quick's two rules (`add_default`):
//!
//! ```text
//! ip rule add not fwmark T table T                  # unmarked traffic: table T, the bond
//! ip rule add table main suppress_prefixlength 0    # but main's own more specific routes win
//! ip route add 0.0.0.0/0 dev braid0 table T
//! ```
//!
//! and every path socket carries `SO_MARK = T`, so the bond's own datagrams are routed by
//! the main table through their uplinks, never into the bond (a path with `dev` is also
//! bound to its device). `T` is `fwmark`, or the first table from 51820 with no routes, as
//! wg-quick picks it. At stop, `pre_down` runs, then what was added is deleted in reverse
//! order (the kernel removes the routes through the bond with its interface, not the rules).
use braid_core::Instant;

use super::hooks::{self, CommandError};
use crate::config::RoutingSettings;
use crate::log::{dlog, dwarn};

/// The first table wg-quick tries; braid starts at the same place.
pub const FIRST_TABLE: u32 = 51820;
/// How many tables are tried before giving up.
const TABLES_TRIED: u32 = 1000;

/// What the daemon added to the routing; undone by [`Routing::down`] or on drop.
#[derive(Debug, Default)]
pub struct Routing {
    interface: String,
    /// `ip` argument lists that undo what was added, in the order they were added.
    undo: Vec<Vec<String>>,
    pre_down: Vec<String>,
    /// True once `post_up` ran: only then does `pre_down` run.
    hooks_up: bool,
}

/// The fwmark (and table) to use for `s`: `fwmark`, else the first free table when there
/// is a default route, else none.
pub fn pick_mark(s: &RoutingSettings) -> Result<Option<u32>, CommandError> {
    if let Some(m) = s.fwmark {
        return Ok(Some(m));
    }
    if !s.uses_table() {
        return Ok(None);
    }
    // Every table that holds a route, IPv4 and IPv6 (`ip route show table N` of a table
    // that does not exist fails on recent kernels, so all are listed at once).
    let mut used = String::new();
    for fam in ["-4", "-6"] {
        match hooks::ip(&[fam, "route", "show", "table", "all"]) {
            Ok(out) => used.push_str(&out),
            Err(e) if fam == "-4" => return Err(e),
            Err(_) => {} // no IPv6 on this host
        }
    }
    let used = tables_in(&used);
    if let Some(t) = (FIRST_TABLE..FIRST_TABLE + TABLES_TRIED).find(|t| !used.contains(t)) {
        return Ok(Some(t));
    }
    Err(CommandError(format!(
        "bond.routes: no free routing table in {FIRST_TABLE}..{}; set bond.fwmark",
        FIRST_TABLE + TABLES_TRIED
    )))
}

/// The numbered tables `ip route show table all` names (`... table 51820 ...`).
fn tables_in(out: &str) -> Vec<u32> {
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w.first() == Some(&"table"))
        .filter_map(|w| w.get(1).and_then(|t| t.parse().ok()))
        .collect()
}

impl Routing {
    /// Add the routes (and for default routes the rules, with table `mark`) through
    /// `interface`, then run `post_up`. On an error, what was added is removed again.
    pub fn up(
        now: Instant,
        s: &RoutingSettings,
        interface: &str,
        mark: Option<u32>,
    ) -> Result<Routing, CommandError> {
        let mut r = Routing {
            interface: interface.to_owned(),
            undo: Vec::new(),
            pre_down: s.pre_down.clone(),
            hooks_up: false,
        };
        let mut ruled = [false, false];
        for p in &s.routes {
            let fam = if p.addr.is_ipv4() { "-4" } else { "-6" };
            let dest = p.to_string();
            if let (true, Some(t)) = (p.is_default(), mark) {
                let t = t.to_string();
                let k = usize::from(!p.addr.is_ipv4());
                if !ruled[k] {
                    ruled[k] = true;
                    r.add(
                        &[fam, "rule", "add", "not", "fwmark", &t, "table", &t],
                        &[fam, "rule", "del", "not", "fwmark", &t, "table", &t],
                    )?;
                    r.add(
                        &[
                            fam,
                            "rule",
                            "add",
                            "table",
                            "main",
                            "suppress_prefixlength",
                            "0",
                        ],
                        &[
                            fam,
                            "rule",
                            "del",
                            "table",
                            "main",
                            "suppress_prefixlength",
                            "0",
                        ],
                    )?;
                }
                r.add(
                    &[fam, "route", "add", &dest, "dev", interface, "table", &t],
                    &[fam, "route", "del", &dest, "dev", interface, "table", &t],
                )?;
                dlog!(
                    now,
                    "routes: {dest} dev {interface} table {t}; rules: not fwmark {t} table {t}, table main suppress_prefixlength 0 (path sockets carry fwmark {t})"
                );
            } else {
                r.add(
                    &[fam, "route", "add", &dest, "dev", interface],
                    &[fam, "route", "del", &dest, "dev", interface],
                )?;
                dlog!(now, "routes: {dest} dev {interface}");
            }
        }
        for c in &s.post_up {
            hooks::hook(now, "bond.post_up", c, interface)?;
            dlog!(now, "bond.post_up `{c}` done");
        }
        r.hooks_up = true;
        Ok(r)
    }

    /// Run `ip args`, and remember `undo` for later.
    fn add(&mut self, args: &[&str], undo: &[&str]) -> Result<(), CommandError> {
        hooks::ip(args)?;
        self.undo
            .push(undo.iter().map(|s| (*s).to_owned()).collect());
        Ok(())
    }

    /// `pre_down` (once `post_up` ran), then remove what was added. Failures are logged;
    /// the rest goes on. Runs once.
    pub fn down(&mut self, now: Instant) {
        if std::mem::take(&mut self.hooks_up) {
            for c in std::mem::take(&mut self.pre_down) {
                match hooks::hook(now, "bond.pre_down", &c, &self.interface) {
                    Ok(()) => dlog!(now, "bond.pre_down `{c}` done"),
                    Err(e) => dwarn!(now, "{e}"),
                }
            }
        }
        while let Some(args) = self.undo.pop() {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Err(e) = hooks::ip(&args) {
                dwarn!(now, "routes: {e}");
            }
        }
    }
}

impl Drop for Routing {
    fn drop(&mut self) {
        // The daemon's log carries its own clock; at drop only the order matters.
        self.down(Instant::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_in_a_route_dump() {
        let out = "default via 10.1.0.1 dev up1\ndefault dev wg0 table 51820 scope link\n\
                   local 127.0.0.1 dev lo table local proto kernel\n::/0 dev x table 51821 metric 1024\n";
        assert_eq!(tables_in(out), [51820, 51821]);
    }
}
