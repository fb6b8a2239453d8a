//! End-to-end tests of the culprit-hop search of `pathdoc check --idle` through the lab: the
//! cgnat-chain scenario (home NAT → carrier NAT, both real conntrack NATs) with the two
//! timeouts set either way round; time scaled to seconds via the same flags users run.

use crate::support;

use std::time::Duration;

use pathdoc_lab::Topology;
use serde_json::Value;
use support::{finding, run_json, ServerLab};

/// Lab prefix stem of this file: labs are `pdic-<test>-`.
const STEM: &str = "pdic";

/// Run the idle check from the client namespace; returns (exit code, report).
fn check(l: &ServerLab, args: &[&str]) -> (i32, Value) {
    let server = l.lab.addr("server").to_string();
    let args = [&["--json", "check", server.as_str(), "--idle"], args].concat();
    let (code, report, _) = run_json(&l.lab, "client", &args, Duration::from_secs(120));
    (code, report)
}

/// cgnat-chain with the home NAT (hop 1) and carrier NAT (hop 2) timeouts overridden.
fn chain(hop1: u32, hop2: u32) -> Topology {
    let mut topo = Topology::scenario("cgnat-chain").unwrap();
    topo.hops[0].conntrack.tcp_established = Some(hop1);
    topo.hops[1].conntrack.tcp_established = Some(hop2);
    topo
}

/// Assert a bracket `(lower, upper]` from the JSON contains `timeout` and is at most ~1 s wide.
fn assert_bracket(seg: &Value, timeout: f64, what: &str) {
    let (l, u) = (
        seg["lower_s"].as_f64().unwrap_or(0.0),
        seg["upper_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: no timeout found: {seg:#}")),
    );
    assert!(
        l < timeout && timeout <= u + 0.2 && u - l <= 1.3,
        "{what}: bracket ({l}, {u}] does not pin {timeout} s"
    );
}

fn run_chain(test: &str, hop1: u32, hop2: u32) -> Value {
    let l = ServerLab::up(STEM, test, &chain(hop1, hop2));
    let (code, report) = check(
        &l,
        &[
            "--idle-max",
            "16s",
            "--idle-resolution",
            "1s",
            "--idle-no-client-probes",
        ],
    );
    assert_eq!(code, 1, "{report:#}");
    let path = &report["data"]["idle"]["path"];
    assert_eq!(path["routers"], 2, "{path:#}");
    assert_eq!(path["addrs"][0], "192.168.1.1", "{path:#}");
    assert_eq!(path["addrs"][1], "100.64.1.1", "{path:#}");
    l.down().unwrap();
    report
}

#[test]
fn home_nat_forgets_first_and_the_cgn_timeout_is_measured_too() {
    let _shared = crate::support::shared();
    let report = run_chain("home", 4, 12);
    let f = finding(&report, "tcp-idle-culprit-hop");
    assert_eq!(f["status"], "fail", "{f:#}");
    let culprit = &report["data"]["idle"]["culprit"];
    assert_eq!(culprit["location"]["kind"], "hop", "{culprit:#}");
    assert_eq!(culprit["location"]["hop"], 1, "{culprit:#}");
    assert!(
        f["title"].as_str().unwrap().contains("192.168.1.1"),
        "{f:#}"
    );
    assert_bracket(
        &report["data"]["idle"]["ladders"][0]["outcome"],
        4.0,
        "hop 1",
    );
    assert_eq!(culprit["after"]["first_hop"], 2, "{culprit:#}");
    assert_bracket(&culprit["after"], 12.0, "hop 2");
}

#[test]
fn carrier_nat_forgets_first_and_the_home_nat_timeout_is_measured_too() {
    let _shared = crate::support::shared();
    let report = run_chain("cgn", 12, 4);
    let f = finding(&report, "tcp-idle-culprit-hop");
    assert_eq!(f["status"], "fail", "{f:#}");
    let culprit = &report["data"]["idle"]["culprit"];
    assert_eq!(culprit["location"]["hop"], 2, "{culprit:#}");
    assert!(f["title"].as_str().unwrap().contains("100.64.1.1"), "{f:#}");
    assert!(f["title"].as_str().unwrap().contains("CGN"), "{f:#}");
    assert_bracket(
        &report["data"]["idle"]["ladders"][0]["outcome"],
        4.0,
        "hop 2",
    );
    assert_eq!(culprit["before"]["last_hop"], 1, "{culprit:#}");
    assert_bracket(&culprit["before"], 12.0, "hop 1");
}

/// Five NATs in a row (home router, ISP CPE, CGN layers), the far one forgetting first: the
/// default search depth reaches it, names it at hop 5, and the keepalive probes' result is there
/// (it used to vanish when the culprit groups ran into the run's deadline).
#[test]
fn five_nat_chain_far_nat_is_named_at_its_hop_and_keepalives_are_judged() {
    let _shared = crate::support::shared();
    let mut toml = String::from("description = \"five NATs; hop 5 forgets first\"\n");
    for timeout in [600, 600, 600, 600, 4] {
        toml.push_str(&format!(
            "[[hop]]\nkind = \"nat\"\nconntrack = {{ tcp_established = {timeout} }}\n"
        ));
    }
    let l = ServerLab::up(STEM, "chain5", &Topology::from_toml(&toml).unwrap());
    let (code, report) = check(
        &l,
        &[
            "--idle-max",
            "16s",
            "--idle-resolution",
            "1s",
            "--idle-no-client-probes",
        ],
    );
    assert_eq!(code, 1, "{report:#}");
    let idle = &report["data"]["idle"];
    assert_eq!(idle["path"]["routers"], 5, "{:#}", idle["path"]);
    assert_eq!(
        idle["culprit"]["location"]["kind"], "hop",
        "{:#}",
        idle["culprit"]
    );
    assert_eq!(
        idle["culprit"]["location"]["hop"], 5,
        "{:#}",
        idle["culprit"]
    );
    let f = finding(&report, "tcp-idle-culprit-hop");
    assert_eq!(f["status"], "fail", "{f:#}");
    assert_eq!(f["hop"], 5, "{f:#}");
    assert!(f["title"].as_str().unwrap().contains("100.64.4.1"), "{f:#}");
    assert_eq!(finding(&report, "tcp-idle-timeout")["hop"], 5);
    assert_bracket(&idle["ladders"][0]["outcome"], 4.0, "hop 5");
    // The keepalive probes: judged, or a finding that says why not.
    let keepalive = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "tcp-keepalive-refresh")
        .unwrap_or_else(|| panic!("keepalive result missing: {report:#}"));
    assert!(
        keepalive["status"] == "pass"
            || keepalive["summary"]
                .as_str()
                .unwrap()
                .contains("were not tested:"),
        "{keepalive:#}"
    );
    // Every remedy names where it applies; the CGN's is the ISP's to fix.
    for f in report["findings"].as_array().unwrap() {
        for r in f["remedies"].as_array().unwrap() {
            assert!(r["host"].is_object(), "remedy without a host: {r}");
            assert!(
                !r["command"]
                    .as_str()
                    .unwrap_or("")
                    .contains("nf_conntrack_tcp"),
                "a sysctl for the ISP's CGN: {r}"
            );
        }
    }
    l.down().unwrap();
}
