//! Self-contained HTML reports of a pathdoc [`Report`]: the verdicts with evidence and fixes
//! (each fix names its host), the path, and plots of the raw measurements as inline SVG — a
//! file a user can mail to their ISP, which opens anywhere without network access.
//!
//! Knows nothing of the terminal or the network. Reading `report.data` goes through the
//! forgiving views in [`view`]: a plot whose data is missing says so instead of failing.

pub mod page;
pub mod path;
pub mod plot;
pub mod view;

use pathdoc_core::{Direction, Quantity, Report};

pub use plot::{Body, Figure, Series};

/// Every plot the report's data allows, in page order: the idle ladder and the MTU maps (the
/// faults an ISP can fix) before the longer throughput figures, then captures' time-sequence
/// graphs.
pub fn figures(report: &Report) -> Vec<Figure> {
    let mut figures: Vec<Figure> = plot::idle::figure(&view::section(report, "idle"))
        .into_iter()
        .collect();
    figures.extend(plot::mtu::figures(&view::section(report, "mtu")));
    figures.extend(plot::throughput::figures(&view::section(
        report,
        "throughput",
    )));
    figures.extend(plot::ssh::figures(
        &view::section(report, "ssh"),
        [
            ssh_window_ceiling(report, Direction::ClientToServer),
            ssh_window_ceiling(report, Direction::ServerToClient),
        ],
    ));
    figures.extend(plot::stevens::figures(&view::section(report, "analyze")));
    figures
}

/// The window / RTT ceiling the SSH verdict of one direction computed (its evidence), so the
/// chart draws the same figure the text states.
fn ssh_window_ceiling(report: &Report, direction: Direction) -> Option<f64> {
    report
        .findings
        .iter()
        .filter(|f| f.check == "ssh" && f.direction == Some(direction))
        .flat_map(|f| f.evidence.iter())
        .find(|e| e.name == "window / RTT ceiling")
        .and_then(|e| match e.value {
            Quantity::Rate(r) | Quantity::Goodput(r) => Some(r),
            _ => None,
        })
}

/// The whole HTML document for `report`.
pub fn render(report: &Report) -> String {
    page::page(
        report,
        &figures(report),
        &path::PathInfo::from_report(report),
    )
}

/// The JSON report embedded in a page written by [`render`], if `html` is one.
pub fn embedded_json(html: &str) -> Option<&str> {
    const OPEN: &str = "<script type=\"application/json\" id=\"pathdoc-report\">";
    let start = html.find(OPEN)? + OPEN.len();
    let len = html[start..].find("</script>")?;
    Some(&html[start..start + len])
}
