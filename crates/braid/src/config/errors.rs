//! Turning the TOML reader's type errors into messages that name the key and speak of
//! TOML's values, not Rust's types: `path[0].bps: expected a number or a rate like
//! "20mbit", found "fast"` instead of `invalid type: string "fast", expected i64`; and a
//! misspelt key gets the nearest real one (`did you mean \`scheduler\`?`).

use serde::de::{self, Deserialize, Deserializer, Unexpected, Visitor};

/// `a.b[2].c` from serde_path_to_error's path, without the `Spanned` wrapper's own
/// fields (`$__serde_spanned_private_value`). Empty at the top level.
pub(super) fn key_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if key.starts_with("$__") {
                    continue;
                }
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// The message for a TOML reader's `message` at key path `path` (from [`key_path`]).
pub(super) fn describe(path: &str, message: &str) -> String {
    let message = message.trim();
    if let Some(m) = unknown_key(path, message) {
        return m;
    }
    let key = |m: String| {
        if path.is_empty() {
            m
        } else {
            format!("{path}: {m}")
        }
    };
    if let Some((found, expected)) = split_expected(message) {
        if (path == "path" || path.ends_with(".outages")) && found == "map" {
            return key(format!(
                "expected an array, found a table{}",
                if path == "path" {
                    " (write each path as [[path]], with two brackets)"
                } else {
                    ""
                }
            ));
        }
        return key(format!(
            "expected {}, found {}",
            expected_words(expected),
            found_words(found)
        ));
    }
    key(message.to_owned())
}

/// `unknown field `x`, expected one of `a`, `b`` (or `expected `a``, or `there are no
/// fields`) as `bond.x: unknown key; did you mean `y`?`.
fn unknown_key(path: &str, message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, rest) = rest.split_once('`')?;
    // The path already ends with the unknown key itself.
    let path = path
        .strip_suffix(name)
        .map_or(path, |p| p.strip_suffix('.').unwrap_or(p));
    let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let full = if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    };
    let table = if path.is_empty() {
        "at the top level".to_owned()
    } else {
        format!("in {}", table_name(path))
    };
    Some(match did_you_mean(name, &known) {
        Some(best) => format!("{full}: unknown key {table}; did you mean `{best}`?"),
        None if known.is_empty() => format!("{full}: unknown key {table}"),
        None => format!(
            "{full}: unknown key {table} (known keys: {})",
            known.join(", ")
        ),
    })
}

/// `[bond]`, `[[path]]` (for `path[1]`), `[path.emulate]`.
fn table_name(path: &str) -> String {
    let mut plain = String::new();
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => in_index = true,
            ']' => in_index = false,
            c if !in_index => plain.push(c),
            _ => {}
        }
    }
    if path.starts_with("path[") && !path.contains('.') {
        format!("[[{plain}]]")
    } else {
        format!("[{plain}]")
    }
}

/// The known name nearest to `name`, if it is near enough to be a slip of the fingers:
/// within two edits, or one of them holds the other (`interfce`, `remot`, `local_addr`).
pub(super) fn did_you_mean<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&lower, k), *k))
        .filter(|(d, k)| {
            *d <= 2.max(k.len() / 4)
                || (lower.len() >= 3 && (k.contains(lower.as_str()) || lower.contains(k)))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// `invalid type: string "x", expected i64` -> (`string "x"`, `i64`); also `invalid
/// value: ...` and `invalid length ...`.
fn split_expected(message: &str) -> Option<(&str, &str)> {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))?;
    rest.rsplit_once(", expected ")
}

/// serde's names of what it wanted, in TOML's words.
fn expected_words(expected: &str) -> String {
    let e = expected.trim();
    let words = match e {
        "i8" | "i16" | "i32" | "i64" | "i128" | "u8" | "u16" | "u32" | "u64" | "u128" | "isize"
        | "usize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" | "bool" => "true or false",
        "a string" | "a borrowed string" => "a string (in quotes)",
        "a sequence" => "an array",
        _ if e.starts_with("struct ") || e == "a map" => "a table",
        _ => e,
    };
    words.to_owned()
}

/// serde's `Unexpected` text (`string "fast"`, `integer `-3``, `map`) in TOML's words.
fn found_words(found: &str) -> String {
    let f = found.trim();
    if let Some(s) = f.strip_prefix("string ") {
        return s.to_owned();
    }
    for prefix in ["integer ", "floating point "] {
        if let Some(n) = f.strip_prefix(prefix) {
            // `integer `99999999999999999999` as i128`: too large for any key.
            let n = n.trim_matches('`');
            if let Some((n, _)) = n.split_once("` as ") {
                return format!("{n} (too large)");
            }
            return n.to_owned();
        }
    }
    if let Some(b) = f.strip_prefix("boolean ") {
        return b.trim_matches('`').to_owned();
    }
    match f {
        "map" => "a table".to_owned(),
        "sequence" => "an array".to_owned(),
        _ => f.to_owned(),
    }
}

/// A speed in bit/s as the config writes it: a whole number of bit/s (`20000000`), or a
/// rate in tc's units (`"20mbit"`, `"1.5gbit"`, `"300kbit"`, `"100kbps"`), as the
/// shaper's rates are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Bps(pub(crate) u64);

/// What a `bps` value should look like (the words of its error messages).
const BPS_EXPECTED: &str = "a number or a rate like \"20mbit\"";

/// Parse a speed as `bps` takes it: a whole number of bit/s, or a tc rate.
pub fn parse_bps(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<u64>().map_err(|_| format!("{s:?} is too large"));
    }
    braid_core::shape::units::parse_rate(t).map_err(|e| e.to_string())
}

impl<'de> Deserialize<'de> for Bps {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Bps;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(BPS_EXPECTED)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bps, E> {
                u64::try_from(v)
                    .map(Bps)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bps, E> {
                Ok(Bps(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bps, E> {
                parse_bps(v)
                    .map(Bps)
                    .map_err(|_| E::invalid_value(Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    fn err(text: &str) -> String {
        match Config::parse(text, "t.toml") {
            Ok(_) => panic!("expected an error for {text:?}"),
            Err(e) => e.to_string(),
        }
    }

    const BOND: &str = "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n";
    const P0: &str =
        "[[path]]\nname = \"p0\"\nlocal = \"10.201.0.1:7000\"\nremote = \"10.201.0.2:7000\"\n";

    #[test]
    fn type_errors_name_the_key_in_toml_words() {
        assert_eq!(
            err(&format!("{BOND}{P0}bps = \"fast\"\n")),
            "t.toml:8:7: path[0].bps: expected a number or a rate like \"20mbit\", found \"fast\""
        );
        assert_eq!(
            err(&format!("{BOND}mtu = \"big\"\n")),
            "t.toml:4:7: bond.mtu: expected a whole number, found \"big\""
        );
        assert_eq!(
            err(&format!("{BOND}mtu = 99999999999999999999\n")),
            "t.toml:4:7: bond.mtu: expected a whole number, found 99999999999999999999 (too large)"
        );
        assert_eq!(
            err(&format!("{BOND}mss_clamp = 1\n")),
            "t.toml:4:13: bond.mss_clamp: expected true or false, found 1"
        );
        assert_eq!(
            err(&format!("{BOND}{P0}[[path]]\nname = 3\n")),
            "t.toml:9:8: path[1].name: expected a string (in quotes), found 3"
        );
        let e = err(&format!("{BOND}[path]\nname = \"p0\"\n"));
        assert!(
            e.ends_with("path: expected an array, found a table (write each path as [[path]], with two brackets)"),
            "{e}"
        );
        let e = err(&format!("{BOND}{P0}[path.emulate]\ndelay_ms = \"slow\"\n"));
        assert!(
            e.ends_with("path[0].emulate.delay_ms: expected a number, found \"slow\""),
            "{e}"
        );
        for e in [
            err(&format!("{BOND}{P0}bps = -5\n")),
            err(&format!("{BOND}{P0}bps = 1.5\n")),
            err(&format!("{BOND}mtu = [1]\n")),
        ] {
            assert!(
                !e.contains("i64") && !e.contains("invalid type") && e.contains(": expected "),
                "{e}"
            );
        }
    }

    #[test]
    fn misspelt_keys_get_the_nearest() {
        let e = err(&format!("{BOND}interfce = \"b0\"\n"));
        assert_eq!(
            e,
            "t.toml:4:1: bond.interfce: unknown key in [bond]; did you mean `interface`?"
        );
        let e = err(&format!("{BOND}schedular = \"eql\"\n"));
        assert!(e.ends_with("did you mean `scheduler`?"), "{e}");
        let e = err(&format!("{BOND}{P0}remot = \"1.2.3.4:5\"\n"));
        assert_eq!(
            e,
            "t.toml:8:1: path[0].remot: unknown key in [[path]]; did you mean `remote`?"
        );
        let e = err(&format!("{BOND}{P0}[path.emulate]\ndelay = 3\n"));
        assert!(
            e.ends_with(
                "path[0].emulate.delay: unknown key in [path.emulate]; did you mean `delay_ms`?"
            ),
            "{e}"
        );
        // Nothing near: the keys of that table are listed.
        let e = err(&format!("{BOND}colour = \"red\"\n"));
        assert!(
            e.starts_with(
                "t.toml:4:1: bond.colour: unknown key in [bond] (known keys: interface, address,"
            ),
            "{e}"
        );
        let e = err(&format!("{BOND}[links]\n"));
        assert!(
            e.contains(
                "links: unknown key at the top level (known keys: bond, path, shape, monitor)"
            ),
            "{e}"
        );
    }

    #[test]
    fn did_you_mean_is_not_a_guess() {
        let known = [
            "interface",
            "address",
            "mtu",
            "scheduler",
            "remote",
            "local",
        ];
        assert_eq!(super::did_you_mean("adress", &known), Some("address"));
        assert_eq!(super::did_you_mean("MTU", &known), Some("mtu"));
        assert_eq!(super::did_you_mean("colour", &known), None);
        assert_eq!(super::did_you_mean("x", &known), None);
    }

    #[test]
    fn bps_takes_tc_units() {
        for (v, want) in [
            ("20000000", 20_000_000),
            ("\"20mbit\"", 20_000_000),
            ("\"1.5gbit\"", 1_500_000_000),
            ("\"300kbit\"", 300_000),
            ("\"100kbps\"", 800_000),
            ("\"64000\"", 64_000),
        ] {
            let c = Config::parse(&format!("{BOND}{P0}bps = {v}\n"), "t.toml")
                .unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(c.paths[0].bps, want, "{v}");
        }
        assert_eq!(super::parse_bps("20mbit"), Ok(20_000_000));
        assert!(super::parse_bps("fast").is_err());
    }
}
