//! The IPv6 scenarios end to end (issue 21): one dual-stack lab, the same `pathdoc check` run
//! once over IPv4 and once over IPv6, and each family's answer checked — the IPv6-only failure
//! named, the healthy or different IPv4 result reported on its own.

use crate::support;

use std::time::Duration;

use pathdoc_lab::{Lab, Topology};
use serde_json::Value;
use support::{find_dir, finding, ids, opts, run_json, Cleanup, Ip, PathdocServer};

/// Lab prefix stem of this file: labs are `pd6-<test>-`.
const STEM: &str = "pd6";

const DOWN: &str = "server-to-client";

/// `pathdoc check <server> <args> --json` over `ip`, with a server started for that family
/// and stopped afterwards; returns (exit code, report).
fn check_over(lab: &Lab, ip: Ip, args: &[&str]) -> (i32, Value) {
    let server = PathdocServer::start_in(lab, &[], ip);
    let addr = server.addr();
    let args = [&["check", addr.as_str()], args, &["--json"]].concat();
    let (code, report, _) = run_json(lab, "client", &args, Duration::from_secs(90));
    (code, report)
}

#[test]
fn v6_ptb_blackhole_is_named_with_size_and_hop_while_ipv4_passes() {
    let _serial = support::serial();
    let _c = Cleanup::new(STEM, "ptb");
    let topo = Topology::scenario("v6-ptb-blackhole").unwrap();
    let lab = Lab::up(&topo, &opts(STEM, "ptb")).expect("lab up");

    let (code, r4) = check_over(&lab, Ip::V4, &["--mtu"]);
    assert_eq!(code, 0, "IPv4 must pass: {:?}", ids(&r4));
    assert!(
        find_dir(&r4, "pmtud-black-hole", DOWN).is_none(),
        "{:?}",
        ids(&r4)
    );
    assert_eq!(r4["data"]["mtu"]["down"]["outcome"]["mtu"], 1500);

    let (code, r6) = check_over(&lab, Ip::V6, &["--mtu"]);
    assert_eq!(code, 1, "{:?}", ids(&r6));
    let bh = find_dir(&r6, "pmtud-black-hole", DOWN)
        .unwrap_or_else(|| panic!("no IPv6 black hole: {:?}", ids(&r6)));
    assert_eq!(bh["status"], "fail", "{bh:#}");
    let down = &r6["data"]["mtu"]["down"];
    assert_eq!(down["outcome"]["mtu"], 1480, "{down}");
    // The tunnel-like link leaves hop2, hop 1 from the server.
    assert_eq!(down["location"]["hop"], 1, "{down}");
    let first = bh["remedies"][0]["command"].as_str().unwrap_or_default();
    assert!(
        first.contains("icmpv6 type packet-too-big accept"),
        "{bh:#}"
    );
    lab.down().unwrap();
}

fn bracket(report: &Value) -> (f64, f64) {
    let ladder = report["data"]["idle"]["ladders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["mode"] == "server-initiated")
        .map(|l| &l["outcome"])
        .unwrap_or_else(|| panic!("no server-initiated ladder: {report:#}"));
    (
        ladder["lower_s"].as_f64().unwrap(),
        ladder["upper_s"].as_f64().unwrap(),
    )
}

#[test]
fn v6_firewall_idle_times_out_first_and_ipv4_timeout_is_reported_separately() {
    let _serial = support::serial();
    let _c = Cleanup::new(STEM, "idle");
    let mut topo = Topology::scenario("v6-firewall-idle").unwrap();
    topo.hops[0].conntrack.tcp_established = Some(8);
    topo.hops[0].conntrack6.tcp_established = Some(3);
    let lab = Lab::up(&topo, &opts(STEM, "idle")).expect("lab up");
    let args = [
        "--idle",
        "--idle-max",
        "12s",
        "--idle-resolution",
        "1s",
        "--idle-no-udp",
    ];

    let (code, r6) = check_over(&lab, Ip::V6, &args);
    assert_eq!(code, 1, "{:?}", ids(&r6));
    assert_eq!(finding(&r6, "tcp-idle-timeout")["status"], "fail");
    let (l, u) = bracket(&r6);
    assert!(l < 3.0 && 3.0 <= u + 0.2, "IPv6 bracket ({l}, {u}] vs 3 s");
    let culprit = finding(&r6, "tcp-idle-culprit-hop");
    assert_eq!(culprit["status"], "fail", "{culprit:#}");
    assert_eq!(r6["data"]["idle"]["culprit"]["location"]["hop"], 1);
    assert!(
        culprit["title"].as_str().unwrap().contains("2001:db8:1::1"),
        "{culprit:#}"
    );

    let (code, r4) = check_over(&lab, Ip::V4, &args);
    assert_eq!(code, 1, "{:?}", ids(&r4));
    let (l, u) = bracket(&r4);
    assert!(l < 8.0 && 8.0 <= u + 0.2, "IPv4 bracket ({l}, {u}] vs 8 s");
    lab.down().unwrap();
}
