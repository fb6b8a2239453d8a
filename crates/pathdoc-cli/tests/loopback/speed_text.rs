//! `pathdoc speed` in text mode starts with an iperf3-like table: one row per interval (per
//! stream and their sum with -P), then a summary row, then the findings. Loopback.

use crate::support;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");

#[test]
fn speed_prints_one_row_per_interval_and_a_summary() {
    let listen = format!("127.0.0.1:{}", support::free_loopback_port());
    let mut server = Command::new(PATHDOC)
        .args(["server", "--listen", &listen])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&listen).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = |args: &[&str]| {
        let mut cmd = Command::new(PATHDOC);
        cmd.arg("speed").arg(&listen).args(args);
        support::run(cmd, Duration::from_secs(60))
    };
    let (code, out, err) = run(&["-t", "3", "-R"]);
    let (code_p, out_p, err_p) = run(&["-t", "2", "-P", "2", "--interval", "500ms"]);
    let _ = server.kill();
    let _ = server.wait();

    // Loopback on a small host is CPU-bound (both ends and the kernel on the same cores):
    // `cpu-limited` (exit 1) is a true verdict there; this test is about the table.
    assert!(code == 0 || code == 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("download (server→client), 1 stream"),
        "{out}"
    );
    assert!(
        lines[1].contains("goodput") && lines[1].contains("retr"),
        "{out}"
    );
    let rows: Vec<&&str> = lines.iter().take_while(|l| !l.is_empty()).skip(2).collect();
    // Three 1-s intervals (and, downloading, maybe a short last one up to the server's final
    // sample), then the summary.
    assert!((4..=5).contains(&rows.len()), "{out}");
    assert!(rows.last().unwrap().contains("summary"), "{out}");
    assert!(out.contains("Overall:"), "{out}");

    assert!(code_p == 0 || code_p == 1, "{out_p}{err_p}");
    let sums = out_p.lines().filter(|l| l.starts_with("  [SUM]")).count();
    let streams = out_p.lines().filter(|l| l.starts_with("  [  1]")).count();
    assert!(
        (5..=6).contains(&sums),
        "four 0.5-s intervals and the summary:\n{out_p}"
    );
    assert_eq!(streams, sums - 1, "{out_p}");
}
