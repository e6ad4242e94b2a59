//! tc's units, parsed as iproute2 does (`tc/tc_util.c`: `get_rate64`, `get_size`,
//! `get_time`): rates in bit/s, sizes in bytes.
//!
//! STUB: contract only.

/// Parses a rate such as `10mbit`, `1.9mbit`, `.3mbit`, `100kbps` (kilobytes/s), `8000`
/// (bare number = bytes per second? see tc: a bare number is bits per second) into bit/s.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    Err(format!("not implemented: {s}"))
}

/// Parses a size such as `1600`, `15k`, `1mb`, `10kbit` into bytes.
pub fn parse_size(s: &str) -> Result<u32, String> {
    Err(format!("not implemented: {s}"))
}

/// Formats a rate as tc prints it (`10Mbit`, `300Kbit`, `1900Kbit`).
pub fn format_rate(bps: u64) -> String {
    format!("{bps}bit")
}
