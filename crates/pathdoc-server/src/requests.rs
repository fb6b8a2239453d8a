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
