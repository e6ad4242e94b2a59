//! Reads tc scripts (`tc qdisc|class|filter add ... htb|u32 ...`) into a [`ShapeSpec`].
//!
//! # What is read
//!
//! The script is read the way a shell would run it, as far as tc scripts go: `#` starts
//! a comment at the start of a word, a backslash at the end of a line joins the next one
//! (errors name the command's first line), `'...'` and `"..."` quote, `NAME=value` on a
//! line of its own sets a variable and `$NAME` / `${NAME}` expand it, so `TC=/sbin/tc`
//! followed by `$TC qdisc ...` works. A command is `tc` (or any path ending in `/tc`),
//! then:
//!
//! - `qdisc add|replace|change dev D root handle M: htb [default N] [r2q N]
//!   [direct_qlen N]`: the handle's major becomes every class id's major. `default` is a
//!   hexadecimal minor as in tc (`default 13` = class `M:13`); braid also accepts
//!   `default M:13`, which tc itself refuses (`Illegal "default"`), with a note.
//! - `qdisc del ...`: ignored with a note (braid starts with an empty shaper); it
//!   clears whatever the script had set up before it.
//! - `class add|replace|change dev D parent P classid C htb rate R [ceil R] [burst B]
//!   [cburst B] [prio P] [quantum Q] [mtu M] [mpu M] [overhead O] [linklayer L]`:
//!   keywords may be abbreviated as tc allows (`pr`, `q`, `b`, `cb`). `parent M:` or
//!   `root` (or no parent) makes a top-level class. `prio` above 7 is capped at 7 as the
//!   kernel does (with a note). `mtu`, `mpu`, `overhead`, `linklayer` and burst cell
//!   sizes (`burst 15k/8`) are accepted and ignored with a note. `burst 0` / `cburst 0`
//!   mean the default, as in tc.
//! - `filter add dev D parent M: [protocol ip|ipv6|all] [prio N] u32 [match ...]...
//!   flowid|classid C`, with `match ip src|dst PREFIX`, `match ip sport|dport N MASK`,
//!   `match ip protocol N 0xff`, `match ip tos|dsfield|precedence V M`, and for IPv6
//!   `match ip6 src|dst|sport|dport|protocol|priority ...`. Numbers are read as tc reads
//!   them (values in C notation: `0x10`, `020` octal; masks in hexadecimal). A port mask
//!   must be contiguous from the top (`0xffff` one port, `0xfc00` a block of 1024).
//!   `prio 0` or no prio lets the kernel choose, and braid chooses the same: 49152 for
//!   the first such filter, then one less than the lowest automatic prio so far
//!   (verified on Linux 6.18: the seed's catch-all filter becomes `pref 49152`, after
//!   the prio-1 filters). Two filters at one prio must have the same protocol (the
//!   kernel says "Protocol mismatch for filter with specified priority").
//!   `protocol ip` restricts a filter to IPv4: a filter without a source or destination
//!   gets source `0.0.0.0/0` (`::/0` for `ipv6`), which means exactly that in braid.
//!
//! # Errors
//!
//! Anything else is an error naming the line and the token: other programs, other qdisc
//! kinds or filter kinds, unknown keywords, bad numbers and units, class ids whose major
//! is not the qdisc's, a class before the qdisc, a second qdisc, a missing `rate`, a
//! parent class that does not exist (the kernel would silently make the class top-level),
//! a filter whose class does not exist or is not a leaf, a `default` naming a missing or
//! inner class (the kernel would send such traffic unshaped).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use braid_core::shape::units::{format_rate_exact, parse_rate, parse_size};
use braid_core::shape::{ClassId, ClassSpec, FilterSpec, PortRange, Prefix, ShapeSpec};

/// A reader error, naming the 1-based line of the script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcError {
    /// Line of the script (after joining `\` continuations, the first line of the command).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for TcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TcError {}

/// A successfully read script: the spec and notes on what was accepted but ignored
/// (`dev eth1`, `qdisc del`, ...), each with its line.
#[derive(Clone, Debug, PartialEq)]
pub struct TcScript {
    /// The shaper it describes.
    pub spec: ShapeSpec,
    /// Notes, e.g. "line 2: `tc qdisc del` ignored: braid starts with an empty shaper".
    pub notes: Vec<String>,
}

/// The kernel's first automatic filter priority (`tcf_auto_prio`: `0xC0000000 >> 16`).
const AUTO_PRIO_FIRST: u32 = 0xC000;
/// Automatic priorities are allocated below existing ones down to this (exclusive).
const AUTO_PRIO_FLOOR: u32 = 0x8000;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_ALL: u16 = 0x0003;

type R<T> = Result<T, String>;

/// iproute2's `matches(arg, word)`: `arg` is a non-empty prefix of `word`.
fn matches(arg: &str, word: &str) -> bool {
    !arg.is_empty() && word.starts_with(arg)
}

/// `strtoul` with `base` (0: C notation), then iproute2's `get_u32` checks: the whole
/// token is the number, no sign, fits 32 bits.
fn get_u32(s: &str, base: u32) -> Option<u32> {
    let (digits, radix) = match base {
        16 => (
            s.strip_prefix("0x")
                .or_else(|| s.strip_prefix("0X"))
                .unwrap_or(s),
            16,
        ),
        0 => {
            if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                (h, 16)
            } else if s.len() > 1 && s.starts_with('0') {
                (&s[1..], 8)
            } else {
                (s, 10)
            }
        }
        _ => (s, base),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

fn num(s: &str, base: u32, what: &str, max: u32) -> R<u32> {
    get_u32(s, base).filter(|&v| v <= max).ok_or_else(|| {
        let form = match base {
            16 => "a hexadecimal number",
            10 => "a decimal number",
            _ => "a number",
        };
        format!("bad {what} {s:?}: expected {form} up to {max}")
    })
}

/// tc's `get_tc_classid`, exactly: `root`, `none`, `MAJ:MIN`, `MAJ:`, `:MIN`, or a bare
/// hexadecimal number (which is `0:N`).
fn get_tc_classid(s: &str) -> Option<u32> {
    match s {
        "root" => return Some(0xffff_ffff),
        "none" => return Some(0),
        _ => {}
    }
    let hex = |t: &str| -> Option<u32> {
        if t.is_empty() {
            return Some(0);
        }
        get_u32(t, 16)
    };
    match s.split_once(':') {
        Some((maj, min)) => {
            let maj = hex(maj)?;
            let min = hex(min)?;
            (maj < 0x1_0000 && min < 0x1_0000).then_some(maj << 16 | min)
        }
        None => get_u32(s, 16).filter(|_| !s.is_empty()),
    }
}

/// iproute2's `get_addr_ipv4`: one to four dot-separated parts, each a C number up to
/// 255; missing trailing parts are zero (`10` is `10.0.0.0`).
fn get_addr_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut a = [0u8; 4];
    let mut parts = s.split('.');
    for slot in &mut a {
        match parts.next() {
            Some(p) => *slot = u8::try_from(get_u32(p, 0)?).ok()?,
            None => break,
        }
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Ipv4Addr::from(a))
}

/// iproute2's `get_prefix_1` for one family: `default`/`any`/`all`, `ADDR`, `ADDR/LEN`,
/// and for IPv4 `ADDR/NETMASK`.
fn get_prefix(s: &str, v6: bool) -> R<Prefix> {
    let bad = || format!("bad {} prefix {s:?}", if v6 { "IPv6" } else { "IPv4" });
    let any: IpAddr = if v6 {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    };
    if matches!(s, "default" | "any" | "all") {
        return Ok(Prefix { addr: any, len: 0 });
    }
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = if v6 {
        a.parse::<Ipv6Addr>().map_err(|_| bad())?.into()
    } else {
        get_addr_ipv4(a).ok_or_else(bad)?.into()
    };
    let max: u32 = if v6 { 128 } else { 32 };
    let len = match l {
        None => max,
        Some(l) => match get_u32(l, 0) {
            Some(n) if n <= max => n,
            Some(_) => return Err(bad()),
            None if !v6 => {
                // A dotted netmask such as 255.255.255.0 (must be contiguous).
                let m = u32::from(get_addr_ipv4(l).ok_or_else(bad)?);
                if m.leading_ones() + m.trailing_zeros() != 32 {
                    return Err(bad());
                }
                m.leading_ones()
            }
            None => return Err(bad()),
        },
    };
    Ok(Prefix::new(addr, len as u8))
}

/// Splits a logical line into words: quotes, backslash escapes, `#` comments and
/// `$VAR` expansion.
fn words(line: &str, vars: &HashMap<String, String>) -> R<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let expand = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
                  cur: &mut String|
     -> R<()> {
        let braced = chars.peek() == Some(&'{');
        if braced {
            chars.next();
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphanumeric() || c == '_' {
                name.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if braced && chars.next() != Some('}') {
            return Err(format!("bad variable reference ${{{name}"));
        }
        if name.is_empty() {
            return Err("a lone `$` (shell expansions other than $NAME are not supported)".into());
        }
        match vars.get(&name) {
            Some(v) => {
                cur.push_str(v);
                Ok(())
            }
            None => Err(format!(
                "unknown variable ${name} (set it earlier in the script with {name}=...)"
            )),
        }
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\r' => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated ' quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => cur.push(c),
                            None => return Err("unterminated \" quote".into()),
                        },
                        Some('$') => expand(&mut chars, &mut cur)?,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated \" quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    cur.push(c);
                }
            }
            '$' => {
                in_word = true;
                expand(&mut chars, &mut cur)?;
            }
            ';' | '|' | '&' | '<' | '>' | '`' | '(' | ')' => {
                return Err(format!(
                    "shell syntax `{c}` is not supported: one tc command per line"
                ))
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// A filter while the script is read, with the line that added it.
struct PendingFilter {
    spec: FilterSpec,
    line: usize,
}

#[derive(Default)]
struct Reader {
    vars: HashMap<String, String>,
    /// The qdisc's major and the line that added it.
    qdisc: Option<(u16, usize)>,
    /// `default` as given and its line (a minor).
    default_minor: Option<(u16, usize)>,
    r2q: Option<u32>,
    classes: Vec<(ClassSpec, usize)>,
    filters: Vec<PendingFilter>,
    /// Protocol of the filters at each prio.
    prio_proto: HashMap<u32, u16>,
    notes: Vec<String>,
    dev_noted: bool,
    line: usize,
}

impl Reader {
    fn note(&mut self, text: impl core::fmt::Display) {
        self.notes.push(format!("line {}: {text}", self.line));
    }

    fn dev(&mut self, name: &str) {
        if !self.dev_noted {
            self.dev_noted = true;
            self.note(format_args!(
                "`dev {name}` ignored: braid shapes the bond's egress (noted once)"
            ));
        }
    }

    fn major(&self, what: &str) -> R<u16> {
        self.qdisc.map(|(m, _)| m).ok_or_else(|| {
            format!("{what} before `tc qdisc add ... root handle N: htb` (tc: no such qdisc)")
        })
    }

    fn command(&mut self, w: &[String]) -> R<()> {
        let Some(first) = w.first() else {
            return Ok(());
        };
        if w.len() == 1 {
            if let Some((name, value)) = first.split_once('=') {
                if !name.is_empty()
                    && !name.starts_with(|c: char| c.is_ascii_digit())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    self.vars.insert(name.to_string(), value.to_string());
                    return Ok(());
                }
            }
        }
        if first == "set" {
            self.note(format_args!("`{}` ignored", w.join(" ")));
            return Ok(());
        }
        if first != "tc" && !first.ends_with("/tc") {
            return Err(format!(
                "`{first}` is not a tc command (only `tc qdisc|class|filter ...` lines are read)"
            ));
        }
        let Some(object) = w.get(1) else {
            return Err("`tc` without an object (qdisc, class or filter)".into());
        };
        if object.starts_with('-') {
            return Err(format!("tc option `{object}` is not supported"));
        }
        let verb = w.get(2).map(String::as_str).unwrap_or("");
        let args = w.get(3..).unwrap_or(&[]);
        let which = if matches(object, "qdisc") {
            "qdisc"
        } else if matches(object, "class") {
            "class"
        } else if matches(object, "filter") {
            "filter"
        } else {
            return Err(format!(
                "unknown tc object `{object}` (braid reads qdisc, class and filter)"
            ));
        };
        let action = if matches(verb, "add") {
            "add"
        } else if matches(verb, "replace") {
            "replace"
        } else if matches(verb, "change") {
            "change"
        } else if matches(verb, "delete") {
            "delete"
        } else if matches(verb, "show") || matches(verb, "list") || verb == "lst" {
            self.note(format_args!("`tc {which} {verb}` ignored"));
            return Ok(());
        } else if verb.is_empty() {
            return Err(format!("`tc {which}` without a command (add, del, ...)"));
        } else {
            return Err(format!("unknown tc {which} command `{verb}`"));
        };
        match (which, action) {
            ("qdisc", "delete") => {
                if self.qdisc.is_some() {
                    let keep = (self.vars.clone(), self.dev_noted, self.line);
                    let notes = std::mem::take(&mut self.notes);
                    *self = Reader::default();
                    (self.vars, self.dev_noted, self.line) = keep;
                    self.notes = notes;
                    self.note("`tc qdisc del` removes the qdisc set up above: they are dropped");
                } else {
                    self.note("`tc qdisc del` ignored: braid starts with an empty shaper");
                }
                for pair in args.windows(2) {
                    if pair[0] == "dev" {
                        self.dev(&pair[1]);
                    }
                }
                Ok(())
            }
            ("qdisc", _) => self.qdisc_cmd(action, args),
            ("class", "delete") | ("filter", "delete") => Err(format!(
                "`tc {which} del` is not supported (write the script without the {which})"
            )),
            ("class", _) => self.class_cmd(action, args),
            ("filter", "add") => self.filter_cmd(args),
            ("filter", _) => Err(format!(
                "`tc filter {verb}` is not supported (use `tc filter add`)"
            )),
            _ => unreachable!("objects and actions are matched above"),
        }
    }

    fn qdisc_cmd(&mut self, action: &str, args: &[String]) -> R<()> {
        let mut it = args.iter();
        let mut root = false;
        let mut handle: Option<u16> = None;
        let mut kind: Option<&str> = None;
        while let Some(a) = it.next() {
            match a.as_str() {
                "dev" => {
                    let d = it.next().ok_or("`dev` without a device name")?;
                    self.dev(d);
                }
                "root" => root = true,
                "handle" => {
                    let h = it.next().ok_or("`handle` without a value")?;
                    let (maj, min) = h.split_once(':').unwrap_or((h.as_str(), ""));
                    let m = get_u32(maj, 16).filter(|&m| (1..0x1_0000).contains(&m));
                    match m {
                        Some(m) if min.is_empty() || get_u32(min, 16) == Some(0) => {
                            handle = Some(m as u16);
                        }
                        _ => {
                            return Err(format!(
                                "bad qdisc handle {h:?}: expected a hexadecimal major such as `1:`"
                            ))
                        }
                    }
                }
                "parent" | "ingress" | "clsact" => {
                    return Err(format!(
                        "`{a}`: braid's htb is the root qdisc (write `root handle 1: htb`)"
                    ))
                }
                k if matches(k, "estimator") || matches(k, "stab") || k == "help" => {
                    return Err(format!("qdisc option `{k}` is not supported"))
                }
                k => {
                    kind = Some(k);
                    break;
                }
            }
        }
        let Some(kind) = kind else {
            return Err("qdisc without a kind (expected `htb`)".into());
        };
        if kind != "htb" {
            return Err(format!(
                "qdisc kind `{kind}` is not supported: braid's shaper is htb"
            ));
        }
        if !root {
            return Err("the htb qdisc must be `root`".into());
        }
        let Some(handle) = handle else {
            return Err("the htb qdisc needs a handle (`handle 1:`): class ids use it".into());
        };
        match (action, self.qdisc) {
            ("add", Some((_, l))) => {
                return Err(format!(
                    "a root qdisc was already added on line {l} (tc: File exists)"
                ))
            }
            ("change", None) => return Err("`qdisc change` without a qdisc".into()),
            (_, Some((m, _))) if m != handle => {
                return Err(format!(
                    "handle {handle:x}: differs from the qdisc's {m:x}: (replace it with `qdisc del` first)"
                ))
            }
            _ => {}
        }
        self.qdisc = Some((handle, self.line));
        let mut r2q = None;
        let mut default = None;
        while let Some(a) = it.next() {
            let mut val = || it.next().ok_or(format!("`{a}` without a value"));
            if matches(a, "r2q") {
                let v = val()?;
                let n = num(v, 10, "r2q", u32::MAX)?;
                if n == 0 {
                    // The kernel forces r2q < 1 to 1 (`sch_htb.c`); the config reader
                    // refuses 0, so keep what the kernel would use.
                    self.note("`r2q 0` is 1 in the kernel: r2q = 1");
                }
                r2q = Some(n.max(1));
            } else if matches(a, "default") {
                let v = val()?;
                if let Some(m) = get_u32(v, 16) {
                    if m >= 0x1_0000 {
                        return Err(format!("bad default {v:?}: minor above ffff"));
                    }
                    default = Some(m as u16);
                } else if let Some(id) = get_tc_classid(v).filter(|_| v.contains(':')) {
                    if (id >> 16) as u16 != handle {
                        return Err(format!(
                            "bad default {v:?}: its major is not the qdisc's ({handle:x}:)"
                        ));
                    }
                    default = Some(id as u16);
                    self.note(format_args!(
                        "`default {v}` read as minor {:x}; tc itself wants `default {:x}` (it refuses `{v}`: Illegal \"default\")",
                        id as u16, id as u16
                    ));
                } else {
                    return Err(format!(
                        "bad default {v:?}: expected the hexadecimal minor of a class, such as `13`"
                    ));
                }
            } else if matches(a, "debug") {
                val()?;
            } else if matches(a, "direct_qlen") {
                let v = val()?;
                num(v, 10, "direct_qlen", u32::MAX)?;
                self.note(format_args!(
                    "`direct_qlen {v}` ignored: braid has no direct (unshaped) queue"
                ));
            } else if matches(a, "offload") {
                self.note("`offload` ignored");
            } else {
                return Err(format!("unknown htb qdisc option `{a}`"));
            }
        }
        if action == "add" || r2q.is_some() {
            self.r2q = r2q;
        }
        if action == "add" || default.is_some() {
            self.default_minor = default.map(|m| (m, self.line));
        }
        Ok(())
    }

    fn class_id(&self, s: &str, what: &str) -> R<ClassId> {
        let major = self.major(&format!("`{what}`"))?;
        let id = get_tc_classid(s).ok_or_else(|| {
            format!("bad {what} {s:?}: expected MAJOR:MINOR in hexadecimal, such as `{major:x}:10`")
        })?;
        if id == 0xffff_ffff || id == 0 || id >> 16 != u32::from(major) {
            return Err(format!(
                "bad {what} {s:?}: its major must be the qdisc's ({major:x}:)"
            ));
        }
        Ok(ClassId(id))
    }

    fn class_cmd(&mut self, action: &str, args: &[String]) -> R<()> {
        self.major("class")?;
        let mut it = args.iter();
        let mut classid = None;
        let mut parent: Option<Option<ClassId>> = None;
        let mut kind = None;
        while let Some(a) = it.next() {
            match a.as_str() {
                "dev" => {
                    let d = it.next().ok_or("`dev` without a device name")?;
                    self.dev(d);
                }
                "classid" => {
                    let v = it.next().ok_or("`classid` without a value")?;
                    let id = self.class_id(v, "classid")?;
                    if id.minor() == 0 {
                        return Err(format!("bad classid {v:?}: minor 0 is the qdisc itself"));
                    }
                    classid = Some(id);
                }
                "root" => parent = Some(None),
                "parent" => {
                    let v = it.next().ok_or("`parent` without a value")?;
                    if v == "root" {
                        parent = Some(None);
                    } else {
                        let p = self.class_id(v, "parent")?;
                        parent = Some((p.minor() != 0).then_some(p));
                    }
                }
                "handle" => return Err("`handle` is not a class option (use classid)".into()),
                k if matches(k, "estimator") => {
                    return Err("class option `estimator` is not supported".into())
                }
                k => {
                    kind = Some(k);
                    break;
                }
            }
        }
        match kind {
            Some("htb") => {}
            Some(k) => {
                return Err(format!(
                    "class kind `{k}` is not supported: the qdisc is htb"
                ))
            }
            None => return Err("class without a kind (expected `htb rate ...`)".into()),
        }
        let Some(id) = classid else {
            return Err("class without a classid".into());
        };
        let parent = parent.unwrap_or(None);
        if let Some(p) = parent {
            if p == id {
                return Err(format!("class {id} cannot be its own parent"));
            }
            if !self.classes.iter().any(|(c, _)| c.id == p) {
                return Err(format!(
                    "parent class {p} does not exist (the kernel would silently make {id} a top-level class)"
                ));
            }
        }
        let mut spec = ClassSpec::new(id, parent, 0);
        let mut rate = None;
        let mut ceil = None;
        while let Some(a) = it.next() {
            let a = a.as_str();
            let mut val = || it.next().ok_or(format!("`{a}` without a value"));
            if matches(a, "prio") {
                let v = val()?;
                let p = num(v, 10, "prio", u32::MAX)?;
                if p > 7 {
                    self.note(format_args!(
                        "class {id}: prio {p} capped at 7, as the kernel does"
                    ));
                }
                spec.prio = p.min(7) as u8;
            } else if matches(a, "mtu") || matches(a, "mpu") || matches(a, "overhead") {
                let v = val()?;
                let max = if matches(a, "mtu") { u32::MAX } else { 0xffff };
                num(v, 10, a, max)?;
                self.note(format_args!(
                    "class {id}: `{a} {v}` ignored (braid charges packets by their real size and sizes default bursts by time)"
                ));
            } else if matches(a, "linklayer") {
                let v = val()?;
                if !(matches(v, "ethernet") || matches(v, "atm") || matches(v, "adsl")) {
                    return Err(format!("bad linklayer {v:?}"));
                }
                self.note(format_args!("class {id}: `linklayer {v}` ignored"));
            } else if matches(a, "quantum") {
                let v = val()?;
                let q = num(v, 10, "quantum", u32::MAX)?;
                spec.quantum = (q != 0).then_some(q);
            } else if matches(a, "burst") || a == "buffer" || a == "maxburst" {
                spec.burst = self.burst(val()?, a, id)?;
            } else if matches(a, "cburst") || a == "cbuffer" || a == "cmaxburst" {
                spec.cburst = self.burst(val()?, a, id)?;
            } else if a == "ceil" || a == "rate" {
                let v = val()?;
                let slot = if a == "ceil" { &mut ceil } else { &mut rate };
                if slot.is_some() {
                    return Err(format!("`{a}` given twice (tc: Double \"{a}\" spec)"));
                }
                let bps = parse_rate(v).map_err(|e| e.to_string())?;
                if bps == 0 {
                    return Err(format!(
                        "{a} {v:?} is zero (below one byte per second; tc: \"rate\" is required)"
                    ));
                }
                *slot = Some(bps);
            } else {
                return Err(format!("unknown htb class option `{a}`"));
            }
        }
        let Some(rate) = rate else {
            return Err(format!("class {id}: `rate` is required"));
        };
        spec.rate_bps = rate;
        spec.ceil_bps = ceil;
        let existing = self.classes.iter().position(|(c, _)| c.id == id);
        match (action, existing) {
            ("add", Some(i)) => Err(format!(
                "class {id} already added on line {} (tc: File exists)",
                self.classes[i].1
            )),
            ("change", None) => Err(format!("`class change`: class {id} does not exist")),
            (_, Some(i)) => {
                if args.iter().any(|a| a == "parent" || a == "root")
                    && self.classes[i].0.parent != parent
                {
                    return Err(format!("class {id}: the parent cannot change"));
                }
                spec.parent = self.classes[i].0.parent;
                spec.name = self.classes[i].0.name.take();
                self.classes[i].0 = spec;
                Ok(())
            }
            (_, None) => {
                self.classes.push((spec, self.line));
                Ok(())
            }
        }
    }

    /// A `burst`/`cburst` value. Zero means the default, as in tc (`q_htb.c`: `if
    /// (!buffer) buffer = rate / hz + mtu`), so it is read as unset.
    fn burst(&mut self, v: &str, what: &str, id: ClassId) -> R<Option<u32>> {
        let bytes = self.size_cell(v, what, id)?;
        if bytes == 0 {
            self.note(format_args!(
                "class {id}: `{what} {v}` means the default burst, as in tc"
            ));
            return Ok(None);
        }
        Ok(Some(bytes))
    }

    fn size_cell(&mut self, v: &str, what: &str, id: ClassId) -> R<u32> {
        let (size, cell) = match v.split_once('/') {
            Some((s, c)) => (s, Some(c)),
            None => (v, None),
        };
        let bytes = parse_size(size).map_err(|e| format!("{what}: {e}"))?;
        if let Some(c) = cell {
            let ok = get_u32(c, 0).is_some_and(|n| n.is_power_of_two());
            if !ok {
                return Err(format!("bad {what} cell size {c:?}: a power of two"));
            }
            self.note(format_args!(
                "class {id}: {what} cell size /{c} ignored (tc's rate tables)"
            ));
        }
        Ok(bytes)
    }

    fn filter_cmd(&mut self, args: &[String]) -> R<()> {
        let major = self.major("filter")?;
        let mut it = args.iter();
        let mut prio: Option<u32> = None;
        let mut proto: Option<u16> = None;
        let mut kind = None;
        while let Some(a) = it.next() {
            let a = a.as_str();
            let mut val = || it.next().ok_or(format!("`{a}` without a value"));
            match a {
                "dev" => {
                    let d = val()?.clone();
                    self.dev(&d);
                }
                "root" => {}
                "parent" => {
                    let v = val()?;
                    if v != "root" {
                        let p = get_tc_classid(v).ok_or_else(|| format!("bad parent {v:?}"))?;
                        if p != u32::from(major) << 16 {
                            return Err(format!(
                                "filter parent {v:?}: braid reads filters on the qdisc only (`parent {major:x}:`)"
                            ));
                        }
                    }
                }
                "handle" => {
                    let v = val()?.clone();
                    self.note(format_args!("filter `handle {v}` ignored"));
                }
                "chain" => {
                    let v = val()?;
                    if get_u32(v, 0) != Some(0) {
                        return Err(format!("filter chain {v:?}: only chain 0 is supported"));
                    }
                }
                _ if matches(a, "preference") || matches(a, "priority") => {
                    let v = val()?;
                    if prio.is_some() {
                        return Err(format!("`{a}` given twice"));
                    }
                    prio = Some(num(v, 0, "filter priority", 0xffff)?);
                }
                _ if matches(a, "protocol") => {
                    let v = val()?;
                    proto = Some(match v.as_str() {
                        "ip" => ETH_P_IP,
                        "ipv6" => ETH_P_IPV6,
                        "all" => ETH_P_ALL,
                        _ => match get_u32(v, 0) {
                            Some(n)
                                if [ETH_P_IP, ETH_P_IPV6, ETH_P_ALL].contains(&(n as u16))
                                    && n < 0x1_0000 =>
                            {
                                n as u16
                            }
                            _ => {
                                return Err(format!(
                                    "filter protocol `{v}` is not supported (ip, ipv6 or all)"
                                ))
                            }
                        },
                    });
                }
                _ if matches(a, "estimator") || a == "block" || a == "ingress" || a == "egress" => {
                    return Err(format!("filter option `{a}` is not supported"))
                }
                _ => {
                    kind = Some(a);
                    break;
                }
            }
        }
        match kind {
            Some("u32") => {}
            Some(k) => {
                return Err(format!(
                    "filter kind `{k}` is not supported (braid reads u32 filters)"
                ))
            }
            None => return Err("filter without a kind (expected `u32 match ...`)".into()),
        }
        let proto = proto.unwrap_or(ETH_P_ALL);
        let mut f = FilterSpec::default();
        let mut class = None;
        // Which family the matches imply: Some(false) IPv4, Some(true) IPv6.
        let mut family: Option<bool> = match proto {
            ETH_P_IP => Some(false),
            ETH_P_IPV6 => Some(true),
            _ => None,
        };
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(a) = it.next() {
            let a = a.as_str();
            if matches(a, "match") {
                let sel = it.next().ok_or("`match` without a selector")?.as_str();
                let v6 = if matches(sel, "ip") {
                    false
                } else if matches(sel, "ip6") {
                    true
                } else if ["u32", "u16", "u8"].iter().any(|w| matches(sel, w)) {
                    return Err(format!(
                        "`match {sel}` (raw offsets) is not supported: use `match ip src|dst|sport|dport|protocol|tos ...`"
                    ));
                } else if matches(sel, "tcp") || matches(sel, "udp") {
                    return Err(format!(
                        "`match {sel} src|dst` needs u32 link/offset to find the header: use `match ip sport|dport N 0xffff`"
                    ));
                } else {
                    return Err(format!("`match {sel}` is not supported"));
                };
                match family {
                    Some(f6) if f6 != v6 => {
                        return Err(format!(
                            "`match {sel}` in a `protocol {}` filter never matches",
                            if f6 { "ipv6" } else { "ip" }
                        ))
                    }
                    _ => family = Some(v6),
                }
                let field = it
                    .next()
                    .ok_or(format!("`match {sel}` without a field"))?
                    .as_str();
                let key = match field {
                    "src" => "src",
                    "dst" => "dst",
                    "sport" => "sport",
                    "dport" => "dport",
                    "protocol" => "protocol",
                    "tos" if !v6 => "tos",
                    "priority" if v6 => "tos",
                    _ if !v6 && (matches(field, "dsfield") || matches(field, "precedence")) => "tos",
                    _ => {
                        return Err(format!(
                            "`match {sel} {field}` is not supported (src, dst, sport, dport, protocol, {})",
                            if v6 { "priority" } else { "tos, dsfield" }
                        ))
                    }
                };
                if seen.contains(&key) {
                    return Err(format!(
                        "`match {sel} {field}`: {key} already matched in this filter"
                    ));
                }
                seen.push(key);
                let mut val = |what: &str| {
                    it.next()
                        .map(String::as_str)
                        .ok_or(format!("`match {sel} {field}` without its {what}"))
                };
                match key {
                    "src" | "dst" => {
                        let p = get_prefix(val("prefix")?, v6)?;
                        if key == "src" {
                            f.src = Some(p);
                        } else {
                            f.dst = Some(p);
                        }
                    }
                    "sport" | "dport" => {
                        let v = num(val("port")?, 0, "port", 0xffff)?;
                        let m = num(val("mask")?, 16, "port mask", 0xffff)?;
                        if m == 0 {
                            self.note(format_args!(
                                "`match {sel} {field} {v} 0` matches any packet: ignored"
                            ));
                            continue;
                        }
                        if (m | 0xffff_0000).leading_ones() + m.trailing_zeros() != 32 {
                            return Err(format!(
                                "port mask {m:#x}: only masks contiguous from the top (0xffff, 0xff00, 0xfc00, ...) are ranges"
                            ));
                        }
                        let lo = (v & m) as u16;
                        let r = PortRange {
                            lo,
                            hi: lo | !(m as u16),
                        };
                        if key == "sport" {
                            f.sport = Some(r);
                        } else {
                            f.dport = Some(r);
                        }
                    }
                    "protocol" => {
                        let v = num(val("number")?, 0, "protocol", 0xff)?;
                        let m = num(val("mask")?, 16, "protocol mask", 0xff)?;
                        match m {
                            0xff => f.protocol = Some(v as u8),
                            0 => self.note(format_args!(
                                "`match {sel} protocol {v} 0` matches any packet: ignored"
                            )),
                            _ => return Err(format!("protocol mask {m:#x}: use 0xff")),
                        }
                    }
                    _ => {
                        let v = num(val("value")?, 0, field, 0xff)?;
                        let m = num(val("mask")?, 16, "mask", 0xff)?;
                        f.tos = Some(((v & m) as u8, m as u8));
                    }
                }
            } else if matches(a, "classid") || a == "flowid" {
                let v = it.next().ok_or(format!("`{a}` without a class"))?;
                let id = self.class_id(v, a)?;
                if id.minor() == 0 {
                    return Err(format!(
                        "`{a} {v}` is the qdisc itself: the kernel would send these packets unshaped"
                    ));
                }
                class = Some(id);
            } else {
                return Err(format!("u32 option `{a}` is not supported"));
            }
        }
        let Some(class) = class else {
            return Err("u32 filter without `flowid` (or `classid`)".into());
        };
        f.class = class;
        if f.src.is_none() && f.dst.is_none() {
            if let Some(v6) = family {
                let addr: IpAddr = if v6 {
                    Ipv6Addr::UNSPECIFIED.into()
                } else {
                    Ipv4Addr::UNSPECIFIED.into()
                };
                f.src = Some(Prefix { addr, len: 0 });
            }
        }
        let prio = match prio {
            Some(p) if p != 0 => {
                if let Some(&other) = self.prio_proto.get(&p) {
                    if other != proto {
                        return Err(format!(
                            "prio {p} already has filters of another protocol (kernel: Protocol mismatch for filter with specified priority)"
                        ));
                    }
                }
                p
            }
            _ => {
                let lowest_auto = self
                    .prio_proto
                    .keys()
                    .copied()
                    .filter(|&p| p >= AUTO_PRIO_FLOOR)
                    .min();
                let p = match lowest_auto {
                    None => AUTO_PRIO_FIRST,
                    Some(AUTO_PRIO_FLOOR) => {
                        return Err("no automatic filter priority left (give `prio N`)".into())
                    }
                    Some(q) => q - 1,
                };
                self.note(format_args!(
                    "filter without a prio gets prio {p} from the kernel (after lower prios)"
                ));
                p
            }
        };
        self.prio_proto.insert(prio, proto);
        f.prio = prio;
        self.filters.push(PendingFilter {
            spec: f,
            line: self.line,
        });
        Ok(())
    }

    fn finish(self) -> Result<TcScript, TcError> {
        let err = |line: usize, message: String| TcError { line, message };
        let Some((major, qline)) = self.qdisc else {
            return Err(err(
                self.line.max(1),
                "no `tc qdisc add ... root handle N: htb` in the script".into(),
            ));
        };
        let is_leaf = |id: ClassId| !self.classes.iter().any(|(c, _)| c.parent == Some(id));
        let exists = |id: ClassId| self.classes.iter().any(|(c, _)| c.id == id);
        let default_class = match self.default_minor {
            None | Some((0, _)) => None,
            Some((m, line)) => {
                let id = ClassId::new(major, m);
                if !exists(id) {
                    return Err(err(line, format!(
                        "default class {id} does not exist (the kernel would send unclassified traffic unshaped)"
                    )));
                }
                if !is_leaf(id) {
                    return Err(err(line, format!(
                        "default class {id} is not a leaf (the kernel would send unclassified traffic unshaped)"
                    )));
                }
                Some(id)
            }
        };
        for pf in &self.filters {
            let id = pf.spec.class;
            if !exists(id) {
                return Err(err(pf.line, format!("flowid {id}: no such class")));
            }
            if !is_leaf(id) {
                return Err(err(pf.line, format!(
                    "flowid {id} is not a leaf class (the kernel would send these packets to the default class)"
                )));
            }
        }
        let mut notes = self.notes;
        if default_class.is_none() {
            notes.push(format!(
                "line {qline}: no `default` class: the kernel sends unclassified traffic unshaped; braid needs one (`[shape] default = \"{major:x}:N\"`)"
            ));
        }
        let mut filters: Vec<FilterSpec> = self.filters.into_iter().map(|p| p.spec).collect();
        // Evaluation order, as the kernel walks its chain: by prio, then as added.
        filters.sort_by_key(|f| f.prio);
        Ok(TcScript {
            spec: ShapeSpec {
                link_bps: None,
                default_class,
                r2q: self.r2q.unwrap_or(10),
                classes: self.classes.into_iter().map(|(c, _)| c).collect(),
                filters,
            },
            notes,
        })
    }
}

/// Reads a whole script.
pub fn parse_script(text: &str) -> Result<TcScript, TcError> {
    let mut r = Reader::default();
    let mut lines = text.split('\n').enumerate().peekable();
    while let Some((i, first)) = lines.next() {
        let start = i + 1;
        let mut logical = String::new();
        let mut cur = first.trim_end_matches('\r');
        loop {
            let trimmed = cur.trim_end();
            // A comment line inside a continued command ends it, as in the shell.
            let is_comment = trimmed.trim_start().starts_with('#');
            match trimmed.strip_suffix('\\') {
                Some(body) if !is_comment && !body.ends_with('\\') => {
                    logical.push_str(body);
                    logical.push(' ');
                    match lines.next() {
                        Some((_, next)) => cur = next.trim_end_matches('\r'),
                        None => break,
                    }
                }
                _ => {
                    logical.push_str(cur);
                    break;
                }
            }
        }
        r.line = start;
        let w = words(&logical, &r.vars).map_err(|message| TcError {
            line: start,
            message,
        })?;
        r.command(&w).map_err(|message| TcError {
            line: start,
            message,
        })?;
    }
    r.finish()
}

fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn protocol_name(p: u8) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        2 => "igmp",
        6 => "tcp",
        17 => "udp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        58 => "icmpv6",
        132 => "sctp",
        136 => "udplite",
        _ => return None,
    })
}

/// The spec as braid's native TOML (`[shape]`, `[[shape.class]]`, `[[shape.filter]]`),
/// for `braid tc-import`.
///
/// The form, key by key (every key is written only when it has a value, in this order):
///
/// ```toml
/// [shape]
/// rate = "10mbit"       # the link rate; "auto" = sum of the paths' capacity (tc scripts have none)
/// default = "1:13"      # the leaf class for unclassified traffic (omitted when unset)
/// r2q = 5               # only when not 10
///
/// [[shape.class]]       # one per class, in the order given
/// id = "1:10"           # MAJOR:MINOR, hexadecimal, as tc
/// parent = "1:1"        # the parent class; a top-level class has parent = "1:" (the qdisc)
/// name = "alex"         # only when set
/// rate = "1900kbit"     # bit/s with a tc unit, exact: tbit, gbit, mbit, kbit or bit
/// ceil = "10mbit"       # only when set (unset = rate)
/// burst = 15360         # bytes, integer; only when set
/// cburst = 15360        # bytes, integer; only when set
/// prio = 1              # 0-7, always written
/// quantum = 1514        # bytes, integer; only when set
/// limit = 1000          # packets, integer; only when set
///
/// [[shape.filter]]      # one per filter, in evaluation order (prio, then as given)
/// prio = 1              # integer, always written
/// src = "192.168.1.110/32"   # ADDR/LEN, always with the length; IPv4 or IPv6
/// dst = "10.0.0.0/8"
/// protocol = "udp"      # a name (icmp igmp tcp udp gre esp ah icmpv6 sctp udplite) or an integer
/// sport = 1010          # an integer for one port, a string "LO-HI" for a range
/// dport = "1024-2047"
/// dscp = 46             # when the TOS mask is 0xfc: the DSCP (0-63) ...
/// tos = "0x10/0x1e"     # ... otherwise "0xVALUE/0xMASK", lower-case hex, VALUE already masked
/// class = "1:10"        # always written
/// ```
///
/// The reader takes `parent` either as `"M:"` or absent for a top-level class, sizes as
/// integers or strings with tc units, and ports as integers or strings.
pub fn to_toml(spec: &ShapeSpec) -> String {
    let mut s = String::from("[shape]\n");
    match spec.link_bps {
        Some(bps) => {
            let _ = writeln!(s, "rate = {}", toml_str(&format_rate_exact(bps)));
        }
        None => s.push_str("rate = \"auto\"\n"),
    }
    if let Some(d) = spec.default_class {
        let _ = writeln!(s, "default = {}", toml_str(&d.to_string()));
    }
    if spec.r2q != 10 {
        let _ = writeln!(s, "r2q = {}", spec.r2q);
    }
    for c in &spec.classes {
        s.push_str("\n[[shape.class]]\n");
        let _ = writeln!(s, "id = {}", toml_str(&c.id.to_string()));
        let parent = match c.parent {
            Some(p) => p.to_string(),
            None => format!("{:x}:", c.id.major()),
        };
        let _ = writeln!(s, "parent = {}", toml_str(&parent));
        if let Some(n) = &c.name {
            let _ = writeln!(s, "name = {}", toml_str(n));
        }
        let _ = writeln!(s, "rate = {}", toml_str(&format_rate_exact(c.rate_bps)));
        if let Some(ceil) = c.ceil_bps {
            let _ = writeln!(s, "ceil = {}", toml_str(&format_rate_exact(ceil)));
        }
        if let Some(b) = c.burst {
            let _ = writeln!(s, "burst = {b}");
        }
        if let Some(b) = c.cburst {
            let _ = writeln!(s, "cburst = {b}");
        }
        let _ = writeln!(s, "prio = {}", c.prio);
        if let Some(q) = c.quantum {
            let _ = writeln!(s, "quantum = {q}");
        }
        if let Some(l) = c.limit {
            let _ = writeln!(s, "limit = {l}");
        }
    }
    let mut filters: Vec<&FilterSpec> = spec.filters.iter().collect();
    filters.sort_by_key(|f| f.prio);
    for f in filters {
        s.push_str("\n[[shape.filter]]\n");
        let _ = writeln!(s, "prio = {}", f.prio);
        if let Some(p) = f.src {
            let _ = writeln!(s, "src = {}", toml_str(&p.to_string()));
        }
        if let Some(p) = f.dst {
            let _ = writeln!(s, "dst = {}", toml_str(&p.to_string()));
        }
        if let Some(p) = f.protocol {
            match protocol_name(p) {
                Some(n) => {
                    let _ = writeln!(s, "protocol = {}", toml_str(n));
                }
                None => {
                    let _ = writeln!(s, "protocol = {p}");
                }
            }
        }
        for (key, r) in [("sport", f.sport), ("dport", f.dport)] {
            match r {
                Some(r) if r.lo == r.hi => {
                    let _ = writeln!(s, "{key} = {}", r.lo);
                }
                Some(r) => {
                    let _ = writeln!(s, "{key} = {}", toml_str(&r.to_string()));
                }
                None => {}
            }
        }
        if let Some((v, m)) = f.tos {
            if m == 0xfc {
                let _ = writeln!(s, "dscp = {}", (v & m) >> 2);
            } else {
                let _ = writeln!(s, "tos = \"{:#04x}/{:#04x}\"", v & m, m);
            }
        }
        let _ = writeln!(s, "class = {}", toml_str(&f.class.to_string()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `burst 0` / `cburst 0` mean the default in tc, and must not reach the spec as 0:
    /// the config reader refuses a zero burst, so `braid tc-import` printed TOML that
    /// `braid check` refused (found by the `tc` fuzz target).
    #[test]
    fn zero_burst_means_default() {
        let s = parse_script(
            "tc qdisc add dev d0 root handle 1: htb default 10\n\
             tc class add dev d0 parent 1: classid 1:10 htb rate 1mbit burst 0 cburst 0b/8\n",
        )
        .unwrap();
        let c = &s.spec.classes[0];
        assert_eq!((c.burst, c.cburst), (None, None));
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("`burst 0` means the default")),
            "{:?}",
            s.notes
        );
        let toml = to_toml(&s.spec);
        assert!(!toml.contains("burst"), "{toml}");
    }

    /// `r2q 0` is 1 in the kernel; the spec must not carry the 0, which the config reader
    /// refuses (found by the `tc` fuzz target: tc-import printed `r2q = 0`).
    #[test]
    fn zero_r2q_is_one() {
        let s = parse_script(
            "tc qdisc add dev d0 root handle 1: htb default 10 r2q 0\n\
             tc class add dev d0 parent 1: classid 1:10 htb rate 1mbit\n",
        )
        .unwrap();
        assert_eq!(s.spec.r2q, 1);
        assert!(
            s.notes.iter().any(|n| n.contains("`r2q 0`")),
            "{:?}",
            s.notes
        );
        assert!(to_toml(&s.spec).contains("r2q = 1\n"));
    }

    /// The seed's script (the HTB link-sharing seed, 001), verbatim, as in `scenarios/htb-seed.tc`.
    const SEED: &str = r"#clear queuing discipline
tc qdisc del dev eth1 root

#place queuing discipline on interface
tc qdisc add dev eth1 root handle 1: htb default 1:13

#create root parent
tc class add dev eth1 parent 1: classid 1:1 htb rate 10mbit ceil 10mbit

#create classes for machines
#Alex's 20% class
tc class add dev eth1 parent 1:1 classid 1:10 htb rate 1.9mbit \
    ceil 10mbit prio 1
#Betty's 30% class
tc class add dev eth1 parent 1:1 classid 1:11 htb rate 2.9mbit \
    ceil 10mbit prio 1
#Carl's 50% class
tc class add dev eth1 parent 1:1 classid 1:12 htb rate 4.9mbit \
    ceil 10mbit prio 1
#Guest's 'leftovers' class
tc class add dev eth1 parent 1:1 classid 1:13 htb rate .3mbit \
    ceil 10mbit prio 0

#sort traffic to nodes
#Alex's ip is 192.168.1.110
tc filter add dev eth1 parent 1: protocol ip prio 1 u32 \
    match ip src 192.168.1.110 flowid 1:10
#Betty's ip is 192.168.1.111
tc filter add dev eth1 parent 1: protocol ip prio 1 u32 \
    match ip src 192.168.1.111 flowid 1:11
#Carl's ip is 192.168.1.112
tc filter add dev eth1 parent 1: protocol ip prio 1 u32 \
    match ip src 192.168.1.112 flowid 1:12
#Guest is any connection
tc filter add dev eth1 parent 1: protocol ip prio 0 u32 \
    match ip src 0.0.0.0/0 flowid 1:13
";

    fn id(minor: u16) -> ClassId {
        ClassId::new(1, minor)
    }

    fn class(minor: u16, parent: Option<u16>, rate: u64, prio: u8) -> ClassSpec {
        let mut c = ClassSpec::new(id(minor), parent.map(id), rate);
        c.ceil_bps = Some(10_000_000);
        c.prio = prio;
        c
    }

    fn src(prio: u32, p: &str, minor: u16) -> FilterSpec {
        FilterSpec {
            prio,
            src: Some(Prefix::parse(p).unwrap()),
            class: id(minor),
            ..FilterSpec::default()
        }
    }

    #[test]
    fn seed_script_verbatim() {
        let got = parse_script(SEED).unwrap();
        let want = ShapeSpec {
            link_bps: None,
            default_class: Some(ClassId(0x1_0013)),
            r2q: 10,
            classes: vec![
                class(0x1, None, 10_000_000, 0),
                class(0x10, Some(0x1), 1_900_000, 1),
                class(0x11, Some(0x1), 2_900_000, 1),
                class(0x12, Some(0x1), 4_900_000, 1),
                class(0x13, Some(0x1), 300_000, 0),
            ],
            filters: vec![
                src(1, "192.168.1.110/32", 0x10),
                src(1, "192.168.1.111/32", 0x11),
                src(1, "192.168.1.112/32", 0x12),
                // `prio 0`: the kernel assigns 49152 (verified: `tc filter show` prints
                // `pref 49152` for it, after the three `pref 1` filters).
                src(49152, "0.0.0.0/0", 0x13),
            ],
        };
        assert_eq!(got.spec, want);
        assert_eq!(got.spec.validate_basic(), Ok(()));
        assert_eq!(
            got.notes,
            vec![
                "line 2: `tc qdisc del` ignored: braid starts with an empty shaper",
                "line 2: `dev eth1` ignored: braid shapes the bond's egress (noted once)",
                "line 5: `default 1:13` read as minor 13; tc itself wants `default 13` (it refuses `1:13`: Illegal \"default\")",
                "line 35: filter without a prio gets prio 49152 from the kernel (after lower prios)",
            ]
        );
    }

    #[test]
    fn seed_script_to_toml() {
        let spec = parse_script(SEED).unwrap().spec;
        let toml = to_toml(&spec);
        assert_eq!(
            toml,
            r#"[shape]
rate = "auto"
default = "1:13"

[[shape.class]]
id = "1:1"
parent = "1:"
rate = "10mbit"
ceil = "10mbit"
prio = 0

[[shape.class]]
id = "1:10"
parent = "1:1"
rate = "1900kbit"
ceil = "10mbit"
prio = 1

[[shape.class]]
id = "1:11"
parent = "1:1"
rate = "2900kbit"
ceil = "10mbit"
prio = 1

[[shape.class]]
id = "1:12"
parent = "1:1"
rate = "4900kbit"
ceil = "10mbit"
prio = 1

[[shape.class]]
id = "1:13"
parent = "1:1"
rate = "300kbit"
ceil = "10mbit"
prio = 0

[[shape.filter]]
prio = 1
src = "192.168.1.110/32"
class = "1:10"

[[shape.filter]]
prio = 1
src = "192.168.1.111/32"
class = "1:11"

[[shape.filter]]
prio = 1
src = "192.168.1.112/32"
class = "1:12"

[[shape.filter]]
prio = 49152
src = "0.0.0.0/0"
class = "1:13"
"#
        );
    }

    const HEAD: &str = "tc qdisc add dev d0 root handle 1: htb default 10\n\
                        tc class add dev d0 parent 1: classid 1:1 htb rate 10mbit\n\
                        tc class add dev d0 parent 1:1 classid 1:10 htb rate 1mbit\n";

    fn with(line: &str) -> Result<TcScript, TcError> {
        parse_script(&format!("{HEAD}{line}\n"))
    }

    #[test]
    fn full_filter_and_class_options() {
        let s = with(
            "tc filter add dev d0 parent 1: protocol ip pref 7 u32 match ip tos 0x10 0xfc \
             match ip dport 1024 0xfc00 match ip protocol 17 0xff match ip sport 1010 0xffff \
             match ip dst 10.1.2.3/255.255.0.0 flowid 1:10\n\
             tc class add dev d0 parent 1:1 classid 1:a htb rate 1mbit pr 3 q 5000 b 2k cb 3k ceil 2mbps",
        )
        .unwrap();
        assert_eq!(
            s.spec.filters,
            vec![FilterSpec {
                prio: 7,
                src: None,
                dst: Some(Prefix::parse("10.1.0.0/16").unwrap()),
                protocol: Some(17),
                sport: Some(PortRange { lo: 1010, hi: 1010 }),
                dport: Some(PortRange { lo: 1024, hi: 2047 }),
                tos: Some((0x10, 0xfc)),
                class: id(0x10),
            }]
        );
        let c = s.spec.classes.last().unwrap();
        assert_eq!(c.id, ClassId(0x1_000a));
        assert_eq!(
            (c.prio, c.quantum, c.burst, c.cburst),
            (3, Some(5000), Some(2048), Some(3072))
        );
        assert_eq!(c.ceil_bps, Some(16_000_000));
        let toml = to_toml(&s.spec);
        assert!(toml.contains("dscp = 4\n"), "{toml}");
        assert!(
            toml.contains("dport = \"1024-2047\"\nprotocol")
                || toml.contains("sport = 1010\ndport = \"1024-2047\"\n"),
            "{toml}"
        );
        assert!(toml.contains("protocol = \"udp\"\n"), "{toml}");
        assert!(
            toml.contains("burst = 2048\ncburst = 3072\nprio = 3\nquantum = 5000\n"),
            "{toml}"
        );
    }

    /// `tc filter show` on iproute2 6.1 printed, for these matches:
    /// `match 0a000000/ff000000 at 12` (src 10/8), `match 00000008/0000ffff at 20`
    /// (dport 010 is octal 8), `match 00b80000/00fc0000 at 0` (dsfield 0xb8 0xfc),
    /// `match 03f20400/fffffc00 at 20` (sport 1010 0xffff + dport 1024 0xfc00),
    /// `match 0a010000/ffff0000 at 16` (dst 10.1.2.3/255.255.0.0).
    #[test]
    fn u32_forms_pinned_against_tc_6_1() {
        let s = with(
            "tc filter add dev d0 parent 1: protocol ip prio 8 u32 match ip src 10/8 \
             match ip dport 010 0xffff flowid 1:10\n\
             tc filter add dev d0 parent 1: protocol ip prio 9 u32 match ip dsfield 0xb8 0xfc classid 1:10",
        )
        .unwrap();
        let f = &s.spec.filters;
        assert_eq!(f[0].src, Some(Prefix::parse("10.0.0.0/8").unwrap()));
        assert_eq!(f[0].dport, Some(PortRange { lo: 8, hi: 8 }));
        assert_eq!(f[1].tos, Some((0xb8, 0xfc)));
        assert_eq!(f[1].class, id(0x10));
    }

    #[test]
    fn ipv6_filters_and_family() {
        let s = with(
            "tc filter add dev d0 parent 1: protocol ipv6 prio 2 u32 match ip6 dst 2001:db8::/32 \
             match ip6 priority 0xb8 0xfc flowid 1:10\n\
             tc filter add dev d0 parent 1: protocol ip prio 3 u32 match ip dport 22 0xffff flowid 1:10\n\
             tc filter add dev d0 parent 1: prio 4 u32 flowid 1:10",
        )
        .unwrap();
        let f = &s.spec.filters;
        assert_eq!(f[0].dst, Some(Prefix::parse("2001:db8::/32").unwrap()));
        assert_eq!(f[0].tos, Some((0xb8, 0xfc)));
        // `protocol ip` without addresses: restricted to IPv4 by src 0.0.0.0/0.
        assert_eq!(f[1].src, Some(Prefix::parse("0.0.0.0/0").unwrap()));
        // `protocol all` (tc 6.1's default) with no matches: matches everything.
        assert_eq!(f[2].src, None);
    }

    #[test]
    fn auto_prio_like_the_kernel() {
        // Verified: a second prio-less filter becomes pref 49151 (evaluated before 49152).
        let s = with(
            "tc filter add dev d0 parent 1: protocol ip u32 match ip src 10.0.0.1 flowid 1:10\n\
             tc filter add dev d0 parent 1: protocol ip prio 0 u32 match ip src 10.0.0.2 flowid 1:10\n\
             tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 10.0.0.3 flowid 1:10",
        )
        .unwrap();
        let prios: Vec<(u32, String)> = s
            .spec
            .filters
            .iter()
            .map(|f| (f.prio, f.src.unwrap().to_string()))
            .collect();
        assert_eq!(
            prios,
            vec![
                (1, "10.0.0.3/32".to_string()),
                (49151, "10.0.0.2/32".to_string()),
                (49152, "10.0.0.1/32".to_string()),
            ]
        );
    }

    #[test]
    fn shell_features() {
        let s = parse_script(
            "#!/bin/sh\nset -e\nTC=/sbin/tc\nDEV=eth1\n\
             $TC qdisc add dev $DEV root handle 1: htb default 10 r2q 5 # trailing comment\n\
             ${TC} class add dev \"$DEV\" parent 1: classid 1:10 htb rate '5mbit'\r\n\
             \\\n\
             /usr/sbin/tc filter add dev eth1 parent 1: protocol ip prio 1 u32 \\\n  match ip src 10/8 \\\n  flowid 1:10\n",
        )
        .unwrap();
        assert_eq!(s.spec.r2q, 5);
        assert_eq!(s.spec.classes[0].rate_bps, 5_000_000);
        assert_eq!(
            s.spec.filters[0].src,
            Some(Prefix::parse("10.0.0.0/8").unwrap())
        );
        assert!(to_toml(&s.spec).contains("r2q = 5\n"));
    }

    #[test]
    fn qdisc_del_after_setup_clears_it() {
        let s = with("tc qdisc del dev d0 root\ntc qdisc add dev d0 root handle 2: htb default 5\ntc class add dev d0 parent 2: classid 2:5 htb rate 1mbit").unwrap();
        assert_eq!(s.spec.classes.len(), 1);
        assert_eq!(s.spec.default_class, Some(ClassId::new(2, 5)));
    }

    /// One malformed line of each kind: the error names the line and the bad token.
    #[test]
    fn malformed_lines() {
        let cases: &[(&str, &str)] = &[
            ("ip link set d0 up", "`ip` is not a tc command"),
            ("tc qdisc add dev d0 root handle 1: htb", "already added on line 1"),
            ("tc foo add", "unknown tc object `foo`"),
            ("tc class frob dev d0", "unknown tc class command `frob`"),
            ("tc -s class show dev d0", "tc option `-s`"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate 1mbit ceil 2furlongs", "unknown unit \"furlongs\""),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate x", "bad rate \"x\""),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb ceil 2mbit", "`rate` is required"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate 1mbit rate 2mbit", "given twice"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate 0bit", "is zero"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate 1mbit burst 1tb", "bad size \"1tb\""),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate 1mbit wibble 3", "unknown htb class option `wibble`"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate 1mbit prio x", "bad prio \"x\""),
            ("tc class add dev d0 parent 1:1 classid 2:20 htb rate 1mbit", "bad classid \"2:20\": its major must be the qdisc's (1:)"),
            ("tc class add dev d0 parent 1:1 classid 1:zz htb rate 1mbit", "bad classid \"1:zz\""),
            ("tc class add dev d0 parent 1:99 classid 1:20 htb rate 1mbit", "parent class 1:99 does not exist"),
            ("tc class add dev d0 parent 1:1 classid 1:10 htb rate 1mbit", "class 1:10 already added on line 3"),
            ("tc class add dev d0 parent 1:1 classid 1:20 hfsc rate 1mbit", "class kind `hfsc`"),
            ("tc qdisc replace dev d0 root handle 1: fq_codel", "qdisc kind `fq_codel` is not supported"),
            ("tc qdisc replace dev d0 root handle 1: htb default 1:zz", "bad default \"1:zz\""),
            ("tc qdisc replace dev d0 root handle 1: htb default 2:13", "its major is not the qdisc's"),
            ("tc qdisc replace dev d0 root handle 1: htb quux", "unknown htb qdisc option `quux`"),
            ("tc qdisc replace dev d0 root handle 1: htb default 99", "default class 1:99 does not exist"),
            ("tc qdisc replace dev d0 root handle 1: htb default 1", "default class 1:1 is not a leaf"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 10.0.0.300 flowid 1:10", "bad IPv4 prefix \"10.0.0.300\""),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip dport 80 0x0ff0 flowid 1:10", "port mask 0xff0"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip dport 70000 0xffff flowid 1:10", "bad port \"70000\""),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xf0 flowid 1:10", "protocol mask 0xf0"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip ihl 5 0xf flowid 1:10", "`match ip ihl` is not supported"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match tcp dst 80 0xffff flowid 1:10", "use `match ip sport|dport"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip6 src ::/0 flowid 1:10", "never matches"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 1.2.3.4 match ip src 1.2.3.5 flowid 1:10", "already matched"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 1.2.3.4", "without `flowid`"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 1.2.3.4 flowid 1:99", "flowid 1:99: no such class"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 1.2.3.4 flowid 1:1", "flowid 1:1 is not a leaf"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 1.2.3.4 flowid 2:10", "bad flowid \"2:10\""),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip src 1.2.3.4 flowid 1:", "the qdisc itself"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 fw flowid 1:10", "filter kind `fw`"),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 link 1: flowid 1:10", "u32 option `link`"),
            ("tc filter add dev d0 parent 1:1 protocol ip prio 1 u32 flowid 1:10", "filters on the qdisc only"),
            ("tc filter add dev d0 parent 1: protocol arp prio 1 u32 flowid 1:10", "filter protocol `arp`"),
            ("tc filter add dev d0 parent 1: protocol ip prio 70000 u32 flowid 1:10", "bad filter priority \"70000\""),
            ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 flowid 1:10\ntc filter add dev d0 parent 1: protocol ipv6 prio 1 u32 flowid 1:10", "Protocol mismatch"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate $RATE", "unknown variable $RATE"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate 1mbit; echo", "shell syntax `;`"),
            ("tc class add dev d0 parent 1:1 classid 1:20 htb rate \"1mbit", "unterminated"),
        ];
        for &(line, want) in cases {
            let err = with(line).unwrap_err();
            // The bad command is on line 4 (after HEAD's three lines), or line 5 when the
            // case has two lines and the second is the bad one.
            let expect_line = if line.contains('\n') { 5 } else { 4 };
            assert_eq!(err.line, expect_line, "{line}: {err}");
            assert!(err.message.contains(want), "{line}: {err} lacks {want:?}");
        }
    }

    #[test]
    fn class_before_qdisc_and_empty_script() {
        let e = parse_script("\n\ntc class add dev d0 parent 1: classid 1:1 htb rate 1mbit\n")
            .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("before `tc qdisc add"), "{e}");
        let e = parse_script("# nothing\n").unwrap_err();
        assert!(e.message.contains("no `tc qdisc add"), "{e}");
        // A continued command reports its first line.
        let e = parse_script("tc qdisc add dev d0 root handle 1: htb\n\ntc class add dev d0 \\\n parent 1: \\\n classid 1:1 htb rate 1mbt\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("\"1mbt\""), "{e}");
    }

    #[test]
    fn default_absent_is_a_note() {
        let s = parse_script("tc qdisc add dev d0 root handle 1: htb\ntc class add dev d0 parent 1: classid 1:1 htb rate 1mbit prio 9").unwrap();
        assert_eq!(s.spec.default_class, None);
        assert_eq!(s.spec.classes[0].prio, 7);
        assert!(s.notes.iter().any(|n| n.contains("prio 9 capped at 7")));
        assert!(s
            .notes
            .iter()
            .any(|n| n.starts_with("line 1: no `default` class")));
    }

    #[test]
    fn tc_number_forms() {
        assert_eq!(get_tc_classid("1:10"), Some(0x1_0010));
        assert_eq!(get_tc_classid("1:"), Some(0x1_0000));
        assert_eq!(get_tc_classid("10"), Some(0x10));
        assert_eq!(get_tc_classid(":10"), Some(0x10));
        assert_eq!(get_tc_classid("root"), Some(0xffff_ffff));
        assert_eq!(get_tc_classid("1:10000"), None);
        assert_eq!(get_u32("010", 0), Some(8));
        assert_eq!(get_u32("0x10", 0), Some(16));
        assert_eq!(get_u32("ffff", 16), Some(0xffff));
        assert_eq!(get_u32("-1", 10), None);
        assert_eq!(get_addr_ipv4("10"), Some(Ipv4Addr::new(10, 0, 0, 0)));
        assert_eq!(
            get_addr_ipv4("192.168.1.110"),
            Some(Ipv4Addr::new(192, 168, 1, 110))
        );
        assert_eq!(get_addr_ipv4("1.2.3.4.5"), None);
        assert_eq!(get_prefix("any", false).unwrap().len, 0);
        assert!(get_prefix("1.2.3.4/255.0.255.0", false).is_err());
    }

    #[test]
    fn toml_escapes_and_non_default_fields() {
        let mut spec = parse_script(SEED).unwrap().spec;
        spec.link_bps = Some(10_000_000);
        spec.classes[1].name = Some("al\"ex\\".into());
        spec.classes[1].limit = Some(50);
        spec.filters[0].protocol = Some(99);
        spec.filters[0].tos = Some((0x10, 0x1e));
        spec.filters[0].sport = Some(PortRange { lo: 5, hi: 5 });
        let t = to_toml(&spec);
        assert!(
            t.starts_with("[shape]\nrate = \"10mbit\"\ndefault = \"1:13\"\n"),
            "{t}"
        );
        assert!(t.contains("name = \"al\\\"ex\\\\\"\n"), "{t}");
        assert!(t.contains("prio = 1\nlimit = 50\n"), "{t}");
        assert!(
            t.contains("protocol = 99\nsport = 5\ntos = \"0x10/0x1e\"\nclass = \"1:10\""),
            "{t}"
        );
    }
}
