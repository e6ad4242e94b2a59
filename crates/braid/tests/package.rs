//! The Debian package, installed into a clean root: `scripts/package --debug` builds it
//! (from the binary under test), `dpkg -x` unpacks it into an empty directory (not the
//! host's /), and the braid in there runs `--version`, `lab --list` (the braid-lab beside
//! it) and `check` on every shipped example; the unit passes `systemd-analyze verify`. Needs root and cargo-deb
//! (`scripts/setup` installs it); skips otherwise unless BRAID_REQUIRE_NETNS=1.
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The package, built and unpacked into a fresh root; None (with a message) when this
/// cannot run here.
fn unpacked(test: &str) -> Option<(PathBuf, PathBuf)> {
    if !common::require_root() {
        return None;
    }
    let why = if !have("dpkg-deb", "--version") {
        Some("dpkg-deb")
    } else if !(Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success()))
    {
        Some("cargo-deb (scripts/setup installs it)")
    } else {
        None
    };
    if !common::runs(
        test,
        "dpkg-deb and cargo-deb",
        why.map(|w| w.to_owned()).as_deref(),
    ) {
        return None;
    }
    let dir = common::scratch(test);
    let out = dir.join("out");
    run(Command::new(repo().join("scripts/package"))
        .arg("--debug")
        .arg("--out")
        .arg(&out));
    let deb = std::fs::read_dir(&out)
        .expect("package output dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb in the output dir");
    let name = deb.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    assert!(
        name.starts_with(&format!("braid_{}-", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );
    let root = dir.join("root");
    std::fs::create_dir_all(&root).expect("root dir");
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root));
    Some((dir, root))
}

/// One test: both parts share the package (two builds at once would share target/assets).
#[test]
fn package_installs_into_a_clean_root_checks_its_examples_and_its_unit_verifies() {
    let Some((dir, root)) = unpacked("package") else {
        return;
    };
    installs_and_checks_examples(&root);
    unit_passes_systemd_analyze_verify(&dir, &root);
    std::fs::remove_dir_all(&dir).expect("remove scratch dir");
}

fn installs_and_checks_examples(root: &Path) {
    let braid = root.join("usr/bin/braid");
    // Everything a user looks for is where Debian puts it.
    for f in [
        "usr/bin/braid-lab",
        "usr/lib/systemd/system/braid@.service",
        "usr/share/man/man8/braid.8.gz",
        "usr/share/man/man8/braid-up.8.gz",
        "usr/share/man/man5/braid.toml.5.gz",
        "usr/share/bash-completion/completions/braid",
        "usr/share/zsh/vendor-completions/_braid",
        "usr/share/fish/vendor_completions.d/braid.fish",
        "usr/share/doc/braid/copyright",
        "usr/share/doc/braid/examples/household.tc",
    ] {
        assert!(root.join(f).is_file(), "the package lacks /{f}");
    }
    run(Command::new("bash")
        .arg("-n")
        .arg(root.join("usr/share/bash-completion/completions/braid")));

    let version = run(Command::new(&braid).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("braid {}", env!("CARGO_PKG_VERSION"))
    );

    // `braid lab` runs the lab installed beside it.
    let list = run(Command::new(&braid)
        .args(["lab", "--list"])
        .env("PATH", "/nonexistent"));
    assert!(
        list.contains("demo") && list.contains("fault-matrix"),
        "{list}"
    );

    // Every shipped example checks, with the key file it names made as it says.
    let examples = root.join("usr/share/doc/braid/examples");
    let key = run(Command::new(&braid).arg("genkey"));
    std::fs::write(examples.join("private.key"), key).expect("write key");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        examples.join("private.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod key");
    let mut checked = 0;
    for e in std::fs::read_dir(&examples).expect("examples dir") {
        let p = e.expect("dir entry").path();
        if p.extension().is_some_and(|x| x == "toml") {
            let out = run(Command::new(&braid).arg("check").arg("--config").arg(&p));
            assert!(out.contains(": ok ("), "{}: {out}", p.display());
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} examples");
}

fn unit_passes_systemd_analyze_verify(dir: &Path, root: &Path) {
    if !have("systemd-analyze", "--version") {
        // scripts/setup installs it (Debian's systemd package) when root.
        let _ = common::runs(
            "package (systemd-analyze verify)",
            "systemd-analyze",
            Some("systemd-analyze not found"),
        );
        return;
    }
    // The unit as shipped, with ExecStart pointing into the unpacked root, checked as an
    // instance; man pages are looked up in the package's.
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/braid@.service"))
        .expect("read the unit");
    assert!(unit.contains("ExecStart=/usr/bin/braid up --config /etc/braid/%i.toml"));
    for want in [
        "Type=notify",
        "ExecReload=/bin/sh -c 'kill -HUP $MAINPID'",
        "Restart=on-failure",
        "RuntimeDirectory=braid",
        "AmbientCapabilities=CAP_NET_ADMIN",
        "DeviceAllow=/dev/net/tun rw",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
    ] {
        assert!(unit.contains(want), "the unit lacks {want}");
    }
    let units = dir.join("units");
    std::fs::create_dir_all(&units).expect("units dir");
    let here = unit.replace(
        "/usr/bin/braid",
        root.join("usr/bin/braid").to_str().expect("utf-8 path"),
    );
    std::fs::write(units.join("braid@.service"), here).expect("write unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(units.join("braid@braid0.service"))
        .env("MANPATH", root.join("usr/share/man"))
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .expect("run systemd-analyze");
    let err = String::from_utf8_lossy(&out.stderr);
    // It exits 0 on some mistakes (an unknown value is "ignored"): any word is a finding.
    assert!(
        out.status.success() && err.trim().is_empty(),
        "systemd-analyze verify: {}\n{err}",
        out.status
    );
}
