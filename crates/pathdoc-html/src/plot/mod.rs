//! Plots as inline SVG, drawn with plotters' SVG backend: text is emitted as SVG `<text>`, so
//! labels stay crisp at any zoom and the file needs no fonts or scripts.
//!
//! Every plot is a [`Figure`]: an SVG plus an HTML legend naming each series with the exact
//! colour it is drawn in (the browser test checks each legend colour is really drawn), or a
//! note saying why the data for it is missing.

pub mod idle;
pub mod mtu;
pub mod ssh;
pub mod stevens;
pub mod throughput;

use plotters::style::RGBColor;

use crate::view::Section;

/// A drawn plot, or the reason there is none.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Stable id, e.g. `throughput-upload`, `idle-ladder`, `mtu-server-to-client`.
    pub id: String,
    pub title: String,
    pub body: Body,
    /// One line under the plot: what it shows and how to read it.
    pub caption: String,
}

#[derive(Debug, Clone)]
pub enum Body {
    Svg { svg: String, legend: Vec<Series> },
    Missing(String),
}

/// One legend entry: a series' name, colour and mark.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub color: RGBColor,
    pub mark: Mark,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Line,
    Dot,
    Cross,
    Triangle,
    Band,
    Bar,
}

impl Figure {
    pub fn missing(
        id: impl Into<String>,
        title: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Figure {
            id: id.into(),
            title: title.into(),
            body: Body::Missing(why.into()),
            caption: String::new(),
        }
    }
}

/// A check's data for its plots: `Ok` when it was read; otherwise what the page shows instead —
/// nothing when the report has no such data, one "could not be read" figure when it is there but
/// unreadable.
pub fn readable<'a, T>(
    data: &'a Section<T>,
    id: &str,
    title: &str,
    what: &str,
) -> Result<&'a T, Option<Figure>> {
    match data {
        Section::Absent => Err(None),
        Section::Unreadable(why) => Err(Some(Figure::missing(
            id,
            title,
            format!("the report's {what} data could not be read: {why}"),
        ))),
        Section::Read(t) => Ok(t),
    }
}

impl Series {
    pub fn new(label: impl Into<String>, color: RGBColor, mark: Mark) -> Self {
        Series {
            label: label.into(),
            color,
            mark,
        }
    }
}

/// Series colours (Tableau 10 minus grey): distinct from each other, from the black text and
/// from the light grey grid.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];
pub const GOOD: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
pub const BAD: RGBColor = RGBColor(0xd6, 0x27, 0x28);
pub const WARN: RGBColor = RGBColor(0xff, 0x7f, 0x0e);
pub const NEUTRAL: RGBColor = RGBColor(0x94, 0x67, 0xbd);
pub const MEASURE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
/// Requirement lines (RFC floors).
pub const RULE: RGBColor = RGBColor(0x8b, 0x00, 0x00);

pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Font of every plot label; the page's CSS uses the same system stack.
pub const FONT: &str = "sans-serif";

/// An SI prefix and divisor for an axis whose largest value is `max` (bit/s axes).
pub fn si_axis(max: f64) -> (f64, &'static str) {
    const PREFIXES: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    PREFIXES
        .into_iter()
        .find(|(f, _)| max >= *f)
        .unwrap_or((1.0, ""))
}

/// An IEC prefix and divisor for a byte axis whose largest value is `max`.
pub fn iec_axis(max: f64) -> (f64, &'static str) {
    const PREFIXES: [(f64, &str); 3] = [
        (1024.0 * 1024.0 * 1024.0, "GiB"),
        (1024.0 * 1024.0, "MiB"),
        (1024.0, "KiB"),
    ];
    PREFIXES
        .into_iter()
        .find(|(f, _)| max >= 2.0 * *f)
        .unwrap_or((1.0, "B"))
}

/// Tick labels for an axis running from 0 to `max`: enough decimals to tell the ticks apart,
/// trailing zeros dropped.
pub fn ticks_for(max: f64) -> impl Fn(f64) -> String {
    let decimals = if max.is_finite() && max > 0.0 {
        (2 - max.log10().floor() as i32).clamp(0, 6) as usize
    } else {
        0
    };
    move |v: f64| {
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// Absolute backend pixels (what `ChartContext::backend_coord` gives) to coordinates inside
/// `area`, for text drawn beside a chart.
pub fn in_area<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    (x, y): (i32, i32),
) -> (i32, i32) {
    let (bx, by) = area.get_base_pixel();
    (x - bx, y - by)
}

/// An upper axis bound with headroom that is never zero (a flat-zero series still gets an axis).
pub fn headroom(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * 1.12
    } else {
        1.0
    }
}

/// plotters reports drawing errors as a generic type; the plots never fail on a String backend
/// except through a bug, which the figure then says.
pub fn draw_error(e: impl std::fmt::Display) -> String {
    format!("the plot could not be drawn: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_pick_si_for_rates_and_iec_for_bytes() {
        assert_eq!(si_axis(9.4e7), (1e6, "M"));
        assert_eq!(si_axis(3.0e9), (1e9, "G"));
        assert_eq!(si_axis(500.0), (1.0, ""));
        assert_eq!(iec_axis(1.5 * 1024.0 * 1024.0), (1024.0, "KiB"));
        assert_eq!(iec_axis(5.6 * 1024.0 * 1024.0).1, "MiB");
        assert_eq!(iec_axis(64.0 * 1024.0 * 1024.0).1, "MiB");
        assert_eq!(iec_axis(1500.0), (1.0, "B"));
        assert_eq!(iec_axis(3000.0), (1024.0, "KiB"));
        assert_eq!(headroom(0.0), 1.0);
        assert_eq!(ticks_for(0.0045)(0.003), "0.003");
        assert_eq!(ticks_for(1400.0)(1200.0), "1200");
        assert_eq!(ticks_for(2.5)(0.5), "0.5");
    }
}
