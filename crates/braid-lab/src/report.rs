//! The result table.
use std::fmt::Write;

use super::run::{ScenarioResult, TestResult};

/// Column headers.
const HEADERS: [&str; 14] = [
    "scenario",
    "test",
    "scheduler",
    "S Mbit/s",
    "goodput",
    "/S",
    "per path Mbit/s (util)",
    "reorder ms mean/max",
    "retr/loss",
    "cpu a/b %",
    "stall ms",
    "host steal %/lag ms",
    "cut ratio / rejoin ms",
    "targets",
];

fn row(r: &TestResult) -> Vec<String> {
    let paths = r
        .paths
        .iter()
        .map(|p| format!("{} {:.1} ({:.0}%)", p.name, p.mbit, p.util * 100.0))
        .collect::<Vec<_>>()
        .join(", ");
    let loss = match (r.retransmits, r.udp_lost_percent) {
        (_, Some(l)) => format!("{l:.2}%"),
        (Some(n), None) => n.to_string(),
        (None, None) => "-".into(),
    };
    let cut = match &r.cut {
        Some(c) => format!(
            "{:.2} / {}",
            c.ratio,
            c.rejoin_ms
                .map_or_else(|| "never".to_string(), |m| format!("{m:.0}"))
        ),
        None => "-".into(),
    };
    let targets = if r.missed.is_empty() {
        "ok".to_string()
    } else {
        format!("MISSED: {}", r.missed.join("; "))
    };
    vec![
        r.scenario.clone(),
        r.test.clone(),
        r.scheduler.clone(),
        format!("{:.1}", r.s_mbit),
        format!("{:.1}", r.goodput_mbit),
        format!("{:.2}", r.ratio),
        paths,
        format!("{:.1}/{:.1}", r.reorder_wait_mean_ms, r.reorder_wait_max_ms),
        loss,
        format!("{:.0}/{:.0}", r.cpu_pct.0, r.cpu_pct.1),
        format!("{:.0}", r.stall_ms),
        format!("{:.1}/{:.0}", r.host.steal_pct, r.host.lag_max_ms),
        cut,
        targets,
    ]
}

/// The whole table, one row per test, preceded by each scenario's single-path baselines.
pub fn table(results: &[ScenarioResult]) -> String {
    let mut out = String::new();
    for s in results {
        let single = s
            .single_mbit
            .iter()
            .map(|(n, m)| format!("{n} {m:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "{}: {} (paths alone, Mbit/s: {single}; TCP {}, first {} s left out)",
            s.scenario, s.description, s.tcp_cc, s.warmup_s
        );
    }
    let rows: Vec<Vec<String>> = results
        .iter()
        .flat_map(|s| s.tests.iter().map(row))
        .collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>, out: &mut String| {
        let parts: Vec<String> = cells
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    out.push('\n');
    line(&mut HEADERS.iter().copied(), &mut out);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut rule.iter().map(String::as_str), &mut out);
    for r in &rows {
        line(&mut r.iter().map(String::as_str), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::run::{CutResult, PathResult};
    use super::super::scenario::CutHow;
    use super::*;

    #[test]
    fn table_has_a_row_per_test_and_aligned_columns() {
        let t = TestResult {
            scenario: "cut".into(),
            test: "1 flow".into(),
            scheduler: "adaptive".into(),
            flows: 1,
            proto: "tcp",
            duration_s: 20,
            s_mbit: 66.5,
            goodput_mbit: 63.0,
            ratio: 0.947,
            paths: vec![PathResult {
                name: "p0".into(),
                mbit: 9.5,
                capacity_mbit: 9.6,
                util: 0.99,
                downs: 0,
            }],
            reorder_wait_mean_ms: 1.25,
            reorder_wait_max_ms: 30.0,
            reordered_fraction: 0.1,
            reorder_skipped: 0,
            reorder_late: 0,
            retransmits: Some(12),
            udp_lost_percent: None,
            bond_drops: 0,
            rescheduled: 0,
            send_dropped: 0,
            udp_rcvbuf_errors: (0, 0),
            stall_ms: 200.0,
            cpu_pct: (12.0, 10.0),
            per_call: (20.0, 30.0),
            host: crate::host::HostLoad {
                steal_pct: 2.54,
                lag_max_ms: 131.0,
            },
            cut: Some(CutResult {
                path: "p1".into(),
                how: CutHow::LinkDown,
                during_mbit: 40.0,
                remaining_mbit: 47.0,
                ratio: 0.85,
                rejoin_ms: Some(700.0),
            }),
            missed: vec!["stall 200 ms > 100".into()],
        };
        let s = ScenarioResult {
            scenario: "cut".into(),
            description: "d".into(),
            single_mbit: vec![("p0".into(), 9.6)],
            tcp_cc: "cubic".into(),
            warmup_s: 2.0,
            tests: vec![
                t.clone(),
                TestResult {
                    cut: None,
                    missed: vec![],
                    ..t
                },
            ],
        };
        let out = table(&[s]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].contains("p0 9.6"));
        let header = lines
            .iter()
            .position(|l| l.starts_with("scenario"))
            .unwrap();
        let rows = &lines[header + 2..];
        assert_eq!(rows.len(), 2);
        assert!(rows[0].contains("0.85 / 700") && rows[0].contains("MISSED: stall"));
        assert!(rows[1].contains(" ok"));
        assert!(rows[0].contains(" 2.5/131 "), "{}", rows[0]);
        // The goodput column starts at the same place in the header and the rows.
        let col = lines[header].find("goodput").unwrap();
        assert_eq!(&rows[0][col..col + 4], "63.0");
        assert_eq!(&rows[1][col..col + 4], "63.0");
    }
}
