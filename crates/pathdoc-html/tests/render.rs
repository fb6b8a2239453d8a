//! Rendering a real lab report (tests/fixtures/lab-report.json: `pathdoc check` on the lab of
//! examples/report-lab.toml) and reports with missing or odd data. The browser-level checks
//! (console, network, pixels) are in crates/pathdoc-cli/tests/report_html.rs.

use pathdoc_core::{Finding, Report, Status};
use pathdoc_html::{figures, render, Body};

fn lab_report() -> Report {
    serde_json::from_str(include_str!("fixtures/lab-report.json")).expect("fixture")
}

#[test]
fn every_check_of_a_lab_run_gets_its_plots_with_text_labels() {
    let report = lab_report();
    let figs = figures(&report);
    let ids: Vec<&str> = figs.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "idle-ladder",
            "mtu-client-to-server",
            "mtu-server-to-client",
            "throughput-upload",
            "throughput-download"
        ]
    );
    for f in &figs {
        let Body::Svg { svg, legend } = &f.body else {
            panic!("{} is missing: {:?}", f.id, f.body);
        };
        assert!(svg.contains("<text"), "{}: labels are SVG text", f.id);
        assert!(!legend.is_empty(), "{}", f.id);
    }
    let html = render(&report);
    // Units on the axes.
    for unit in [
        "goodput (Mbit/s)",
        "cwnd (KiB)",
        "RTT (ms)",
        "probe size: IP datagram (B)",
        "idle time before the test (log scale)",
        "RFC 5382: 2 h 4 min",
    ] {
        assert!(html.contains(unit), "missing {unit:?}");
    }
    // Nothing to fetch: the only URL is the SVG namespace, the only script is the JSON data block.
    let urls = html.matches("http://").count() + html.matches("https://").count();
    assert_eq!(urls, html.matches("http://www.w3.org/2000/svg").count());
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("<script type=\"application/json\" id=\"pathdoc-report\">"));
    assert!(html.contains("default-src 'none'"));
    // Every finding and every remedy command is on the page.
    for f in &report.findings {
        assert!(
            html.contains(&pathdoc_html::page::esc(&f.title)),
            "{}",
            f.title
        );
        for r in &f.remedies {
            if let Some(c) = &r.command {
                assert!(html.contains(&pathdoc_html::page::esc(c)), "{c}");
            }
        }
    }
    assert_eq!(
        serde_json::from_str::<Report>(pathdoc_html::embedded_json(&html).unwrap()).unwrap(),
        report
    );
}

#[test]
fn missing_or_unreadable_data_is_said_not_fatal() {
    let mut report = Report::new("check", "192.0.2.1:7224");
    report.data.insert(
        "throughput".into(),
        serde_json::json!({"runs": [{"directions": [{"direction": "upload", "intervals": []}]}]}),
    );
    report
        .data
        .insert("idle".into(), serde_json::json!({"tests": "not a list"}));
    report.data.insert(
        "mtu".into(),
        serde_json::json!({"up": {"direction": "client-to-server", "probes": []}}),
    );
    let figs = figures(&report);
    let why: Vec<String> = figs
        .iter()
        .map(|f| match &f.body {
            Body::Missing(w) => format!("{}: {w}", f.id),
            Body::Svg { .. } => panic!("{} drew a plot without data", f.id),
        })
        .collect();
    assert!(
        why[0].starts_with("idle-ladder: the report's idle data could not be read"),
        "{why:?}"
    );
    assert!(
        why[1].starts_with("mtu-client-to-server: no probe"),
        "{why:?}"
    );
    assert!(
        why[2].starts_with("throughput-upload: no per-interval samples"),
        "{why:?}"
    );
    let html = render(&report);
    assert_eq!(html.matches("class=\"plot missing\"").count(), 3);
}

#[test]
fn hostile_text_is_escaped() {
    let mut report = Report::new("check", "<img src=x onerror=alert(1)>");
    report.findings.push(
        Finding::new(
            "mtu",
            "x\"><script>",
            Status::Fail,
            "</script><script>alert(1)</script>",
        )
        .summary("a & b < c"),
    );
    let html = render(&report);
    assert!(!html.contains("<img src=x"));
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the JSON data block"
    );
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)"));
    let back: Report = serde_json::from_str(pathdoc_html::embedded_json(&html).unwrap()).unwrap();
    assert_eq!(back, report);
}

#[test]
fn an_empty_report_still_renders() {
    let html = render(&Report::new("speed", "192.0.2.1:7224"));
    assert!(html.contains("No findings") && html.contains("no raw measurements to plot"));
}
