//! `braid check` looks at the host too: a `remote` inside the bond's subnet is an error,
//! a missing `dev` or tty a warning that says what `up` will do; the file is still `ok`.
mod common;

use std::process::Command;

fn check(tag: &str, paths: &str) -> (Option<i32>, String, String) {
    let dir = common::scratch(tag);
    let f = dir.join("h.toml");
    std::fs::write(
        &f,
        format!("[bond]\naddress = \"10.200.0.1/30\"\nencryption = \"none\"\n{paths}"),
    )
    .expect("write config");
    let o = Command::new(common::braid())
        .args(["check", "--config"])
        .arg(&f)
        .output()
        .expect("run braid check");
    std::fs::remove_dir_all(&dir).expect("remove scratch dir");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn check_refuses_a_remote_inside_the_bond() {
    let (code, out, err) = check(
        "check-loop",
        "[[path]]\nname = \"p0\"\nlocal = \"127.0.0.1:7000\"\nremote = \"10.200.0.2:7000\"\n",
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(
            "h.toml: path[0].remote: 10.200.0.2 is inside the bond's own subnet 10.200.0.0/30"
        ),
        "{err}"
    );
}

#[test]
fn check_warns_of_missing_devices_and_passes() {
    let (code, out, err) = check(
        "check-dev",
        "[[path]]\nname = \"p0\"\nlocal = \"127.0.0.1:7000\"\nremote = \"127.0.0.2:7000\"\ndev = \"nosuchif0\"\n\
         [[path]]\nname = \"s0\"\nkind = \"serial\"\ndevice = \"/dev/nosuchtty9\"\nbaud = 9600\n",
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(": ok ("), "{out}");
    assert!(
        err.contains("braid: warning: ")
            && err.contains("path[0].dev: no interface \"nosuchif0\" on this host")
            && err.contains("path[1].device: /dev/nosuchtty9 does not exist on this host"),
        "{err}"
    );
}
