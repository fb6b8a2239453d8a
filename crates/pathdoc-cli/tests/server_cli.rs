//! `pathdoc server` as an operator and its users meet it, on loopback (no lab needed): repeated
//! checks are never locked out, refusals are logged and worded, logs are clean in files and
//! pipes, `--listen` takes what people write, nonsensical limits are refused, `--once` exits.

mod support;

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{free_loopback_port, parse_report, run, PATHDOC};

/// A `pathdoc server` child whose stderr goes to a file; SIGTERM and reaped on drop.
struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    log: PathBuf,
}

impl Server {
    /// Start `pathdoc server <args>` listening on `addr` (given via `listen_args`), stderr to a
    /// file, and wait until it accepts connections.
    fn start(addr: SocketAddr, args: &[&str]) -> Server {
        let log = std::env::temp_dir().join(format!(
            "pathdoc-server-test-{}-{}.log",
            std::process::id(),
            addr.port()
        ));
        let child = Command::new(PATHDOC)
            .arg("server")
            .args(args)
            .env_remove("NO_COLOR")
            .env_remove("PATHDOC_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let server = Server {
            child: Some(child),
            addr,
            log,
        };
        server.wait_listening();
        server
    }

    fn on_free_port(extra: &[&str]) -> Server {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_loopback_port())
            .parse()
            .unwrap();
        let listen = addr.to_string();
        let mut args = vec!["--listen", &listen];
        args.extend_from_slice(extra);
        Server::start(addr, &args)
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server did not start; its log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, wait (≤ 10 s) and return the whole log.
    fn stop(mut self) -> String {
        self.terminate();
        self.log_text()
    }

    fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions; the pid is our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The shortest full `check --mtu --throughput` (about 2 s on loopback).
fn quick_check(server: &str) -> Command {
    let mut cmd = Command::new(PATHDOC);
    cmd.args([
        "check",
        server,
        "--mtu",
        "--throughput",
        "--throughput-time",
        "500ms",
        "--mtu-bulk-ms",
        "200",
        "--mtu-wait-ms",
        "100",
        "--json",
    ]);
    cmd
}

fn check_failures(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "check-failed")
        .map(|f| f["summary"].to_string())
        .collect()
}

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
    let failed = check_failures(&report).join("\n");
    assert!(
        failed.contains("1 concurrent session per client address")
            && failed.contains("--max-sessions-per-ip")
            && !failed.contains("LimitExceeded"),
        "{failed}"
    );
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
    let (code, _, err) = run(cmd, Duration::from_secs(10));
    assert_eq!(code, 2, "{err}");
    for line in err.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{line}");
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
    let mut child = server.child.take().unwrap();
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
