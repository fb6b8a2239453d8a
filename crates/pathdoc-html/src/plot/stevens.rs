//! Time-sequence (Stevens / tcptrace) graphs of captured connections: each data segment as a
//! vertical bar from its first to its last byte at the time it was seen, the receiver's ACK line
//! and its window edge (ACK + advertised window), with retransmissions, duplicate ACKs and zero
//! windows marked. A flat ACK line under a row of red bars is loss; the window edge touching the
//! data is a receive-window limit; a zero window is the receiving application not reading.

use plotters::prelude::*;

use super::{
    draw_error, iec_axis, ticks_for, Body, Figure, Mark, Series, BAD, FONT, GOOD, MEASURE, NEUTRAL,
    WARN,
};
use crate::view::{Analyze, Connection, Section, TimeSequence};

const WIDTH: u32 = 860;
const HEIGHT: u32 = 460;
const WINDOW: RGBColor = RGBColor(0xbc, 0xbd, 0x22);
const DUP_ACK: RGBColor = RGBColor(0xe3, 0x77, 0xc2);

/// Wireshark's retransmission classes: drawn red.
const RETRANSMISSIONS: [&str; 3] = [
    "retransmission",
    "fast_retransmission",
    "spurious_retransmission",
];

pub fn figures(data: &Section<Analyze>) -> Vec<Figure> {
    let analyze = match super::readable(data, "stevens", "Time-sequence graph", "capture") {
        Ok(d) => d,
        Err(f) => return f.into_iter().collect(),
    };
    let mut figures = Vec::new();
    for (c, capture) in analyze.captures.iter().enumerate() {
        for (k, conn) in capture.connections.iter().enumerate() {
            for ts in &conn.time_sequence {
                let conn_id = conn.id.unwrap_or(k as u64);
                let id = format!("stevens-{}-{}-{}", c + 1, conn_id, ts.direction);
                let title = format!(
                    "Time-sequence graph: connection {conn_id}{}, {} data{}",
                    endpoints(conn),
                    arrow(&ts.direction),
                    capture
                        .file
                        .as_ref()
                        .map(|f| format!(" ({f})"))
                        .unwrap_or_default()
                );
                if let Some(zoom) = around_first_retransmission(ts) {
                    figures.push(figure(id.clone(), title.clone(), ts));
                    figures.push(figure(
                        format!("{id}-zoom"),
                        format!("{title}: around the first retransmission"),
                        &zoom,
                    ));
                } else {
                    figures.push(figure(id, title, ts));
                }
            }
        }
    }
    figures
}

/// Segments a zoomed graph shows on each side of the first retransmission: enough to see the
/// flat ACK line of the loss and the recovery, few enough that each segment is visible.
const ZOOM_SEGMENTS: usize = 120;

fn is_retransmission(s: &crate::view::Segment) -> bool {
    RETRANSMISSIONS.iter().any(|f| s.has(f))
}

/// The part of the series around its first retransmission, when there is one and the whole
/// series is too long to show single segments.
fn around_first_retransmission(ts: &TimeSequence) -> Option<TimeSequence> {
    let first = ts.segments.iter().position(is_retransmission)?;
    if ts.segments.len() <= 2 * ZOOM_SEGMENTS {
        return None;
    }
    let lo = ts.segments[first.saturating_sub(ZOOM_SEGMENTS)].t;
    let hi = ts.segments[(first + ZOOM_SEGMENTS).min(ts.segments.len() - 1)].t;
    let inside = |t: f64| t >= lo && t <= hi;
    Some(TimeSequence {
        direction: ts.direction.clone(),
        segments: ts
            .segments
            .iter()
            .filter(|s| inside(s.t))
            .cloned()
            .collect(),
        acks: ts.acks.iter().filter(|a| inside(a.t)).cloned().collect(),
        truncated: false,
    })
}

fn endpoints(conn: &Connection) -> String {
    match (&conn.client, &conn.server) {
        (Some(c), Some(s)) => format!(" {c} → {s}"),
        _ => String::new(),
    }
}

fn arrow(direction: &str) -> &'static str {
    match direction {
        "server-to-client" => "server→client",
        _ => "client→server",
    }
}

fn figure(id: String, title: String, ts: &TimeSequence) -> Figure {
    if ts.segments.is_empty() {
        return Figure::missing(id, title, "no data segment in this direction");
    }
    let mut svg = String::new();
    if let Err(e) = draw(&mut svg, ts) {
        return Figure::missing(id, title, draw_error(e));
    }
    let retrans = is_retransmission;
    let mut legend = Vec::new();
    if ts.segments.iter().any(|s| !retrans(s)) {
        legend.push(Series::new(
            "data segment (first to last byte)",
            MEASURE,
            Mark::Bar,
        ));
    }
    if ts.segments.iter().any(retrans) {
        legend.push(Series::new("retransmitted segment", BAD, Mark::Cross));
    }
    if ts.segments.iter().any(|s| s.has("out_of_order")) {
        legend.push(Series::new("out of order", WARN, Mark::Triangle));
    }
    if !ts.acks.is_empty() {
        legend.push(Series::new("ACK (receiver)", GOOD, Mark::Line));
    }
    if ts.acks.iter().any(|a| a.win.is_some()) {
        legend.push(Series::new(
            "window edge (ACK + advertised window)",
            WINDOW,
            Mark::Line,
        ));
    }
    if ts.acks.iter().any(|a| a.has("duplicate_ack")) {
        legend.push(Series::new("duplicate ACK", DUP_ACK, Mark::Dot));
    }
    if ts
        .acks
        .iter()
        .any(|a| a.has("zero_window") || a.win == Some(0.0))
    {
        legend.push(Series::new("zero window", NEUTRAL, Mark::Triangle));
    }
    let n_retrans = ts.segments.iter().filter(|s| retrans(s)).count();
    let caption = format!(
        "{} data segments ({} retransmitted), {} ACKs. Time since the connection's first packet; sequence numbers relative to its first byte.{}",
        ts.segments.len(),
        n_retrans,
        ts.acks.len(),
        if ts.truncated {
            " Only part of the connection is drawn (the series is bounded)."
        } else {
            ""
        }
    );
    let caption = match seq_range(ts).window_above {
        Some(edge) => format!(
            "{caption} The window edge runs above the drawn range (up to relative sequence {}): the receiver offered far more than was sent, so the window did not limit this transfer.",
            pathdoc_core::units::format_bytes(edge.max(0.0) as u64)
        ),
        None => caption,
    };
    Figure {
        id,
        title,
        body: Body::Svg { svg, legend },
        caption,
    }
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Most of the sequence axis the window edge may take beyond the data and ACKs: as much again as
/// their own span. A window far beyond what was sent (3 MiB offered, 200 KiB sent) would
/// otherwise squeeze every segment below a pixel.
const WINDOW_HEADROOM: f64 = 1.0;

/// The sequence range a graph draws, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SeqRange {
    min: f64,
    max: f64,
    /// The window edge's highest value when it runs above `max` (drawn along the top).
    window_above: Option<f64>,
}

fn seq_range(ts: &TimeSequence) -> SeqRange {
    let finite = |v: &f64| v.is_finite();
    let sent = ts
        .segments
        .iter()
        .flat_map(|s| [s.seq, s.seq + s.len])
        .chain(ts.acks.iter().map(|a| a.ack))
        .filter(finite);
    let (min, data_max) = sent.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let edge = ts
        .acks
        .iter()
        .filter_map(|a| Some(a.ack + a.win?))
        .filter(finite)
        .fold(f64::NEG_INFINITY, f64::max);
    let cap = data_max + (data_max - min).max(1.0) * WINDOW_HEADROOM;
    SeqRange {
        min,
        max: data_max.max(edge.min(cap)),
        window_above: (edge > cap).then_some(edge),
    }
}

fn draw(svg: &mut String, ts: &TimeSequence) -> DrawResult {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let finite = |v: f64| v.is_finite();
    let times = || {
        ts.segments
            .iter()
            .map(|s| s.t)
            .chain(ts.acks.iter().map(|a| a.t))
            .filter(|v| finite(*v))
    };
    let (t_min, t_max) = (
        times().fold(f64::INFINITY, f64::min),
        times().fold(f64::NEG_INFINITY, f64::max),
    );
    let SeqRange {
        min: s_min,
        max: s_max,
        ..
    } = seq_range(ts);
    let (div, unit) = iec_axis(s_max - s_min.min(s_max));
    let pad_t = ((t_max - t_min) * 0.02).max(1e-6);
    let pad_s = ((s_max - s_min) * 0.03).max(1.0);
    let (t_lo, t_top) = ((t_min - pad_t).max(0.0), t_max + pad_t);
    let (y_lo, y_top) = (((s_min - pad_s) / div).max(0.0), (s_max + pad_s) / div);
    let (x_fmt, y_fmt) = (ticks_for(t_top - t_lo), ticks_for(y_top - y_lo));
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .margin_right(20)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(t_lo..t_top, y_lo..y_top)?;
    chart
        .configure_mesh()
        .x_desc("time since the connection's first packet (s)")
        .y_desc(format!("relative sequence number ({unit})"))
        .x_label_formatter(&|v| x_fmt(*v))
        .y_label_formatter(&|v| y_fmt(*v))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    // Window edge and ACK line as steps (a value holds until the next ACK).
    let steps = |value: &dyn Fn(&crate::view::Ack) -> Option<f64>| {
        let mut points = Vec::new();
        let mut last: Option<f64> = None;
        for a in ts.acks.iter().filter(|a| finite(a.t)) {
            if let Some(v) = value(a).filter(|v| finite(*v)) {
                if let Some(l) = last {
                    points.push((a.t, l / div));
                }
                points.push((a.t, v / div));
                last = Some(v);
            }
        }
        points
    };
    // A window edge above the range runs along its top (the caption gives its highest value).
    chart.draw_series(LineSeries::new(
        steps(&|a| a.win.map(|w| (a.ack + w).min(s_max))),
        WINDOW.stroke_width(1),
    ))?;
    chart.draw_series(LineSeries::new(
        steps(&|a| Some(a.ack)),
        GOOD.stroke_width(2),
    ))?;
    // Drawing order: segment bars, then the receiver's marks, then the marks of out-of-order
    // segments and retransmissions on top — each class stays visible where a segment is only a
    // pixel tall and marks pile up.
    let bar = |s: &crate::view::Segment, color: RGBColor, width: u32| {
        PathElement::new(
            vec![(s.t, s.seq / div), (s.t, (s.seq + s.len.max(1.0)) / div)],
            color.stroke_width(width),
        )
    };
    let retrans = |s: &crate::view::Segment| RETRANSMISSIONS.iter().any(|f| s.has(f));
    let ok = |s: &&crate::view::Segment| finite(s.t) && finite(s.seq);
    let mid = |s: &crate::view::Segment| (s.t, (s.seq + s.len / 2.0) / div);
    chart.draw_series(
        ts.segments
            .iter()
            .filter(ok)
            .filter(|s| !retrans(s))
            .map(|s| bar(s, if s.has("out_of_order") { WARN } else { MEASURE }, 2)),
    )?;
    chart.draw_series(
        ts.segments
            .iter()
            .filter(ok)
            .filter(|s| retrans(s))
            .map(|s| bar(s, BAD, 3)),
    )?;
    chart.draw_series(
        ts.acks
            .iter()
            .filter(|a| finite(a.t) && a.has("duplicate_ack"))
            .map(|a| Circle::new((a.t, a.ack / div), 3, DUP_ACK.filled())),
    )?;
    chart.draw_series(
        ts.acks
            .iter()
            .filter(|a| finite(a.t) && (a.has("zero_window") || a.win == Some(0.0)))
            .map(|a| TriangleMarker::new((a.t, a.ack / div), 6, NEUTRAL.filled())),
    )?;
    chart.draw_series(
        ts.segments
            .iter()
            .filter(ok)
            .filter(|s| !retrans(s) && s.has("out_of_order"))
            .map(|s| TriangleMarker::new(mid(s), 4, WARN.filled())),
    )?;
    chart.draw_series(
        ts.segments
            .iter()
            .filter(ok)
            .filter(|s| retrans(s))
            .map(|s| Cross::new(mid(s), 4, BAD.stroke_width(2))),
    )?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{Ack, Segment};

    fn series(win: f64) -> TimeSequence {
        TimeSequence {
            direction: "client-to-server".into(),
            segments: (0..100)
                .map(|i| Segment {
                    t: f64::from(i) * 0.01,
                    seq: f64::from(i) * 1448.0,
                    len: 1448.0,
                    flags: Vec::new(),
                })
                .collect(),
            acks: (1..100)
                .map(|i| Ack {
                    t: f64::from(i) * 0.01 + 0.005,
                    ack: f64::from(i) * 1448.0,
                    win: Some(win),
                    flags: Vec::new(),
                })
                .collect(),
            truncated: false,
        }
    }

    /// A 3 MiB window beside 141 KiB sent (CI saw the data bars vanish: each segment under a
    /// pixel) is bounded to the data's own span again; a window near the data is drawn whole.
    #[test]
    fn a_window_far_above_the_data_does_not_squeeze_it() {
        let far = seq_range(&series(3.0 * 1048576.0));
        let data = 100.0 * 1448.0;
        assert_eq!(far.min, 0.0);
        assert!((far.max - 2.0 * data).abs() < 1.0, "{far:?}");
        assert!(far.window_above.unwrap() > 3.0 * 1048576.0);
        let near = seq_range(&series(64.0 * 1024.0));
        assert_eq!(near.window_above, None);
        assert!(
            (near.max - (99.0 * 1448.0 + 65536.0)).abs() < 1.0,
            "{near:?}"
        );
    }
}
