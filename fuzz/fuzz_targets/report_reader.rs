//! `pathdoc report`'s reader on any text: a report JSON (or an HTML page embedding one) through
//! the same steps `pathdoc report` takes — find the embedded JSON, check the schema, deserialise
//! the typed report — then everything that renders it: the text of every finding (the Display
//! impls of statuses, quantities, directions and hosts the terminal output is made of), the
//! HTML page with its plots (the `pathdoc-html` views read `data` forgivingly), and the page's
//! embedded report read back. Seeds: `fuzz/report-seeds/` (real reports from the test fixtures).
#![no_main]

use std::fmt::Write;

use libfuzzer_sys::fuzz_target;
use pathdoc_core::report::SCHEMA_VERSION;
use pathdoc_core::Report;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let json = pathdoc_html::embedded_json(text).unwrap_or(text);
    let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else {
        return;
    };
    if value.get("schema").and_then(|s| s.as_str()) != Some(SCHEMA_VERSION) {
        return;
    }
    let Ok(report) = serde_json::from_value::<Report>(value) else {
        return;
    };
    let _ = report.exit_code();
    let mut out = String::new();
    for f in &report.findings {
        let _ = write!(out, "[{}] {}: {}", f.status, f.check, f.title);
        if let Some(d) = f.direction {
            let _ = write!(out, " {d}");
        }
        for e in &f.evidence {
            let _ = write!(out, "{}: {}", e.name, e.value);
        }
        for r in &f.remedies {
            if let Some(h) = &r.host {
                let _ = write!(out, "{h}: ");
            }
        }
    }
    // Every check's plots (the binary's registry lists them; a fuzz target cannot reach it).
    use pathdoc_html::figures;
    let plots: Vec<_> = [
        figures::idle,
        figures::mtu,
        figures::throughput,
        figures::ssh,
        figures::analyze,
    ]
    .iter()
    .flat_map(|f| f(&report))
    .collect();
    let page = pathdoc_html::render(&report, &plots);
    let embedded = pathdoc_html::embedded_json(&page).expect("a rendered page embeds its report");
    let back: Report =
        serde_json::from_str(embedded).expect("the embedded report reads back as a report");
    assert_eq!(back.findings.len(), report.findings.len());
});
