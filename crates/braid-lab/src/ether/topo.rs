//! The Ethernet lab's topologies: a host whose N member ports are bonded, cabled either
//! back to back to a far host (bonded the same way) or to an Open vSwitch switch with
//! clients on access ports.
//!
//! ```text
//!  back to back:   host [bond0 10.210.0.1] e0..eN-1 ══ N veths ══ e0..eN-1 [bond0 10.210.0.2] far
//!  to a switch:    host [bond0 10.210.0.1] e0..eN-1 ══ N veths ══ m0..mN-1 [sw: OVS br0] a1..aK ── cK eth0 10.210.0.1K
//! ```
//!
//! The host's bond is braid's (`layer = "ethernet"`), or, to check the harness without
//! braid, Open vSwitch's own bond with its internal port as the host's interface, or no
//! bond at all (`Plain`: the address on e0, the seeds' "before bonding").
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};

use super::braid::{BondSpec, Braid, BOND};
use super::failover::{Flow, Port};
use super::net::{self, Net};
use super::ovs::{Lacp, Ovs};

/// Who bonds the host's (and the far host's) ports.
#[derive(Clone, Debug)]
pub enum Bonder {
    /// braid's Ethernet bond, this `braid` program.
    Braid(PathBuf),
    /// Open vSwitch's bond, its internal port `br0` carrying the address.
    Ovs,
    /// No bond: the address on the first port (one member only).
    Plain,
}

impl Bonder {
    /// A short name for tables.
    pub fn name(&self) -> &'static str {
        match self {
            Bonder::Braid(_) => "braid",
            Bonder::Ovs => "ovs",
            Bonder::Plain => "plain",
        }
    }
}

/// What the host is cabled to.
#[derive(Clone, Debug)]
pub enum Far {
    /// Another host, bonded by the same bonder with the same spec.
    BackToBack,
    /// An OVS switch whose bond of the member ports has this LACP and `bond_mode`, with
    /// `clients` hosts on access ports.
    Switch {
        /// `lacp=`.
        lacp: Lacp,
        /// `bond_mode=`.
        mode: String,
        /// Client hosts, 1..=9.
        clients: usize,
    },
}

/// A topology's layout.
#[derive(Clone, Debug)]
pub struct TopoSpec {
    /// Member ports per bond.
    pub members: usize,
    /// tbf on both ends of every member, Mbit/s.
    pub rate_mbit: Option<f64>,
    /// tbf on both ends of every client's access port, Mbit/s.
    pub client_mbit: Option<f64>,
    /// tbf buckets of two frames (3.2 kB) instead of 2 ms at rate (see
    /// [`net::shape_burst`]).
    pub tight: bool,
    /// The bond (scheduler, hash, LACP rate); its address is set here.
    pub bond: BondSpec,
    /// Who bonds.
    pub bonder: Bonder,
    /// What the host is cabled to.
    pub far: Far,
}

/// The host's address.
pub const HOST: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 1);
/// The far host's address (back to back).
pub const FAR: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2);

/// Client `j`'s address (1-based).
pub fn client_addr(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, 0, 10 + u8::try_from(j).unwrap_or(0))
}

/// A built topology; its daemons are stopped and namespaces removed on drop.
pub struct Topo {
    /// braid daemons: host, then far (back to back).
    pub braid: Vec<Braid>,
    /// Open vSwitch instances (the switch, or the bonds of the `Ovs` bonder).
    pub ovs: Vec<Ovs>,
    /// The host's namespace.
    pub host: String,
    /// The far host's namespace (back to back) or the switch's.
    pub far: String,
    /// Client namespaces (switch).
    pub clients: Vec<String>,
    /// The host's member ports (e0..).
    pub members: Vec<String>,
    /// The ports they are cabled to (e0.. back to back, m0.. on the switch).
    pub far_ports: Vec<String>,
    /// The layout.
    pub spec: TopoSpec,
    /// The namespaces (dropped last).
    pub net: Net,
}

impl Topo {
    /// Build it, start the bonds, wait (bounded) until they carry traffic.
    pub fn new(spec: TopoSpec) -> Result<Self> {
        if spec.members == 0 || spec.members > 8 {
            bail!("1 to 8 members, not {}", spec.members);
        }
        let mut net = Net::new()?;
        let host = net.ns("host")?;
        let switch = matches!(spec.far, Far::Switch { .. });
        let far = net.ns(if switch { "sw" } else { "far" })?;
        let members: Vec<String> = (0..spec.members).map(|i| format!("e{i}")).collect();
        let far_ports: Vec<String> = (0..spec.members)
            .map(|i| format!("{}{i}", if switch { "m" } else { "e" }))
            .collect();
        for (m, f) in members.iter().zip(&far_ports) {
            net.veth(&host, m, &far, f)?;
            if let Some(r) = spec.rate_mbit {
                net::shape(&host, m, r)?;
                net::shape(&far, f, r)?;
            }
        }
        let mut clients = Vec::new();
        if let Far::Switch { clients: k, .. } = &spec.far {
            for j in 1..=*k {
                let c = net.ns(&format!("c{j}"))?;
                let a = format!("a{j}");
                net.veth(&c, "eth0", &far, &a)?;
                net::addr(&c, "eth0", &format!("{}/24", client_addr(j)))?;
                net::tx_csum_off(&c, "eth0")?;
                if let Some(r) = spec.client_mbit {
                    net::shape(&c, "eth0", r)?;
                    net::shape(&far, &a, r)?;
                }
                clients.push(c);
            }
        }
        let mut topo = Self {
            braid: Vec::new(),
            ovs: Vec::new(),
            host,
            far,
            clients,
            members,
            far_ports,
            spec,
            net,
        };
        if let Far::Switch {
            lacp,
            mode,
            clients,
        } = topo.spec.far.clone()
        {
            let o = Ovs::start(&topo.far, &topo.net.file("ovs-sw"))?;
            o.add_bridge("br0")?;
            if matches!(topo.spec.bonder, Bonder::Plain) {
                o.add_port("br0", &topo.far_ports[0])?;
            } else {
                let refs: Vec<&str> = topo.far_ports.iter().map(String::as_str).collect();
                o.add_bond("br0", "bond0", &refs, lacp, &mode, topo.spec.bond.lacp_fast)?;
            }
            for j in 1..=clients {
                o.add_port("br0", &format!("a{j}"))?;
            }
            topo.ovs.push(o);
        }
        topo.bond_side(true)?;
        if !switch {
            topo.bond_side(false)?;
        }
        topo.wait_up(Duration::from_secs(20))?;
        topo.static_neighbours()?;
        // Shaped again now that Open vSwitch has its ports (it deletes their qdiscs when
        // it takes them, before it is told to leave them alone), then checked.
        topo.shape()?;
        topo.check_shaped()?;
        Ok(topo)
    }

    /// Toward a static OVS bond (`lacp=off`), permanent neighbour entries between the
    /// host and every client, so that no ARP broadcast has to cross the bond: Open
    /// vSwitch has no static link aggregation that takes broadcasts on any member (its
    /// `balance-slb` drops broadcast and multicast that arrive on a member other than its
    /// active one, as a switch-independent bond must), so an ARP request that the host's
    /// static bond hashes onto another member would be lost.
    fn static_neighbours(&self) -> Result<()> {
        if !matches!(
            self.spec.far,
            Far::Switch {
                lacp: Lacp::Off,
                ..
            }
        ) {
            return Ok(());
        }
        let host_if = self.host_if().to_string();
        let host_mac = net::mac(&self.host, &host_if)?;
        for (j, c) in self.clients.iter().enumerate() {
            let cmac = net::mac(c, "eth0")?;
            net::neigh(&self.host, &host_if, client_addr(j + 1), &cmac)?;
            net::neigh(c, "eth0", HOST, &host_mac)?;
        }
        Ok(())
    }

    fn shape(&self) -> Result<()> {
        let burst = self.spec.tight.then_some(3_200);
        if let Some(r) = self.spec.rate_mbit {
            for (m, f) in self.members.iter().zip(&self.far_ports) {
                net::shape_burst(&self.host, m, r, burst)?;
                net::shape_burst(&self.far, f, r, burst)?;
            }
        }
        if let Some(r) = self.spec.client_mbit {
            for (j, c) in self.clients.iter().enumerate() {
                net::shape_burst(c, "eth0", r, burst)?;
                net::shape_burst(&self.far, &format!("a{}", j + 1), r, burst)?;
            }
        }
        Ok(())
    }

    /// Fail unless every shaped port still has its tbf (see [`net::check_shaped`]).
    pub fn check_shaped(&self) -> Result<()> {
        if self.spec.rate_mbit.is_some() {
            let host = self
                .members
                .iter()
                .map(|m| (self.host.as_str(), m.as_str()));
            let far = self
                .far_ports
                .iter()
                .map(|p| (self.far.as_str(), p.as_str()));
            net::check_shaped(host.chain(far))?;
        }
        if self.spec.client_mbit.is_some() {
            net::check_shaped(self.clients.iter().map(|c| (c.as_str(), "eth0")))?;
        }
        Ok(())
    }

    /// Start the host's (or the far host's) bond.
    fn bond_side(&mut self, host: bool) -> Result<()> {
        let (ns, addr, name) = if host {
            (self.host.clone(), HOST, "host")
        } else {
            (self.far.clone(), FAR, "far")
        };
        let ports = if host {
            self.members.clone()
        } else {
            self.far_ports.clone()
        };
        let mut spec = self.spec.bond.clone();
        spec.address = format!("{addr}/24");
        match self.spec.bonder.clone() {
            Bonder::Braid(exe) => {
                let b = Braid::start(&exe, &self.net, &ns, name, &spec, &ports)?;
                self.braid.push(b);
            }
            Bonder::Ovs => {
                let o = Ovs::start(&ns, &self.net.file(&format!("ovs-{name}")))?;
                o.add_bridge("br0")?;
                let refs: Vec<&str> = ports.iter().map(String::as_str).collect();
                let (lacp, mode) = ovs_mode(&spec);
                o.add_bond("br0", "bond0", &refs, lacp, mode, spec.lacp_fast)?;
                crate::netns::ip(&["-n", &ns, "link", "set", "br0", "up"])?;
                net::addr(&ns, "br0", &spec.address)?;
                self.ovs.push(o);
            }
            Bonder::Plain => {
                net::addr(&ns, &ports[0], &spec.address)?;
            }
        }
        Ok(())
    }

    /// The host's interface carrying its address.
    pub fn host_if(&self) -> &str {
        match self.spec.bonder {
            Bonder::Braid(_) => BOND,
            Bonder::Ovs => "br0",
            Bonder::Plain => &self.members[0],
        }
    }

    /// Wait until every bond carries traffic, then turn off transmit checksum offload on
    /// interfaces that send into an Open vSwitch datapath (see [`net::tx_csum_off`]).
    fn wait_up(&mut self, within: Duration) -> Result<()> {
        let n = self.members.len();
        for b in &mut self.braid {
            b.wait_up(n, within)?;
        }
        let lacp_switch = matches!(self.spec.far, Far::Switch { lacp, .. } if lacp != Lacp::Off);
        let lacp_ovs_bond =
            matches!(self.spec.bonder, Bonder::Ovs) && self.spec.bond.scheduler == "802.3ad";
        if (lacp_switch && !matches!(self.spec.bonder, Bonder::Plain)) || lacp_ovs_bond {
            for o in &self.ovs {
                o.wait_negotiated("bond0", n, within)?;
            }
        }
        let into_ovs =
            matches!(self.spec.far, Far::Switch { .. }) || matches!(self.spec.bonder, Bonder::Ovs);
        if into_ovs {
            let ifs: Vec<(String, String)> = match self.spec.bonder {
                Bonder::Braid(_) | Bonder::Ovs => {
                    let mut v = vec![(self.host.clone(), self.host_if().to_string())];
                    if !matches!(self.spec.far, Far::Switch { .. }) {
                        v.push((self.far.clone(), self.host_if().to_string()));
                    }
                    v
                }
                Bonder::Plain => vec![(self.host.clone(), self.members[0].clone())],
            };
            for (ns, dev) in ifs {
                net::tx_csum_off(&ns, &dev)?;
            }
        }
        Ok(())
    }

    /// The far end's namespace and address for traffic from the host: the far host, or
    /// client 1.
    pub fn peer(&self) -> (String, Ipv4Addr) {
        match self.spec.far {
            Far::BackToBack => (self.far.clone(), FAR),
            Far::Switch { .. } => (
                self.clients.first().cloned().unwrap_or_default(),
                client_addr(1),
            ),
        }
    }

    /// The probe flow from the host to its peer (or back, `reverse`).
    pub fn flow(&self, reverse: bool) -> Flow {
        let (pns, paddr) = self.peer();
        if reverse {
            Flow {
                src_ns: pns,
                src: paddr,
                dst_ns: self.host.clone(),
                dst: HOST,
            }
        } else {
            Flow {
                src_ns: self.host.clone(),
                src: HOST,
                dst_ns: pns,
                dst: paddr,
            }
        }
    }

    /// The member ports on the sending side of [`Topo::flow`], each with its peer.
    pub fn ports(&self, reverse: bool) -> Vec<Port> {
        self.members
            .iter()
            .zip(&self.far_ports)
            .map(|(m, f)| {
                let (mine, theirs) = if reverse {
                    (
                        (self.far.clone(), f.clone()),
                        (self.host.clone(), m.clone()),
                    )
                } else {
                    (
                        (self.host.clone(), m.clone()),
                        (self.far.clone(), f.clone()),
                    )
                };
                Port {
                    ns: mine.0,
                    dev: mine.1,
                    rate_mbit: self.spec.rate_mbit,
                    peer: Some(theirs),
                }
            })
            .collect()
    }
}

/// Open vSwitch's nearest bond for a braid bond spec: LACP with balance-tcp (layer3+4)
/// or balance-slb (by source MAC, as layer2); static balance-slb; active-backup.
pub fn ovs_mode(spec: &BondSpec) -> (Lacp, &'static str) {
    let l34 = spec.hash.as_deref() == Some("layer3+4");
    match spec.scheduler.as_str() {
        "802.3ad" if l34 => (Lacp::Active, "balance-tcp"),
        "802.3ad" => (Lacp::Active, "balance-slb"),
        "active-backup" => (Lacp::Off, "active-backup"),
        _ => (Lacp::Off, "balance-slb"),
    }
}
