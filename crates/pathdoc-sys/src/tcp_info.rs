//! Linux `TCP_INFO`: the kernel's per-socket TCP state (`struct tcp_info` in `linux/tcp.h`).
//!
//! The one job of this module is to read that struct for a connected TCP socket. [`TcpInfo`] mirrors
//! the kernel layout field for field (through `tcpi_total_rto_time`, Linux 6.7), so a single
//! `getsockopt(IPPROTO_TCP, TCP_INFO)` fills it. Older kernels return a shorter struct: the number of
//! bytes the kernel actually wrote is kept in [`TcpInfo::kernel_len`], fields past it stay zero, and
//! [`TcpInfo::has`] tells whether a field was provided (e.g. `rwnd_limited` needs Linux ≥ 4.10).
//!
//! Units follow the kernel: times in microseconds unless named `_ms`/`last_*` (milliseconds),
//! rates in bytes per second, windows in bytes, `snd_cwnd` in segments.

use std::io;
use std::mem::offset_of;
use std::os::fd::AsRawFd;

use serde::{Deserialize, Serialize};

/// The kernel's `struct tcp_info`, in its exact C layout, plus how much of it the kernel filled.
///
/// Field names drop the `tcpi_` prefix. `kernel_len` is not part of the kernel struct; it sits
/// after the last kernel field and is never passed to `getsockopt`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    /// `tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4` (use [`TcpInfo::snd_wscale`] / [`TcpInfo::rcv_wscale`]).
    pub wscale: u8,
    /// `tcpi_delivery_rate_app_limited : 1, tcpi_fastopen_client_fail : 2`.
    pub app_limited_flags: u8,

    pub rto: u32,
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,

    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,

    pub last_data_sent: u32,
    pub last_ack_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,

    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt: u32,
    pub rttvar: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,

    pub rcv_rtt: u32,
    pub rcv_space: u32,

    pub total_retrans: u32,

    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,

    pub notsent_bytes: u32,
    pub min_rtt: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,

    pub delivery_rate: u64,

    pub busy_time: u64,
    pub rwnd_limited: u64,
    pub sndbuf_limited: u64,

    pub delivered: u32,
    pub delivered_ce: u32,

    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub dsack_dups: u32,
    pub reord_seen: u32,

    pub rcv_ooopack: u32,

    pub snd_wnd: u32,
    pub rcv_wnd: u32,

    pub rehash: u32,

    pub total_rto: u16,
    pub total_rto_recoveries: u16,
    pub total_rto_time: u32,

    /// Bytes of the struct the kernel filled (not a kernel field).
    pub kernel_len: u32,
}

/// Size of the kernel part of [`TcpInfo`] (everything before `kernel_len`).
pub const KERNEL_STRUCT_LEN: usize = offset_of!(TcpInfo, kernel_len);

/// End offsets of fields added over kernel versions, for [`TcpInfo::has`]: a field is valid
/// when the kernel wrote past its end.
pub mod field {
    use super::TcpInfo;
    use std::mem::offset_of;

    pub const TOTAL_RETRANS: usize = offset_of!(TcpInfo, total_retrans) + size_of::<u32>();
    pub const PACING_RATE: usize = offset_of!(TcpInfo, pacing_rate) + size_of::<u64>();
    pub const BYTES_ACKED: usize = offset_of!(TcpInfo, bytes_acked) + size_of::<u64>();
    pub const MIN_RTT: usize = offset_of!(TcpInfo, min_rtt) + size_of::<u32>();
    pub const DELIVERY_RATE: usize = offset_of!(TcpInfo, delivery_rate) + size_of::<u64>();
    pub const BUSY_TIME: usize = offset_of!(TcpInfo, busy_time) + size_of::<u64>();
    pub const RWND_LIMITED: usize = offset_of!(TcpInfo, rwnd_limited) + size_of::<u64>();
    pub const SNDBUF_LIMITED: usize = offset_of!(TcpInfo, sndbuf_limited) + size_of::<u64>();
    pub const DELIVERED: usize = offset_of!(TcpInfo, delivered) + size_of::<u32>();
    pub const BYTES_SENT: usize = offset_of!(TcpInfo, bytes_sent) + size_of::<u64>();
    pub const BYTES_RETRANS: usize = offset_of!(TcpInfo, bytes_retrans) + size_of::<u64>();
    pub const DSACK_DUPS: usize = offset_of!(TcpInfo, dsack_dups) + size_of::<u32>();
    pub const REORD_SEEN: usize = offset_of!(TcpInfo, reord_seen) + size_of::<u32>();
    pub const RCV_OOOPACK: usize = offset_of!(TcpInfo, rcv_ooopack) + size_of::<u32>();
    pub const SND_WND: usize = offset_of!(TcpInfo, snd_wnd) + size_of::<u32>();
    pub const RCV_WND: usize = offset_of!(TcpInfo, rcv_wnd) + size_of::<u32>();
    pub const TOTAL_RTO_TIME: usize = offset_of!(TcpInfo, total_rto_time) + size_of::<u32>();
}

impl TcpInfo {
    /// Whether the kernel provided the field ending at byte `field_end` (see [`field`]).
    pub fn has(&self, field_end: usize) -> bool {
        self.kernel_len as usize >= field_end
    }
    /// Path MTU the kernel uses for this connection (bytes).
    pub fn pmtu(&self) -> u32 {
        self.pmtu
    }
    /// Current sending MSS (payload bytes per segment, after TCP options such as timestamps).
    pub fn snd_mss(&self) -> u32 {
        self.snd_mss
    }
    /// Estimated MSS of the peer's segments as received.
    pub fn rcv_mss(&self) -> u32 {
        self.rcv_mss
    }
    /// MSS this end advertised in its SYN (bytes).
    pub fn advmss(&self) -> u32 {
        self.advmss
    }
    /// Send window scale shift (low 4 bits of the bitfield byte).
    pub fn snd_wscale(&self) -> u8 {
        self.wscale & 0x0f
    }
    /// Receive window scale shift (high 4 bits of the bitfield byte).
    pub fn rcv_wscale(&self) -> u8 {
        self.wscale >> 4
    }
    /// Whether the last delivery-rate sample was taken while the application did not keep the pipe full.
    pub fn delivery_rate_app_limited(&self) -> bool {
        self.app_limited_flags & 0x01 != 0
    }
    /// TCP timestamps negotiated (TCPI_OPT_TIMESTAMPS): 12 extra option bytes per segment.
    pub fn timestamps(&self) -> bool {
        self.options & 0x01 != 0
    }
    /// SACK negotiated (TCPI_OPT_SACK).
    pub fn sack(&self) -> bool {
        self.options & 0x02 != 0
    }
    /// Window scaling negotiated (TCPI_OPT_WSCALE).
    pub fn window_scaling(&self) -> bool {
        self.options & 0x04 != 0
    }
    /// ECN negotiated (TCPI_OPT_ECN).
    pub fn ecn(&self) -> bool {
        self.options & 0x08 != 0
    }
    /// Congestion window in bytes (`snd_cwnd × snd_mss`).
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd) * u64::from(self.snd_mss)
    }
}

/// Reads `TCP_INFO` for a TCP socket. Fields the running kernel does not know stay zero; see
/// [`TcpInfo::kernel_len`] and [`TcpInfo::has`].
pub fn tcp_info(fd: &impl AsRawFd) -> io::Result<TcpInfo> {
    let mut info = TcpInfo::default();
    let mut len = KERNEL_STRUCT_LEN as libc::socklen_t;
    // SAFETY: `info` is a repr(C) plain-old-data struct at least `len` bytes long; the kernel
    // writes at most `len` bytes and reports how many it wrote back in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut TcpInfo).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    info.kernel_len = len.min(KERNEL_STRUCT_LEN as libc::socklen_t);
    Ok(info)
}

/// Current `TCP_CONGESTION` of a socket (e.g. "cubic", "bbr").
pub fn congestion_control(fd: &impl AsRawFd) -> io::Result<String> {
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is 16 writable bytes (TCP_CA_NAME_MAX) and len says so.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let end = buf[..len as usize]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(len as usize);
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Sets `TCP_CONGESTION` (the algorithm must be loaded or loadable; see
/// `/proc/sys/net/ipv4/tcp_available_congestion_control`).
pub fn set_congestion_control(fd: &impl AsRawFd, name: &str) -> io::Result<()> {
    // SAFETY: pointer and length describe the bytes of `name`.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast::<libc::c_void>(),
            name.len() as libc::socklen_t,
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
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn layout_matches_kernel_uapi() {
        // Offsets from linux/tcp.h (6.7), checked against gcc offsetof() on this machine's headers.
        assert_eq!(offset_of!(TcpInfo, rto), 8);
        assert_eq!(offset_of!(TcpInfo, pmtu), 60);
        assert_eq!(offset_of!(TcpInfo, total_retrans), 100);
        assert_eq!(offset_of!(TcpInfo, pacing_rate), 104);
        assert_eq!(offset_of!(TcpInfo, min_rtt), 148);
        assert_eq!(offset_of!(TcpInfo, delivery_rate), 160);
        assert_eq!(offset_of!(TcpInfo, busy_time), 168);
        assert_eq!(offset_of!(TcpInfo, delivered), 192);
        assert_eq!(offset_of!(TcpInfo, bytes_sent), 200);
        assert_eq!(offset_of!(TcpInfo, snd_wnd), 228);
        assert_eq!(offset_of!(TcpInfo, total_rto_time), 244);
        assert_eq!(KERNEL_STRUCT_LEN, 248);
    }

    #[test]
    fn reads_a_loopback_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7u8; 100_000]).unwrap();
        let mut buf = vec![0u8; 100_000];
        server.read_exact(&mut buf).unwrap();
        let info = tcp_info(&client).unwrap();
        assert_eq!(info.state, 1, "ESTABLISHED");
        assert!(
            info.has(field::BYTES_SENT),
            "kernel_len {}",
            info.kernel_len
        );
        assert!(info.bytes_acked >= 100_000 || info.bytes_sent >= 100_000);
        assert!(info.snd_mss() > 0 && info.pmtu() >= 1280);
        assert!(info.advmss() > 0);
        let rx = tcp_info(&server).unwrap();
        assert!(rx.bytes_received >= 100_000);
        assert!(rx.rcv_mss() > 0);
        set_congestion_control(&client, "reno").unwrap();
        assert_eq!(congestion_control(&client).unwrap(), "reno");
        assert!(set_congestion_control(&client, "no-such-cc").is_err());
    }
}
