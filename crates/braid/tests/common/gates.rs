//! The gates every integration test passes through: root, namespaces, scratch
//! directories. Shared by `crates/braid/tests` and `crates/braid-lab/tests` (included by
//! path), so both skip and fail the same way.

use std::path::PathBuf;

/// True when the test may use root-only things (TUN, network namespaces). When not root,
/// prints why the test is skipped and returns false, unless `BRAID_REQUIRE_NETNS=1`, in
/// which case it panics: CI must not silently skip these.
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tun = std::path::Path::new("/dev/net/tun").exists();
    let ip = std::process::Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if root && tun && ip {
        return true;
    }
    let why = if !root {
        "not root"
    } else if !tun {
        "no /dev/net/tun"
    } else {
        "no `ip` command (iproute2)"
    };
    if std::env::var("BRAID_REQUIRE_NETNS").is_ok_and(|v| v == "1") {
        panic!("this test needs root, /dev/net/tun and iproute2 ({why}) and BRAID_REQUIRE_NETNS=1 forbids skipping");
    }
    eprintln!("SKIPPED: needs root, /dev/net/tun and iproute2 ({why}); set BRAID_REQUIRE_NETNS=1 to make this a failure");
    false
}

/// A fresh scratch directory for one test.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("braid-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// The full path of `prog` on `PATH` or in the sbin directories (as the lab looks).
fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Why namespace tests cannot run here (not root, no `ip`/`tc`, no TUN device), or None.
pub fn netns_unusable() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        Some("not running as root")
    } else if which("ip").is_none() || which("tc").is_none() {
        Some("`ip`/`tc` (iproute2) not found")
    } else if !std::path::Path::new("/dev/net/tun").exists() {
        Some("/dev/net/tun missing")
    } else {
        None
    }
}

/// True when `why` is None. Otherwise `test` (which needs `needs`) is skipped with a
/// message and false, unless `BRAID_REQUIRE_NETNS=1`, in which case it panics.
pub fn runs(test: &str, needs: &str, why: Option<&str>) -> bool {
    let Some(why) = why else {
        return true;
    };
    if std::env::var("BRAID_REQUIRE_NETNS").is_ok_and(|v| v == "1") {
        panic!("{test}: BRAID_REQUIRE_NETNS=1 but it cannot run: {why}");
    }
    eprintln!("SKIPPED {test}: needs {needs} ({why}); run as root");
    false
}
