//! Rendering a real lab report (tests/fixtures/lab-report.json: `pathdoc check` on the lab of
//! examples/report-lab.toml) and reports with missing or odd data. The browser-level checks
//! (console, network, pixels) are in crates/pathdoc-cli/tests/lab/report_html.rs.

use pathdoc_core::{Finding, Report, Status};
use pathdoc_html::{figures, Body, Figure};

/// Every check's plots, in the binary's page order (its check registry's; this crate has none),
/// once per address family in a run over both.
fn all_figures(report: &Report) -> Vec<Figure> {
    pathdoc_html::per_family(report, |r| {
        [
            figures::idle,
            figures::mtu,
            figures::throughput,
            figures::ssh,
            figures::analyze,
        ]
        .iter()
        .flat_map(|f| f(r))
        .collect()
    })
}

fn render(report: &Report) -> String {
    pathdoc_html::render(report, &all_figures(report))
}

fn lab_report() -> Report {
    serde_json::from_str(include_str!("../fixtures/lab-report.json")).expect("fixture")
}

#[test]
fn every_check_of_a_lab_run_gets_its_plots_with_text_labels() {
    let report = lab_report();
    let figs = all_figures(&report);
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
    let mut report = Report::new(pathdoc_core::Command::Check, "192.0.2.1:7224");
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
    let figs = all_figures(&report);
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
    let mut report = Report::new(pathdoc_core::Command::Check, "<img src=x onerror=alert(1)>");
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
    let html = render(&Report::new(pathdoc_core::Command::Speed, "192.0.2.1:7224"));
    assert!(html.contains("No findings") && html.contains("no raw measurements to plot"));
}

#[test]
fn captures_get_a_time_sequence_graph_with_retransmissions_dup_acks_and_zero_windows() {
    let mut report = Report::new(pathdoc_core::Command::Analyze, "capture.pcap");
    // A bulk sender: 40 segments of 1448 B, one lost (seq 14480) and retransmitted after three
    // duplicate ACKs, then the receiver's window closes for a while.
    let mut segments = Vec::new();
    let mut acks = Vec::new();
    for i in 0..40u32 {
        let t = f64::from(i) * 0.001;
        segments.push(serde_json::json!({"t": t, "seq": i * 1448, "len": 1448, "flags": []}));
        let ack = if (10..14).contains(&i) {
            10 * 1448
        } else {
            (i + 1) * 1448
        };
        let mut flags = vec![];
        if (11..14).contains(&i) {
            flags.push("duplicate_ack");
        }
        let win = if i == 30 { 0 } else { 65535 };
        if win == 0 {
            flags.push("zero_window");
        }
        acks.push(serde_json::json!({"t": t + 0.0005, "ack": ack, "win": win, "flags": flags}));
    }
    segments.push(serde_json::json!({"t": 0.0142, "seq": 14480, "len": 1448, "flags": ["fast_retransmission"]}));
    report.data.insert(
        "analyze".into(),
        serde_json::json!({"captures": [{"file": "client.pcap", "connections": [{
            "id": 3, "client": "192.168.1.100:40000", "server": "203.0.113.10:22",
            "time_sequence": [{"direction": "client-to-server", "segments": segments, "acks": acks}]
        }]}]}),
    );
    let figs = all_figures(&report);
    assert_eq!(figs.len(), 1);
    assert_eq!(figs[0].id, "stevens-1-3-client-to-server");
    let Body::Svg { svg, legend } = &figs[0].body else {
        panic!("{:?}", figs[0].body)
    };
    let labels: Vec<&str> = legend.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "data segment (first to last byte)",
            "retransmitted segment",
            "ACK (receiver)",
            "window edge (ACK + advertised window)",
            "duplicate ACK",
            "zero window"
        ]
    );
    for s in legend {
        let hex = format!("#{:02X}{:02X}{:02X}", s.color.0, s.color.1, s.color.2);
        assert!(svg.contains(&hex), "{} ({hex}) not drawn", s.label);
    }
    assert!(svg.contains("relative sequence number (KiB)"));
    assert!(svg.contains("time since the connection"));
}

#[test]
fn throughput_draws_each_stream_and_the_steady_state() {
    let mut report = Report::new(pathdoc_core::Command::Speed, "192.0.2.1:7224");
    let intervals: Vec<serde_json::Value> = (0..5)
        .map(|i| {
            let t = f64::from(i);
            serde_json::json!({
                "start_s": t, "end_s": t + 1.0, "goodput_bps": 90e6, "cwnd_bytes": 200_000,
                "rtt_us": 20_000, "retransmits": if i == 2 { 4 } else { 0 },
                "streams": [
                    {"stream": 0, "goodput_bps": 50e6, "cwnd_bytes": 110_000, "rtt_us": 21_000, "retransmits": 0},
                    {"stream": 1, "goodput_bps": 40e6, "cwnd_bytes": 90_000, "rtt_us": 19_000, "retransmits": 0}
                ]
            })
        })
        .collect();
    report.data.insert(
        "throughput".into(),
        serde_json::json!({"runs": [{"directions": [{
            "direction": "download", "streams": 2, "goodput_bps": 88e6, "duration_s": 5.0,
            "intervals": intervals,
            "phases": {"slow_start_end_s": 1.0, "steady": {"start_s": 1.0, "end_s": 5.0, "goodput_bps": 90e6}}
        }]}]}),
    );
    let figs = all_figures(&report);
    let Body::Svg { svg, legend } = &figs[0].body else {
        panic!("{:?}", figs[0].body)
    };
    let labels: Vec<&str> = legend.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "all 2 streams (sum)",
            "stream 1",
            "stream 2",
            "retransmitted segments",
            "steady state: what the verdicts judge (90.0 Mbit/s goodput)"
        ]
    );
    for s in legend {
        let hex = format!("#{:02X}{:02X}{:02X}", s.color.0, s.color.1, s.color.2);
        assert!(svg.contains(&hex), "{} ({hex}) not drawn", s.label);
    }
    assert!(
        !figs[0].caption.contains("Per-stream samples are not"),
        "{}",
        figs[0].caption
    );
}

#[test]
fn interrupted_and_could_not_run_runs_say_so() {
    let mut r = Report::new(pathdoc_core::Command::Check, "192.0.2.1:7224");
    r.findings
        .push(Finding::new("mtu", "path-mtu", Status::Pass, "fine"));
    r.interrupted = true;
    let html = render(&r);
    assert!(html.contains("data-status=\"interrupted\"") && html.contains("partial results"));
    let mut r = Report::new(pathdoc_core::Command::Check, "192.0.2.1:7224");
    r.findings.push(Finding::new(
        "mtu",
        pathdoc_core::report::CHECK_FAILED,
        Status::Inconclusive,
        "the mtu check could not run",
    ));
    assert!(render(&r).contains("data-status=\"could-not-run\""));
}

/// A run over both address families (`pathdoc check NAME` with A and AAAA records): each
/// family's plots from its own data, a path table per family and the family of every verdict.
#[test]
fn a_run_over_both_families_shows_each_family() {
    use pathdoc_core::{AddressFamily, FamilyRun};
    let one = lab_report();
    let mut both = one.clone();
    both.families = vec![
        FamilyRun {
            family: AddressFamily::Ipv6,
            address: Some("[2001:db8:3::2]:7224".into()),
        },
        FamilyRun {
            family: AddressFamily::Ipv4,
            address: Some("10.0.3.2:7224".into()),
        },
    ];
    both.data = serde_json::Map::new();
    both.findings.clear();
    for family in [AddressFamily::Ipv6, AddressFamily::Ipv4] {
        both.data.insert(
            family.key().into(),
            serde_json::Value::Object(one.data.clone()),
        );
        both.findings
            .extend(one.findings.iter().cloned().map(|f| f.family(family)));
    }
    let ids: Vec<String> = all_figures(&both).into_iter().map(|f| f.id).collect();
    assert_eq!(ids.len(), 2 * all_figures(&one).len(), "{ids:?}");
    assert_eq!(ids[0], "ipv6-idle-ladder");
    assert!(
        ids.contains(&"ipv4-mtu-server-to-client".to_string()),
        "{ids:?}"
    );
    let html = render(&both);
    assert!(html.contains("<h3>IPv6: "), "figure titles name the family");
    for section in ["id=\"path-ipv6\"", "id=\"path-ipv4\"", "<th>family</th>"] {
        assert!(html.contains(section), "{section}");
    }
    assert!(html.contains("[2001:db8:3::2]:7224"));
    assert!(html.contains("data-family=\"ipv4\""));
}
