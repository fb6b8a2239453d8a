//! Preamble and length-prefixed JSON framing over a TCP stream.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{ProtoError, MAGIC, MAX_FRAME, PROTOCOL_VERSION};

/// Send [`MAGIC`] and our [`PROTOCOL_VERSION`].
pub async fn write_preamble<W: AsyncWrite + Unpin>(w: &mut W) -> Result<(), ProtoError> {
    let mut buf = [0u8; 6];
    buf[..4].copy_from_slice(&MAGIC);
    buf[4..].copy_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    w.write_all(&buf).await?;
    Ok(())
}

/// Read the peer's preamble; reject garbage and other versions.
pub async fn read_preamble<R: AsyncRead + Unpin>(r: &mut R) -> Result<u16, ProtoError> {
    let mut buf = [0u8; 6];
    read_exact_or_closed(r, &mut buf).await?;
    if buf[..4] != MAGIC {
        return Err(ProtoError::NotPathdoc(buf.to_vec()));
    }
    let theirs = u16::from_be_bytes([buf[4], buf[5]]);
    if theirs != PROTOCOL_VERSION {
        return Err(ProtoError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs,
        });
    }
    Ok(theirs)
}

/// Write one JSON frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> Result<(), ProtoError> {
    let body = serde_json::to_vec(msg).map_err(|e| ProtoError::Malformed(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(ProtoError::FrameTooLarge(body.len()));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf).await?;
    Ok(())
}

/// Read one JSON frame; the length is checked before anything is allocated.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> Result<T, ProtoError> {
    let mut len = [0u8; 4];
    read_exact_or_closed(r, &mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(ProtoError::FrameTooLarge(len));
    }
    let mut body = vec![0u8; len];
    read_exact_or_closed(r, &mut body).await?;
    serde_json::from_slice(&body).map_err(|e| ProtoError::Malformed(e.to_string()))
}

async fn read_exact_or_closed<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
) -> Result<(), ProtoError> {
    match r.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ProtoError::Closed),
        Err(e) => Err(ProtoError::Io(e)),
    }
}

/// A TCP connection that speaks frames, after the handshake.
#[derive(Debug)]
pub struct FramedConn {
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    /// Longest a [`send`](Self::send) may wait for the peer to take the frame.
    send_timeout: Option<Duration>,
}

impl FramedConn {
    pub fn new(stream: TcpStream) -> Result<Self, ProtoError> {
        let peer = stream.peer_addr()?;
        let local = stream.local_addr()?;
        Ok(FramedConn {
            stream,
            peer,
            local,
            send_timeout: None,
        })
    }

    /// Bound every later [`send`](Self::send): a peer that stops reading makes it fail with
    /// [`ProtoError::Timeout`] instead of blocking (a server must not wait forever on a client).
    pub fn set_send_timeout(&mut self, timeout: Option<Duration>) {
        self.send_timeout = timeout;
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn local(&self) -> SocketAddr {
        self.local
    }

    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), ProtoError> {
        match self.send_timeout {
            None => write_frame(&mut self.stream, msg).await,
            Some(t) => tokio::time::timeout(t, write_frame(&mut self.stream, msg))
                .await
                .map_err(|_| ProtoError::Timeout(t, "the peer to read a frame"))?,
        }
    }

    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<T, ProtoError> {
        read_frame(&mut self.stream).await
    }

    /// [`recv`](Self::recv) with a deadline.
    pub async fn recv_timeout<T: DeserializeOwned>(
        &mut self,
        deadline: Duration,
        what: &'static str,
    ) -> Result<T, ProtoError> {
        tokio::time::timeout(deadline, self.recv())
            .await
            .map_err(|_| ProtoError::Timeout(deadline, what))?
    }

    /// The raw stream, for socket options (TCP_INFO, keepalive) or for bulk data after the
    /// handshake.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn into_inner(self) -> TcpStream {
        self.stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Msg {
        n: u32,
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversize_is_rejected_before_allocation() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        write_frame(&mut a, &Msg { n: 7 }).await.unwrap();
        assert_eq!(read_frame::<_, Msg>(&mut b).await.unwrap(), Msg { n: 7 });
        a.write_all(&(u32::MAX).to_be_bytes()).await.unwrap();
        assert!(matches!(
            read_frame::<_, Msg>(&mut b).await,
            Err(ProtoError::FrameTooLarge(_))
        ));
    }

    #[tokio::test]
    async fn garbage_and_other_versions_are_named() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        assert!(matches!(
            read_preamble(&mut b).await,
            Err(ProtoError::NotPathdoc(_))
        ));
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(b"PDoc\x00\x09").await.unwrap();
        assert!(matches!(
            read_preamble(&mut b).await,
            Err(ProtoError::VersionMismatch { theirs: 9, .. })
        ));
    }

    #[tokio::test]
    async fn truncated_and_malformed_frames_are_errors() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&10u32.to_be_bytes()).await.unwrap();
        a.write_all(b"{\"n\"").await.unwrap();
        drop(a);
        assert!(matches!(
            read_frame::<_, Msg>(&mut b).await,
            Err(ProtoError::Closed)
        ));
        let (mut a, mut b) = tokio::io::duplex(64);
        write_frame(&mut a, &"not a Msg").await.unwrap();
        assert!(matches!(
            read_frame::<_, Msg>(&mut b).await,
            Err(ProtoError::Malformed(_))
        ));
    }
}
