//! The HTML page: verdicts with evidence and fixes, the path, the plots and the embedded JSON.
//! Everything is inline (CSS, SVG, data); a Content-Security-Policy forbids the page any fetch.

use std::fmt::Write;

use pathdoc_core::{AddressFamily, Command, Finding, Report, Status};

use crate::path::PathInfo;
use crate::plot::{hex, Body, Figure, Mark, Series};

const CSS: &str = include_str!("style.css");
/// Evidence values up to this many characters never wrap (numbers with units); longer ones may.
const SHORT_VALUE_CHARS: usize = 28;

/// Escape text for HTML element content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page.
/// `paths`: one per address family in a run over both (each with its family), else one.
pub fn page(
    report: &Report,
    figures: &[Figure],
    paths: &[(Option<AddressFamily>, PathInfo)],
) -> String {
    let mut s = String::with_capacity(64 * 1024);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"generator\" content=\"pathdoc {}\">\n<title>pathdoc {}: {} — {}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n",
        esc(&report.pathdoc_version),
        esc(report.command.as_str()),
        esc(&report.target),
        overall_line(report).0.to_uppercase()
    );
    // Overview first (verdicts, path, pictures), then each finding's evidence and fixes.
    header(&mut s, report);
    verdicts(&mut s, report);
    for (family, path) in paths {
        path_section(&mut s, *family, path);
    }
    plots(&mut s, report, figures);
    details(&mut s, report);
    footer(&mut s, report);
    s.push_str("</body>\n</html>\n");
    s
}

fn status_class(status: Status) -> &'static str {
    match status {
        Status::Pass => "pass",
        Status::Info => "info",
        Status::Inconclusive => "inconclusive",
        Status::Warn => "warn",
        Status::Fail => "fail",
    }
}

fn badge(status: Status) -> String {
    format!(
        "<span class=\"badge {}\">{}</span>",
        status_class(status),
        status.label()
    )
}

/// The overall verdict in words, as the text output's last line says it.
pub fn overall_words(status: Status) -> &'static str {
    match status {
        Status::Pass | Status::Info => "no problem found",
        Status::Warn => "works, but below recommendation",
        Status::Fail => "problem found",
        Status::Inconclusive => "not decided: see the reasons below",
    }
}

/// The overall line: like the text output's last line, interrupted and could-not-run runs say so
/// instead of a status.
fn overall_line(report: &Report) -> (&'static str, String, &'static str) {
    if report.interrupted {
        return (
            "interrupted",
            "<span class=\"badge inconclusive\">INTERRUPTED</span>".into(),
            "partial results: the run was stopped before it finished",
        );
    }
    if report.could_not_run() {
        return (
            "could-not-run",
            "<span class=\"badge inconclusive\">COULD NOT RUN</span>".into(),
            "no check could run; the findings say why",
        );
    }
    let overall = report.overall();
    (
        status_class(overall),
        badge(overall),
        overall_words(overall),
    )
}

fn header(s: &mut String, report: &Report) {
    let (class, badge_html, words) = overall_line(report);
    let _ = write!(
        s,
        "<header>\n<h1>pathdoc {} <span class=\"target\">{}</span></h1>\n\
         <p class=\"overall\" id=\"overall\" data-status=\"{}\">{} {}</p>\n\
         <p class=\"meta\">pathdoc {} · schema {} · {} finding{}</p>\n",
        esc(report.command.as_str()),
        esc(&report.target),
        class,
        badge_html,
        words,
        esc(&report.pathdoc_version),
        esc(&report.schema),
        report.findings.len(),
        if report.findings.len() == 1 { "" } else { "s" }
    );
    provenance(s, report);
    s.push_str("</header>\n");
}

/// When, where and how the report was made: a definition list under the title.
fn provenance(s: &mut String, report: &Report) {
    let Some(p) = &report.provenance else {
        return;
    };
    let took = if p.duration_s.is_finite() && p.duration_s >= 0.0 {
        pathdoc_core::units::format_duration(std::time::Duration::from_secs_f64(p.duration_s))
    } else {
        format!("{} s", p.duration_s)
    };
    let _ = write!(
        s,
        "<dl class=\"provenance\" id=\"provenance\">\n\
         <dt>started</dt><dd><time datetime=\"{started}\">{started}</time> (ran {})</dd>\n\
         <dt>client</dt><dd>{} — {}</dd>\n\
         <dt>pathdoc</dt><dd>{} (commit {})</dd>\n\
         <dt>command</dt><dd><code>{}</code></dd>\n</dl>\n",
        esc(&took),
        esc(&p.hostname),
        esc(&p.os),
        esc(&p.pathdoc_version),
        esc(&p.commit),
        esc(&p.command_line_text()),
        started = esc(&p.started),
    );
}

fn verdicts(s: &mut String, report: &Report) {
    s.push_str("<section id=\"verdicts\">\n<h2>Verdicts</h2>\n");
    if report.findings.is_empty() {
        s.push_str("<p>No findings: no check produced a verdict.</p>\n</section>\n");
        return;
    }
    // A run over both families: which one each verdict is about.
    let both = report.both_families();
    s.push_str(&format!(
        "<table class=\"summary\">\n<thead><tr><th>status</th>{}<th>check</th><th>finding</th>\
         <th>direction</th><th>hop</th></tr></thead>\n<tbody>\n",
        if both { "<th>family</th>" } else { "" }
    ));
    for (i, f) in report.findings.iter().enumerate() {
        let family = match f.family {
            Some(x) if both => format!("<td class=\"family\">{}</td>", x.label()),
            _ if both => "<td class=\"family\">—</td>".to_string(),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td>{family}<td>{}</td><td><a href=\"#finding-{i}\">{}</a></td><td>{}</td><td>{}</td></tr>",
            badge(f.status),
            esc(&f.check),
            esc(&f.title),
            f.direction.map(|d| d.arrow()).unwrap_or("—"),
            f.hop.map(|h| h.to_string()).unwrap_or_else(|| "—".into()),
        );
    }
    s.push_str("</tbody>\n</table>\n</section>\n");
}

fn details(s: &mut String, report: &Report) {
    if report.findings.is_empty() {
        return;
    }
    s.push_str("<section id=\"details\">\n<h2>Findings in detail: evidence and fixes</h2>\n");
    for (i, f) in report.findings.iter().enumerate() {
        finding(s, i, f);
    }
    s.push_str("</section>\n");
}

fn finding(s: &mut String, i: usize, f: &Finding) {
    let _ = write!(
        s,
        "<article class=\"finding {}\" id=\"finding-{i}\" data-check=\"{}\" data-id=\"{}\" data-status=\"{}\"{}>\n\
         <h3>{} <span class=\"check\">{}{}:</span> <span class=\"title\">{}</span></h3>\n",
        status_class(f.status),
        esc(&f.check),
        esc(&f.id),
        status_class(f.status),
        f.family
            .map(|x| format!(" data-family=\"{}\"", x.key()))
            .unwrap_or_default(),
        badge(f.status),
        esc(&f.check),
        f.family.map(|x| format!(" ({})", x.label())).unwrap_or_default(),
        esc(&f.title)
    );
    if !f.summary.is_empty() {
        let _ = writeln!(s, "<p class=\"summary\">{}</p>", esc(&f.summary));
    }
    if let Some(req) = &f.requirement {
        let _ = writeln!(
            s,
            "<p class=\"requirement\"><strong>Requirement:</strong> {}</p>",
            esc(req)
        );
    }
    if !f.evidence.is_empty() {
        s.push_str("<table class=\"evidence\">\n<thead><tr><th>measured</th><th>value</th><th>how</th></tr></thead>\n<tbody>\n");
        for e in &f.evidence {
            let value = e.value.to_string();
            // Numbers stay on one line; a long text value (an address list, a cipher name) wraps
            // instead of pushing the table past the page's right edge.
            let class = if value.chars().count() <= SHORT_VALUE_CHARS {
                "value"
            } else {
                "value long"
            };
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td class=\"{class}\">{}</td><td>{}</td></tr>",
                esc(&e.name),
                esc(&value),
                esc(e.detail.as_deref().unwrap_or(""))
            );
        }
        s.push_str("</tbody>\n</table>\n");
    }
    if !f.remedies.is_empty() {
        s.push_str("<div class=\"fixes\">\n<h4>Fix</h4>\n<ol>\n");
        for r in &f.remedies {
            s.push_str("<li>");
            if let Some(h) = &r.host {
                let _ = write!(
                    s,
                    "<strong class=\"host\">{}</strong>: ",
                    esc(&h.to_string())
                );
            }
            s.push_str(&esc(&r.description));
            if let Some(c) = &r.command {
                let _ = write!(s, "\n<pre><code>{}</code></pre>", esc(c));
            }
            s.push_str("</li>\n");
        }
        s.push_str("</ol>\n</div>\n");
    }
    s.push_str("</article>\n");
}

/// An end's network interface, as the MTU check found it (the facts seed 003's admin had to ask
/// for by hand: driver, offloads, virtual machine).
fn nic_note(nic: Option<&str>) -> String {
    nic.map(|n| format!("network interface {}", esc(n)))
        .unwrap_or_default()
}

/// The client's address as the server saw it. A public address there is not necessarily this
/// computer's: behind a NAT it is the NAT's, so the cell says so.
fn client_address_cell(addr: &str) -> String {
    let ip = addr
        .parse::<std::net::SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| addr.parse::<std::net::IpAddr>());
    let own = match ip {
        Ok(std::net::IpAddr::V4(v4)) => v4.is_private() || v4.is_loopback() || v4.is_link_local(),
        Ok(std::net::IpAddr::V6(v6)) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
        Err(_) => false,
    };
    let note = if own {
        "as the server saw it"
    } else {
        "as the server saw it: a NAT's public address if this computer is behind one"
    };
    format!("{} <span class=\"note\">({note})</span>", esc(addr))
}

/// The far end's address cell: what the report's target is, labelled when it is not an
/// address (an ssh destination or alias, the capture files of `pathdoc analyze`).
fn server_address_cell(path: &PathInfo) -> String {
    let target = path.server.as_str();
    if path.command == Command::Analyze {
        return format!(
            "— <span class=\"note\">(from the capture {}; each connection's ends are in its findings)</span>",
            esc(target)
        );
    }
    let host = target.rsplit_once('@').map_or(target, |(_, h)| h);
    let is_address = host.parse::<std::net::SocketAddr>().is_ok()
        || host.parse::<std::net::IpAddr>().is_ok()
        || host
            .rsplit_once(':')
            .is_some_and(|(h, _)| h.parse::<std::net::IpAddr>().is_ok());
    if is_address {
        esc(target)
    } else if path.command == Command::Ssh {
        format!(
            "{} <span class=\"note\">(ssh destination as given; ssh_config may map it to another host)</span>",
            esc(target)
        )
    } else {
        format!(
            "{} <span class=\"note\">(name as given)</span>",
            esc(target)
        )
    }
}

fn path_section(s: &mut String, family: Option<AddressFamily>, path: &PathInfo) {
    match family {
        Some(f) => {
            let _ = writeln!(
                s,
                "<section id=\"path-{}\" class=\"path-family\">\n<h2>The path over {}</h2>",
                f.key(),
                f.label()
            );
        }
        None => s.push_str("<section id=\"path\">\n<h2>The path</h2>\n"),
    }
    s.push_str(
        "<table class=\"path\">\n<thead><tr><th>hop</th><th>address</th><th>what it looks like</th>\
         <th>what the checks saw there</th></tr></thead>\n<tbody>\n",
    );
    let _ = writeln!(
        s,
        "<tr><td>client</td><td>{}</td><td>this computer</td><td>{}</td></tr>",
        path.client_public
            .as_deref()
            .map(client_address_cell)
            .unwrap_or_else(|| "—".into()),
        nic_note(path.client_nic.as_deref())
    );
    for h in &path.hops {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            h.hop,
            if h.addrs.is_empty() {
                "no answer".to_string()
            } else {
                h.addrs
                    .iter()
                    .map(|a| esc(a))
                    .collect::<Vec<_>>()
                    .join("<br>")
            },
            esc(h.kind().unwrap_or("unknown")),
            h.notes
                .iter()
                .map(|n| esc(n))
                .collect::<Vec<_>>()
                .join("<br>")
        );
    }
    let _ = writeln!(
        s,
        "<tr><td>server</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        server_address_cell(path),
        esc(path.server_kind),
        nic_note(path.server_nic.as_deref())
    );
    s.push_str("</tbody>\n</table>\n");
    if path.hops.is_empty() {
        s.push_str(
            "<p class=\"note\">No hop was discovered in this run (the MTU and idle checks trace the routers).</p>\n",
        );
    }
    s.push_str("</section>\n");
}

fn plots(s: &mut String, report: &Report, figures: &[Figure]) {
    s.push_str("<section id=\"plots\">\n<h2>Measurements</h2>\n");
    if figures.is_empty() {
        s.push_str(&format!(
            "<p class=\"note\" id=\"no-plots\">{}</p>\n",
            esc(no_plots_note(report))
        ));
    }
    for f in figures {
        figure(s, f);
    }
    s.push_str("</section>\n");
}

/// Why the page has no plot, and how to get one.
fn no_plots_note(report: &Report) -> &'static str {
    if report.command == pathdoc_core::Command::Analyze {
        "No time-sequence graph: graphs are drawn for the connections the report lists, and \
         without --all it lists only those with findings. For a graph of every connection (up to \
         8 per capture) run: pathdoc analyze CAPTURE --all --report FILE.html"
    } else {
        "This report holds no raw measurements to plot."
    }
}

fn figure(s: &mut String, f: &Figure) {
    match &f.body {
        Body::Missing(why) => {
            let _ = write!(
                s,
                "<figure class=\"plot missing\" id=\"plot-{id}\" data-plot=\"{id}\" data-series=\"0\">\n\
                 <h3>{}</h3>\n<p class=\"missing\">No plot: {}</p>\n</figure>\n",
                esc(&f.title),
                esc(why),
                id = esc(&f.id),
            );
        }
        Body::Svg { svg, legend } => {
            let _ = write!(
                s,
                "<figure class=\"plot\" id=\"plot-{id}\" data-plot=\"{id}\" data-series=\"{}\">\n<h3>{}</h3>\n{}\n<ul class=\"legend\">\n",
                legend.len(),
                esc(&f.title),
                svg.replacen("<svg ", "<svg class=\"chart\" role=\"img\" ", 1),
                id = esc(&f.id),
            );
            for series in legend {
                legend_entry(s, series);
            }
            s.push_str("</ul>\n");
            if !f.caption.is_empty() {
                let _ = writeln!(s, "<figcaption>{}</figcaption>", esc(&f.caption));
            }
            s.push_str("</figure>\n");
        }
    }
}

fn legend_entry(s: &mut String, series: &Series) {
    let c = hex(series.color);
    let swatch = match series.mark {
        Mark::Line => format!(
            "<line x1=\"1\" y1=\"7\" x2=\"23\" y2=\"7\" stroke=\"{c}\" stroke-width=\"2\"/>"
        ),
        Mark::Dot => format!("<circle cx=\"12\" cy=\"7\" r=\"5\" fill=\"{c}\"/>"),
        Mark::Cross => {
            format!("<path d=\"M8 3L16 11M16 3L8 11\" stroke=\"{c}\" stroke-width=\"2\"/>")
        }
        Mark::Triangle => format!("<path d=\"M12 1L18 12H6Z\" fill=\"{c}\"/>"),
        Mark::Band | Mark::Bar => {
            format!("<rect x=\"3\" y=\"2\" width=\"18\" height=\"10\" fill=\"{c}\"/>")
        }
    };
    let _ = writeln!(
        s,
        "<li data-color=\"{c}\"><svg class=\"swatch\" width=\"24\" height=\"14\" viewBox=\"0 0 24 14\">{swatch}</svg>{}</li>",
        esc(&series.label)
    );
}

fn footer(s: &mut String, report: &Report) {
    let json = serde_json::to_string(report).unwrap_or_else(|_| "{}".into());
    // Inside <script> the HTML parser still reacts to "</script" and "<!--": escape every
    // markup character as a JSON \u escape (same string once parsed).
    let json = json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let _ = write!(
        s,
        "<footer>\n<p>Made by pathdoc {}. Rates are bits per second with SI prefixes \
         (1 Mbit/s = 10<sup>6</sup> bit/s), goodput is TCP payload; sizes are bytes with IEC prefixes \
         (1 MiB = 2<sup>20</sup> B). The complete JSON report (schema {}) is embedded in this file: \
         <code>pathdoc report THIS.html</code> prints it as text.</p>\n</footer>\n\
         <script type=\"application/json\" id=\"pathdoc-report\">{json}</script>\n",
        esc(&report.pathdoc_version),
        esc(&report.schema),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_report_without_plots_says_how_to_get_them() {
        let mut s = String::new();
        plots(
            &mut s,
            &Report::new(pathdoc_core::Command::Analyze, "x.pcap"),
            &[],
        );
        assert!(
            s.contains("pathdoc analyze CAPTURE --all --report FILE.html"),
            "{s}"
        );
        let mut s = String::new();
        plots(&mut s, &Report::new(pathdoc_core::Command::Check, "x"), &[]);
        assert!(s.contains("no raw measurements"), "{s}");
    }

    /// Issue 18: the path table put the pcap file name in the server's address column, an ssh
    /// alias there unlabelled, and a NAT's public address as "this computer".
    #[test]
    fn path_table_labels_aliases_capture_files_and_nat_addresses() {
        let table = |r: &Report| {
            let mut s = String::new();
            path_section(&mut s, None, &PathInfo::from_report(r));
            s
        };
        let s = table(&Report::new(pathdoc_core::Command::Analyze, "x.pcap"));
        assert!(
            s.contains("<td>— <span class=\"note\">(from the capture x.pcap;"),
            "{s}"
        );
        let s = table(&Report::new(pathdoc_core::Command::Ssh, "root@nas:2222"));
        assert!(
            s.contains("root@nas:2222 <span class=\"note\">(ssh destination as given;"),
            "{s}"
        );
        let s = table(&Report::new(
            pathdoc_core::Command::Check,
            "203.0.113.10:7224",
        ));
        assert!(s.contains("<td>203.0.113.10:7224</td>"), "{s}");

        let mut r = Report::new(pathdoc_core::Command::Check, "203.0.113.10:7224");
        r.data.insert(
            "idle".into(),
            serde_json::json!({"public_addr": "198.51.100.7:4000"}),
        );
        assert!(table(&r).contains(
            "198.51.100.7:4000 <span class=\"note\">(as the server saw it: a NAT's public address"
        ));
        r.data.insert(
            "idle".into(),
            serde_json::json!({"public_addr": "192.168.1.100:4000"}),
        );
        assert!(table(&r)
            .contains("192.168.1.100:4000 <span class=\"note\">(as the server saw it)</span>"));
    }

    #[test]
    fn header_says_when_where_and_how() {
        let mut r = Report::new(pathdoc_core::Command::Check, "nas:7224");
        let mut s = String::new();
        header(&mut s, &r);
        assert!(!s.contains("provenance"), "{s}");
        r.provenance = Some(pathdoc_core::Provenance {
            started: "2026-11-26T15:54:05+01:00".into(),
            duration_s: 7810.0,
            pathdoc_version: "0.1.0".into(),
            commit: "abc123".into(),
            hostname: "laptop<1>".into(),
            os: "Linux 6.1.0 x86_64".into(),
            command_line: vec![
                "pathdoc".into(),
                "check".into(),
                "--ssh".into(),
                "nas".into(),
            ],
        });
        let mut s = String::new();
        header(&mut s, &r);
        assert!(
            s.contains("<time datetime=\"2026-11-26T15:54:05+01:00\">"),
            "{s}"
        );
        assert!(s.contains("(ran 2 h 10 min 10 s)"), "{s}");
        assert!(s.contains("laptop&lt;1&gt; — Linux 6.1.0 x86_64"), "{s}");
        assert!(s.contains("0.1.0 (commit abc123)"), "{s}");
        assert!(s.contains("<code>pathdoc check --ssh nas</code>"), "{s}");
        assert!(s.ends_with("</dl>\n</header>\n"), "{s}");
    }

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn long_text_evidence_may_wrap_and_numbers_do_not() {
        use pathdoc_core::{Evidence, Quantity};
        let f = Finding::new("mtu", "x", Status::Info, "t")
            .evidence(Evidence::new("rate", Quantity::Goodput(4.75e8)))
            .evidence(Evidence::new(
                "addresses",
                Quantity::Text("203.0.113.10, 2001:db8::10, 198.51.100.77, 192.0.2.1".into()),
            ));
        let mut s = String::new();
        finding(&mut s, 0, &f);
        assert_eq!(s.matches("class=\"value\"").count(), 1, "{s}");
        assert_eq!(s.matches("class=\"value long\"").count(), 1, "{s}");
        assert!(CSS.contains("td.value.long { white-space: normal; overflow-wrap: anywhere; }"));
    }
}
