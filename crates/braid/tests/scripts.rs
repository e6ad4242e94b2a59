//! scripts/setup and scripts/demo with stub tools on PATH: the demo installs only what it
//! uses (no fuzzing, packaging or Python test tools), the tests' setup installs those too,
//! and neither assumes sudo.
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A directory of stub programs that log their arguments to `log` and exit 0, except
/// `cargo deb --version`, `cargo +nightly ...` and `python3 -c 'import sliplib'` (absent).
fn stubs(dir: &Path, log: &Path) {
    std::fs::create_dir_all(dir).expect("stub dir");
    let body = |name: &str, fail_if: &str| {
        format!(
            "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{fail_if}exit 0\n",
            log.display()
        )
    };
    let progs: &[(&str, &str)] = &[
        ("ip", ""),
        ("tc", ""),
        ("iperf3", ""),
        ("ping", ""),
        ("systemd-analyze", ""),
        ("dpkg-deb", ""),
        ("apt-get", ""),
        ("modprobe", ""),
        (
            "cargo",
            "case \"$*\" in 'deb --version'|'fuzz --version'|+nightly*) exit 1;; esac\n",
        ),
        (
            "python3",
            "case \"$*\" in *'import sliplib'*) exit 1;; esac\n",
        ),
        ("sudo", "exit 99\n"),
    ];
    for (name, fail_if) in progs {
        let p = dir.join(name);
        std::fs::write(&p, body(name, fail_if)).expect("write stub");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

/// Run scripts/setup with `args` and the stubs first on PATH; its exit status and the
/// stubs' log.
fn setup(tag: &str, args: &[&str]) -> (std::process::ExitStatus, String) {
    let dir = std::env::temp_dir().join(format!("braid-scripts-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = dir.join("log");
    stubs(&dir.join("bin"), &log);
    std::fs::write(&log, "").expect("log");
    let status = Command::new("bash")
        .arg(repo().join("scripts/setup"))
        .args(args)
        .env(
            "PATH",
            format!(
                "{}:/usr/bin:/bin:/usr/sbin:/sbin",
                dir.join("bin").display()
            ),
        )
        .status()
        .expect("run scripts/setup");
    let text = std::fs::read_to_string(&log).expect("read log");
    std::fs::remove_dir_all(&dir).expect("remove stub dir");
    (status, text)
}

#[test]
fn demo_setup_installs_only_what_the_demo_uses() {
    let (status, log) = setup("demo", &["--demo"]);
    assert!(status.success(), "{status}\n{log}");
    for not in ["cargo install", "pip install", "sudo"] {
        assert!(!log.contains(not), "setup --demo ran {not:?}:\n{log}");
    }
}

#[test]
fn test_setup_installs_the_test_tools() {
    let (status, log) = setup("test", &[]);
    assert!(status.success(), "{status}\n{log}");
    assert!(log.contains("cargo install cargo-deb"), "{log}");
    assert!(log.contains("pip install --quiet sliplib"), "{log}");
    assert!(!log.contains("sudo"), "{log}");
    // Without nightly, no cargo-fuzz.
    assert!(!log.contains("install cargo-fuzz"), "{log}");
}

#[test]
fn demo_as_a_user_says_to_run_it_as_root_and_uses_no_sudo() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        // As nobody, when the tests run as root.
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "bash",
        ]);
        c
    } else {
        Command::new("bash")
    };
    let out = cmd
        .arg(repo().join("scripts/demo"))
        .output()
        .expect("run scripts/demo");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("run scripts/demo as root (a root shell, or sudo scripts/demo)"),
        "{err}"
    );
}
