//! The HTTP contract on loopback: tokens, unknown modules and unlisted targets are refused with
//! their own status and counted; an allowed target whose server is down is a scrape that
//! answers `probe_success 0`; `/-/healthy` needs no token; shutdown returns promptly.

use crate::common;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// The exporter on a free loopback port, as a base URL.
fn start(config: &str) -> (String, CancellationToken, std::thread::JoinHandle<()>) {
    let (addr, shutdown, thread) = common::serve_on_loopback(config);
    (format!("http://{addr}"), shutdown, thread)
}

const TOKEN: &str = "http-test-token";

fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut req = agent.get(url);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap())
}

#[test]
fn refusals_have_their_own_status_and_a_dead_server_is_probe_success_0() {
    // Port 1 on loopback: nothing listens, the check gets "connection refused" at once.
    let (base, shutdown, thread) = start(&format!(
        "auth_tokens = [\"{TOKEN}\"]\nprobe_timeout = \"20s\"\n\
         [modules.mtu]\ncheck = \"mtu\"\n[[targets]]\naddress = \"127.0.0.1:1\"\nmodules = [\"mtu\"]\n"
    ));
    let probe = |q: &str, token| get(&format!("{base}/probe?{q}"), token);
    assert_eq!(get(&format!("{base}/-/healthy"), None).0, 200);
    assert_eq!(probe("target=127.0.0.1:1&module=mtu", None).0, 401);
    assert_eq!(
        probe("target=127.0.0.1:1&module=mtu", Some("wrong-token")).0,
        401
    );
    assert_eq!(probe("target=127.0.0.1:1", Some(TOKEN)).0, 400);
    let (code, body) = probe("target=127.0.0.1:1&module=dns", Some(TOKEN));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("unknown module \"dns\""), "{body}");
    let (code, body) = probe("target=192.0.2.7&module=mtu", Some(TOKEN));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("not allowed"), "{body}");

    let (code, body) = probe("target=127.0.0.1:1&module=mtu", Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("probe_success 0.0\n"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    let (code, metrics) = get(&format!("{base}/metrics"), Some(TOKEN));
    assert_eq!(code, 200);
    for line in [
        "pathdoc_exporter_refused_requests_total{reason=\"unauthorized\"} 2",
        "pathdoc_exporter_refused_requests_total{reason=\"bad-request\"} 1",
        "pathdoc_exporter_refused_requests_total{reason=\"unknown-module\"} 1",
        "pathdoc_exporter_refused_requests_total{reason=\"target-not-allowed\"} 1",
        "pathdoc_exporter_probes_total{module=\"mtu\",result=\"failure\"} 1",
    ] {
        assert!(metrics.contains(line), "missing {line}:\n{metrics}");
    }
    let stopping = Instant::now();
    shutdown.cancel();
    thread.join().unwrap();
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        stopping.elapsed()
    );
}
