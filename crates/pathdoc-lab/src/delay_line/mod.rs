//! Userspace delay line: a transparent layer-2 element that adds one-way delay, jitter and random loss.
//!
//! The kernel here has no netem, so the lab puts an "element" network namespace in the middle of a
//! link (host A <-veth-> element <-veth-> host B) and runs [`run_delay_line`] inside it. Every frame
//! received on `iface_a` leaves on `iface_b` after the a→b delay and vice versa; ARP, IPv6 neighbour
//! discovery and everything else pass through untouched, so A and B share one subnet.
//!
//! # Design
//! - Per interface an AF_PACKET receive socket (`PACKET_IGNORE_OUTGOING`, so the line never sees its
//!   own transmissions) and per direction a transmit-only socket. All carry a `virtio_net_hdr`
//!   (`PACKET_VNET_HDR`): a 64 KiB TSO/GSO super-frame costs one `recv` and one `send`, and its
//!   checksum-offload state survives the trip. This is what makes ≥ 1 Gbit/s possible on 2 cores.
//! - Per direction a receive thread stamps each frame with its departure deadline
//!   (arrival + delay ± jitter) and a transmit thread sleeps until that deadline with a 1 ns timer
//!   slack. Deadlines never decrease (a jittered frame is held back until its predecessor left), so
//!   each direction is strictly FIFO.
//! - The queue is bounded in bytes ([`DelayLineOptions::queue_limit_bytes`]); frames arriving at a
//!   full queue are dropped and counted, as a router would.
//! - Random loss applies per wire packet: in a direction with loss, TCP and UDP GSO super-frames
//!   are first cut into MSS-sized segments (see `segment`), each dropped independently; without
//!   loss they cross whole. Frame and byte counters count those segments.
//!
//! # What the element namespace must provide
//! - Both interfaces exist in the namespace the caller runs in, have the same MTU as the hosts'
//!   ends, and are up. [`prepare_interface`] brings one up and disables IPv6 on it so the element
//!   stays silent; no IPv4 address is needed (nor wanted) on either port, and IP forwarding in the
//!   element namespace is irrelevant.
//! - Promiscuous mode is taken by the receive sockets themselves for as long as they run.
//! - Keep the veth defaults for offloads (TSO, GSO, scatter-gather and tx-checksumming on) on the
//!   element's ports and on the hosts' ends; nothing needs `ethtool`.
//! - CAP_NET_RAW and CAP_NET_ADMIN (root in the lab), and CAP_SYS_NICE for the SCHED_FIFO priority
//!   that keeps departures on time while other processes load the CPUs (without it the line runs
//!   but can be late by milliseconds under load).

mod interface;
mod packet_socket;
mod segment;
mod signals;

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rand::Rng;

pub use interface::prepare_interface;
use packet_socket::{interface_index, PacketSocket, Role, VNET_HDR_LEN};
pub use signals::stop_on_termination_signals;

/// Longest one-way delay plus jitter accepted for one direction.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// IP packet sizes a fixed-size NIC may cut at (IPv4's minimum reassembly size to jumbo frames).
pub const NIC_SEGMENT_RANGE: std::ops::RangeInclusive<u16> = 576..=9000;

/// Default bound on the bytes queued in one direction: 1 Gbit/s × 300 ms is 37.5 MB, so 64 MiB
/// holds the largest delay the lab uses at full rate with room for bursts.
pub const DEFAULT_QUEUE_LIMIT_BYTES: usize = 64 << 20;

/// Largest frame accepted (virtio_net_hdr + Ethernet frame); a 64 KiB GSO frame fits with room for
/// headers, bigger ones (BIG TCP) are counted as truncated and dropped.
const RECEIVE_BUFFER_BYTES: usize = 128 << 10;

/// Kernel receive buffer per socket: a few milliseconds of 10 Gbit/s so bursts are not dropped
/// while the receive thread is descheduled.
const SOCKET_RECEIVE_BUFFER_BYTES: usize = 32 << 20;
const SOCKET_SEND_BUFFER_BYTES: usize = 4 << 20;

/// SCHED_FIFO priority of the line's threads: above every normal task, below the kernel's own
/// real-time threads (which use 50 and up).
const REALTIME_PRIORITY: libc::c_int = 10;

/// How often blocked threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// A frame whose deadline is this close is sent now rather than after a sleep that would overshoot.
const SEND_EARLY_SLACK: Duration = Duration::from_micros(20);

/// Impairment of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DirectionConfig {
    /// Mean one-way delay added to every frame.
    pub delay: Duration,
    /// Each frame's delay is drawn uniformly from `delay ± jitter` (floored at zero), then raised to
    /// its predecessor's departure time so frames are never reordered.
    pub jitter: Duration,
    /// Probability in percent (0–100) that a frame is dropped.
    pub loss_percent: f64,
    /// Emulates a NIC whose TCP segmentation offload cuts at a fixed IP packet size (QEMU's
    /// rtl8139: 1500) whatever MSS or path MTU the sending kernel asked for: TCP GSO super-frames
    /// leave as packets of this many bytes, DF kept. Ordinary frames pass as they are.
    pub nic_segments_at: Option<u16>,
}

/// A delay line between two interfaces of the current network namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayLineConfig {
    pub iface_a: String,
    pub iface_b: String,
    pub a_to_b: DirectionConfig,
    pub b_to_a: DirectionConfig,
}

/// Tuning that most callers leave at its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayLineOptions {
    /// Bytes (virtio_net_hdr + frame) one direction may hold; arrivals beyond it are dropped.
    pub queue_limit_bytes: usize,
}

impl Default for DelayLineOptions {
    fn default() -> Self {
        DelayLineOptions {
            queue_limit_bytes: DEFAULT_QUEUE_LIMIT_BYTES,
        }
    }
}

/// What one direction did. Bytes are Ethernet frame bytes as the packet socket sees them: a GSO
/// super-frame counts once with its headers, so this is close to, not equal to, on-the-wire bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirectionStats {
    pub frames_received: u64,
    pub bytes_received: u64,
    pub frames_forwarded: u64,
    pub bytes_forwarded: u64,
    /// Dropped on purpose by the configured random loss.
    pub dropped_loss: u64,
    /// Dropped because the queue already held `queue_limit_bytes`.
    pub dropped_queue_full: u64,
    /// Dropped because they were larger than the receive buffer.
    pub dropped_truncated: u64,
    /// Dropped by the kernel before the line could read them (socket buffer overrun).
    pub dropped_by_kernel: u64,
    /// Frames the outgoing interface refused (down, too big for its MTU, no buffer space).
    pub send_errors: u64,
    /// Highest number of bytes queued at once.
    pub peak_queue_bytes: u64,
    /// How late frames left relative to their deadline: the worst case and the mean, in µs.
    pub max_late_us: u64,
    pub mean_late_us: u64,
}

/// Both directions' statistics at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DelayLineStats {
    pub a_to_b: DirectionStats,
    pub b_to_a: DirectionStats,
}

/// Why the delay line could not start or stopped early.
#[derive(Debug, thiserror::Error)]
pub enum DelayLineError {
    #[error("invalid delay line configuration: {0}")]
    InvalidConfig(String),
    #[error("interface {name:?} does not exist in this network namespace")]
    InterfaceNotFound { name: String },
    #[error("permission denied {what}: the delay line needs root (CAP_NET_RAW and CAP_NET_ADMIN)")]
    PermissionDenied { what: String },
    #[error("network namespace {name:?} not found at {}", path.display())]
    NetnsNotFound { name: String, path: PathBuf },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("delay line thread panicked: {0}")]
    ThreadPanicked(String),
}

impl DirectionConfig {
    fn validate(&self, direction: &str) -> Result<(), DelayLineError> {
        if !(0.0..=100.0).contains(&self.loss_percent) {
            return Err(DelayLineError::InvalidConfig(format!(
                "{direction} loss must be between 0 and 100 percent, got {}",
                self.loss_percent
            )));
        }
        if let Some(bytes) = self.nic_segments_at {
            if !NIC_SEGMENT_RANGE.contains(&bytes) {
                return Err(DelayLineError::InvalidConfig(format!(
                    "{direction} NIC segmentation size must be {}..={} bytes, got {bytes}",
                    NIC_SEGMENT_RANGE.start(),
                    NIC_SEGMENT_RANGE.end()
                )));
            }
        }
        if self.delay.saturating_add(self.jitter) > MAX_DELAY {
            return Err(DelayLineError::InvalidConfig(format!(
                "{direction} delay + jitter must be at most {} s, got {:?} + {:?}",
                MAX_DELAY.as_secs(),
                self.delay,
                self.jitter
            )));
        }
        Ok(())
    }

    /// Draws one frame's delay from `delay ± jitter`, floored at zero.
    fn sample_delay(&self, rng: &mut impl Rng) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let jitter_ns = self.jitter.as_nanos() as i128;
        let offset = rng.gen_range(-jitter_ns..=jitter_ns);
        let delay_ns = (self.delay.as_nanos() as i128 + offset).max(0);
        Duration::from_nanos(delay_ns as u64)
    }
}

impl DelayLineConfig {
    /// Checks the configuration without touching the system.
    pub fn validate(&self) -> Result<(), DelayLineError> {
        if self.iface_a.is_empty() || self.iface_b.is_empty() {
            return Err(DelayLineError::InvalidConfig(
                "interface names must not be empty".into(),
            ));
        }
        if self.iface_a == self.iface_b {
            return Err(DelayLineError::InvalidConfig(format!(
                "the two ports must be different interfaces, both are {:?}",
                self.iface_a
            )));
        }
        self.a_to_b.validate("a-to-b")?;
        self.b_to_a.validate("b-to-a")
    }
}

/// Bridges `iface_a` and `iface_b` of the current network namespace until `stop` is set.
pub fn run_delay_line(
    cfg: &DelayLineConfig,
    stop: &AtomicBool,
) -> Result<DelayLineStats, DelayLineError> {
    run_delay_line_with_options(cfg, &DelayLineOptions::default(), stop)
}

/// [`run_delay_line`] with explicit [`DelayLineOptions`].
pub fn run_delay_line_with_options(
    cfg: &DelayLineConfig,
    options: &DelayLineOptions,
    stop: &AtomicBool,
) -> Result<DelayLineStats, DelayLineError> {
    run_until_stopped(cfg, options, stop, || {})
}

/// Opens every socket (so setup errors are reported before anything runs), calls `on_ready`, then
/// forwards until `stop` is set or a thread fails.
fn run_until_stopped(
    cfg: &DelayLineConfig,
    options: &DelayLineOptions,
    stop: &AtomicBool,
    on_ready: impl FnOnce(),
) -> Result<DelayLineStats, DelayLineError> {
    cfg.validate()?;
    if options.queue_limit_bytes == 0 {
        return Err(DelayLineError::InvalidConfig(
            "queue limit must be positive".into(),
        ));
    }
    let index_a =
        interface_index(&cfg.iface_a).ok_or_else(|| DelayLineError::InterfaceNotFound {
            name: cfg.iface_a.clone(),
        })?;
    let index_b =
        interface_index(&cfg.iface_b).ok_or_else(|| DelayLineError::InterfaceNotFound {
            name: cfg.iface_b.clone(),
        })?;

    let a_to_b = Direction::open(
        "a-to-b",
        cfg.a_to_b,
        index_a,
        index_b,
        &cfg.iface_a,
        &cfg.iface_b,
    )?;
    let b_to_a = Direction::open(
        "b-to-a",
        cfg.b_to_a,
        index_b,
        index_a,
        &cfg.iface_b,
        &cfg.iface_a,
    )?;
    on_ready();

    let failed = AtomicBool::new(false);
    let halt = Halt {
        stop,
        failed: &failed,
    };
    let limit = options.queue_limit_bytes;
    let results: Vec<Result<(), DelayLineError>> = thread::scope(|scope| {
        let handles = [&a_to_b, &b_to_a].map(|direction| {
            let (sender, receiver) = mpsc::channel();
            let receive = thread::Builder::new()
                .name(format!("dl-rx-{}", direction.name))
                .spawn_scoped(scope, move || {
                    halt.fail_on_error(direction.receive_loop(sender, limit, halt))
                });
            let transmit = thread::Builder::new()
                .name(format!("dl-tx-{}", direction.name))
                .spawn_scoped(scope, move || {
                    halt.fail_on_error(direction.transmit_loop(receiver, halt))
                });
            (receive, transmit)
        });
        let mut results = Vec::new();
        for (receive, transmit) in handles {
            for spawned in [receive, transmit] {
                results.push(match spawned {
                    Ok(handle) => handle.join().unwrap_or_else(|panic| {
                        failed.store(true, Ordering::SeqCst);
                        Err(DelayLineError::ThreadPanicked(panic_message(&panic)))
                    }),
                    Err(source) => {
                        failed.store(true, Ordering::SeqCst);
                        Err(DelayLineError::Io {
                            context: "spawning a delay line thread".into(),
                            source,
                        })
                    }
                });
            }
        }
        results
    });
    for result in results {
        result?;
    }
    Ok(DelayLineStats {
        a_to_b: a_to_b.stats(),
        b_to_a: b_to_a.stats(),
    })
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The caller's stop flag plus an internal one raised when any thread fails, so the others end too.
#[derive(Clone, Copy)]
struct Halt<'a> {
    stop: &'a AtomicBool,
    failed: &'a AtomicBool,
}

impl Halt<'_> {
    fn requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.failed.load(Ordering::Relaxed)
    }

    fn fail_on_error(&self, result: Result<(), DelayLineError>) -> Result<(), DelayLineError> {
        if result.is_err() {
            self.failed.store(true, Ordering::SeqCst);
        }
        result
    }
}

/// A frame waiting in the line.
struct QueuedFrame {
    departure: Instant,
    bytes: Box<[u8]>,
}

/// Counters shared by one direction's two threads.
#[derive(Default)]
struct Counters {
    frames_received: AtomicU64,
    bytes_received: AtomicU64,
    frames_forwarded: AtomicU64,
    bytes_forwarded: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_truncated: AtomicU64,
    dropped_by_kernel: AtomicU64,
    send_errors: AtomicU64,
    queued_bytes: AtomicU64,
    peak_queue_bytes: AtomicU64,
    late_ns_total: AtomicU64,
    late_ns_max: AtomicU64,
}

/// One direction: frames read from `rx` leave through `tx` at their deadline.
struct Direction {
    name: &'static str,
    config: DirectionConfig,
    rx: PacketSocket,
    tx: PacketSocket,
    counters: Counters,
}

impl Direction {
    fn open(
        name: &'static str,
        config: DirectionConfig,
        in_index: u32,
        out_index: u32,
        in_name: &str,
        out_name: &str,
    ) -> Result<Direction, DelayLineError> {
        let rx = PacketSocket::open(in_index, Role::Receive, SOCKET_RECEIVE_BUFFER_BYTES)
            .map_err(|e| socket_error(e, in_name))?;
        let tx = PacketSocket::open(out_index, Role::Transmit, SOCKET_SEND_BUFFER_BYTES)
            .map_err(|e| socket_error(e, out_name))?;
        Ok(Direction {
            name,
            config,
            rx,
            tx,
            counters: Counters::default(),
        })
    }

    fn receive_loop(
        &self,
        queue: mpsc::Sender<QueuedFrame>,
        limit: usize,
        halt: Halt<'_>,
    ) -> Result<(), DelayLineError> {
        raise_to_realtime(self.name);
        let counters = &self.counters;
        let mut buffer = vec![0u8; RECEIVE_BUFFER_BYTES];
        let mut rng = rand::thread_rng();
        let mut last_departure: Option<Instant> = None;
        let mut frames_since_stats = 0u32;
        let mut segment_scratch = Vec::new();
        while !halt.requested() {
            let len = match self.rx.recv(&mut buffer) {
                Ok(len) => len,
                Err(e) if is_transient(&e) => continue,
                Err(source) => {
                    return Err(DelayLineError::Io {
                        context: format!("receiving on the {} port", self.name),
                        source,
                    })
                }
            };
            let arrival = Instant::now();
            frames_since_stats += 1;
            if frames_since_stats >= 4096 {
                frames_since_stats = 0;
                self.collect_kernel_drops();
            }
            if len < VNET_HDR_LEN {
                continue;
            }
            let frame = &buffer[..len.min(buffer.len())];
            if len > buffer.len() {
                counters.frames_received.fetch_add(1, Ordering::Relaxed);
                counters
                    .bytes_received
                    .fetch_add((len - VNET_HDR_LEN) as u64, Ordering::Relaxed);
                counters.dropped_truncated.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // All segments of a super-frame arrived together and share one departure time.
            let mut departure = arrival + self.config.sample_delay(&mut rng);
            if let Some(previous) = last_departure {
                departure = departure.max(previous);
            }
            last_departure = Some(departure);
            let mut connected = true;
            let mut admit = |bytes: &[u8]| {
                connected &= self.admit(bytes, departure, &queue, limit, &mut rng);
            };
            let lossy = self.config.loss_percent > 0.0;
            let cut = match self.config.nic_segments_at {
                Some(bytes) => segment::segment_tcp_at_packet_size(
                    frame,
                    usize::from(bytes),
                    &mut segment_scratch,
                    &mut admit,
                ),
                None => false,
            };
            if !(cut
                || lossy && segment::segment_gso_frame(frame, &mut segment_scratch, &mut admit))
            {
                admit(frame);
            }
            if !connected {
                break; // The transmit thread ended; it reports why.
            }
        }
        self.collect_kernel_drops();
        Ok(())
    }

    /// Counts one frame (virtio_net_hdr + Ethernet frame), applies loss and the queue bound, and
    /// queues it for `departure`. False when the transmit thread has gone.
    fn admit(
        &self,
        bytes: &[u8],
        departure: Instant,
        queue: &mpsc::Sender<QueuedFrame>,
        limit: usize,
        rng: &mut impl Rng,
    ) -> bool {
        let counters = &self.counters;
        let len = bytes.len() as u64;
        counters.frames_received.fetch_add(1, Ordering::Relaxed);
        counters
            .bytes_received
            .fetch_add(len - VNET_HDR_LEN as u64, Ordering::Relaxed);
        if self.config.loss_percent > 0.0 && rng.gen::<f64>() * 100.0 < self.config.loss_percent {
            counters.dropped_loss.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if counters.queued_bytes.load(Ordering::Relaxed) + len > limit as u64 {
            counters.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let queued = counters.queued_bytes.fetch_add(len, Ordering::Relaxed) + len;
        counters
            .peak_queue_bytes
            .fetch_max(queued, Ordering::Relaxed);
        queue
            .send(QueuedFrame {
                departure,
                bytes: bytes.into(),
            })
            .is_ok()
    }

    fn transmit_loop(
        &self,
        queue: mpsc::Receiver<QueuedFrame>,
        halt: Halt<'_>,
    ) -> Result<(), DelayLineError> {
        // Wake-ups land within a few µs of the deadline instead of the default 50 µs slack.
        let _ = nix::sys::prctl::set_timerslack(1);
        raise_to_realtime(self.name);
        let counters = &self.counters;
        loop {
            let frame = match queue.recv_timeout(STOP_POLL) {
                Ok(frame) => frame,
                Err(mpsc::RecvTimeoutError::Timeout) if !halt.requested() => continue,
                Err(_) => return Ok(()),
            };
            if !sleep_until(frame.departure, halt) {
                return Ok(());
            }
            let late = Instant::now()
                .saturating_duration_since(frame.departure)
                .as_nanos() as u64;
            counters.late_ns_total.fetch_add(late, Ordering::Relaxed);
            counters.late_ns_max.fetch_max(late, Ordering::Relaxed);
            let len = frame.bytes.len() as u64;
            match self.tx.send(&frame.bytes) {
                Ok(_) => {
                    counters.frames_forwarded.fetch_add(1, Ordering::Relaxed);
                    counters
                        .bytes_forwarded
                        .fetch_add(len - VNET_HDR_LEN as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    counters.send_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(direction = self.name, error = %e, "frame not sent");
                }
            }
            counters.queued_bytes.fetch_sub(len, Ordering::Relaxed);
        }
    }

    fn collect_kernel_drops(&self) {
        if let Ok(drops) = self.rx.take_kernel_drops() {
            self.counters
                .dropped_by_kernel
                .fetch_add(drops, Ordering::Relaxed);
        }
    }

    fn stats(&self) -> DirectionStats {
        let c = &self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let forwarded = get(&c.frames_forwarded);
        let sent_attempts = forwarded + get(&c.send_errors);
        DirectionStats {
            frames_received: get(&c.frames_received),
            bytes_received: get(&c.bytes_received),
            frames_forwarded: forwarded,
            bytes_forwarded: get(&c.bytes_forwarded),
            dropped_loss: get(&c.dropped_loss),
            dropped_queue_full: get(&c.dropped_queue_full),
            dropped_truncated: get(&c.dropped_truncated),
            dropped_by_kernel: get(&c.dropped_by_kernel),
            send_errors: get(&c.send_errors),
            peak_queue_bytes: get(&c.peak_queue_bytes),
            max_late_us: get(&c.late_ns_max) / 1000,
            mean_late_us: get(&c.late_ns_total)
                .checked_div(sent_attempts)
                .unwrap_or(0)
                / 1000,
        }
    }
}

/// Sleeps until `deadline` (or returns at once when it is near); false if a stop was requested.
fn sleep_until(deadline: Instant, halt: Halt<'_>) -> bool {
    loop {
        let now = Instant::now();
        if deadline <= now + SEND_EARLY_SLACK {
            return true;
        }
        if halt.requested() {
            return false;
        }
        thread::sleep((deadline - now).min(STOP_POLL));
    }
}

/// Real-time priority for the calling thread, so neither arrival stamps nor departures wait behind
/// the busy processes (iperf3, compilers) sharing the cores. Without privilege the line still runs,
/// with timing that can slip by milliseconds under load.
fn raise_to_realtime(direction: &str) {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread and `param` is a valid sched_param for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        tracing::warn!(
            direction,
            error = %io::Error::last_os_error(),
            "no real-time priority; delays may slip under CPU load"
        );
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    ) || e.raw_os_error() == Some(libc::ENETDOWN)
}

fn socket_error(source: io::Error, iface: &str) -> DelayLineError {
    match source.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => DelayLineError::PermissionDenied {
            what: format!("opening a packet socket on {iface}"),
        },
        Some(libc::ENODEV) | Some(libc::ENXIO) => DelayLineError::InterfaceNotFound {
            name: iface.to_string(),
        },
        _ => DelayLineError::Io {
            context: format!("opening a packet socket on {iface}"),
            source,
        },
    }
}

/// A delay line running on its own thread inside a named network namespace (`/run/netns/NAME`).
///
/// For callers that prefer a thread to a `pathdoc lab delay-line` process. Dropping the handle stops
/// the line and waits for it.
pub struct DelayLineHandle {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<Result<DelayLineStats, DelayLineError>>>,
}

/// How long [`DelayLineHandle::spawn_in_netns`] waits for the sockets to open.
const STARTUP_DEADLINE: Duration = Duration::from_secs(5);

impl DelayLineHandle {
    /// Enters `netns` on a new thread, prepares both interfaces with [`prepare_interface`] and runs
    /// the delay line there. Returns once it is forwarding, or with the reason it could not start.
    pub fn spawn_in_netns(
        netns: &str,
        cfg: DelayLineConfig,
        options: DelayLineOptions,
    ) -> Result<DelayLineHandle, DelayLineError> {
        cfg.validate()?;
        let path = PathBuf::from("/run/netns").join(netns);
        let netns_file = File::open(&path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => DelayLineError::NetnsNotFound {
                name: netns.to_string(),
                path,
            },
            io::ErrorKind::PermissionDenied => DelayLineError::PermissionDenied {
                what: format!("opening {}", path.display()),
            },
            _ => DelayLineError::Io {
                context: format!("opening {}", path.display()),
                source,
            },
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let stop = Arc::clone(&stop);
            let ready = Arc::clone(&ready);
            thread::Builder::new()
                .name("delay-line".into())
                .spawn(move || {
                    // Network namespace membership is per thread: only this thread (and the threads
                    // it spawns) moves.
                    nix::sched::setns(&netns_file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(
                        |errno| match errno {
                            nix::errno::Errno::EPERM => DelayLineError::PermissionDenied {
                                what: "entering the element network namespace".into(),
                            },
                            _ => DelayLineError::Io {
                                context: "entering the element network namespace".into(),
                                source: errno.into(),
                            },
                        },
                    )?;
                    prepare_interface(&cfg.iface_a)?;
                    prepare_interface(&cfg.iface_b)?;
                    run_until_stopped(&cfg, &options, &stop, || {
                        let (flag, signal) = &*ready;
                        *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
                        signal.notify_all();
                    })
                })
                .map_err(|source| DelayLineError::Io {
                    context: "spawning the delay line thread".into(),
                    source,
                })?
        };
        let mut handle = DelayLineHandle {
            stop,
            thread: Some(thread),
        };
        let started = Instant::now();
        let (flag, signal) = &*ready;
        let mut is_ready = flag.lock().unwrap_or_else(|p| p.into_inner());
        while !*is_ready && started.elapsed() < STARTUP_DEADLINE {
            if handle.is_finished() {
                drop(is_ready);
                return Err(handle.join().err().unwrap_or_else(|| {
                    DelayLineError::InvalidConfig("delay line ended before it started".into())
                }));
            }
            is_ready = signal
                .wait_timeout(is_ready, Duration::from_millis(20))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if !*is_ready {
            drop(is_ready);
            handle.stop.store(true, Ordering::SeqCst);
            return Err(handle.join().err().unwrap_or_else(|| DelayLineError::Io {
                context: "starting the delay line".into(),
                source: io::Error::new(io::ErrorKind::TimedOut, "sockets did not open within 5 s"),
            }));
        }
        Ok(handle)
    }

    /// True once the line has ended (after [`Self::stop`] or because it failed).
    pub fn is_finished(&self) -> bool {
        match &self.thread {
            Some(thread) => thread.is_finished(),
            None => true,
        }
    }

    /// Stops the line and returns its statistics.
    pub fn stop(mut self) -> Result<DelayLineStats, DelayLineError> {
        self.stop.store(true, Ordering::SeqCst);
        self.join()
    }

    fn join(&mut self) -> Result<DelayLineStats, DelayLineError> {
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|panic| Err(DelayLineError::ThreadPanicked(panic_message(&panic)))),
            None => Ok(DelayLineStats::default()),
        }
    }
}

impl Drop for DelayLineHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direction(delay_ms: u64, jitter_ms: u64, loss: f64) -> DirectionConfig {
        DirectionConfig {
            delay: Duration::from_millis(delay_ms),
            jitter: Duration::from_millis(jitter_ms),
            loss_percent: loss,
            ..Default::default()
        }
    }

    fn config(a_to_b: DirectionConfig) -> DelayLineConfig {
        DelayLineConfig {
            iface_a: "a".into(),
            iface_b: "b".into(),
            a_to_b,
            b_to_a: DirectionConfig::default(),
        }
    }

    #[test]
    fn rejects_bad_configurations() {
        assert!(config(direction(20, 5, 1.0)).validate().is_ok());
        assert!(config(direction(0, 0, 100.0)).validate().is_ok());
        for bad in [
            direction(0, 0, -1.0),
            direction(0, 0, 100.5),
            direction(0, 0, f64::NAN),
        ] {
            assert!(matches!(
                config(bad).validate(),
                Err(DelayLineError::InvalidConfig(_))
            ));
        }
        assert!(config(direction(9_000, 2_000, 0.0)).validate().is_err());
        let mut same = config(DirectionConfig::default());
        same.iface_b = "a".into();
        assert!(same.validate().is_err());
    }

    #[test]
    fn jittered_delays_stay_within_bounds_and_cover_them() {
        let cfg = direction(20, 5, 0.0);
        let mut rng = rand::thread_rng();
        let samples: Vec<Duration> = (0..10_000).map(|_| cfg.sample_delay(&mut rng)).collect();
        let min = samples.iter().min().unwrap();
        let max = samples.iter().max().unwrap();
        assert!(*min >= Duration::from_millis(15) && *max <= Duration::from_millis(25));
        assert!(*min < Duration::from_millis(16) && *max > Duration::from_millis(24));
        // Jitter larger than the delay is floored at zero, never negative.
        let wide = direction(1, 5, 0.0);
        assert!((0..1000).any(|_| wide.sample_delay(&mut rng).is_zero()));
    }

    #[test]
    fn missing_interface_is_a_clear_error() {
        let cfg = DelayLineConfig {
            iface_a: "pdt-no-such-if0".into(),
            iface_b: "pdt-no-such-if1".into(),
            a_to_b: DirectionConfig::default(),
            b_to_a: DirectionConfig::default(),
        };
        let stop = AtomicBool::new(false);
        let err = run_delay_line(&cfg, &stop).unwrap_err();
        assert!(
            matches!(err, DelayLineError::InterfaceNotFound { ref name } if name == "pdt-no-such-if0")
        );
        assert!(err.to_string().contains("does not exist"));
    }
}
