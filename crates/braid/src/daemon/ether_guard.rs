//! The host's own stack kept off the member ports while they are in the bond.
//!
//! The kernel's bonding driver takes every frame its slave receives (an `rx_handler`), so
//! the slave's own IP stack never sees one. braid reads a member with a packet socket,
//! which gets a copy: without more, the host would also take the frame up through the
//! member (a frame to the bond's MAC is the member's own when the bond took the first
//! member's MAC; broadcasts are everyone's) and, for one, answer a ping twice, through
//! the member and through the bond. So the bond gets an nftables table with a `netdev`
//! ingress chain per member whose policy is drop: packet sockets see a frame before the
//! ingress hooks run (`__netif_receive_skb_core` delivers to the `ptype_all` taps
//! first), the host stack after them, so braid reads every frame and the stack none.
//! (tc's `matchall`/`gact` would do too, but are often not built, as on the kernel of
//! braid's own CI.)
//!
//! ```text
//! table netdev braid_bond0 {
//!     chain m_eth1 { type filter hook ingress device "eth1" priority -500; policy drop; }
//! }
//! ```
//!
//! [`unguard`] deletes the table. Needs `nft` (Debian's `nftables`).
use super::hooks;

/// `braid_<bond>`: the bond's table (any character of the name other than a letter, a
/// digit or `_` is written `_`).
fn table(bond: &str) -> String {
    format!("braid_{}", ident(bond))
}

fn ident(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn nft(args: &[&str]) -> Result<(), String> {
    hooks::nft(args).map(|_| ()).map_err(|e| {
        if installed() {
            e.to_string()
        } else {
            format!("{e}: braid needs nft (nftables: apt install nftables) to keep the host's own stack off the member ports")
        }
    })
}

/// Whether an `nft` is on the PATH.
fn installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("nft").is_file()))
}

/// Drop everything member `dev` of `bond` receives before the host stack sees it
/// (idempotent).
pub(super) fn guard(bond: &str, dev: &str) -> Result<(), String> {
    let t = table(bond);
    nft(&["add", "table", "netdev", &t])?;
    let spec =
        format!("{{ type filter hook ingress device \"{dev}\" priority -500; policy drop; }}");
    nft(&[
        "add",
        "chain",
        "netdev",
        &t,
        &format!("m_{}", ident(dev)),
        &spec,
    ])
}

/// Undo every [`guard`] of `bond` (no table: nothing to do).
pub(super) fn unguard(bond: &str) -> Result<(), String> {
    let t = table(bond);
    let listed = hooks::nft(&["list", "tables", "netdev"]).map_err(|e| e.to_string())?;
    if !listed
        .lines()
        .any(|l| l.trim() == format!("table netdev {t}"))
    {
        return Ok(());
    }
    nft(&["delete", "table", "netdev", &t])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_nft_identifiers() {
        assert_eq!(table("bond0"), "braid_bond0");
        assert_eq!(table("br-lan.10"), "braid_br_lan_10");
        assert_eq!(format!("m_{}", ident("eth1@if3")), "m_eth1_if3");
    }
}
