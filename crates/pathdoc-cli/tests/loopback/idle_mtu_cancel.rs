//! The cancellation contract of the idle and mtu checks, on loopback against a real `pathdoc
//! server` (no lab, no root): once the token fires, the check stops probing, ends its server
//! session (its probe connections close) and returns what it measured, marked interrupted —
//! quickly, not after its horizon.

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pathdoc_core::{NoProgress, Status};
use support::{free_loopback_port, PATHDOC};
use tokio_util::sync::CancellationToken;

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
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Server(child)
}

/// Established TCP connections on loopback to (`remote`) or from (`local`) `port`, from
/// /proc/net/tcp: the probe connections of a session, both ends.
fn established(port: u16) -> (usize, usize) {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let (mut to, mut from) = (0, 0);
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[3] != "01" {
            continue;
        }
        let port_of = |a: &str| {
            a.rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        };
        if port_of(f[2]) == Some(port) {
            to += 1;
        }
        if port_of(f[1]) == Some(port) {
            from += 1;
        }
    }
    (to, from)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_cancelled_idle_run_returns_what_it_measured_quickly_and_ends_its_session() {
    let port = free_loopback_port();
    let _server = server(port);
    let mut cfg = pathdoc_idle::IdleConfig::new(format!("127.0.0.1:{port}").parse().unwrap());
    cfg.horizon = Duration::from_secs(120);
    cfg.resolution = Duration::from_secs(1);
    let cancel = CancellationToken::new();
    let rt = runtime();
    let (result, stopped_after, probes_during) = rt.block_on(async {
        let trigger = cancel.clone();
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            let during = established(port);
            trigger.cancel();
            (Instant::now(), during)
        });
        let result = pathdoc_idle::run(&cfg, &NoProgress, &cancel).await;
        let (fired, during) = canceller.await.unwrap();
        (result, fired.elapsed(), during)
    });
    let result = result.expect("an interrupted run is a result, not an error");
    assert!(
        probes_during.0 > 10,
        "the run had not opened its probes: {probes_during:?}"
    );
    assert!(
        stopped_after < Duration::from_secs(3),
        "took {stopped_after:?} to stop after the cancel"
    );
    assert!(result.interrupted);
    assert_eq!(result.data["interrupted"], true);
    // What was measured in 4 s: a lower bound, said to be cut short; nothing called a failure.
    let tcp = result
        .findings
        .iter()
        .find(|f| f.id == "tcp-idle-timeout")
        .unwrap();
    assert_eq!(tcp.status, Status::Info, "{tcp:#?}");
    assert!(tcp.summary.contains("interrupted"), "{}", tcp.summary);
    assert!(result.findings.iter().all(|f| f.status != Status::Fail));
    assert!(
        result
            .findings
            .iter()
            .any(|f| f.id.starts_with("udp-") && f.summary.contains("interrupted")),
        "{:#?}",
        result.findings
    );
    // The session ended: no probe connection is left open on either end.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = established(port);
        if left == (0, 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "probe connections left open (to, from the server port): {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_cancelled_mtu_run_returns_what_it_measured_quickly() {
    let port = free_loopback_port();
    let _server = server(port);
    let opts = pathdoc_mtu::MtuOptions {
        bulk: Duration::from_secs(3),
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let rt = runtime();
    let (result, stopped_after) = rt.block_on(async {
        let trigger = cancel.clone();
        // The MSS comparison takes milliseconds; the 3-s download is under way at 1 s.
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            trigger.cancel();
            Instant::now()
        });
        let r = pathdoc_mtu::run_check(
            format!("127.0.0.1:{port}").parse().unwrap(),
            None,
            &opts,
            &NoProgress,
            &cancel,
        )
        .await;
        (r, canceller.await.unwrap().elapsed())
    });
    let result = result.expect("an interrupted run is a result, not an error");
    assert!(
        stopped_after < Duration::from_secs(1),
        "took {stopped_after:?} to stop after the cancel"
    );
    assert!(result.interrupted);
    assert!(result.data.interrupted);
    assert!(result.data.mss.is_some(), "the MSS measured before is kept");
    let ids: Vec<(&str, Status)> = result
        .findings
        .iter()
        .map(|f| (f.id.as_str(), f.status))
        .collect();
    assert!(ids.contains(&("mss-unchanged", Status::Pass)), "{ids:?}");
    assert!(
        result.findings.iter().any(|f| f.id == "path-mtu"
            && f.status == Status::Inconclusive
            && f.summary.contains("interrupted")),
        "{ids:?}"
    );
}
