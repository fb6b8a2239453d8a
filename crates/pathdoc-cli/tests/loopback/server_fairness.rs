//! Issue #20: a spread-out attacker holds every slot of one server pool it can get and re-takes
//! any that frees up, while a legitimate user runs checks from another address. Each pool is
//! shared fairly (pathdoc-server's `fair` rule, docs/server.md "Fair sharing"), so the user is
//! still served — or, for a step the server had no room for, told so in a WARN, never a
//! silent PASS. Pools are scaled down through the server's flags so each test takes seconds.
//!
//! `PATHDOC_SERVER_UNDER_TEST=/path/to/old/pathdoc` runs the same attacks against another
//! build (flags it does not know are left out); the before figures of docs/server.md were
//! measured that way.

use crate::support;

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use pathdoc_bench_scale::attack::Target;
use pathdoc_bench_scale::hold::{Holder, Pool};
use serde_json::Value;
use support::{parse_report, run, serial, LoopbackServer, PATHDOC};

/// Legitimate checks per test, and how many must be served (≥ 90 %).
const RUNS: u32 = 10;
const SERVED: u32 = 9;
/// The attacker's re-take interval (the 0.2 s).
const RETAKE: Duration = Duration::from_millis(200);

/// Flags only this build knows (left out against an older server).
const NEW_FLAGS: [&str; 3] = [
    "--max-handshakes",
    "--max-handshakes-per-ip",
    "--handshake-timeout",
];

fn start(args: &[&str]) -> LoopbackServer {
    let older = std::env::var_os("PATHDOC_SERVER_UNDER_TEST").is_some();
    let mut kept: Vec<&str> = vec!["--log-format", "json", "--stats-interval", "1s"];
    let mut it = args.iter();
    while let Some(&flag) = it.next() {
        let value = it.next().copied();
        if older && NEW_FLAGS.contains(&flag) {
            continue;
        }
        kept.push(flag);
        kept.extend(value);
    }
    LoopbackServer::on_free_port(&kept)
}

/// How one legitimate check ended.
#[derive(Debug, Default)]
struct Tally {
    /// Every check ran (exit 0 or 1, no `check-failed`, no `server-busy`).
    served: u32,
    /// A step was refused for want of room and the report says so in a WARN.
    busy_warned: u32,
    /// Refused or failed otherwise (`check-failed`, exit 2/3).
    refused: u32,
    first_problem: Option<String>,
}

impl Tally {
    fn count(&mut self, code: i32, report: &Value) {
        let findings = report["findings"].as_array().cloned().unwrap_or_default();
        let with = |id: &str| findings.iter().find(|f| f["id"] == id).cloned();
        if let Some(f) = with("check-failed") {
            self.refused += 1;
            self.first_problem.get_or_insert(f["summary"].to_string());
        } else if let Some(f) = with("server-busy") {
            assert_eq!(f["status"], "warn", "{f}");
            self.busy_warned += 1;
            self.first_problem.get_or_insert(f["summary"].to_string());
        } else if code == 0 || code == 1 {
            self.served += 1;
        } else {
            self.refused += 1;
            // Which findings made it so (an INCONCLUSIVE under load reads differently from a
            // refusal).
            let not_ok: Vec<String> = findings
                .iter()
                .filter(|f| f["status"] == "inconclusive" || f["status"] == "fail")
                .map(|f| format!("{}: {}", f["id"], f["title"]))
                .collect();
            self.first_problem
                .get_or_insert(format!("exit {code}: {not_ok:?}"));
        }
    }
}

/// `RUNS` checks with `args` from 127.0.0.1, one after another, while the attack goes on.
fn legit_checks(server: &LoopbackServer, args: &[&str]) -> Tally {
    let mut tally = Tally::default();
    for _ in 0..RUNS {
        let mut cmd = Command::new(PATHDOC);
        cmd.args(["check", &server.addr.to_string(), "--json"])
            .args(args);
        let (code, out, err) = run(cmd, Duration::from_secs(60));
        tally.count(code, &parse_report(code, &out, &err));
    }
    tally
}

/// Start the attack, let it take what it can, run the legitimate checks, stop it.
fn under_attack(
    server: &LoopbackServer,
    pool: Pool,
    (addresses, per_address): (u32, u32),
    check: &[&str],
) -> (Tally, u32, String) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target = Target {
        addr: server.addr,
        pid: server.pid(),
    };
    let holder = rt.block_on(async {
        let h = Holder::start(target, pool, 1, addresses, per_address, RETAKE);
        tokio::time::sleep(Duration::from_secs(3)).await;
        h
    });
    let held_before = holder.held.load(Ordering::Relaxed);
    let tally = legit_checks(server, check);
    let result = rt.block_on(holder.stop());
    let summary = format!(
        "{pool:?}: the attacker held {held_before} when the checks began (peak {}; {}); \
         legitimate checks: {} served, {} with a server-busy WARN, {} refused ({:?})",
        result.peak_held,
        result.outcomes.summary(),
        tally.served,
        tally.busy_warned,
        tally.refused,
        tally.first_problem
    );
    eprintln!("{summary}");
    (tally, held_before, summary)
}

/// The quick MTU check of a client that has the server's token (the servers of the handshake
/// tests require one; the attackers never send it).
const AUTHED_MTU_CHECK: [&str; 7] = [
    "--mtu",
    "--mtu-bulk-ms",
    "200",
    "--mtu-wait-ms",
    "100",
    "--auth-token",
    "s3cret",
];

#[test]
fn many_addresses_holding_their_mtu_sessions_leave_room_for_another_client() {
    let _serial = serial();
    // 130 addresses × 4 sessions against 512 (the defaults' 128 addresses' worth, as 4096
    // and 32): first come, first served they would hold all.
    let server = start(&["--max-sessions", "512", "--max-sessions-per-ip", "4"]);
    let check = ["--mtu", "--mtu-bulk-ms", "200", "--mtu-wait-ms", "100"];
    let (tally, held, summary) = under_attack(&server, Pool::MtuSessions, (130, 4), &check);
    assert!(held >= 100, "the attack did not get going: {summary}");
    assert!(tally.served >= SERVED, "{summary}");
}

#[test]
fn a_few_addresses_holding_bulk_downloads_leave_one_for_another_client() {
    let _serial = serial();
    // 4 addresses × 2 never-read 5 s downloads against 8.
    let server = start(&["--max-bulk", "8", "--max-bulk-per-ip", "2"]);
    let check = ["--mtu", "--mtu-bulk-ms", "200", "--mtu-wait-ms", "100"];
    let (tally, held, summary) = under_attack(&server, Pool::Bulk, (4, 2), &check);
    assert!(held >= 4, "the attack did not get going: {summary}");
    // Never a silent pass: every check either timed its download or says the server was busy.
    assert_eq!(tally.refused, 0, "{summary}");
    assert!(tally.served >= SERVED, "{summary}");
}

#[test]
fn a_few_addresses_holding_throughput_streams_leave_room_for_another_client() {
    let _serial = serial();
    // 4 addresses × 2 tests × 4 streams that never send, against 16 streams.
    let server = start(&["--max-streams", "16", "--max-streams-per-ip", "8"]);
    let check = ["--throughput", "--throughput-time", "500ms"];
    let (tally, held, summary) = under_attack(&server, Pool::Streams(4), (4, 2), &check);
    assert!(held >= 8, "the attack did not get going: {summary}");
    assert!(tally.served >= SERVED, "{summary}");
}

#[test]
fn silent_unauthenticated_connections_cannot_starve_authenticated_checks() {
    let _serial = serial();
    // 2 addresses × 32 connections that never send a hello, against 64 connections.
    let server = start(&[
        "--auth-token",
        "s3cret",
        "--max-connections",
        "64",
        "--max-connections-per-ip",
        "32",
        "--max-handshakes",
        "48",
        "--max-handshakes-per-ip",
        "32",
        "--handshake-timeout",
        "2s",
    ]);
    let (tally, held, summary) = under_attack(&server, Pool::Silent, (2, 32), &AUTHED_MTU_CHECK);
    assert!(held >= 32, "the attack did not get going: {summary}");
    assert!(tally.served >= SERVED, "{summary}");
}

#[test]
fn a_few_addresses_holding_connections_leave_room_for_another_client() {
    let _serial = serial();
    // 8 addresses × 16 live sessions (one connection each) against 64 connections, 16 per
    // address: first come, first served 4 addresses would hold them all; the fair rule needs
    // 13 (docs/server.md) and leaves a newcomer the 2–3 connections an mtu check opens.
    let server = start(&[
        "--max-connections",
        "64",
        "--max-connections-per-ip",
        "16",
        "--max-handshakes",
        "64",
        "--max-handshakes-per-ip",
        "16",
    ]);
    let check = ["--mtu", "--mtu-bulk-ms", "200", "--mtu-wait-ms", "100"];
    let (tally, held, summary) = under_attack(&server, Pool::MtuSessions, (8, 16), &check);
    assert!(held >= 32, "the attack did not get going: {summary}");
    assert!(tally.served >= SERVED, "{summary}");
}

#[test]
fn many_addresses_holding_idle_probe_records_leave_room_for_another_client() {
    let _serial = serial();
    // 40 addresses × 32 UDP bindings (one idle session each) against 1024 probe records, 32
    // per address (the defaults' ratio, 262 144 and 8192): first come, first served 32
    // addresses would hold them all and a newcomer's probe connections would be refused.
    let server = start(&[
        "--max-idle-probes",
        "1024",
        "--max-idle-probes-per-ip",
        "32",
    ]);
    let check = [
        "--idle",
        "--idle-max",
        "2s",
        "--idle-resolution",
        "1s",
        "--idle-no-udp",
        "--idle-no-culprit",
        "--idle-no-keepalive",
        "--idle-no-client-probes",
    ];
    let (tally, held, summary) = under_attack(&server, Pool::IdleProbes(32), (40, 1), &check);
    assert!(held >= 256, "the attack did not get going: {summary}");
    assert!(tally.served >= SERVED, "{summary}");
}

#[test]
fn one_address_group_in_its_handshake_leaves_the_handshake_pool_to_others() {
    let _serial = serial();
    // 40 addresses of one /24 (one client with --ipv4-prefix 24), each with a connection that
    // never sends a hello, against a handshake pool of 32, 8 per client: the group may hold
    // its 8, never the pool (first come, first served it holds all 32); the connection pool
    // is large, so only the per-client handshake cap stands between the attacker and the
    // other client's checks.
    let server = start(&[
        "--ipv4-prefix",
        "24",
        "--auth-token",
        "s3cret",
        "--max-connections",
        "1024",
        "--max-connections-per-ip",
        "256",
        "--max-handshakes",
        "32",
        "--max-handshakes-per-ip",
        "8",
        "--handshake-timeout",
        "2s",
    ]);
    let (tally, held, summary) = under_attack(&server, Pool::Silent, (40, 1), &AUTHED_MTU_CHECK);
    // The count is of open attacker sockets at one instant: the 8 admitted ones dip together
    // at their 2 s deadline and refused ones live ≤ 50 ms (9 and 12 seen in busy runs), so only
    // a few are required; without the per-client cap the checks are refused (0 of 10).
    assert!(held >= 4, "the attack did not get going: {summary}");
    assert!(tally.served >= SERVED, "{summary}");
}
