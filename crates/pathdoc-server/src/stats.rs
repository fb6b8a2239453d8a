//! The server's own counters: refusals by reason (each also logged, at a bounded rate so a
//! flood cannot turn the log into the attack), and one summary line at a low cadence with what
//! the server holds — connections, sessions, budgets, descriptors, threads, memory — so an
//! operator sees an attack in the log.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::budget::{Budgets, Refuse};
use crate::limits::{lock, Limits};
use crate::Shared;

/// Refusal log lines per second; more are counted, not logged (see `refusals_not_logged`).
const REFUSAL_LINES_PER_SECOND: u32 = 20;
/// Session start/end lines per second; more are counted, not logged (`session_lines_not_logged`).
const SESSION_LINES_PER_SECOND: u32 = 50;
/// Bytes of log lines of one kind per second: lines carry what clients sent (a version, a
/// reason), so a line budget alone would let long lines through at full rate.
const LOG_BYTES_PER_SECOND: u64 = 16 * 1024;
/// What a log line costs besides the client-chosen text in it (timestamp, level, addresses,
/// session id, the fixed words).
const LINE_OVERHEAD_BYTES: u64 = 160;
/// Characters of a client-chosen field (its version) that reach the log.
pub const LOG_FIELD_CHARS: usize = 64;

/// Lines of one kind logged in the current second (and their bytes), and those left out since
/// the start.
#[derive(Debug)]
struct LineBudget {
    per_second: u32,
    window: Mutex<(Instant, u32, u64)>,
    suppressed: AtomicU64,
}

impl LineBudget {
    fn new(per_second: u32) -> Self {
        LineBudget {
            per_second,
            window: Mutex::new((Instant::now(), 0, 0)),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether a line carrying `text_bytes` of variable text may be logged now.
    fn allow(&self, text_bytes: usize) -> bool {
        let mut window = lock(&self.window);
        let now = Instant::now();
        if now.duration_since(window.0) >= Duration::from_secs(1) {
            *window = (now, 0, 0);
        }
        let bytes = LINE_OVERHEAD_BYTES + text_bytes as u64;
        if window.1 >= self.per_second || window.2 + bytes > LOG_BYTES_PER_SECOND {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        window.1 += 1;
        window.2 += bytes;
        true
    }
}

/// A client-chosen string as it may appear in the log: at most [`LOG_FIELD_CHARS`] characters,
/// control characters and bidi overrides escaped (a newline would forge log lines, an escape
/// would reach the operator's terminal).
pub fn log_field(text: &str) -> String {
    pathdoc_core::text::log_field(text, LOG_FIELD_CHARS)
}

/// Counters and budgets every part of the server (and every session) reports into.
#[derive(Debug)]
pub struct Accounting {
    pub budgets: Budgets,
    refusals: Mutex<BTreeMap<&'static str, u64>>,
    refusal_lines: LineBudget,
    session_lines: LineBudget,
    /// Refused connections still open (their refusal being written or their Hello drained).
    pub(crate) refusing: AtomicU32,
    pub(crate) accepted: AtomicU64,
    pub(crate) udp_in: AtomicU64,
    pub(crate) udp_ignored: AtomicU64,
}

impl Accounting {
    pub fn new(limits: &Limits) -> Self {
        Accounting {
            budgets: Budgets::new(limits),
            refusals: Mutex::default(),
            refusal_lines: LineBudget::new(REFUSAL_LINES_PER_SECOND),
            session_lines: LineBudget::new(SESSION_LINES_PER_SECOND),
            refusing: AtomicU32::new(0),
            accepted: AtomicU64::new(0),
            udp_in: AtomicU64::new(0),
            udp_ignored: AtomicU64::new(0),
        }
    }

    /// Count a refusal and log it (client, reason, limit) unless refusals are flooding in.
    pub fn refused(&self, client: SocketAddr, refuse: &Refuse) {
        *lock(&self.refusals).entry(refuse.reason).or_insert(0) += 1;
        if !self.refusal_lines.allow(refuse.message.len()) {
            return;
        }
        if refuse.limit > 0 {
            tracing::info!(%client, reason = %refuse.reason, limit = refuse.limit, "refused");
        } else {
            let detail = pathdoc_core::text::terminal_safe_line(&refuse.message);
            tracing::info!(%client, reason = %refuse.reason, %detail, "refused");
        }
    }

    /// Whether a session start/end line may be logged now (a flood of sessions must not turn
    /// into a flood of log lines; the counters line keeps the totals).
    pub(crate) fn may_log_session(&self) -> bool {
        self.session_lines.allow(0)
    }

    /// [`Self::may_log_session`] for a line that also carries `text_bytes` of client text.
    pub(crate) fn may_log_session_line(&self, text_bytes: usize) -> bool {
        self.session_lines.allow(text_bytes)
    }

    /// Refusals so far, by reason.
    pub fn refusals(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.refusals).clone()
    }
}

/// Log the counters line every `interval` until shutdown.
pub(crate) async fn report_loop(shared: Arc<Shared>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = tick.tick() => report(&shared),
        }
    }
}

fn report(shared: &Shared) {
    let acc = &shared.accounting;
    let sessions = shared.registry.snapshot();
    let refusals = acc.refusals();
    let by_reason = refusals
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect::<Vec<_>>()
        .join(",");
    let own = process_readings();
    tracing::info!(
        connections = shared.conns.total(),
        clients = shared.conns.clients(),
        connections_accepted = acc.accepted.load(Ordering::Relaxed),
        sessions_live = sessions.live,
        sessions_lingering = sessions.lingering,
        sessions_created = sessions.counts.created,
        sessions_ended_by_client = sessions.counts.ended_client,
        sessions_ended_linger = sessions.counts.ended_linger,
        sessions_ended_deadline = sessions.counts.ended_deadline,
        sessions_evicted = sessions.counts.ended_evicted,
        refused = refusals.values().sum::<u64>(),
        refused_by_reason = %by_reason,
        refusals_not_logged = acc.refusal_lines.suppressed.load(Ordering::Relaxed),
        session_lines_not_logged = acc.session_lines.suppressed.load(Ordering::Relaxed),
        refusing_now = acc.refusing.load(Ordering::Relaxed),
        streams = acc.budgets.streams.in_use(),
        streams_max = acc.budgets.streams.total(),
        bulk = acc.budgets.bulk.in_use(),
        bulk_max = acc.budgets.bulk.total(),
        idle_probes = acc.budgets.probes.in_use(),
        idle_probes_max = acc.budgets.probes.total(),
        udp_datagrams_in = acc.udp_in.load(Ordering::Relaxed),
        udp_datagrams_ignored = acc.udp_ignored.load(Ordering::Relaxed),
        fds = own.fds,
        threads = own.threads,
        rss_bytes = own.rss,
        "counters"
    );
}

/// The server process's own descriptors, threads and resident memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessReadings {
    pub fds: u64,
    pub threads: u64,
    pub rss: u64,
}

pub fn process_readings() -> ProcessReadings {
    let own = pathdoc_sys::process::footprint(std::process::id());
    ProcessReadings {
        fds: own.fds,
        threads: own.threads,
        rss: own.rss_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_even_when_not_logged() {
        let acc = Accounting::new(&Limits::default());
        let peer: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let refuse = Refuse {
            reason: "sessions-per-client",
            limit: 2,
            message: "…".into(),
        };
        for _ in 0..100 {
            acc.refused(peer, &refuse);
        }
        assert_eq!(acc.refusals()["sessions-per-client"], 100);
        assert!(
            acc.refusal_lines.suppressed.load(Ordering::Relaxed)
                >= 100 - u64::from(REFUSAL_LINES_PER_SECOND)
        );
        assert!(process_readings().fds > 0);
    }

    #[test]
    fn long_lines_use_up_the_byte_budget_before_the_line_budget() {
        let lines = LineBudget::new(SESSION_LINES_PER_SECOND);
        // A 300-byte line (the longest an escaped 64-character version makes) is not stopped
        // by bytes before the line count…
        let short = (0..SESSION_LINES_PER_SECOND * 2)
            .filter(|_| lines.allow(100))
            .count();
        assert_eq!(short, SESSION_LINES_PER_SECOND as usize);
        // …but 4 KiB lines are, after 16 KiB.
        let long = LineBudget::new(SESSION_LINES_PER_SECOND);
        let allowed = (0..SESSION_LINES_PER_SECOND)
            .filter(|_| long.allow(4096))
            .count();
        assert!(allowed <= 4, "{allowed} lines of 4 KiB in one second");
        assert_eq!(
            log_field("pathdoc 0.1.0\n\u{1b}[2J"),
            "pathdoc 0.1.0\\n\\x1b[2J"
        );
    }
}
