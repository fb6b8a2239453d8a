//! `pathdoc server` as an operator and its users meet it, on loopback (no lab needed): repeated
//! checks are never locked out, refusals are logged and worded, logs are clean in files and
//! pipes, `--listen` takes what people write, nonsensical limits are refused, `--once` exits.

use crate::support;

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    check_failures, free_loopback_port, parse_report, quick_check, run, LoopbackServer as Server,
    PATHDOC,
};

#[test]
fn ten_checks_in_a_row_against_one_server_all_run() {
    let server = Server::on_free_port(&[]);
    let target = server.addr.to_string();
    for i in 1..=10 {
        let (code, out, err) = run(quick_check(&target), Duration::from_secs(60));
        let report = parse_report(code, &out, &err);
        let failed = check_failures(&report);
        assert!(
            failed.is_empty() && (code == 0 || code == 1),
            "run {i} of 10: exit {code}, {failed:?}\nserver log:\n{}",
            server.log_text()
        );
    }
    let log = server.stop();
    // Every session was ended by its client, none left to linger.
    let ended = log.matches("session end").count();
    let by_client = log.matches("reason=client-ended").count();
    assert!(ended >= 20 && ended == by_client, "{log}");
}

/// Hold one live session open from this process, as a check in progress would.
fn hold_session(addr: SocketAddr) -> (tokio::runtime::Runtime, pathdoc_proto::FramedConn) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let channel = pathdoc_proto::Channel::Control {
        check: pathdoc_proto::CheckKind::Speed,
        resume: None,
    };
    let (conn, _) = rt
        .block_on(pathdoc_proto::connect(
            addr,
            None,
            channel,
            Duration::from_secs(5),
        ))
        .unwrap();
    (rt, conn)
}

#[test]
fn a_refusal_is_worded_for_the_user_and_logged_for_the_operator() {
    let server = Server::on_free_port(&["--max-sessions-per-ip", "1", "--log-format", "json"]);
    let held = hold_session(server.addr);
    let (code, out, err) = run(
        quick_check(&server.addr.to_string()),
        Duration::from_secs(60),
    );
    let report = parse_report(code, &out, &err);
    // A refusal for want of room is a server-busy WARN in each check, not a failure.
    assert!(check_failures(&report).is_empty(), "{report:#}");
    let busy: Vec<&Value> = support::findings(&report)
        .into_iter()
        .filter(|f| f["id"] == "server-busy")
        .collect();
    assert_eq!(busy.len(), 3, "mtu, upload, download: {report:#}");
    for f in busy {
        let said = f["summary"].as_str().unwrap();
        assert!(
            said.contains("1 concurrent session per client address")
                && said.contains("--max-sessions-per-ip")
                && !said.contains("LimitExceeded"),
            "{said}"
        );
        assert_eq!(f["status"], "warn");
    }
    assert_eq!(code, 1, "{report:#}");
    drop(held);
    let log = server.stop();
    let refused: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "refused")
        .collect();
    assert!(
        refused.iter().any(|r| r["reason"] == "sessions-per-client"
            && r["limit"] == 1
            && r["client"]
                .as_str()
                .is_some_and(|c| c.starts_with("127.0.0.1:"))),
        "{log}"
    );
}

#[test]
fn json_logs_are_json_only_and_text_logs_have_no_colour_in_files() {
    for format in ["json", "text"] {
        let server = Server::on_free_port(&["--log-format", format]);
        let (code, out, err) = run(
            quick_check(&server.addr.to_string()),
            Duration::from_secs(60),
        );
        parse_report(code, &out, &err);
        let log = server.stop();
        assert!(!log.contains('\u{1b}'), "ANSI escape in a log file:\n{log}");
        assert!(
            log.contains("session start") && log.contains("session end"),
            "{log}"
        );
        if format == "json" {
            for line in log.lines() {
                let v: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{log}"));
                assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
                assert_eq!(v["schema"], "pathdoc.log/1", "{line}");
            }
            let end: Value = log
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .find(|v| v["message"] == "session end" && v["check"] == "speed")
                .expect("a speed session end line");
            assert!(end["duration_s"].as_f64().unwrap() > 0.0, "{end}");
            assert!(
                end["bytes_received"].as_u64().unwrap() > 0
                    || end["bytes_sent"].as_u64().unwrap() > 0,
                "{end}"
            );
        }
    }
}

#[test]
fn colours_only_on_a_terminal_without_no_color() {
    let port = free_loopback_port();
    // `script` gives the server a terminal; --once makes it exit without a signal.
    let run_in_tty = |no_color: bool| {
        let listen = format!("127.0.0.1:{port}");
        let server_cmd = format!("{PATHDOC} server --once --listen {listen}");
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &server_cmd, "/dev/null"]);
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr: SocketAddr = listen.parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "server in a tty did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut check = Command::new(PATHDOC);
        check.args(["check", &listen, "--mtu", "--mtu-bulk-ms", "100", "--json"]);
        let (code, out, err) = run(check, Duration::from_secs(60));
        parse_report(code, &out, &err);
        let output = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    let coloured = run_in_tty(false);
    assert!(
        coloured.contains("\u{1b}["),
        "no colour on a terminal:\n{coloured}"
    );
    let plain = run_in_tty(true);
    assert!(
        plain.contains("session end") && !plain.contains('\u{1b}'),
        "{plain}"
    );
}

#[test]
fn listen_takes_a_bare_port_and_a_host_name() {
    let port = free_loopback_port();
    // A bare port listens on every IPv4 address.
    let server = Server::start(
        format!("127.0.0.1:{port}").parse().unwrap(),
        &["--listen", &port.to_string()],
    );
    assert!(server.log_text().contains(&format!("0.0.0.0:{port}")));
    drop(server);
    let port = free_loopback_port();
    let server = Server::start(
        format!("127.0.0.1:{port}").parse().unwrap(),
        &["--listen", &format!("localhost:{port}")],
    );
    let mut check = Command::new(PATHDOC);
    check.args([
        "check",
        &format!("127.0.0.1:{port}"),
        "--mtu",
        "--mtu-bulk-ms",
        "100",
        "--json",
    ]);
    let (code, out, err) = run(check, Duration::from_secs(60));
    let report = parse_report(code, &out, &err);
    assert!(check_failures(&report).is_empty(), "{report}");
    drop(server);
    let port = free_loopback_port();
    Server::start(
        format!("127.0.0.1:{port}").parse().unwrap(),
        &["--listen", "127.0.0.1", "--port", &port.to_string()],
    );
}

#[test]
fn nonsensical_limits_and_flags_are_refused_at_startup_with_exit_2() {
    let port = free_loopback_port().to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["--max-sessions-per-ip", "0"], "--max-sessions-per-ip 0"),
        (
            &["--max-connections-per-ip", "0"],
            "--max-connections-per-ip 0",
        ),
        (&["--max-session", "0s"], "--max-session"),
        (&["--max-session", "10"], "missing unit"),
        (
            &["--listen", "127.0.0.1:1", "--port", "2"],
            "give the port once",
        ),
        (&["--ipv6-prefix", "0"], "--ipv6-prefix"),
    ];
    for (args, expected) in cases {
        let mut cmd = Command::new(PATHDOC);
        cmd.args(["server", "--listen", &format!("127.0.0.1:{port}")]);
        if args[0] == "--listen" {
            cmd = Command::new(PATHDOC);
            cmd.arg("server");
        }
        cmd.args(*args);
        let (code, _, err) = run(cmd, Duration::from_secs(10));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(
            err.lines().count() <= 3,
            "{args:?}: one short error, got {err}"
        );
    }
}

#[test]
fn the_bind_error_names_its_cause_once() {
    let server = Server::on_free_port(&[]);
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["server", "--listen", &server.addr.to_string()]);
    let (code, _, err) = run(cmd, Duration::from_secs(10));
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.matches("in use").count(), 1, "{err}");
    // Under JSON logs the error is a JSON line too.
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["server", "--json", "--listen", &server.addr.to_string()]);
    let (code, out, err) = run(cmd, Duration::from_secs(10));
    assert_eq!(code, 2, "{err}");
    // …and, as with every command under `--json`, the error document on stdout (docs/output.md).
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(doc["schema"], "pathdoc.error/1", "{out}");
    assert_eq!(doc["command"], "server", "{out}");
    assert_eq!(doc["exit_code"], 2, "{out}");
    assert!(
        doc["error"]["message"].as_str().unwrap().contains("in use"),
        "{out}"
    );
    for line in err.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{line}");
        assert_eq!(v["schema"], "pathdoc.log/1", "{line}");
    }
    assert!(err.contains("\"level\":\"ERROR\""), "{err}");
}

#[test]
fn once_serves_one_client_then_exits() {
    let port = free_loopback_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut server = Server::start(addr, &["--once", "--listen", &addr.to_string()]);
    let (code, out, err) = run(quick_check(&addr.to_string()), Duration::from_secs(60));
    let report = parse_report(code, &out, &err);
    assert!(check_failures(&report).is_empty(), "{report}");
    let mut child = server.take_child();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("--once server still running 15 s after its client finished");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}\n{}", server.log_text());
}

#[test]
fn a_udp_port_held_by_another_program_stops_the_start() {
    // Another program holds the UDP port, even with SO_REUSEADDR (which would let a careless
    // second bind share it).
    let squatter = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    squatter.set_reuse_address(true).unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    squatter.bind(&addr.into()).unwrap();
    let port = squatter.local_addr().unwrap().as_socket().unwrap().port();
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["server", "--listen", &format!("127.0.0.1:{port}")]);
    let (code, _, err) = run(cmd, Duration::from_secs(10));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port} (UDP"))
            && err.matches("in use").count() == 1,
        "{err}"
    );
}

/// Send `request` on a fresh control connection of `check` and return the reply frame.
fn ask_raw(addr: SocketAddr, check: pathdoc_proto::CheckKind, request: &Value) -> (Value, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let channel = pathdoc_proto::Channel::Control {
            check,
            resume: None,
        };
        let t = Duration::from_secs(5);
        let (mut conn, _) = pathdoc_proto::connect(addr, None, channel, t).await.unwrap();
        conn.send(request).await.unwrap();
        let first: Value = conn.recv_timeout(t, "a reply").await.unwrap();
        // Still served afterwards: a well-formed request gets its answer.
        let follow_up = match check {
            pathdoc_proto::CheckKind::Idle => serde_json::json!({"type": "heartbeat", "seq": 1}),
            pathdoc_proto::CheckKind::Mtu => serde_json::json!({"type": "start"}),
            pathdoc_proto::CheckKind::Speed => serde_json::json!({"type": "start", "mode": "upload", "streams": 0, "duration_ms": 1000, "interval_ms": 1000}),
            other => panic!("no follow-up request for {other:?}"),
        };
        conn.send(&follow_up).await.unwrap();
        let second: Value = conn.recv_timeout(t, "a second reply").await.unwrap();
        (first, second)
    })
}

#[test]
fn every_message_the_server_cannot_act_on_gets_an_error_frame() {
    use pathdoc_proto::CheckKind;
    let server = Server::on_free_port(&[]);
    let nonsense = serde_json::json!({"type": "make-coffee", "cups": 3});
    let (reply, next) = ask_raw(server.addr, CheckKind::Idle, &nonsense);
    assert_eq!(reply["type"], "error", "{reply}");
    assert!(
        reply["message"].as_str().unwrap().contains("malformed"),
        "{reply}"
    );
    assert_eq!(next["type"], "heartbeat-ack", "{next}");
    let (reply, next) = ask_raw(server.addr, CheckKind::Mtu, &nonsense);
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(next["type"], "started", "{next}");
    // A speed start with a field of the wrong type used to close the connection silently.
    let bad_start = serde_json::json!({"type": "start", "mode": "upload", "streams": "eight", "duration_ms": 1000, "interval_ms": 1000});
    let (reply, next) = ask_raw(server.addr, CheckKind::Speed, &bad_start);
    assert_eq!(reply["type"], "refused", "{reply}");
    assert!(
        reply["reason"].as_str().unwrap().contains("malformed"),
        "{reply}"
    );
    assert_eq!(next["type"], "refused", "{next}");
    assert!(
        next["reason"].as_str().unwrap().contains("streams must be"),
        "{next}"
    );
}

#[test]
fn the_server_logs_its_counters() {
    let server = Server::on_free_port(&["--log-format", "json", "--stats-interval", "1s"]);
    let (code, out, err) = run(
        quick_check(&server.addr.to_string()),
        Duration::from_secs(60),
    );
    parse_report(code, &out, &err);
    std::thread::sleep(Duration::from_millis(1500));
    let log = server.stop();
    let last = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v["message"] == "counters")
        .unwrap_or_else(|| panic!("no counters line:\n{log}"));
    for field in [
        "connections",
        "sessions_live",
        "sessions_lingering",
        "sessions_created",
        "refused",
        "streams",
        "streams_max",
        "bulk",
        "fds",
        "threads",
        "rss_bytes",
    ] {
        assert!(last[field].is_u64(), "{field} missing in {last}");
    }
    assert!(last["sessions_created"].as_u64().unwrap() >= 3, "{last}");
    assert_eq!(last["sessions_live"], 0, "{last}");
}

/// Hello with a client-chosen `client_version`, then hold the control connection for a moment.
async fn hello_with_version(addr: SocketAddr, version: String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut conn = pathdoc_proto::FramedConn::new(stream).unwrap();
    let hello = pathdoc_proto::Hello {
        token: None,
        client_version: version,
        revision: pathdoc_proto::PROTOCOL_REVISION,
        channel: pathdoc_proto::Channel::Control {
            check: pathdoc_proto::CheckKind::Speed,
            resume: None,
        },
    };
    pathdoc_proto::write_preamble(conn.stream_mut())
        .await
        .unwrap();
    conn.send(&hello).await.unwrap();
    pathdoc_proto::read_preamble(conn.stream_mut())
        .await
        .unwrap();
    let _: Value = conn.recv().await.unwrap();
}

/// A client's version goes into the "session start" line: cut to 64 characters, escaped (a
/// newline forged log lines, an escape reached the operator's terminal), and the log's rate
/// limit counts bytes as well as lines (64 KiB versions made 53.6 MB of log in 30 s).
#[test]
fn a_hostile_client_version_cannot_forge_log_lines_or_flood_the_log() {
    let server = Server::on_free_port(&["--log-format", "text"]);
    let chunk = format!(
        "\nFORGED refused\u{1b}]52;c;cGF5bG9hZA==\u{7}\u{1b}[2J{}",
        "A".repeat(200)
    );
    let version: String = chunk.repeat(58_000 / chunk.len());
    assert!(version.len() > 50_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..3 {
            let burst: Vec<_> = (0..40)
                .map(|_| tokio::spawn(hello_with_version(server.addr, version.clone())))
                .collect();
            for b in burst {
                b.await.unwrap();
            }
        }
    });
    let seconds = started.elapsed().as_secs_f64().max(1.0);
    let log = server.stop();
    assert!(
        !log.contains('\u{1b}') && !log.contains('\u{7}'),
        "raw escape in the log"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED")),
        "a client forged a log line"
    );
    let starts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("session start"))
        .collect();
    assert!(!starts.is_empty(), "{log}");
    for line in &starts {
        assert!(line.len() < 600, "{} bytes: {line}", line.len());
        assert!(line.contains("\\nFORGED"), "{line}");
    }
    // 16 KiB/s of session lines, plus the other lines of a short run.
    let budget = (seconds + 1.0) * 16.0 * 1024.0 + 8.0 * 1024.0;
    assert!(
        (log.len() as f64) < budget,
        "{} bytes of log in {seconds:.1} s",
        log.len()
    );
}

/// A server started under a small open-file limit raises its soft limit to the hard one and
/// shrinks the caps it could not honour (saying so), so its clients meet "the server is busy"
/// refusals instead of "Too many open files".
#[test]
fn caps_shrink_to_the_open_file_limit_the_server_holds() {
    use std::os::unix::process::CommandExt;
    let port = free_loopback_port();
    let log = std::env::temp_dir().join(format!("pathdoc-fd-limit-{}.log", std::process::id()));
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["server", "--log-format", "json", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: setrlimit is async-signal-safe; it only reads the struct we pass.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 600,
                rlim_max: 1200,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, out, err) = run(quick_check(&addr.to_string()), Duration::from_secs(60));
    let report = parse_report(code, &out, &err);
    // SAFETY: kill has no memory-safety preconditions; the pid is our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(check_failures(&report).is_empty(), "{report}\n{text}");
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let fitted = lines.iter().find(|l| l["open_file_limit"].is_u64());
    match fitted {
        // The hard limit held: the soft one was raised to it and the caps shrunk to fit.
        Some(line) if line["open_file_limit"] == 1200 => {
            assert_eq!(line["raised_from"], 600, "{line}");
            assert_eq!(line["level"], "WARN", "{line}");
            let connections = line["max_connections"].as_u64().unwrap();
            let sessions = line["max_sessions"].as_u64().unwrap();
            assert!(connections + 3 * sessions + 320 <= 1200, "{line}");
            assert!(
                line["message"]
                    .as_str()
                    .unwrap()
                    .contains("--max-connections"),
                "{line}"
            );
        }
        // Allowed to raise the hard limit too (CAP_SYS_RESOURCE): nothing to shrink.
        Some(line) => assert!(
            line["open_file_limit"].as_u64().unwrap() >= 112_608,
            "{line}"
        ),
        None => panic!("no open-file limit line in the log:\n{text}"),
    }
}

/// `check --help` quotes the server's real default per-address connection limit.
#[test]
fn check_help_quotes_the_servers_default_connection_limit() {
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["check", "--help"]);
    let (code, out, _) = run(cmd, Duration::from_secs(10));
    assert_eq!(code, 0);
    let limit = pathdoc_server::Limits::default().connections_per_ip;
    assert!(
        out.contains(&format!("per-address limit is {limit} by default")),
        "{out}"
    );
}
