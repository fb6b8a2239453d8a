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
    let analyze = match data {
        Section::Absent => return Vec::new(),
        Section::Unreadable(why) => {
            return vec![Figure::missing(
                "stevens",
                "Time-sequence graph",
                format!("the report's capture data could not be read: {why}"),
            )]
        }
        Section::Read(a) => a,
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
                figures.push(figure(id, title, ts));
            }
        }
    }
    figures
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
    let retrans = |s: &crate::view::Segment| RETRANSMISSIONS.iter().any(|f| s.has(f));
    let mut legend = Vec::new();
    if ts.segments.iter().any(|s| !retrans(s)) {
        legend.push(Series::new(
            "data segment (first to last byte)",
            MEASURE,
            Mark::Bar,
        ));
    }
    if ts.segments.iter().any(retrans) {
        legend.push(Series::new("retransmitted segment", BAD, Mark::Bar));
    }
    if ts.segments.iter().any(|s| s.has("out_of_order")) {
        legend.push(Series::new("out of order", WARN, Mark::Bar));
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
    Figure {
        id,
        title,
        body: Body::Svg { svg, legend },
        caption,
    }
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(svg: &mut String, ts: &TimeSequence) -> DrawResult {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let finite = |v: f64| v.is_finite();
    let t_max = ts
        .segments
        .iter()
        .map(|s| s.t)
        .chain(ts.acks.iter().map(|a| a.t))
        .filter(|v| finite(*v))
        .fold(0.0, f64::max);
    let seq_max = ts
        .segments
        .iter()
        .map(|s| s.seq + s.len)
        .chain(ts.acks.iter().map(|a| a.ack + a.win.unwrap_or(0.0)))
        .filter(|v| finite(*v))
        .fold(0.0, f64::max);
    let (div, unit) = iec_axis(seq_max);
    let t_top = if t_max > 0.0 { t_max * 1.02 } else { 1.0 };
    let y_top = if seq_max > 0.0 {
        seq_max / div * 1.05
    } else {
        1.0
    };
    let (x_fmt, y_fmt) = (ticks_for(t_top), ticks_for(y_top));
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .margin_right(20)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_top, 0f64..y_top)?;
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
    chart.draw_series(LineSeries::new(
        steps(&|a| a.win.map(|w| a.ack + w)),
        WINDOW.stroke_width(1),
    ))?;
    chart.draw_series(LineSeries::new(
        steps(&|a| Some(a.ack)),
        GOOD.stroke_width(2),
    ))?;
    // Receiver marks under the segments, so a retransmission is never hidden by a dot.
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
    // Segments: normal first, then out-of-order, then retransmissions on top.
    let bar = |s: &crate::view::Segment, color: RGBColor, width: u32| {
        PathElement::new(
            vec![(s.t, s.seq / div), (s.t, (s.seq + s.len.max(1.0)) / div)],
            color.stroke_width(width),
        )
    };
    let retrans = |s: &crate::view::Segment| RETRANSMISSIONS.iter().any(|f| s.has(f));
    let ok = |s: &&crate::view::Segment| finite(s.t) && finite(s.seq);
    chart.draw_series(
        ts.segments
            .iter()
            .filter(ok)
            .filter(|s| !retrans(s) && !s.has("out_of_order"))
            .map(|s| bar(s, MEASURE, 2)),
    )?;
    chart.draw_series(
        ts.segments
            .iter()
            .filter(ok)
            .filter(|s| !retrans(s) && s.has("out_of_order"))
            .map(|s| bar(s, WARN, 2)),
    )?;
    chart.draw_series(
        ts.segments
            .iter()
            .filter(ok)
            .filter(|s| retrans(s))
            .map(|s| bar(s, BAD, 3)),
    )?;
    root.present()?;
    Ok(())
}
