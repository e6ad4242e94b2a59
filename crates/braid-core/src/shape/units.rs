//! tc's units, parsed as iproute2 does (`tc/tc_util.c`: `get_rate64`, `get_size`): rates
//! in bit/s, sizes in bytes.
//!
//! Both functions follow iproute2 step by step: the number is read as `strtod` reads it
//! (decimal with optional fraction and exponent, `.3`, `1e6`, or hexadecimal `0x10`), the
//! suffix is compared case-insensitively, the arithmetic is done in `f64`, and the result
//! is truncated as C's conversion to an integer does. A rate is handed to the kernel in
//! **bytes** per second, so [`parse_rate`] returns `8 ×` that byte rate: `1001bit` is
//! 1000 bit/s, as `tc class show` prints it.
//!
//! Verified against tc (iproute2 6.1) on this machine: see the `pinned_against_tc_6_1`
//! tests.

use core::fmt;

/// Rate suffixes (`tc_util.c` `suffixes[]`), matched case-insensitively; the scale is in
/// bit/s per unit.
const RATE_SUFFIXES: &[(&str, f64)] = &[
    ("bit", 1.),
    ("kibit", 1024.),
    ("kbit", 1000.),
    ("mibit", 1024. * 1024.),
    ("mbit", 1_000_000.),
    ("gibit", 1024. * 1024. * 1024.),
    ("gbit", 1_000_000_000.),
    ("tibit", 1024. * 1024. * 1024. * 1024.),
    ("tbit", 1_000_000_000_000.),
    ("bps", 8.),
    ("kibps", 8. * 1024.),
    ("kbps", 8000.),
    ("mibps", 8. * 1024. * 1024.),
    ("mbps", 8_000_000.),
    ("gibps", 8. * 1024. * 1024. * 1024.),
    ("gbps", 8_000_000_000.),
    ("tibps", 8. * 1024. * 1024. * 1024. * 1024.),
    ("tbps", 8_000_000_000_000.),
];

/// Reads a number at the start of `s` as C's `strtod` does (without leading blanks,
/// `inf` or `nan`). Returns the value and the rest, or `None` when no number starts `s`.
fn strtod(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    let neg = match b.first() {
        Some(b'+') => {
            i = 1;
            false
        }
        Some(b'-') => {
            i = 1;
            true
        }
        _ => false,
    };
    let body = &b[i..];
    // Hexadecimal: 0x followed by at least one hex digit (else strtod reads just "0").
    if body.len() > 2
        && body[0] == b'0'
        && (body[1] | 0x20) == b'x'
        && (body[2].is_ascii_hexdigit()
            || (body[2] == b'.' && body.get(3).is_some_and(u8::is_ascii_hexdigit)))
    {
        let mut j = 2;
        let mut v = 0f64;
        while let Some(d) = body.get(j).and_then(|&c| (c as char).to_digit(16)) {
            v = v * 16. + f64::from(d);
            j += 1;
        }
        if body.get(j) == Some(&b'.') {
            j += 1;
            let mut scale = 1. / 16.;
            while let Some(d) = body.get(j).and_then(|&c| (c as char).to_digit(16)) {
                v += f64::from(d) * scale;
                scale /= 16.;
                j += 1;
            }
        }
        // A binary exponent: p[+-]digits.
        if body.get(j).is_some_and(|&c| c | 0x20 == b'p') {
            let mut k = j + 1;
            let eneg = match body.get(k) {
                Some(b'-') => {
                    k += 1;
                    true
                }
                Some(b'+') => {
                    k += 1;
                    false
                }
                _ => false,
            };
            let start = k;
            let mut e: i32 = 0;
            while let Some(d) = body.get(k).filter(|c| c.is_ascii_digit()) {
                e = e.saturating_mul(10).saturating_add(i32::from(d - b'0'));
                k += 1;
            }
            if k > start {
                v *= 2f64.powi(if eneg { -e } else { e });
                j = k;
            }
        }
        let v = if neg { -v } else { v };
        return Some((v, &s[i + j..]));
    }
    let mut j = 0;
    let mut digits = 0;
    while body.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
        digits += 1;
    }
    if body.get(j) == Some(&b'.') {
        j += 1;
        while body.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    // The exponent is taken only when digits follow it.
    if body.get(j).is_some_and(|&c| c | 0x20 == b'e') {
        let mut k = j + 1;
        if matches!(body.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        let start = k;
        while body.get(k).is_some_and(u8::is_ascii_digit) {
            k += 1;
        }
        if k > start {
            j = k;
        }
    }
    // Rust's float parser is correctly rounded, as glibc's strtod is.
    let v: f64 = s[i..i + j].parse().ok()?;
    Some((if neg { -v } else { v }, &s[i + j..]))
}

/// What [`parse_rate`] or [`parse_size`] was reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// A rate ([`parse_rate`]).
    Rate,
    /// A size ([`parse_size`]).
    Size,
}

/// What is wrong with a rate or a size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitProblem {
    /// It does not start with a number.
    NoNumber,
    /// A percent rate, which needs the device's speed.
    Percent,
    /// The unit after the number is not one tc knows.
    UnknownUnit(String),
    /// A negative number.
    Negative,
    /// Above the largest value (a u64 bit rate; a u32 byte size).
    TooLarge,
}

/// A rate or size that does not read, with the text as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    /// Rate or size.
    pub quantity: Quantity,
    /// The text that was read.
    pub input: String,
    /// What is wrong with it.
    pub problem: UnitProblem,
}

impl UnitError {
    fn new(quantity: Quantity, input: &str, problem: UnitProblem) -> Self {
        Self {
            quantity,
            input: input.to_owned(),
            problem,
        }
    }
}

impl fmt::Display for UnitError {
    /// `bad rate "10furlongs": unknown unit "furlongs" (e.g. "10mbit", ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, examples) = match self.quantity {
            Quantity::Rate => ("rate", r#""10mbit", "1.9mbit", "300kbit", "100kbps""#),
            Quantity::Size => ("size", r#""1600", "15k", "1mb", "10kbit""#),
        };
        write!(f, "bad {what} {:?}: ", self.input)?;
        match (&self.problem, self.quantity) {
            (UnitProblem::NoNumber, _) => f.write_str("no number")?,
            (UnitProblem::Percent, _) => {
                f.write_str("percent rates need the device's speed; give an absolute rate")?
            }
            (UnitProblem::UnknownUnit(u), _) => write!(f, "unknown unit {u:?}")?,
            (UnitProblem::Negative, _) => f.write_str("negative")?,
            (UnitProblem::TooLarge, Quantity::Rate) => f.write_str("too large")?,
            (UnitProblem::TooLarge, Quantity::Size) => {
                f.write_str("too large (at most 4294967295 bytes)")?
            }
        }
        write!(f, " (e.g. {examples})")
    }
}

impl std::error::Error for UnitError {}

/// Parses a rate as tc does (`get_rate64`) into bit/s: `10mbit`, `1.9mbit`, `.3mbit`,
/// `100kbps` (kilobytes/s: 800 000 bit/s), `1Kibit` (1024 bit/s), `1e6bit`, and a bare
/// number, which tc reads as **bits** per second (`8000` = 8 kbit/s). Suffixes are
/// case-insensitive. The result is a multiple of 8 (tc passes bytes/s to the kernel,
/// truncated). `0` is returned for rates below one byte per second; callers that need a
/// non-zero rate check for it (tc says "rate is required"). Percent rates (`30%`) need a
/// device speed and are refused.
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    let bad = |problem| UnitError::new(Quantity::Rate, s, problem);
    let (v, rest) = strtod(s).ok_or_else(|| bad(UnitProblem::NoNumber))?;
    let scale = if rest.is_empty() {
        1.
    } else if rest.contains('%') {
        return Err(bad(UnitProblem::Percent));
    } else {
        RATE_SUFFIXES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(rest))
            .map(|&(_, scale)| scale)
            .ok_or_else(|| bad(UnitProblem::UnknownUnit(rest.to_owned())))?
    };
    let bytes = v * scale / 8.;
    if bytes.is_nan() || bytes < 0. {
        return Err(bad(UnitProblem::Negative));
    }
    // Largest byte rate whose bit rate still fits a u64.
    if bytes >= (u64::MAX / 8) as f64 {
        return Err(bad(UnitProblem::TooLarge));
    }
    // C's double -> integer conversion truncates toward zero, as `as` does.
    Ok((bytes as u64) * 8)
}

/// Parses a size as tc does (`get_size`) into bytes: a bare number or `b` is bytes; `k`,
/// `kb` ×1024; `m`, `mb` ×1024²; `g`, `gb` ×1024³; `kbit` ×128, `mbit` ×131072, `gbit`
/// ×134217728 (kibibits, in bytes). Case-insensitive; fractions allowed (`1.5k` = 1536);
/// truncated toward zero. Must fit in 32 bits.
pub fn parse_size(s: &str) -> Result<u32, UnitError> {
    let bad = |problem| UnitError::new(Quantity::Size, s, problem);
    let (v, rest) = strtod(s).ok_or_else(|| bad(UnitProblem::NoNumber))?;
    let scale: f64 = match rest.to_ascii_lowercase().as_str() {
        "" | "b" => 1.,
        "k" | "kb" => 1024.,
        "m" | "mb" => 1024. * 1024.,
        "g" | "gb" => 1024. * 1024. * 1024.,
        "kbit" => 128.,
        "mbit" => 131_072.,
        "gbit" => 134_217_728.,
        _ => return Err(bad(UnitProblem::UnknownUnit(rest.to_owned()))),
    };
    let bytes = v * scale;
    if bytes.is_nan() || bytes < 0. {
        return Err(bad(UnitProblem::Negative));
    }
    if bytes >= 4_294_967_296. {
        return Err(bad(UnitProblem::TooLarge));
    }
    Ok(bytes as u32)
}

/// Formats a rate as tc prints it (`print_rate` in `tc_util.c`): the byte rate times 8,
/// divided by 1000 while it is a multiple of 1000 or at least 1 000 000 (integer
/// division, so large odd rates lose digits just as in tc), with `bit`, `Kbit`, `Mbit`,
/// `Gbit` or `Tbit`: `10Mbit`, `1900Kbit`, `300Kbit`, `999992bit`, `1234Kbit` for
/// 1 234 567 bit/s. For display only; use [`format_rate_exact`] to write a rate back.
pub fn format_rate(bps: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    // tc prints the kernel's byte rate << 3.
    let mut rate = bps & !7;
    let mut i = 0;
    while i < UNITS.len() - 1 {
        if rate < 1000 {
            break;
        }
        if !rate.is_multiple_of(1000) && rate < 1_000_000 {
            break;
        }
        rate /= 1000;
        i += 1;
    }
    format!("{rate}{}bit", UNITS[i])
}

/// Formats a rate so that [`parse_rate`] (and tc) read back exactly the same value: the
/// largest of `tbit`, `gbit`, `mbit`, `kbit` that divides it, else `bit`, in lower case:
/// `10mbit`, `1900kbit`, `300kbit`, `999992bit`. Exact for multiples of 8 (everything
/// [`parse_rate`] returns); other values are written in `bit` and read back rounded down
/// to a multiple of 8, as tc would.
pub fn format_rate_exact(bps: u64) -> String {
    for (unit, scale) in [
        ("tbit", 1_000_000_000_000u64),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1000),
    ] {
        if bps != 0 && bps.is_multiple_of(scale) {
            return format!("{}{unit}", bps / scale);
        }
    }
    format!("{bps}bit")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seed_rates() {
        assert_eq!(parse_rate("10mbit"), Ok(10_000_000));
        assert_eq!(parse_rate("1.9mbit"), Ok(1_900_000));
        assert_eq!(parse_rate("2.9mbit"), Ok(2_900_000));
        assert_eq!(parse_rate("4.9mbit"), Ok(4_900_000));
        assert_eq!(parse_rate(".3mbit"), Ok(300_000));
    }

    /// Each pair was checked with `tc class add ... htb rate R` followed by
    /// `tc class show` on iproute2 6.1 / Linux 6.18 (printed form in the comment).
    #[test]
    fn pinned_against_tc_6_1() {
        let cases: &[(&str, u64, &str)] = &[
            ("1234567bit", 1_234_560, "1234Kbit"),
            ("1001bit", 1000, "1Kbit"),
            ("999999bit", 999_992, "999992bit"),
            ("8000", 8000, "8Kbit"),
            ("1kbps", 8000, "8Kbit"),
            ("1Kibit", 1024, "1024bit"),
            ("1.5Mibit", 1_572_864, "1572Kbit"),
            ("1e6bit", 1_000_000, "1Mbit"),
            ("1mbps", 8_000_000, "8Mbit"),
            ("100KBPS", 800_000, "800Kbit"),
            ("0x10kbit", 16_000, "16Kbit"),
            ("12345678bit", 12_345_672, "12345Kbit"),
            ("1tbit", 1_000_000_000_000, "1Tbit"),
            ("3.3gbit", 3_300_000_000, "3300Mbit"),
            ("10mbit", 10_000_000, "10Mbit"),
            ("1.9mbit", 1_900_000, "1900Kbit"),
            (".3mbit", 300_000, "300Kbit"),
        ];
        for &(text, bps, shown) in cases {
            assert_eq!(parse_rate(text), Ok(bps), "{text}");
            assert_eq!(format_rate(bps), shown, "{text}");
        }
        // tc: `rate 0.1bit` -> "\"rate\" is required." (zero bytes/s).
        assert_eq!(parse_rate("0.1bit"), Ok(0));
    }

    /// `tc -d class show` after `burst S` (iproute2 6.1).
    #[test]
    fn sizes_pinned_against_tc_6_1() {
        let cases: &[(&str, u32)] = &[
            ("1600", 1600),
            ("1600b", 1600),
            ("15k", 15 * 1024),
            ("15kb", 15 * 1024),
            ("15KB", 15 * 1024),
            ("1mb", 1024 * 1024),
            ("1m", 1024 * 1024),
            ("10kbit", 1280),
            ("1mbit", 128 * 1024),
            ("1gbit", 128 * 1024 * 1024),
            ("1.5k", 1536),
            ("2g", 2 * 1024 * 1024 * 1024),
            ("1g", 1 << 30),
        ];
        for &(text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn bad_units_and_numbers() {
        for bad in [
            "", "mbit", "10 mbit", "10mbits", "10mb", "-1mbit", "30%", "1e", "x", "10kbitx", "nan",
            "inf",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_rate("1e")
            .unwrap_err()
            .to_string()
            .contains("unknown unit \"e\""));
        assert!(parse_rate("10furlongs")
            .unwrap_err()
            .to_string()
            .contains("furlongs"));
        for bad in ["", "k", "15kib", "-1", "4g", "1tb", "15 k"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_size("4294967295"), Ok(u32::MAX));
        assert!(parse_size("4294967296").is_err());
    }

    #[test]
    fn case_and_exponents() {
        assert_eq!(parse_rate("10MBIT"), Ok(10_000_000));
        assert_eq!(parse_rate("10Mbit"), Ok(10_000_000));
        assert_eq!(parse_rate("1.5e3kbit"), Ok(1_500_000));
        assert_eq!(parse_rate("+5kbit"), Ok(5000));
        assert_eq!(parse_rate("2GiBps"), Ok(2 * 8 * 1024 * 1024 * 1024));
        assert_eq!(parse_rate("1tibit"), Ok(1 << 40));
        assert_eq!(parse_rate("1TBps"), Ok(8_000_000_000_000));
    }

    /// tc computes `strtod(s) * scale / 8` in doubles and truncates: 2048.615 is stored as
    /// 2048.61499999..., so tc hands the kernel 256076874 B/s, not 256076875.
    #[test]
    fn double_arithmetic_like_tc() {
        assert_eq!(parse_rate("2048.615mbit"), Ok(2_048_614_992));
        assert_eq!(parse_rate("2048615kbit"), Ok(2_048_615_000));
    }

    #[test]
    fn exact_format() {
        assert_eq!(format_rate_exact(10_000_000), "10mbit");
        assert_eq!(format_rate_exact(1_900_000), "1900kbit");
        assert_eq!(format_rate_exact(300_000), "300kbit");
        assert_eq!(format_rate_exact(999_992), "999992bit");
        assert_eq!(format_rate_exact(3_300_000_000), "3300mbit");
        assert_eq!(format_rate_exact(0), "0bit");
        assert_eq!(format_rate(0), "0bit");
    }

    proptest! {
        #[test]
        fn exact_round_trip(bytes in 0u64..(1u64 << 50)) {
            let bps = bytes * 8;
            prop_assert_eq!(parse_rate(&format_rate_exact(bps)), Ok(bps));
        }

        #[test]
        fn small_exact_round_trip(bytes in 0u64..10_000_000) {
            let bps = bytes * 8;
            prop_assert_eq!(parse_rate(&format_rate_exact(bps)), Ok(bps));
        }

        /// tc's own printed form reads back to the same value whenever it is not lossy.
        #[test]
        fn tc_format_round_trip(kbit in 1u64..1_000_000) {
            let bps = kbit * 1000;
            prop_assert_eq!(parse_rate(&format_rate(bps)), Ok(bps));
        }

        #[test]
        fn never_panics(s in "\\PC{0,12}") {
            let _ = parse_rate(&s);
            let _ = parse_size(&s);
        }

        #[test]
        fn decimal_mbit(whole in 0u64..10_000, frac in 0u64..1000) {
            // n.fff mbit is n*1e6 + fff*1e3 bit, less at most one byte lost to tc's
            // double arithmetic and truncation (see `double_arithmetic_like_tc`).
            let text = format!("{whole}.{frac:03}mbit");
            let exact = whole * 1_000_000 + frac * 1000;
            let got = parse_rate(&text).unwrap();
            prop_assert!(got == exact || got == exact - 8, "{} -> {}", text, got);
        }
    }

    /// The typed errors print the text the String errors printed (config errors show it).
    #[test]
    fn error_texts() {
        let cases = [
            (
                parse_rate("fast").unwrap_err(),
                r#"bad rate "fast": no number (e.g. "10mbit", "1.9mbit", "300kbit", "100kbps")"#,
            ),
            (
                parse_rate("30%").unwrap_err(),
                r#"bad rate "30%": percent rates need the device's speed; give an absolute rate (e.g. "10mbit", "1.9mbit", "300kbit", "100kbps")"#,
            ),
            (
                parse_rate("10furlongs").unwrap_err(),
                r#"bad rate "10furlongs": unknown unit "furlongs" (e.g. "10mbit", "1.9mbit", "300kbit", "100kbps")"#,
            ),
            (
                parse_rate("-1mbit").unwrap_err(),
                r#"bad rate "-1mbit": negative (e.g. "10mbit", "1.9mbit", "300kbit", "100kbps")"#,
            ),
            (
                parse_rate("1e30tbit").unwrap_err(),
                r#"bad rate "1e30tbit": too large (e.g. "10mbit", "1.9mbit", "300kbit", "100kbps")"#,
            ),
            (
                parse_size("big").unwrap_err(),
                r#"bad size "big": no number (e.g. "1600", "15k", "1mb", "10kbit")"#,
            ),
            (
                parse_size("1q").unwrap_err(),
                r#"bad size "1q": unknown unit "q" (e.g. "1600", "15k", "1mb", "10kbit")"#,
            ),
            (
                parse_size("-1").unwrap_err(),
                r#"bad size "-1": negative (e.g. "1600", "15k", "1mb", "10kbit")"#,
            ),
            (
                parse_size("4294967296").unwrap_err(),
                r#"bad size "4294967296": too large (at most 4294967295 bytes) (e.g. "1600", "15k", "1mb", "10kbit")"#,
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }
}
