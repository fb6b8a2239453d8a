//! A probe the pathdoc server refused for want of room is said to be that, not a path fault:
//! `probe_success 0` (nothing was measured), `pathdoc_server_busy 1` with the bound and limit
//! the server named, and `result="busy"` in the exporter's own probe counter. A real pathdoc
//! server with one session per client; another connection from the same address holds it.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pathdoc_proto::{Channel, CheckKind};
use pathdoc_server::{Limits, ServerConfig};

const TOKEN: &str = "busy-test-token";

/// A real pathdoc server (mtu and throughput) allowing one live session per client.
fn one_session_server() -> SocketAddr {
    common::pathdoc_server(
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            limits: Limits {
                sessions_per_ip: 1,
                ..Limits::default()
            },
            ..ServerConfig::default()
        },
        vec![
            pathdoc_mtu::MtuService::new(),
            Arc::new(pathdoc_speed::SpeedService::new()),
        ],
    )
}

fn get(url: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(resp.status().as_u16(), 200);
    resp.body_mut().read_to_string().unwrap()
}

#[test]
fn a_probe_the_server_has_no_room_for_is_server_busy_not_a_path_fault() {
    let server = one_session_server();
    let (addr, shutdown, thread) = common::serve_on_loopback(&format!(
        "auth_tokens = [\"{TOKEN}\"]\nprobe_timeout = \"20s\"\n\
         [modules.mtu]\ncheck = \"mtu\"\n\
         [modules.throughput]\ncheck = \"throughput\"\ntime = \"1s\"\n\
         [[targets]]\naddress = \"{server}\"\nmodules = [\"mtu\", \"throughput\"]\n"
    ));
    // Another client of the same address holds its one session meanwhile.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let channel = Channel::Control {
        check: CheckKind::Mtu,
        resume: None,
    };
    let held = rt
        .block_on(pathdoc_proto::connect(
            server,
            None,
            channel,
            Duration::from_secs(5),
        ))
        .unwrap();
    for module in ["mtu", "throughput"] {
        let body = get(&format!(
            "http://{addr}/probe?target={server}&module={module}"
        ));
        for line in [
            "probe_success 0.0\n",
            "pathdoc_server_busy 1.0\n",
            "pathdoc_server_busy_limit{reason=\"sessions-per-client\"} 1.0\n",
        ] {
            assert!(body.contains(line), "{module}: missing {line}{body}");
        }
    }
    let metrics = get(&format!("http://{addr}/metrics"));
    for module in ["mtu", "throughput"] {
        let line =
            format!("pathdoc_exporter_probes_total{{module=\"{module}\",result=\"busy\"}} 1");
        assert!(metrics.contains(&line), "missing {line}:\n{metrics}");
    }
    // With the session given back, the same probe measures and is not busy.
    drop(held);
    let body = get(&format!("http://{addr}/probe?target={server}&module=mtu"));
    assert!(body.contains("probe_success 1.0\n"), "{body}");
    assert!(body.contains("pathdoc_server_busy 0.0\n"), "{body}");
    shutdown.cancel();
    thread.join().unwrap();
}
