//! The client's source address (`--bind ADDR`): set once by the binary before any connection,
//! applied by every socket a client check opens towards the server.
//!
//! Process-wide on purpose: the checks open sockets in many places (control, data, probe and
//! UDP sockets, some deep in helper tasks), and a user's `--bind` must reach all of them. Passing
//! it through every options struct would touch each of those call sites; a setting read at socket
//! creation keeps each of them a one-line call. Servers and the library tests never set it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::OnceLock;

static SOURCE: OnceLock<IpAddr> = OnceLock::new();

/// Use `ip` as the source address of every client socket from now on. Only the first call wins;
/// a later one with another address returns that address as the error.
pub fn set_source(ip: IpAddr) -> Result<(), IpAddr> {
    let current = *SOURCE.get_or_init(|| ip);
    if current == ip {
        Ok(())
    } else {
        Err(current)
    }
}

/// The source address set with [`set_source`], if any.
pub fn source() -> Option<IpAddr> {
    SOURCE.get().copied()
}

/// Local address for a UDP socket that talks to `peer`: the source address (port 0) when one is
/// set and of the peer's family, else the unspecified address of the peer's family.
pub fn udp_bind_addr(peer: &SocketAddr) -> SocketAddr {
    let ip = match (source(), peer) {
        (Some(ip), _) if ip.is_ipv4() == peer.is_ipv4() => ip,
        (_, SocketAddr::V4(_)) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (_, SocketAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

/// Bind a not yet connected TCP socket that will connect to `peer` to the source address; a no-op
/// when none is set. The port is left to `connect` (`IP_BIND_ADDRESS_NO_PORT`), so the idle
/// check's hundreds of probe connections share ports by 4-tuple as unbound sockets do.
pub fn bind_tcp<S: AsFd>(socket: &S, peer: &SocketAddr) -> io::Result<()> {
    let Some(ip) = source() else {
        return Ok(());
    };
    if ip.is_ipv4() != peer.is_ipv4() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("source address {ip} and server {peer} are of different IP versions"),
        ));
    }
    let sock = socket2::SockRef::from(socket);
    // Best effort: without it the kernel picks the port at bind time, which still works.
    let _ = set_bind_address_no_port(socket.as_fd().as_raw_fd());
    sock.bind(&SocketAddr::new(ip, 0).into())
}

fn set_bind_address_no_port(fd: std::os::fd::RawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid pointer to a c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_bind_follows_the_peer_family_when_unset() {
        // The library tests never set a source address.
        let v4: SocketAddr = "192.0.2.1:7224".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:7224".parse().unwrap();
        assert_eq!(udp_bind_addr(&v4), "0.0.0.0:0".parse().unwrap());
        assert_eq!(udp_bind_addr(&v6), "[::]:0".parse().unwrap());
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        bind_tcp(&s, &v4).unwrap();
        assert!(s.local_addr().unwrap().as_socket().unwrap().port() == 0);
    }
}
