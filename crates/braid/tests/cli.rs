//! The command line, run as a program: help texts and clear errors (no root needed).
mod common;

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(common::braid())
        .args(args)
        .output()
        .expect("run braid")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn help_everywhere() {
    let (out, _) = text(&run(&["--help"]));
    for sub in [
        "up",
        "status",
        "enslave",
        "emancipate",
        "set",
        "lab",
        "demo",
        "check",
    ] {
        assert!(out.contains(sub), "top-level help lists {sub}: {out}");
    }
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["up", "--help"],
            &["--config", "--control", "--user", "--group"],
        ),
        (&["status", "--help"], &["--json", "--control"]),
        (
            &["enslave", "--help"],
            &[
                "--local",
                "--remote",
                "--bps",
                "--dev",
                "--control",
                "<NAME>",
            ],
        ),
        (&["emancipate", "--help"], &["<NAME>", "--control"]),
        (&["set", "--help"], &["KEY=VALUE", "--control"]),
        (&["check", "--help"], &["--config"]),
        (&["help", "up"], &["--config"]),
    ];
    for (args, want) in cases {
        let o = run(args);
        assert!(o.status.success(), "{args:?} exits 0");
        let (out, _) = text(&o);
        for w in *want {
            assert!(out.contains(w), "{args:?} mentions {w}: {out}");
        }
    }
}

/// `braid lab` and `braid demo` run the lab's program `braid-lab` from beside the binary,
/// else from PATH, with the arguments as given and its exit status (the lab's own help and
/// figures are tested in crates/braid-lab/tests/cli.rs); without it, one clear line.
#[test]
fn lab_and_demo_run_the_lab_program() {
    use std::os::unix::fs::PermissionsExt;
    let d = common::scratch("cli-lab");
    let (bin, on_path) = (d.join("bin"), d.join("path"));
    for dir in [&bin, &on_path] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let braid = bin.join("braid");
    std::fs::copy(common::braid(), &braid).expect("copy braid");
    let lab = |cmd: &mut Command| cmd.env("PATH", &on_path).output().expect("run braid");

    let o = lab(Command::new(&braid).args(["demo"]));
    assert_eq!(o.status.code(), Some(1));
    let (out, err) = text(&o);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "braid: `braid demo` runs the lab program `braid-lab`, which is not installed"
        ) && err.contains("cargo build --release -p braid-lab"),
        "{err}"
    );

    let fake = |dir: &std::path::Path, name: &str, status: u8| {
        let p = dir.join("braid-lab");
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"{name}: $*\"\nexit {status}\n"),
        )
        .expect("write a stand-in braid-lab");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    fake(&on_path, "on PATH", 7);
    let o = lab(Command::new(&braid).args(["lab", "--list", "a b", "--help"]));
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(text(&o).0, "on PATH: lab --list a b --help\n");
    fake(&bin, "beside", 0);
    let o = lab(Command::new(&braid).args(["lab", "-h"]));
    assert!(o.status.success());
    assert_eq!(text(&o).0, "beside: lab -h\n");
    let o = lab(Command::new(&braid).args(["help", "demo"]));
    assert_eq!(text(&o).0, "beside: demo --help\n");
    std::fs::remove_dir_all(&d).expect("remove scratch dir");
}

#[test]
fn version() {
    let (out, _) = text(&run(&["--version"]));
    assert!(out.starts_with("braid "), "{out}");
}

#[test]
fn missing_config_file_is_clear() {
    let o = run(&["up", "--config", "/nonexistent/braid.toml"]);
    assert_eq!(o.status.code(), Some(1));
    let (_, err) = text(&o);
    assert!(
        err.starts_with("braid: /nonexistent/braid.toml: cannot read config file: No such file"),
        "{err}"
    );
}

#[test]
fn bad_config_names_key_and_line() {
    let d = common::scratch("cli-badcfg");
    let f = d.join("bad.toml");
    std::fs::write(&f, "[bond]\naddress = \"10.200.0.1/30\"\nmtu = 100\n").unwrap();
    let o = run(&["up", "--config", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let (_, err) = text(&o);
    assert_eq!(
        err.trim(),
        format!(
            "braid: {}:3:7: bond.mtu: 100 is out of range (576..=65450)",
            f.display()
        )
    );

    std::fs::write(
        &f,
        "[bond]\naddress = \"10.200.0.1/30\"\nschedular = \"eql\"\n",
    )
    .unwrap();
    let (_, err) = text(&run(&["check", "--config", f.to_str().unwrap()]));
    assert!(
        err.starts_with(&format!(
            "braid: {}:3:1: bond.schedular: unknown key in [bond]; did you mean `scheduler`?",
            f.display()
        )),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn check_accepts_examples() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let dir = common::scratch("cli-examples");
    let f = dir.join("two-host-adaptive.toml");
    std::fs::copy(src.join("two-host-adaptive.toml"), &f).unwrap();
    // Without the key the example names: what to do.
    let (_, err) = text(&run(&["check", "--config", f.to_str().unwrap()]));
    let key = dir.join("private.key");
    assert!(
        err.contains(&format!(
            "bond.private_key_file: {}: no such file (make one with `(umask 077; braid genkey > {})`)",
            key.display(),
            key.display()
        )),
        "{err}"
    );
    // The key made as the example says (braid genkey under umask 077).
    let genkey = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 077; {} genkey > {}",
            common::braid().display(),
            key.display()
        ))
        .output()
        .unwrap();
    assert!(genkey.status.success());
    assert!(genkey.stderr.is_empty(), "no warning under umask 077");
    let o = run(&["check", "--config", f.to_str().unwrap()]);
    let (out, err) = text(&o);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(o.status.success(), "{err}");
    let cipher = braid_core::crypto::Cipher::preferred().name();
    assert!(
        out.contains(&format!(
            ": ok (braid0 10.200.0.1/30, scheduler adaptive, 3 path(s), encryption {cipher})"
        )),
        "{out}"
    );
}

#[test]
fn client_commands_without_daemon_fail_clearly() {
    let d = common::scratch("cli-nodaemon");
    let sock = d.join("none.sock");
    let s = sock.to_str().unwrap();
    for args in [
        vec!["status", "--control", s],
        vec!["emancipate", "p0", "--control", s],
        vec!["set", "p0", "bps=5", "--control", s],
        vec![
            "enslave",
            "p0",
            "--local",
            "10.0.0.1:7000",
            "--remote",
            "10.0.0.2:7000",
            "--control",
            s,
        ],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let (_, err) = text(&o);
        assert!(
            err.starts_with(&format!("braid: cannot connect to {s}: "))
                && err.contains("is `braid up` running?"),
            "{args:?}: {err}"
        );
    }
    // Argument errors are caught before connecting.
    let (_, err) = text(&run(&["set", "p0", "speed=5", "--control", s]));
    assert_eq!(
        err.trim(),
        "braid: unknown setting \"speed\" (settable: bps)"
    );
    let (_, err) = text(&run(&[
        "enslave",
        "p0",
        "--local",
        "10.0.0.1:0",
        "--remote",
        "10.0.0.2:7000",
        "--control",
        s,
    ]));
    assert_eq!(
        err.trim(),
        "braid: local: \"10.0.0.1:0\": port 0 is not allowed"
    );
    let o = run(&["enslave", "p0", "--local", "10.0.0.1:7000"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn genkey_and_pubkey_as_wg() {
    let o = run(&["genkey"]);
    assert!(o.status.success());
    let (key, _) = text(&o);
    let key = key.trim().to_owned();
    assert_eq!(key.len(), 44, "{key}");
    let (again, _) = text(&run(&["genkey"]));
    assert_ne!(again.trim(), key, "a new key each time");
    let pubkey = |input: &str| {
        use std::io::Write;
        let mut c = std::process::Command::new(common::braid())
            .arg("pubkey")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        c.wait_with_output().unwrap()
    };
    // RFC 7748's test key pair, as wg prints it.
    let o = pubkey("dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=\n");
    assert!(o.status.success());
    assert_eq!(text(&o).0, "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=\n");
    let o = pubkey(&format!("{key}\n"));
    let (p, _) = text(&o);
    assert_eq!(p.trim().len(), 44);
    assert_ne!(p.trim(), key);
    let o = pubkey("not a key\n");
    assert_eq!(o.status.code(), Some(1));
    let (_, err) = text(&o);
    assert!(err.starts_with("braid: not a private key"), "{err}");
}

#[test]
fn keyless_config_is_refused_with_the_fix() {
    let d = common::scratch("cli-nokeys");
    let f = d.join("plain.toml");
    std::fs::write(&f, "[bond]\naddress = \"10.200.0.1/30\"\n").unwrap();
    let o = run(&["check", "--config", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let (_, err) = text(&o);
    assert!(
        err.contains("bond.private_key: missing") && err.contains("braid genkey"),
        "{err}"
    );
    std::fs::write(
        &f,
        "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n",
    )
    .unwrap();
    let (out, _) = text(&run(&["check", "--config", f.to_str().unwrap()]));
    assert!(out.contains("encryption none"), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `braid ARGS` through `sh` with its address space capped at 512 MiB, stdout to `out`.
fn run_capped(args: &str, out: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 524288; exec {} {args} > {out}",
            common::braid().display()
        ))
        .output()
        .expect("run sh")
}

#[test]
fn check_reads_a_bounded_amount() {
    // /dev/zero once grew `braid check` to 24 GB; under the cap, an unbounded read dies.
    let o = run_capped("check --config /dev/zero", "/dev/null");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err, "braid: /dev/zero: config file is larger than 1 MiB\n");
    let o = run_capped("tc-import /dev/zero", "/dev/null");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err, "braid: cannot read /dev/zero: larger than 1 MiB\n");
}

#[test]
fn genkey_warns_about_a_file_others_can_read() {
    let d = common::scratch("cli-genkey");
    let f = d.join("k");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 022; {} genkey > {}",
            common::braid().display(),
            f.display()
        ))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(o.status.success());
    assert_eq!(
        err,
        "braid: warning: writing a private key to a file that group or others can access (mode 0644); braid refuses such key files: chmod 600 it, or run `umask 077` first\n"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap().len(), 45, "the key");
    // To a pipe or a private file: no warning.
    let (_, err) = text(&run(&["genkey"]));
    assert_eq!(err, "");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn up_with_user_needs_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--version").output().is_err()
    {
        eprintln!("SKIPPED: needs root and setpriv to run braid as nobody");
        return;
    }
    let d = common::scratch("cli-user");
    let f = d.join("plain.toml");
    std::fs::write(
        &f,
        "[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n",
    )
    .unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::braid())
        .args(["up", "--config", f.to_str().unwrap(), "--user", "daemon"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    std::fs::remove_dir_all(&d).unwrap();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        "braid: --user daemon: braid up must start as root to switch users (it runs as uid 65534); or start it as that user with CAP_NET_ADMIN (docs/security.md)\n"
    );
}
