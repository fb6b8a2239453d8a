//! A tampered report whose numbers lie far outside any sensible range must still render: every
//! point is either on the plot's canvas or left out. (The report_reader fuzz target found a
//! throughput interval that starts 36 000 920 571 s in but ends at 3 s: its midpoint lay ten
//! orders of magnitude beyond the time axis, and plotters' pixel arithmetic overflowed — a panic
//! with overflow checks (the fuzz build, and `cargo test` without --release, where this test
//! fails on the old code); without them plotters wrapped the coordinate and clipped the line.)

use pathdoc_core::Report;

fn fixture() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/lab-report.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every number in the attribute values of the page's SVG elements.
fn svg_attribute_numbers(page: &str) -> Vec<f64> {
    let mut numbers = Vec::new();
    for svg in page.split("<svg").skip(1) {
        let svg = svg.split("</svg>").next().unwrap_or("");
        for value in svg.split("=\"").skip(1) {
            let value = value.split('"').next().unwrap_or("");
            numbers.extend(
                value
                    .split(|c: char| !(c.is_ascii_digit() || c == '-' || c == '.'))
                    .filter_map(|t| t.parse::<f64>().ok()),
            );
        }
    }
    numbers
}

#[test]
fn throughput_points_far_outside_the_axes_are_left_out() {
    let mut doc = fixture();
    let intervals = &mut doc["data"]["throughput"]["runs"][0]["directions"][0]["intervals"];
    intervals[1]["start_s"] = serde_json::json!(36_000_920_571.0_f64);
    intervals[2]["start_s"] = serde_json::json!(-1e30_f64);
    intervals[2]["retransmits"] = serde_json::json!(5);
    intervals[3]["goodput_bps"] = serde_json::json!(-1e300_f64);
    // Too long for a Duration: panicked in the caption's formatting.
    doc["data"]["throughput"]["runs"][0]["directions"][0]["duration_s"] =
        serde_json::json!(1e20_f64);
    let report: Report = serde_json::from_value(doc).unwrap();
    let page = pathdoc_html::render(&report, &pathdoc_html::figures::throughput(&report));
    assert!(page.contains("<svg"), "the plots are still drawn");
    let far: Vec<f64> = svg_attribute_numbers(&page)
        .into_iter()
        .filter(|n| n.abs() > 100_000.0)
        .collect();
    assert!(far.is_empty(), "SVG coordinates off the canvas: {far:?}");
}
