//! A TCP socket's send queue: how many bytes the kernel still holds for the peer, and an
//! abortive close that frees them at once.
//!
//! Closing a socket whose peer does not read leaves an orphan in FIN-WAIT-1 that keeps its
//! whole send queue (megabytes) until the peer reads or the kernel gives up, minutes later.
//! A server that must bound its kernel memory gives the queue a grace period and then resets
//! the connection (`SO_LINGER` with a zero timeout makes `close` send RST and drop the queue).

use std::io;
use std::os::fd::AsRawFd;

/// Bytes in the send queue not yet acknowledged by the peer (`SIOCOUTQ`).
pub fn unacked<S: AsRawFd>(socket: &S) -> io::Result<usize> {
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (= SIOCOUTQ) writes one int through the pointer we pass.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(queued).unwrap_or(0))
}

/// Make the next `close` abortive: RST instead of FIN, the send queue freed at once.
pub fn reset_on_close<S: AsRawFd>(socket: &S) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads the struct for the given length.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_peer_that_does_not_read_leaves_bytes_queued_and_reset_frees_them() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert_eq!(unacked(&server).unwrap(), 0);
        server.set_nonblocking(true).unwrap();
        let chunk = vec![0u8; 1 << 20];
        // Fill until the kernel takes no more: the client never reads.
        while server.write(&chunk).is_ok() {}
        assert!(unacked(&server).unwrap() > 0);
        reset_on_close(&server).unwrap();
        drop(server);
        drop(client);
    }
}
