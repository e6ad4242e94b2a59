//! `braid top`: the dashboard's live figures in the terminal (ratatui), redrawn every
//! second: the bond's rate with a 2-minute sparkline, each path (state, rates, RTT,
//! jitter, loss, queue, capacity) and each shaper class (rate sent against rate and ceil,
//! backlog, drops). `q`, Esc or Ctrl-C quits.
//!
//! It reads the control socket (`status` and `class-show`) or a monitor's `/api/status`
//! (`--monitor http://HOST:PORT`); rates come from two consecutive answers, as the
//! monitor's samples do ([`crate::monitor::sample::between`]).
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;
use serde_json::{json, Value};

use crate::monitor::sample::{self, Sample};
use crate::monitor::Snapshot;
use crate::status::rate;

/// How often the figures are fetched and drawn.
pub const REFRESH: Duration = Duration::from_secs(1);
/// Largest `/api/status` answer read.
const HTTP_MAX: u64 = 16 << 20;
/// Points of the bond's sparkline.
const SPARK_LEN: usize = 240;

/// Where the figures come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The daemon's control socket.
    Control(PathBuf),
    /// A monitor: `host:port`, and its token if it needs one.
    Monitor {
        /// `HOST:PORT`.
        addr: String,
        /// The token (`?token=` in the URL, or `BRAID_MONITOR_TOKEN`).
        token: Option<String>,
    },
}

impl Source {
    /// `--monitor URL`: `http://HOST:PORT[/...][?token=T]` or `HOST:PORT`.
    pub fn monitor(url: &str) -> anyhow::Result<Source> {
        let rest = url.strip_prefix("http://").unwrap_or(url);
        if rest.contains("://") {
            anyhow::bail!(
                "--monitor {url:?}: only http:// (braid's monitor has no TLS; use an SSH tunnel)"
            );
        }
        let (hostport, query) = rest.split_once('?').unwrap_or((rest, ""));
        let addr = hostport.split('/').next().unwrap_or("").to_owned();
        if addr.is_empty() || !addr.contains(':') {
            anyhow::bail!("--monitor {url:?}: expected http://HOST:PORT");
        }
        let token = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("token="))
            .map(crate::monitor::http::percent_decode)
            .or_else(|| std::env::var("BRAID_MONITOR_TOKEN").ok());
        Ok(Source::Monitor { addr, token })
    }

    /// One snapshot of the bond.
    pub fn fetch(&self, unix_ms: u64) -> anyhow::Result<Snapshot> {
        match self {
            Source::Control(sock) => {
                let status = crate::control::request(sock, &json!({"cmd": "status"}))?;
                let classes = crate::control::request(sock, &json!({"cmd": "class-show"}))
                    .ok()
                    .and_then(|v| v.get("classes").cloned());
                Ok(Snapshot {
                    unix_ms,
                    status,
                    classes,
                    notes: Vec::new(),
                })
            }
            Source::Monitor { addr, token } => {
                let v = http_get(addr, "/api/status", token.as_deref())?;
                let status = v.get("status").cloned().filter(|s| !s.is_null());
                let Some(mut status) = status else {
                    anyhow::bail!("{addr}: the monitor has no figures yet");
                };
                if let (Some(i), Value::Object(_)) = (v.get("interface"), &status) {
                    if status.get("interface").is_none() {
                        status["interface"] = i.clone();
                    }
                }
                Ok(Snapshot {
                    unix_ms,
                    status,
                    classes: v.get("classes").cloned().filter(|c| !c.is_null()),
                    notes: Vec::new(),
                })
            }
        }
    }
}

/// GET `path` from a monitor; the JSON body.
fn http_get(addr: &str, path: &str, token: Option<&str>) -> anyhow::Result<Value> {
    let to = addr
        .to_socket_addrs()
        .map_err(|e| anyhow::anyhow!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{addr}: no address"))?;
    let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(2))
        .map_err(|e| anyhow::anyhow!("cannot connect to the monitor at {addr}: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(3)))?;
    c.set_write_timeout(Some(Duration::from_secs(3)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    // One write: a server that answers after its first read sees the whole request.
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    c.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    c.take(HTTP_MAX).read_to_end(&mut raw)?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let body_at = match resp.parse(&raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => anyhow::bail!("{addr}: not an HTTP answer"),
    };
    let body = raw.get(body_at..).unwrap_or_default();
    match resp.code {
        Some(200) => Ok(serde_json::from_slice(body)?),
        Some(401) => anyhow::bail!(
            "{addr}: the monitor wants its token (?token=T in the URL, or BRAID_MONITOR_TOKEN)"
        ),
        Some(c) => anyhow::bail!("{addr}: HTTP {c}: {}", String::from_utf8_lossy(body).trim()),
        None => anyhow::bail!("{addr}: not an HTTP answer"),
    }
}

/// What is on the screen.
#[derive(Debug, Default)]
pub struct View {
    /// The latest snapshot.
    pub snap: Option<Snapshot>,
    /// The sample between the last two.
    pub sample: Option<Sample>,
    /// The bond's rate sent + received, kbit/s, oldest first.
    pub spark: VecDeque<u64>,
    /// The last fetch's error, if it failed.
    pub error: Option<String>,
}

impl View {
    /// Take a new snapshot.
    pub fn push(&mut self, snap: Snapshot) {
        let s = sample::between(self.snap.as_ref(), &snap);
        if self.snap.is_some() {
            let total: f64 = s.p.iter().map(|p| p.tx + p.rx).sum();
            if self.spark.len() == SPARK_LEN {
                self.spark.pop_front();
            }
            self.spark.push_back((total / 1000.0) as u64);
        }
        self.sample = Some(s);
        self.snap = Some(snap);
        self.error = None;
    }
}

fn ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}ms")
    } else {
        format!("{x:.1}ms")
    }
}

fn state_style(s: &str) -> Style {
    match s {
        "up" => Style::new().fg(Color::Green),
        "stalled" => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::Red),
    }
}

/// Draw the view.
pub fn draw(f: &mut Frame<'_>, v: &View) {
    let classes = v.sample.as_ref().map_or(0, |s| s.c.len());
    let paths = v.sample.as_ref().map_or(0, |s| s.p.len());
    let [head, spark, ptab, ctab, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(5),
        Constraint::Length(paths as u16 + 3),
        Constraint::Min(if classes > 0 { 4 } else { 0 }),
        Constraint::Length(1),
    ])
    .areas(f.area());
    header(f, head, v);
    let tx_rx = v.sample.as_ref().map_or((0.0, 0.0), |s| {
        (
            s.p.iter().map(|p| p.tx).sum::<f64>(),
            s.p.iter().map(|p| p.rx).sum::<f64>(),
        )
    });
    let data: Vec<u64> = v.spark.iter().copied().collect();
    f.render_widget(
        Sparkline::default()
            .block(Block::new().borders(Borders::TOP).title(format!(
                " bond: sent {} received {} (last {} s) ",
                rate(tx_rx.0 as u64),
                rate(tx_rx.1 as u64),
                v.spark.len()
            )))
            .data(&data)
            .style(Style::new().fg(Color::Cyan)),
        spark,
    );
    path_table(f, ptab, v);
    if classes > 0 {
        class_table(f, ctab, v);
    }
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(" q ", Style::new().add_modifier(Modifier::REVERSED)),
            Span::raw(" quits · refreshed every second"),
        ])),
        foot,
    );
}

fn header(f: &mut Frame<'_>, area: Rect, v: &View) {
    let Some(snap) = &v.snap else {
        f.render_widget(Paragraph::new("waiting for the first answer…"), area);
        return;
    };
    let s = &snap.status;
    let health = crate::status::health(s);
    let (word, style) = match &health {
        crate::status::Health::Up => ("UP".to_owned(), Style::new().fg(Color::Green)),
        crate::status::Health::Degraded(w) => {
            (format!("DEGRADED ({w})"), Style::new().fg(Color::Yellow))
        }
        crate::status::Health::Down(w) => (format!("DOWN ({w})"), Style::new().fg(Color::Red)),
    };
    let up = s.get("uptime_us").and_then(Value::as_u64).unwrap_or(0) / 1_000_000;
    let sched = s
        .get("status")
        .and_then(|x| x.get("scheduler"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    let mut lines = vec![Line::from(vec![
        Span::styled(
            "braid top ",
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        ),
        Span::styled(
            format!(
                "{} {} ",
                s.get("interface").and_then(Value::as_str).unwrap_or("?"),
                s.get("address").and_then(Value::as_str).unwrap_or("")
            ),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::styled(word, style.add_modifier(Modifier::BOLD)),
        Span::raw(format!("  up {up}s  scheduler {sched}")),
    ])];
    if let Some(e) = &v.error {
        lines.push(Line::styled(
            format!("no answer: {e}"),
            Style::new().fg(Color::Red),
        ));
    }
    f.render_widget(Paragraph::new(lines), area);
}

fn path_table(f: &mut Frame<'_>, area: Rect, v: &View) {
    let Some(s) = &v.sample else { return };
    let st = v.snap.as_ref().map(|x| &x.status);
    let paths: &[Value] = st
        .and_then(|x| x.get("status"))
        .and_then(|x| x.get("paths"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let rows = s.p.iter().map(|p| {
        let full = paths
            .iter()
            .find(|x| x.get("name").and_then(Value::as_str) == Some(&p.n));
        let state = full
            .and_then(|x| x.get("state"))
            .and_then(Value::as_str)
            .unwrap_or("down");
        let cap = full
            .and_then(|x| x.get("capacity_bps"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        Row::new(vec![
            Cell::from(p.n.clone()),
            Cell::from(state.to_owned()).style(state_style(state)),
            Cell::from(rate(p.tx as u64)),
            Cell::from(rate(p.rx as u64)),
            Cell::from(if p.rtt > 0.0 { ms(p.rtt) } else { "-".into() }),
            Cell::from(ms(p.jit)),
            Cell::from(format!("{:.1}%", p.loss)),
            Cell::from(format!("{} {}", crate::status::bytes(p.q as u64), ms(p.qd))),
            Cell::from(rate(cap)),
        ])
    });
    let header = Row::new([
        "PATH", "STATE", "SENT", "RECEIVED", "RTT", "JITTER", "LOSS", "QUEUE", "CAPACITY",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Min(6),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(14),
        Constraint::Length(9),
    ];
    f.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::new().borders(Borders::TOP).title(" paths ")),
        area,
    );
}

fn class_table(f: &mut Frame<'_>, area: Rect, v: &View) {
    let Some(s) = &v.sample else { return };
    let modes: Vec<(String, String)> = v
        .snap
        .as_ref()
        .and_then(|x| x.classes.as_ref())
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|c| {
            (
                c.get("id").and_then(Value::as_str).unwrap_or("").to_owned(),
                c.get("mode")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    let rows = s.c.iter().map(|c| {
        let bar_w = 20usize;
        let top = c.ceil.max(c.r).max(1.0);
        let filled = ((c.r / top) * bar_w as f64).round() as usize;
        let mark = ((c.rate / top) * bar_w as f64).round() as usize;
        let bar: String = (0..bar_w)
            .map(|i| match (i < filled, i == mark.min(bar_w - 1)) {
                (_, true) => '|',
                (true, false) => '█',
                (false, false) => '·',
            })
            .collect();
        let mode = modes
            .iter()
            .find(|(id, _)| *id == c.id)
            .map_or("", |(_, m)| m.as_str());
        Row::new(vec![
            Cell::from(format!(
                "{}{}",
                c.id,
                c.name.as_ref().map(|n| format!(" {n}")).unwrap_or_default()
            )),
            Cell::from(rate(c.r as u64)),
            Cell::from(bar).style(Style::new().fg(Color::Cyan)),
            Cell::from(rate(c.rate as u64)),
            Cell::from(rate(c.ceil as u64)),
            Cell::from(crate::status::bytes(c.bl as u64)),
            Cell::from(format!("{:.0}/s", c.dr)),
            Cell::from(mode.to_owned()),
        ])
    });
    let header = Row::new([
        "CLASS",
        "SENT",
        "SENT vs RATE | CEIL",
        "RATE",
        "CEIL",
        "BACKLOG",
        "DROPS",
        "MODE",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Min(10),
        Constraint::Length(9),
        Constraint::Length(20),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(10),
    ];
    f.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::new().borders(Borders::TOP).title(" classes ")),
        area,
    );
}

/// `braid top`: fetch once (an error ends it before the screen is taken), then draw every
/// second until `q`.
pub fn run(source: &Source) -> anyhow::Result<()> {
    let mut view = View::default();
    let first = source.fetch(crate::monitor::unix_ms())?;
    if first.status.get("layer").and_then(Value::as_str) == Some("ethernet")
        && first.status.get("members").is_some()
    {
        anyhow::bail!("braid top draws the paths and classes of an IP bond; for a bond of Ethernet ports, watch its members with `watch -n1 braid status`");
    }
    view.push(first);
    let mut terminal =
        ratatui::try_init().map_err(|e| anyhow::anyhow!("braid top needs a terminal: {e}"))?;
    let result = (|| -> anyhow::Result<()> {
        loop {
            terminal.draw(|f| draw(f, &view))?;
            // Keys until the next refresh.
            let mut waited = Duration::ZERO;
            let step = Duration::from_millis(100);
            while waited < REFRESH {
                if event::poll(step)? {
                    if let Event::Key(k) = event::read()? {
                        let ctrl_c = k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL);
                        if k.kind == KeyEventKind::Press
                            && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c)
                        {
                            return Ok(());
                        }
                    }
                    terminal.draw(|f| draw(f, &view))?;
                } else {
                    waited += step;
                }
            }
            match source.fetch(crate::monitor::unix_ms()) {
                Ok(s) => view.push(s),
                Err(e) => view.error = Some(format!("{e:#}")),
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn snap(ms: u64, tx: u64, sent: u64) -> Snapshot {
        Snapshot {
            unix_ms: ms,
            status: json!({"interface": "braid0", "address": "10.200.0.1/30", "uptime_us": 42_000_000u64,
                "status": {"scheduler": "adaptive", "paths": [
                    {"id": 0, "name": "dsl", "state": "up", "tx_bytes": tx, "rx_bytes": 0, "srtt_us": 12_000,
                     "rttvar_us": 500, "loss": 0.0, "queued_bytes": 0, "pacing_bps": 10_000_000, "capacity_bps": 9_500_000u64},
                    {"id": 1, "name": "lte", "state": "down", "tx_bytes": 0, "rx_bytes": 0}]}}),
            classes: Some(
                json!([{"id": "1:10", "name": "alex", "leaf": true, "rate_bps": 2_000_000, "ceil_bps": 10_000_000,
                                  "sent_bytes": sent, "backlog_bytes": 1500, "dropped": 0, "mode": "may-borrow"}]),
            ),
            notes: Vec::new(),
        }
    }

    fn screen(v: &View) -> String {
        let mut t = Terminal::new(TestBackend::new(110, 24)).unwrap();
        t.draw(|f| draw(f, v)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_owned())
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    }

    #[test]
    fn the_screen_shows_paths_classes_and_rates() {
        let mut v = View::default();
        v.push(snap(1000, 0, 0));
        v.push(snap(2000, 1_250_000, 500_000));
        let s = screen(&v);
        assert!(s.contains("braid0 10.200.0.1/30"), "{s}");
        assert!(s.contains("DEGRADED (lte down)"), "{s}");
        assert!(s.contains("dsl"), "{s}");
        assert!(s.contains("10.0M"), "dsl's 10 Mbit/s: {s}");
        assert!(s.contains("1:10 alex"), "{s}");
        assert!(s.contains("4.0M"), "alex's 4 Mbit/s: {s}");
        assert!(s.contains("may-borrow"), "{s}");
        assert!(s.contains("q  quits"), "{s}");
        assert_eq!(v.spark.len(), 1);
    }

    #[test]
    fn monitor_urls() {
        let s = Source::monitor("http://127.0.0.1:9190/?token=a%2Bb").unwrap();
        assert!(
            matches!(s, Source::Monitor { ref addr, ref token } if addr == "127.0.0.1:9190" && token.as_deref() == Some("a+b"))
        );
        assert!(Source::monitor("https://x:1").is_err());
        assert!(Source::monitor("http://nohost").is_err());
    }
}
