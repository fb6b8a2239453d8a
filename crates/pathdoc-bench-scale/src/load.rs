//! The client side of the load: sessions (control connections) and their probe connections,
//! each opened from a chosen 127.x source address, and the tasks that drive them.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use pathdoc_idle::proto::{ControlReply, ControlRequest, ProbeMessage};
use pathdoc_proto::{Channel, CheckKind, FramedConn, SessionId};
use tokio::sync::mpsc;

/// Every network step of the generator has this deadline.
pub const STEP_DEADLINE: Duration = Duration::from_secs(20);
/// Heartbeat period on idle control connections (the server drops silent ones after 60 s).
const HEARTBEAT: Duration = Duration::from_secs(15);

/// Open a pathdoc connection from `source` and complete the handshake.
pub async fn open(
    source: IpAddr,
    server: SocketAddr,
    channel: Channel,
) -> anyhow::Result<(FramedConn, SessionId)> {
    let stream = pathdoc_bench_scale::net::connect_from(source, server).await?;
    let (conn, welcome) = pathdoc_proto::handshake(stream, None, channel, STEP_DEADLINE)
        .await
        .with_context(|| format!("handshake from {source}"))?;
    Ok((conn, welcome.session))
}

pub fn control_channel() -> Channel {
    Channel::Control {
        check: CheckKind::Idle,
        resume: None,
    }
}

/// What a control connection is told to do.
#[derive(Debug)]
pub enum Command {
    Fire { tags: Vec<u32>, nonce: u64 },
}

/// Counters shared by all control tasks.
#[derive(Debug, Default)]
pub struct ControlStats {
    /// Tags the server answered `sent: false` for.
    pub not_sent: AtomicU64,
    /// Control connections that failed (first error kept in `first_error`).
    pub failed: AtomicU64,
    pub first_error: Mutex<Option<String>>,
}

impl ControlStats {
    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(what);
    }
}

/// Drive one control connection: forward fire commands (one request, one reply, in order) and
/// send heartbeats while there is nothing else to say.
pub async fn control_task(
    mut conn: FramedConn,
    mut commands: mpsc::UnboundedReceiver<Command>,
    stats: Arc<ControlStats>,
) {
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.tick().await;
    let mut seq = 0u64;
    loop {
        let request = tokio::select! {
            cmd = commands.recv() => match cmd {
                Some(Command::Fire { tags, nonce }) => ControlRequest::Fire { tags, nonce },
                None => return,
            },
            _ = heartbeat.tick() => {
                seq += 1;
                ControlRequest::Heartbeat { seq }
            }
        };
        if let Err(e) = conn.send(&request).await {
            return stats.fail(format!("sending {request:?}: {e}"));
        }
        match conn
            .recv_timeout::<ControlReply>(STEP_DEADLINE, "a control reply")
            .await
        {
            Ok(ControlReply::Fired { fired }) => {
                let not_sent = fired.iter().filter(|f| !f.sent).count() as u64;
                stats.not_sent.fetch_add(not_sent, Ordering::Relaxed);
            }
            Ok(ControlReply::Error { message }) => return stats.fail(message),
            Ok(_) => {}
            Err(e) => return stats.fail(format!("reply: {e}")),
        }
    }
}

/// A probe that reached the client: which connection, which fire request, when.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub index: u32,
    pub nonce: u64,
    pub at: Instant,
}

/// Read a probe connection until it ends, reporting every server-initiated probe.
pub async fn probe_reader(
    conn: FramedConn,
    index: u32,
    arrivals: mpsc::UnboundedSender<Arrival>,
    closed: Arc<AtomicU64>,
) {
    let mut stream = conn.into_inner();
    loop {
        match pathdoc_proto::read_frame::<_, ProbeMessage>(&mut stream).await {
            Ok(ProbeMessage::Probe { nonce, .. }) => {
                let at = Instant::now();
                if arrivals.send(Arrival { index, nonce, at }).is_err() {
                    return;
                }
            }
            Ok(ProbeMessage::Pong { .. }) => {}
            Err(_) => {
                closed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}
