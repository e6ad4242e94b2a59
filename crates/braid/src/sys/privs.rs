//! Running as another user: looking up accounts, and switching to one while keeping a
//! chosen set of capabilities (`setgroups`, `setresgid`, `setresuid` with
//! `PR_SET_KEEPCAPS`, then `capset`), with `PR_SET_NO_NEW_PRIVS`. What to keep and why is
//! decided in [`crate::privileges`].
//!
//! Capabilities belong to a thread: [`switch_user`] must run while the process has one
//! thread (the daemon's start). The uid and gid calls go through glibc, which applies them
//! to every thread.
use std::ffi::{CStr, CString};
use std::fmt;
use std::io;

use caps::{CapSet, Capability, CapsHashSet};

use super::cvt;

/// A user to run as, looked up in the passwd and group databases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// The user's name.
    pub user: String,
    /// Its uid.
    pub uid: u32,
    /// The group to run as: the user's primary group, or the one asked for.
    pub gid: u32,
    /// That group's name (its number when it has none).
    pub group: String,
    /// Supplementary groups: the user's, as `initgroups` would set them (so a user in
    /// `dialout` may re-open a serial line).
    pub groups: Vec<u32>,
}

/// Why an account could not be found or switched to.
#[derive(Debug)]
pub enum PrivError {
    /// No such user.
    UnknownUser(String),
    /// No such group.
    UnknownGroup(String),
    /// The lookup itself failed (NSS error).
    Lookup(String, io::Error),
    /// A system call failed.
    Call(&'static str, io::Error),
    /// A capability call failed.
    Caps(&'static str, String),
    /// After the switch, the process could still become root again.
    NotDropped(String),
}

impl fmt::Display for PrivError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrivError::UnknownUser(u) => {
                write!(f, "unknown user {u:?} (not in the passwd database)")
            }
            PrivError::UnknownGroup(g) => {
                write!(f, "unknown group {g:?} (not in the group database)")
            }
            PrivError::Lookup(what, e) => write!(f, "cannot look up {what}: {e}"),
            PrivError::Call(what, e) => write!(f, "{what}: {e}"),
            PrivError::Caps(what, e) => write!(f, "{what}: {e}"),
            PrivError::NotDropped(why) => write!(f, "privileges were not dropped: {why}"),
        }
    }
}

impl std::error::Error for PrivError {}

/// Call a `get*_r` lookup with `buf`, grown as needed (the entry's strings point into it);
/// `Ok(false)` when there is no entry.
fn lookup_r(
    what: &str,
    buf: &mut Vec<libc::c_char>,
    mut call: impl FnMut(&mut [libc::c_char]) -> libc::c_int,
) -> Result<bool, PrivError> {
    if buf.is_empty() {
        buf.resize(4096, 0);
    }
    loop {
        match call(buf) {
            0 => return Ok(true),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(false),
            e => {
                return Err(PrivError::Lookup(
                    what.to_owned(),
                    io::Error::from_raw_os_error(e),
                ))
            }
        }
    }
}

/// A name as a C string (a name with a NUL cannot exist in the databases).
fn c_name(name: &str) -> Option<CString> {
    CString::new(name).ok()
}

/// The uid and primary gid of user `name`.
fn user_ids(name: &str) -> Result<(u32, u32), PrivError> {
    let unknown = || PrivError::UnknownUser(name.to_owned());
    let cname = c_name(name).ok_or_else(unknown)?;
    // SAFETY: all-zero is a valid passwd (null pointers, zero ids).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = Vec::new();
    let found = lookup_r(&format!("user {name:?}"), &mut buf, |buf| {
        // SAFETY: every pointer is valid for the call; buf.len() is its size.
        unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pw,
                buf.as_mut_ptr(),
                buf.len(),
                &mut out,
            )
        }
    })?;
    if !found || out.is_null() {
        return Err(unknown());
    }
    Ok((pw.pw_uid, pw.pw_gid))
}

/// The gid of group `name`.
fn group_id(name: &str) -> Result<u32, PrivError> {
    let unknown = || PrivError::UnknownGroup(name.to_owned());
    let cname = c_name(name).ok_or_else(unknown)?;
    // SAFETY: all-zero is a valid group (null pointers, zero id).
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    let mut buf = Vec::new();
    let found = lookup_r(&format!("group {name:?}"), &mut buf, |buf| {
        // SAFETY: every pointer is valid for the call; buf.len() is its size.
        unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut gr,
                buf.as_mut_ptr(),
                buf.len(),
                &mut out,
            )
        }
    })?;
    if !found || out.is_null() {
        return Err(unknown());
    }
    Ok(gr.gr_gid)
}

/// The name of group `gid`, or its number.
pub fn group_name(gid: u32) -> String {
    // SAFETY: all-zero is a valid group.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    let mut buf = Vec::new();
    let found = lookup_r("group", &mut buf, |buf| {
        // SAFETY: every pointer is valid for the call; buf.len() is its size.
        unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut out) }
    });
    if matches!(found, Ok(true)) && !out.is_null() && !gr.gr_name.is_null() {
        // SAFETY: getgrgid_r succeeded: gr_name points to a NUL-terminated string in
        // `buf`, which is alive and unchanged since.
        return unsafe { CStr::from_ptr(gr.gr_name) }
            .to_string_lossy()
            .into_owned();
    }
    gid.to_string()
}

/// The name of user `uid`, or its number.
pub fn user_name(uid: u32) -> String {
    // SAFETY: all-zero is a valid passwd.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = Vec::new();
    let found = lookup_r("user", &mut buf, |buf| {
        // SAFETY: every pointer is valid for the call; buf.len() is its size.
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) }
    });
    if matches!(found, Ok(true)) && !out.is_null() && !pw.pw_name.is_null() {
        // SAFETY: getpwuid_r succeeded: pw_name points into `buf`, alive and unchanged.
        return unsafe { CStr::from_ptr(pw.pw_name) }
            .to_string_lossy()
            .into_owned();
    }
    uid.to_string()
}

/// The supplementary groups of user `name` whose primary group is `gid` (`getgrouplist`).
fn group_list(name: &str, gid: u32) -> Result<Vec<u32>, PrivError> {
    let cname = c_name(name).ok_or_else(|| PrivError::UnknownUser(name.to_owned()))?;
    let mut n: libc::c_int = 32;
    for _ in 0..8 {
        let mut groups: Vec<libc::gid_t> = vec![0; usize::try_from(n).unwrap_or(32)];
        let mut got = n;
        // SAFETY: groups has room for `got` entries; getgrouplist writes at most that many
        // and sets `got` to the number it has.
        let r = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut got) };
        if r >= 0 {
            groups.truncate(usize::try_from(got).unwrap_or(0));
            return Ok(groups);
        }
        n = got.max(n.saturating_mul(2));
    }
    Err(PrivError::Lookup(
        format!("the groups of user {name:?}"),
        io::Error::from_raw_os_error(libc::ERANGE),
    ))
}

impl Account {
    /// Look up `user` and, when given, `group` (else the user's primary group).
    pub fn lookup(user: &str, group: Option<&str>) -> Result<Account, PrivError> {
        let (uid, primary) = user_ids(user)?;
        let gid = match group {
            Some(g) => group_id(g)?,
            None => primary,
        };
        let mut groups = group_list(user, primary)?;
        if !groups.contains(&gid) {
            groups.push(gid);
        }
        Ok(Account {
            user: user.to_owned(),
            uid,
            gid,
            group: group.map_or_else(|| group_name(gid), str::to_owned),
            groups,
        })
    }
}

fn caps_err(what: &'static str) -> impl Fn(caps::errors::CapsError) -> PrivError {
    move |e| PrivError::Caps(what, e.to_string())
}

/// Become `a` keeping only `keep` (permitted and effective; inheritable, ambient and the
/// bounding set emptied of everything else), and set no_new_privs. Checks afterwards that
/// the old ids cannot be regained. Must run as root, with one thread.
pub fn switch_user(a: &Account, keep: &CapsHashSet) -> Result<(), PrivError> {
    // While still root (CAP_SETPCAP): nothing outside `keep` can ever come back, not even
    // through a file capability after an exec.
    for c in caps::all().difference(keep) {
        if caps::has_cap(None, CapSet::Bounding, *c).unwrap_or(false) {
            caps::drop(None, CapSet::Bounding, *c).map_err(caps_err("PR_CAPBSET_DROP"))?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(caps_err("PR_CAP_AMBIENT_CLEAR_ALL"))?;
    caps::clear(None, CapSet::Inheritable).map_err(caps_err("capset inheritable"))?;
    caps::securebits::set_keepcaps(true).map_err(caps_err("PR_SET_KEEPCAPS"))?;
    // SAFETY: groups is a valid array of its length.
    cvt(unsafe { libc::setgroups(a.groups.len(), a.groups.as_ptr()) })
        .map_err(|e| PrivError::Call("setgroups", e))?;
    // SAFETY: plain syscalls on ids.
    cvt(unsafe { libc::setresgid(a.gid, a.gid, a.gid) })
        .map_err(|e| PrivError::Call("setresgid", e))?;
    // SAFETY: as above.
    cvt(unsafe { libc::setresuid(a.uid, a.uid, a.uid) })
        .map_err(|e| PrivError::Call("setresuid", e))?;
    // KEEPCAPS kept the permitted set through the uid change; the effective set was
    // cleared. Narrow the permitted set, then raise what is kept.
    caps::set(None, CapSet::Permitted, keep).map_err(caps_err("capset permitted"))?;
    caps::set(None, CapSet::Effective, keep).map_err(caps_err("capset effective"))?;
    caps::securebits::set_keepcaps(false).map_err(caps_err("PR_SET_KEEPCAPS"))?;
    set_no_new_privs()?;
    verify(a, keep)
}

/// `PR_SET_NO_NEW_PRIVS`: no exec can grant privileges (setuid binaries, file caps).
fn set_no_new_privs() -> Result<(), PrivError> {
    // SAFETY: prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })
        .map(|_| ())
        .map_err(|e| PrivError::Call("PR_SET_NO_NEW_PRIVS", e))
}

/// True when no_new_privs is set.
pub fn no_new_privs() -> bool {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 }
}

/// The real, effective and saved uid.
pub fn uids() -> (u32, u32, u32) {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three valid out-pointers.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    (r, e, s)
}

/// The effective gid.
pub fn egid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// The effective capabilities, by name (`CAP_NET_BIND_SERVICE`), sorted.
pub fn effective_caps() -> Vec<String> {
    let mut v: Vec<String> = caps::read(None, CapSet::Effective)
        .map(|s| s.iter().map(Capability::to_string).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// After the switch: every uid is the account's, root cannot be regained, and the
/// capability sets are exactly `keep`.
fn verify(a: &Account, keep: &CapsHashSet) -> Result<(), PrivError> {
    let ids = uids();
    if ids != (a.uid, a.uid, a.uid) {
        return Err(PrivError::NotDropped(format!("uids are {ids:?}")));
    }
    // SAFETY: a plain syscall; it must fail now.
    if unsafe { libc::setresuid(0, 0, 0) } == 0 {
        return Err(PrivError::NotDropped("setresuid(0) still works".into()));
    }
    for set in [CapSet::Permitted, CapSet::Effective] {
        let have = caps::read(None, set).map_err(caps_err("capget"))?;
        if &have != keep {
            return Err(PrivError::NotDropped(format!(
                "capabilities left: {}",
                have.iter()
                    .map(Capability::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

/// The running kernel's (major, minor) version, from `uname`; (0, 0) if unreadable.
pub fn kernel_release() -> (u32, u32) {
    // SAFETY: all-zero is a valid utsname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid utsname to fill.
    if unsafe { libc::uname(&mut u) } != 0 {
        return (0, 0);
    }
    // SAFETY: uname filled `release` with a NUL-terminated string.
    let release = unsafe { CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy();
    parse_release(&release)
}

/// `6.18.44-fc` -> (6, 18).
fn parse_release(s: &str) -> (u32, u32) {
    let mut parts = s.split(|c: char| !c.is_ascii_digit());
    let mut num = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (num(), num())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(parse_release("6.18.44-fc-v595"), (6, 18));
        assert_eq!(parse_release("5.4.0"), (5, 4));
        assert_eq!(parse_release("junk"), (0, 0));
        assert!(kernel_release() >= (3, 0));
    }

    #[test]
    fn looks_up_root_and_refuses_unknown_names() {
        let a = Account::lookup("root", None).unwrap();
        assert_eq!((a.uid, a.gid), (0, 0));
        assert_eq!(a.group, group_name(0));
        assert!(a.groups.contains(&0));
        assert_eq!(user_name(0), "root");
        let e = Account::lookup("no-such-user-braid", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown user \"no-such-user-braid\" (not in the passwd database)"
        );
        let e = Account::lookup("root", Some("no-such-group-braid")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown group \"no-such-group-braid\" (not in the group database)"
        );
        assert!(matches!(
            Account::lookup("a\0b", None),
            Err(PrivError::UnknownUser(_))
        ));
    }
}
