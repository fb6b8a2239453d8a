//! End-to-end tests of the UDP part of `pathdoc check --idle` (RFC 4787 REQ-5 binding timeout,
//! REQ-6 inbound refresh) through a real conntrack NAT; time scaled to seconds.

mod support;

use std::time::Duration;

use pathdoc_lab::Topology;
use serde_json::Value;
use support::{finding, run_json, ServerLab};

/// Lab prefix stem of this file: labs are `pdiu-<test>-`.
const STEM: &str = "pdiu";

/// Run the idle check from the client namespace; returns (exit code, report).
fn check(l: &ServerLab, args: &[&str]) -> (i32, Value) {
    let server = l.lab.addr("server").to_string();
    let args = [&["--json", "check", server.as_str(), "--idle"], args].concat();
    let (code, report, _) = run_json(&l.lab, "client", &args, Duration::from_secs(120));
    (code, report)
}

#[test]
fn udp_binding_timeout_is_found_and_inbound_traffic_refreshes_linux_conntrack() {
    // conntrack: `udp` for unreplied flows, `udp_stream` once replied; set both.
    let topo = Topology::from_toml(
        "[[hop]]\nkind = \"nat\"\nconntrack = { tcp_established = 600, udp = 4, udp_stream = 4 }\n",
    )
    .unwrap();
    let lab = ServerLab::up(STEM, "udp", &topo);
    let (code, report) = check(
        &lab,
        &[
            "--idle-max",
            "12s",
            "--idle-resolution",
            "1s",
            "--idle-no-client-probes",
        ],
    );
    let f = finding(&report, "udp-binding-timeout");
    assert_eq!(f["status"], "fail", "{f:#}");
    assert_eq!(code, 1);
    let u = &report["data"]["idle"]["udp"]["outcome"];
    let (l, h) = (
        u["lower_s"].as_f64().unwrap(),
        u["upper_s"].as_f64().unwrap(),
    );
    assert!(
        l < 4.0 && 4.0 <= h + 0.2 && h - l <= 1.3,
        "bracket ({l}, {h}] does not pin the 4 s UDP timeout"
    );
    // Linux conntrack refreshes on packets in either direction.
    let r = finding(&report, "udp-inbound-refresh");
    assert!(
        r["title"]
            .as_str()
            .unwrap()
            .starts_with("inbound traffic refreshes"),
        "{r:#}"
    );
    assert_eq!(report["data"]["idle"]["udp"]["inbound_refresh"][1], 0);
    // TCP state (600 s) is fine: no false TCP alarm from the UDP timeout. The run is shorter than
    // RFC 5382's floor, so the TCP result is a lower bound (info), not a pass.
    assert_eq!(finding(&report, "tcp-idle-timeout")["status"], "info");
    lab.down().unwrap();
}
