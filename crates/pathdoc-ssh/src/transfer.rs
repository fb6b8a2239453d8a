//! One SSH bulk transfer, measured: `… | ssh host 'cat > /dev/null'` (upload, fed by pathdoc) or
//! `ssh host 'head -c N /dev/zero' | …` (download, produced by the far end), with exact byte
//! counts, the client's `-vv` log, and samples of both ends every [`SAMPLE_EVERY`].
//!
//! The remote command first prints `pathdoc-ssh-ready $$ $SSH_CONNECTION`: the clock starts
//! there (after the SSH handshake and login), `$$` is the pid of `cat`/`head` (the shell
//! `exec`s them) from which the far end finds its sshd, and `$SSH_CONNECTION` names the TCP
//! connection as the far end sees it (through NATs).
//!
//! Every `ssh` gets `-o ControlMaster=no -o ControlPath=none` (a multiplexed session would reuse
//! another connection and ignore `-c`) and `-o Compression=no` (zeros compress).
//! Call from the main thread (see [`crate::process`]).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::dest::SshDest;
use crate::error::SshError;
use crate::evidence::{EvidenceClient, LocalSide, SampleRequest, SideSample};
use crate::process;
use crate::sshlog::SshLog;
use crate::steady::{self, Steady, Way};

/// How often both ends are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// How long the far end may take to log in and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const READY_PREFIX: &str = "pathdoc-ssh-ready ";

/// What to transfer.
#[derive(Debug, Clone)]
pub struct TransferSpec {
    pub way: Way,
    /// `-c CIPHER` (None: whatever the two ends negotiate).
    pub cipher: Option<String>,
    /// `-m MAC` (for non-AEAD ciphers).
    pub mac: Option<String>,
    /// Upload: send for this long. Download: the byte count is sized to take about this long,
    /// and the transfer is cut at 3× this.
    pub duration: Duration,
    /// Download only: bytes the far end produces.
    pub download_bytes: u64,
}

/// One measured transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub way: Way,
    pub requested_cipher: Option<String>,
    pub requested_mac: Option<String>,
    /// Payload bytes that crossed (exact: written and confirmed by the remote command's exit on
    /// upload, read on download).
    pub payload_bytes: u64,
    /// From the far end's ready line to the last byte (download) or to ssh's exit (upload).
    pub seconds: f64,
    pub goodput_bps: f64,
    pub steady: Option<Steady>,
    pub log: SshLog,
    /// The connection as the far end saw it: client, server.
    pub ssh_client: Option<SocketAddr>,
    pub ssh_server: Option<SocketAddr>,
    /// First and last sample of each side in the steady window (the full series is not kept).
    pub client_samples: Vec<SideSample>,
    pub server_samples: Vec<SideSample>,
    /// Set when the transfer ended early (cut at its deadline, interrupted, remote error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
}

/// Why a transfer ended early. In JSON it is the sentence the reports always had (`data.ssh`
/// stays as it was): "interrupted", "cut after 12.3 s", or the failure in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Incomplete {
    /// The user stopped it (Ctrl-C/SIGTERM).
    Interrupted,
    /// A download still running at its deadline, cut after this many seconds.
    Cut { after_s: f64 },
    /// ssh failed or did not exit: the reason in words.
    Failed(String),
}

const INTERRUPTED: &str = "interrupted";

impl std::fmt::Display for Incomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Incomplete::Interrupted => f.write_str(INTERRUPTED),
            Incomplete::Cut { after_s } => write!(f, "cut after {after_s:.1} s"),
            Incomplete::Failed(why) => f.write_str(why),
        }
    }
}

impl From<Incomplete> for String {
    fn from(i: Incomplete) -> String {
        i.to_string()
    }
}

impl From<String> for Incomplete {
    fn from(text: String) -> Incomplete {
        let cut = text
            .strip_prefix("cut after ")
            .and_then(|rest| rest.strip_suffix(" s"))
            .and_then(|n| n.parse::<f64>().ok());
        match (text.as_str(), cut) {
            (INTERRUPTED, _) => Incomplete::Interrupted,
            (_, Some(after_s)) => Incomplete::Cut { after_s },
            _ => Incomplete::Failed(text),
        }
    }
}

impl Transfer {
    /// The user stopped it (Ctrl-C/SIGTERM) before it ended on its own.
    pub fn interrupted(&self) -> bool {
        self.incomplete == Some(Incomplete::Interrupted)
    }

    /// The negotiated cipher for this transfer's direction.
    pub fn cipher(&self) -> Option<&str> {
        let n = match self.way {
            Way::Upload => self.log.client_to_server.as_ref(),
            Way::Download => self.log.server_to_client.as_ref(),
        };
        n.map(|n| n.cipher.as_str())
    }

    pub fn mac(&self) -> Option<&str> {
        let n = match self.way {
            Way::Upload => self.log.client_to_server.as_ref(),
            Way::Download => self.log.server_to_client.as_ref(),
        };
        n.map(|n| n.mac.as_str())
    }

    /// The SSH channel window that limits this direction: the server's for uploads, the
    /// client's own for downloads.
    pub fn window(&self) -> Option<u64> {
        match self.way {
            Way::Upload => self.log.peer_window(),
            Way::Download => self.log.local_window,
        }
    }
}

/// A `-vv` log file in the temp dir, removed on drop.
struct LogFile(PathBuf);

impl LogFile {
    fn new() -> LogFile {
        use rand::Rng;
        let n: u64 = rand::thread_rng().gen();
        LogFile(
            std::env::temp_dir().join(format!("pathdoc-ssh-{}-{n:016x}.log", std::process::id())),
        )
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn remote_command(spec: &TransferSpec) -> String {
    let work = match spec.way {
        Way::Upload => "exec cat > /dev/null".to_string(),
        Way::Download => format!("exec head -c {} /dev/zero", spec.download_bytes),
    };
    format!("exec /bin/sh -c 'echo {READY_PREFIX}$$ $SSH_CONNECTION; {work}'")
}

fn ssh_args(dest: &SshDest, spec: &TransferSpec, log: &LogFile) -> Vec<OsString> {
    let mut args = dest.option_args();
    for a in [
        "-T",
        "-vv",
        "-E",
        &log.0.display().to_string(),
        "-o",
        "Compression=no",
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        "-o",
        "ServerAliveInterval=10",
    ] {
        args.push(a.into());
    }
    if let Some(c) = &spec.cipher {
        args.push("-c".into());
        args.push(c.into());
    }
    if let Some(m) = &spec.mac {
        args.push("-m".into());
        args.push(m.into());
    }
    args.push("--".into());
    args.push(dest.destination.clone().into());
    args.push(remote_command(spec).into());
    args
}

/// Parse `pathdoc-ssh-ready PID CLIENT_IP CLIENT_PORT SERVER_IP SERVER_PORT`.
fn parse_ready(line: &str) -> Option<(u32, SocketAddr, SocketAddr)> {
    let rest = line.trim().strip_prefix(READY_PREFIX)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    if f.len() < 5 {
        return None;
    }
    let pid = f[0].parse().ok()?;
    let ip = |s: &str| s.parse::<std::net::IpAddr>().ok();
    let client = SocketAddr::new(ip(f[1])?, f[2].parse().ok()?);
    let server = SocketAddr::new(ip(f[3])?, f[4].parse().ok()?);
    Some((pid, client, server))
}

/// Shared between the sampler (this thread) and the data pump.
#[derive(Default)]
struct Progress {
    bytes: AtomicU64,
    /// Download: seconds (f64 bits) from the ready line to the latest byte.
    last_byte_secs: AtomicU64,
    done: AtomicBool,
    stop: AtomicBool,
}

/// Run one transfer. `evidence` samples the far end (None: client-side evidence only).
pub fn run(
    dest: &SshDest,
    spec: &TransferSpec,
    evidence: Option<&mut EvidenceClient>,
    runtime: &tokio::runtime::Handle,
    cancel: &CancellationToken,
) -> Result<Transfer, SshError> {
    let log = LogFile::new();
    // Phase 1: the far end's ready line (the stdout reader keeps counting after it).
    let mut started = start(dest, spec, &log)?;
    // Phase 2: move data and sample both ends.
    let writer = match spec.way {
        Way::Upload => {
            let stdin = started.child.stdin.take();
            let p = started.progress.clone();
            Some(std::thread::spawn(move || pump_stdin(stdin, &p)))
        }
        Way::Download => None,
    };
    let mut sampled = sample_both_ends(&started, spec, evidence, runtime, cancel);
    // Phase 3: finish. Upload: stop writing, ssh delivers the rest and exits when `cat` does.
    let finished = finish(dest, spec, &log, started, writer, &mut sampled.incomplete);
    let steady = steady::summarize(spec.way, &sampled.client, &sampled.server);
    let from = steady.as_ref().map(|s| s.from).unwrap_or(0.0);
    let (payload_bytes, seconds) = (finished.payload_bytes, finished.seconds);
    Ok(Transfer {
        way: spec.way,
        requested_cipher: spec.cipher.clone(),
        requested_mac: spec.mac.clone(),
        payload_bytes,
        seconds,
        goodput_bps: payload_bytes as f64 * 8.0 / seconds.max(1e-6),
        steady,
        log: finished.log,
        ssh_client: Some(finished.request.ssh_client),
        ssh_server: Some(finished.request.ssh_server),
        client_samples: first_and_last_from(&sampled.client, from),
        server_samples: first_and_last_from(&sampled.server, from),
        incomplete: sampled.incomplete,
    })
}

/// An `ssh` whose far end said it is ready, with the threads reading its output.
struct Started {
    child: std::process::Child,
    ssh_pid: u32,
    stderr: std::thread::JoinHandle<String>,
    reader: std::thread::JoinHandle<()>,
    progress: Arc<Progress>,
    /// The connection and remote command the far end samples.
    request: SampleRequest,
    /// When the ready line came.
    t0: Instant,
}

/// Spawn `ssh` for the transfer and wait for the far end's ready line; an ssh that fails first
/// is killed and its failure classified.
fn start(dest: &SshDest, spec: &TransferSpec, log: &LogFile) -> Result<Started, SshError> {
    let mut cmd = process::command(dest, &ssh_args(dest, spec, log));
    cmd.stdin(match spec.way {
        Way::Upload => Stdio::piped(),
        Way::Download => Stdio::null(),
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = process::spawn(cmd)?;
    let ssh_pid = child.id();
    let stderr = process::drain(child.stderr.take());
    let progress = Arc::new(Progress::default());
    let (ready_tx, ready_rx) = mpsc::channel();
    let stdout = child.stdout.take();
    let p = progress.clone();
    let way = spec.way;
    let reader = std::thread::spawn(move || pump_stdout(stdout, way, &p, ready_tx));
    let Ok(Some((pid, ssh_client, ssh_server))) = ready_rx.recv_timeout(READY_TIMEOUT) else {
        let _ = child.kill();
        let _ = child.wait();
        let text = std::fs::read_to_string(&log.0).unwrap_or_default();
        let run = process::SshRun {
            code: Some(process::SSH_FAILURE),
            success: false,
            stdout: String::new(),
            stderr: format!("{}\n{}", text, stderr_snapshot(&text)),
        };
        return Err(process::classify(dest, &run, "starting the SSH transfer"));
    };
    Ok(Started {
        child,
        ssh_pid,
        stderr,
        reader,
        progress,
        request: SampleRequest {
            ssh_client,
            ssh_server,
            command_pid: pid,
        },
        t0: Instant::now(),
    })
}

/// Both ends' samples of a transfer, and why it ended early (if it did).
struct Samples {
    client: Vec<SideSample>,
    server: Vec<SideSample>,
    incomplete: Option<Incomplete>,
}

/// Sample both ends every [`SAMPLE_EVERY`] until the data is through, the user interrupts, or
/// the transfer has run its time (a download is cut at 3× the duration).
fn sample_both_ends(
    started: &Started,
    spec: &TransferSpec,
    mut evidence: Option<&mut EvidenceClient>,
    runtime: &tokio::runtime::Handle,
    cancel: &CancellationToken,
) -> Samples {
    let local = LocalSide::find(started.ssh_pid);
    let t0 = started.t0;
    let cut_at = match spec.way {
        Way::Upload => spec.duration,
        Way::Download => spec.duration * 3,
    };
    let mut out = Samples {
        client: Vec::new(),
        server: Vec::new(),
        incomplete: None,
    };
    loop {
        let t = t0.elapsed();
        if started.progress.done.load(Ordering::Relaxed) {
            break;
        }
        if cancel.is_cancelled() {
            out.incomplete = Some(Incomplete::Interrupted);
            break;
        }
        if t >= cut_at {
            if spec.way == Way::Download {
                out.incomplete = Some(Incomplete::Cut {
                    after_s: t.as_secs_f64(),
                });
            }
            break;
        }
        out.client.push(local.sample(t.as_secs_f64()));
        if let Some(ev) = evidence.as_deref_mut() {
            let asked = t0.elapsed().as_secs_f64();
            let got = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(3), ev.sample(&started.request)).await
            });
            if let Ok(Ok(mut s)) = got {
                s.t = asked;
                out.server.push(s);
            }
        }
        let next = t + SAMPLE_EVERY;
        let now = t0.elapsed();
        if next > now {
            std::thread::sleep(next - now);
        }
    }
    out
}

/// What the end of a transfer leaves: the bytes moved and in how long, and ssh's log.
struct Finished {
    payload_bytes: u64,
    seconds: f64,
    log: SshLog,
    request: SampleRequest,
}

/// Stop the data, wait for ssh to exit (a cut download is killed), and read its log. An ssh
/// that did not exit cleanly makes an otherwise complete transfer `incomplete`, with the reason.
fn finish(
    dest: &SshDest,
    spec: &TransferSpec,
    log: &LogFile,
    mut started: Started,
    writer: Option<std::thread::JoinHandle<u64>>,
    incomplete: &mut Option<Incomplete>,
) -> Finished {
    let progress = &started.progress;
    progress.stop.store(true, Ordering::Relaxed);
    let written = writer.map(|w| w.join().unwrap_or(0));
    let wait = if incomplete.is_some() && spec.way == Way::Download {
        let _ = started.child.kill();
        Duration::from_secs(5)
    } else {
        Duration::from_secs(60) + spec.duration
    };
    let status = process::wait_deadline(&mut started.child, wait);
    let t_end = started.t0.elapsed().as_secs_f64();
    let _ = started.reader.join();
    let err_text = started.stderr.join().unwrap_or_default();
    let log_text = std::fs::read_to_string(&log.0).unwrap_or_default();
    if incomplete.is_none() {
        match status {
            Some(s) if s.success() => {}
            Some(s) => {
                let run = process::SshRun {
                    code: s.code(),
                    success: false,
                    stdout: String::new(),
                    stderr: format!("{err_text}\n{}", stderr_snapshot(&log_text)),
                };
                *incomplete = Some(Incomplete::Failed(
                    process::classify(dest, &run, "the SSH transfer").to_string(),
                ));
            }
            None => {
                *incomplete = Some(Incomplete::Failed(
                    "ssh did not exit after the transfer; killed".into(),
                ))
            }
        }
    }
    let (payload_bytes, seconds) = match spec.way {
        Way::Upload => (written.unwrap_or(0), t_end),
        Way::Download => (
            progress.bytes.load(Ordering::Relaxed),
            f64::from_bits(progress.last_byte_secs.load(Ordering::Relaxed)).max(1e-6),
        ),
    };
    Finished {
        payload_bytes,
        seconds,
        log: SshLog::parse(&log_text),
        request: started.request,
    }
}

/// The first and last samples from `from` (the steady part's start) on: what a report keeps.
fn first_and_last_from(v: &[SideSample], from: f64) -> Vec<SideSample> {
    let inside: Vec<&SideSample> = v.iter().filter(|s| s.t >= from - 0.01).collect();
    inside
        .first()
        .into_iter()
        .chain(inside.last())
        .map(|s| (*s).clone())
        .collect()
}

/// The interesting lines of an ssh -vv log for an error message (ssh's own errors, no debug).
fn stderr_snapshot(log: &str) -> String {
    log.lines()
        .filter(|l| !l.starts_with("debug"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn pump_stdout(
    stdout: Option<std::process::ChildStdout>,
    way: Way,
    p: &Progress,
    ready: mpsc::Sender<Option<(u32, SocketAddr, SocketAddr)>>,
) {
    let Some(out) = stdout else {
        let _ = ready.send(None);
        return;
    };
    let mut reader = BufReader::with_capacity(1 << 20, out);
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(n) if n > 0 => {
            let parsed = parse_ready(&line);
            let ok = parsed.is_some();
            let _ = ready.send(parsed);
            if !ok {
                return;
            }
        }
        _ => {
            let _ = ready.send(None);
            return;
        }
    }
    let t0 = Instant::now();
    if way == Way::Upload {
        // Nothing more is expected; drain in case the far end prints anything.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
        p.done.store(true, Ordering::Relaxed);
        return;
    }
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                p.bytes.fetch_add(n as u64, Ordering::Relaxed);
                p.last_byte_secs
                    .store(t0.elapsed().as_secs_f64().to_bits(), Ordering::Relaxed);
            }
        }
    }
    p.done.store(true, Ordering::Relaxed);
}

fn pump_stdin(stdin: Option<std::process::ChildStdin>, p: &Progress) -> u64 {
    let Some(mut pipe) = stdin else { return 0 };
    let chunk = vec![0u8; 256 * 1024];
    let mut sent = 0u64;
    while !p.stop.load(Ordering::Relaxed) {
        match pipe.write(&chunk) {
            Ok(n) => {
                sent += n as u64;
                p.bytes.store(sent, Ordering::Relaxed);
            }
            Err(_) => break,
        }
    }
    sent // dropping `pipe` closes stdin: ssh sends EOF, `cat` exits, ssh exits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line_parses() {
        let (pid, c, s) =
            parse_ready("pathdoc-ssh-ready 4242 192.0.2.7 50123 203.0.113.10 22\n").unwrap();
        assert_eq!(pid, 4242);
        assert_eq!(c, "192.0.2.7:50123".parse().unwrap());
        assert_eq!(s, "203.0.113.10:22".parse().unwrap());
        assert!(parse_ready("pathdoc-ssh-ready 1 2").is_none());
        assert!(parse_ready("hello").is_none());
        // IPv6 $SSH_CONNECTION has no brackets.
        let (_, c, _) = parse_ready("pathdoc-ssh-ready 1 2001:db8::1 5000 2001:db8::2 22").unwrap();
        assert_eq!(c.port(), 5000);
    }

    #[test]
    fn commands_are_what_users_run() {
        let up = TransferSpec {
            way: Way::Upload,
            cipher: Some("aes128-ctr".into()),
            mac: Some("umac-64-etm@openssh.com".into()),
            duration: Duration::from_secs(3),
            download_bytes: 0,
        };
        assert!(remote_command(&up).contains("exec cat > /dev/null"));
        let down = TransferSpec {
            way: Way::Download,
            download_bytes: 1000,
            ..up.clone()
        };
        assert!(remote_command(&down).contains("exec head -c 1000 /dev/zero"));
        let d = SshDest::parse("u@h").unwrap();
        let args: Vec<String> = ssh_args(&d, &up, &LogFile::new())
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for w in [
            "ControlPath=none",
            "Compression=no",
            "-c",
            "aes128-ctr",
            "-m",
            "-vv",
            "u@h",
        ] {
            assert!(args.iter().any(|a| a == w), "{w} missing: {args:?}");
        }
    }
}

#[cfg(test)]
mod incomplete_tests {
    use super::Incomplete;

    /// `incomplete` in `data.ssh` reads and writes as the sentences it always was.
    #[test]
    fn reasons_round_trip_as_their_sentences() {
        for (text, reason) in [
            ("interrupted", Incomplete::Interrupted),
            ("cut after 12.3 s", Incomplete::Cut { after_s: 12.3 }),
            (
                "ssh did not exit after the transfer; killed",
                Incomplete::Failed("ssh did not exit after the transfer; killed".into()),
            ),
        ] {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<Incomplete>(&json).unwrap(), reason);
        }
    }
}
