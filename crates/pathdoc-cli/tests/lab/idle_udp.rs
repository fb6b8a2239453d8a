//! End-to-end tests of the UDP part of `pathdoc check --idle` (RFC 4787 REQ-5 binding timeouts
//! of both classes, REQ-6 inbound refresh) through a real conntrack NAT; time scaled to seconds.

use crate::support;

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

/// A NAT whose conntrack forgets single-exchange UDP flows after `udp` s and flows with traffic
/// both ways after `stream` s.
fn nat(udp: u32, stream: u32) -> Topology {
    Topology::from_toml(&format!(
        "[[hop]]\nkind = \"nat\"\nconntrack = {{ tcp_established = 600, udp = {udp}, udp_stream = {stream} }}\n"
    ))
    .unwrap()
}

/// Assert `outcome` brackets `timeout` within the 1 s resolution (and a little slack for the
/// server's timing), without contradictions.
fn assert_pinned(outcome: &Value, timeout: f64, what: &str) {
    let (l, h) = (
        outcome["lower_s"].as_f64().unwrap_or(0.0),
        outcome["upper_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: no timeout found: {outcome:#}")),
    );
    assert!(
        l < timeout && timeout <= h + 0.2 && h - l <= 1.3,
        "{what}: bracket ({l}, {h}] does not pin the {timeout} s timeout"
    );
    assert_eq!(outcome["contradictions"], 0, "{what}: {outcome:#}");
}

#[test]
fn udp_binding_timeout_is_found_and_inbound_traffic_refreshes_linux_conntrack() {
    // Waits on conntrack timeouts of its own namespaces (1 s resolution): beside other
    // waiting tests is fine, the cores stay mostly idle.
    let _shared = crate::support::shared();
    let lab = ServerLab::up(STEM, "udp", &nat(4, 4));
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
    for id in ["udp-single-exchange-timeout", "udp-stream-timeout"] {
        assert_eq!(finding(&report, id)["status"], "fail", "{id}");
    }
    assert_eq!(code, 1);
    let u = &report["data"]["idle"]["udp"];
    assert_pinned(&u["single_exchange"]["outcome"], 4.0, "single exchange");
    assert_pinned(&u["stream"]["outcome"], 4.0, "stream");
    // Linux conntrack refreshes on packets in either direction.
    let r = finding(&report, "udp-inbound-refresh");
    assert!(
        r["title"]
            .as_str()
            .unwrap()
            .starts_with("inbound traffic refreshes"),
        "{r:#}"
    );
    assert_eq!(r["direction"], "server-to-client");
    assert_eq!(u["inbound_refresh"][1], 0);
    // TCP state (600 s) is fine: no false TCP alarm from the UDP timeout. The run is shorter than
    // RFC 5382's floor, so the TCP result is a lower bound (info), not a pass.
    assert_eq!(finding(&report, "tcp-idle-timeout")["status"], "info");
    lab.down().unwrap();
}

/// Linux conntrack keeps a binding that saw one exchange for `nf_conntrack_udp_timeout` and one
/// with traffic both ways for `nf_conntrack_udp_timeout_stream`. A probe that finds a binding
/// alive moves it into the second class, which made the old single ladder contradict itself
/// ("expire after 4 s" while a binding survived 4.5 s, a confident FAIL). Each class is now
/// measured on its own: both timeouts pinned, no contradiction, run after run.
#[test]
fn single_exchange_and_stream_timeouts_are_measured_separately_without_contradiction() {
    // Waits on conntrack timeouts of its own namespaces (1 s resolution): beside other
    // waiting tests is fine, the cores stay mostly idle.
    let _shared = crate::support::shared();
    let lab = ServerLab::up(STEM, "udp2", &nat(4, 9));
    for run in 1..=5 {
        let (_, report) = check(
            &lab,
            &[
                "--idle-max",
                "14s",
                "--idle-resolution",
                "1s",
                "--idle-no-client-probes",
                "--idle-no-culprit",
                "--idle-no-keepalive",
            ],
        );
        let u = &report["data"]["idle"]["udp"];
        assert_pinned(
            &u["single_exchange"]["outcome"],
            4.0,
            &format!("run {run}: single exchange"),
        );
        assert_pinned(&u["stream"]["outcome"], 9.0, &format!("run {run}: stream"));
        for id in ["udp-single-exchange-timeout", "udp-stream-timeout"] {
            let f = finding(&report, id);
            assert_eq!(f["status"], "fail", "run {run}: {f:#}");
            let text = format!("{} {}", f["title"], f["summary"]).to_lowercase();
            for tcp_word in ["reset", "acknowledged"] {
                assert!(
                    !text.contains(tcp_word),
                    "run {run}: TCP wording for UDP: {text}"
                );
            }
        }
    }
    lab.down().unwrap();
}
