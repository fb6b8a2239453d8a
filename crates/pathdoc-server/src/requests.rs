//! The receiving half of a check's control loop, which every request/reply service shares: wait
//! for the next request with a deadline, answer a frame that is not one and carry on, and end
//! quietly when the client has gone.

use std::time::Duration;

use pathdoc_proto::{FramedConn, ProtoError};
use serde::{de::DeserializeOwned, Serialize};

use crate::{ServiceError, Session};

/// The next request on a control connection, with the session touched. `None` when the client
/// hung up or stayed silent for `silence`, or the session ended: the service returns `Ok`.
/// A frame that is not a `Req` is answered with `malformed("malformed request: …")` and the
/// wait goes on; any other failure is the service's error.
pub async fn next_request<Req, Rep>(
    session: &Session,
    conn: &mut FramedConn,
    silence: Duration,
    what: &'static str,
    malformed: impl Fn(String) -> Rep,
) -> Result<Option<Req>, ServiceError>
where
    Req: DeserializeOwned,
    Rep: Serialize,
{
    loop {
        let received = tokio::select! {
            _ = session.cancel.cancelled() => return Ok(None),
            r = conn.recv_timeout::<Req>(silence, what) => r,
        };
        match received {
            Ok(req) => {
                session.touch();
                return Ok(Some(req));
            }
            Err(e) if e.is_disconnect() => return Ok(None),
            Err(ProtoError::Malformed(m)) => {
                conn.send(&malformed(format!("malformed request: {m}")))
                    .await?
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pathdoc_proto::CheckKind;
    use serde::Deserialize;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::{Accounting, Limits, SessionRegistry};

    #[derive(Debug, Deserialize, PartialEq)]
    struct Ping {
        n: u32,
    }

    async fn pair() -> (FramedConn, FramedConn) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let client = FramedConn::new(client.unwrap()).unwrap();
        (client, FramedConn::new(accepted.unwrap().0).unwrap())
    }

    #[tokio::test]
    async fn a_malformed_frame_is_answered_and_a_gone_client_or_ended_session_ends_quietly() {
        let limits = Limits::default();
        let registry =
            SessionRegistry::new(limits.clone(), false, Arc::new(Accounting::new(&limits)));
        let udp = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let parent = CancellationToken::new();
        let ip = "127.0.0.1".parse().unwrap();
        let (session, _use) = registry.create(CheckKind::Mtu, ip, udp, &parent).unwrap();
        let silence = Duration::from_secs(5);

        let (mut client, mut server) = pair().await;
        client
            .send(&serde_json::json!({"make": "coffee"}))
            .await
            .unwrap();
        client.send(&serde_json::json!({"n": 7})).await.unwrap();
        let got: Option<Ping> = next_request(&session, &mut server, silence, "a ping", |m| m)
            .await
            .unwrap();
        assert_eq!(got, Some(Ping { n: 7 }));
        let answer: String = client.recv_timeout(silence, "the answer").await.unwrap();
        assert!(answer.starts_with("malformed request: "), "{answer}");

        drop(client);
        let gone: Option<Ping> = next_request(&session, &mut server, silence, "a ping", |m| m)
            .await
            .unwrap();
        assert_eq!(gone, None);

        let (_client, mut server) = pair().await;
        session.cancel.cancel();
        let ended: Option<Ping> = next_request(&session, &mut server, silence, "a ping", |m| m)
            .await
            .unwrap();
        assert_eq!(ended, None);
    }
}
