//! End-to-end tests of `pathdoc check --idle` through the lab: real conntrack NAT, real
//! `pathdoc server` in the server namespace, time scaled to seconds via the same flags users run.

use crate::support;

use std::time::Duration;

use pathdoc_lab::Topology;
use serde_json::Value;
use support::{finding, run_json, Ip, ServerLab};

/// Lab prefix stem of this file: labs are `pdi-<test>-`.
const STEM: &str = "pdi";

/// Run the idle check from the client namespace; returns (exit code, report, wall seconds).
fn check(l: &ServerLab, args: &[&str]) -> (i32, Value, f64) {
    let server = l.server.addr();
    let args = [&["--json", "check", server.as_str(), "--idle"], args].concat();
    run_json(&l.lab, "client", &args, Duration::from_secs(120))
}

fn ladder<'a>(report: &'a Value, mode: &str) -> &'a Value {
    report["data"]["idle"]["ladders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["mode"] == mode)
        .map(|l| &l["outcome"])
        .unwrap_or_else(|| panic!("no {mode} ladder"))
}

fn nat(strict: bool, established: u32) -> Topology {
    Topology::from_toml(&format!(
        "[[hop]]\nkind = \"nat\"\nstrict = {strict}\nconntrack = {{ tcp_established = {established} }}\n"
    ))
    .unwrap()
}

/// The families the strict-NAT test runs over: for IPv6 the same hop is an RFC 6092 stateful
/// firewall (no NAT) with the same conntrack timeout and strictness.
const STRICT_FAMILIES: [Ip; 2] = [Ip::V4, Ip::V6];

#[test]
fn strict_nat_timeout_is_found_within_the_resolution_and_early() {
    let _shared = crate::support::shared();
    for ip in STRICT_FAMILIES {
        strict_timeout_in(ip);
    }
}

fn strict_timeout_in(ip: Ip) {
    let l = ServerLab::up_ip(STEM, "strict", &nat(true, 5), ip);
    // UDP finishes its own ladders (up to the horizon here), so the TCP early stop is timed
    // without it.
    let (code, report, wall) = check(
        &l,
        &[
            "--idle-max",
            "30s",
            "--idle-resolution",
            "1s",
            "--idle-no-udp",
        ],
    );
    let f = finding(&report, "tcp-idle-timeout");
    assert_eq!(f["status"], "fail", "{f:#}");
    assert_eq!(code, 1);
    let s = ladder(&report, "server-initiated");
    let (lower, upper) = (
        s["lower_s"].as_f64().unwrap(),
        s["upper_s"].as_f64().unwrap(),
    );
    assert!(
        lower < 5.0 && upper >= 5.0,
        "bracket ({lower}, {upper}] must contain the 5 s timeout"
    );
    assert!(
        upper - lower <= 1.05,
        "bracket ({lower}, {upper}] wider than the 1 s resolution"
    );
    assert_eq!(report["data"]["idle"]["early_stop"], true);
    assert!(
        wall < 15.0,
        "took {wall:.1} s for a 5 s timeout with a 30 s horizon"
    );
    // Strict: client-initiated probes die too, and nothing was reset.
    let c = ladder(&report, "client-initiated");
    assert!(c["upper_s"].as_f64().is_some_and(|u| u <= 6.5), "{c:#}");
    assert_eq!(finding(&report, "tcp-state-rebuilt")["status"], "info");
    assert_eq!(s["deaths"][0][0], "silent-drop", "{s:#}");
    l.down().unwrap();
}

#[test]
fn clean_path_gives_no_false_alarm() {
    let _shared = crate::support::shared();
    let l = ServerLab::up(STEM, "clean", &Topology::scenario("clean").unwrap());
    let (code, report, _) = check(&l, &["--idle-max", "8s", "--idle-resolution", "1s"]);
    for f in report["findings"].as_array().unwrap() {
        let id = f["id"].as_str().unwrap();
        if id.starts_with("udp-") && id.ends_with("-timeout") || id == "tcp-idle-timeout" {
            // An 8-s run cannot reach RFC 4787's 2 min or RFC 5382's 2 h 4 min: it measured a
            // lower bound, which is information, neither a pass nor an alarm.
            assert_eq!(f["status"], "info", "{f:#}");
            continue;
        }
        assert!(
            f["status"] == "pass" || f["status"] == "info",
            "false alarm: {f:#}"
        );
    }
    assert_eq!(code, 0);
    let s = ladder(&report, "server-initiated");
    assert!(s["upper_s"].is_null());
    assert!(s["lower_s"].as_f64().unwrap() >= 8.0, "{s:#}");
    l.down().unwrap();
}

#[test]
fn loose_nat_rebuilds_state_for_client_initiated_probes_only() {
    let _shared = crate::support::shared();
    let l = ServerLab::up(STEM, "loose", &nat(false, 4));
    let (_, report, _) = check(&l, &["--idle-max", "10s", "--idle-resolution", "1s"]);
    assert_eq!(finding(&report, "tcp-idle-timeout")["status"], "fail");
    let s = ladder(&report, "server-initiated");
    assert!(s["upper_s"].as_f64().unwrap() <= 5.5, "{s:#}");
    let c = ladder(&report, "client-initiated");
    assert!(
        c["upper_s"].is_null(),
        "client-initiated probes must pass: {c:#}"
    );
    let f = finding(&report, "tcp-state-rebuilt");
    assert_eq!(f["status"], "warn", "{f:#}");
    l.down().unwrap();
}

#[test]
fn control_outage_is_flagged_not_read_as_a_timeout() {
    let _shared = crate::support::shared();
    let l = ServerLab::up(STEM, "outage", &Topology::scenario("clean").unwrap());
    let l_ref = &l;
    let (code, report, _) = std::thread::scope(|s| {
        s.spawn(move || {
            // Cut the server off completely from 3 s to 7 s into the run.
            std::thread::sleep(Duration::from_secs(3));
            let nft = |script: &str| {
                let mut c = l_ref.lab.command("server", "nft");
                c.args(["-f", "-"]).stdin(std::process::Stdio::piped());
                let mut child = c.spawn().unwrap();
                use std::io::Write;
                child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
                assert!(child.wait().unwrap().success());
            };
            nft("table inet pdicut {\n chain in { type filter hook input priority -300; policy drop; }\n chain out { type filter hook output priority -300; policy drop; }\n}\n");
            std::thread::sleep(Duration::from_secs(4));
            nft("delete table inet pdicut");
        });
        check(l_ref, &["--idle-max", "14s", "--idle-resolution", "1s"])
    });
    let idle = &report["data"]["idle"];
    assert!(
        !idle["outages"].as_array().unwrap().is_empty(),
        "outage not flagged: {idle:#}"
    );
    assert_eq!(finding(&report, "idle-outages")["status"], "info");
    let f = finding(&report, "tcp-idle-timeout");
    assert_ne!(f["status"], "fail", "outage read as a timeout: {f:#}");
    assert_ne!(code, 1);
    let lost = idle["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["outcome"] == "lost to outage")
        .count();
    assert!(lost > 0, "no test was marked lost to the outage");
    l.down().unwrap();
}

/// A server whose session limit is shorter than the run ends the session: the check must say
/// so, not blame a network outage or blocked UDP, and not wait for its horizon.
#[test]
fn a_session_the_server_ends_is_reported_as_such() {
    let _shared = crate::support::shared();
    let l = ServerLab::up_with(
        STEM,
        "sesend",
        &nat(false, 600),
        &["--max-session", "5s", "--max-test", "5s"],
    );
    let (code, report, wall) = check(&l, &["--idle-max", "40s", "--idle-resolution", "1s"]);
    let f = finding(&report, "idle-session-ended");
    assert_eq!(f["status"], "inconclusive", "{f:#}");
    let at = report["data"]["idle"]["session_end"]["at_s"]
        .as_f64()
        .unwrap();
    assert!((4.0..8.0).contains(&at), "session end at {at} s");
    assert!(
        wall < 20.0,
        "took {wall:.1} s: the run went on after the session ended"
    );
    assert!(
        !report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "idle-outages"),
        "the session end read as an outage: {report:#}"
    );
    let text = report["findings"].to_string();
    assert!(!text.contains("blocked"), "blamed on blocked UDP: {text}");
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["status"] != "fail"),
        "{text}"
    );
    assert_eq!(code, 3, "inconclusive: the run could not finish");
    l.down().unwrap();
}

/// Ctrl-C during `pathdoc check --idle` in a lab: the idle check itself stops its probes, ends
/// its session and reports what it measured (its own findings, saying they were cut short, not a
/// bare "interrupted"), the JSON report is printed, exit 130, and nothing is left behind.
#[test]
fn sigint_during_the_idle_check_keeps_its_findings_and_leaves_nothing() {
    let _shared = crate::support::shared();
    let l = ServerLab::up(STEM, "sigint", &nat(true, 30));
    let server = l.lab.addr("server").to_string();
    let mut cmd = l.lab.command("client", support::PATHDOC);
    cmd.args([
        "--json",
        "check",
        &server,
        "--idle",
        "--idle-max",
        "60s",
        "--idle-resolution",
        "1s",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = support::with_sigint_default(&mut cmd)
        .spawn()
        .expect("spawn pathdoc check");
    let pid = child.id();
    std::thread::sleep(Duration::from_secs(6));
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    let t0 = std::time::Instant::now();
    let out = child.wait_with_output().expect("wait for pathdoc");
    let stop = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stdout}{stderr}");
    assert!(stop < Duration::from_secs(4), "took {stop:?} to stop");
    let report = support::parse_report(130, &stdout, &stderr);
    assert_eq!(report["interrupted"], true);
    assert_eq!(report["data"]["idle"]["interrupted"], true, "{report:#}");
    let tcp = finding(&report, "tcp-idle-timeout");
    assert_eq!(tcp["status"], "info", "a 6-s lower bound: {tcp:#}");
    assert!(
        tcp["summary"].as_str().unwrap().contains("interrupted"),
        "{tcp:#}"
    );
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["id"] != "check-interrupted" && f["status"] != "fail"),
        "{report:#}"
    );
    l.down().unwrap();
    support::assert_nothing_left(STEM, "sigint", &[pid]);
}
