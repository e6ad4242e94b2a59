//! Man pages and shell completions, generated from the CLI definition (clap_mangen,
//! clap_complete) and from `docs/config.md` (`braid.toml(5)`), so that none is written by
//! hand and none can drift from what the program does. `scripts/package` runs the hidden
//! `braid gen-assets DIR`, which writes them all ([`write_all`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// The config reference, the one source for `docs/config.md` readers and `braid.toml(5)`.
const CONFIG_MD: &str = include_str!("../../../docs/config.md");

/// Write `DIR/man/braid.8`, one `braid-SUBCOMMAND.8` per visible subcommand,
/// `DIR/man/braid.toml.5` and `DIR/completions/{braid.bash,_braid,braid.fish}`. Returns
/// the files written.
pub fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let man = dir.join("man");
    let comp = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&comp)?;
    let mut written = Vec::new();

    let mut cmd = crate::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    written.push(write_file(&man.join("braid.8"), &main_page(&cmd)?)?);
    for sub in visible(&cmd) {
        let page = sub_page(sub)?;
        let name = format!("{}.8", sub.get_display_name().unwrap_or(sub.get_name()));
        written.push(write_file(&man.join(name), &page)?);
        for subsub in visible(sub) {
            let page = sub_page(subsub)?;
            let name = format!(
                "{}.8",
                subsub.get_display_name().unwrap_or(subsub.get_name())
            );
            written.push(write_file(&man.join(name), &page)?);
        }
    }
    written.push(write_file(
        &man.join("braid.toml.5"),
        config_page(CONFIG_MD).as_bytes(),
    )?);

    use clap_complete::Shell;
    for (shell, name) in [
        (Shell::Bash, "braid.bash"),
        (Shell::Zsh, "_braid"),
        (Shell::Fish, "braid.fish"),
    ] {
        let mut buf = Vec::new();
        let mut c = without_hidden(&crate::cli::Cli::command());
        clap_complete::generate(shell, &mut c, "braid", &mut buf);
        written.push(write_file(&comp.join(name), &buf)?);
    }
    Ok(written)
}

/// The command line without its hidden subcommands (clap_complete offers those too).
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    let mut c = clap::Command::new("braid")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .subcommand_required(true)
        .subcommands(visible(cmd).cloned());
    if let Some(about) = cmd.get_about() {
        c = c.about(about.clone());
    }
    c
}

fn visible(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set())
}

fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    std::fs::write(path, bytes)?;
    Ok(path.to_path_buf())
}

fn man(cmd: &clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .manual("System Manager's Manual")
        .source(format!("braid {}", env!("CARGO_PKG_VERSION")))
}

/// `braid(8)`: clap's sections, then FILES, SIGNALS, EXIT STATUS and SEE ALSO.
fn main_page(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let m = man(cmd);
    let mut w = Vec::new();
    m.render_title(&mut w)?;
    m.render_name_section(&mut w)?;
    m.render_synopsis_section(&mut w)?;
    m.render_description_section(&mut w)?;
    m.render_options_section(&mut w)?;
    m.render_subcommands_section(&mut w)?;
    w.write_all(
        br#".SH FILES
.TP
\fI/etc/braid/NAME.toml\fR
The config of the bond that \fBbraid@NAME.service\fR runs (\fBbraid.toml\fR(5)).
.TP
\fI/run/braid/INTERFACE.sock\fR
The control socket of the daemon of that interface (root only); \fBstatus\fR,
\fBreload\fR, \fBenslave\fR, \fBemancipate\fR, \fBset\fR and \fBclass\fR use it
(\fB\-\-interface\fR NAME or \fB\-\-control\fR PATH choose one when several run).
.SH SIGNALS
SIGINT and SIGTERM remove the TUN and stop the daemon; SIGHUP re-reads the config
file and applies what changed (as \fBbraid reload\fR). Under systemd
(\fBType=notify\fR) the daemon reports READY=1 once the TUN, its sockets and the
control socket are up, RELOADING=1 around a reload and STOPPING=1 when it stops.
.SH EXIT STATUS
0 on success; 1 on an error (a message on stderr); 2 on a usage error;
\fBbraid status\fR exits 3 when the bond is degraded and 4 when it is down.
.SH SEE ALSO
\fBbraid.toml\fR(5), \fBsystemctl\fR(1), \fBtc\fR(8), \fBwg\fR(8)
"#,
    )?;
    m.render_version_section(&mut w)?;
    Ok(w)
}

fn sub_page(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let m = man(cmd);
    let mut w = Vec::new();
    m.render(&mut w)?;
    w.write_all(b".SH SEE ALSO\n\\fBbraid\\fR(8), \\fBbraid.toml\\fR(5)\n")?;
    Ok(w)
}

/// `braid.toml(5)` from the config reference's Markdown: headings, paragraphs, fenced
/// code blocks and tables (each table row a tagged paragraph: the key in bold, its default,
/// its meaning). Inline code and `**bold**` become bold, links their text.
pub fn config_page(markdown: &str) -> String {
    let mut out = format!(
        ".TH BRAID.TOML 5 \"\" \"braid {}\" \"File Formats Manual\"\n.SH NAME\nbraid.toml \\- configuration file of \\fBbraid\\fR(8)\n.SH SYNOPSIS\n\\fI/etc/braid/NAME.toml\\fR\n",
        env!("CARGO_PKG_VERSION")
    );
    let mut in_code = false;
    let mut header: Vec<String> = Vec::new();
    let mut para = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            if in_code {
                out.push_str(".EE\n.fi\n");
            } else {
                out.push_str(".PP\n.nf\n.EX\n");
            }
            in_code = !in_code;
            para = false;
            continue;
        }
        if in_code {
            out.push_str(&escape_line(line));
            out.push('\n');
            continue;
        }
        let t = line.trim();
        if let Some(h) = t.strip_prefix('#') {
            let level = 1 + h.bytes().take_while(|&b| b == b'#').count();
            let text = inline(h.trim_start_matches('#').trim()).replace('"', "\\(dq");
            header.clear();
            para = false;
            match level {
                1 => out.push_str(".SH DESCRIPTION\n"),
                // Not upper-cased: the headings hold key names (`[bond]`).
                2 => out.push_str(&format!(".SH {text}\n")),
                _ => out.push_str(&format!(".SS {text}\n")),
            }
            continue;
        }
        if t.starts_with('|') {
            let cells: Vec<&str> = t
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('|').trim())
                .collect();
            if cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ' '))
            {
                continue;
            }
            if header.is_empty() {
                header = cells.iter().map(|c| (*c).to_owned()).collect();
                continue;
            }
            out.push_str(".TP\n");
            out.push_str(&inline_bold(cells.first().copied().unwrap_or("")));
            out.push('\n');
            let rest: Vec<String> = cells
                .iter()
                .zip(&header)
                .skip(1)
                .map(|(c, h)| {
                    if h == "meaning" || h == "what" || cells.len() == 2 {
                        inline(c)
                    } else {
                        format!("{}: {}.", inline(h), inline(c))
                    }
                })
                .collect();
            out.push_str(&rest.join(" "));
            out.push('\n');
            para = false;
            continue;
        }
        header.clear();
        if t.is_empty() {
            para = false;
            continue;
        }
        if !para {
            out.push_str(".PP\n");
            para = true;
        }
        out.push_str(&inline(t));
        out.push('\n');
    }
    out.push_str(".SH SEE ALSO\n\\fBbraid\\fR(8), \\fBtc\\fR(8)\n");
    out
}

/// Escape one line of plain text for roff: backslashes, and a leading `.` or `'`.
fn escape_line(s: &str) -> String {
    let e = s.replace('\\', "\\e").replace('-', "\\-");
    if e.starts_with('.') || e.starts_with('\'') {
        format!("\\&{e}")
    } else {
        e
    }
}

/// A whole cell in bold (its code spans lose their backticks).
fn inline_bold(s: &str) -> String {
    format!("\\fB{}\\fR", escape_line(&s.replace(['`', '*'], "")))
}

/// Markdown inline text as roff: `code` and **bold** in bold, [text](link) as text.
fn inline(s: &str) -> String {
    let s = strip_links(s);
    let mut out = String::new();
    let mut bold = false;
    let mut rest = s.as_str();
    while let Some(c) = rest.chars().next() {
        if c == '`' || rest.starts_with("**") {
            out.push_str(if bold { "\\fR" } else { "\\fB" });
            bold = !bold;
            rest = &rest[if c == '`' { 1 } else { 2 }..];
            continue;
        }
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    if bold {
        out.push_str("\\fR");
    }
    if out.starts_with('.') || out.starts_with('\'') {
        out.insert_str(0, "\\&");
    }
    out
}

/// `[text](target)` -> `text`.
fn strip_links(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            after[close + 2..]
                .find(')')
                .map(|end| (close, close + 2 + end + 1))
        }) {
            Some((close, end)) if !after[..close].contains('[') => {
                out.push_str(&rest[..open]);
                out.push_str(&after[..close]);
                rest = &after[end..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_page_keeps_every_key_and_example() {
        let page = config_page(CONFIG_MD);
        assert!(page.starts_with(".TH BRAID.TOML 5"));
        for key in [
            "interface",
            "address",
            "scheduler",
            "private_key_file",
            "peer_public_key",
            "equalize_ms",
            "baud",
            "framing",
            "r2q",
        ] {
            assert!(page.contains(&format!("\\fB{key}\\fR")), "{key}");
        }
        assert!(page.contains(".SH \\fB[bond]\\fR\n"), "{page}");
        assert!(page.contains(".nf\n.EX\n[bond]\n"), "a TOML example");
        // No Markdown left over.
        assert!(!page.contains("| ---"), "table rules");
        assert!(!page.contains("```"));
        assert!(!page.contains("](")); // links
    }

    #[test]
    fn inline_markup() {
        assert_eq!(
            inline("see [shaping.md](shaping.md), `a-b` and **c**"),
            "see shaping.md, \\fBa\\-b\\fR and \\fBc\\fR"
        );
        assert_eq!(inline(".dot"), "\\&.dot");
        assert_eq!(escape_line("a\\b"), "a\\eb");
        assert_eq!(strip_links("[x] and [y](z)"), "[x] and y");
    }
}
