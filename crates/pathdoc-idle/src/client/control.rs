//! The control connection: a heartbeat that notices outages (and suspend), resumption of the
//! session with backoff, and the one task through which every control request goes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use pathdoc_proto::{connect, Channel, CheckKind, FramedConn, ProtoError, RefusalCode, SessionId};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::IdleConfig;
use crate::proto::{ControlReply, ControlRequest};
use crate::server::MAX_TAGS_PER_REQUEST;

#[derive(Debug, Clone, Serialize)]
pub struct Outage {
    pub start_s: f64,
    pub end_s: Option<f64>,
    pub cause: String,
}

pub(super) struct Health {
    pub(super) outages: Vec<(Duration, Option<Duration>, String)>,
    /// Send time of the latest answered heartbeat: the path was up at least until then.
    pub(super) confirmed: Duration,
    pub(super) rtt: Duration,
    pub(super) notes: Vec<String>,
    pub(super) suspended: bool,
    pub(super) public_addr: SocketAddr,
    /// IPv6, and the server saw the client's own address: no NAT66, so the box that forgets
    /// idle connections is a stateful firewall (RFC 6092).
    pub(super) v6_no_nat: bool,
    /// The control connection was lost at this time (a server's close or a network outage,
    /// told apart by whether the session can be resumed).
    pub(super) lost_at: Option<Duration>,
    /// The server no longer knows the session (its session limit, a restart or a shutdown):
    /// when the connection was lost, and what the server said.
    pub(super) session_ended: Option<(Duration, String)>,
}

pub(super) type Request = (
    ControlRequest,
    oneshot::Sender<Result<ControlReply, String>>,
);

pub(super) struct ControlCtx {
    pub(super) cfg: IdleConfig,
    pub(super) session: SessionId,
    pub(super) start: Instant,
    pub(super) health: Arc<Mutex<Health>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) async fn exchange(
    conn: &mut FramedConn,
    req: &ControlRequest,
    deadline: Duration,
) -> Result<ControlReply, ProtoError> {
    conn.send(req).await?;
    conn.recv_timeout(deadline, "the server's idle-check reply")
        .await
}

pub(super) async fn control_task(
    ctx: ControlCtx,
    mut conn: Option<FramedConn>,
    mut rx: mpsc::Receiver<Request>,
) {
    let hb = ctx.cfg.heartbeat();
    let deadline = (hb * 3).max(Duration::from_secs(1));
    let mut seq = 0u64;
    let mut last_wall = SystemTime::now();
    let mut last_mono = Instant::now();
    let mut backoff = Duration::from_millis(250);
    loop {
        let Some(c) = conn.as_mut() else {
            // Reconnect, answering requests with an error meanwhile.
            tokio::select! {
                req = rx.recv() => match req {
                    Some((_, reply)) => { let _ = reply.send(Err("control connection down".into())); continue; }
                    None => return,
                },
                _ = tokio::time::sleep(backoff) => {}
            }
            let channel = Channel::Control {
                check: CheckKind::Idle,
                resume: Some(ctx.session),
            };
            match connect(ctx.cfg.server, ctx.cfg.token.clone(), channel, deadline).await {
                Ok((c, welcome)) => {
                    let now = ctx.start.elapsed();
                    let mut h = lock(&ctx.health);
                    if let Some(o) = h.outages.last_mut() {
                        if o.1.is_none() {
                            o.1 = Some(now);
                        }
                    }
                    let observed = pathdoc_core::addr::unmapped(welcome.observed);
                    if observed.ip() != h.public_addr.ip() {
                        let note = format!(
                            "idle: public address changed from {} to {}: earlier probes cannot be judged",
                            h.public_addr.ip(),
                            observed.ip()
                        );
                        h.notes.push(note);
                        h.suspended = true;
                    }
                    h.notes.push(format!(
                        "idle: control connection back after {:.1} s; resuming session",
                        now.as_secs_f64()
                    ));
                    conn = Some(c);
                    backoff = Duration::from_millis(250);
                }
                Err(ProtoError::Refused(r)) if r.code == RefusalCode::UnknownSession => {
                    // Not an outage: the server ended the session. The loss of the connection
                    // was that end, so it is no outage either.
                    {
                        let mut h = lock(&ctx.health);
                        let at = h.lost_at.unwrap_or_else(|| ctx.start.elapsed());
                        if h.outages.last().is_some_and(|o| o.1.is_none()) {
                            h.outages.pop();
                        }
                        h.notes.push(format!(
                            "idle: the server ended the session after {:.1} s ({}); stopping",
                            at.as_secs_f64(),
                            r.message
                        ));
                        h.session_ended = Some((
                            at,
                            format!("the server refused to resume it: {}", r.message),
                        ));
                    }
                    // Nothing can be fired any more: answer every request with an error.
                    while let Some((_, reply)) = rx.recv().await {
                        let _ = reply.send(Err("the server ended the session".into()));
                    }
                    return;
                }
                Err(ProtoError::Refused(r)) => {
                    lock(&ctx.health).notes.push(format!(
                        "idle: server refused to resume the session: {}",
                        r.message
                    ));
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
                Err(_) => backoff = (backoff * 2).min(Duration::from_secs(10)),
            }
            continue;
        };
        let sent_at = ctx.start.elapsed();
        let result = tokio::select! {
            _ = tokio::time::sleep(hb) => {
                seq += 1;
                let t0 = Instant::now();
                let r = exchange(c, &ControlRequest::Heartbeat { seq }, deadline).await;
                if r.is_ok() {
                    let mut h = lock(&ctx.health);
                    h.confirmed = sent_at.max(h.confirmed);
                    h.rtt = t0.elapsed();
                    // Monotonic time stops during suspend; the wall clock does not.
                    let wall = SystemTime::now().duration_since(last_wall).unwrap_or_default();
                    let mono = last_mono.elapsed();
                    if wall > mono + Duration::from_secs(2).max(hb) {
                        h.notes.push(format!("idle: the system was suspended for about {:.0} s: results after this are not trustworthy", (wall - mono).as_secs_f64()));
                        h.suspended = true;
                        let now = ctx.start.elapsed();
                        h.outages.push((now.saturating_sub(hb * 2), Some(now), "system suspended".into()));
                    }
                }
                last_wall = SystemTime::now();
                last_mono = Instant::now();
                r.map(|_| ())
            }
            req = rx.recv() => match req {
                Some((req, reply)) => {
                    let finish = req == ControlRequest::Finish;
                    let r = exchange(c, &req, deadline.max(Duration::from_secs(5))).await;
                    match r {
                        Ok(rep) => { let _ = reply.send(Ok(rep)); if finish { return; } Ok(()) }
                        Err(e) => { let _ = reply.send(Err(e.to_string())); Err(e) }
                    }
                }
                None => return,
            },
        };
        if let Err(e) = result {
            let mut h = lock(&ctx.health);
            let start = h.confirmed;
            h.lost_at = Some(ctx.start.elapsed());
            h.outages.push((start, None, e.to_string()));
            h.notes.push(format!("idle: lost the control connection at {:.1} s ({e}); tests until it is back are discarded", ctx.start.elapsed().as_secs_f64()));
            conn = None;
        }
    }
}

/// Send one request through the control task. Fire requests naming more tags than the server
/// takes at once ([`MAX_TAGS_PER_REQUEST`], so that its reply fits a frame) go in batches and
/// their replies are merged.
pub(super) async fn request(
    tx: &mpsc::Sender<Request>,
    req: ControlRequest,
) -> Result<ControlReply, String> {
    match req {
        ControlRequest::Fire { tags, nonce } if tags.len() > MAX_TAGS_PER_REQUEST => {
            fire_in_batches(tx, &tags, |tags| ControlRequest::Fire { tags, nonce }).await
        }
        ControlRequest::FireUdp { tags, nonce } if tags.len() > MAX_TAGS_PER_REQUEST => {
            fire_in_batches(tx, &tags, |tags| ControlRequest::FireUdp { tags, nonce }).await
        }
        req => request_one(tx, req).await,
    }
}

/// Every batch is tried; tags of a batch that failed are missing from the merged reply (the
/// caller counts them as not sent). Fails only when no batch got through.
async fn fire_in_batches(
    tx: &mpsc::Sender<Request>,
    tags: &[u32],
    make: impl Fn(Vec<u32>) -> ControlRequest,
) -> Result<ControlReply, String> {
    let mut fired = Vec::with_capacity(tags.len());
    let mut first_error = None;
    let mut any = false;
    for batch in tags.chunks(MAX_TAGS_PER_REQUEST) {
        match request_one(tx, make(batch.to_vec())).await {
            Ok(ControlReply::Fired { fired: part }) => {
                any = true;
                fired.extend(part);
            }
            Ok(ControlReply::Error { message }) => {
                first_error.get_or_insert(message);
            }
            Ok(other) => {
                first_error.get_or_insert(format!("unexpected reply to a fire request: {other:?}"));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if !any => Err(e),
        _ => Ok(ControlReply::Fired { fired }),
    }
}

async fn request_one(
    tx: &mpsc::Sender<Request>,
    req: ControlRequest,
) -> Result<ControlReply, String> {
    let (rtx, rrx) = oneshot::channel();
    tx.send((req, rtx))
        .await
        .map_err(|_| "control task ended".to_string())?;
    rrx.await.map_err(|_| "control task ended".to_string())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in control task that answers fire requests like the server, refusing any request
    /// over the server's limit.
    fn answering_control() -> (mpsc::Sender<Request>, tokio::task::JoinHandle<Vec<usize>>) {
        let (tx, mut rx) = mpsc::channel::<Request>(4);
        let seen = tokio::spawn(async move {
            let mut sizes = Vec::new();
            while let Some((req, reply)) = rx.recv().await {
                let r = match req {
                    ControlRequest::Fire { tags, .. } | ControlRequest::FireUdp { tags, .. } => {
                        sizes.push(tags.len());
                        if tags.len() > MAX_TAGS_PER_REQUEST {
                            ControlReply::Error {
                                message: "too many".into(),
                            }
                        } else {
                            ControlReply::Fired {
                                fired: tags
                                    .into_iter()
                                    .map(|tag| crate::proto::Fired {
                                        tag,
                                        idle_ms: Some(1),
                                        sent: true,
                                        error: None,
                                    })
                                    .collect(),
                            }
                        }
                    }
                    _ => ControlReply::Ok,
                };
                let _ = reply.send(Ok(r));
            }
            sizes
        });
        (tx, seen)
    }

    #[tokio::test]
    async fn two_thousand_tags_go_in_batches_and_all_come_back() {
        let (tx, seen) = answering_control();
        let tags: Vec<u32> = (0..2000).collect();
        let reply = request(&tx, ControlRequest::Fire { tags, nonce: 3 }).await;
        let Ok(ControlReply::Fired { fired }) = reply else {
            panic!("unexpected reply {reply:?}");
        };
        assert_eq!(fired.len(), 2000);
        assert!(fired
            .iter()
            .enumerate()
            .all(|(i, f)| f.tag == i as u32 && f.sent));
        let udp = request(
            &tx,
            ControlRequest::FireUdp {
                tags: (0..501).collect(),
                nonce: 4,
            },
        )
        .await;
        assert!(matches!(udp, Ok(ControlReply::Fired { fired }) if fired.len() == 501));
        drop(tx);
        let sizes = seen.await.unwrap();
        assert_eq!(sizes, vec![500, 500, 500, 500, 500, 1]);
    }
}
