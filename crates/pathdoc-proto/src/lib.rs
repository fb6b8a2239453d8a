//! pathdoc's client/server wire protocol, version [`PROTOCOL_VERSION`].
//!
//! Every TCP connection opens with a 6-byte preamble in each direction — [`MAGIC`] and the
//! big-endian protocol version — so a peer speaking anything else (an HTTP probe, an old pathdoc)
//! is recognised in the first read and turned away with a clear reason. After the preamble both
//! sides exchange length-prefixed JSON frames (u32 big-endian length, at most [`MAX_FRAME`] bytes):
//! the client's [`Hello`], the server's [`Welcome`] or [`Refusal`], then messages of the check
//! that owns the connection. UDP datagrams carry a [`UdpHeader`] instead.
//!
//! JSON keeps the protocol debuggable with tcpdump; the frames are small control messages, bulk
//! data for throughput tests flows on separate data connections outside the framing.

pub mod frame;
pub mod preflight;
pub mod target;
pub mod udp;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;

pub use frame::{read_frame, read_preamble, write_frame, write_preamble, FramedConn};
pub use udp::UdpHeader;

/// First bytes of every pathdoc connection and datagram.
pub const MAGIC: [u8; 4] = *b"PDoc";
/// Bumped on any incompatible change; client and server must match exactly.
pub const PROTOCOL_VERSION: u16 = 1;
/// Additions within [`PROTOCOL_VERSION`] that an older peer can ignore. Each side sends its
/// revision in [`Hello`]/[`Welcome`] (absent = 0) and uses a newer message only when the peer
/// announced it. Revision 1: [`Channel::End`] (a client ends its session explicitly).
pub const PROTOCOL_REVISION: u16 = 1;
/// Largest JSON frame either side accepts; bigger ones are a protocol error, not an allocation.
pub const MAX_FRAME: usize = 64 * 1024;
/// Default server port, TCP and UDP.
pub const DEFAULT_PORT: u16 = 7224;

/// Which check a session belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckKind {
    Idle,
    Mtu,
    Speed,
    /// Evidence from the far end of an SSH transfer (`pathdoc ssh`, bootstrapped servers only).
    Ssh,
}

impl fmt::Display for CheckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckKind::Idle => "idle",
            CheckKind::Mtu => "mtu",
            CheckKind::Speed => "speed",
            CheckKind::Ssh => "ssh",
        })
    }
}

/// Server-chosen session identifier, random so that one client cannot guess another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// What a new TCP connection is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum Channel {
    /// The control connection of a check session. `resume` reattaches to an existing session
    /// after an outage (the server keeps sessions and their results for a while).
    Control {
        check: CheckKind,
        resume: Option<SessionId>,
    },
    /// A data or probe connection of an existing session; `tag` is the check's own label
    /// (probe number, stream number).
    Data { session: SessionId, tag: u32 },
    /// Revision 1: the client is done with `session`; the server frees everything the session
    /// holds at once (instead of keeping it for a resume) and answers with a [`Welcome`] naming
    /// it, or an `unknown-session` refusal when it has already ended. Send it only to a server
    /// whose [`Welcome::revision`] is at least 1 ([`end_session`] does).
    End { session: SessionId },
    /// A reachability and credentials check (the client's preflight before its checks): the
    /// server answers with a [`Welcome`] carrying session id 0, or a [`Refusal`], and closes.
    /// No session is created. Servers older than this variant refuse it as a malformed hello,
    /// which still proves they speak pathdoc at the same protocol version.
    Ping,
}

/// First frame from the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Shared secret, when the server requires one (`pathdoc server --auth-token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Client software version, for logs.
    pub client_version: String,
    /// The client's [`PROTOCOL_REVISION`] (0 when absent: clients before revisions existed).
    #[serde(default)]
    pub revision: u16,
    pub channel: Channel,
}

/// The server's acceptance of a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    pub server_version: String,
    /// The session this connection belongs to (new or resumed).
    pub session: SessionId,
    /// The client's address and port as the server sees them: the NAT's public mapping.
    pub observed: SocketAddr,
    /// The server's [`PROTOCOL_REVISION`] (0 when absent: servers before revisions existed).
    #[serde(default)]
    pub revision: u16,
}

/// Why the server turned a connection away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalCode {
    VersionMismatch,
    AuthRequired,
    AuthFailed,
    /// Too many connections or sessions from this client, or the server is full; the message
    /// says which limit, its value and what to do.
    LimitExceeded,
    UnknownSession,
    UnsupportedCheck,
    BadRequest,
}

impl fmt::Display for RefusalCode {
    /// In words, for messages: never the Rust name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusalCode::VersionMismatch => "protocol version mismatch",
            RefusalCode::AuthRequired => "authentication required",
            RefusalCode::AuthFailed => "authentication failed",
            RefusalCode::LimitExceeded => "limit reached",
            RefusalCode::UnknownSession => "unknown session",
            RefusalCode::UnsupportedCheck => "check not offered",
            RefusalCode::BadRequest => "bad request",
        })
    }
}

/// The server's refusal, sent before it closes the connection. `message` is written for the
/// user: which limit or rule, its value, and the way out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: RefusalCode,
    pub message: String,
    /// For a refusal for want of room (a pool full, shared out between other clients, or a
    /// per-client cap): which bound and its value, so the client can report them as figures.
    /// Absent from servers before it existed and in other refusals (older clients ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadLimit>,
}

/// The bound a server refused work by for want of room: the reason it logs (e.g.
/// `sessions-fair-share`, `streams-total`, `bulk-per-client`) and the limit in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadLimit {
    pub reason: String,
    pub limit: u32,
}

impl Refusal {
    /// The server refused for want of room (its load or this client's), not for what was asked.
    pub fn is_load(&self) -> bool {
        self.code == RefusalCode::LimitExceeded
    }
}

/// The server's answer to a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum HelloReply {
    Welcome(Welcome),
    Refused(Refusal),
}

/// Errors of the wire layer.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("peer is not speaking the pathdoc protocol (it sent {})", printable(.0))]
    NotPathdoc(Vec<u8>),
    #[error("protocol version mismatch: we speak {ours}, the peer speaks {theirs}; upgrade the older side")]
    VersionMismatch { ours: u16, theirs: u16 },
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    FrameTooLarge(usize),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("connection closed by peer")]
    Closed,
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, &'static str),
    #[error("server refused: {} ({})", .0.message, .0.code)]
    Refused(Refusal),
}

impl ProtoError {
    /// True when the connection itself broke (as opposed to the peer saying something wrong):
    /// the caller may reconnect.
    pub fn is_disconnect(&self) -> bool {
        matches!(
            self,
            ProtoError::Io(_) | ProtoError::Closed | ProtoError::Timeout(..)
        )
    }
}

/// Bytes a foreign peer sent, shown as escaped text ("HTTP/1") so a human recognises it.
fn printable(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// This crate's version string, sent in [`Hello`] and [`Welcome`].
pub fn software_version() -> String {
    format!("pathdoc {}", env!("CARGO_PKG_VERSION"))
}

/// Open a pathdoc connection: TCP connect, preamble, [`Hello`], and the server's reply.
/// Every step has a deadline so an unresponsive server cannot hang the client.
pub async fn connect(
    server: SocketAddr,
    token: Option<String>,
    channel: Channel,
    deadline: std::time::Duration,
) -> Result<(FramedConn, Welcome), ProtoError> {
    let stream = tokio::time::timeout(deadline, tcp_connect(server))
        .await
        .map_err(|_| ProtoError::Timeout(deadline, "TCP connect"))??;
    handshake(stream, token, channel, deadline).await
}

/// TCP connect to `server` from the client's source address (`--bind`, see
/// [`pathdoc_sys::source`]) when one is set. Every client connection goes through here.
pub async fn tcp_connect(server: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = if server.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    pathdoc_sys::source::bind_tcp(&socket, &server)?;
    socket.connect(server).await
}

/// Run the client side of the handshake on an already connected stream (for callers that need
/// to set socket options such as `TCP_MAXSEG` or keepalive before connecting).
pub async fn handshake(
    stream: tokio::net::TcpStream,
    token: Option<String>,
    channel: Channel,
    deadline: std::time::Duration,
) -> Result<(FramedConn, Welcome), ProtoError> {
    let mut conn = FramedConn::new(stream)?;
    let hello = Hello {
        token,
        client_version: software_version(),
        revision: PROTOCOL_REVISION,
        channel,
    };
    tokio::time::timeout(deadline, async {
        write_preamble(conn.stream_mut()).await?;
        conn.send(&hello).await?;
        read_preamble(conn.stream_mut()).await?;
        match conn.recv::<HelloReply>().await? {
            HelloReply::Welcome(w) => Ok(w),
            HelloReply::Refused(r) => Err(ProtoError::Refused(r)),
        }
    })
    .await
    .map_err(|_| ProtoError::Timeout(deadline, "server handshake"))?
    .map(|welcome| (conn, welcome))
}

/// How long [`end_session`] waits for the server.
pub const END_SESSION_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

/// Tell the server that the session `welcome` named is finished, so it frees what the session
/// holds at once and the client's address gets its session slot back. Best effort with a short
/// deadline ([`END_SESSION_DEADLINE`]): a server that does not understand it (revision 0) is not
/// asked, and a session the server already ended is not an error. Call it once a check has
/// everything it needs from the server (also after an interruption).
pub async fn end_session(
    server: SocketAddr,
    token: Option<String>,
    welcome: &Welcome,
) -> Result<(), ProtoError> {
    if welcome.revision < 1 {
        return Ok(());
    }
    let channel = Channel::End {
        session: welcome.session,
    };
    match connect(server, token, channel, END_SESSION_DEADLINE).await {
        Ok(_) => Ok(()),
        Err(ProtoError::Refused(r)) if r.code == RefusalCode::UnknownSession => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_fields_default_to_zero_for_older_peers() {
        let old_hello =
            r#"{"client_version":"pathdoc 0.0.9","channel":{"type":"data","session":5,"tag":1}}"#;
        let hello: Hello = serde_json::from_str(old_hello).unwrap();
        assert_eq!(hello.revision, 0);
        let old_welcome =
            r#"{"server_version":"pathdoc 0.0.9","session":5,"observed":"192.0.2.1:4000"}"#;
        let welcome: Welcome = serde_json::from_str(old_welcome).unwrap();
        assert_eq!(welcome.revision, 0);
        let end = serde_json::to_string(&Channel::End {
            session: SessionId(7),
        })
        .unwrap();
        assert_eq!(end, r#"{"type":"end","session":7}"#);
    }

    #[test]
    fn refusals_read_as_words_without_type_names() {
        let e = ProtoError::Refused(Refusal {
            code: RefusalCode::LimitExceeded,
            message: "it allows 32 concurrent sessions per client address".into(),
            load: None,
        });
        let text = e.to_string();
        assert!(!text.contains("LimitExceeded"), "{text}");
        assert!(
            text.starts_with("server refused: it allows 32") && text.ends_with("(limit reached)"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn end_session_is_not_sent_to_a_server_without_revision_1() {
        // A closed port: were it contacted, this would fail.
        let welcome = Welcome {
            server_version: "old".into(),
            session: SessionId(1),
            observed: "127.0.0.1:1".parse().unwrap(),
            revision: 0,
        };
        end_session("127.0.0.1:1".parse().unwrap(), None, &welcome)
            .await
            .unwrap();
    }
}
