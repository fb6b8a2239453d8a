//! Bulk data hot loops, one OS thread per data stream, on blocking sockets.
//!
//! Sending writes from one reused buffer of non-repeating bytes; receiving uses
//! `recv(MSG_TRUNC)`, which discards the payload in the kernel instead of copying it out (the TCP
//! stack still does all its work, ACKs, window updates). Measured on loopback (docs/benchmarks.md):
//! `sendfile(2)` from a memfd, the classic zero-copy send, was about half as fast as `write()`
//! (page-sized fragments per segment cost more than one copy into large frags), while
//! `MSG_TRUNC` beats `read()`. `PATHDOC_SPEED_SEND=sendfile` and `PATHDOC_SPEED_RECV=read` select
//! the other variants for comparison on other hardware.
//! Threads beat tokio tasks here: each loop is one blocking syscall after another with nothing
//! to multiplex, and a socket timeout of [`POLL`] lets the loops notice the stop flag.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often blocked loops wake to check the stop flag and deadline.
pub const POLL: Duration = Duration::from_millis(200);
/// Bytes per send/receive call (iperf3's default block is 128 KiB; bigger calls cost fewer syscalls).
const BLOCK: usize = 256 * 1024;
/// Size of the memfd sendfile reads from.
const SOURCE_LEN: usize = 4 * 1024 * 1024;

/// Shared between a stream's thread and the sampler.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Payload bytes written (sender) or read (receiver) by the application.
    pub bytes: AtomicU64,
    /// Set when the loop has ended (EOF, byte budget reached, stop, deadline or error).
    pub finished: AtomicBool,
}

/// When a loop stops.
#[derive(Debug, Clone)]
pub struct StopRule {
    pub stop: Arc<AtomicBool>,
    pub deadline: Instant,
    /// Sender only: stop after this many bytes.
    pub byte_budget: Option<u64>,
}

impl StopRule {
    fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
}

/// `PATHDOC_SPEED_SEND=sendfile`: send with sendfile(2) from a memfd instead of write().
fn send_with_sendfile() -> bool {
    std::env::var_os("PATHDOC_SPEED_SEND").is_some_and(|v| v == "sendfile")
}

/// `PATHDOC_SPEED_RECV=read`: receive with read() into a buffer instead of recv(MSG_TRUNC).
fn recv_with_read() -> bool {
    std::env::var_os("PATHDOC_SPEED_RECV").is_some_and(|v| v == "read")
}

/// A memfd of [`SOURCE_LEN`] non-repeating bytes (so no compression on the path flatters us).
fn source_file() -> io::Result<OwnedFd> {
    // The system call, not glibc's wrapper (glibc 2.27+): the portable build links against
    // glibc 2.17's symbols so `--ssh` copies run on old far ends (scripts/package.sh).
    // SAFETY: the name is a valid C string; memfd_create returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_memfd_create,
            c"pathdoc-speed".as_ptr(),
            libc::MFD_CLOEXEC,
        )
    } as libc::c_int;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(owned.try_clone()?);
    file.write_all(&pattern(SOURCE_LEN))?;
    Ok(owned)
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A blocked call timed out (the socket timeout lets loops see the stop flag) or a signal
/// interrupted it: try again.
fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Send until the rule says stop, then shut down the write side so the receiver sees EOF.
pub fn run_sender(
    stream: &TcpStream,
    counters: &StreamCounters,
    rule: &StopRule,
) -> io::Result<()> {
    stream.set_write_timeout(Some(POLL))?;
    let result = if send_with_sendfile() {
        send_file(stream, counters, rule)
    } else {
        send_copy(stream, counters, rule)
    };
    let _ = stream.shutdown(std::net::Shutdown::Write);
    counters.finished.store(true, Ordering::Relaxed);
    result
}

fn remaining(counters: &StreamCounters, rule: &StopRule) -> Option<u64> {
    rule.byte_budget
        .map(|b| b.saturating_sub(counters.bytes.load(Ordering::Relaxed)))
}

fn send_file(stream: &TcpStream, counters: &StreamCounters, rule: &StopRule) -> io::Result<()> {
    let source = source_file()?;
    let mut offset: libc::off_t = 0;
    while !rule.should_stop() {
        let mut want = BLOCK.min(SOURCE_LEN - offset as usize);
        if let Some(left) = remaining(counters, rule) {
            if left == 0 {
                break;
            }
            want = want.min(left as usize);
        }
        // SAFETY: both fds are open for the duration of the call; offset points to a valid off_t.
        let n =
            unsafe { libc::sendfile(stream.as_raw_fd(), source.as_raw_fd(), &mut offset, want) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if is_retry(&e) {
                continue;
            }
            return Err(e);
        }
        counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if offset as usize >= SOURCE_LEN {
            offset = 0;
        }
    }
    Ok(())
}

fn send_copy(mut stream: &TcpStream, counters: &StreamCounters, rule: &StopRule) -> io::Result<()> {
    let buf = pattern(BLOCK);
    while !rule.should_stop() {
        let mut want = BLOCK;
        if let Some(left) = remaining(counters, rule) {
            if left == 0 {
                break;
            }
            want = want.min(left as usize);
        }
        match stream.write(&buf[..want]) {
            Ok(n) => {
                counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receive until EOF, the stop flag or the deadline.
pub fn run_receiver(
    stream: &TcpStream,
    counters: &StreamCounters,
    rule: &StopRule,
) -> io::Result<()> {
    stream.set_read_timeout(Some(POLL))?;
    let result = if recv_with_read() {
        recv_copy(stream, counters, rule)
    } else {
        recv_discard(stream, counters, rule)
    };
    counters.finished.store(true, Ordering::Relaxed);
    result
}

fn recv_discard(stream: &TcpStream, counters: &StreamCounters, rule: &StopRule) -> io::Result<()> {
    // MSG_TRUNC on TCP: the kernel drops the bytes instead of copying them to us; the buffer
    // pointer is never written.
    let mut scratch = [0u8; 1];
    while !rule.should_stop() {
        // SAFETY: with MSG_TRUNC the kernel does not write to the buffer; the pointer is valid anyway.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                scratch.as_mut_ptr().cast(),
                BLOCK * 4,
                libc::MSG_TRUNC,
            )
        };
        if n == 0 {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if is_retry(&e) {
                continue;
            }
            return Err(e);
        }
        counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(())
}

fn recv_copy(mut stream: &TcpStream, counters: &StreamCounters, rule: &StopRule) -> io::Result<()> {
    let mut buf = vec![0u8; BLOCK];
    while !rule.should_stop() {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Socket options a data stream gets before data flows.
pub fn configure(stream: &TcpStream, window: Option<u32>, cc: Option<&str>) -> io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    if let Some(w) = window {
        sock.set_send_buffer_size(w as usize)?;
        sock.set_recv_buffer_size(w as usize)?;
    }
    if let Some(cc) = cc {
        pathdoc_sys::tcp_info::set_congestion_control(stream, cc).map_err(|e| {
            io::Error::new(e.kind(), format!("congestion control {cc:?} is not available here ({e}); see /proc/sys/net/ipv4/tcp_available_congestion_control"))
        })?;
    }
    Ok(())
}

/// One data stream and its thread.
pub struct RunningStream {
    pub tag: u32,
    pub sending: bool,
    pub stream: Arc<TcpStream>,
    pub counters: Arc<StreamCounters>,
    pub thread: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl RunningStream {
    /// Start the hot loop for `stream` on its own thread.
    pub fn start(
        tag: u32,
        sending: bool,
        stream: Arc<TcpStream>,
        rule: StopRule,
    ) -> io::Result<Self> {
        let counters = Arc::new(StreamCounters::default());
        let (s, c) = (stream.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name(format!("pathdoc-speed-{tag:x}"))
            .spawn(move || {
                if sending {
                    run_sender(&s, &c, &rule)
                } else {
                    run_receiver(&s, &c, &rule)
                }
            })?;
        Ok(RunningStream {
            tag,
            sending,
            stream,
            counters,
            thread: Some(thread),
        })
    }

    pub fn finished(&self) -> bool {
        self.counters.finished.load(Ordering::Relaxed)
    }

    /// A sending stream whose loop ended and whose every byte the peer acknowledged: its
    /// TCP_INFO now counts the whole payload as delivered.
    pub fn delivered_all(&self) -> bool {
        self.finished()
            && self
                .sample()
                .is_ok_and(|x| x.info.unacked == 0 && x.info.notsent_bytes == 0)
    }

    /// Wait for the thread (it stops within [`POLL`] of the stop flag).
    pub fn join(&mut self) -> io::Result<()> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("data stream thread panicked"))),
            None => Ok(()),
        }
    }

    pub fn sample(&self) -> io::Result<crate::spec::StreamSample> {
        Ok(crate::spec::StreamSample {
            tag: self.tag,
            app_bytes: self.counters.bytes.load(Ordering::Relaxed),
            info: pathdoc_sys::tcp_info::tcp_info(&*self.stream)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn byte_budget_is_exact_and_receiver_sees_eof() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = Arc::new(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
        let rx = Arc::new(listener.accept().unwrap().0);
        let rule = |budget| StopRule {
            stop: Arc::new(AtomicBool::new(false)),
            deadline: Instant::now() + Duration::from_secs(10),
            byte_budget: budget,
        };
        let mut r = RunningStream::start(1, false, rx, rule(None)).unwrap();
        let mut s = RunningStream::start(0, true, tx, rule(Some(10_000_123))).unwrap();
        s.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.counters.bytes.load(Ordering::Relaxed), 10_000_123);
        assert_eq!(r.counters.bytes.load(Ordering::Relaxed), 10_000_123);
        assert!(r.finished() && s.finished());
    }

    #[test]
    fn stop_flag_ends_both_loops_quickly() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = Arc::new(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
        let rx = Arc::new(listener.accept().unwrap().0);
        let stop = Arc::new(AtomicBool::new(false));
        let rule = StopRule {
            stop: stop.clone(),
            deadline: Instant::now() + Duration::from_secs(30),
            byte_budget: None,
        };
        let mut s = RunningStream::start(0, true, tx, rule.clone()).unwrap();
        let mut r = RunningStream::start(1, false, rx, rule).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        stop.store(true, Ordering::Relaxed);
        s.join().unwrap();
        r.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(2));
        assert!(r.counters.bytes.load(Ordering::Relaxed) > 0);
        assert!(s.sample().unwrap().info.bytes_acked > 0);
    }

    #[test]
    fn unknown_congestion_control_is_a_clear_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let e = configure(&s, Some(1 << 20), Some("warp-drive")).unwrap_err();
        assert!(
            e.to_string().contains("tcp_available_congestion_control"),
            "{e}"
        );
        configure(&s, None, Some("reno")).unwrap();
    }
}
