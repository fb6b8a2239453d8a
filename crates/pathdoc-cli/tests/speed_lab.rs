//! End-to-end tests of `pathdoc speed` / `pathdoc check --throughput` through the namespace lab:
//! `pathdoc server` in the lab's server namespace, the client in the client namespace, JSON
//! reports checked. Real kernel parts: tbf rate limits, the lab's delay line and loss, and real
//! iperf3 as the reference peer. Tests run one at a time (they share two cores) and each lab
//! has its own prefix and is removed on drop, also on panic.

mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use pathdoc_lab::Topology;
use serde_json::Value;
use support::{finding, findings, ids, parse_report, run, run_json, wait_listening, ServerLab};

/// Lab prefix stem of this file: labs are `pdt-sp<test>-` (test names start with `sp`).
const STEM: &str = "pdt";
static SERIAL: Mutex<()> = Mutex::new(());

/// `pathdoc speed <server> <extra> --json` from the client namespace; returns (exit code, report).
fn speed(l: &ServerLab, extra: &[&str], deadline: Duration) -> (i32, Value) {
    let addr = l.server.addr();
    let args = [&["speed", addr.as_str()], extra, &["--json"]].concat();
    let (code, report, _) = run_json(&l.lab, "client", &args, deadline);
    (code, report)
}

/// `pathdoc check <server> --throughput --throughput-time 3s <extra> --json` from the client
/// namespace, within 40 s; returns (exit code, report).
fn check_throughput(l: &ServerLab, extra: &[&str]) -> (i32, Value) {
    let addr = l.server.addr();
    let args = [
        &[
            "check",
            addr.as_str(),
            "--throughput",
            "--throughput-time",
            "3s",
        ],
        extra,
        &["--json"],
    ]
    .concat();
    let (code, report, _) = run_json(&l.lab, "client", &args, Duration::from_secs(40));
    (code, report)
}

fn directions(report: &Value) -> Vec<&Value> {
    report["data"]["throughput"]["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .flat_map(|r| r["directions"].as_array().unwrap().iter())
        .collect()
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn window_limited_download_names_the_window_bdp_and_sysctl() {
    let _serial = support::serial();
    let _g = lock();
    let l = ServerLab::up(
        STEM,
        "spwin",
        &Topology::scenario("window-limited").unwrap(),
    );
    let (code, report) = speed(&l, &["--reverse", "--time", "4s"], Duration::from_secs(40));
    assert_eq!(code, 1, "a fault must exit 1: {:?}", ids(&report));
    let f = finding(&report, "receive-window-limited");
    assert_eq!(f["status"], "fail");
    assert!(f["title"].as_str().unwrap().contains("client"), "{f:#}");
    let cmd = f["remedies"][0]["command"].as_str().unwrap();
    assert!(
        cmd.starts_with("sysctl -w net.ipv4.tcp_rmem=\"4096 131072 "),
        "{cmd}"
    );
    let names: Vec<&str> = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().any(|n| n.contains("bandwidth-delay product")),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .any(|n| n.contains("client net.ipv4.tcp_rmem max")),
        "{names:?}"
    );
    // 256 KiB max buffer at 100 ms: far below the 1 Gbit/s link.
    let d = directions(&report)[0];
    assert!(
        d["goodput_bps"].as_f64().unwrap() < 100e6,
        "{}",
        d["goodput_bps"]
    );
}

#[test]
fn lossy_long_fat_compare_cc_puts_bbr_well_ahead_of_cubic() {
    let _serial = support::serial();
    let _g = lock();
    let l = ServerLab::up(
        STEM,
        "spllf",
        &Topology::scenario("lossy-long-fat").unwrap(),
    );
    let (_, report) = speed(
        &l,
        &["--reverse", "--time", "4s", "--compare-cc"],
        Duration::from_secs(60),
    );
    let f = finding(&report, "congestion-control-comparison");
    let title = f["title"].as_str().unwrap();
    assert!(
        title.contains("bbr is") && title.contains("faster than cubic"),
        "{title}"
    );
    let runs = report["data"]["throughput"]["cc_comparison"][0]["runs"]
        .as_array()
        .unwrap();
    let rate = |cc: &str| {
        runs.iter().find(|r| r["congestion_control"] == cc).unwrap()["goodput_bps"]
            .as_f64()
            .unwrap()
    };
    assert!(
        rate("bbr") > 2.0 * rate("cubic"),
        "bbr {} vs cubic {}",
        rate("bbr"),
        rate("cubic")
    );
    // CUBIC's run is diagnosed as loss-limited with the Mathis estimate.
    let loss = findings(&report)
        .into_iter()
        .find(|f| f["id"] == "loss-limited" && f["title"].as_str().unwrap().starts_with("[cubic]"));
    assert!(loss.is_some(), "{:?}", ids(&report));
}

/// 40 Mbit/s tbf, no delay: goodput and wire estimate match the configured rate, and pathdoc
/// matches real iperf3 on the same link.
#[test]
fn tbf_link_rate_is_measured_within_five_percent_and_matches_iperf3() {
    let _serial = support::serial();
    let _g = lock();
    let topo = Topology::from_toml(
        "description = \"40 Mbit/s tbf\"\n[[hop]]\n[[link]]\n[[link]]\nrate = \"40 Mbit/s\"\n",
    )
    .unwrap();
    let l = ServerLab::up(STEM, "sptbf", &topo);
    let rate = 40e6;
    let (_, report) = speed(&l, &["--time", "5s"], Duration::from_secs(40));
    let d = directions(&report)[0];
    let goodput = d["goodput_bps"].as_f64().unwrap();
    let mss = d["sender"]["snd_mss"].as_f64().unwrap();
    let overhead = d["wire"]["overhead_bytes"].as_f64().unwrap();
    // tbf meters whole Ethernet frames (IP packet + 14-byte MAC header, no preamble/FCS).
    let frame = d["wire"]["ethernet_frame_bps"].as_f64().unwrap();
    let expected_goodput = rate * mss / (mss + overhead + 14.0);
    assert!(
        (goodput / expected_goodput - 1.0).abs() < 0.05,
        "goodput {goodput} vs {expected_goodput} (MSS {mss})"
    );
    assert!(
        (frame / rate - 1.0).abs() < 0.05,
        "Ethernet frame rate {frame} vs tbf {rate}"
    );
    assert!(
        !findings(&report).iter().any(|f| f["status"] == "fail"),
        "{:?}",
        ids(&report)
    );

    // Real iperf3 on the same link.
    let mut srv = l.lab.command("server", "iperf3");
    srv.args(["-s", "-p", "5201"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _iperf_server = l.lab.spawn("server", srv).expect("iperf3 -s");
    wait_listening(
        &l.lab,
        "client",
        SocketAddr::new(l.lab.addr("server"), 5201),
    );
    let mut cli = l.lab.command("client", "iperf3");
    cli.args([
        "-c",
        &l.lab.addr("server").to_string(),
        "-p",
        "5201",
        "-t",
        "5",
        "-J",
    ]);
    let (code, out, err) = run(cli, Duration::from_secs(30));
    let iperf = parse_report(code, &out, &err);
    let iperf_rate = iperf["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap();
    assert!(
        (goodput / iperf_rate - 1.0).abs() < 0.05,
        "pathdoc {goodput} vs iperf3 {iperf_rate}"
    );
}

#[test]
fn slow_lossy_duplex_reports_the_asymmetry_and_its_direction() {
    let _serial = support::serial();
    let _g = lock();
    let l = ServerLab::up(
        STEM,
        "spdup",
        &Topology::scenario("slow-lossy-duplex").unwrap(),
    );
    // The seed's hosts ran a loss-based TCP; with it the rate itself collapses one way.
    let (code, report) = check_throughput(&l, &["--throughput-cc", "cubic"]);
    let summary: Vec<String> = directions(&report)
        .iter()
        .map(|d| {
            format!(
                "{} {} retrans {}",
                d["direction"], d["goodput_bps"], d["sender"]["bytes_retrans"]
            )
        })
        .collect();
    assert_eq!(code, 1, "{:?} {summary:?}", ids(&report));
    let f = finding(&report, "throughput-asymmetry");
    assert!(
        f["title"].as_str().unwrap().starts_with("upload is "),
        "{f:#}"
    );
    let d = directions(&report);
    let up = d.iter().find(|x| x["direction"] == "upload").unwrap();
    let down = d.iter().find(|x| x["direction"] == "download").unwrap();
    assert!(up["goodput_bps"].as_f64().unwrap() < 0.5 * down["goodput_bps"].as_f64().unwrap());
    // With BBR (this machine's default) the rates stay close, but the one-way loss is named.
    let (_, report) = check_throughput(&l, &["--throughput-cc", "bbr"]);
    let ids = ids(&report);
    let named = findings(&report).into_iter().any(|f| {
        (f["id"] == "loss-asymmetry" || f["id"] == "throughput-asymmetry")
            && f["title"].as_str().unwrap().starts_with("upload")
    });
    assert!(named, "{ids:?}");
}

#[test]
fn clean_path_gives_no_unsupported_limit_verdict() {
    let _serial = support::serial();
    let _g = lock();
    let l = ServerLab::up(STEM, "spcln", &Topology::scenario("clean").unwrap());
    let (code, report) = check_throughput(&l, &[]);
    let bad: Vec<String> = findings(&report)
        .into_iter()
        .filter(|f| matches!(f["status"].as_str(), Some("warn" | "fail")))
        .filter(|f| f["id"] != "cpu-limited") // a true statement about this 2-core machine, not the path
        .map(|f| format!("{}: {}", f["id"], f["title"]))
        .collect();
    assert!(bad.is_empty(), "false alarms on a clean path: {bad:?}");
    assert!(code == 0 || code == 1, "exit {code}");
    assert_eq!(directions(&report).len(), 2);
}
