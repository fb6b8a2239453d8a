//! Verdicts on real lab captures (tests/fixtures/lab): a policer told from a lossy link from
//! either end, CUBIC and BBR, upload and download; a bloated uplink's queue graded; bursty loss
//! on a duplex-mismatched link still loss, not a policer.

use std::path::PathBuf;

use pathdoc_analyze::analyzer::CaptureAnalysis;
use pathdoc_analyze::{Analyzer, Options};
use pathdoc_capture::source::open_input;
use pathdoc_capture::CaptureReader;
use pathdoc_core::{Finding, Quantity, Status};

fn analyse(name: &str) -> CaptureAnalysis {
    analyse_in_order(&[name])
}

/// The captures' packets one after the other through one analyzer, as a capture holding both
/// (they were recorded in this order, so time only runs forward).
fn analyse_in_order(names: &[&str]) -> CaptureAnalysis {
    let mut a = Analyzer::new(Options::default());
    for name in names {
        let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/fixtures/lab", name]
            .iter()
            .collect();
        let input = open_input(path.to_str().unwrap()).unwrap();
        let mut r = CaptureReader::new(input).unwrap();
        while let Some(p) = r.next_packet().unwrap() {
            a.process(&p);
        }
    }
    a.finish()
}

fn findings(a: &CaptureAnalysis) -> Vec<&Finding> {
    a.listed
        .iter()
        .flat_map(|l| &l.findings)
        .chain(&a.host_findings)
        .collect()
}

fn ids(a: &CaptureAnalysis) -> Vec<(String, Status)> {
    findings(a)
        .iter()
        .map(|f| (f.id.clone(), f.status))
        .collect()
}

fn value(f: &Finding, name_starts: &str) -> f64 {
    let e = f
        .evidence
        .iter()
        .find(|e| e.name.starts_with(name_starts))
        .unwrap_or_else(|| panic!("no {name_starts}: {f:#?}"));
    match e.value {
        Quantity::WireRate(v) | Quantity::Seconds(v) | Quantity::Goodput(v) => v,
        ref q => panic!("{q:?}"),
    }
}

#[test]
fn policed_transfers_are_policer_limited_from_either_end() {
    for name in [
        "policed-line-client.pcap.gz",
        "policed-bbr-server.pcap.gz",
        "policed-up-client.pcap.gz",
    ] {
        let a = analyse(name);
        let found = findings(&a);
        assert_eq!(
            ids(&a),
            [("policer-limited".to_string(), Status::Warn)],
            "{name}"
        );
        let f = found[0];
        let rate = value(f, "policed rate");
        assert!((rate / 20e6 - 1.0).abs() <= 0.1, "{name}: {rate}");
        // Downstream of the drops (the receiving client saw the holes) the payload that passed
        // between them is the bucket's rate exactly (19.97 Mbit/s; the median bin read 20.4);
        // upstream only acknowledgments tell, so the median bin.
        let basis = if name == "policed-line-client.pcap.gz" {
            assert!((rate / 20e6 - 1.0).abs() <= 0.015, "{name}: {rate}");
            "goodput between the drops"
        } else {
            "goodput from the first loss on"
        };
        assert!(
            f.evidence.iter().any(|e| e.name.starts_with(basis)),
            "{name}: {:?}",
            f.evidence
        );
        let fixes: Vec<&str> = f.remedies.iter().map(|r| r.description.as_str()).collect();
        assert!(fixes.iter().any(|r| r.contains("Pace")), "{fixes:?}");
        assert!(!fixes.iter().any(|r| r.contains("duplex")), "{fixes:?}");
    }
}

#[test]
fn a_bloated_uplink_is_graded_from_the_receiver() {
    let a = analyse("bloated-up-server.pcap.gz");
    assert_eq!(ids(&a), [("latency-under-load".to_string(), Status::Warn)]);
    let f = findings(&a)[0];
    // The 500 ms buffer fills at 10 Mbit/s: about 100 ms in the first 2.6 s.
    let increase = value(f, "increase");
    assert!((0.06..0.5).contains(&increase), "{increase}");
    assert!(
        f.title.contains("grade C") || f.title.contains("grade D"),
        "{}",
        f.title
    );
}

#[test]
fn bursty_link_loss_is_loss_not_a_policer() {
    let a = analyse("duplex-up-server.pcap.gz");
    assert_eq!(
        ids(&a),
        [("tcp-loss-one-direction".to_string(), Status::Fail)]
    );
}

/// A policed download and a clean upload between the same two hosts (both recorded on the
/// client): the host pair's "loss in one direction only — duplex mismatch or a bad link" must
/// not stand beside the policer that explains that loss.
#[test]
fn a_policed_direction_is_no_host_pair_loss_asymmetry() {
    let a = analyse_in_order(&["policed-line-client.pcap.gz", "bloated-up-client.pcap.gz"]);
    let ids = ids(&a);
    assert!(ids.iter().any(|(id, _)| id == "policer-limited"), "{ids:?}");
    assert!(
        !ids.iter()
            .any(|(id, _)| id == "loss-concentrated-one-direction"),
        "{ids:?}"
    );
}

/// CUBIC through a link that loses 4-packet bursts (every 120 packets, 20 ms RTT): dense bursts,
/// no queue, a flat rate — but the loss sets that rate (1.5× Mathis' bound at the segment loss,
/// a policer holds a sender ~10× above it): loss, not a policer.
#[test]
fn a_link_losing_bursts_is_loss_not_a_policer() {
    let a = analyse("burst4-up-client.pcap.gz");
    assert_eq!(
        ids(&a),
        [("tcp-loss-one-direction".to_string(), Status::Warn)]
    );
}
