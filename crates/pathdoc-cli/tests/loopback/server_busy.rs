//! Every check reports a refusal for want of room the same way (issue #20): a `server-busy`
//! WARN with the server's words, the bound it refused by and its limit, a retry hint for the
//! user and a remedy for the server's operator — never a `check-failed` INCONCLUSIVE that reads
//! like a fault, never a silent PASS. Another client (127.2.0.1) holds the one slot of a pool
//! scaled down to 1, then the check runs from 127.0.0.1.

use crate::support;

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pathdoc_bench_scale::attack::Target;
use pathdoc_bench_scale::hold::{Holder, Pool};
use serde_json::Value;
use support::{parse_report, run, LoopbackServer, PATHDOC};

/// Hold `pool` from one other address, run `pathdoc check SERVER --json ARGS`, stop holding.
fn while_held(server: &LoopbackServer, pool: Pool, args: &[&str]) -> (i32, Value) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let target = Target {
        addr: server.addr,
        pid: server.pid(),
    };
    let holder = rt.block_on(async {
        let h = Holder::start(target, pool, 2, 1, 1, Duration::from_millis(100));
        let deadline = Instant::now() + Duration::from_secs(10);
        while h.held.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        h
    });
    let held = holder.held.load(Ordering::Relaxed);
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["check", &server.addr.to_string(), "--json"])
        .args(args);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    rt.block_on(holder.stop());
    assert_eq!(held, 1, "the other client did not get the slot");
    (code, parse_report(code, &out, &err))
}

/// The report's `server-busy` findings of `check`, each checked for the figures and remedies.
fn busy_findings(report: &Value, check: &str, reason: &str, limit: u64) -> Vec<Value> {
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    assert!(
        !findings.iter().any(|f| f["id"] == "check-failed"),
        "a refusal for load reads as a failure: {report:#}"
    );
    let busy: Vec<Value> = findings
        .into_iter()
        .filter(|f| f["id"] == "server-busy" && f["check"] == check)
        .collect();
    assert!(!busy.is_empty(), "no server-busy finding: {report:#}");
    for f in &busy {
        assert_eq!(f["status"], "warn", "{f:#}");
        assert!(
            f["title"]
                .as_str()
                .unwrap()
                .starts_with("the server was busy: "),
            "{f:#}"
        );
        let evidence = f["evidence"].as_array().unwrap();
        assert!(
            evidence
                .iter()
                .any(|e| e["value"]["value"] == reason || e["value"].to_string().contains(reason)),
            "the reason {reason} is not in the evidence: {f:#}"
        );
        assert!(
            evidence.iter().any(|e| e["name"] == "the server's limit"
                && e["value"].to_string().contains(&limit.to_string())),
            "the limit {limit} is not in the evidence: {f:#}"
        );
        let hosts: Vec<String> = f["remedies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["host"]["kind"].as_str().unwrap_or("").to_string())
            .collect();
        assert!(
            hosts.contains(&"client".into()) && hosts.contains(&"server".into()),
            "a retry hint for the user and a fix for the operator: {f:#}"
        );
    }
    busy
}

fn one_session_server() -> LoopbackServer {
    LoopbackServer::on_free_port(&["--max-sessions", "1", "--max-sessions-per-ip", "1"])
}

#[test]
fn an_mtu_check_the_server_has_no_session_for_is_a_server_busy_warning() {
    let server = one_session_server();
    let (code, report) = while_held(&server, Pool::MtuSessions, &["--mtu"]);
    let busy = busy_findings(&report, "mtu", "sessions-total", 1);
    assert_eq!(
        busy[0]["title"],
        "the server was busy: the mtu check not run"
    );
    assert_eq!(code, 1, "a WARN: {report:#}");
}

#[test]
fn an_idle_check_the_server_has_no_session_for_is_a_server_busy_warning() {
    let server = one_session_server();
    let (code, report) = while_held(&server, Pool::MtuSessions, &["--idle"]);
    let busy = busy_findings(&report, "idle", "sessions-total", 1);
    assert_eq!(
        busy[0]["title"],
        "the server was busy: the idle check not run"
    );
    assert_eq!(code, 1, "a WARN: {report:#}");
}

#[test]
fn a_throughput_check_the_server_has_no_session_for_is_a_server_busy_warning() {
    let server = one_session_server();
    let (code, report) = while_held(
        &server,
        Pool::MtuSessions,
        &["--throughput", "--throughput-time", "500ms"],
    );
    let busy = busy_findings(&report, "throughput", "sessions-total", 1);
    // Both tests of the check (upload, download), each said once.
    assert_eq!(busy.len(), 2, "{report:#}");
    assert_eq!(code, 1, "a WARN: {report:#}");
}

#[test]
fn a_throughput_test_the_server_has_no_stream_for_is_a_server_busy_warning() {
    let _serial = support::serial();
    let server = LoopbackServer::on_free_port(&["--max-streams", "1", "--max-streams-per-ip", "1"]);
    let (code, report) = while_held(
        &server,
        Pool::Streams(1),
        &["--throughput", "--throughput-time", "500ms"],
    );
    let busy = busy_findings(&report, "throughput", "streams-total", 1);
    assert!(
        busy[0]["summary"]
            .as_str()
            .unwrap()
            .contains("throughput streams"),
        "the server's words: {report:#}"
    );
    assert_eq!(code, 1, "a WARN: {report:#}");
}

#[test]
fn idle_probe_connections_the_server_has_no_room_for_are_a_server_busy_warning() {
    // One idle probe per client: the check's second probe connection is refused
    // (idle-probes-per-client). The run is short (10 s horizon, about 25 s in all).
    let server =
        LoopbackServer::on_free_port(&["--max-idle-probes", "1", "--max-idle-probes-per-ip", "1"]);
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["check", &server.addr.to_string(), "--json", "--idle"])
        .args([
            "--idle-max",
            "10s",
            "--idle-resolution",
            "5s",
            "--idle-no-udp",
        ])
        .args([
            "--idle-no-culprit",
            "--idle-no-keepalive",
            "--idle-no-client-probes",
        ]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    let report = parse_report(code, &out, &err);
    let busy = busy_findings(&report, "idle", "idle-probes-per-client", 1);
    assert!(
        busy[0]["title"]
            .as_str()
            .unwrap()
            .ends_with("probe connection not run")
            || busy[0]["title"]
                .as_str()
                .unwrap()
                .ends_with("probe connections not run"),
        "{report:#}"
    );
    assert!(
        report["data"]["idle"]["probes_refused_busy"].as_u64() >= Some(1),
        "{report:#}"
    );
    assert_eq!(code, 1, "a WARN: {report:#}");
}

#[test]
fn idle_udp_bindings_the_server_has_no_room_for_are_a_server_busy_warning() {
    // One idle probe per client: UDP bindings beyond it get no answer to their OPEN; the
    // server says why with the results, and the report counts them like refused connections.
    let server =
        LoopbackServer::on_free_port(&["--max-idle-probes", "1", "--max-idle-probes-per-ip", "1"]);
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["check", &server.addr.to_string(), "--json", "--idle"])
        .args(["--idle-max", "10s", "--idle-resolution", "5s"])
        .args([
            "--idle-no-culprit",
            "--idle-no-keepalive",
            "--idle-no-client-probes",
        ]);
    let (code, out, err) = run(cmd, Duration::from_secs(90));
    let report = parse_report(code, &out, &err);
    let busy = busy_findings(&report, "idle", "idle-probes-per-client", 1);
    let refused = report["data"]["idle"]["udp_bindings_refused_busy"]
        .as_u64()
        .unwrap_or(0);
    assert!(refused >= 1, "{report:#}");
    let title = busy[0]["title"].as_str().unwrap();
    assert!(title.contains("UDP binding"), "{report:#}");
    assert!(
        busy[0]["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "UDP bindings refused"
                && e["value"]["value"].as_u64() == Some(refused)),
        "{report:#}"
    );
    assert_eq!(code, 1, "a WARN: {report:#}");
}
