//! `braid lab` and `braid demo`: they run the lab, a program of its own (`braid-lab`, from
//! the `braid-lab` crate), as cargo runs `cargo-NAME` for `cargo NAME`: the one next to
//! this executable (where `cargo build` and the .deb put it), else the one on `PATH`. Its
//! arguments are passed through untouched (`--help` included) and, since it replaces this
//! process, its exit status and its handling of Ctrl-C are its own.
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The lab's program.
const PROGRAM: &str = "braid-lab";

/// Run `braid-lab VERB ARGS...` in place of this process; returns only on an error.
pub fn exec(verb: &str, args: &[OsString]) -> anyhow::Result<()> {
    let exe = std::env::current_exe().ok();
    let beside = exe
        .as_deref()
        .and_then(Path::parent)
        .map(|dir| dir.join(PROGRAM));
    let Some(program) = beside
        .filter(|p| p.is_file())
        .or_else(|| on_path(std::env::var_os("PATH").as_deref()))
    else {
        anyhow::bail!(
            "`braid {verb}` runs the lab program `{PROGRAM}`, which is not installed (neither next to {} nor on PATH): install the braid package, or build it with `cargo build --release -p braid-lab`",
            exe.as_deref().and_then(Path::parent).map_or_else(|| "braid".into(), |d| d.display().to_string())
        );
    };
    let err = std::process::Command::new(&program)
        .arg(verb)
        .args(args)
        .exec();
    anyhow::bail!("cannot run {}: {err}", program.display())
}

/// The first `braid-lab` in `path` (a `PATH` value).
fn on_path(path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|dir| dir.join(PROGRAM))
        .find(|p| p.is_file())
}

/// The command line with `braid help lab` and `braid help demo` made `braid lab --help` and
/// `braid demo --help`: the lab's program has the lab's help.
pub fn help_args(mut args: Vec<OsString>) -> Vec<OsString> {
    if let [_, help, verb] = args.as_slice() {
        if help == "help" && (verb == "lab" || verb == "demo") {
            args.swap(1, 2);
            args[2] = "--help".into();
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn help_of_lab_and_demo_is_the_lab_programs() {
        assert_eq!(
            help_args(args(&["braid", "help", "lab"])),
            args(&["braid", "lab", "--help"])
        );
        assert_eq!(
            help_args(args(&["braid", "help", "demo"])),
            args(&["braid", "demo", "--help"])
        );
        for kept in [
            &["braid", "help", "up"][..],
            &["braid", "help"],
            &["braid", "lab", "help"],
            &["braid", "help", "lab", "x"],
        ] {
            assert_eq!(help_args(args(kept)), args(kept));
        }
    }

    #[test]
    fn finds_the_lab_on_path() {
        let dir = std::env::temp_dir().join(format!("braid-labpath-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(on_path(Some(dir.as_os_str())), None);
        std::fs::write(dir.join(PROGRAM), "").unwrap();
        let path =
            std::env::join_paths(["/nonexistent-braid-dir".as_ref(), dir.as_path()]).unwrap();
        assert_eq!(on_path(Some(&path)), Some(dir.join(PROGRAM)));
        assert_eq!(on_path(None), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
