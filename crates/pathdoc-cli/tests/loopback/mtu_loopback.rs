//! `pathdoc check --mtu` against a server on loopback (no lab, no root): the interface MTU is
//! 65 536, larger than the largest probe, so the path MTU must be reported as "at least" the
//! probe limit, never as the probe cap itself.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::{find_dir, free_loopback_port, parse_report, run, PATHDOC};

/// `pathdoc server` on loopback, killed on drop.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server(port: u16) -> Server {
    let child = Command::new(PATHDOC)
        .args(["server", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn pathdoc server");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Server(child)
}

#[test]
fn loopback_path_mtu_is_reported_as_at_least_the_probe_limit() {
    let port = free_loopback_port();
    let _server = server(port);
    let mut cmd = Command::new(PATHDOC);
    cmd.args([
        "check",
        &format!("127.0.0.1:{port}"),
        "--mtu",
        "--mtu-bulk-ms",
        "200",
        "--json",
    ]);
    let (code, out, err) = run(cmd, Duration::from_secs(60));
    let r = parse_report(code, &out, &err);
    assert_eq!(code, 0, "{out}");
    for dir in ["client-to-server", "server-to-client"] {
        let f = find_dir(&r, "path-mtu", dir).unwrap_or_else(|| panic!("no path-mtu {dir}: {r:#}"));
        let title = f["title"].as_str().unwrap();
        assert!(
            title.contains("≥ 9000 B (probe limit)"),
            "{dir}: loopback's 65536-B MTU reported as {title}"
        );
    }
    assert_eq!(r["data"]["mtu"]["up"]["outcome"]["cap"], "probe-limit");
}
