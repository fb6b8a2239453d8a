//! What the integration tests share: a real `pathdoc server` with the MTU service on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use pathdoc_mtu::wire::{Reply, Request};
use pathdoc_proto::FramedConn;
use pathdoc_server::{Server, ServerConfig};

/// A `pathdoc server` with the MTU service on a free loopback port, served by the test's runtime.
pub async fn mtu_server() -> SocketAddr {
    let bound = Server::new(ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
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
