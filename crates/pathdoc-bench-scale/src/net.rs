//! Connections from chosen loopback source addresses (each 127.x.y.z has its own ephemeral
//! port range towards one server port, and counts as its own client).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::Context;
use tokio::net::{TcpSocket, TcpStream};

/// Deadline of one TCP connect.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(20);

/// Connect from `source` (port chosen by the kernel at connect time, so each source address has
/// the whole ephemeral range towards the one server port).
pub async fn connect_from(source: IpAddr, server: SocketAddr) -> anyhow::Result<TcpStream> {
    let socket = if source.is_ipv6() {
        TcpSocket::new_v6()?
    } else {
        TcpSocket::new_v4()?
    };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads `one` for the given length; the fd is owned by `socket`.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("IP_BIND_ADDRESS_NO_PORT");
    }
    socket
        .bind(SocketAddr::new(source, 0))
        .with_context(|| format!("binding {source}"))?;
    tokio::time::timeout(CONNECT_DEADLINE, socket.connect(server))
        .await
        .with_context(|| format!("connect from {source} timed out"))?
        .with_context(|| format!("connect from {source}"))
}

/// The `index`-th source address of a block of 127/8: `127.<block>.<hi>.<lo>`, skipping
/// `.0` and `.255` in the last byte so every address looks like an ordinary host.
pub fn source(block: u8, index: u32) -> IpAddr {
    let hi = (index / 254) as u8;
    let lo = (index % 254) as u8 + 1;
    IpAddr::V4(Ipv4Addr::new(127, block, hi, lo))
}

/// A UDP socket bound to `source` (any port), for datagrams from a chosen address.
pub async fn udp_from(source: IpAddr) -> anyhow::Result<tokio::net::UdpSocket> {
    tokio::net::UdpSocket::bind(SocketAddr::new(source, 0))
        .await
        .with_context(|| format!("binding UDP to {source}"))
}
