//! What both ends of an SSH connection show while it carries a transfer: the TCP state of the
//! connection itself (sock_diag, as `ss -ti`), the CPU time of the `ssh`/`sshd` processes doing
//! the crypto, and the CPU cgroup they run in.
//!
//! The local side is read directly ([`local_sample`]). The far end is read by the bootstrapped
//! `pathdoc server` through [`EvidenceService`] (check kind `ssh`), which only the SSH bootstrap
//! enables (`--ssh-evidence`, with a token): it answers for an SSH connection whose client
//! address is the asking client's own, and for processes of the server's own user.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pathdoc_proto::{Channel, CheckKind, FramedConn, ProtoError};
use pathdoc_server::{Service, ServiceError, Session};
use pathdoc_sys::cgroup::CgroupCpu;
use pathdoc_sys::process::{HostCpu, ProcStat};
use pathdoc_sys::sock_diag::SkMemInfo;
use pathdoc_sys::tcp_info::TcpInfo;
use serde::{Deserialize, Serialize};

/// How long the far end waits for the next request before it ends the session.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How far up from the remote command the sshd session process may be.
const MAX_ANCESTRY: usize = 6;

/// One side's state at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SideSample {
    /// Seconds since the transfer's start, on the sampling host's clock as seen by the client.
    pub t: f64,
    pub tcp: Option<TcpInfo>,
    pub mem: Option<SkMemInfo>,
    pub congestion_control: Option<String>,
    /// The `ssh` (local) or `sshd` session process (remote) that does the crypto.
    pub ssh_process: Option<ProcStat>,
    /// The remote command (`cat`, `head`); None locally.
    pub command: Option<ProcStat>,
    pub cgroup: Option<CgroupCpu>,
    /// The whole machine's CPU time (`/proc/stat`).
    pub host: Option<HostCpu>,
    /// Why something is missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The request for one remote sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleRequest {
    /// The SSH connection as the far end sees it (`$SSH_CONNECTION`).
    pub ssh_client: SocketAddr,
    pub ssh_server: SocketAddr,
    /// `$$` of the remote command (it `exec`s `cat`/`head`, so this is their pid).
    pub command_pid: u32,
}

/// The far end of the SSH evidence: registered in `pathdoc server --ssh-evidence`.
#[derive(Debug, Default)]
pub struct EvidenceService;

impl EvidenceService {
    pub fn new() -> Self {
        EvidenceService
    }
}

#[async_trait]
impl Service for EvidenceService {
    fn check(&self) -> CheckKind {
        CheckKind::Ssh
    }

    async fn control(
        &self,
        session: Arc<Session>,
        mut conn: FramedConn,
        _resumed: bool,
    ) -> Result<(), ServiceError> {
        loop {
            let req: SampleRequest = match conn
                .recv_timeout(IDLE_TIMEOUT, "the next sample request")
                .await
            {
                Ok(r) => r,
                Err(ProtoError::Closed) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            session.touch();
            let client_ip = session.client_ip;
            let sample = tokio::task::spawn_blocking(move || remote_sample(&req, client_ip))
                .await
                .map_err(|e| ServiceError::Other(e.to_string()))?;
            conn.send(&sample).await?;
        }
    }
}

fn canonical(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(std::net::IpAddr::V4)
            .unwrap_or(std::net::IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Read the far end's side (runs on the server).
pub fn remote_sample(req: &SampleRequest, asking: std::net::IpAddr) -> SideSample {
    let mut s = SideSample {
        host: pathdoc_sys::process::host_cpu().ok(),
        ..Default::default()
    };
    if canonical(req.ssh_client.ip()) != canonical(asking) {
        s.notes.push(format!(
            "refused: the SSH connection's client {} is not the asking client {asking}",
            req.ssh_client.ip()
        ));
        return s;
    }
    match pathdoc_sys::sock_diag::tcp_socket_by_addrs(req.ssh_server, req.ssh_client) {
        Ok(Some(sock)) => {
            s.tcp = sock.info;
            s.mem = sock.mem;
            s.congestion_control = sock.congestion_control;
        }
        Ok(None) => s.notes.push(format!(
            "no TCP connection {} ↔ {} on the far end",
            req.ssh_server, req.ssh_client
        )),
        Err(e) => s.notes.push(format!("sock_diag: {e}")),
    }
    let me = nix_uid();
    let own = |pid: u32| pathdoc_sys::process::uid(pid).is_ok_and(|u| u == me || me == 0);
    if !own(req.command_pid) {
        s.notes
            .push(format!("process {} is not this user's", req.command_pid));
        return s;
    }
    s.command = pathdoc_sys::process::stat(req.command_pid).ok();
    match pathdoc_sys::process::ancestor_named(req.command_pid, MAX_ANCESTRY, |c| {
        c == "sshd" || c == "sshd-session"
    }) {
        Ok(Some(p)) if own(p.pid) => {
            s.cgroup = pathdoc_sys::cgroup::cpu_of(p.pid).ok().flatten();
            s.ssh_process = Some(p);
        }
        Ok(Some(p)) => s.notes.push(format!("sshd {} runs as another user", p.pid)),
        Ok(None) => s.notes.push(format!(
            "no sshd among the ancestors of process {}",
            req.command_pid
        )),
        Err(e) => s.notes.push(format!("reading /proc: {e}")),
    }
    s
}

fn nix_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The local side: the `ssh` process `ssh_pid` and its TCP connection (found once by inode).
#[derive(Debug, Clone)]
pub struct LocalSide {
    pub ssh_pid: u32,
    pub inode: Option<u32>,
}

impl LocalSide {
    /// Find the TCP socket the local `ssh` holds (its one established connection).
    pub fn find(ssh_pid: u32) -> LocalSide {
        let inode = pathdoc_sys::sock_diag::socket_inodes_of(ssh_pid)
            .ok()
            .and_then(|inodes| {
                let socks = pathdoc_sys::sock_diag::tcp_sockets().ok()?;
                socks
                    .into_iter()
                    .find(|s| s.state == 1 && inodes.contains(&s.inode))
                    .map(|s| s.inode)
            });
        LocalSide { ssh_pid, inode }
    }

    pub fn sample(&self, t: f64) -> SideSample {
        let mut s = SideSample {
            t,
            ..Default::default()
        };
        match self.inode {
            Some(inode) => match pathdoc_sys::sock_diag::tcp_socket_by_inode(inode) {
                Ok(Some(sock)) => {
                    s.tcp = sock.info;
                    s.mem = sock.mem;
                    s.congestion_control = sock.congestion_control;
                }
                Ok(None) => s.notes.push("the ssh connection is gone".into()),
                Err(e) => s.notes.push(format!("sock_diag: {e}")),
            },
            None => s
                .notes
                .push("the local ssh's TCP connection was not found".into()),
        }
        s.ssh_process = pathdoc_sys::process::stat(self.ssh_pid).ok();
        s.cgroup = pathdoc_sys::cgroup::cpu_of(self.ssh_pid).ok().flatten();
        s.host = pathdoc_sys::process::host_cpu().ok();
        s
    }
}

/// The client of [`EvidenceService`]: one control connection, one request per sample.
pub struct EvidenceClient {
    conn: FramedConn,
}

impl EvidenceClient {
    pub async fn connect(server: SocketAddr, token: Option<String>) -> Result<Self, ProtoError> {
        let (conn, _welcome) = pathdoc_proto::connect(
            server,
            token,
            Channel::Control {
                check: CheckKind::Ssh,
                resume: None,
            },
            Duration::from_secs(10),
        )
        .await?;
        Ok(EvidenceClient { conn })
    }

    pub async fn sample(&mut self, req: &SampleRequest) -> Result<SideSample, ProtoError> {
        self.conn.send(req).await?;
        self.conn
            .recv_timeout(Duration::from_secs(10), "an SSH evidence sample")
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_connections_of_other_clients() {
        let req = SampleRequest {
            ssh_client: "192.0.2.7:50000".parse().unwrap(),
            ssh_server: "203.0.113.10:22".parse().unwrap(),
            command_pid: std::process::id(),
        };
        let s = remote_sample(&req, "198.51.100.1".parse().unwrap());
        assert!(s.tcp.is_none() && s.ssh_process.is_none());
        assert!(s.notes[0].contains("refused"), "{:?}", s.notes);
    }

    #[test]
    fn reads_a_loopback_connection_as_the_far_end_would() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut srv, _) = listener.accept().unwrap();
        c.write_all(&[0u8; 50_000]).unwrap();
        let mut buf = vec![0u8; 50_000];
        srv.read_exact(&mut buf).unwrap();
        let req = SampleRequest {
            ssh_client: c.local_addr().unwrap(),
            ssh_server: srv.local_addr().unwrap(),
            command_pid: std::process::id(),
        };
        let s = remote_sample(&req, "127.0.0.1".parse().unwrap());
        assert!(s.tcp.unwrap().bytes_received >= 50_000, "{:?}", s.notes);
        assert!(s.command.is_some());
        // The test runner has no sshd ancestor.
        assert!(s.ssh_process.is_none());
        let local = LocalSide::find(std::process::id());
        assert!(local.inode.is_some());
        let l = local.sample(0.0);
        assert!(l.ssh_process.is_some() && l.tcp.is_some());
    }
}
