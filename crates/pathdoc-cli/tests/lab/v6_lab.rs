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

/// `pathdoc check server --mtu` by name: the lab's hosts file gives `server` an IPv4 and an IPv6
/// address, so one run checks both families and one report holds the IPv6 black hole (headed
/// "IPv6 only") beside IPv4's PASS; `-4` keeps IPv4 alone.
#[test]
fn v6_ptb_blackhole_is_named_with_size_and_hop_while_ipv4_passes() {
    let _serial = support::serial();
    let _c = Cleanup::new(STEM, "ptb");
    let topo = Topology::scenario("v6-ptb-blackhole").unwrap();
    let lab = Lab::up(&topo, &opts(STEM, "ptb")).expect("lab up");
    let _server = PathdocServer::start_in(&lab, &[], Ip::V6);
    let deadline = Duration::from_secs(150);

    let (code, r, _) = run_json(
        &lab,
        "client",
        &["check", "server", "--mtu", "--json"],
        deadline,
    );
    assert_eq!(code, 1, "{:?}", ids(&r));
    let families: Vec<&str> = r["families"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["family"].as_str().unwrap())
        .collect();
    assert_eq!(
        families,
        ["ipv6", "ipv4"],
        "IPv6 first (RFC 6724): {:#}",
        r["families"]
    );
    let of = |family: &str| -> Vec<&Value> {
        support::findings(&r)
            .into_iter()
            .filter(|f| f["family"] == family)
            .collect()
    };
    // IPv4: healthy, in the same report.
    let v4 = of("ipv4");
    assert!(!v4.is_empty(), "{:?}", ids(&r));
    assert!(
        v4.iter()
            .all(|f| ["pass", "info"].contains(&f["status"].as_str().unwrap())),
        "IPv4 must pass: {v4:#?}"
    );
    assert_eq!(r["data"]["ipv4"]["mtu"]["down"]["outcome"]["mtu"], 1500);
    // IPv6: the black hole, headed as IPv6's alone, with its size and hop.
    let bh = of("ipv6")
        .into_iter()
        .find(|f| f["id"] == "pmtud-black-hole" && f["direction"] == DOWN)
        .unwrap_or_else(|| panic!("no IPv6 black hole: {:?}", ids(&r)));
    assert_eq!(bh["status"], "fail", "{bh:#}");
    let title = bh["title"].as_str().unwrap();
    assert!(
        title.starts_with("IPv6 only: ") && title.ends_with("; IPv4 is fine"),
        "{title}"
    );
    assert!(
        bh["summary"].as_str().unwrap().contains("Happy Eyeballs"),
        "{bh:#}"
    );
    let down = &r["data"]["ipv6"]["mtu"]["down"];
    assert_eq!(down["outcome"]["mtu"], 1480, "{down}");
    // The tunnel-like link leaves hop2, hop 1 from the server.
    assert_eq!(down["location"]["hop"], 1, "{down}");
    let first = bh["remedies"][0]["command"].as_str().unwrap_or_default();
    assert!(
        first.contains("icmpv6 type packet-too-big accept"),
        "{bh:#}"
    );

    // -4: IPv4 only, as before.
    let (code, r4, _) = run_json(
        &lab,
        "client",
        &["check", "server", "-4", "--mtu", "--json"],
        deadline,
    );
    assert_eq!(code, 0, "IPv4 must pass: {:?}", ids(&r4));
    assert_eq!(
        r4["families"].as_array().map(Vec::len),
        Some(1),
        "{:#}",
        r4["families"]
    );
    assert!(
        support::findings(&r4).iter().all(|f| f["family"] == "ipv4"),
        "{:?}",
        ids(&r4)
    );
    assert!(
        find_dir(&r4, "pmtud-black-hole", DOWN).is_none(),
        "{:?}",
        ids(&r4)
    );
    assert_eq!(r4["data"]["mtu"]["down"]["outcome"]["mtu"], 1500);
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
