//! A prototype of a leaner idle-check probe path, to measure the change proposed for
//! `pathdoc_idle::server` before anyone makes it: one task per probe connection (no reader task,
//! no channels); a fire request reaches the task through a `Notify` and an atomic nonce, and
//! the task watches the socket with `readable()` + `try_read` instead of a spawned frame reader.
//! It keeps the same per-probe record as the real service so the comparison is fair. Runs inside
//! the real `pathdoc_server` framework; only Heartbeat and Fire are implemented.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pathdoc_idle::proto::{ControlReply, ControlRequest, Fired, ProbeMessage, ServerProbeRecord};
use pathdoc_proto::{CheckKind, FramedConn};
use pathdoc_server::{Service, ServiceError, Session};
use tokio::sync::Notify;

pub struct LeanIdleService;

#[derive(Default)]
struct Slot {
    notify: Notify,
    nonce: AtomicU64,
}

struct Entry {
    _record: ServerProbeRecord,
    last_activity: Instant,
    slot: Arc<Slot>,
}

#[derive(Default)]
struct State {
    probes: Mutex<HashMap<u32, Entry>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl Service for LeanIdleService {
    fn check(&self) -> CheckKind {
        CheckKind::Idle
    }

    async fn control(
        &self,
        session: Arc<Session>,
        mut conn: FramedConn,
        _resumed: bool,
    ) -> Result<(), ServiceError> {
        let state = session.state::<State>();
        loop {
            let req: ControlRequest = match conn
                .recv_timeout(Duration::from_secs(60), "a control message")
                .await
            {
                Ok(r) => r,
                Err(e) if e.is_disconnect() => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let reply = match req {
                ControlRequest::Heartbeat { seq } => ControlReply::HeartbeatAck {
                    seq,
                    server_elapsed_ms: 0,
                },
                ControlRequest::Fire { tags, nonce } => {
                    let now = Instant::now();
                    let mut probes = lock(&state.probes);
                    let fired = tags
                        .iter()
                        .map(|&tag| match probes.get_mut(&tag) {
                            Some(p) => {
                                let idle = now.saturating_duration_since(p.last_activity);
                                p.last_activity = now;
                                p.slot.nonce.store(nonce, Ordering::Release);
                                p.slot.notify.notify_one();
                                Fired {
                                    tag,
                                    idle_ms: Some(idle.as_millis() as u64),
                                    sent: true,
                                    error: None,
                                }
                            }
                            None => Fired {
                                tag,
                                idle_ms: None,
                                sent: false,
                                error: Some("no such probe connection".into()),
                            },
                        })
                        .collect();
                    ControlReply::Fired { fired }
                }
                _ => ControlReply::Error {
                    message: "not implemented in the prototype".into(),
                },
            };
            conn.send(&reply).await?;
        }
    }

    async fn data(
        &self,
        session: Arc<Session>,
        tag: u32,
        conn: FramedConn,
        _permit: pathdoc_server::ConnectionPermit,
    ) -> Result<(), ServiceError> {
        let state = session.state::<State>();
        let observed = conn.peer();
        let slot = Arc::new(Slot::default());
        lock(&state.probes).insert(
            tag,
            Entry {
                _record: ServerProbeRecord {
                    tag,
                    udp: false,
                    observed,
                    opened_ms: session.created.elapsed().as_millis() as u64,
                    fired_ms: None,
                    pinged_ms: None,
                    seen_from: None,
                    ended_ms: None,
                    end: None,
                },
                last_activity: Instant::now(),
                slot: slot.clone(),
            },
        );
        let mut stream = conn.into_inner();
        let mut scratch = [0u8; 64];
        loop {
            tokio::select! {
                _ = slot.notify.notified() => {
                    let nonce = slot.nonce.load(Ordering::Acquire);
                    let msg = ProbeMessage::Probe { nonce, observed, idle_ms: 0 };
                    pathdoc_proto::write_frame(&mut stream, &msg).await?;
                }
                readable = stream.readable() => {
                    readable?;
                    match stream.try_read(&mut scratch) {
                        Ok(0) => return Ok(()),
                        // The real service would parse Ping frames from these bytes.
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
}
