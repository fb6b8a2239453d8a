//! What one MTU session can make the server keep of the client → server probes it sends: at most
//! 8 192 (round, id) records (8 B each), however many datagrams arrive, and the report of a round
//! stays one control frame (docs/server.md, resource model: "MTU up-probe ids").

use std::time::Duration;

use pathdoc_mtu::wire::{Reply, Request};
use pathdoc_proto::FramedConn;

use crate::support::{ask, mtu_server, send_up_probes, started_session};

/// The bound the server documents.
const MAX_UP_IDS: usize = 8192;

async fn up_received(conn: &mut FramedConn, round: u32) -> Vec<u32> {
    match ask(conn, &Request::UpReceived { round }).await {
        Reply::UpReceived { round: r, ids } if r == round => ids,
        other => panic!("UpReceived {round}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_at_most_8192_up_probe_ids_however_many_arrive() {
    let server = mtu_server().await;
    let (mut conn, welcome) = started_session(server).await;
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();

    // 12 000 distinct probes of round 1: more than the bound by half.
    send_up_probes(&udp, server, &welcome, 1, 0..12_000).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ids = up_received(&mut conn, 1).await;
    assert_eq!(
        ids.len(),
        MAX_UP_IDS,
        "the server kept {} ids of 12 000 sent",
        ids.len()
    );
    // The first ones are kept (later ones are dropped, not earlier ones overwritten).
    assert!(ids.iter().all(|&id| id < 12_000));
    assert!(ids.contains(&0), "the first probe was kept");

    // The bound is per session, not per round: a later round adds nothing once it is reached.
    send_up_probes(&udp, server, &welcome, 2, 0..100).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(up_received(&mut conn, 2).await.is_empty());

    // The session still answers: holding the bound cost the client its records, nothing else.
    assert!(matches!(
        ask(&mut conn, &Request::UpReceived { round: 1 }).await,
        Reply::UpReceived { .. }
    ));
    conn.send(&Request::Done).await.unwrap();
}
