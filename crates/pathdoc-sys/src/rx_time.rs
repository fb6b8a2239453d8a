//! Kernel receive timestamps of datagrams (`SO_TIMESTAMPNS`): when a packet reached this host's
//! network stack, not when a possibly descheduled process read it. Packet-train dispersion
//! (the spread of back-to-back packets after a bottleneck) needs that precision on a busy host.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Ask the kernel to timestamp every datagram `socket` receives.
pub fn enable(socket: BorrowedFd<'_>) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid fd and a c_int option value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Receive one datagram into `buf` (blocking, honouring the socket's read timeout): its length
/// and its kernel receive time (`CLOCK_REALTIME`) when the kernel attached one.
pub fn recv(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<Duration>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one timespec control message, aligned like cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: zeroed msghdr is a valid "no name, no control" header; fields set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg points at live buffers of the lengths it states.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                stamp = Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn loopback_datagrams_carry_kernel_timestamps() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        enable(rx.as_fd()).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"one", rx.local_addr().unwrap()).unwrap();
        tx.send_to(b"two", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 16];
        let (n1, t1) = recv(rx.as_fd(), &mut buf).unwrap();
        let (n2, t2) = recv(rx.as_fd(), &mut buf).unwrap();
        assert_eq!((n1, n2), (3, 3));
        let (t1, t2) = (t1.unwrap(), t2.unwrap());
        assert!(
            t2 >= t1 && t2 - t1 < Duration::from_secs(1),
            "{t1:?} {t2:?}"
        );
    }
}
