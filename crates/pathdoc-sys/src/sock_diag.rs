//! Linux `sock_diag` (NETLINK_SOCK_DIAG, `INET_DIAG`): TCP_INFO and buffer sizes of sockets this
//! process does not own, as `ss -tim` shows them.
//!
//! The one job of this module is to dump the TCP sockets of the calling thread's network namespace
//! with their `struct tcp_info` (`INET_DIAG_INFO`), socket memory (`INET_DIAG_SKMEMINFO`) and
//! congestion control (`INET_DIAG_CONG`). Callers pick the socket they mean by inode (a process's
//! `/proc/PID/fd` links name `socket:[INODE]`) or by its address pair. No privilege is needed:
//! the kernel lists every TCP socket of the namespace to any user.
//!
//! Wire format (linux/inet_diag.h, linux/sock_diag.h): a `SOCK_DIAG_BY_FAMILY` dump request with
//! an `inet_diag_req_v2`; each answer is an `inet_diag_msg` followed by netlink attributes.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::tcp_info::{TcpInfo, KERNEL_STRUCT_LEN};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_SKMEMINFO: u16 = 7;
/// Every TCP state (bitmask over `TCP_ESTABLISHED`=1 … `TCP_NEW_SYN_RECV`=12).
const ALL_STATES: u32 = 0xfff;
/// `struct nlmsghdr` length.
const NLMSG_HDR: usize = 16;
/// `struct inet_diag_msg` length.
const DIAG_MSG_LEN: usize = 72;

/// Socket memory as the kernel accounts it (`SK_MEMINFO_*`, what `ss -m` prints as `skmem`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkMemInfo {
    /// Bytes queued for the application to read (`r`).
    pub rmem_alloc: u32,
    /// Receive buffer limit, `SO_RCVBUF` or the autotuned size (`rb`).
    pub rcvbuf: u32,
    /// Bytes sent but not yet freed (`t`).
    pub wmem_alloc: u32,
    /// Send buffer limit (`tb`).
    pub sndbuf: u32,
    /// Bytes queued for sending, including unsent (`w`).
    pub wmem_queued: u32,
    /// Packets dropped before reaching the socket (`d`).
    pub drops: u32,
}

/// One TCP socket from a dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSocket {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Kernel TCP state (1 = ESTABLISHED, 10 = LISTEN, …).
    pub state: u8,
    /// Owner uid.
    pub uid: u32,
    /// Socket inode (`socket:[INODE]` in `/proc/PID/fd`); 0 for sockets no file refers to.
    pub inode: u32,
    /// `None` when the kernel sent no `INET_DIAG_INFO` (e.g. a TIME_WAIT socket).
    pub info: Option<TcpInfo>,
    pub mem: Option<SkMemInfo>,
    pub congestion_control: Option<String>,
}

/// TCP sockets (IPv4 and IPv6) of the calling thread's network namespace.
pub fn tcp_sockets() -> io::Result<Vec<TcpSocket>> {
    let mut all = dump(libc::AF_INET as u8)?;
    match dump(libc::AF_INET6 as u8) {
        Ok(v6) => all.extend(v6),
        // A kernel or namespace without IPv6 answers the v6 dump with an error; v4 is all there is.
        Err(e) if e.raw_os_error().is_some() => {}
        Err(e) => return Err(e),
    }
    Ok(all)
}

/// The TCP socket with this inode, if it exists.
pub fn tcp_socket_by_inode(inode: u32) -> io::Result<Option<TcpSocket>> {
    Ok(tcp_sockets()?.into_iter().find(|s| s.inode == inode))
}

/// The TCP socket with this local and remote address, if it exists. IPv4-mapped IPv6 addresses
/// (`::ffff:a.b.c.d`, how dual-stack sockets show IPv4 peers) match their IPv4 form.
pub fn tcp_socket_by_addrs(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<TcpSocket>> {
    Ok(tcp_sockets()?.into_iter().find(|s| {
        same_endpoint(s.local, local) && same_endpoint(s.remote, remote) && s.state != 10
    }))
}

fn same_endpoint(a: SocketAddr, b: SocketAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    a.port() == b.port() && canon(a.ip()) == canon(b.ip())
}

/// Inodes of the sockets process `pid` holds open (from `/proc/PID/fd`). Needs the right to read
/// that directory: the same user for an ordinary process, root for a non-dumpable one (sshd).
pub fn socket_inodes_of(pid: u32) -> io::Result<Vec<u32>> {
    let mut inodes = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(entry) = entry else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(n) = target
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse().ok())
        {
            inodes.push(n);
        }
    }
    Ok(inodes)
}

fn dump(family: u8) -> io::Result<Vec<TcpSocket>> {
    let sock = open_netlink()?;
    send_request(&sock, family)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: buf is writable for buf.len() bytes.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                0,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Ok(out);
        }
        match parse_messages(&buf[..n as usize], &mut out)? {
            Parsed::Done => return Ok(out),
            Parsed::More => {}
        }
    }
}

fn open_netlink() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the descriptor is owned by the returned OwnedFd.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // A dump that never ends must not hang the caller.
    let timeout = libc::timeval {
        tv_sec: 5,
        tv_usec: 0,
    };
    // SAFETY: timeout is a valid timeval and its size is passed.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast::<libc::c_void>(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    Ok(sock)
}

/// The dump request: nlmsghdr + inet_diag_req_v2 asking for INFO, CONG and SKMEMINFO.
fn request(family: u8) -> Vec<u8> {
    let ext: u8 = (1 << (INET_DIAG_INFO - 1))
        | (1 << (INET_DIAG_CONG - 1))
        | (1 << (INET_DIAG_SKMEMINFO - 1));
    let req_len = 56; // inet_diag_req_v2: 4 bytes + states u32 + inet_diag_sockid (48)
    let total = NLMSG_HDR + req_len;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
    m.push(family);
    m.push(libc::IPPROTO_TCP as u8);
    m.push(ext);
    m.push(0);
    m.extend_from_slice(&ALL_STATES.to_ne_bytes());
    m.resize(total, 0); // inet_diag_sockid all zero: no filter
    m
}

fn send_request(sock: &OwnedFd, family: u8) -> io::Result<()> {
    let msg = request(family);
    // SAFETY: msg is readable for msg.len() bytes; an unconnected netlink socket sends to the kernel.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            msg.as_ptr().cast::<libc::c_void>(),
            msg.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

enum Parsed {
    Done,
    More,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("sock_diag: {what}"))
}

/// Parse one `recv` worth of netlink messages, appending sockets to `out`.
fn parse_messages(mut b: &[u8], out: &mut Vec<TcpSocket>) -> io::Result<Parsed> {
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0).ok_or_else(|| malformed("short header"))? as usize;
        let kind = u16_at(b, 4).ok_or_else(|| malformed("short header"))?;
        if len < NLMSG_HDR || len > b.len() {
            return Err(malformed("message length out of range"));
        }
        let body = &b[NLMSG_HDR..len];
        match kind {
            NLMSG_DONE => return Ok(Parsed::Done),
            NLMSG_ERROR => {
                let errno = u32_at(body, 0).map(|e| -(e as i32)).unwrap_or(libc::EIO);
                if errno == 0 {
                    return Ok(Parsed::Done);
                }
                return Err(io::Error::from_raw_os_error(errno));
            }
            SOCK_DIAG_BY_FAMILY => {
                if let Some(s) = parse_socket(body) {
                    out.push(s);
                }
            }
            _ => {}
        }
        let aligned = (len + 3) & !3;
        b = b.get(aligned..).unwrap_or(&[]);
    }
    Ok(Parsed::More)
}

/// One `inet_diag_msg` and its attributes.
fn parse_socket(body: &[u8]) -> Option<TcpSocket> {
    if body.len() < DIAG_MSG_LEN {
        return None;
    }
    let family = body[0];
    let state = body[1];
    // inet_diag_sockid at offset 4: sport, dport (big endian), src[16], dst[16], if, cookie.
    let sport = u16::from_be_bytes([body[4], body[5]]);
    let dport = u16::from_be_bytes([body[6], body[7]]);
    let addr = |at: usize| -> Option<IpAddr> {
        let raw = body.get(at..at + 16)?;
        Some(if family == libc::AF_INET as u8 {
            IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
        } else {
            let mut a = [0u8; 16];
            a.copy_from_slice(raw);
            IpAddr::V6(Ipv6Addr::from(a))
        })
    };
    let local = SocketAddr::new(addr(8)?, sport);
    let remote = SocketAddr::new(addr(24)?, dport);
    let uid = u32_at(body, 64)?;
    let inode = u32_at(body, 68)?;
    let mut sock = TcpSocket {
        local,
        remote,
        state,
        uid,
        inode,
        info: None,
        mem: None,
        congestion_control: None,
    };
    let mut attrs = &body[DIAG_MSG_LEN..];
    while attrs.len() >= 4 {
        let len = u16_at(attrs, 0)? as usize;
        let kind = u16_at(attrs, 2)? & 0x3fff;
        if len < 4 || len > attrs.len() {
            break;
        }
        let payload = &attrs[4..len];
        match kind {
            INET_DIAG_INFO => sock.info = Some(tcp_info_from(payload)),
            INET_DIAG_SKMEMINFO => sock.mem = skmem_from(payload),
            INET_DIAG_CONG => {
                let end = payload
                    .iter()
                    .position(|&c| c == 0)
                    .unwrap_or(payload.len());
                sock.congestion_control = Some(String::from_utf8_lossy(&payload[..end]).into());
            }
            _ => {}
        }
        let aligned = (len + 3) & !3;
        attrs = attrs.get(aligned..).unwrap_or(&[]);
    }
    Some(sock)
}

/// Copy the kernel's (possibly shorter or longer) tcp_info into our struct.
fn tcp_info_from(payload: &[u8]) -> TcpInfo {
    let mut info = TcpInfo::default();
    let n = payload.len().min(KERNEL_STRUCT_LEN);
    // SAFETY: TcpInfo is repr(C) plain old data of at least KERNEL_STRUCT_LEN bytes; we write
    // n ≤ KERNEL_STRUCT_LEN bytes from a slice of at least n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            payload.as_ptr(),
            (&mut info as *mut TcpInfo).cast::<u8>(),
            n,
        );
    }
    info.kernel_len = n as u32;
    info
}

fn skmem_from(payload: &[u8]) -> Option<SkMemInfo> {
    // SK_MEMINFO_RMEM_ALLOC, RCVBUF, WMEM_ALLOC, SNDBUF, FWD_ALLOC, WMEM_QUEUED, OPTMEM, BACKLOG, DROPS
    let v = |i: usize| u32_at(payload, i * 4);
    Some(SkMemInfo {
        rmem_alloc: v(0)?,
        rcvbuf: v(1)?,
        wmem_alloc: v(2)?,
        sndbuf: v(3)?,
        wmem_queued: v(5)?,
        drops: v(8).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::MetadataExt;

    fn inode_of(fd: &impl AsRawFd) -> u32 {
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        meta.ino() as u32
    }

    #[test]
    fn finds_a_loopback_connection_by_inode_and_by_addresses() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[1u8; 200_000]).unwrap();
        let mut buf = vec![0u8; 200_000];
        server.read_exact(&mut buf).unwrap();

        let inode = inode_of(&client);
        let found = tcp_socket_by_inode(inode).unwrap().expect("client socket");
        assert_eq!(found.local, client.local_addr().unwrap());
        assert_eq!(found.remote, client.peer_addr().unwrap());
        assert_eq!(found.state, 1, "ESTABLISHED");
        let info = found.info.expect("INET_DIAG_INFO");
        assert!(
            info.bytes_acked >= 200_000,
            "bytes_acked {}",
            info.bytes_acked
        );
        // The same numbers getsockopt(TCP_INFO) gives.
        let direct = crate::tcp_info::tcp_info(&client).unwrap();
        assert_eq!(info.bytes_acked, direct.bytes_acked);
        assert_eq!(info.snd_mss, direct.snd_mss);
        assert!(found.mem.unwrap().sndbuf > 0);
        assert!(found.congestion_control.is_some());

        let by_addr =
            tcp_socket_by_addrs(server.local_addr().unwrap(), server.peer_addr().unwrap())
                .unwrap()
                .expect("server socket");
        assert_eq!(by_addr.inode, inode_of(&server));
        assert!(by_addr.info.unwrap().bytes_received >= 200_000);

        let mine = socket_inodes_of(std::process::id()).unwrap();
        assert!(mine.contains(&inode));
    }

    #[test]
    fn unknown_inode_is_none() {
        assert!(tcp_socket_by_inode(u32::MAX).unwrap().is_none());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        assert!(parse_messages(&[0xff; 40], &mut out).is_err());
        assert!(parse_messages(&[1, 2, 3], &mut out).is_ok());
        assert!(parse_socket(&[0u8; 10]).is_none());
        // A message with a truncated attribute list parses what is there.
        let mut body = vec![0u8; DIAG_MSG_LEN];
        body[0] = libc::AF_INET as u8;
        body.extend_from_slice(&[200, 0, 2, 0]);
        assert!(parse_socket(&body).unwrap().info.is_none());
    }
}
