//! The throughput check on a bottleneck shared with traffic it cannot see: the lab's
//! `shared-bottleneck` path (home NAT, 40 ms RTT, a 50 Mbit/s access line) with 2 and 4
//! background CUBIC downloads between two other hosts (iperf3 through the same tbf). The
//! download must say the link was busy, with the packet-train capacity within 20 % of the line's,
//! and no fault-hunting finding. `pathdoc server` runs in the lab's server, `pathdoc check
//! --throughput` (4-s tests, the code path users run) in its client.

use crate::support;

use std::time::Duration;

use pathdoc_lab::Topology;
use serde_json::Value;
use support::{findings, ids, run_json, ServerLab};

const STEM: &str = "pdt";

/// What a 50 Mbit/s tbf (metering Ethernet frames: IP + 14 B) lets through at the IP layer for
/// the probe's 1228-byte datagrams.
const LINE_IP_BPS: f64 = 50e6 * 1228.0 / 1242.0;

fn check(l: &ServerLab) -> Value {
    let addr = l.server.addr();
    let args = [
        "check",
        addr.as_str(),
        "--throughput",
        "--throughput-time",
        "4s",
        "--throughput-cc",
        "cubic",
        "--json",
    ];
    let (code, report, _) = run_json(&l.lab, "client", &args, Duration::from_secs(60));
    assert!(code == 0 || code == 1, "exit {code}: {:?}", ids(&report));
    report
}

#[test]
fn shared_bottleneck_with_2_and_4_cross_flows_reports_the_capacity() {
    let _cores = support::serial();
    let mut figures = Vec::new();
    for flows in [2u32, 4] {
        let mut topo = Topology::scenario("shared-bottleneck").unwrap();
        if let Some(x) = topo.link_mut(1).cross_traffic.as_mut() {
            x.flows = flows;
        }
        let l = ServerLab::up(STEM, &format!("sb{flows}"), &topo);
        let report = check(&l);
        let shared: Vec<&Value> = findings(&report)
            .into_iter()
            .filter(|f| f["id"] == "shared-bottleneck")
            .collect();
        assert_eq!(
            shared.len(),
            1,
            "{flows} flows: {:?}\n{:#}",
            ids(&report),
            report["findings"]
        );
        let f = shared[0];
        assert_eq!(f["direction"], "server-to-client", "{f:#}");
        assert_eq!(f["status"], "warn", "{f:#}");
        let capacity = f["evidence"][0]["value"]["value"].as_f64().unwrap();
        figures.push(format!("{flows} flows: {}", f["title"]));
        assert!(
            (capacity / LINE_IP_BPS - 1.0).abs() < 0.20,
            "{flows} flows: capacity {capacity} vs {LINE_IP_BPS}: {f:#}"
        );
        // Nothing sends the user hunting for a fault that is not there.
        for g in findings(&report) {
            assert!(
                !(g["id"] == "loss-limited" && g["direction"] == "server-to-client"),
                "{flows} flows: {g:#}"
            );
            assert!(
                !(g["id"] == "throughput-asymmetry" && g["status"] == "warn"),
                "{flows} flows: {g:#}"
            );
        }
    }
    eprintln!("{}", figures.join("\n"));
}
