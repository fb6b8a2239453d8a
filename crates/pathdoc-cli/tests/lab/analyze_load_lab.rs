//! End-to-end: `pathdoc analyze` on captures of the messy paths (issue 22): a token-bucket
//! policer told from a lossy link from either end of the connection, CUBIC and BBR, upload and
//! download; the queue a bulk upload builds in a bloated modem buffer graded, the download beside
//! it not; a full-rate download on a clean line healthy.

use crate::analyze_lab::{analyze_json, problems, start, with_id, Scratch};
use crate::support;

use std::path::PathBuf;

use pathdoc_lab::{traffic, Lab, Topology};
use serde_json::Value;
use support::{opts, Cleanup};

/// Lab prefix stem of this file.
const STEM: &str = "pdl";
/// The policed-line scenario's policer, bit/s at the IP layer.
const POLICED_BPS: f64 = 20e6;

fn up(test: &str, scenario: &str) -> (Cleanup, Lab) {
    let c = Cleanup::new(STEM, test);
    let lab = Lab::up(&Topology::scenario(scenario).unwrap(), &opts(STEM, test)).expect("lab up");
    (c, lab)
}

/// Captures at both ends while `transfers` run: (seconds, download?, congestion control).
fn record(lab: &Lab, dir: &Scratch, transfers: &[(u32, bool, &str)]) -> [PathBuf; 2] {
    let files = [dir.file("client.pcap"), dir.file("server.pcap")];
    let c = start(lab, "client", &files[0]);
    let s = start(lab, "server", &files[1]);
    for &(seconds, download, cc) in transfers {
        traffic::iperf3(lab, "client", "server", seconds, download, &["-C", cc]).unwrap();
    }
    c.stop().unwrap();
    s.stop().unwrap();
    files
}

fn number(f: &Value, evidence_name_starts: &str) -> f64 {
    f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["name"]
                .as_str()
                .unwrap()
                .starts_with(evidence_name_starts)
        })
        .and_then(|e| e["value"]["value"].as_f64())
        .unwrap_or_else(|| panic!("no evidence {evidence_name_starts}: {f:#}"))
}

#[test]
fn analyze_names_the_policer_from_either_end() {
    let _serial = support::serial();
    let (_c, lab) = up("pol", "policed-line");
    let dir = Scratch::new("pol");
    let transfers = [(3, true, "cubic"), (3, true, "bbr"), (3, false, "cubic")];
    let files = record(&lab, &dir, &transfers);
    lab.down().unwrap();
    for f in &files {
        let (code, report) = analyze_json(&[f]);
        assert_eq!(code, 1, "{report:#}");
        let policed = with_id(&report, "policer-limited");
        let directions: Vec<&str> = policed
            .iter()
            .map(|f| f["direction"].as_str().unwrap())
            .collect();
        assert_eq!(
            directions,
            ["server-to-client", "server-to-client", "client-to-server"],
            "{}: {:?}",
            f.display(),
            problems(&report)
        );
        for p in &policed {
            assert_eq!(p["status"], "warn");
            let rate = number(p, "policed rate");
            // Downstream of the drops (the client receiving a download saw the holes) the payload
            // that passed between them is the bucket's rate: 19.80–20.02 Mbit/s in 12 captures,
            // CPU hogs or not. Upstream only acknowledgments tell (a repair's cumulative ACK
            // credits earlier bytes to its bin): the median bin read 18.15–21.07 in 25 captures
            // by hand, and 17.9 and 17.3 in two CI runs (10.4 and 13.4 % low: a 3 s CUBIC download
            // on busy cores, its recovery below the rate weighing in).
            let downstream = p["evidence"]
                .to_string()
                .contains("goodput between the drops");
            let bound = if downstream { 0.03 } else { 0.15 };
            assert!(
                (rate / POLICED_BPS - 1.0).abs() <= bound,
                "{}: policed at {rate} bit/s, not within {bound} of 20 Mbit/s: {p:#}",
                f.display()
            );
            if f.ends_with("client.pcap") && p["direction"] == "server-to-client" {
                assert!(downstream, "{}: {p:#}", f.display());
            }
            let fixes = p["remedies"].to_string();
            assert!(fixes.contains("fq maxrate"), "{fixes}");
            assert!(
                !fixes.contains("duplex"),
                "a lossy-link remedy on a policer: {fixes}"
            );
        }
        // The policer's finding replaces the loss finding: nobody hunts for a bad cable.
        assert_eq!(
            with_id(&report, "tcp-loss-one-direction"),
            Vec::<&Value>::new(),
            "{}",
            f.display()
        );
    }
}

#[test]
fn analyze_grades_the_bloated_uplink_not_the_download() {
    let _serial = support::serial();
    let (_c, lab) = up("blo", "bloated-uplink");
    let dir = Scratch::new("blo");
    let files = record(&lab, &dir, &[(5, false, "cubic"), (3, true, "cubic")]);
    lab.down().unwrap();
    for f in &files {
        let (_, report) = analyze_json(&[f]);
        let graded = with_id(&report, "latency-under-load");
        assert_eq!(graded.len(), 1, "{}: {:?}", f.display(), problems(&report));
        let up = graded[0];
        assert_eq!(up["direction"], "client-to-server", "{up:#}");
        assert_eq!(up["status"], "warn", "{up:#}");
        // The 500 ms buffer fills at 10 Mbit/s: well past grade B within seconds.
        let increase = number(up, "increase");
        assert!(increase >= 0.1, "{increase} s: {up:#}");
        assert!(
            up["remedies"].to_string().contains("cake bandwidth"),
            "{up:#}"
        );
    }
}

#[test]
fn analyze_full_rate_clean_download_is_healthy() {
    let _serial = support::serial();
    let (_c, lab) = up("cln", "clean");
    let dir = Scratch::new("cln");
    // Unpaced CUBIC at the line's 500 Mbit/s: the flight sits at the BDP plus a short queue,
    // which is the path's limit, not the application's.
    let files = record(&lab, &dir, &[(2, true, "cubic")]);
    lab.down().unwrap();
    for f in &files {
        let (code, report) = analyze_json(&[f]);
        assert_eq!(problems(&report), Vec::<String>::new(), "{}", f.display());
        assert_eq!(code, 0, "{report:#}");
    }
}
