//! A small SVG line chart: per-second rates per user, one panel per run, like the seed's
//! Graphs 1-3. Hand-written (a few dozen lines) rather than a plotting crate with fonts.
use std::fmt::Write as _;

/// One line of a panel.
pub struct Series<'a> {
    /// Legend label.
    pub label: &'a str,
    /// One value per second, Mbit/s.
    pub values: &'a [f64],
    /// Dashed (theory) or solid (measured).
    pub dashed: bool,
    /// Colour index (same user, same colour across panels).
    pub colour: usize,
}

/// One panel: a title and its lines.
pub struct Panel<'a> {
    /// Title above the panel.
    pub title: String,
    /// Lines.
    pub series: Vec<Series<'a>>,
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];
const W: f64 = 720.0;
const H: f64 = 240.0;
const LEFT: f64 = 50.0;
const TOP: f64 = 30.0;
const PLOT_W: f64 = 540.0;
const PLOT_H: f64 = 170.0;

/// Panels stacked vertically, y axis from 0 to `y_max` Mbit/s.
pub fn svg(title: &str, panels: &[Panel<'_>], y_max: f64) -> String {
    let height = 30.0 + H * panels.len() as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="18" font-size="14" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    for (pi, p) in panels.iter().enumerate() {
        let oy = 30.0 + H * pi as f64;
        let secs = p
            .series
            .iter()
            .map(|x| x.values.len())
            .max()
            .unwrap_or(1)
            .max(1);
        let x = |i: f64| LEFT + PLOT_W * i / secs as f64;
        let y = |v: f64| oy + TOP + PLOT_H * (1.0 - (v / y_max).clamp(0.0, 1.05));
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{}" font-size="12">{}</text>"#,
            oy + 18.0,
            esc(&p.title)
        );
        // Axes and grid.
        let mut tick = 0.0;
        while tick <= y_max + 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" x2="{}" y1="{y0:.1}" y2="{y0:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{tick}</text>"##,
                LEFT + PLOT_W,
                LEFT - 4.0,
                y(tick) + 4.0,
                y0 = y(tick)
            );
            tick += if y_max > 20.0 { 5.0 } else { 2.0 };
        }
        for sec in 0..=secs {
            if sec % 5 == 0 {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{sec}</text>"#,
                    x(sec as f64),
                    oy + TOP + PLOT_H + 14.0
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">seconds</text><text x="12" y="{:.1}" transform="rotate(-90 12 {:.1})" text-anchor="middle">Mbit/s</text>"#,
            LEFT + PLOT_W / 2.0,
            oy + TOP + PLOT_H + 28.0,
            oy + TOP + PLOT_H / 2.0,
            oy + TOP + PLOT_H / 2.0
        );
        // Lines: each second's value drawn at the middle of that second.
        for (li, ser) in p.series.iter().enumerate() {
            let colour = COLOURS[ser.colour % COLOURS.len()];
            let pts: Vec<String> = ser
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{:.1},{:.1}", x(i as f64 + 0.5), y(*v)))
                .collect();
            let dash = if ser.dashed {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="{}"{dash} points="{}"/>"#,
                if ser.dashed { 1.0 } else { 2.0 },
                pts.join(" ")
            );
            let ly = oy + TOP + 12.0 * li as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                LEFT + PLOT_W + 10.0,
                LEFT + PLOT_W + 30.0,
                LEFT + PLOT_W + 34.0,
                ly + 4.0,
                esc(ser.label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_a_polyline_per_series_and_escapes_text() {
        let a = [1.0, 2.0, 3.0];
        let b = [0.5, 0.5, 0.5];
        let out = svg(
            "t <1>",
            &[Panel {
                title: "kernel & braid".into(),
                series: vec![
                    Series {
                        label: "alex",
                        values: &a,
                        dashed: false,
                        colour: 0,
                    },
                    Series {
                        label: "theory",
                        values: &b,
                        dashed: true,
                        colour: 0,
                    },
                ],
            }],
            10.0,
        );
        assert_eq!(out.matches("<polyline").count(), 2);
        assert!(out.contains("t &lt;1&gt;") && out.contains("kernel &amp; braid"));
        assert!(out.trim_end().ends_with("</svg>"));
    }
}
