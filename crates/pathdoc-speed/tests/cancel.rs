//! The cancellation contract on loopback, against a real in-process server with the speed
//! service: once the token fires, `run_test` stops the streams, collects what was measured, closes
//! the session and returns promptly with `interrupted` set.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pathdoc_core::NoProgress as Quiet;
use pathdoc_server::{Limits, Server, ServerConfig};
use pathdoc_speed::{Mode, SpeedOptions, SpeedService};
use tokio_util::sync::CancellationToken;

async fn server() -> SocketAddr {
    let bound = Server::new(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth_token: None,
        limits: Limits::default(),
        ..ServerConfig::default()
    })
    .with_service(Arc::new(SpeedService::new()))
    .bind()
    .await
    .unwrap();
    let addr = bound.local_addr();
    tokio::spawn(bound.run(std::future::pending(), Duration::from_millis(100)));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_returns_what_was_measured_promptly() {
    let addr = server().await;
    let opts = SpeedOptions {
        mode: Mode::Both,
        duration: Duration::from_secs(20),
        interval: Duration::from_millis(250),
        ..SpeedOptions::default()
    };
    let cancel = CancellationToken::new();
    let fire = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        fire.cancel();
    });
    let t0 = Instant::now();
    let run = pathdoc_speed::run_test(addr, None, &opts, &Quiet, &cancel)
        .await
        .expect("an interrupted test is a result, not an error");
    let took = t0.elapsed();
    assert!(run.interrupted);
    // Streams stop within their poll period; the server's last samples within the grace.
    assert!(
        took < Duration::from_millis(1500)
            + pathdoc_speed::client::CANCEL_GRACE
            + Duration::from_secs(1),
        "{took:?}"
    );
    assert_eq!(
        run.directions.len(),
        2,
        "{:?}",
        run.directions
            .iter()
            .map(|d| d.direction)
            .collect::<Vec<_>>()
    );
    for d in &run.directions {
        assert!(
            (1.0..3.0).contains(&d.duration_s),
            "{:?} {}",
            d.direction,
            d.duration_s
        );
        assert!(
            d.intervals.len() >= 4,
            "{:?}: {} intervals",
            d.direction,
            d.intervals.len()
        );
        assert!(d.goodput_bps > 0.0);
    }
    let findings = pathdoc_speed::diagnose(&run);
    assert!(
        !findings
            .iter()
            .any(|f| f.id == "throughput-asymmetry" || f.id == "loss-asymmetry"),
        "no cross-direction verdict on a cut-short run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_before_the_test_starts_is_an_empty_interrupted_run() {
    let addr = server().await;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let run = pathdoc_speed::run_test(addr, None, &SpeedOptions::default(), &Quiet, &cancel)
        .await
        .unwrap();
    assert!(run.interrupted && run.directions.is_empty());
    // The measurement glue reports it as such.
    let m = pathdoc_speed::measure(
        addr,
        None,
        &[SpeedOptions::default()],
        false,
        &Quiet,
        &cancel,
    )
    .await
    .unwrap();
    assert!(m.interrupted);
    assert!(m.findings.iter().any(|f| f.id == "throughput-interrupted"));
}
