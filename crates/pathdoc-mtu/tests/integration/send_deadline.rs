//! What a client that never reads can make the server hold: its replies wait in the kernel's
//! buffers, and once the client's receive window is shut the server drops the connection when a
//! frame has not been taken within the send deadline (`Limits::send_timeout`, 30 s; scaled down
//! here through the same code path). docs/server.md, resource model: "control frames queued for a
//! client".

use std::time::{Duration, Instant};

use pathdoc_mtu::wire::{Reply, Request};
use pathdoc_proto::{Channel, CheckKind, ProtoError};
use pathdoc_server::Limits;

use crate::support::{ask, mtu_server_with, send_up_probes};

/// Requests sent without reading a reply; each reply lists 8 192 probe ids (about 50 KB), so
/// together they are far more than the kernel buffers of both ends hold.
const UNREAD_REQUESTS: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_loses_its_connection_after_the_send_deadline() {
    let deadline = Duration::from_secs(2);
    let server = mtu_server_with(Limits {
        send_timeout: deadline,
        ..Limits::default()
    })
    .await;
    // A small receive buffer: the client's window shuts after a few KiB.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(server).await.unwrap();
    let channel = Channel::Control {
        check: CheckKind::Mtu,
        resume: None,
    };
    let (mut conn, welcome) = pathdoc_proto::handshake(stream, None, channel, deadline * 5)
        .await
        .unwrap();
    assert!(matches!(
        ask(&mut conn, &Request::Start).await,
        Reply::Started { .. }
    ));
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    send_up_probes(&udp, server, &welcome, 1, 0..8192).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    for _ in 0..UNREAD_REQUESTS {
        conn.send(&Request::UpReceived { round: 1 }).await.unwrap();
    }
    tokio::time::sleep(deadline * 3).await;

    // Now read: the replies the kernels buffered, then the end of the connection.
    let started = Instant::now();
    let mut replies = 0;
    let ended = loop {
        match conn
            .recv_timeout::<Reply>(Duration::from_secs(5), "a buffered reply")
            .await
        {
            Ok(_) => replies += 1,
            Err(ProtoError::Timeout(..)) => break false,
            Err(_) => break true,
        }
    };
    assert!(
        ended,
        "the connection was still open {:?} after reading {replies} of {UNREAD_REQUESTS} replies",
        started.elapsed()
    );
    assert!(
        replies < UNREAD_REQUESTS,
        "the server wrote every reply ({replies}) to a client that did not read"
    );
    eprintln!("{replies} of {UNREAD_REQUESTS} replies were buffered before the server gave up");
}
