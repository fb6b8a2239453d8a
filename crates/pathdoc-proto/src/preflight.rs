//! The client's preflight: before any check runs, reach the server once — TCP connect and a
//! [`Channel::Ping`] handshake — trying every resolved address with a short stagger in the spirit
//! of RFC 8305 (Happy Eyeballs v2). The first address that completes the pathdoc handshake wins;
//! when none does, every attempt's failure is kept, so the caller can say exactly what went wrong
//! (nothing listening, dropped by a firewall, another protocol, a refusal).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::{
    tcp_connect, Channel, FramedConn, Hello, HelloReply, ProtoError, Refusal, RefusalCode, Welcome,
    MAGIC,
};

/// Deadlines of one preflight.
#[derive(Debug, Clone, Copy)]
pub struct PreflightOptions {
    /// Delay before the next address is tried while earlier attempts are still pending
    /// (RFC 8305 §5 recommends 250 ms).
    pub stagger: Duration,
    /// Longest a TCP connect may take (covers three SYN retransmissions: 1 + 2 + 4 s).
    pub connect_timeout: Duration,
    /// Longest a connected peer may stay silent before it is called "not a pathdoc server".
    pub answer_timeout: Duration,
}

impl Default for PreflightOptions {
    fn default() -> Self {
        PreflightOptions {
            stagger: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(10),
            answer_timeout: Duration::from_secs(5),
        }
    }
}

/// The server answered the handshake at `addr`.
#[derive(Debug, Clone)]
pub struct Reached {
    pub addr: SocketAddr,
    /// `None` for a server that predates [`Channel::Ping`] (it refused it as malformed, at the
    /// same protocol version).
    pub welcome: Option<Welcome>,
}

/// Why one address did not complete the handshake.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error("connection refused")]
    ConnectionRefused,
    #[error("no answer to the TCP connect within {} s", .0.as_secs())]
    ConnectTimeout(Duration),
    #[error("{0}")]
    Unreachable(std::io::Error),
    #[error("accepted the connection but sent nothing in {} s", .0.as_secs())]
    Silent(Duration),
    #[error("accepted the connection and closed it without a word")]
    ClosedSilently,
    #[error("answered in another protocol: {}", first_line(.0))]
    Foreign(Vec<u8>),
    #[error("speaks pathdoc protocol {theirs}, this client speaks {ours}")]
    VersionMismatch { ours: u16, theirs: u16 },
    #[error("refused: {}", .0.message)]
    Refused(Refusal),
    #[error("{0}")]
    Protocol(ProtoError),
}

impl AttemptError {
    /// How much the failure tells about the server, higher is more: a pathdoc refusal beats a
    /// foreign protocol beats silence beats a refused connect beats a timeout.
    fn weight(&self) -> u8 {
        match self {
            AttemptError::Refused(_) | AttemptError::VersionMismatch { .. } => 6,
            AttemptError::Foreign(_) | AttemptError::Protocol(_) => 5,
            AttemptError::Silent(_) | AttemptError::ClosedSilently => 4,
            AttemptError::ConnectionRefused => 3,
            AttemptError::Unreachable(_) => 2,
            AttemptError::ConnectTimeout(_) => 1,
        }
    }
}

/// No address completed the handshake.
#[derive(Debug)]
pub struct PreflightError {
    /// Every attempt, in the order they failed.
    pub attempts: Vec<(SocketAddr, AttemptError)>,
}

impl PreflightError {
    /// The attempt whose failure says most about the server.
    pub fn decisive(&self) -> Option<&(SocketAddr, AttemptError)> {
        self.attempts.iter().max_by_key(|(_, e)| e.weight())
    }
}

impl std::fmt::Display for PreflightError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .attempts
            .iter()
            .map(|(a, e)| format!("{a}: {e}"))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for PreflightError {}

/// Try `addrs` in order, a new one every `stagger` while earlier attempts are pending and
/// at once when one fails; return the first that completes the handshake.
pub async fn reach(
    addrs: &[SocketAddr],
    token: Option<String>,
    opts: PreflightOptions,
) -> Result<Reached, PreflightError> {
    let mut pending = JoinSet::new();
    let mut next = 0;
    let mut attempts = Vec::new();
    let start = |pending: &mut JoinSet<_>, next: &mut usize| {
        let addr = addrs[*next];
        *next += 1;
        let token = token.clone();
        pending.spawn(async move { (addr, ping(addr, token, opts).await) });
    };
    if !addrs.is_empty() {
        start(&mut pending, &mut next);
    }
    while !pending.is_empty() {
        tokio::select! {
            joined = pending.join_next() => {
                let Some(Ok((addr, result))) = joined else { continue };
                match result {
                    Ok(welcome) => {
                        pending.abort_all();
                        return Ok(Reached { addr, welcome });
                    }
                    Err(e) => {
                        attempts.push((addr, e));
                        if next < addrs.len() {
                            start(&mut pending, &mut next);
                        }
                    }
                }
            }
            _ = tokio::time::sleep(opts.stagger), if next < addrs.len() => {
                start(&mut pending, &mut next);
            }
        }
    }
    Err(PreflightError { attempts })
}

/// Connect to one address and run the [`Channel::Ping`] handshake, reading the first bytes
/// ourselves so a foreign peer is named by what it said.
async fn ping(
    addr: SocketAddr,
    token: Option<String>,
    opts: PreflightOptions,
) -> Result<Option<Welcome>, AttemptError> {
    let stream = match tokio::time::timeout(opts.connect_timeout, tcp_connect(addr)).await {
        Err(_) => return Err(AttemptError::ConnectTimeout(opts.connect_timeout)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(AttemptError::ConnectionRefused)
        }
        Ok(Err(e)) => return Err(AttemptError::Unreachable(e)),
        Ok(Ok(s)) => s,
    };
    let mut conn = FramedConn::new(stream).map_err(AttemptError::Protocol)?;
    let hello = Hello {
        token,
        client_version: crate::software_version(),
        revision: crate::PROTOCOL_REVISION,
        channel: Channel::Ping,
    };
    // A peer that closes at once may reset our write; what it (did not) say decides below.
    let sent = async {
        crate::write_preamble(conn.stream_mut()).await?;
        conn.send(&hello).await
    }
    .await;
    let first = peek_first_bytes(conn.stream_mut(), opts.answer_timeout).await?;
    if first.is_empty() {
        return Err(sent
            .err()
            .map(AttemptError::Protocol)
            .unwrap_or(AttemptError::ClosedSilently));
    }
    if !first.iter().zip(MAGIC.iter()).all(|(a, b)| a == b) {
        return Err(AttemptError::Foreign(
            read_greeting(conn.stream_mut()).await,
        ));
    }
    match tokio::time::timeout(opts.answer_timeout, crate::read_preamble(conn.stream_mut())).await {
        Err(_) => return Err(AttemptError::Silent(opts.answer_timeout)),
        Ok(Err(ProtoError::VersionMismatch { ours, theirs })) => {
            return Err(AttemptError::VersionMismatch { ours, theirs })
        }
        Ok(Err(ProtoError::NotPathdoc(bytes))) => return Err(AttemptError::Foreign(bytes)),
        Ok(Err(e)) => return Err(AttemptError::Protocol(e)),
        Ok(Ok(_)) => {}
    }
    let reply = conn
        .recv_timeout::<HelloReply>(opts.answer_timeout, "the server's answer")
        .await
        .map_err(AttemptError::Protocol)?;
    // Say goodbye cleanly; the server closes too.
    let _ = conn.stream_mut().shutdown().await;
    match reply {
        HelloReply::Welcome(w) => Ok(Some(w)),
        HelloReply::Refused(r)
            if r.code == RefusalCode::BadRequest && r.message.contains("ping") =>
        {
            Ok(None)
        }
        HelloReply::Refused(r) => Err(AttemptError::Refused(r)),
    }
}

/// The peer's first bytes, left in the socket (`MSG_PEEK`) so a pathdoc server's preamble and
/// reply still reach the framed reader. Empty when the peer closed without a word.
async fn peek_first_bytes(
    stream: &mut tokio::net::TcpStream,
    patience: Duration,
) -> Result<Vec<u8>, AttemptError> {
    let mut buf = [0u8; 8];
    match tokio::time::timeout(patience, stream.peek(&mut buf)).await {
        Err(_) => Err(AttemptError::Silent(patience)),
        Ok(Ok(n)) => Ok(buf[..n].to_vec()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(Vec::new()),
        Ok(Err(e)) => Err(AttemptError::Protocol(e.into())),
    }
}

/// What a foreign peer says within a short moment (the bytes already peeked, and more up
/// to a line of an SSH or HTTP banner), so the user sees what is really listening.
async fn read_greeting(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    let until = tokio::time::Instant::now() + Duration::from_millis(300);
    while got.len() < 200 && !got.contains(&b'\n') {
        match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    got
}

/// The first line of a foreign peer's greeting as text, control characters escaped.
pub fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let line = text
        .split(['\r', '\n'])
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut shown = String::new();
    for c in line.chars().take(80) {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    format!("\"{shown}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn quick() -> PreflightOptions {
        PreflightOptions {
            stagger: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(2),
            answer_timeout: Duration::from_millis(500),
        }
    }

    /// A listener that answers every connection with `answer` (a pathdoc server when `None`),
    /// after reading what the client sent.
    async fn peer(answer: Option<&'static [u8]>) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, from) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    match answer {
                        Some(bytes) => {
                            let _ = s.write_all(bytes).await;
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                        None => {
                            let mut conn = FramedConn::new(s).unwrap();
                            crate::read_preamble(conn.stream_mut()).await.unwrap();
                            let hello: Hello = conn.recv().await.unwrap();
                            assert_eq!(hello.channel, Channel::Ping);
                            crate::write_preamble(conn.stream_mut()).await.unwrap();
                            let w = Welcome {
                                server_version: "test".into(),
                                session: crate::SessionId(0),
                                observed: from,
                                revision: 0,
                            };
                            conn.send(&HelloReply::Welcome(w)).await.unwrap();
                        }
                    }
                });
            }
        });
        addr
    }

    async fn silent() -> SocketAddr {
        peer(Some(b"")).await
    }

    fn closed_port() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    #[tokio::test]
    async fn a_pathdoc_server_is_reached() {
        let addr = peer(None).await;
        let r = reach(&[addr], None, quick()).await.unwrap();
        assert_eq!(r.addr, addr);
        assert!(r.welcome.is_some());
    }

    #[tokio::test]
    async fn a_dead_first_address_costs_one_stagger_at_most() {
        let good = peer(None).await;
        let dead = silent().await;
        let t0 = std::time::Instant::now();
        let r = reach(&[dead, closed_port(), good], None, quick())
            .await
            .unwrap();
        assert_eq!(r.addr, good);
        assert!(
            t0.elapsed() < Duration::from_millis(400),
            "{:?}",
            t0.elapsed()
        );
    }

    #[tokio::test]
    async fn failures_name_what_listens() {
        let ssh = peer(Some(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")).await;
        let e = reach(&[ssh], None, quick()).await.unwrap_err();
        assert!(matches!(e.decisive(), Some((_, AttemptError::Foreign(_)))));
        assert!(
            e.to_string().contains("\"SSH-2.0-OpenSSH_9.2p1 Debian-2\""),
            "{e}"
        );

        let e = reach(&[silent().await], None, quick()).await.unwrap_err();
        assert!(e.to_string().contains("sent nothing"), "{e}");

        let refused = closed_port();
        let e = reach(&[refused], None, quick()).await.unwrap_err();
        assert!(matches!(
            e.decisive(),
            Some((_, AttemptError::ConnectionRefused))
        ));

        // The most telling failure wins over the order they came in.
        let e = reach(&[closed_port(), ssh], None, quick())
            .await
            .unwrap_err();
        assert!(matches!(e.decisive(), Some((a, AttemptError::Foreign(_))) if *a == ssh));
    }
}
