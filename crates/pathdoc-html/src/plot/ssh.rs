//! The cipher chart of `pathdoc ssh`, one figure per direction: the steady SSH rate of every
//! cipher tried, beside raw TCP on the same path and the channel window's ceiling (window / RTT).
//! It is the chart seed 002's admin drew by hand, with the two lines that say whether switching
//! the cipher can help at all.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor;

use super::{
    draw_error, in_area, si_axis, ticks_for, Body, Figure, Mark, Series, FONT, MEASURE, NEUTRAL,
    PALETTE, RULE,
};
use crate::view::{Section, Ssh, SshTransfer};

const WIDTH: u32 = 860;
/// Bars of ciphers other than the negotiated default.
const OTHER: RGBColor = PALETTE[0];

/// One bar: a cipher's steady rate.
struct Bar {
    label: String,
    rate_bps: f64,
    default: bool,
}

/// The reference lines drawn across the bars.
#[derive(Default)]
struct Lines {
    raw_tcp_bps: Option<f64>,
    window_ceiling_bps: Option<f64>,
}

/// `ceilings` is the window / RTT ceiling the verdict of each way computed
/// (`client-to-server`, `server-to-client`), from the report's evidence.
pub fn figures(data: &Section<Ssh>, ceilings: [Option<f64>; 2]) -> Vec<Figure> {
    let ssh = match super::readable(data, "ssh-ciphers", "SSH rate per cipher", "ssh") {
        Ok(d) => d,
        Err(f) => return f.into_iter().collect(),
    };
    [("upload", ceilings[0]), ("download", ceilings[1])]
        .into_iter()
        .filter_map(|(way, ceiling)| {
            let lines = Lines {
                raw_tcp_bps: positive(match way {
                    "upload" => ssh.raw_tcp.upload_bps,
                    _ => ssh.raw_tcp.download_bps,
                }),
                window_ceiling_bps: positive(ceiling),
            };
            direction_figure(way, &ssh.transfers, &lines)
        })
        .collect()
}

fn positive(v: Option<f64>) -> Option<f64> {
    v.filter(|v| v.is_finite() && *v > 0.0)
}

fn bars(way: &str, transfers: &[SshTransfer]) -> Vec<Bar> {
    let mut out: Vec<Bar> = transfers
        .iter()
        .filter(|t| t.way.as_deref() == Some(way))
        .filter_map(|t| {
            let rate_bps = positive(t.steady.as_ref()?.rate_bps)?;
            let default = t.requested_cipher.is_none();
            let cipher = t
                .negotiated(way)
                .or(t.requested_cipher.clone())
                .unwrap_or_else(|| "?".into());
            let mac = t.requested_mac.as_deref().map(|m| format!(" + {m}"));
            Some(Bar {
                label: format!(
                    "{cipher}{}{}",
                    mac.unwrap_or_default(),
                    if default { " (default)" } else { "" }
                ),
                rate_bps,
                default,
            })
        })
        .collect();
    out.sort_by(|a, b| b.rate_bps.total_cmp(&a.rate_bps));
    out
}

fn direction_figure(way: &str, transfers: &[SshTransfer], lines: &Lines) -> Option<Figure> {
    if !transfers.iter().any(|t| t.way.as_deref() == Some(way)) {
        return None;
    }
    let arrow = if way == "upload" {
        "client → server"
    } else {
        "server → client"
    };
    let id = format!("ssh-ciphers-{way}");
    let title = format!("SSH {way} ({arrow}): steady rate per cipher");
    let bars = bars(way, transfers);
    if bars.is_empty() {
        return Some(Figure::missing(
            id,
            title,
            "no transfer of this direction lasted long enough for a steady rate",
        ));
    }
    let mut svg = String::new();
    if let Err(e) = draw(&mut svg, &bars, lines) {
        return Some(Figure::missing(id, title, draw_error(e)));
    }
    let mut legend = Vec::new();
    if bars.iter().any(|b| b.default) {
        legend.push(Series::new(
            "SSH, the cipher negotiated by default",
            NEUTRAL,
            Mark::Bar,
        ));
    }
    if bars.iter().any(|b| !b.default) {
        legend.push(Series::new("SSH, another cipher", OTHER, Mark::Bar));
    }
    if lines.raw_tcp_bps.is_some() {
        legend.push(Series::new(
            "raw TCP on the same path (pathdoc's own stream)",
            MEASURE,
            Mark::Line,
        ));
    }
    if lines.window_ceiling_bps.is_some() {
        legend.push(Series::new(
            "SSH channel window / RTT ceiling",
            RULE,
            Mark::Line,
        ));
    }
    Some(Figure {
        id,
        title,
        body: Body::Svg { svg, legend },
        caption: "Goodput (SSH payload bits per second, SI prefixes) in each transfer's steady part. \
                  Bars well below raw TCP and spread by cipher: the cipher/CPU limits. All bars at \
                  the window ceiling whatever the cipher: the SSH channel window limits. Bars at raw \
                  TCP: the network (or TCP's own buffers) limits."
            .into(),
    })
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// A reference line beyond this multiple of the longest bar is named, not drawn to scale.
const OFF_SCALE: f64 = 5.0;

fn draw(svg: &mut String, bars: &[Bar], lines: &Lines) -> DrawResult {
    let longest = bars.iter().map(|b| b.rate_bps).fold(0.0, f64::max);
    // The axis fits the bars: a reference line far beyond them (a window / RTT ceiling of
    // 240 Gbit/s at sub-ms RTT beside 165 Mbit/s bars) would shrink them to slivers, so it is
    // named with an arrow and its value at the right edge instead of drawn.
    let on_scale = |v: &f64| *v <= longest * OFF_SCALE;
    let max = lines
        .raw_tcp_bps
        .iter()
        .chain(lines.window_ceiling_bps.iter())
        .copied()
        .filter(on_scale)
        .fold(longest, f64::max);
    // Off-scale values get a row each above the plot, clear of the bars and the lines' labels.
    let off_rows = [lines.raw_tcp_bps, lines.window_ceiling_bps]
        .iter()
        .flatten()
        .filter(|v| !on_scale(v))
        .count() as u32;
    let height = 112 + 34 * bars.len() as u32 + 16 * off_rows;
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (div, prefix) = si_axis(max);
    // Room right of the longest bar for its value label.
    let x_max = max / div * 1.25;
    let n = bars.len() as f64;
    let x_fmt = ticks_for(x_max);
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .margin_top(26 + 16 * off_rows)
        .margin_right(20)
        .x_label_area_size(44)
        .y_label_area_size(300)
        .build_cartesian_2d(0f64..x_max, 0f64..n)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .y_label_formatter(&|_| String::new())
        .x_labels(8)
        .x_label_formatter(&|v| x_fmt(*v))
        .x_desc(format!("goodput ({prefix}bit/s)"))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    let label_style = TextStyle::from((FONT, 13)).pos(text_anchor::Pos::new(
        text_anchor::HPos::Right,
        text_anchor::VPos::Center,
    ));
    let value_style = TextStyle::from((FONT, 12)).pos(text_anchor::Pos::new(
        text_anchor::HPos::Left,
        text_anchor::VPos::Center,
    ));
    for (i, bar) in bars.iter().enumerate() {
        let top = n - i as f64;
        let v = bar.rate_bps / div;
        let color = if bar.default { NEUTRAL } else { OTHER };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, top - 0.8), (v, top - 0.2)],
            color.filled(),
        )))?;
        let (x0, y) = in_area(&root, chart.backend_coord(&(0.0, top - 0.5)));
        root.draw(&Text::new(
            bar.label.clone(),
            (x0 - 8, y),
            label_style.clone(),
        ))?;
        let (x1, _) = in_area(&root, chart.backend_coord(&(v, top - 0.5)));
        root.draw(&Text::new(
            pathdoc_core::units::format_rate(bar.rate_bps),
            (x1 + 6, y),
            value_style.clone(),
        ))?;
    }
    let off_style = TextStyle::from((FONT, 12)).pos(text_anchor::Pos::new(
        text_anchor::HPos::Right,
        text_anchor::VPos::Center,
    ));
    let mut off_scale: i32 = 0;
    for (value, color, dash_label) in [
        (lines.raw_tcp_bps, MEASURE, "raw TCP"),
        (lines.window_ceiling_bps, RULE, "window / RTT"),
    ] {
        let Some(v) = value else { continue };
        if !on_scale(&v) {
            // Right-aligned with the plot's right edge, in the rows above it.
            let (px, _) = in_area(&root, chart.backend_coord(&(x_max, n)));
            root.draw(&Text::new(
                format!(
                    "{dash_label} {} (off scale) →",
                    pathdoc_core::units::format_rate(v)
                ),
                (px, 16 + 16 * off_scale),
                off_style.clone().color(&color),
            ))?;
            off_scale += 1;
            continue;
        }
        let x = v / div;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, n)],
            color.stroke_width(2),
        )))?;
        vertical_label(&root, &chart, x, n, color, dash_label)?;
    }
    root.present()?;
    Ok(())
}

type BarChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A reference line's name at its top end.
fn vertical_label(
    root: &DrawingArea<SVGBackend, Shift>,
    chart: &BarChart,
    x: f64,
    top: f64,
    color: RGBColor,
    label: &str,
) -> DrawResult {
    let (px, py) = in_area(root, chart.backend_coord(&(x, top)));
    let style = TextStyle::from((FONT, 12))
        .color(&color)
        .pos(text_anchor::Pos::new(
            text_anchor::HPos::Center,
            text_anchor::VPos::Bottom,
        ));
    root.draw(&Text::new(label.to_string(), (px, py - 2), style))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer_json(
        way: &str,
        cipher: Option<&str>,
        negotiated: &str,
        rate: f64,
    ) -> serde_json::Value {
        serde_json::json!({
            "way": way,
            "requested_cipher": cipher,
            "steady": { "rate_bps": rate },
            "log": {
                "client_to_server": { "cipher": negotiated, "mac": "<implicit>" },
                "server_to_client": { "cipher": negotiated, "mac": "<implicit>" }
            }
        })
    }

    fn transfer(way: &str, cipher: Option<&str>, negotiated: &str, rate: f64) -> SshTransfer {
        serde_json::from_value(transfer_json(way, cipher, negotiated, rate)).unwrap()
    }

    #[test]
    fn bars_per_cipher_with_raw_tcp_and_the_window_line() {
        let ssh: Ssh = serde_json::from_value(serde_json::json!({
            "raw_tcp": { "upload_bps": 650e6, "download_bps": 700e6 },
            "transfers": [
                transfer_json("upload", None, "chacha20-poly1305@openssh.com", 160e6),
                transfer_json("upload", Some("aes128-gcm@openssh.com"), "aes128-gcm@openssh.com", 158e6),
                transfer_json("download", None, "chacha20-poly1305@openssh.com", 157e6),
            ]
        }))
        .unwrap();
        let figs = figures(&Section::Read(ssh), [Some(166e6), None]);
        assert_eq!(figs.len(), 2);
        let Body::Svg { svg, legend } = &figs[0].body else {
            panic!("{:?}", figs[0].body)
        };
        assert!(
            svg.contains("chacha20-poly1305@openssh.com (default)"),
            "{svg}"
        );
        assert!(svg.contains("aes128-gcm@openssh.com"));
        assert!(svg.contains("160 Mbit/s"), "{svg}");
        let labels: Vec<&str> = legend.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels.len(), 4, "{labels:?}");
        // The download had no ceiling from its verdict: no window line in its legend.
        let Body::Svg { legend, .. } = &figs[1].body else {
            panic!()
        };
        assert!(legend.iter().all(|s| !s.label.contains("window")));
    }

    /// Issue 18: at sub-ms RTT the window / RTT ceiling was 240 Gbit/s and the axis ran to
    /// 300 Gbit/s, so the 165 Mbit/s cipher bars were slivers. The axis fits the bars; the
    /// ceiling is named with its value and an arrow.
    #[test]
    fn a_ceiling_far_off_scale_is_named_not_drawn() {
        let ssh: Ssh = serde_json::from_value(serde_json::json!({
            "raw_tcp": { "upload_bps": 721e6 },
            "transfers": [
                transfer_json("upload", None, "chacha20-poly1305@openssh.com", 165e6),
                transfer_json("upload", Some("aes256-gcm@openssh.com"), "aes256-gcm@openssh.com", 170e6),
            ]
        }))
        .unwrap();
        let figs = figures(&Section::Read(ssh), [Some(240e9), None]);
        let Body::Svg { svg, legend } = &figs[0].body else {
            panic!("{:?}", figs[0].body)
        };
        assert!(
            svg.contains("goodput (Mbit/s)"),
            "axis not fitted to the bars: {svg}"
        );
        assert!(
            svg.contains("window / RTT 240 Gbit/s (off scale) →"),
            "{svg}"
        );
        // raw TCP (4.2× the longest bar) stays a line on the axis.
        assert!(!svg.contains("raw TCP 721 Mbit/s (off scale)"), "{svg}");
        assert!(svg.contains("raw TCP"), "{svg}");
        assert!(legend.iter().any(|s| s.label.contains("window")));
    }

    #[test]
    fn a_direction_without_a_steady_rate_says_so() {
        let mut t = transfer("upload", None, "aes128-ctr", 1e6);
        t.steady = None;
        let ssh = Ssh {
            transfers: vec![t],
            ..Default::default()
        };
        let figs = figures(&Section::Read(ssh), [None, None]);
        assert_eq!(figs.len(), 1);
        assert!(matches!(figs[0].body, Body::Missing(_)));
        assert!(figures(&Section::Absent, [None, None]).is_empty());
    }
}
