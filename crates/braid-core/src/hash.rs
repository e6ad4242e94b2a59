//! The bonding transmit hashes, bit-exact with Linux `__bond_xmit_hash`. STUB.

/// A transmit hash policy (`hash = ...` in the config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HashPolicy {
    /// `layer2`: `h_dest[5] ^ h_source[5] ^ h_proto`.
    #[default]
    Layer2,
    /// `layer2+3`.
    Layer23,
    /// `layer3+4`.
    Layer34,
    /// `encap2+3`: like layer2+3 on the innermost headers.
    Encap23,
    /// `encap3+4`: like layer3+4 on the innermost headers.
    Encap34,
    /// `vlan+srcmac`.
    VlanSrcMac,
    /// The seed's original formula: `((sport ^ dport) ^ (sip ^ dip)) mod n`.
    Gabler,
}

/// Hash an IP packet as read from a TUN (no Ethernet header: the MACs count as zero and
/// the EtherType comes from the IP version).
pub fn hash_ip(_policy: HashPolicy, _packet: &[u8]) -> u32 {
    0
}
