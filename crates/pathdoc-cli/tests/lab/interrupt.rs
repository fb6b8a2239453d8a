//! Ctrl-C (SIGINT) or SIGTERM during long runs keeps what was measured: a partial report with
//! `interrupted: true`, exit 130, and nothing left behind — on loopback for the throughput check
//! and `pathdoc speed`, and in a lab for the idle check (scaled down through the same flags users
//! run). Also: a piped run reports progress as plain status lines.

use crate::support;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pathdoc_lab::Topology;
use serde_json::Value;
use support::ServerLab;

const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");
const STEM: &str = "pdc";

/// Kills a child process even when an assertion fails.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn loopback_server() -> (Kill, String) {
    let listen = format!("127.0.0.1:{}", support::free_loopback_port());
    let child = Command::new(PATHDOC)
        .args(["server", "--listen", &listen])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Kill(child), listen)
}

struct Interrupted {
    code: i32,
    stdout: String,
    stderr: String,
    /// From the signal to the exit.
    stop_secs: f64,
    pid: u32,
}

/// Start `cmd`, wait until its stderr shows `marker` and then `after` more, send SIGINT, and
/// collect everything. Panics (after killing it) if it does not exit within 20 s of the signal.
fn interrupt(cmd: Command, marker: &str, after: Duration) -> Interrupted {
    signal(cmd, marker, after, libc::SIGINT)
}

/// [`interrupt`] with another signal.
fn signal(mut cmd: Command, marker: &str, after: Duration, signal: i32) -> Interrupted {
    let mut child = support::with_sigint_default(&mut cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out_pipe = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let (seen_tx, seen_rx) = mpsc::channel();
    let err_pipe = child.stderr.take().unwrap();
    let marker = marker.to_string();
    let stderr = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err_pipe).lines().map_while(Result::ok) {
            if line.contains(&marker) {
                let _ = seen_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let mut child = Kill(child);
    seen_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the run never reached the point to interrupt");
    std::thread::sleep(after);
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "still running 20 s after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    Interrupted {
        code: status.code().unwrap_or(-1),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        stop_secs: t0.elapsed().as_secs_f64(),
        pid,
    }
}

/// The partial report: exit 130, `interrupted: true`, rendered from what was measured.
fn partial_report(r: &Interrupted) -> Value {
    assert_eq!(r.code, 130, "{}{}", r.stdout, r.stderr);
    let report = support::parse_report(r.code, &r.stdout, &r.stderr);
    assert_eq!(report["interrupted"], true, "{report:#}");
    assert!(
        r.stop_secs < 8.0,
        "took {:.1} s to stop after SIGINT",
        r.stop_secs
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{}", r.pid)).exists(),
        "pathdoc still running"
    );
    report
}

#[test]
fn ctrl_c_during_the_throughput_check_prints_a_partial_report() {
    let _shared = crate::support::shared();
    let (_server, listen) = loopback_server();
    let mut cmd = Command::new(PATHDOC);
    cmd.args([
        "check",
        &listen,
        "--mtu",
        "--throughput",
        "--idle",
        "--throughput-time",
        "20s",
        "--json",
    ]);
    let r = interrupt(cmd, "throughput:", Duration::from_millis(1500));
    let report = partial_report(&r);
    // The mtu check finished before the interrupt and keeps its findings.
    let mtu = support::findings(&report)
        .into_iter()
        .filter(|f| f["check"] == "mtu" && !f["id"].as_str().unwrap().starts_with("check-"))
        .count();
    assert!(mtu > 0, "{:?}", support::ids(&report));
    // The idle check never started.
    let idle_not_run = support::findings(&report)
        .into_iter()
        .any(|f| f["id"] == "check-not-run" && f["check"] == "idle");
    assert!(idle_not_run, "{:?}", support::ids(&report));
    // Text mode says so in words.
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["speed", &listen, "-t", "20s"]);
    let r = interrupt(cmd, "throughput:", Duration::from_millis(1500));
    assert_eq!(r.code, 130, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("Overall: INTERRUPTED — partial results"),
        "{}",
        r.stdout
    );
}

#[test]
fn sigterm_during_speed_prints_a_partial_json_report() {
    let _shared = crate::support::shared();
    let (_server, listen) = loopback_server();
    let mut cmd = Command::new(PATHDOC);
    cmd.args(["speed", &listen, "-t", "20", "--json"]);
    let r = signal(
        cmd,
        "throughput:",
        Duration::from_millis(1500),
        libc::SIGTERM,
    );
    let report = partial_report(&r);
    assert_eq!(report["command"], "speed");
    assert!(!support::findings(&report).is_empty(), "{report:#}");
}

#[test]
fn ctrl_c_during_the_idle_check_in_a_lab_leaves_nothing_behind() {
    let _shared = crate::support::shared();
    let l = ServerLab::up(
        STEM,
        "idle",
        &Topology::from_toml(
            "[[hop]]\nkind = \"nat\"\nstrict = true\nconntrack = { tcp_established = 30 }\n",
        )
        .unwrap(),
    );
    let server = l.lab.addr("server").to_string();
    let mut cmd = l.lab.command("client", PATHDOC);
    cmd.args([
        "check",
        &server,
        "--idle",
        "--idle-max",
        "60s",
        "--idle-resolution",
        "1s",
        "--json",
    ]);
    let r = interrupt(cmd, "idle:", Duration::from_secs(3));
    let report = partial_report(&r);
    assert_eq!(report["command"], "check");
    let pid = r.pid;
    l.down().unwrap();
    support::assert_nothing_left(STEM, "idle", &[pid]);
}

#[test]
fn a_piped_check_prints_plain_status_lines() {
    let _shared = crate::support::shared();
    let (_server, listen) = loopback_server();
    let mut cmd = Command::new(PATHDOC);
    cmd.args([
        "check",
        &listen,
        "--idle",
        "--idle-max",
        "6s",
        "--idle-resolution",
        "1s",
        "--idle-no-udp",
    ])
    // Scaled down like the check itself: a line per 2 s instead of per 30 s.
    .env("PATHDOC_PROGRESS_INTERVAL", "2s");
    let (code, out, err) = support::run(cmd, Duration::from_secs(60));
    assert!([0, 1, 3].contains(&code), "exit {code}\n{out}{err}");
    let idle_lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with('[') && l.contains("] idle: "))
        .collect();
    assert!(
        idle_lines.len() >= 3,
        "expected a status line every 2 s of a 6-s idle run:\n{err}"
    );
    // No terminal control sequences in a pipe.
    assert!(!err.contains('\u{1b}') && !err.contains('\r'), "{err:?}");
    assert!(out.contains("Overall:"), "{out}");
}
