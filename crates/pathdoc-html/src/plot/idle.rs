//! The idle ladder: every probe's idle time (log scale) and whether its connection survived, one
//! row per probe mode, the measured bracket per row and the RFC floors (RFC 5382 REQ-5: 2 h 4 min
//! for TCP, RFC 4787 REQ-5: 2 min for UDP). The axis always reaches the RFC 5382 line, so a
//! scaled-down lab run shows how far below the floor its box forgets.

use plotters::coord::combinators::LogCoord;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor;

use super::{draw_error, Body, Figure, Mark, Series, BAD, FONT, GOOD, NEUTRAL, RULE};
use crate::view::{Bracket, Idle, Section};

const WIDTH: u32 = 860;
/// RFC 5382 REQ-5: an established TCP connection's idle timeout MUST NOT be less than 2 h 4 min.
pub const RFC5382_S: f64 = 7440.0;
/// RFC 4787 REQ-5: a UDP mapping timer MUST NOT expire in less than 2 min.
pub const RFC4787_S: f64 = 120.0;
/// The bracket band: opaque so its colour on screen is the legend's colour.
const BAND: RGBColor = RGBColor(0xff, 0xd2, 0x9e);

/// One row of the ladder: a probe mode, its probes and its bracket.
struct Row {
    label: String,
    udp: bool,
    /// (idle seconds, outcome) per probe.
    probes: Vec<(f64, String)>,
    bracket: Option<Bracket>,
}

pub fn figure(data: &Section<Idle>) -> Option<Figure> {
    let (id, title) = (
        "idle-ladder",
        "Idle ladder: how long an idle connection survives",
    );
    let idle = match super::readable(data, id, title, "idle") {
        Ok(d) => d,
        Err(f) => return f,
    };
    let rows = rows(idle);
    if rows.iter().all(|r| r.probes.is_empty()) {
        return Some(Figure::missing(
            id,
            title,
            "no idle probe was tested (the check ended before its first test)",
        ));
    }
    let mut svg = String::new();
    if let Err(e) = draw(&mut svg, &rows, idle.horizon_s()) {
        return Some(Figure::missing(id, title, draw_error(e)));
    }
    let outcomes = |o: &str| rows.iter().flat_map(|r| &r.probes).any(|p| p.1 == o);
    let mut legend = Vec::new();
    if outcomes("alive") {
        legend.push(Series::new("survived", GOOD, Mark::Dot));
    }
    if outcomes("dead") {
        legend.push(Series::new("died (state dropped)", BAD, Mark::Cross));
    }
    if rows
        .iter()
        .flat_map(|r| &r.probes)
        .any(|p| p.1 != "alive" && p.1 != "dead")
    {
        legend.push(Series::new(
            "lost to an outage (not counted)",
            NEUTRAL,
            Mark::Triangle,
        ));
    }
    if rows
        .iter()
        .any(|r| drawn_bracket(r.bracket.as_ref()).is_some())
    {
        legend.push(Series::new(
            "measured bracket (longest survived – shortest died)",
            BAND,
            Mark::Band,
        ));
    }
    legend.push(Series::new(
        "RFC minimum (TCP 5382: 2 h 4 min; UDP 4787: 2 min)",
        RULE,
        Mark::Line,
    ));
    Some(Figure {
        id: id.into(),
        title: title.into(),
        body: Body::Svg { svg, legend },
        caption: caption(idle),
    })
}

fn caption(idle: &Idle) -> String {
    let fmt = pathdoc_core::units::format_seconds;
    let mut parts =
        vec!["Idle time is what the server measured on each probe connection.".to_string()];
    if let Some(h) = idle.horizon_s() {
        parts.push(format!("Longest idle tested: {}.", fmt(h)));
    }
    for l in idle.ladders.iter().filter(|l| l.split.is_none()) {
        if let Some(b) = &l.outcome {
            match (b.lower_s, b.upper_s) {
                (lo, Some(up)) => parts.push(format!(
                    "{}: dropped between {} and {}.",
                    l.mode,
                    fmt(lo.unwrap_or(0.0)),
                    fmt(up)
                )),
                (Some(lo), None) => {
                    parts.push(format!("{}: survived {} (no drop seen).", l.mode, fmt(lo)))
                }
                _ => {}
            }
        }
    }
    parts.join(" ")
}

fn mode_label(mode: &str) -> String {
    match mode {
        "server-initiated" => "TCP, server speaks first".into(),
        "client-initiated" => "TCP, client speaks first".into(),
        "keepalive" => "TCP with keepalives".into(),
        "near-warm" => "TCP, near hops kept warm".into(),
        "far-warm" => "TCP, far hops kept warm".into(),
        other => format!("TCP, {other}"),
    }
}

fn rows(idle: &Idle) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for t in &idle.tests {
        let Some(s) = t.idle_s.filter(|s| s.is_finite() && *s > 0.0) else {
            continue;
        };
        let label = mode_label(&t.mode);
        match rows.iter_mut().find(|r| r.label == label) {
            Some(r) => r.probes.push((s, t.outcome.clone())),
            None => {
                let ladders: Vec<_> = idle.ladders.iter().filter(|l| l.mode == t.mode).collect();
                let bracket = match ladders.as_slice() {
                    [one] => one.outcome.clone(),
                    _ => None,
                };
                rows.push(Row {
                    label,
                    udp: false,
                    probes: vec![(s, t.outcome.clone())],
                    bracket,
                });
            }
        }
    }
    if let Some(udp) = &idle.udp {
        let class_bracket =
            |c: &Option<crate::view::UdpClass>| c.as_ref().and_then(|c| c.outcome.clone());
        let classes: [(&str, &str, Option<Bracket>); 4] = [
            (
                "single-exchange",
                "UDP, one exchange then silence",
                class_bracket(&udp.single_exchange),
            ),
            (
                "stream",
                "UDP, a stream then silence",
                class_bracket(&udp.stream),
            ),
            // Reports from before the two classes: one ladder.
            ("", "UDP", udp.outcome.clone()),
            ("inbound", "UDP, inbound traffic only", None),
        ];
        for (class, label, bracket) in classes {
            let probes: Vec<(f64, String)> = udp
                .tests
                .iter()
                .filter(|t| match class {
                    "inbound" => t.inbound_refresh,
                    "" => !t.inbound_refresh && t.class.is_none(),
                    c => !t.inbound_refresh && t.class.as_deref() == Some(c),
                })
                .filter_map(|t| {
                    Some((
                        t.idle_s.filter(|s| s.is_finite() && *s > 0.0)?,
                        t.outcome.clone(),
                    ))
                })
                .collect();
            if !probes.is_empty() {
                rows.push(Row {
                    label: label.into(),
                    udp: true,
                    probes,
                    bracket,
                });
            }
        }
    }
    rows
}

/// A bracket worth drawing: both ends known and ordered.
fn drawn_bracket(b: Option<&Bracket>) -> Option<(f64, f64)> {
    let b = b?;
    let (lo, up) = (b.lower_s?, b.upper_s?);
    (lo.is_finite() && up.is_finite() && lo > 0.0 && up >= lo).then_some((lo, up))
}

/// Nice tick positions for a log time axis, with their labels.
const TICKS: [(f64, &str); 14] = [
    (0.1, "100 ms"),
    (1.0, "1 s"),
    (2.0, "2 s"),
    (5.0, "5 s"),
    (10.0, "10 s"),
    (30.0, "30 s"),
    (60.0, "1 min"),
    (120.0, "2 min"),
    (300.0, "5 min"),
    (600.0, "10 min"),
    (1800.0, "30 min"),
    (3600.0, "1 h"),
    (7200.0, "2 h"),
    (14400.0, "4 h"),
];

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(svg: &mut String, rows: &[Row], horizon: Option<f64>) -> DrawResult {
    let height = 110 + 46 * rows.len() as u32;
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let values = rows.iter().flat_map(|r| r.probes.iter().map(|p| p.0));
    let lo = values.clone().fold(f64::INFINITY, f64::min).min(1.0) / 1.6;
    let hi = values.fold(RFC5382_S, f64::max).max(horizon.unwrap_or(0.0)) * 1.35;
    let n = rows.len() as f64;
    let label_width = 190;
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .margin_right(20)
        .x_label_area_size(44)
        .y_label_area_size(label_width)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..n)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|_| String::new())
        .draw()?;
    // Axis: our own ticks, labelled as durations, and row labels.
    let grid = RGBColor(0xdd, 0xdd, 0xdd);
    let tick_style = TextStyle::from((FONT, 12)).pos(text_anchor::Pos::new(
        text_anchor::HPos::Center,
        text_anchor::VPos::Top,
    ));
    for (v, label) in TICKS.iter().filter(|(v, _)| *v > lo && *v < hi) {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(*v, 0.0), (*v, n)],
            grid.stroke_width(1),
        )))?;
        let (x, y) = chart.backend_coord(&(*v, 0.0));
        root.draw(&Text::new(
            label.to_string(),
            (x, y + 6),
            tick_style.clone(),
        ))?;
    }
    let (x0, y0) = chart.backend_coord(&(lo, 0.0));
    root.draw(&Text::new(
        "idle time before the test (log scale)",
        ((x0 + chart.backend_coord(&(hi, 0.0)).0) / 2, y0 + 24),
        TextStyle::from((FONT, 13)).pos(text_anchor::Pos::new(
            text_anchor::HPos::Center,
            text_anchor::VPos::Top,
        )),
    ))?;
    let row_style = TextStyle::from((FONT, 13)).pos(text_anchor::Pos::new(
        text_anchor::HPos::Right,
        text_anchor::VPos::Center,
    ));
    for (i, row) in rows.iter().enumerate() {
        let y = n - i as f64 - 0.5;
        let (x, py) = chart.backend_coord(&(lo, y));
        root.draw(&Text::new(
            row.label.clone(),
            (x - 8, py),
            row_style.clone(),
        ))?;
    }
    // Brackets under the probes, then the RFC floors, then the probes.
    for (i, row) in rows.iter().enumerate() {
        if let Some((l, u)) = drawn_bracket(row.bracket.as_ref()) {
            let y = n - i as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(l, y - 0.85), (u, y - 0.15)],
                BAND.filled(),
            )))?;
        }
    }
    rfc_line(
        &mut chart,
        &root,
        rows,
        false,
        RFC5382_S,
        "RFC 5382: 2 h 4 min",
    )?;
    if lo < RFC4787_S {
        rfc_line(&mut chart, &root, rows, true, RFC4787_S, "RFC 4787: 2 min")?;
    }
    for (i, row) in rows.iter().enumerate() {
        let y = n - i as f64 - 0.5;
        for (s, outcome) in &row.probes {
            match outcome.as_str() {
                "alive" => {
                    chart.draw_series(std::iter::once(Circle::new((*s, y), 5, GOOD.filled())))?;
                }
                "dead" => {
                    chart.draw_series(std::iter::once(Cross::new(
                        (*s, y),
                        5,
                        BAD.stroke_width(2),
                    )))?;
                }
                _ => {
                    chart.draw_series(std::iter::once(TriangleMarker::new(
                        (*s, y),
                        6,
                        NEUTRAL.filled(),
                    )))?;
                }
            }
        }
    }
    root.present()?;
    Ok(())
}

type IdleChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogCoord<f64>, RangedCoordf64>>;

/// A vertical requirement line across the TCP rows (or the UDP rows) with its label.
fn rfc_line(
    chart: &mut IdleChart,
    root: &DrawingArea<SVGBackend, Shift>,
    rows: &[Row],
    udp: bool,
    at: f64,
    label: &str,
) -> DrawResult {
    let n = rows.len() as f64;
    let idx: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].udp == udp).collect();
    let (Some(&first), Some(&last)) = (idx.first(), idx.last()) else {
        return Ok(());
    };
    let (top, bottom) = (n - first as f64, n - last as f64 - 1.0);
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(at, bottom), (at, top)],
        RULE.stroke_width(2),
    )))?;
    let (x, y) = chart.backend_coord(&(at, top));
    let style = TextStyle::from((FONT, 12))
        .color(&RULE)
        .pos(text_anchor::Pos::new(
            text_anchor::HPos::Right,
            text_anchor::VPos::Top,
        ));
    root.draw(&Text::new(label.to_string(), (x - 4, y + 2), style))?;
    Ok(())
}
