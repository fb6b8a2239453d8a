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

use pathdoc_core::{AddressFamily, Report};

pub use plot::{Body, Figure, Series};

/// Each check's plots, one function per check. The binary's check registry names them (its
/// `Check::figures`); this crate keeps no list of checks.
pub mod figures {
    use pathdoc_core::check::evidence::WINDOW_RTT_CEILING;
    use pathdoc_core::{CheckName, Direction, Quantity, Report};

    use crate::{plot, view, Figure};

    /// The idle check's probe ladder.
    pub fn idle(report: &Report) -> Vec<Figure> {
        plot::idle::figure(&view::section(report, CheckName::Idle.data_key()))
            .into_iter()
            .collect()
    }

    /// The MTU probe maps, one per direction.
    pub fn mtu(report: &Report) -> Vec<Figure> {
        plot::mtu::figures(&view::section(report, CheckName::Mtu.data_key()))
    }

    pub fn throughput(report: &Report) -> Vec<Figure> {
        plot::throughput::figures(&view::section(report, CheckName::Throughput.data_key()))
    }

    /// `pathdoc ssh`'s cipher chart, with the window / RTT ceiling its verdicts computed.
    pub fn ssh(report: &Report) -> Vec<Figure> {
        plot::ssh::figures(
            &view::section(report, CheckName::Ssh.data_key()),
            [
                ssh_window_ceiling(report, Direction::ClientToServer),
                ssh_window_ceiling(report, Direction::ServerToClient),
            ],
        )
    }

    /// A capture's time-sequence graphs.
    pub fn analyze(report: &Report) -> Vec<Figure> {
        plot::stevens::figures(&view::section(report, CheckName::Analyze.data_key()))
    }

    /// The window / RTT ceiling the SSH verdict of one direction computed (its evidence), so the
    /// chart draws the same figure the text states.
    fn ssh_window_ceiling(report: &Report, direction: Direction) -> Option<f64> {
        report
            .findings
            .iter()
            .filter(|f| f.check == CheckName::Ssh && f.direction == Some(direction))
            .flat_map(|f| f.evidence.iter())
            .find(|e| e.name == WINDOW_RTT_CEILING)
            .and_then(|e| match e.value {
                Quantity::Rate(r) | Quantity::Goodput(r) => Some(r),
                _ => None,
            })
    }
}

/// `draw`'s figures of the report — in a run over both address families, drawn once per family
/// from that family's data (ids `ipv6-…`, titles "IPv6: …"), the families in the order they ran.
pub fn per_family(report: &Report, draw: impl Fn(&Report) -> Vec<Figure>) -> Vec<Figure> {
    if !report.both_families() {
        return draw(report);
    }
    let mut out = Vec::new();
    for run in &report.families {
        for mut f in draw(&report.for_family(run.family)) {
            f.id = format!("{}-{}", run.family.key(), f.id);
            f.title = format!("{}: {}", run.family.label(), f.title);
            out.push(f);
        }
    }
    out
}

/// The path table(s): one per address family in a run over both, each from its family's data.
pub fn paths(report: &Report) -> Vec<(Option<AddressFamily>, path::PathInfo)> {
    if !report.both_families() {
        return vec![(None, path::PathInfo::from_report(report))];
    }
    report
        .families
        .iter()
        .map(|run| {
            let mut info = path::PathInfo::from_report(&report.for_family(run.family));
            if let Some(a) = &run.address {
                info.server = a.clone();
            }
            (Some(run.family), info)
        })
        .collect()
}

/// The whole HTML document for `report`, with these plots. The binary's check registry draws
/// them: each check's function in [`figures`], in its page order, through [`per_family`] so a
/// run over both address families gets each family's plots.
pub fn render(report: &Report, figures: &[Figure]) -> String {
    page::page(report, figures, &paths(report))
}

/// The JSON report embedded in a page written by [`render`], if `html` is one.
pub fn embedded_json(html: &str) -> Option<&str> {
    const OPEN: &str = "<script type=\"application/json\" id=\"pathdoc-report\">";
    let start = html.find(OPEN)? + OPEN.len();
    let len = html[start..].find("</script>")?;
    Some(&html[start..start + len])
}
