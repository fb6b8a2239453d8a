//! What the integration tests share: a real `pathdoc server` with the MTU service on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use pathdoc_mtu::wire::{ProbeFields, Reply, Request, KIND_UP_PROBE};
use pathdoc_proto::{Channel, CheckKind, FramedConn, UdpHeader, Welcome};
use pathdoc_server::{Limits, Server, ServerConfig};

/// A `pathdoc server` with the MTU service on a free loopback port, served by the test's runtime.
pub async fn mtu_server() -> SocketAddr {
    mtu_server_with(Limits::default()).await
}

/// The same with these limits.
pub async fn mtu_server_with(limits: Limits) -> SocketAddr {
    let bound = Server::new(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        limits,
        ..ServerConfig::default()
    })
    .with_service(pathdoc_mtu::MtuService::new())
    .bind()
    .await
    .unwrap();
    let addr = bound.local_addr();
    tokio::spawn(bound.run(std::future::pending(), Duration::from_millis(100)));
    addr
}

pub async fn ask(conn: &mut FramedConn, req: &Request) -> Reply {
    conn.send(req).await.unwrap();
    conn.recv_timeout::<Reply>(Duration::from_secs(10), "mtu reply")
        .await
        .unwrap()
}

/// Send up-probes of `round` with ids `ids` from `udp`, paced so loopback's socket buffers keep
/// up (a drop only lowers the count the test needs to exceed the bound by).
pub async fn send_up_probes(
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

/// A new MTU session on `server`, started (`Start` answered): its control connection and welcome.
pub async fn started_session(server: SocketAddr) -> (FramedConn, Welcome) {
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
    (conn, welcome)
}
