//! `braid lab` and `braid demo` from the one `braid` binary: it runs the lab's program
//! beside it, which answers with the lab's help, list and usage errors (no root needed).
mod common;

use std::path::Path;
use std::process::{Command, Output};

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn braid_lab_and_demo_are_the_lab_programs() {
    let braid = common::braid();
    let lab = Path::new(env!("CARGO_BIN_EXE_braid-lab"));
    assert_eq!(braid.parent(), lab.parent(), "braid-lab is beside braid");

    let cases: &[(&[&str], &[&str])] = &[
        (
            &["lab", "--help"],
            &[
                "Usage: braid lab [OPTIONS] [SCENARIOS]...",
                "--list",
                "--duration",
                "--json",
            ],
        ),
        (
            &["lab", "-h"],
            &["--cases", "--seed", "--reload", "--monitor"],
        ),
        (&["help", "lab"], &["Usage: braid lab [OPTIONS]", "--list"]),
        (&["demo", "--help"], &["Usage: braid demo"]),
        (
            &["lab", "--list"],
            &[
                "demo",
                "cut",
                "htb-seed-1",
                "bentson",
                "fault-matrix",
                "soak-flaps",
            ],
        ),
        (
            &[
                "lab",
                "fault-matrix",
                "--list",
                "--cases",
                "2",
                "--seed",
                "5",
            ],
            &["5", "6"],
        ),
    ];
    for (args, want) in cases {
        let o = run(&braid, args);
        assert!(o.status.success(), "braid {args:?} exits 0: {o:?}");
        let (out, _) = text(&o);
        for w in *want {
            assert!(out.contains(w), "braid {args:?} mentions {w}: {out}");
        }
        // Word for word what the lab's program says (`help lab` is `lab --help`).
        let direct: Vec<&str> = match args {
            ["help", verb] => vec![verb, "--help"],
            _ => args.to_vec(),
        };
        assert_eq!(text(&run(lab, &direct)).0, out, "braid {args:?}");
    }
    // A usage error is the lab's, with clap's status 2; `demo` takes no arguments.
    for args in [&["lab", "--bogus"][..], &["demo", "extra"]] {
        let o = run(&braid, args);
        assert_eq!(o.status.code(), Some(2), "braid {args:?}: {o:?}");
        let (_, err) = text(&o);
        assert!(err.contains("Usage: braid"), "braid {args:?}: {err}");
    }
}
