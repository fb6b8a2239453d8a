//! What one MTU session can make the server hold with its SYN-saving MSS listener: one listener
//! at a time and four per session; a listener closes once it has read its connection's SYN (and
//! the client let go of that connection), or 5 s after it opened when nobody connects
//! (docs/server.md, resource model: "MSS listener and the connection it accepted").

use std::time::{Duration, Instant};

use pathdoc_mtu::wire::{Reply, Request};
use pathdoc_proto::FramedConn;

use crate::support::{ask, mtu_server, started_session};

async fn listen(conn: &mut FramedConn) -> Result<u16, String> {
    match ask(conn, &Request::MssListen).await {
        Reply::MssListening { port } => Ok(port),
        Reply::Error { message } => Err(message),
        other => panic!("MssListen: {other:?}"),
    }
}

/// Whether something listens on 127.0.0.1:`port`, read from /proc/net/tcp: asking by connecting
/// would hand the listener the one connection it waits for.
fn listening(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X}");
    table.lines().skip(1).any(|line| {
        let mut cols = line.split_whitespace();
        let addr = cols.nth(1).unwrap_or_default();
        let state = cols.nth(1).unwrap_or_default();
        addr.ends_with(&local) && state == "0A"
    })
}

/// Whether the listener on `port` is gone within `deadline` (it closes when its task ends).
async fn closes_within(port: u16, deadline: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if !listening(port) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mss_listener_at_a_time_four_per_session_each_closed_after_its_syn() {
    let server = mtu_server().await;
    let (mut conn, _) = started_session(server).await;
    for n in 1..=4 {
        let port = listen(&mut conn).await.unwrap();
        assert!(listening(port), "no listener {n} on port {port}");
        let second = listen(&mut conn).await.unwrap_err();
        assert!(second.contains("one MSS listener at a time"), "{second}");
        let syn = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        match ask(&mut conn, &Request::MssResult).await {
            Reply::MssSeen { syn_mss, .. } => assert!(syn_mss.is_some(), "listener {n}"),
            other => panic!("MssResult {n}: {other:?}"),
        }
        drop(syn);
        assert!(
            closes_within(port, Duration::from_secs(3)).await,
            "listener {n} on port {port} still open after its SYN was read"
        );
    }
    let fifth = listen(&mut conn).await.unwrap_err();
    assert!(fifth.contains("at most 4 per session"), "{fifth}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mss_listener_nobody_connects_to_closes_after_5_s() {
    let server = mtu_server().await;
    let (mut conn, _) = started_session(server).await;
    let opened = Instant::now();
    let port = listen(&mut conn).await.unwrap();
    assert!(listening(port), "no listener on port {port}");
    assert!(
        closes_within(port, Duration::from_secs(8)).await,
        "listener on port {port} still open 8 s after it opened"
    );
    let after = opened.elapsed();
    assert!(
        after >= Duration::from_millis(4500),
        "closed after {after:?}"
    );
    // Its slot is free again for the session's next listener.
    listen(&mut conn).await.unwrap();
}
