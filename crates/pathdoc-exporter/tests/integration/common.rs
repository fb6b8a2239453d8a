//! What the exporter's integration tests share.

use std::net::SocketAddr;

use pathdoc_exporter::module::{IDLE, MTU, THROUGHPUT};
use pathdoc_exporter::{Config, ModuleKind};

/// Every module kind the exporter crate has (the binary passes its check registry's).
pub const KINDS: &[&ModuleKind] = &[&MTU, &THROUGHPUT, &IDLE];
use tokio_util::sync::CancellationToken;

/// Serve `config` on a free loopback port from a runtime on its own thread: its address, the
/// token that stops it, and the thread to join.
pub fn serve_on_loopback(
    config: &str,
) -> (SocketAddr, CancellationToken, std::thread::JoinHandle<()>) {
    let config = Config::parse(config, KINDS).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            pathdoc_exporter::serve(config, listener, stop)
                .await
                .unwrap();
        });
    });
    (addr, shutdown, thread)
}

/// A real pathdoc server with `services`, configured by `config`, on its own runtime thread: its
/// bound address (`config.listen` with port 0 picks a free one).
#[allow(dead_code)] // tests/connections.rs includes this file too and serves no pathdoc server
pub fn pathdoc_server(
    config: pathdoc_server::ServerConfig,
    services: Vec<std::sync::Arc<dyn pathdoc_server::Service>>,
) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let server = services
                .into_iter()
                .fold(pathdoc_server::Server::new(config), |s, service| {
                    s.with_service(service)
                });
            let bound = server.bind().await.unwrap();
            tx.send(bound.local_addr()).unwrap();
            bound
                .run(
                    std::future::pending(),
                    std::time::Duration::from_millis(100),
                )
                .await;
        });
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap()
}
