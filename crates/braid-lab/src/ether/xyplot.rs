//! A small SVG x-y chart (the sibling of [`crate::plot`], which draws per-second series):
//! points joined by lines, a linear or logarithmic x axis, for the seeds' graphs
//! (bandwidth against connections, throughput and latency against message size).
use std::fmt::Write as _;

/// One line.
pub struct Line<'a> {
    /// Legend label.
    pub label: &'a str,
    /// (x, y) points, in x order.
    pub points: &'a [(f64, f64)],
    /// Dashed (a reference) or solid.
    pub dashed: bool,
}

/// A chart.
pub struct Chart<'a> {
    /// Title.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// Logarithmic x axis (base 2 ticks).
    pub log_x: bool,
    /// Logarithmic y axis (base 10 ticks).
    pub log_y: bool,
    /// The lines.
    pub lines: Vec<Line<'a>>,
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];
const W: f64 = 760.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 40.0;
const PW: f64 = 500.0;
const PH: f64 = 320.0;

/// The chart as an SVG document.
pub fn svg(c: &Chart<'_>) -> String {
    let pts = || c.lines.iter().flat_map(|l| l.points.iter());
    let fx = |x: f64| if c.log_x { x.max(1e-9).log2() } else { x };
    let fy = |y: f64| if c.log_y { y.max(1e-9).log10() } else { y };
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, f64::MIN);
    let mut y0 = if c.log_y { f64::MAX } else { 0.0 };
    for &(x, y) in pts() {
        if !x.is_finite() || !y.is_finite() {
            continue;
        }
        x0 = x0.min(fx(x));
        x1 = x1.max(fx(x));
        y1 = y1.max(fy(y));
        if c.log_y {
            y0 = y0.min(fy(y));
        }
    }
    if x0 >= x1 {
        (x0, x1) = (x0.min(0.0), x0.max(0.0) + 1.0);
    }
    if c.log_y {
        (y0, y1) = (y0.floor(), y1.ceil().max(y0.floor() + 1.0));
    } else {
        y1 = nice_max(y1.max(1e-9));
    }
    let sx = |x: f64| LEFT + PW * (fx(x) - x0) / (x1 - x0);
    let sy = |y: f64| TOP + PH * (1.0 - (fy(y) - y0) / (y1 - y0));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="13">{}</text>"#,
        esc(c.title)
    );
    // Y grid.
    let yticks: Vec<f64> = if c.log_y {
        (y0 as i32..=y1 as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=5).map(|i| y1 * f64::from(i) / 5.0).collect()
    };
    for t in yticks {
        let y = sy(t);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + PW,
            LEFT - 4.0,
            y + 4.0,
            num(t)
        );
    }
    // X ticks.
    let xticks: Vec<f64> = if c.log_x {
        let step = ((x1 - x0) / 10.0).ceil().max(1.0) as i32;
        (x0.ceil() as i32..=x1.floor() as i32)
            .filter(|e| e % step == 0)
            .map(|e| 2f64.powi(e))
            .collect()
    } else {
        let step = nice_max((x1 - x0) / 8.0).max(1.0);
        let mut v = Vec::new();
        let mut t = (x0 / step).ceil() * step;
        while t <= x1 + 1e-9 {
            v.push(t);
            t += step;
        }
        v
    };
    for t in xticks {
        let x = sx(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            TOP + PH,
            TOP + PH + 14.0,
            if c.log_x { bytes(t) } else { num(t) }
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{}</text>"#,
        LEFT + PW / 2.0,
        TOP + PH + 32.0,
        esc(c.x_label),
        TOP + PH / 2.0,
        TOP + PH / 2.0,
        esc(c.y_label)
    );
    for (i, l) in c.lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = l
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let dash = if l.dashed {
            r#" stroke-dasharray="5 3""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} points="{}"/>"#,
            points.join(" ")
        );
        let ly = TOP + 14.0 * i as f64 + 6.0;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + PW + 10.0,
            LEFT + PW + 30.0,
            LEFT + PW + 34.0,
            ly + 4.0,
            esc(l.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The smallest of 1, 2, 5 × 10^k at or above `v`.
fn nice_max(v: f64) -> f64 {
    let e = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * e)
        .find(|&c| c >= v - 1e-12)
        .unwrap_or(10.0 * e)
}

fn num(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn bytes(v: f64) -> String {
    if v >= 1048576.0 {
        format!("{}M", v / 1048576.0)
    } else if v >= 1024.0 {
        format!("{}K", v / 1024.0)
    } else {
        format!("{v}")
    }
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
    fn a_polyline_per_line_within_the_plot_area() {
        let a = [(1.0, 10.0), (2.0, 20.0), (16.0, 190.0)];
        let b = [(1.0, 100.0), (16.0, 100.0)];
        let out = svg(&Chart {
            title: "x & y",
            x_label: "connections",
            y_label: "Mbit/s",
            log_x: false,
            log_y: false,
            lines: vec![
                Line {
                    label: "l34",
                    points: &a,
                    dashed: false,
                },
                Line {
                    label: "one member",
                    points: &b,
                    dashed: true,
                },
            ],
        });
        assert_eq!(out.matches("<polyline").count(), 2);
        assert!(out.contains("x &amp; y"));
        // Every drawn point is inside the plot area.
        for poly in out.lines().filter(|l| l.starts_with("<polyline")) {
            let pts = poly
                .split("points=\"")
                .nth(1)
                .unwrap()
                .trim_end_matches("\"/>");
            for p in pts.split(' ') {
                let (x, y) = p.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!((LEFT - 0.1..=LEFT + PW + 0.1).contains(&x), "{x}");
                assert!((TOP - 0.1..=TOP + PH + 0.1).contains(&y), "{y}");
            }
        }
    }

    #[test]
    fn log_axes_and_nice_numbers() {
        assert_eq!(nice_max(170.0), 200.0);
        assert_eq!(nice_max(0.03), 0.05);
        assert_eq!(bytes(65536.0), "64K");
        let a = [(1.0, 0.01), (1024.0, 1.0), (1048576.0, 100.0)];
        let out = svg(&Chart {
            title: "t",
            x_label: "bytes",
            y_label: "ms",
            log_x: true,
            log_y: true,
            lines: vec![Line {
                label: "x",
                points: &a,
                dashed: false,
            }],
        });
        assert!(out.contains(">1M<") && out.contains(">100<"));
    }
}
