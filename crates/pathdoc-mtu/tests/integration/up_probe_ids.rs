//! What one MTU session can make the server keep of the client → server probes it sends: at most
//! 8 192 (round, id) records (8 B each), however many datagrams arrive, and the report of a round
//! stays one control frame (docs/server.md, resource model: "MTU up-probe ids").

use std::net::SocketAddr;
use std::time::Duration;

use pathdoc_mtu::wire::{ProbeFields, Reply, Request, KIND_UP_PROBE};
use pathdoc_proto::{Channel, CheckKind, FramedConn, UdpHeader, Welcome};

use crate::support::{ask, mtu_server};

/// The bound the server documents.
const MAX_UP_IDS: usize = 8192;

/// Send up-probes of `round` with ids `ids` from `udp`, paced so loopback's socket buffers keep
/// up (a drop only lowers the count the test needs to exceed the bound by).
async fn send_up_probes(
    udp: &tokio::net::UdpSocket,
    to: SocketAddr,
    welcome: &Welcome,
    round: u32,
    ids: std::ops::Range<u32>,
) {
    for id in ids {
        let mut datagram = Vec::with_capacity(64);
        UdpHeader {
            session: welcome.session,
            kind: KIND_UP_PROBE,
        }
        .encode(&mut datagram);
        ProbeFields {
            round,
            id,
            size: 64,
            ttl: 64,
        }
        .encode(&mut datagram);
        udp.send_to(&datagram, to).await.unwrap();
        if id % 256 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

async fn up_received(conn: &mut FramedConn, round: u32) -> Vec<u32> {
    match ask(conn, &Request::UpReceived { round }).await {
        Reply::UpReceived { round: r, ids } if r == round => ids,
        other => panic!("UpReceived {round}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_at_most_8192_up_probe_ids_however_many_arrive() {
    let server = mtu_server().await;
    let (mut conn, welcome) = pathdoc_proto::connect(
        server,
        None,
        Channel::Control {
            check: CheckKind::Mtu,
            resume: None,
        },
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert!(matches!(
        ask(&mut conn, &Request::Start).await,
        Reply::Started { .. }
    ));
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
