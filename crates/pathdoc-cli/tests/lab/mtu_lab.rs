//! End-to-end tests of `pathdoc check --mtu` through the namespace lab: `pathdoc server` runs in
//! the lab's server namespace, `pathdoc check <server> --mtu --json` in the client namespace,
//! and the JSON report is checked. Each test has its own lab prefix and cleans up on panic.

use crate::support;

use std::time::Duration;

use pathdoc_lab::{Filter, Topology};
use serde_json::Value;
use support::{find, find_dir, ids, run_json, Ip, ServerLab};

/// Lab prefix stem of this file: labs are `pdt-<test>-`.
const STEM: &str = "pdt";

const UP: &str = "client-to-server";
const DOWN: &str = "server-to-client";

/// Run the check in the client namespace; returns (exit code, report, seconds taken).
fn check(l: &ServerLab, extra: &[&str]) -> (i32, Value, f64) {
    let addr = l.server.addr();
    let args = [&["check", addr.as_str(), "--mtu", "--json"], extra].concat();
    run_json(&l.lab, "client", &args, Duration::from_secs(40))
}

fn commands(f: &Value) -> Vec<String> {
    f["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["command"].as_str().map(String::from))
        .collect()
}

/// The families the black-hole test runs over (IPv6: the same path dual-stack, the server's
/// firewall also dropping ICMPv6 Packet Too Big, so the 1420-byte link is a black hole for both).
const BLACK_HOLE_FAMILIES: [Ip; 2] = [Ip::V4, Ip::V6];

#[test]
fn pmtu_blackhole_is_found_server_to_client_with_mtu_hop_and_fix() {
    let _shared = crate::support::shared();
    for ip in BLACK_HOLE_FAMILIES {
        black_hole_server_to_client(ip);
    }
}

fn black_hole_server_to_client(ip: Ip) {
    let mut topo = Topology::scenario("pmtu-blackhole").unwrap();
    if ip == Ip::V6 {
        topo.server.filters.push(Filter::DropIcmpv6PacketTooBig);
    }
    let l = ServerLab::up_ip(STEM, "mtubh", &topo, ip);
    let (code, r, secs) = check(&l, &[]);
    assert_eq!(code, 1, "{ip:?}: {:?}", ids(&r));
    assert!(secs < 10.0, "{ip:?}: verdict took {secs:.1} s");
    let bh = find_dir(&r, "pmtud-black-hole", DOWN)
        .unwrap_or_else(|| panic!("{ip:?}: no black hole: {:?}", ids(&r)));
    assert_eq!(bh["status"], "fail");
    assert!(bh["title"].as_str().unwrap().contains("server→client"));
    let down = &r["data"]["mtu"]["down"];
    assert_eq!(down["outcome"]["kind"], "black-hole");
    assert_eq!(down["outcome"]["mtu"], 1420, "{ip:?}: {down}");
    // The 1420-byte link leaves hop2, the first hop from the server.
    assert_eq!(down["location"]["hop"], 1, "{ip:?}: {down}");
    let cmds = commands(bh);
    let (accept, route) = match ip {
        Ip::V4 => (
            "icmp type destination-unreachable icmp code frag-needed accept",
            "ip route add",
        ),
        Ip::V6 => ("icmpv6 type packet-too-big accept", "ip -6 route add"),
    };
    // The family's own message comes first.
    assert!(cmds[0].contains(accept), "{ip:?}: {cmds:?}");
    assert!(
        cmds.iter()
            .any(|c| c.starts_with(route) && c.contains("mtu lock 1420")),
        "{ip:?}: {cmds:?}"
    );
    if ip == Ip::V6 {
        let probes = bh["evidence"].to_string();
        assert!(probes.contains("IPV6_RECVERR"), "{probes}");
        // Nothing below IPv6's 1280-byte minimum is probed.
        assert!(!probes.contains("576 B"), "{probes}");
    }
    // client→server is clean in this scenario: no false alarm there.
    assert_eq!(find_dir(&r, "path-mtu", UP).unwrap()["status"], "pass");
    // The symptom: full-size downloads stall, reduced-MSS ones do not.
    let stall = find(&r, "bulk-download-stall")
        .unwrap_or_else(|| panic!("{ip:?}: no stall finding: {:?}", ids(&r)));
    assert_eq!(stall["status"], "fail");
    assert_eq!(r["data"]["mtu"]["server_tcp_mtu_probing"], "0");
    l.down().unwrap();
}

#[test]
fn mirror_black_hole_client_to_server() {
    let _shared = crate::support::shared();
    let topo = Topology::from_toml(
        r#"
description = "1420-byte link towards the server; the client's firewall drops ICMP frag-needed"
[[hop]]
[client]
filters = ["drop-icmp-frag-needed"]
[[link]]
[[link]]
[link.up]
mtu = 1420
"#,
    )
    .unwrap();
    let l = ServerLab::up(STEM, "mtumir", &topo);
    let (code, r, secs) = check(&l, &["--mtu-bulk-ms", "0"]);
    assert_eq!(code, 1, "{:?}", ids(&r));
    assert!(secs < 10.0, "verdict took {secs:.1} s");
    let bh = find_dir(&r, "pmtud-black-hole", UP)
        .unwrap_or_else(|| panic!("no black hole: {:?}", ids(&r)));
    assert!(bh["title"].as_str().unwrap().contains("client→server"));
    assert_eq!(r["data"]["mtu"]["up"]["outcome"]["mtu"], 1420);
    assert_eq!(
        r["data"]["mtu"]["up"]["location"]["hop"], 1,
        "{}",
        r["data"]["mtu"]["up"]
    );
    assert!(
        find_dir(&r, "pmtud-black-hole", DOWN).is_none(),
        "{:?}",
        ids(&r)
    );
}

#[test]
fn mtu_1280_at_hop_2_of_3_is_measured_and_located() {
    let _shared = crate::support::shared();
    let topo = Topology::from_toml(
        r#"
description = "1280-byte link between hop2 and hop3"
[[hop]]
[[hop]]
[[hop]]
[[link]]
[[link]]
[[link]]
mtu = 1280
"#,
    )
    .unwrap();
    let l = ServerLab::up(STEM, "mtu3h", &topo);
    let (code, r, secs) = check(&l, &["--mtu-bulk-ms", "0"]);
    assert!(secs < 10.0, "verdict took {secs:.1} s");
    assert_eq!(code, 0, "PMTUD works on this path: {:?}", ids(&r));
    let up = &r["data"]["mtu"]["up"];
    assert_eq!(up["outcome"]["kind"], "signalled", "{up}");
    assert_eq!(up["outcome"]["mtu"], 1280);
    assert_eq!(up["outcome"]["ptb_mtu"], 1280);
    assert_eq!(up["location"]["hop"], 2, "{up}");
    let hop_addr = up["location"]["addr"].as_str().unwrap().to_string();
    let hop2_addrs = l
        .lab
        .run("hop2", "ip", &["-4", "-o", "addr"], Duration::from_secs(5))
        .unwrap();
    assert!(
        hop2_addrs.contains(&format!("inet {hop_addr}/")),
        "{hop_addr} is not hop2's: {hop2_addrs}"
    );
    assert_eq!(r["data"]["mtu"]["down"]["outcome"]["mtu"], 1280);

    // Both kernels now cache a 1280-byte PMTU for this path. A second run must measure the path
    // afresh (locating hop 2 again), not stop at the cached size and call it clean.
    let (_, again, _) = check(&l, &["--mtu-bulk-ms", "0"]);
    let up = &again["data"]["mtu"]["up"];
    assert_eq!(up["outcome"]["kind"], "signalled", "{up}");
    assert_eq!(up["outcome"]["mtu"], 1280);
    assert_eq!(up["location"]["hop"], 2, "{up}");
    assert_eq!(again["data"]["mtu"]["down"]["outcome"]["kind"], "signalled");
    let notes = again["data"]["mtu"]["notes"].to_string();
    assert!(notes.contains("cached path MTU of 1280"), "{notes}");
}

#[test]
fn mss_clamp_on_a_hop_is_detected_with_its_value() {
    let _shared = crate::support::shared();
    let topo = Topology::from_toml("[[hop]]\nmss_clamp = 1380\n[[hop]]\n").unwrap();
    let l = ServerLab::up(STEM, "mtumss", &topo);
    let (code, r, _) = check(&l, &["--mtu-bulk-ms", "0"]);
    assert_eq!(code, 0, "a clamp alone is not a fault: {:?}", ids(&r));
    let up = find_dir(&r, "mss-clamped", UP)
        .unwrap_or_else(|| panic!("clamp not seen: {:?} {}", ids(&r), r["data"]["mtu"]["mss"]));
    assert_eq!(up["status"], "info");
    assert!(
        up["title"].as_str().unwrap().contains("1460 → 1380"),
        "{}",
        up["title"]
    );
    let down = find_dir(&r, "mss-clamped", DOWN)
        .unwrap_or_else(|| panic!("SYN-ACK clamp not seen: {:?}", ids(&r)));
    assert!(
        down["title"].as_str().unwrap().contains("→ 1380"),
        "{}",
        down["title"]
    );
}

#[test]
fn clean_path_raises_no_alarm() {
    let _shared = crate::support::shared();
    let l = ServerLab::up(STEM, "mtuok", &Topology::scenario("clean").unwrap());
    let (code, r, secs) = check(&l, &[]);
    assert_eq!(code, 0, "{:?}", ids(&r));
    assert!(secs < 10.0, "verdict took {secs:.1} s");
    for f in r["findings"].as_array().unwrap() {
        assert!(
            matches!(f["status"].as_str(), Some("pass" | "info")),
            "false alarm: {f}"
        );
    }
    assert_eq!(r["data"]["mtu"]["up"]["outcome"]["mtu"], 1500);
    assert_eq!(r["data"]["mtu"]["down"]["outcome"]["mtu"], 1500);
    assert_eq!(find_dir(&r, "mss-unchanged", UP).unwrap()["status"], "pass");
}

/// The repo's own example path: a 1450-B access link, a server firewall that eats ICMP
/// frag-needed, and a home router that clamps the MSS to 1410. The black hole is real for UDP and
/// anything not sized by TCP's MSS, but TCP is protected by the clamp: the report must say exactly
/// that and nothing that contradicts it (no "stall", no "no clamping", no advice to add the
/// clamp that exists).
#[test]
fn example_topology_black_hole_is_reported_with_the_clamp_that_protects_tcp() {
    let _shared = crate::support::shared();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/topology.toml"
    ))
    .unwrap();
    let l = ServerLab::up(STEM, "mtuex", &Topology::from_toml(&text).unwrap());
    let (code, r, _) = check(&l, &[]);
    assert_eq!(code, 1, "{:?}", ids(&r));
    let bh = find_dir(&r, "pmtud-black-hole", DOWN)
        .unwrap_or_else(|| panic!("no black hole: {:?}", ids(&r)));
    assert_eq!(bh["status"], "warn", "{bh:#}");
    assert_eq!(r["data"]["mtu"]["down"]["outcome"]["mtu"], 1450);
    let summary = bh["summary"].as_str().unwrap();
    assert!(summary.contains("from 1460 to 1410"), "{summary}");
    assert!(summary.contains("UDP"), "{summary}");
    let clamp =
        find_dir(&r, "mss-clamped", UP).unwrap_or_else(|| panic!("clamp not seen: {:?}", ids(&r)));
    assert_eq!(clamp["status"], "info");
    assert!(
        clamp["title"].as_str().unwrap().contains("1460 → 1410"),
        "{clamp:#}"
    );
    assert_eq!(find(&r, "bulk-download").unwrap()["status"], "pass");
    assert!(find(&r, "bulk-download-stall").is_none(), "{:?}", ids(&r));
    let all = r["findings"].to_string().to_lowercase();
    for wrong in [
        "stall",
        "no clamping",
        "full-size segments",
        "maxseg size set",
        "advmss",
    ] {
        assert!(
            !all.contains(wrong),
            "contradicting `{wrong}`: {:?}",
            ids(&r)
        );
    }
    for f in r["findings"].as_array().unwrap() {
        for rem in f["remedies"].as_array().unwrap() {
            assert!(rem["host"].is_object(), "remedy without a host: {rem}");
        }
    }
}
