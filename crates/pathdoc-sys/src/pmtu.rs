//! Path-MTU probing sockets: DF without the cached PMTU (`IP_PMTUDISC_PROBE`), the kernel's
//! per-socket error queue (`IP_RECVERR`, `MSG_ERRQUEUE`), the route's MTU (`IP_MTU`) and the
//! probe TTL. No raw sockets: ICMP "fragmentation needed", "packet too big" and "time exceeded"
//! that quote one of our datagrams are queued on the socket that sent it, with the reporting
//! router's address and the quoted payload (which carries our probe id).
//!
//! IPv4 and IPv6 are both handled; the family is taken from the socket's local address.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// Where a queued socket error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorOrigin {
    /// The local stack refused the datagram (e.g. larger than the interface MTU).
    Local,
    /// An ICMPv4 message from a router or the destination.
    Icmp,
    /// An ICMPv6 message.
    Icmp6,
    Other(u8),
}

/// One entry of a socket's error queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedError {
    /// errno the kernel mapped the error to (EMSGSIZE for too-big, EHOSTUNREACH for TTL expiry).
    pub errno: i32,
    pub origin: ErrorOrigin,
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// For too-big: the next-hop MTU the router reported (or the local MTU).
    pub info: u32,
    /// The address that sent the ICMP message (the router or destination).
    pub offender: Option<IpAddr>,
    /// The quoted payload of our datagram (after the UDP header), possibly truncated.
    pub payload: Vec<u8>,
}

impl QueuedError {
    /// ICMPv4 type 3 code 4, ICMPv6 type 2, or a local EMSGSIZE.
    pub fn is_too_big(&self) -> bool {
        match self.origin {
            ErrorOrigin::Icmp => self.icmp_type == 3 && self.icmp_code == 4,
            ErrorOrigin::Icmp6 => self.icmp_type == 2,
            ErrorOrigin::Local => self.errno == libc::EMSGSIZE,
            ErrorOrigin::Other(_) => false,
        }
    }

    /// ICMPv4 type 11 or ICMPv6 type 3 (hop limit exceeded in transit).
    pub fn is_time_exceeded(&self) -> bool {
        match self.origin {
            ErrorOrigin::Icmp => self.icmp_type == 11,
            ErrorOrigin::Icmp6 => self.icmp_type == 3,
            _ => false,
        }
    }

    /// ICMP port unreachable: the datagram reached the destination host.
    pub fn is_port_unreachable(&self) -> bool {
        match self.origin {
            ErrorOrigin::Icmp => self.icmp_type == 3 && self.icmp_code == 3,
            ErrorOrigin::Icmp6 => self.icmp_type == 1 && self.icmp_code == 4,
            _ => false,
        }
    }
}

fn is_v6(sock: &UdpSocket) -> io::Result<bool> {
    Ok(sock.local_addr()?.is_ipv6())
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: we pass a valid pointer to a c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are valid for writes of the sizes we pass.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut value as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Make `sock` a probe socket: DF on every datagram, sizes up to the interface MTU regardless
/// of a PMTU the kernel learned earlier (`IP_PMTUDISC_PROBE`, as tracepath does), and ICMP
/// errors queued for [`drain_error_queue`] (`IP_RECVERR`).
pub fn make_probe_socket(sock: &UdpSocket) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    if is_v6(sock)? {
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_PROBE,
        )?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)?;
        // A v6 socket may also carry v4-mapped traffic; failures here are harmless.
        let _ = setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        );
        let _ = setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1);
    } else {
        setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )?;
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
    }
    Ok(())
}

/// Set the TTL (IPv4) or hop limit (IPv6) of the datagrams sent next.
pub fn set_ttl(sock: &UdpSocket, ttl: u8) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    if is_v6(sock)? {
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_UNICAST_HOPS,
            ttl as libc::c_int,
        )
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TTL, ttl as libc::c_int)
    }
}

/// The TTL (IPv4) or unicast hop limit (IPv6) of any socket — TCP included — by the family of
/// its own address. On an IPv6 socket `IP_TTL` is accepted but only applies to IPv4-mapped
/// traffic, so a hop-limited keepalive needs `IPV6_UNICAST_HOPS`.
pub fn hop_limit(sock: &impl AsRawFd) -> io::Result<u32> {
    let fd = sock.as_raw_fd();
    let value = if socket_is_v6(fd)? {
        getsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS)?
    } else {
        getsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TTL)?
    };
    Ok(u32::try_from(value).unwrap_or(64))
}

/// Set what [`hop_limit`] reads.
pub fn set_hop_limit(sock: &impl AsRawFd, hops: u32) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    let value = libc::c_int::try_from(hops.min(255)).unwrap_or(255);
    if socket_is_v6(fd)? {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, value)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TTL, value)
    }
}

/// Whether the socket is AF_INET6 and not talking to an IPv4-mapped peer.
fn socket_is_v6(fd: RawFd) -> io::Result<bool> {
    // SAFETY: the fd is borrowed from a live socket for the duration of the call.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let local = socket2::SockRef::from(&borrowed).local_addr()?;
    Ok(match local.as_socket() {
        Some(SocketAddr::V6(v6)) => !is_v4_mapped(IpAddr::V6(*v6.ip())),
        _ => false,
    })
}

/// The MTU of the route of a *connected* socket (`IP_MTU`): the path MTU the kernel knows,
/// which is the interface MTU until an ICMP too-big taught it otherwise.
pub fn route_mtu(sock: &UdpSocket) -> io::Result<u32> {
    let fd = sock.as_raw_fd();
    let v = if is_v6(sock)? {
        getsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU)?
    } else {
        getsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU)?
    };
    Ok(v.max(0) as u32)
}

/// IP + UDP header bytes for a datagram to `addr` (so probe size = payload + overhead).
pub fn udp_overhead(addr: &SocketAddr) -> usize {
    if addr.is_ipv4() || is_v4_mapped(addr.ip()) {
        20 + 8
    } else {
        40 + 8
    }
}

fn is_v4_mapped(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// Most entries read per call; a socket cannot make us loop for long.
const MAX_ERRORS_PER_DRAIN: usize = 4096;

/// Read everything queued on the socket's error queue without blocking.
pub fn drain_error_queue(sock: &UdpSocket) -> io::Result<Vec<QueuedError>> {
    let fd = sock.as_raw_fd();
    let mut out = Vec::new();
    while out.len() < MAX_ERRORS_PER_DRAIN {
        match recv_one_error(fd)? {
            Some(e) => out.push(e),
            None => break,
        }
    }
    Ok(out)
}

fn recv_one_error(fd: RawFd) -> io::Result<Option<QueuedError>> {
    let mut data = [0u8; 2048];
    let mut control = [0u8; 512];
    let mut name = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header we then fill in.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = name.as_mut_ptr() as *mut libc::c_void;
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = control.len() as _;
    // SAFETY: every pointer in msg refers to a live buffer of the stated length.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(None);
        }
        return Err(e);
    }
    let payload = data[..(n as usize).min(data.len())].to_vec();
    let mut found = None;
    // SAFETY: CMSG_* walk the control buffer the kernel filled, bounded by msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let level = (*cmsg).cmsg_level;
            let ty = (*cmsg).cmsg_type;
            let is_recverr = (level == libc::IPPROTO_IP && ty == libc::IP_RECVERR)
                || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_RECVERR);
            if is_recverr {
                let ee = libc::CMSG_DATA(cmsg) as *const libc::sock_extended_err;
                let ee_val = std::ptr::read_unaligned(ee);
                let offender = sockaddr_ip(libc::SO_EE_OFFENDER(ee) as *const libc::sockaddr);
                let origin = match ee_val.ee_origin {
                    libc::SO_EE_ORIGIN_LOCAL => ErrorOrigin::Local,
                    libc::SO_EE_ORIGIN_ICMP => ErrorOrigin::Icmp,
                    libc::SO_EE_ORIGIN_ICMP6 => ErrorOrigin::Icmp6,
                    o => ErrorOrigin::Other(o),
                };
                found = Some(QueuedError {
                    errno: ee_val.ee_errno as i32,
                    origin,
                    icmp_type: ee_val.ee_type,
                    icmp_code: ee_val.ee_code,
                    info: ee_val.ee_info,
                    offender,
                    payload: payload.clone(),
                });
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    // An entry without a recognisable header is skipped, not fatal.
    Ok(Some(found.unwrap_or(QueuedError {
        errno: 0,
        origin: ErrorOrigin::Other(255),
        icmp_type: 0,
        icmp_code: 0,
        info: 0,
        offender: None,
        payload,
    })))
}

/// # Safety
/// `sa` must point to a sockaddr of at least the size its family implies (the kernel places
/// one right after `sock_extended_err`; family AF_UNSPEC means "no offender").
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: guaranteed by the caller.
    unsafe {
        match (*sa).sa_family as libc::c_int {
            libc::AF_INET => {
                let sin = std::ptr::read_unaligned(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 => {
                let sin6 = std::ptr::read_unaligned(sa as *const libc::sockaddr_in6);
                let v6 = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(
                    v6.to_ipv4_mapped()
                        .map(IpAddr::V4)
                        .unwrap_or(IpAddr::V6(v6)),
                )
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_probe_socket_sends_df_and_reports_local_too_big() {
        // Loopback's MTU is 65536: a 70000-byte datagram cannot be built at all, but a
        // 60000-byte one goes through unfragmented.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        make_probe_socket(&tx).unwrap();
        set_ttl(&tx, 5).unwrap();
        assert!(route_mtu(&tx).unwrap() >= 1500);
        assert_eq!(tx.send(&vec![0u8; 60000]).unwrap(), 60000);
        let mut buf = vec![0u8; 65536];
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        assert_eq!(rx.recv(&mut buf).unwrap(), 60000);
        let mtu = route_mtu(&tx).unwrap() as usize;
        let err = tx.send(&vec![0u8; mtu]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EMSGSIZE));
        let queued = drain_error_queue(&tx).unwrap();
        assert!(
            queued
                .iter()
                .any(|e| e.is_too_big() && e.origin == ErrorOrigin::Local),
            "{queued:?}"
        );
        assert!(drain_error_queue(&tx).unwrap().is_empty());
    }

    #[test]
    fn overhead_by_family() {
        assert_eq!(udp_overhead(&"192.0.2.1:1".parse().unwrap()), 28);
        assert_eq!(udp_overhead(&"[2001:db8::1]:1".parse().unwrap()), 48);
    }

    #[test]
    fn hop_limit_follows_the_socket_family() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(sock) = UdpSocket::bind(bind) else {
                continue; // no IPv6 on this machine
            };
            set_hop_limit(&sock, 3).unwrap();
            assert_eq!(hop_limit(&sock).unwrap(), 3, "{bind}");
        }
        let v6 = std::net::TcpListener::bind("[::1]:0");
        if let Ok(l) = v6 {
            set_hop_limit(&l, 2).unwrap();
            let fd = l.as_raw_fd();
            assert_eq!(
                getsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS).unwrap(),
                2
            );
        }
    }
}
