//! `pathdoc speed` on loopback (no lab needed): byte mode is exact, bidirectional and parallel
//! runs report both directions with intervals, bad input and an absent server fail cleanly.

use crate::support;

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{free_loopback_port, parse_report, run, PATHDOC};

struct Server(Child, SocketAddr);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server() -> Server {
    server_with(&[])
}

fn server_with(extra: &[&str]) -> Server {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_loopback_port())
        .parse()
        .unwrap();
    let child = Command::new(PATHDOC)
        .args([
            "server",
            "--listen",
            &addr.to_string(),
            "--max-test-secs",
            "3",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Server(child, addr)
}

/// `pathdoc speed <args>` within 30 s; returns (exit code, stdout, stderr).
fn speed(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(PATHDOC);
    cmd.arg("speed").args(args);
    run(cmd, Duration::from_secs(30))
}

fn dirs(report: &Value) -> &Vec<Value> {
    report["data"]["throughput"]["runs"][0]["directions"]
        .as_array()
        .unwrap()
}

#[test]
fn byte_mode_delivers_exactly_the_requested_payload() {
    let s = server();
    let (code, out, err) = speed(&[
        &s.1.to_string(),
        "--reverse",
        "--bytes",
        "64MiB",
        "--streams",
        "2",
        "--json",
    ]);
    let report = parse_report(code, &out, &err);
    assert!(code == 0 || code == 1, "{code} {err}");
    let d = &dirs(&report)[0];
    assert_eq!(d["direction"], "download");
    assert_eq!(d["payload_bytes"].as_u64().unwrap(), 64 << 20);
    assert_eq!(d["streams"], 2);
}

#[test]
fn bidirectional_run_reports_both_directions_with_intervals_and_capped_duration() {
    let s = server();
    // Asks for 10 s; the server caps tests at 3 s.
    let (code, out, err) = speed(&[
        &s.1.to_string(),
        "--bidir",
        "--time",
        "10s",
        "--interval",
        "500ms",
        "--json",
    ]);
    let report = parse_report(code, &out, &err);
    let d = dirs(&report);
    assert_eq!(d.len(), 2);
    for x in d {
        let secs = x["duration_s"].as_f64().unwrap();
        assert!((2.5..3.6).contains(&secs), "{secs}");
        assert!(x["goodput_bps"].as_f64().unwrap() > 1e8, "{x}");
        assert!(x["intervals"].as_array().unwrap().len() >= 5);
        assert!(x["wire"]["ip_bps"].as_f64().unwrap() >= x["goodput_bps"].as_f64().unwrap());
    }
    let units: Vec<&str> = report["findings"][0]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["value"]["unit"].as_str().unwrap())
        .collect();
    assert!(
        units.contains(&"bit/s goodput") && units.contains(&"bit/s wire"),
        "{units:?}"
    );
}

#[test]
fn bad_input_and_absent_server_fail_with_exit_2() {
    let s = server();
    let (code, _, err) = speed(&[&s.1.to_string(), "--streams", "99"]);
    assert_eq!(code, 2, "{err}");
    // Refused by the server: the report says the test could not run, and why.
    let (code, out, err) = speed(&[&s.1.to_string(), "--time", "1s", "--cc", "warp-drive"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("warp-drive") && out.contains("COULD NOT RUN"),
        "{out}{err}"
    );
    let (code, _, err) = speed(&[
        &format!("127.0.0.1:{}", free_loopback_port()),
        "--time",
        "1s",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("connection refused"), "{err}");
}

/// A server lost halfway through `check --throughput` does not cost the finished upload: the
/// server is killed the moment the client reports the upload's result, so the download (a new
/// session) cannot run. The report has the upload's rate and verdict plus a finding naming the
/// download that did not run. (Sessions end explicitly now, so a per-client session limit no
/// longer refuses the second test; losing the server is the failure a user still meets.)
#[test]
fn a_server_lost_halfway_keeps_the_finished_upload() {
    use std::io::{BufRead, BufReader, Read};
    let mut s = server();
    let mut child = Command::new(PATHDOC)
        .args([
            "check",
            &s.1.to_string(),
            "--throughput",
            "--throughput-time",
            "1s",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let mut err = String::new();
    let mut killed = false;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if !killed && line.contains("throughput: upload: ") && line.contains("goodput") {
            let _ = s.0.kill();
            let _ = s.0.wait();
            killed = true;
        }
        err.push_str(&line);
        err.push('\n');
    }
    let code = child.wait().unwrap().code().unwrap_or(-1);
    let out = out.join().unwrap();
    assert!(killed, "no upload result on stderr:\n{err}");
    let report = parse_report(code, &out, &err);
    let ids: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"upload-rate"), "{ids:?}");
    let missing = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "check-failed")
        .unwrap_or_else(|| panic!("{ids:?}"));
    assert_eq!(missing["status"], "inconclusive");
    assert_eq!(missing["direction"], "server-to-client");
    assert!(
        missing["title"].as_str().unwrap().contains("download")
            && missing["summary"]
                .as_str()
                .unwrap()
                .contains("before it finished"),
        "{missing:#}"
    );
    assert_eq!(dirs(&report)[0]["direction"], "upload");
    assert_eq!(
        report["data"]["throughput"]["not_measured"][0]["mode"],
        "download"
    );
    // Something was measured: inconclusive (3), or 1 when the upload's own verdict is a warning
    // (loopback is CPU-bound), never "could not run" (2).
    assert!(code == 3 || code == 1, "{code} {ids:?}");
}

/// Every report says when, where and how it was made; the auth token never reaches it, and
/// `pathdoc report` shows the saved provenance rather than its own.
#[test]
fn reports_carry_provenance_without_the_auth_token() {
    let s = server_with(&["--auth-token", "s3cret-token"]);
    let (code, out, err) = speed(&[
        &s.1.to_string(),
        "--auth-token",
        "s3cret-token",
        "--bytes",
        "1MiB",
        "--json",
    ]);
    let report = parse_report(code, &out, &err);
    assert!(!out.contains("s3cret-token"), "{out}");
    let p = &report["provenance"];
    let started = p["started"].as_str().unwrap();
    // ISO 8601 with the zone offset: 2026-11-26T15:54:05+01:00
    assert_eq!(started.len(), 25, "{started}");
    assert!(matches!(&started[19..20], "+" | "-"), "{started}");
    let took = p["duration_s"].as_f64().unwrap();
    assert!((0.0..30.0).contains(&took), "{took}");
    assert_eq!(p["pathdoc_version"], env!("CARGO_PKG_VERSION"));
    assert!(!p["commit"].as_str().unwrap().is_empty());
    assert!(!p["hostname"].as_str().unwrap().is_empty());
    assert!(p["os"].as_str().unwrap().starts_with("Linux "), "{p}");
    let argv: Vec<&str> = p["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        argv[0].ends_with("pathdoc") && argv[1] == "speed",
        "{argv:?}"
    );
    let at = argv.iter().position(|a| *a == "--auth-token").unwrap();
    assert_eq!(argv[at + 1], "<redacted>");
    assert_eq!(argv.last(), Some(&"--json"));

    // Read back later: the saved run's provenance, in the text footer too.
    let saved = std::env::temp_dir().join(format!("pathdoc-prov-{}.json", std::process::id()));
    std::fs::write(&saved, &out).unwrap();
    let mut cmd = Command::new(PATHDOC);
    cmd.arg("report").arg(&saved);
    let (_, text, err) = run(cmd, Duration::from_secs(10));
    let _ = std::fs::remove_file(&saved);
    assert!(
        text.contains(&format!("Run: {started} for ")),
        "{text}{err}"
    );
    assert!(
        text.contains("Command: ") && text.contains("--auth-token '<redacted>'"),
        "{text}"
    );
    assert!(text.contains("\nBottom line"), "{text}");
}
