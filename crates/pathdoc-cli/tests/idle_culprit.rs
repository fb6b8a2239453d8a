//! End-to-end tests of the culprit-hop search of `pathdoc check --idle` through the lab: the
//! cgnat-chain scenario (home NAT → carrier NAT, both real conntrack NATs) with the two
//! timeouts set either way round; time scaled to seconds via the same flags users run.

use std::time::Duration;

use pathdoc_lab::{state, Lab, LabOptions, LabProcess, Topology};
use serde_json::Value;

/// Removes everything with the test's prefix when dropped (also on panic).
struct Cleanup(String);

impl Cleanup {
    fn new(test: &str) -> Self {
        let p = prefix(test);
        let _ = state::destroy_all(&p);
        Cleanup(p)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = state::destroy_all(&self.0);
    }
}

fn prefix(test: &str) -> String {
    format!("pdic-{test}-")
}

fn opts(test: &str) -> LabOptions {
    LabOptions {
        name: None,
        prefix: prefix(test),
        helper_exe: Some(env!("CARGO_BIN_EXE_pathdoc").into()),
    }
}

fn server(lab: &Lab) -> LabProcess {
    let mut cmd = lab.command("server", env!("CARGO_BIN_EXE_pathdoc"));
    cmd.args(["server", "--listen", "0.0.0.0:7224"]);
    let p = lab.spawn("server", cmd).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    p
}

fn check(lab: &Lab, args: &[&str]) -> (i32, Value) {
    let out = lab
        .command("client", env!("CARGO_BIN_EXE_pathdoc"))
        .args(["--json", "check", &lab.addr("server").to_string(), "--idle"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn finding<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id} in {report:#}"))
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
    let _c = Cleanup::new(test);
    let lab = Lab::up(&chain(hop1, hop2), &opts(test)).unwrap();
    let _srv = server(&lab);
    let (code, report) = check(
        &lab,
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
    lab.down().unwrap();
    report
}

#[test]
fn home_nat_forgets_first_and_the_cgn_timeout_is_measured_too() {
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
