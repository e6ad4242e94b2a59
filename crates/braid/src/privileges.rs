//! `braid up --user NAME` (or `[bond] user`): once the TUN, the path sockets, the ttys and
//! the control socket are open, the daemon becomes that user, keeps only the capabilities
//! it may still need, and sets no_new_privs. `status` says what it runs as.
//!
//! What the daemon does after start, and what that needs:
//!
//! | later operation | needs |
//! | --- | --- |
//! | read and write the TUN (an open fd) | nothing |
//! | send and receive on path sockets | nothing |
//! | re-open a path socket after an error, `enslave` a new one | CAP_NET_BIND_SERVICE for a local port below `net.ipv4.ip_unprivileged_port_start` (1024 by default) |
//! | the same with `dev` (SO_BINDTODEVICE) | nothing since Linux 5.7 (a socket not yet bound to a device); CAP_NET_RAW before |
//! | re-open a tty after the line dropped | read and write access to the device (the user in its group, usually `dialout`) |
//! | serve the control socket | the socket is handed to the user; root may connect as always |
//!
//! CAP_NET_ADMIN is not kept: the TUN is configured once, at start.
use caps::{Capability, CapsHashSet};
use serde_json::{json, Value};

use crate::control::ControlServer;
use crate::sys::privs::{self, Account};

/// `user` and `group` to run as, from the config or the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// User name.
    pub user: String,
    /// Group name (default: the user's primary group).
    pub group: Option<String>,
}

/// A user or group name as the databases hold them: 1-32 characters of letters, digits,
/// `_`, `.`, `-` (and a final `$`), not starting with `-`.
pub fn check_account_name(name: &str) -> Result<(), String> {
    let body = name.strip_suffix('$').unwrap_or(name);
    if body.is_empty() || name.len() > 32 {
        return Err(format!(
            "{name:?} is not a user or group name (1-32 characters)"
        ));
    }
    if name.starts_with('-')
        || !body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err(format!(
            "{name:?} is not a user or group name (letters, digits, _ . -)"
        ));
    }
    Ok(())
}

/// The account to switch to, looked up before anything is opened so that a wrong name
/// stops `braid up` at once.
#[derive(Debug)]
pub struct Plan {
    account: Account,
}

/// Look up `run_as`; refused when braid does not run as root (it could not switch;
/// unless it already runs as that user) or the user is root (nothing would be dropped).
pub fn plan(run_as: Option<&RunAs>) -> anyhow::Result<Option<Plan>> {
    let Some(r) = run_as else {
        return Ok(None);
    };
    let account = Account::lookup(&r.user, r.group.as_deref())
        .map_err(|e| anyhow::anyhow!("--user {}: {e}", r.user))?;
    let euid = crate::sys::euid();
    if euid != 0 {
        if account.uid == euid {
            return Ok(None); // started as that user already (a service manager did it)
        }
        anyhow::bail!(
            "--user {}: braid up must start as root to switch users (it runs as uid {euid}); or start it as that user with CAP_NET_ADMIN (docs/security.md)",
            r.user
        );
    }
    if account.uid == 0 {
        anyhow::bail!(
            "--user {}: has uid 0, so nothing would be dropped; name an unprivileged user such as nobody",
            r.user
        );
    }
    Ok(Some(Plan { account }))
}

/// The capabilities kept after the switch, with why, on a kernel of `release`
/// (major, minor).
pub fn kept(release: (u32, u32)) -> Vec<(Capability, &'static str)> {
    let mut v = vec![(
        Capability::CAP_NET_BIND_SERVICE,
        "re-open or enslave a path on a port below net.ipv4.ip_unprivileged_port_start",
    )];
    if release < (5, 7) {
        v.push((
            Capability::CAP_NET_RAW,
            "SO_BINDTODEVICE (a path's dev) before Linux 5.7",
        ));
    }
    v
}

/// What the daemon runs as, for `status`.
#[derive(Clone, Debug)]
pub struct Privileges {
    user: String,
    group: String,
    dropped: bool,
}

impl Privileges {
    /// The running process's user, without a switch.
    fn current() -> Privileges {
        Privileges {
            user: privs::user_name(crate::sys::euid()),
            group: privs::group_name(privs::egid()),
            dropped: false,
        }
    }

    /// The `privileges` object of `status --json`: the names, and the live ids,
    /// capabilities and no_new_privs.
    pub fn json(&self) -> Value {
        let (_, euid, _) = privs::uids();
        json!({
            "user": self.user,
            "uid": euid,
            "group": self.group,
            "gid": privs::egid(),
            "dropped": self.dropped,
            "capabilities": privs::effective_caps(),
            "no_new_privs": privs::no_new_privs(),
        })
    }
}

/// Switch to the planned account, if any: hand it the control socket, drop to it, and
/// return what the daemon now runs as with notes for the log (a tty the user cannot
/// re-open, a socket directory it cannot reach, what was kept).
pub fn apply(
    plan: Option<Plan>,
    cfg: &crate::config::Config,
    control: &ControlServer,
) -> anyhow::Result<(Privileges, Vec<String>)> {
    let Some(Plan { account: a }) = plan else {
        return Ok((Privileges::current(), Vec::new()));
    };
    let mut notes = Vec::new();
    for p in &cfg.paths {
        if let Some(s) = p.serial() {
            if let Some(why) = cannot_open(&s.device, &a) {
                notes.push(format!(
                    "path {}: user {} cannot open {} ({why}): if the line drops, it cannot be re-opened; add {} to the device's group (usually dialout)",
                    p.name,
                    a.user,
                    s.device.display(),
                    a.user
                ));
            }
        }
    }
    control.chown(a.uid, a.gid).map_err(|e| {
        anyhow::anyhow!(
            "cannot give the control socket {} to user {}: {e}",
            control.path().display(),
            a.user
        )
    })?;
    if let Some(dir) = control.path().parent() {
        if let Ok(m) = std::fs::metadata(dir) {
            if !may(&m, &a, 0o1) {
                notes.push(format!(
                    "user {} cannot reach {} (mode {:04o}): only root can use the control socket (chmod 755 it to let {} in too)",
                    a.user,
                    dir.display(),
                    std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777,
                    a.user
                ));
            }
        }
    }
    let kept = kept(crate::sys::privs::kernel_release());
    let keep: CapsHashSet = kept.iter().map(|(c, _)| *c).collect();
    privs::switch_user(&a, &keep).map_err(|e| anyhow::anyhow!("--user {}: {e}", a.user))?;
    let names: Vec<String> = kept.iter().map(|(c, why)| format!("{c} ({why})")).collect();
    notes.push(format!(
        "running as user {} (uid {}), group {} (gid {}); capabilities kept: {}; no_new_privs set",
        a.user,
        a.uid,
        a.group,
        a.gid,
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    ));
    Ok((
        Privileges {
            user: a.user,
            group: a.group,
            dropped: true,
        },
        notes,
    ))
}

/// Whether `a` has the permission bits `bits` (octal 4 read, 2 write, 1 search) on a file
/// with metadata `m`, as the kernel checks them (owner, else group, else others).
fn may(m: &std::fs::Metadata, a: &Account, bits: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = m.mode();
    let shift = if m.uid() == a.uid {
        6
    } else if a.groups.contains(&m.gid()) || m.gid() == a.gid {
        3
    } else {
        0
    };
    (mode >> shift) & bits == bits
}

/// Why `a` could not open `dev` for reading and writing, or None.
fn cannot_open(dev: &std::path::Path, a: &Account) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(dev) {
        Err(e) => Some(e.to_string()),
        Ok(m) if !may(&m, a, 0o6) => Some(format!(
            "owner {}, group {}, mode {:04o}",
            privs::user_name(m.uid()),
            privs::group_name(m.gid()),
            m.mode() & 0o7777
        )),
        Ok(_) => None,
    }
}

/// The `privileges:` line of `braid status`.
pub fn render_status(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?");
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let caps: Vec<String> = v
        .get("capabilities")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|c| c.trim_start_matches("CAP_").to_lowercase())
                .collect()
        })
        .unwrap_or_default();
    let dropped = v.get("dropped").and_then(Value::as_bool) == Some(true);
    let nnp = v.get("no_new_privs").and_then(Value::as_bool) == Some(true);
    let how = if dropped {
        "dropped"
    } else if n("uid") == 0 {
        "not dropped (braid up --user NAME drops them)"
    } else {
        "not dropped"
    };
    format!(
        "privileges: user {} (uid {}), group {} (gid {}), {how}; capabilities: {}{}\n",
        s("user"),
        n("uid"),
        s("group"),
        n("gid"),
        if caps.is_empty() {
            "none".to_owned()
        } else if caps.len() > 8 {
            format!("{} (all)", caps.len())
        } else {
            caps.join(", ")
        },
        if nnp { "; no_new_privs" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names() {
        for ok in ["nobody", "braid", "_braid", "a.b-c", "machine$"] {
            check_account_name(ok).unwrap();
        }
        for bad in ["", "-x", "a b", "a/b", "$", &"x".repeat(33)] {
            assert!(check_account_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keeps_net_raw_only_on_old_kernels() {
        let names = |r| kept(r).iter().map(|(c, _)| *c).collect::<Vec<_>>();
        assert_eq!(names((6, 18)), [Capability::CAP_NET_BIND_SERVICE]);
        assert_eq!(names((5, 7)), [Capability::CAP_NET_BIND_SERVICE]);
        assert_eq!(
            names((5, 6)),
            [Capability::CAP_NET_BIND_SERVICE, Capability::CAP_NET_RAW]
        );
    }

    #[test]
    fn plan_refuses_root_and_unknown_users() {
        let r = |u: &str| RunAs {
            user: u.into(),
            group: None,
        };
        assert!(plan(None).unwrap().is_none());
        if crate::sys::euid() != 0 {
            let e = plan(Some(&r("root"))).unwrap_err().to_string();
            assert!(e.contains("braid up must start as root"), "{e}");
            return;
        }
        let e = plan(Some(&r("root"))).unwrap_err().to_string();
        assert!(e.contains("has uid 0, so nothing would be dropped"), "{e}");
        let e = plan(Some(&r("no-such-user-braid")))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--user no-such-user-braid: unknown user \"no-such-user-braid\" (not in the passwd database)"
        );
    }

    #[test]
    fn renders_the_status_line() {
        let v = json!({"user": "nobody", "uid": 65534, "group": "nogroup", "gid": 65534,
            "dropped": true, "capabilities": ["CAP_NET_BIND_SERVICE"], "no_new_privs": true});
        assert_eq!(
            render_status(&v),
            "privileges: user nobody (uid 65534), group nogroup (gid 65534), dropped; capabilities: net_bind_service; no_new_privs\n"
        );
        let all: Vec<String> = caps::all().iter().map(ToString::to_string).collect();
        let v = json!({"user": "root", "uid": 0, "group": "root", "gid": 0,
            "dropped": false, "capabilities": all, "no_new_privs": false});
        assert_eq!(
            render_status(&v),
            format!("privileges: user root (uid 0), group root (gid 0), not dropped (braid up --user NAME drops them); capabilities: {} (all)\n", caps::all().len())
        );
    }

    #[test]
    fn permission_bits_follow_owner_group_others() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("braid-may-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("tty");
        std::fs::write(&f, "").unwrap();
        let me = crate::sys::euid();
        let a = |uid, groups: Vec<u32>| Account {
            user: "u".into(),
            uid,
            gid: 4242,
            group: "g".into(),
            groups,
        };
        let gid = std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(&f).unwrap());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o660)).unwrap();
        let m = std::fs::metadata(&f).unwrap();
        assert!(may(&m, &a(me, vec![]), 0o6), "owner");
        assert!(may(&m, &a(me + 1, vec![gid]), 0o6), "in the group");
        assert!(!may(&m, &a(me + 1, vec![]), 0o6), "others");
        assert!(cannot_open(&f, &a(me + 1, vec![]))
            .unwrap()
            .contains("mode 0660"));
        assert_eq!(cannot_open(&f, &a(me + 1, vec![gid])), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
