//! Real traffic inside a lab, measured: ping RTT and loss, iperf3 throughput, TCP downloads and
//! idle TCP connections. Used by `pathdoc lab demo` and the end-to-end tests.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::LabError;
use crate::exec;
use crate::lab::Lab;

static NEXT_PORT: AtomicU16 = AtomicU16::new(41000);

/// A fresh TCP port number for a test listener (namespaces are private, this only avoids reuse
/// within one lab).
pub fn next_port() -> u16 {
    let p = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
    if p > 60000 {
        NEXT_PORT.store(41000, Ordering::Relaxed);
    }
    p
}

/// Summary of a `ping` run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingStats {
    pub transmitted: u64,
    pub received: u64,
    pub rtt_min_ms: f64,
    pub rtt_avg_ms: f64,
    pub rtt_max_ms: f64,
    pub rtt_mdev_ms: f64,
}

impl PingStats {
    pub fn loss_fraction(&self) -> f64 {
        if self.transmitted == 0 {
            return 0.0;
        }
        1.0 - self.received as f64 / self.transmitted as f64
    }
}

/// Parse the summary of iputils `ping -q`.
pub fn parse_ping(text: &str) -> Option<PingStats> {
    let mut stats = PingStats {
        transmitted: 0,
        received: 0,
        rtt_min_ms: 0.0,
        rtt_avg_ms: 0.0,
        rtt_max_ms: 0.0,
        rtt_mdev_ms: 0.0,
    };
    let mut seen = false;
    for line in text.lines() {
        if line.contains("packets transmitted") {
            let nums: Vec<u64> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|s| s.parse().ok())
                .collect();
            stats.transmitted = *nums.first()?;
            stats.received = *nums.get(1)?;
            seen = true;
        } else if let Some(rest) = line
            .split_once(" = ")
            .map(|(_, r)| r)
            .filter(|_| line.starts_with("rtt") || line.starts_with("round-trip"))
        {
            let numbers = rest.split(" ms").next().unwrap_or("");
            let vals: Vec<f64> = numbers
                .split('/')
                .filter_map(|v| v.trim().parse().ok())
                .collect();
            if vals.len() == 4 {
                stats.rtt_min_ms = vals[0];
                stats.rtt_avg_ms = vals[1];
                stats.rtt_max_ms = vals[2];
                stats.rtt_mdev_ms = vals[3];
            }
        }
    }
    seen.then_some(stats)
}

/// Ping `to` from `from`: `count` echo requests every `interval` (seconds; ≥ 0.001 as root).
pub fn ping(
    lab: &Lab,
    from: &str,
    to: IpAddr,
    count: u32,
    interval: f64,
    payload: Option<usize>,
) -> Result<PingStats, LabError> {
    let mut cmd = lab.command(from, "ping");
    cmd.args([
        "-n",
        "-q",
        "-c",
        &count.to_string(),
        "-i",
        &format!("{interval}"),
        "-W",
        "1",
    ]);
    if let Some(size) = payload {
        cmd.args(["-s", &size.to_string(), "-M", "do"]);
    }
    cmd.arg(to.to_string());
    let timeout = Duration::from_secs_f64(count as f64 * interval.max(0.0) * 1.5 + 10.0);
    let line = exec::display(&cmd);
    let done = exec::run_unchecked(&mut cmd, None, timeout)?;
    parse_ping(&done.stdout).ok_or_else(|| {
        LabError::Measurement(format!(
            "`{line}` printed no summary: {}",
            done.stderr.trim()
        ))
    })
}

/// Result of one iperf3 run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IperfResult {
    /// Goodput at the receiver, bit/s.
    pub bits_per_second: f64,
    /// TCP retransmissions counted by the sender.
    pub retransmits: u64,
    pub seconds: f64,
}

/// Run iperf3 between two lab hosts for `seconds`. `reverse` makes the server host send (a
/// download seen from the client host). Extra client arguments go in `extra`.
pub fn iperf3(
    lab: &Lab,
    client_host: &str,
    server_host: &str,
    seconds: u32,
    reverse: bool,
    extra: &[&str],
) -> Result<IperfResult, LabError> {
    let port = next_port().to_string();
    let mut srv = lab.command(server_host, "iperf3");
    srv.args(["-s", "-1", "-p", &port])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut server = lab.spawn(server_host, srv)?;
    let target = lab.addr(server_host).to_string();
    let started = Instant::now();
    loop {
        let mut cmd = lab.command(client_host, "iperf3");
        cmd.args([
            "-c",
            &target,
            "-p",
            &port,
            "-t",
            &seconds.to_string(),
            "-J",
            "--connect-timeout",
            "3000",
        ]);
        if reverse {
            cmd.arg("-R");
        }
        cmd.args(extra);
        let line = exec::display(&cmd);
        let done = exec::run_unchecked(&mut cmd, None, Duration::from_secs(seconds as u64 + 20))?;
        let doc: serde_json::Value =
            serde_json::from_str(&done.stdout).unwrap_or(serde_json::Value::Null);
        if let Some(err) = doc.get("error").and_then(|e| e.as_str()) {
            if err.contains("refused") && started.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            return Err(LabError::Measurement(format!("`{line}`: {err}")));
        }
        let end = &doc["end"];
        let bps = end["sum_received"]["bits_per_second"].as_f64();
        let Some(bps) = bps else {
            return Err(LabError::Measurement(format!(
                "`{line}` gave no result: {}",
                done.stderr.trim()
            )));
        };
        let retransmits = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
        let secs = end["sum_received"]["seconds"]
            .as_f64()
            .unwrap_or(seconds as f64);
        let _ = server.wait_timeout(Duration::from_secs(2));
        return Ok(IperfResult {
            bits_per_second: bps,
            retransmits,
            seconds: secs,
        });
    }
}

/// The wildcard address of `addr`'s family (a listener for it).
fn any_of(addr: std::net::IpAddr) -> std::net::IpAddr {
    match addr {
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// Outcome of a bulk TCP transfer from the server host to the client host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransferOutcome {
    pub requested: u64,
    pub received: u64,
    pub completed: bool,
    pub elapsed_ms: u64,
}

/// The server host sends `bytes` to the client host over a fresh TCP connection; the client reads
/// until it has them all or `deadline` passes (a stall is an outcome, not an error).
pub fn download(lab: &Lab, bytes: u64, deadline: Duration) -> Result<TransferOutcome, LabError> {
    download_in(lab, lab.addr("server"), bytes, deadline)
}

/// [`download`] to the server's address `server` (pick the family with [`Lab::addr_in`]).
pub fn download_in(
    lab: &Lab,
    server: std::net::IpAddr,
    bytes: u64,
    deadline: Duration,
) -> Result<TransferOutcome, LabError> {
    let port = next_port();
    let server_ns = lab.netns("server").to_string();
    let any = any_of(server);
    let listener: TcpListener =
        pathdoc_sys::netns::run_in_netns(&server_ns, || TcpListener::bind((any, port)))?
            .map_err(|e| LabError::io(format!("listening on port {port} in {server_ns}"), e))?;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        listener.set_nonblocking(false)?;
        let (mut conn, _) = listener.accept()?;
        conn.set_write_timeout(Some(deadline + Duration::from_secs(1)))?;
        let chunk = vec![0x5a_u8; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            conn.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let addr = SocketAddr::new(server, port);
    let client_ns = lab.netns("client").to_string();
    let mut stream = pathdoc_sys::netns::run_in_netns(&client_ns, || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(3))
    })?
    .map_err(|e| LabError::io(format!("connecting to {addr} from {client_ns}"), e))?;
    let start = Instant::now();
    let mut received = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while received < bytes {
        let left = deadline.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| LabError::io("read timeout", e))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received += n as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => return Err(LabError::io("reading the download", e)),
        }
    }
    let elapsed_ms = start.elapsed().as_millis() as u64;
    // Closing both ends unblocks the sender thread (its write fails).
    drop(stream);
    let _ = sender.join();
    Ok(TransferOutcome {
        requested: bytes,
        received,
        completed: received >= bytes,
        elapsed_ms,
    })
}

/// An established TCP connection between the client host and the server host, both ends held
/// here, for idle-timeout experiments through NATs.
#[derive(Debug)]
pub struct TcpPair {
    pub client: TcpStream,
    pub server: TcpStream,
}

impl TcpPair {
    /// Connect client → server on a fresh port.
    pub fn open(lab: &Lab) -> Result<TcpPair, LabError> {
        TcpPair::open_to(lab, lab.addr("server"))
    }

    /// Connect client → `server` (one of the server host's addresses, in either family).
    pub fn open_to(lab: &Lab, server: std::net::IpAddr) -> Result<TcpPair, LabError> {
        let port = next_port();
        let server_ns = lab.netns("server").to_string();
        let any = any_of(server);
        let listener: TcpListener =
            pathdoc_sys::netns::run_in_netns(&server_ns, || TcpListener::bind((any, port)))?
                .map_err(|e| LabError::io(format!("listening on port {port} in {server_ns}"), e))?;
        let addr = SocketAddr::new(server, port);
        let client = pathdoc_sys::netns::run_in_netns(lab.netns("client"), || {
            TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        })?
        .map_err(|e| LabError::io(format!("connecting to {addr}"), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| LabError::io("listener", e))?;
        let start = Instant::now();
        let server = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        && start.elapsed() < Duration::from_secs(3) =>
                {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => return Err(LabError::io("accepting the test connection", e)),
            }
        };
        server
            .set_nonblocking(false)
            .map_err(|e| LabError::io("socket", e))?;
        for s in [&client, &server] {
            s.set_nodelay(true).map_err(|e| LabError::io("socket", e))?;
        }
        Ok(TcpPair { client, server })
    }

    /// The server sends `data`; true if the client receives all of it within `wait`.
    pub fn server_to_client(&mut self, data: &[u8], wait: Duration) -> Result<bool, LabError> {
        transfer(&mut self.server, &mut self.client, data, wait)
    }

    /// The client sends `data`; true if the server receives all of it within `wait`.
    pub fn client_to_server(&mut self, data: &[u8], wait: Duration) -> Result<bool, LabError> {
        transfer(&mut self.client, &mut self.server, data, wait)
    }
}

fn transfer(
    from: &mut TcpStream,
    to: &mut TcpStream,
    data: &[u8],
    wait: Duration,
) -> Result<bool, LabError> {
    from.write_all(data)
        .map_err(|e| LabError::io("sending on the test connection", e))?;
    // Earlier sends that were stuck may arrive first: the stream must *end* with `data`.
    let start = Instant::now();
    let mut got: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 4096];
    while !got.ends_with(data) {
        let left = wait.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ok(false);
        }
        to.set_read_timeout(Some(left))
            .map_err(|e| LabError::io("read timeout", e))?;
        match to.read(&mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => return Ok(false),
        }
    }
    Ok(true)
}

/// A timed bulk transfer over the lab's OpenSSH (what a user's `scp`/`zfs send | ssh` does).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SshTransfer {
    pub bytes: u64,
    /// Wall time from starting `ssh` to its exit (includes the SSH handshake).
    pub seconds: f64,
    pub cipher: String,
}

impl SshTransfer {
    pub fn bits_per_second(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9)
    }
}

/// Send `bytes` from the client to `host` over SSH (`head -c N /dev/zero | ssh -c CIPHER host 'cat
/// > /dev/null'`) with the lab's ssh_config, or with `download` the other way.
pub fn ssh_transfer(
    lab: &Lab,
    host: &str,
    bytes: u64,
    cipher: &str,
    download: bool,
    deadline: Duration,
) -> Result<SshTransfer, LabError> {
    let config = lab
        .ssh_config()
        .ok_or_else(|| LabError::Measurement("this lab runs no sshd".into()))?;
    let ssh = format!(
        "ssh -F {} -o Compression=no -c {cipher} {host}",
        config.display()
    );
    let script = if download {
        format!("{ssh} 'head -c {bytes} /dev/zero' > /dev/null")
    } else {
        format!("head -c {bytes} /dev/zero | {ssh} 'cat > /dev/null'")
    };
    let mut cmd = lab.command("client", "sh");
    cmd.args(["-c", &script]);
    let start = Instant::now();
    exec::run(&mut cmd, None, deadline)?;
    Ok(SshTransfer {
        bytes,
        seconds: start.elapsed().as_secs_f64(),
        cipher: cipher.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_iputils_summary() {
        let text = "PING 203.0.113.10 (203.0.113.10) 56(84) bytes of data.\n\n--- 203.0.113.10 ping statistics ---\n2000 packets transmitted, 1990 received, 0.5% packet loss, time 2001ms\nrtt min/avg/max/mdev = 0.031/0.052/0.101/0.010 ms, ipg/ewma 1.000/0.050 ms\n";
        let s = parse_ping(text).unwrap();
        assert_eq!((s.transmitted, s.received), (2000, 1990));
        assert!((s.loss_fraction() - 0.005).abs() < 1e-9);
        assert_eq!(s.rtt_avg_ms, 0.052);
        assert_eq!(s.rtt_mdev_ms, 0.010);
        let lost_all = "3 packets transmitted, 0 received, 100% packet loss, time 2041ms\n";
        assert_eq!(parse_ping(lost_all).unwrap().received, 0);
        assert!(parse_ping("garbage").is_none());
    }
}
