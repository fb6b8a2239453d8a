//! What both ends of an SSH connection show while it carries a transfer: the TCP state of the
//! connection itself (sock_diag, as `ss -ti`), the CPU time of the `ssh`/`sshd` processes doing
//! the crypto, and the CPU cgroup they run in.
//!
//! The local side is read directly ([`local_sample`]). The far end is read by the bootstrapped
//! `pathdoc server` through [`EvidenceService`] (check kind `ssh`), which only the SSH bootstrap
//! enables (`--ssh-evidence`, with a token): it answers only for an SSH connection to the sshd
//! that started it (the server end of its own `$SSH_CONNECTION`) whose client address is the
//! asking client's own and which the remote command's sshd holds, and only for processes of the
//! server's own user.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pathdoc_proto::{Channel, CheckKind, FramedConn, ProtoError};
use pathdoc_server::{next_request, Service, ServiceError, Session};
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
pub struct EvidenceService {
    /// The sshd this server was started through (the server end of `$SSH_CONNECTION`).
    sshd: Option<SocketAddr>,
}

impl EvidenceService {
    /// Serves SSH connections to the sshd named by this process's `$SSH_CONNECTION`.
    pub fn new() -> Self {
        EvidenceService {
            sshd: std::env::var("SSH_CONNECTION")
                .ok()
                .and_then(|c| sshd_endpoint(&c)),
        }
    }
}

/// The server end (`IP PORT`, fields 3 and 4) of an `$SSH_CONNECTION` value.
pub fn sshd_endpoint(ssh_connection: &str) -> Option<SocketAddr> {
    let f: Vec<&str> = ssh_connection.split_whitespace().collect();
    let ip: std::net::IpAddr = f.get(2)?.parse().ok()?;
    let port: u16 = f.get(3)?.parse().ok()?;
    Some(SocketAddr::new(ip, port))
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
        // A frame that is not a request is answered with a sample holding nothing but the note
        // (the one frame this service sends).
        let malformed = |note| SideSample {
            notes: vec![note],
            ..Default::default()
        };
        let what = "the next sample request";
        while let Some(req) =
            next_request::<SampleRequest, _>(&session, &mut conn, IDLE_TIMEOUT, what, malformed)
                .await?
        {
            let client_ip = session.client_ip;
            let sshd = self.sshd;
            let sample =
                tokio::task::spawn_blocking(move || remote_sample_for(&req, client_ip, sshd))
                    .await
                    .map_err(|e| ServiceError::Other(e.to_string()))?;
            conn.send(&sample).await?;
        }
        Ok(())
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

/// Read the far end's side (runs on the server) for a server not started over SSH: only a
/// socket the command's own sshd holds is answered for.
pub fn remote_sample(req: &SampleRequest, asking: std::net::IpAddr) -> SideSample {
    remote_sample_for(req, asking, None)
}

/// Read the far end's side (runs on the server). `sshd` is the sshd the server was started
/// through: a request about a connection to any other local endpoint is refused.
pub fn remote_sample_for(
    req: &SampleRequest,
    asking: std::net::IpAddr,
    sshd: Option<SocketAddr>,
) -> SideSample {
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
    if let Some(ours) = sshd {
        let same = ours.port() == req.ssh_server.port()
            && canonical(ours.ip()) == canonical(req.ssh_server.ip());
        if !same {
            s.notes.push(format!(
                "refused: {} is not the sshd this server was started through ({ours})",
                req.ssh_server
            ));
            return s;
        }
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
    read_ssh_socket(req, sshd.is_some(), &mut s);
    s
}

/// The TCP state of the requested connection, if it is the one the command's sshd holds. Its
/// fds can be unreadable (a non-root user's sshd is not dumpable): then, for a server started
/// over SSH, the endpoint check above is what restricts the answer.
fn read_ssh_socket(req: &SampleRequest, endpoint_checked: bool, s: &mut SideSample) {
    let sock = match pathdoc_sys::sock_diag::tcp_socket_by_addrs(req.ssh_server, req.ssh_client) {
        Ok(Some(sock)) => sock,
        Ok(None) => {
            s.notes.push(format!(
                "no TCP connection {} ↔ {} on the far end",
                req.ssh_server, req.ssh_client
            ));
            return;
        }
        Err(e) => {
            s.notes.push(format!("sock_diag: {e}"));
            return;
        }
    };
    let held = match &s.ssh_process {
        Some(p) => pathdoc_sys::sock_diag::socket_inodes_of(p.pid)
            .ok()
            .map(|inodes| inodes.contains(&sock.inode)),
        None => Some(false),
    };
    match held {
        Some(true) => {}
        None if endpoint_checked => {}
        _ => {
            s.notes.push(format!(
                "refused: {} ↔ {} is not the SSH connection of process {}",
                req.ssh_server, req.ssh_client, req.command_pid
            ));
            return;
        }
    }
    s.tcp = sock.info;
    s.mem = sock.mem;
    s.congestion_control = sock.congestion_control;
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

    /// Any TCP connection of the asker's address used to be answered for; now only the SSH
    /// connection of the command's sshd (and, started over SSH, only to that sshd).
    #[test]
    fn a_connection_that_is_not_the_ssh_one_gets_no_answer() {
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
        // Not started over SSH: the runner has no sshd ancestor holding this socket.
        let s = remote_sample(&req, "127.0.0.1".parse().unwrap());
        assert!(s.tcp.is_none(), "{:?}", s.notes);
        assert!(
            s.notes.iter().any(|n| n.contains("refused")),
            "{:?}",
            s.notes
        );
        assert!(s.command.is_some());
        assert!(s.ssh_process.is_none());
        // Started over SSH to port 22: a connection to another port is refused outright.
        let sshd = Some("127.0.0.1:22".parse().unwrap());
        let s = remote_sample_for(&req, "127.0.0.1".parse().unwrap(), sshd);
        assert!(s.tcp.is_none() && s.command.is_none(), "{:?}", s.notes);
        assert!(s.notes[0].contains("not the sshd"), "{:?}", s.notes);
        assert_eq!(
            sshd_endpoint("192.0.2.7 50000 203.0.113.10 22"),
            Some("203.0.113.10:22".parse().unwrap())
        );
        assert_eq!(sshd_endpoint(""), None);
        let local = LocalSide::find(std::process::id());
        assert!(local.inode.is_some());
        let l = local.sample(0.0);
        assert!(l.ssh_process.is_some() && l.tcp.is_some());
    }

    /// A frame that is not a request is answered (a sample carrying only the note) and the
    /// connection carries on; it used to close without a word.
    #[test]
    fn a_malformed_request_gets_an_answer_and_the_session_goes_on() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let server = pathdoc_server::Server::new(pathdoc_server::ServerConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                ..Default::default()
            })
            .with_service(Arc::new(EvidenceService::new()))
            .bind()
            .await
            .unwrap();
            let addr = server.local_addr();
            let task = tokio::spawn(server.run(std::future::pending(), Duration::from_millis(100)));
            let mut client = EvidenceClient::connect(addr, None).await.unwrap();
            client
                .conn
                .send(&serde_json::json!({"ssh_client": 5}))
                .await
                .unwrap();
            let answer: SideSample = client
                .conn
                .recv_timeout(Duration::from_secs(5), "the answer")
                .await
                .unwrap();
            assert!(answer.notes[0].contains("malformed request"), "{answer:?}");
            let req = SampleRequest {
                ssh_client: "127.0.0.1:1".parse().unwrap(),
                ssh_server: "127.0.0.1:2".parse().unwrap(),
                command_pid: std::process::id(),
            };
            let s = client.sample(&req).await.unwrap();
            assert!(s.tcp.is_none(), "{s:?}");
            task.abort();
        });
    }
}
