//! AF_PACKET sockets bound to one interface: the delay line's only kernel I/O.
//!
//! Every socket carries a `virtio_net_hdr` in front of each frame (`PACKET_VNET_HDR`), so a GSO/GRO
//! super-frame of up to 64 KiB crosses userspace in one `recv` and one `send` with its segmentation and
//! checksum-offload metadata intact. Without the header a locally generated frame would also arrive
//! with only a partial (pseudo-header) checksum and be dropped by the far host.

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Size of `struct virtio_net_hdr` that `PACKET_VNET_HDR` prepends to every frame.
pub const VNET_HDR_LEN: usize = 10;

/// Looks up an interface index in the calling thread's network namespace.
pub fn interface_index(name: &str) -> Option<u32> {
    let c_name = CString::new(name).ok()?;
    // SAFETY: `c_name` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    (index != 0).then_some(index)
}

/// Which way a socket is used; a transmit-only socket never queues received frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Receives every frame arriving on the interface (not the ones sent from this host).
    Receive,
    /// Only sends; bound with protocol 0 so the kernel delivers nothing to it.
    Transmit,
}

/// An AF_PACKET SOCK_RAW socket bound to one interface, with virtio_net_hdr framing.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens and binds a packet socket on interface `ifindex`.
    ///
    /// `buffer_bytes` sizes the kernel receive (or send) buffer; it is forced past
    /// `net.core.rmem_max` with `SO_RCVBUFFORCE`, which needs CAP_NET_ADMIN like the socket itself.
    pub fn open(ifindex: u32, role: Role, buffer_bytes: usize) -> io::Result<PacketSocket> {
        // Created with protocol 0 so nothing is queued before bind() narrows it to one interface.
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let socket = PacketSocket { fd };

        socket.set_int(libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)?;
        let buffer = i32::try_from(buffer_bytes).unwrap_or(i32::MAX);
        match role {
            Role::Receive => {
                // Our own transmissions on this interface must not come back to us.
                socket.set_int(libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)?;
                socket.set_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, buffer)?;
                // Wake up regularly so the caller can notice its stop flag.
                socket.set_timeout(libc::SO_RCVTIMEO, Duration::from_millis(100))?;
            }
            Role::Transmit => {
                socket.set_int(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, buffer)?;
                socket.set_timeout(libc::SO_SNDTIMEO, Duration::from_millis(100))?;
            }
        }

        let protocol = match role {
            Role::Receive => (libc::ETH_P_ALL as u16).to_be(),
            Role::Transmit => 0,
        };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol;
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` is a valid sockaddr_ll and the length passed matches its size.
        let rc = unsafe {
            libc::bind(
                socket.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }

        if role == Role::Receive {
            // Frames addressed to the hosts on either side are not for this interface's MAC; the
            // membership puts the interface in promiscuous mode and is undone when the socket closes.
            // SAFETY: packet_mreq is plain old data; all-zero is a valid value.
            let mut mreq: libc::packet_mreq = unsafe { mem::zeroed() };
            mreq.mr_ifindex = ifindex as i32;
            mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
            socket.set_raw(libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)?;
        }
        Ok(socket)
    }

    /// Receives one frame (virtio_net_hdr + Ethernet frame) into `buf`.
    ///
    /// Returns the frame's full length, which exceeds `buf.len()` when it was truncated.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Sends one frame (virtio_net_hdr + Ethernet frame) out of the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for reads of `frame.len()` bytes for the duration of the call.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Frames the kernel dropped because this socket's receive buffer was full, since the last call.
    pub fn take_kernel_drops(&self) -> io::Result<u64> {
        // SAFETY: tpacket_stats is plain old data; all-zero is a valid value.
        let mut stats: libc::tpacket_stats = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `stats` and `len` are valid for writes and `len` holds the buffer size.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut stats as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(stats.tp_drops))
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        self.set_raw(level, name, &value)
    }

    fn set_timeout(&self, name: libc::c_int, timeout: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        self.set_raw(libc::SOL_SOCKET, name, &tv)
    }

    fn set_raw<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: `value` points to a live `T` and the length passed is exactly its size.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (value as *const T).cast(),
                mem::size_of::<T>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
