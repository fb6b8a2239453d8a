//! The MTU probe map, one figure per direction: every probed size and the share of its probes
//! that arrived, lost silently or answered by ICMP too-big, the measured path MTU, and the TTL
//! scan that shows the hop beyond which big probes vanish.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor;

use super::{
    draw_error, in_area, Body, Figure, Mark, Series, BAD, FONT, GOOD, MEASURE, NEUTRAL, PALETTE,
    RULE, WARN,
};
use crate::view::{HopReply, Mtu, MtuDirection, Section};

const WIDTH: u32 = 860;
const FAR_END: RGBColor = PALETTE[7];

pub fn figures(data: &Section<Mtu>) -> Vec<Figure> {
    let mtu = match super::readable(data, "mtu", "MTU probe map", "mtu") {
        Ok(d) => d,
        Err(f) => return f.into_iter().collect(),
    };
    [&mtu.up, &mtu.down]
        .into_iter()
        .flatten()
        .map(direction_figure)
        .collect()
}

/// How one probed size fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Delivered,
    TooBig,
    Lost,
}

fn fate(d: &MtuDirection, size: u32, received: u32) -> Fate {
    if received > 0 {
        Fate::Delivered
    } else if d.too_big_mtu().is_some_and(|m| size > m) {
        Fate::TooBig
    } else {
        Fate::Lost
    }
}

fn direction_figure(d: &MtuDirection) -> Figure {
    let id = format!("mtu-{}", d.direction);
    let title = format!("MTU probe map {}", d.arrow());
    let probes: Vec<_> = d.probes.iter().filter(|p| p.sent > 0).collect();
    if probes.is_empty() {
        return Figure::missing(id, title, "no probe of this direction was sent");
    }
    let mut svg = String::new();
    if let Err(e) = draw(&mut svg, d) {
        return Figure::missing(id, title, draw_error(e));
    }
    let fates: Vec<Fate> = probes.iter().map(|p| fate(d, p.size, p.received)).collect();
    let mut legend = Vec::new();
    if fates.contains(&Fate::Delivered) {
        legend.push(Series::new("arrived (share of probes)", GOOD, Mark::Dot));
    }
    if fates.contains(&Fate::Lost) {
        legend.push(Series::new("lost, no ICMP too-big", BAD, Mark::Cross));
    }
    if fates.contains(&Fate::TooBig) {
        legend.push(Series::new(
            "lost, ICMP too-big received",
            WARN,
            Mark::Triangle,
        ));
    }
    if path_mtu(d).is_some() {
        legend.push(Series::new("measured path MTU", MEASURE, Mark::Line));
    }
    if !d.ttl_scan.is_empty() {
        let replies: Vec<&Option<HopReply>> =
            d.ttl_scan.iter().flat_map(|r| [&r.small, &r.big]).collect();
        let kind = |k: &str| {
            replies
                .iter()
                .any(|r| r.as_ref().is_some_and(|r| r.kind == k))
        };
        if kind("time-exceeded") {
            legend.push(Series::new(
                "TTL scan: a router answered (time exceeded)",
                GOOD,
                Mark::Dot,
            ));
        }
        if kind("unreachable") {
            legend.push(Series::new(
                "TTL scan: the far end answered",
                FAR_END,
                Mark::Dot,
            ));
        }
        if kind("too-big") {
            legend.push(Series::new("TTL scan: ICMP too-big", WARN, Mark::Triangle));
        }
        let known = ["time-exceeded", "unreachable", "too-big"];
        if replies.iter().any(|r| {
            r.as_ref()
                .is_some_and(|r| !known.contains(&r.kind.as_str()))
        }) {
            legend.push(Series::new("TTL scan: other ICMP", NEUTRAL, Mark::Dot));
        }
        if replies.iter().any(|r| r.is_none()) {
            legend.push(Series::new(
                "TTL scan: no ICMP reply (the probe arrived, or vanished)",
                BAD,
                Mark::Cross,
            ));
        }
        if drop_hop(d).is_some() {
            legend.push(Series::new("where the MTU drops", RULE, Mark::Line));
        }
    }
    Figure {
        id,
        title,
        body: Body::Svg { svg, legend },
        caption: caption(d),
    }
}

fn path_mtu(d: &MtuDirection) -> Option<u32> {
    d.outcome.as_ref().and_then(|o| o.mtu)
}

/// The search stopped at the probe limit, not at the path: the MTU is a lower bound.
fn at_least(d: &MtuDirection) -> bool {
    d.outcome
        .as_ref()
        .is_some_and(|o| o.cap.as_deref() == Some("probe-limit"))
}

fn drop_hop(d: &MtuDirection) -> Option<u32> {
    d.location.as_ref().and_then(|l| l.hop)
}

fn caption(d: &MtuDirection) -> String {
    let mut s = String::from("Sizes are whole IP datagrams sent with DF.");
    if let Some(o) = &d.outcome {
        let what = match o.kind.as_str() {
            "clean" => "every size the sender can emit arrived".to_string(),
            "signalled" => format!(
                "bigger sizes were refused with ICMP too-big (next-hop MTU {} B{})",
                o.ptb_mtu.unwrap_or(0),
                o.ptb_from
                    .as_ref()
                    .map(|f| format!(" from {f}"))
                    .unwrap_or_default()
            ),
            "black-hole" => format!(
                "sizes from {} B vanish and no ICMP too-big came back: a PMTUD black hole",
                o.smallest_lost.unwrap_or(0)
            ),
            "bad-suggestion" => "a router suggested an MTU that itself does not pass".to_string(),
            "nothing-arrived" => "not even the smallest probe arrived".to_string(),
            other => other.to_string(),
        };
        match o.mtu {
            Some(m) if at_least(d) => s.push_str(&format!(
                " Path MTU at least {m} B (the probe limit): {what}."
            )),
            Some(m) => s.push_str(&format!(" Path MTU {m} B: {what}.")),
            None => s.push_str(&format!(" {what}.")),
        }
    }
    if let Some(l) = &d.location {
        if let Some(h) = l.hop {
            s.push_str(&format!(
                " The MTU drops on the link after hop {h} counted from the sender{}.",
                l.addr
                    .as_ref()
                    .map(|a| format!(" ({a})"))
                    .unwrap_or_default()
            ));
        }
    }
    s
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(svg: &mut String, d: &MtuDirection) -> DrawResult {
    let scan = !d.ttl_scan.is_empty();
    let height = if scan { 470 } else { 300 };
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (map_area, scan_area) = root.split_vertically(300);
    probe_map(&map_area, d)?;
    if scan {
        ttl_scan(&scan_area, d)?;
    }
    root.present()?;
    Ok(())
}

fn probe_map(area: &DrawingArea<SVGBackend, Shift>, d: &MtuDirection) -> DrawResult {
    let sizes = d
        .probes
        .iter()
        .filter(|p| p.sent > 0)
        .map(|p| p.size as f64);
    let min = sizes.clone().fold(f64::INFINITY, f64::min);
    let max = sizes
        .fold(0.0, f64::max)
        .max(d.max_probed.unwrap_or(0) as f64);
    let pad = ((max - min) * 0.05).max(8.0);
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .margin_right(20)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((min - pad)..(max + pad), -8f64..112f64)?;
    chart
        .configure_mesh()
        .x_desc("probe size: IP datagram (B)")
        .y_desc("probes that arrived (%)")
        .x_labels(12)
        .y_labels(6)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .light_line_style(WHITE)
        .draw()?;
    if let Some(m) = path_mtu(d) {
        let m = m as f64;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(m, -8.0), (m, 112.0)],
            MEASURE.stroke_width(2),
        )))?;
        let (x, y) = in_area(area, chart.backend_coord(&(m, 108.0)));
        area.draw(&Text::new(
            format!("path MTU {}{m:.0} B", if at_least(d) { "≥ " } else { "" }),
            (x - 4, y),
            TextStyle::from((FONT, 12))
                .color(&MEASURE)
                .pos(text_anchor::Pos::new(
                    text_anchor::HPos::Right,
                    text_anchor::VPos::Top,
                )),
        ))?;
    }
    for p in d.probes.iter().filter(|p| p.sent > 0) {
        let x = p.size as f64;
        match fate(d, p.size, p.received) {
            Fate::Delivered => {
                let share = 100.0 * p.received.min(p.sent) as f64 / p.sent as f64;
                chart.draw_series(std::iter::once(Circle::new((x, share), 5, GOOD.filled())))?;
            }
            Fate::Lost => {
                chart.draw_series(std::iter::once(Cross::new(
                    (x, 0.0),
                    5,
                    BAD.stroke_width(2),
                )))?;
            }
            Fate::TooBig => {
                chart.draw_series(std::iter::once(TriangleMarker::new(
                    (x, 0.0),
                    6,
                    WARN.filled(),
                )))?;
            }
        }
    }
    Ok(())
}

/// Two rows (a probe that fits, a probe just above the MTU) by TTL: who answered.
fn ttl_scan(area: &DrawingArea<SVGBackend, Shift>, d: &MtuDirection) -> DrawResult {
    let max_ttl = d.ttl_scan.iter().map(|r| r.ttl).max().unwrap_or(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .margin_right(20)
        .x_label_area_size(40)
        .y_label_area_size(150)
        .build_cartesian_2d(0.5f64..(max_ttl + 0.5), 0f64..2f64)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("TTL: hops from the sender")
        .x_labels(max_ttl as usize)
        .y_labels(0)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()?;
    let row_style = TextStyle::from((FONT, 13)).pos(text_anchor::Pos::new(
        text_anchor::HPos::Right,
        text_anchor::VPos::Center,
    ));
    for (y, label) in [(1.5, "probe that fits"), (0.5, "probe above the MTU")] {
        let (x, py) = in_area(area, chart.backend_coord(&(0.5, y)));
        area.draw(&Text::new(label, (x - 8, py), row_style.clone()))?;
    }
    if let Some(h) = drop_hop(d) {
        let x = h as f64 + 0.5;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, 2.0)],
            RULE.stroke_width(2),
        )))?;
    }
    let addr_style = TextStyle::from((FONT, 10)).pos(text_anchor::Pos::new(
        text_anchor::HPos::Center,
        text_anchor::VPos::Bottom,
    ));
    for row in &d.ttl_scan {
        let x = row.ttl as f64;
        for (y, reply) in [(1.5, &row.small), (0.5, &row.big)] {
            match reply.as_ref().map(|r| r.kind.as_str()) {
                Some("time-exceeded") => {
                    chart.draw_series(std::iter::once(Circle::new((x, y), 6, GOOD.filled())))?
                }
                Some("unreachable") => {
                    chart.draw_series(std::iter::once(Circle::new((x, y), 6, FAR_END.filled())))?
                }
                Some("too-big") => chart.draw_series(std::iter::once(TriangleMarker::new(
                    (x, y),
                    7,
                    WARN.filled(),
                )))?,
                Some(_) => {
                    chart.draw_series(std::iter::once(Circle::new((x, y), 6, NEUTRAL.filled())))?
                }
                None => chart.draw_series(std::iter::once(Cross::new(
                    (x, y),
                    6,
                    BAD.stroke_width(2),
                )))?,
            };
            if let Some(from) = reply.as_ref().and_then(|r| r.from.as_ref()) {
                let (px, py) = in_area(area, chart.backend_coord(&(x, y)));
                area.draw(&Text::new(from.clone(), (px, py - 9), addr_style.clone()))?;
            }
        }
    }
    Ok(())
}
