//! Packet captures inside a lab host: `tcpdump` in the host's namespace, so tests and the demo
//! analyse what really crossed each hop (`pathdoc lab capture`, `pathdoc analyze`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use std::process::{Child, Command};
use std::time::Instant;

use crate::error::LabError;
use crate::lab::Lab;

/// How to capture.
#[derive(Debug, Clone, Default)]
pub struct CaptureOptions {
    /// Bytes kept of each packet (tcpdump `-s`); 0 keeps whole packets.
    pub snaplen: u32,
    /// A pcap filter expression (tcpdump syntax), e.g. `tcp or icmp`.
    pub filter: Option<String>,
}

/// The interface a host's capture uses by default: the one towards the server (the server's
/// only one, towards the client).
pub fn default_iface(host: &str) -> &'static str {
    if host == "server" {
        "lan0"
    } else {
        "wan0"
    }
}

/// What tcpdump reported when it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureStats {
    pub captured: u64,
    pub dropped_by_kernel: u64,
}

/// A running capture; stopped (and its file flushed) by [`RunningCapture::stop`] or on drop.
#[derive(Debug)]
pub struct RunningCapture {
    process: Option<Child>,
    stderr: Option<mpsc::Receiver<String>>,
    pub path: PathBuf,
    pub host: String,
    pub iface: String,
}

/// Start tcpdump on `host`'s `iface` writing to `path`; returns once it is listening.
pub fn start(
    lab: &Lab,
    host: &str,
    iface: Option<&str>,
    path: &Path,
    opts: &CaptureOptions,
) -> Result<RunningCapture, LabError> {
    let netns = lab.host(host)?.netns.clone();
    start_in_netns(&netns, host, iface, path, opts)
}

/// The same for a namespace by name (a lab that another process built).
pub fn start_in_netns(
    netns: &str,
    host: &str,
    iface: Option<&str>,
    path: &Path,
    opts: &CaptureOptions,
) -> Result<RunningCapture, LabError> {
    crate::preflight::require_tools(&["tcpdump"])?;
    let iface = iface.unwrap_or(default_iface(host)).to_string();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns, "tcpdump"]);
    // -U: write each packet at once (a killed capture loses nothing); -Z root: keep writing
    // where root can (tcpdump otherwise drops to its own user before opening the file).
    // --immediate-mode: hand each packet over at once (the default ring hands them over in
    // blocks, and the last block is lost when tcpdump is interrupted).
    cmd.args([
        "-i",
        &iface,
        "-n",
        "-U",
        "--immediate-mode",
        "-Z",
        "root",
        "-s",
        &opts.snaplen.to_string(),
        "-w",
    ])
    .arg(path);
    if let Some(f) = &opts.filter {
        cmd.args(f.split_whitespace());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let line = crate::exec::display(&cmd);
    let mut process = cmd.spawn().map_err(|source| LabError::Spawn {
        command: line,
        source,
    })?;
    let stderr = process
        .stderr
        .take()
        .ok_or_else(|| LabError::Measurement("tcpdump has no stderr".into()))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(line) if line.contains("listening on") => break,
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = process.kill();
                let _ = process.wait();
                return Err(LabError::Measurement(format!(
                    "tcpdump on {host}:{iface} did not start listening within 10 s: {}",
                    seen.join("; ")
                )));
            }
        }
    }
    Ok(RunningCapture {
        process: Some(process),
        stderr: Some(rx),
        path: path.to_path_buf(),
        host: host.to_string(),
        iface,
    })
}

impl RunningCapture {
    /// Stop tcpdump (SIGINT, so it flushes) and return its counters.
    pub fn stop(mut self) -> Result<CaptureStats, LabError> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<CaptureStats, LabError> {
        let Some(mut p) = self.process.take() else {
            return Ok(CaptureStats::default());
        };
        // Let packets in flight reach the tap before stopping.
        std::thread::sleep(Duration::from_millis(200));
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let give_up = Instant::now() + Duration::from_secs(5);
        loop {
            match p.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = p.kill();
                    let _ = p.wait();
                    break;
                }
            }
        }
        let mut stats = CaptureStats::default();
        if let Some(rx) = self.stderr.take() {
            while let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
                let n = line
                    .split_whitespace()
                    .next()
                    .and_then(|w| w.parse::<u64>().ok());
                if line.contains("packets captured") {
                    stats.captured = n.unwrap_or(0);
                } else if line.contains("dropped by kernel") {
                    stats.dropped_by_kernel = n.unwrap_or(0);
                }
            }
        }
        Ok(stats)
    }
}

impl Drop for RunningCapture {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Which end of a test connection sends TCP keepalives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepaliveSide {
    Client,
    Server,
}

/// An established connection left idle, with TCP keepalives on one end (`idle` before the
/// first probe, `interval` between probes, `probes` before the kernel gives up and resets it),
/// used to record seed 000's idle death. Returns when that end's kernel has given up or
/// `deadline` passed.
pub fn idle_keepalive_connection(
    lab: &Lab,
    side: KeepaliveSide,
    idle: Duration,
    interval: Duration,
    probes: u32,
    deadline: Duration,
) -> Result<(), LabError> {
    let mut pair = crate::traffic::TcpPair::open(lab)?;
    pair.client_to_server(b"hello", Duration::from_secs(2))?;
    pair.server_to_client(b"hello", Duration::from_secs(2))?;
    let prober = match side {
        KeepaliveSide::Client => &mut pair.client,
        KeepaliveSide::Server => &mut pair.server,
    };
    set_keepalive(prober, idle, interval, probes)?;
    let started = std::time::Instant::now();
    // The kernel gives up after idle + probes × interval: a read then fails.
    prober
        .set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| LabError::io("read timeout", e))?;
    let mut buf = [0u8; 64];
    while started.elapsed() < deadline {
        use std::io::Read;
        match prober.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

fn set_keepalive(
    stream: &std::net::TcpStream,
    idle: Duration,
    interval: Duration,
    probes: u32,
) -> Result<(), LabError> {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| -> Result<(), LabError> {
        // SAFETY: fd is a live socket owned by `stream`; the option value is a c_int on the stack.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                &value as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(LabError::io(
                "setsockopt keepalive",
                std::io::Error::last_os_error(),
            ))
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(
        libc::IPPROTO_TCP,
        libc::TCP_KEEPIDLE,
        idle.as_secs().max(1) as libc::c_int,
    )?;
    set(
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        interval.as_secs().max(1) as libc::c_int,
    )?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, probes as libc::c_int)?;
    Ok(())
}
