//! The UDP side of the server port: datagrams of live sessions go to their check's service.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pathdoc_proto::UdpHeader;

use crate::Shared;

pub(crate) fn bind_udp(addr: SocketAddr) -> std::io::Result<tokio::net::UdpSocket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    // Bound without SO_REUSEADDR first: the bind fails if any other socket holds the port,
    // even one that set SO_REUSEADDR itself, so the server never shares its port with another
    // program by accident. Only then is the option set, so that services can open connected
    // sockets on the same port (MTU probes that read their own error queue); the kernel
    // delivers a peer's datagrams to the most specific socket.
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.set_reuse_address(true)?;
    tokio::net::UdpSocket::from_std(socket.into())
}

pub(crate) async fn serve(shared: Arc<Shared>) {
    let mut buf = vec![0u8; 65536];
    loop {
        let (len, from) = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            r = shared.udp.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    // ICMP errors from earlier sends surface here (ECONNREFUSED); not fatal.
                    tracing::debug!(error = %e, "udp recv");
                    continue;
                }
            },
        };
        let datagram = &buf[..len];
        shared.accounting.udp_in.fetch_add(1, Ordering::Relaxed);
        let ignored = || {
            shared
                .accounting
                .udp_ignored
                .fetch_add(1, Ordering::Relaxed);
        };
        let Ok((header, payload)) = UdpHeader::decode(datagram) else {
            tracing::debug!(%from, len, "ignoring non-pathdoc datagram");
            ignored();
            continue;
        };
        let Ok(session) = shared.registry.get(header.session) else {
            ignored();
            continue;
        };
        if !session.knows_addr(from.ip()) {
            ignored();
            continue;
        }
        let Some(service) = shared.service(session.check) else {
            ignored();
            continue;
        };
        session.touch();
        if let Some(reply) = service
            .udp(session.clone(), header.kind, payload, from)
            .await
        {
            if reply.len() + UdpHeader::LEN <= len {
                let _ = session.send_udp(from, header.kind, &reply).await;
            } else {
                tracing::warn!(%from, "service reply larger than request dropped (anti-amplification)");
            }
        }
    }
}
