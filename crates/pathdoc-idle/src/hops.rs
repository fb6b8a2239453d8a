//! Hop discovery for the culprit search: how many routers lie between client and server and
//! which address each answers TTL-expired probes from.
//!
//! One UDP socket per TTL (so every ICMP time-exceeded lands on the socket of the TTL that
//! caused it, whatever the router quotes), datagrams to the server's pathdoc port with
//! `IP_RECVERR` (pathdoc_sys::pmtu's error-queue helpers). The server echoes
//! [`udp_kind::TRACE`] datagrams, so the smallest TTL that gets an echo is the server's
//! distance. No raw sockets, no root.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use pathdoc_proto::{SessionId, UdpHeader};
use serde::Serialize;

use crate::proto::{udp_kind, UdpPayload, UDP_PAD};

/// Longest path searched (TTL).
pub const MAX_TTL: u8 = 24;

/// What hop discovery found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathHops {
    /// Routers between client and server (the server answered at TTL `routers + 1`).
    pub routers: usize,
    /// Address of router `i + 1` (from its ICMP time-exceeded), `None` when it stayed silent.
    pub addrs: Vec<Option<IpAddr>>,
}

impl PathHops {
    /// Address of hop `hop` (1-based), if it answered.
    pub fn addr(&self, hop: usize) -> Option<IpAddr> {
        self.addrs.get(hop.checked_sub(1)?).copied().flatten()
    }
}

fn open(server: SocketAddr, ttl: u8) -> std::io::Result<UdpSocket> {
    let sock = UdpSocket::bind(pathdoc_sys::source::udp_bind_addr(&server))?;
    sock.connect(server)?;
    pathdoc_sys::pmtu::make_probe_socket(&sock)?;
    pathdoc_sys::pmtu::set_ttl(&sock, ttl)?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// Probe TTLs 1..=[`MAX_TTL`] (two rounds, `wait` each) and return the path, or `None` when
/// the server never echoed (UDP to its port blocked).
pub async fn discover(
    server: SocketAddr,
    session: SessionId,
    wait: Duration,
) -> std::io::Result<Option<PathHops>> {
    let nonce: u64 = rand::random();
    let socks: Vec<UdpSocket> = (1..=MAX_TTL)
        .map(|ttl| open(server, ttl))
        .collect::<Result<_, _>>()?;
    let mut datagram = Vec::new();
    let mut reached: Option<u8> = None;
    let mut addrs: Vec<Option<IpAddr>> = vec![None; MAX_TTL as usize];
    for _round in 0..2 {
        for (i, sock) in socks.iter().enumerate() {
            let ttl = i as u8 + 1;
            if reached.is_some_and(|r| ttl >= r) || addrs[i].is_some() {
                continue;
            }
            datagram.clear();
            UdpHeader {
                session,
                kind: udp_kind::TRACE,
            }
            .encode(&mut datagram);
            datagram.extend_from_slice(
                &UdpPayload {
                    tag: u32::from(ttl),
                    nonce,
                    observed: None,
                }
                .encode(UDP_PAD),
            );
            let _ = sock.send(&datagram);
        }
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut buf = [0u8; 512];
            for (i, sock) in socks.iter().enumerate() {
                // With IP_RECVERR a pending ICMP error also surfaces once as a recv error.
                while let Ok(n) = sock.recv(&mut buf) {
                    let echo = UdpHeader::decode(&buf[..n])
                        .ok()
                        .and_then(|(_, p)| UdpPayload::decode(p));
                    if echo.is_some_and(|e| e.nonce == nonce) {
                        let ttl = i as u8 + 1;
                        reached = Some(reached.map_or(ttl, |r| r.min(ttl)));
                    }
                }
                for e in pathdoc_sys::pmtu::drain_error_queue(sock).unwrap_or_default() {
                    if e.is_time_exceeded() && e.offender.is_some() {
                        addrs[i] = e.offender;
                    }
                }
            }
            if let Some(r) = reached {
                if addrs[..r as usize - 1].iter().all(Option::is_some) {
                    break;
                }
            }
        }
    }
    Ok(reached.map(|r| {
        let routers = r as usize - 1;
        addrs.truncate(routers);
        PathHops { routers, addrs }
    }))
}
