//! The generated man pages and completions (`braid gen-assets`, run by scripts/package):
//! every file is there and names every subcommand.
use clap::CommandFactory;

#[test]
fn gen_assets_writes_pages_and_completions_for_every_subcommand() {
    let dir = std::env::temp_dir().join(format!("braid-assets-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_braid"))
        .arg("gen-assets")
        .arg(&dir)
        .output()
        .expect("run braid gen-assets");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read =
        |p: &str| std::fs::read_to_string(dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let main = read("man/braid.8");
    let bash = read("completions/braid.bash");
    let zsh = read("completions/_braid");
    let fish = read("completions/braid.fish");
    let cmd = braid::cli::Cli::command();
    let subs: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_owned())
        .collect();
    assert!(subs.len() >= 13, "{subs:?}");
    for s in &subs {
        assert!(
            main.contains(&format!("braid\\-{}", s.replace('-', "\\-"))),
            "braid.8 lacks {s}"
        );
        let page = read(&format!("man/braid-{s}.8"));
        assert!(page.starts_with(".ie") || page.contains(".TH"), "{s}");
        assert!(bash.contains(s.as_str()), "bash completion lacks {s}");
        assert!(zsh.contains(s.as_str()), "zsh completion lacks {s}");
        assert!(fish.contains(s.as_str()), "fish completion lacks {s}");
    }
    // Options reach the pages and the completions too.
    assert!(read("man/braid-up.8").contains("config"));
    assert!(fish.contains("-l control"));
    // The hidden generator has no page and is offered by no completion.
    assert!(!main.contains("gen\\-assets"));
    for c in [&bash, &zsh, &fish] {
        assert!(!c.contains("gen-assets"));
    }
    let toml5 = read("man/braid.toml.5");
    assert!(toml5.contains(".TH BRAID.TOML 5") && toml5.contains("peer_public_key"));
    std::fs::remove_dir_all(&dir).expect("remove the temp dir");
}
