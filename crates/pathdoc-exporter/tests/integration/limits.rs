//! The exporter under load on loopback: a flood of probes of one slow allowed target (a listener
//! that accepts and never answers) is refused beyond the per-target queue with 429 at once, and a
//! healthy target's scrape (a real in-process pathdoc server with the throughput service) still
//! gets a global permit and succeeds within its scrape timeout; numeric headers and query
//! parameters out of bounds are 400s with a message.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pathdoc_server::ServerConfig;

const TOKEN: &str = "limits-test-token";

/// A real pathdoc server with the throughput service, on its own runtime thread.
fn pathdoc_server() -> SocketAddr {
    pathdoc_server_on("127.0.0.1:0")
}

/// The same on `listen` (`[::1]:0` for IPv6).
fn pathdoc_server_on(listen: &str) -> SocketAddr {
    common::pathdoc_server(
        ServerConfig {
            listen: listen.parse().unwrap(),
            ..ServerConfig::default()
        },
        vec![Arc::new(pathdoc_speed::SpeedService::new())],
    )
}

/// Send one GET with the token and the given extra header lines; do not read the answer.
///
/// The request goes out in one write. A server that refuses an oversized head answers and closes
/// before reading all of it, so a broken pipe or reset while writing is not an error here: the
/// answer, read next, is what the tests judge.
fn send(addr: SocketAddr, path_and_query: &str, headers: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let request = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n{headers}\r\n"
    );
    match s.write_all(request.as_bytes()) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) => {}
        Err(e) => panic!("sending {path_and_query}: {e}"),
    }
    s
}

/// The status code and body of the answer on `s`, waiting at most `wait`.
fn answer(s: TcpStream, wait: Duration) -> (u16, String) {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    if r.read_line(&mut status).is_err() || status.is_empty() {
        return (0, String::new());
    }
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut r, &mut rest);
    let body = rest.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_string())
}

fn get(addr: SocketAddr, path_and_query: &str, headers: &str, wait: Duration) -> (u16, String) {
    answer(send(addr, path_and_query, headers), wait)
}

#[test]
fn a_slow_target_flood_does_not_starve_a_healthy_target() {
    let healthy = pathdoc_server();
    // Accepts (the kernel completes the handshake from the backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow = silent.local_addr().unwrap();
    let (addr, shutdown, thread) = common::serve_on_loopback(&format!(
        "auth_tokens = [\"{TOKEN}\"]\nmax_concurrent_probes = 2\nmax_queued_probes_per_target = 4\n\
         probe_timeout = \"30s\"\n\
         [modules.tp]\ncheck = \"throughput\"\ntime = \"1s\"\n\
         [[targets]]\naddress = \"{healthy}\"\nmodules = [\"tp\"]\n\
         [[targets]]\naddress = \"{slow}\"\nmodules = [\"tp\"]\n"
    ));
    const FLOOD: usize = 200;
    let flood_started = Instant::now();
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|_| {
            send(
                addr,
                &format!("/probe?target={slow}&module=tp"),
                "X-Prometheus-Scrape-Timeout-Seconds: 25\r\n",
            )
        })
        .collect();
    // Everything beyond the target's queue is refused at once, with its reason.
    let mut refused = 0;
    let mut waiting = Vec::new();
    for s in flood {
        let probe = s.try_clone().unwrap();
        match answer(s, Duration::from_millis(300)) {
            (429, body) => {
                assert!(body.contains("max_queued_probes_per_target = 4"), "{body}");
                refused += 1;
            }
            (0, _) => waiting.push(probe),
            other => panic!("slow-target probe answered {other:?}"),
        }
    }
    assert_eq!(refused, FLOOD - 4, "all but the queue's 4 refused");
    eprintln!(
        "{refused} of {FLOOD} slow-target probes refused with 429 in {:?}",
        flood_started.elapsed()
    );
    assert!(
        flood_started.elapsed() < Duration::from_secs(15),
        "refusals took {:?}",
        flood_started.elapsed()
    );

    // The healthy target still gets a global permit while the slow one holds its own.
    let t0 = Instant::now();
    let (code, body) = get(
        addr,
        &format!("/probe?target={healthy}&module=tp"),
        "X-Prometheus-Scrape-Timeout-Seconds: 15\r\n",
        Duration::from_secs(20),
    );
    let took = t0.elapsed();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("probe_success 1.0"), "{body}");
    assert!(
        took < Duration::from_secs(15),
        "healthy scrape took {took:?}"
    );
    eprintln!("the healthy target's scrape answered 200 in {took:?}");

    let (code, metrics) = get(addr, "/metrics", "", Duration::from_secs(5));
    assert_eq!(code, 200);
    let line =
        format!("pathdoc_exporter_refused_requests_total{{reason=\"queue-full\"}} {refused}");
    assert!(metrics.contains(&line), "missing {line}:\n{metrics}");
    drop(waiting);
    shutdown.cancel();
    thread.join().unwrap();
}

/// A target written as users write it in each family, `127.0.0.1:PORT` and `[::1]:PORT`: the
/// exporter's allow-list, its `target=` parameter and the probe itself all take the IPv6 form.
#[test]
fn a_healthy_target_is_probed_over_ipv4_and_ipv6() {
    for listen in ["127.0.0.1:0", "[::1]:0"] {
        let server = pathdoc_server_on(listen);
        let (addr, shutdown, thread) = common::serve_on_loopback(&format!(
            "auth_tokens = [\"{TOKEN}\"]\nprobe_timeout = \"30s\"\n\
             [modules.tp]\ncheck = \"throughput\"\ntime = \"1s\"\n\
             [[targets]]\naddress = \"{server}\"\nmodules = [\"tp\"]\n"
        ));
        let (code, body) = get(
            addr,
            &format!("/probe?target={server}&module=tp"),
            "X-Prometheus-Scrape-Timeout-Seconds: 15\r\n",
            Duration::from_secs(20),
        );
        assert_eq!(code, 200, "{server}: {body}");
        assert!(body.contains("probe_success 1.0"), "{server}: {body}");
        eprintln!("{server}: probe_success 1");
        shutdown.cancel();
        thread.join().unwrap();
    }
}

#[test]
fn numeric_headers_and_parameters_out_of_bounds_are_400s_with_a_message() {
    let (addr, shutdown, thread) = common::serve_on_loopback(&format!(
        "auth_tokens = [\"{TOKEN}\"]\n[modules.idle]\ncheck = \"idle\"\nidle_max = \"10s\"\n\
         [[targets]]\naddress = \"127.0.0.1:1\"\nmodules = [\"idle\"]\n"
    ));
    let probe = "/probe?target=127.0.0.1:1&module=idle";
    let wait = Duration::from_secs(10);
    for value in ["1e300", "-5", "NaN", "inf", "0", "ten", "86401"] {
        // 1e300 panicked the handler before (Duration::from_secs_f64 overflow).
        let (code, body) = get(
            addr,
            probe,
            &format!("X-Prometheus-Scrape-Timeout-Seconds: {value}\r\n"),
            wait,
        );
        assert_eq!(code, 400, "{value}: {body}");
        assert!(
            body.contains("X-Prometheus-Scrape-Timeout-Seconds") && body.contains(value),
            "{value}: {body}"
        );
    }
    let (code, body) = get(
        addr,
        probe,
        "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n",
        wait,
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("pathdoc_idle_result_available"), "{body}");

    let long = "a".repeat(400);
    for (query, says) in [
        (format!("{probe}&target=127.0.0.1:2"), "more than once"),
        (
            format!("/probe?target={long}&module=idle"),
            "longer than 300",
        ),
        (format!("/probe?target=x&module={long}"), "longer than 64"),
        ("/probe?module=idle".to_string(), "target is missing"),
    ] {
        let (code, body) = get(addr, &query, "", wait);
        assert_eq!(code, 400, "{query}: {body}");
        assert!(body.contains(says), "{query}: {body}");
    }
    // A request head beyond the 16 KiB bound is refused by the HTTP layer, not buffered.
    let (code, _) = get(
        addr,
        probe,
        &format!("X-Padding: {}\r\n", "p".repeat(40_000)),
        wait,
    );
    assert_eq!(code, 431);
    let (code, _) = get(addr, "/-/healthy", "", wait);
    assert_eq!(code, 200, "the exporter still answers");
    shutdown.cancel();
    thread.join().unwrap();
}
