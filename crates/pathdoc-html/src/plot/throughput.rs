//! Throughput per interval, one figure per direction of each run: goodput, congestion window,
//! RTT (one line per stream when the report has per-stream samples, else the direction's total)
//! and retransmitted segments per interval.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{
    draw_error, headroom, iec_axis, si_axis, ticks_for, Body, Figure, Mark, Series, BAD, FONT,
    PALETTE,
};
use crate::view::{Interval, Section, SpeedDirection, Throughput};

const WIDTH: u32 = 860;
const HEIGHT: u32 = 720;

/// Stream colours: the palette without the total's blue and the retransmissions' red.
const STREAM_COLORS: [RGBColor; 8] = [
    PALETTE[1],
    PALETTE[2],
    PALETTE[4],
    PALETTE[5],
    PALETTE[6],
    PALETTE[7],
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x39, 0x3b, 0x79),
];
const TOTAL: RGBColor = PALETTE[0];
/// Background band of the steady state in the goodput panel (opaque, so it is its own colour).
const STEADY: RGBColor = RGBColor(0xd9, 0xe7, 0xf4);

/// Every throughput figure of the report (none when the report has no throughput data).
pub fn figures(data: &Section<Throughput>) -> Vec<Figure> {
    let throughput =
        match super::readable(data, "throughput", "Throughput per interval", "throughput") {
            Ok(d) => d,
            Err(f) => return f.into_iter().collect(),
        };
    let mut figures = Vec::new();
    let many_runs = throughput.runs.len() > 2;
    for (r, run) in throughput.runs.iter().enumerate() {
        for d in &run.directions {
            let cc = run
                .congestion_control
                .clone()
                .or_else(|| d.sender.as_ref().and_then(|s| s.congestion_control.clone()));
            let mut id = format!("throughput-{}", d.direction);
            if many_runs || run.congestion_control.is_some() {
                id.push_str(&format!("-run{}", r + 1));
            }
            let title = format!(
                "Throughput {} ({}{})",
                d.arrow(),
                d.direction,
                cc.map(|c| format!(", {c}")).unwrap_or_default()
            );
            figures.push(direction_figure(id, title, d));
        }
    }
    figures
}

/// One series to draw in each panel: a stream, or the direction's total.
struct Line<'a> {
    label: String,
    color: RGBColor,
    intervals: &'a [Interval],
}

fn direction_figure(id: String, title: String, d: &SpeedDirection) -> Figure {
    let mut lines: Vec<Line> = Vec::new();
    if !d.intervals.is_empty() {
        let n = d.streams.unwrap_or(1);
        let label = if n > 1 {
            format!("all {n} streams (sum)")
        } else {
            "the stream".to_string()
        };
        lines.push(Line {
            label,
            color: TOTAL,
            intervals: &d.intervals,
        });
    }
    let streams = d.per_stream();
    let per_stream = !streams.is_empty();
    for (k, (id, intervals)) in streams.iter().enumerate() {
        lines.push(Line {
            label: format!("stream {}", id + 1),
            color: STREAM_COLORS[k % STREAM_COLORS.len()],
            intervals,
        });
    }
    if lines.is_empty() {
        return Figure::missing(
            id,
            title,
            "no per-interval samples in this report (a test shorter than one interval, or an older report)",
        );
    }
    let retrans: Vec<(f64, f64, f64)> = d
        .intervals
        .iter()
        .filter_map(|i| Some((i.start_s?, i.end_s?, i.retransmits?)))
        .collect();
    let any_retrans = retrans.iter().any(|r| r.2 > 0.0);

    let steady = d
        .phases
        .as_ref()
        .and_then(|p| p.steady.as_ref())
        .and_then(|st| Some((st.start_s?, st.end_s?, st.goodput_bps)))
        .filter(|(a, b, _)| a.is_finite() && b.is_finite() && b > a);
    let mut svg = String::new();
    let drawn = draw(&mut svg, &lines, &retrans, steady.map(|(a, b, _)| (a, b)));
    if let Err(e) = drawn {
        return Figure::missing(id, title, draw_error(e));
    }
    let mut legend: Vec<Series> = lines
        .iter()
        .map(|l| Series::new(l.label.clone(), l.color, Mark::Line))
        .collect();
    if any_retrans {
        legend.push(Series::new("retransmitted segments", BAD, Mark::Bar));
    }
    if let Some((_, _, rate)) = steady {
        legend.push(Series::new(
            format!(
                "steady state: what the verdicts judge{}",
                rate.map(|r| format!(" ({} goodput)", pathdoc_core::units::format_rate(r)))
                    .unwrap_or_default()
            ),
            STEADY,
            Mark::Band,
        ));
    }
    let total: f64 = retrans.iter().map(|r| r.2).sum();
    let caption = format!(
        "{} goodput (TCP payload) over {}; {} retransmitted segments.{}",
        d.goodput_bps
            .map(pathdoc_core::units::format_rate)
            .unwrap_or_else(|| "unknown".into()),
        d.duration_s
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(pathdoc_core::units::format_seconds)
            .unwrap_or_else(|| "an unknown time".into()),
        total,
        if per_stream || d.streams.unwrap_or(1) <= 1 {
            ""
        } else {
            " Per-stream samples are not in this report; the lines are the direction's total."
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

fn draw(
    svg: &mut String,
    lines: &[Line],
    retrans: &[(f64, f64, f64)],
    steady: Option<(f64, f64)>,
) -> DrawResult {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let t_max = lines
        .iter()
        .flat_map(|l| l.intervals.iter().filter_map(|i| i.end_s))
        .fold(0.0f64, f64::max)
        .max(retrans.iter().map(|r| r.1).fold(0.0, f64::max));
    let t_max = if t_max > 0.0 { t_max } else { 1.0 };
    let (goodput_area, rest) = root.split_vertically(HEIGHT * 34 / 100);
    let (cwnd_area, rest) = rest.split_vertically(HEIGHT * 22 / 100);
    let (rtt_area, retrans_area) = rest.split_vertically(HEIGHT * 22 / 100);

    // Each panel is drawn in its display unit, so plotters picks round ticks in that unit.
    let goodput_max = max_of(lines, &|i| i.goodput_bps);
    let (div, prefix) = si_axis(goodput_max);
    panel(
        &goodput_area,
        lines,
        (t_max, steady),
        &format!("goodput ({prefix}bit/s)"),
        |i| i.goodput_bps.map(|v| v / div),
    )?;
    let (cdiv, cunit) = iec_axis(max_of(lines, &|i| i.cwnd_bytes));
    panel(
        &cwnd_area,
        lines,
        (t_max, None),
        &format!("cwnd ({cunit})"),
        |i| i.cwnd_bytes.map(|v| v / cdiv),
    )?;
    panel(&rtt_area, lines, (t_max, None), "RTT (ms)", |i| {
        i.rtt_us.map(|u| u / 1000.0)
    })?;
    retrans_panel(&retrans_area, retrans, t_max)?;
    root.present()?;
    Ok(())
}

fn max_of(lines: &[Line], value: &impl Fn(&Interval) -> Option<f64>) -> f64 {
    lines
        .iter()
        .flat_map(|l| l.intervals.iter().filter_map(&value))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
}

fn mid(i: &Interval) -> Option<f64> {
    Some((i.start_s? + i.end_s?) / 2.0)
}

/// One panel: a line (with a dot per interval) for each series, plotted at interval midpoints.
fn panel(
    area: &DrawingArea<SVGBackend, Shift>,
    lines: &[Line],
    (t_max, band): (f64, Option<(f64, f64)>),
    y_desc: &str,
    value: impl Fn(&Interval) -> Option<f64>,
) -> DrawResult {
    let y_max = headroom(max_of(lines, &value));
    let y_fmt = ticks_for(y_max);
    let x_fmt = ticks_for(t_max);
    let mut chart = ChartBuilder::on(area)
        .margin_left(8)
        .margin_right(16)
        .margin_top(8)
        .x_label_area_size(34)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .y_desc(y_desc)
        .x_desc("time (s)")
        .x_labels(10)
        .y_labels(4)
        .x_label_formatter(&|v| x_fmt(*v))
        .y_label_formatter(&|v| y_fmt(*v))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    if let Some((a, b)) = band {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b.min(t_max), y_max)],
            STEADY.filled(),
        )))?;
    }
    for line in lines {
        let points: Vec<(f64, f64)> = line
            .intervals
            .iter()
            .filter_map(|i| Some((mid(i)?, value(i)?)))
            // Only what fits the axes: plotters' pixel arithmetic overflows on a point far
            // outside them (an interval a tampered report starts after it ends).
            .filter(|(t, v)| (0.0..=t_max).contains(t) && (0.0..=y_max).contains(v))
            .collect();
        chart.draw_series(LineSeries::new(points, line.color.stroke_width(2)).point_size(3))?;
    }
    Ok(())
}

fn retrans_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    retrans: &[(f64, f64, f64)],
    t_max: f64,
) -> DrawResult {
    let y_max = headroom(retrans.iter().map(|r| r.2).fold(0.0, f64::max));
    let x_fmt = ticks_for(t_max);
    let mut chart = ChartBuilder::on(area)
        .margin_left(8)
        .margin_right(16)
        .margin_top(8)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .y_desc("retransmitted segments")
        .x_desc("time since the test started (s)")
        .x_labels(10)
        .y_labels(3)
        .x_label_formatter(&|v| x_fmt(*v))
        // Counts: whole numbers only.
        .y_label_formatter(&|v| {
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    let fits = |&&(s, e, n): &&(f64, f64, f64)| {
        n > 0.0 && n <= y_max && (0.0..=t_max).contains(&s) && (s..=t_max).contains(&e)
    };
    chart.draw_series(retrans.iter().filter(fits).map(|&(s, e, n)| {
        let pad = (e - s) * 0.1;
        Rectangle::new([(s + pad, 0.0), (e - pad, n)], BAD.filled())
    }))?;
    Ok(())
}
