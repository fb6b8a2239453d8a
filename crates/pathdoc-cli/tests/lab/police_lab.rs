//! End-to-end tests of the throughput check on messy paths through the namespace lab: a
//! token-bucket policer (nftables `limit … drop`), and the lossy, jittery and clean paths on which
//! the policer verdict must not fire, and a bloated uplink for the latency-under-load grade. `pathdoc server` runs in the lab's server, `pathdoc check
//! --throughput` in its client; the JSON report is checked. Tests are short (5 s — the default —
//! and 3 s tests through the same code path users run) and run one at a time.

use crate::support;

use std::time::Duration;

use pathdoc_lab::Topology;
use serde_json::Value;
use support::{findings, ids, run_json, ServerLab};

const STEM: &str = "pdt";

/// `pathdoc check <server> --throughput --throughput-time T --throughput-cc CC --json`.
fn check(l: &ServerLab, time: &str, cc: &str) -> Value {
    let addr = l.server.addr();
    let args = [
        "check",
        addr.as_str(),
        "--throughput",
        "--throughput-time",
        time,
        "--throughput-cc",
        cc,
        "--json",
    ];
    let (code, report, _) = run_json(&l.lab, "client", &args, Duration::from_secs(45));
    assert!(code == 0 || code == 1, "exit {code}: {:?}", ids(&report));
    report
}

fn with_id<'a>(report: &'a Value, id: &str) -> Vec<&'a Value> {
    findings(report)
        .into_iter()
        .filter(|f| f["id"] == id)
        .collect()
}

/// The policer's 20 Mbit/s is metered on IP bytes; the finding's IP-layer rate is its estimate.
const POLICED_IP_BPS: f64 = 20e6;

/// Runs per congestion control on the policed line (each runs both directions).
const POLICED_RUNS: u32 = 5;

/// The path (home NAT, 40 ms RTT, 20 Mbit/s policer both ways), CUBIC and BBR senders:
/// `policer-limited` both ways with the policed rate within 10 %, and never a "find the lossy
/// link" remedy. Five runs per congestion control at the default test length (5 s): the lab's
/// bucket holds a second at the rate (nftables), and CUBIC banks credit in its recovery that it
/// spends seconds later, so a 4 s test's three steady intervals read up to 21 % low (3 of 94
/// directions beyond 10 %, measured), 5 s tests within 3.8 % (40 of 40, two CPU hogs or not).
#[test]
fn policed_line_is_policer_limited_with_cubic_and_bbr() {
    let _serial = support::serial();
    let l = ServerLab::up_with(
        STEM,
        "police",
        &Topology::scenario("policed-line").unwrap(),
        &["--max-sessions-per-ip", "64"],
    );
    let mut figures = Vec::new();
    let mut ranges = 0;
    for cc in ["cubic", "bbr"] {
        for run in 1..=POLICED_RUNS {
            let report = check(&l, "5s", cc);
            let policed = with_id(&report, "policer-limited");
            assert_eq!(
                policed.len(),
                2,
                "{cc} run {run}: {:?}\n{:#}",
                ids(&report),
                report["data"]["throughput"]
            );
            for f in &policed {
                let ip = f["evidence"][0]["value"]["value"].as_f64().unwrap();
                figures.push(format!("{cc} run {run} {}: {}", f["direction"], f["title"]));
                // Where the drops do not bracket the steady state (CUBIC recovering below the rate
                // after a heavy drop, or the test ending seconds after the last loss: ~1 in 10
                // CUBIC directions) the rate is a range, which must hold the truth.
                match (bound(f, "lower"), bound(f, "upper")) {
                    (Some(lower), Some(upper)) => {
                        ranges += 1;
                        assert!(
                            lower < POLICED_IP_BPS * 1.03 && POLICED_IP_BPS < upper * 1.03,
                            "{cc} run {run}: policed {lower}–{upper} misses {POLICED_IP_BPS}: {f:#}"
                        );
                    }
                    _ => assert!(
                        (ip / POLICED_IP_BPS - 1.0).abs() < 0.10,
                        "{cc} run {run}: policed rate {ip} vs {POLICED_IP_BPS}: {f:#}"
                    ),
                }
                assert_eq!(f["status"], "warn", "{f:#}");
                let cmds = f["remedies"].to_string();
                assert!(cmds.contains("fq maxrate"), "{f:#}");
            }
            assert!(
                with_id(&report, "loss-limited").is_empty()
                    && with_id(&report, "shared-bottleneck").is_empty(),
                "{cc} run {run}: {:?}",
                ids(&report)
            );
            let remedies: Vec<String> = findings(&report)
                .iter()
                .map(|f| f["remedies"].to_string())
                .collect();
            assert!(
                !remedies.iter().any(|r| r.contains("lossy link")),
                "{cc} run {run}: a lossy-link remedy on a policed path: {:?}",
                ids(&report)
            );
        }
    }
    eprintln!("{}", figures.join("\n"));
    // A range is the exception: most runs measure the rate to 10 %.
    assert!(
        ranges <= 4,
        "{ranges} of 20 policed rates were ranges:\n{}",
        figures.join("\n")
    );
}

/// The `"lower"` or `"upper"` bound a `policer-limited` finding gives when its rate is a range.
fn bound(f: &Value, which: &str) -> Option<f64> {
    let name = format!("{which} bound");
    f["evidence"]
        .as_array()?
        .iter()
        .find(|e| e["name"].as_str().is_some_and(|n| n.contains(&name)))
        .and_then(|e| e["value"]["value"].as_f64())
}

/// The paths that must keep their verdicts: bursty loss towards the server (the duplex-mismatch
/// scenario; CUBIC's upload stays `loss-limited`), random loss towards the server (CUBIC,
/// `loss-limited`), the 70 ms / 50 Mbit/s jitter path and the clean path (CUBIC and BBR): no
/// `policer-limited` or `shared-bottleneck` anywhere, and latency under load at most INFO. The
/// issue asks ten runs of the jitter and clean paths: BBR on the jitter path and both senders on
/// the clean one run ten times here (CUBIC on the jitter path runs ten times in
/// `speed_lab::shaped_70ms_cubic_path_has_no_false_alarm_in_ten_runs`, which allows no WARN).
#[test]
fn lossy_jittery_and_clean_paths_get_no_policer_verdict() {
    let _serial = support::serial();
    let paths = [
        ("pldup", Topology::scenario("slow-lossy-duplex").unwrap(), true),
        (
            "plrnd",
            Topology::from_toml(
                "description = \"20 ms, 100 Mbit/s, 0.5 % loss towards the server\"\n[[hop]]\n[[link]]\n[[link]]\nrate = \"100 Mbit/s\"\ndelay_ms = 10.0\n[link.up]\nloss_percent = 0.5\n",
            )
            .unwrap(),
            true,
        ),
        (
            "pljit",
            Topology::from_toml(
                "description = \"70 ms RTT, 50 Mbit/s tbf, jitter\"\n[[hop]]\n[[link]]\n[[link]]\nrate = \"50 Mbit/s\"\ndelay_ms = 35.0\njitter_ms = 2.0\n",
            )
            .unwrap(),
            false,
        ),
        ("plcln", Topology::scenario("clean").unwrap(), false),
    ];
    for (name, topo, lossy_upload) in paths {
        let l = ServerLab::up_with(STEM, name, &topo, &["--max-sessions-per-ip", "64"]);
        for cc in ["cubic", "bbr"] {
            if lossy_upload && cc == "bbr" && name == "plrnd" {
                continue; // the duplex path covers BBR on one-way loss
            }
            let runs = match (name, cc) {
                ("pljit", "bbr") | ("plcln", _) => 10,
                _ => 1,
            };
            for run in 1..=runs {
                no_new_verdict(&l, name, cc, run, lossy_upload);
            }
        }
    }
}

/// One run of [`lossy_jittery_and_clean_paths_get_no_policer_verdict`].
fn no_new_verdict(l: &ServerLab, name: &str, cc: &str, run: u32, lossy_upload: bool) {
    let report = check(l, "3s", cc);
    assert!(
        with_id(&report, "policer-limited").is_empty(),
        "{name} {cc} run {run}: false policer verdict: {:?}\n{}",
        ids(&report),
        report["findings"]
    );
    // Nobody else is on these links: a rate below the capacity is loss, not sharing.
    assert!(
        with_id(&report, "shared-bottleneck").is_empty(),
        "{name} {cc} run {run}: false shared-bottleneck verdict: {:?}",
        ids(&report)
    );
    for f in with_id(&report, "latency-under-load") {
        assert_eq!(f["status"], "info", "{name} {cc}: {}", f["title"]);
    }
    assert_eq!(
        with_id(&report, "latency-under-load").len(),
        2,
        "{name} {cc}"
    );
    if lossy_upload && cc == "cubic" {
        // The upload's loss must be named. On the duplex path (4 % in bursts) that is
        // always loss-limited; at 0.5 % random loss a 3-s CUBIC upload sits near the
        // Mathis rate and was once judged link-limited, with the asymmetry WARN naming
        // the 0.8 % path loss of the upload instead (CI, 4 lab tests at once).
        let loss_limited = with_id(&report, "loss-limited")
            .into_iter()
            .any(|f| f["direction"] == "client-to-server");
        let asymmetry_names_loss = name == "plrnd"
            && with_id(&report, "throughput-asymmetry")
                .into_iter()
                .any(|f| {
                    f["summary"]
                        .as_str()
                        .is_some_and(|t| t.contains("loses") && t.contains("on the path"))
                });
        assert!(
            loss_limited || asymmetry_names_loss,
            "{name}: the upload's loss is not named: {:?}",
            ids(&report)
        );
    }
}

/// A bloated uplink (10 Mbit/s, 500 ms queue) and a 20 ms-queue downlink: a bulk upload raises
/// the RTT into grade C or worse (Warn, with SQM on the router); the download stays good.
#[test]
fn bloated_uplink_grades_upload_bad_and_download_good() {
    let _serial = support::serial();
    let l = ServerLab::up(
        STEM,
        "bloat",
        &Topology::scenario("bloated-uplink").unwrap(),
    );
    let report = check(&l, "4s", "cubic");
    let lat = |dir: &str| {
        with_id(&report, "latency-under-load")
            .into_iter()
            .find(|f| f["direction"] == dir)
            .unwrap_or_else(|| panic!("{dir}: {:?}", ids(&report)))
            .clone()
    };
    let (up, down) = (lat("client-to-server"), lat("server-to-client"));
    eprintln!("{}\n{}", up["title"], down["title"]);
    let title = up["title"].as_str().unwrap();
    assert_eq!(up["status"], "warn", "{up:#}");
    assert!(
        ["grade C", "grade D", "grade F"]
            .iter()
            .any(|g| title.contains(g)),
        "{title}"
    );
    assert!(
        up["remedies"].to_string().contains("cake bandwidth"),
        "{up:#}"
    );
    let title = down["title"].as_str().unwrap();
    assert_eq!(down["status"], "info", "{down:#}");
    assert!(
        ["grade A", "grade B"].iter().any(|g| title.contains(g)),
        "{title}"
    );
}
