//! One way for every check to say that the server refused work for want of room (a pool full,
//! shared out between other clients, or this client's own cap): a `server-busy` WARN with the
//! server's words, its reason and limit as evidence, a retry hint for the user and a remedy for
//! the server's operator. Never a silent PASS, never a `check-failed` that reads like a fault.
//!
//! Each check creates the finding under its own check name and the id [`SERVER_BUSY`] (so its
//! `FINDING_IDS` registry lists it) and lets [`describe`] fill in the rest.

use serde::{Deserialize, Serialize};

use crate::report::{Evidence, Finding, Host, Quantity, Remedy};
use crate::text::terminal_safe_line;

/// The finding id of a refusal for want of room.
pub const SERVER_BUSY: &str = "server-busy";

/// Longest server message kept (the server's words are a few hundred characters; a hostile
/// server's frame may be 64 KiB).
const MAX_MESSAGE: usize = 600;

/// What the server said when it refused for want of room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerBusy {
    /// The server's words (which limit, its figures, the way out).
    pub message: String,
    /// The bound it refused by, as its log names it (`sessions-fair-share`, `streams-total`…);
    /// absent from servers that do not send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// That bound's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl ServerBusy {
    pub fn new(message: impl Into<String>, reason: Option<String>, limit: Option<u32>) -> Self {
        let message: String = message.into();
        let message = match message.char_indices().nth(MAX_MESSAGE) {
            Some((cut, _)) => format!("{}…", &message[..cut]),
            None => message,
        };
        ServerBusy {
            message,
            reason,
            limit,
        }
    }
}

/// The server flag that raises the bound `reason` names, when one does.
pub fn operator_flag(reason: &str) -> Option<&'static str> {
    let (pool, scope) = reason.rsplit_once('-')?;
    let per_client = match (pool, scope) {
        ("bulk-per", "session") => return None,
        (_, "client") => true,
        (_, "total" | "share") => false,
        _ => return None,
    };
    let pool = pool
        .strip_suffix("-per")
        .or_else(|| pool.strip_suffix("-fair"))
        .unwrap_or(pool);
    Some(match (pool, per_client) {
        ("sessions", false) => "--max-sessions",
        ("sessions", true) => "--max-sessions-per-ip",
        ("streams", false) => "--max-streams",
        ("streams", true) => "--max-streams-per-ip",
        ("bulk", false) => "--max-bulk",
        ("bulk", true) => "--max-bulk-per-ip",
        ("connections", false) => "--max-connections",
        ("connections", true) => "--max-connections-per-ip",
        ("handshakes", false) => "--max-handshakes",
        ("handshakes", true) => "--max-handshakes-per-ip",
        ("idle-probes", false) => "--max-idle-probes",
        ("idle-probes", true) => "--max-idle-probes-per-ip",
        _ => return None,
    })
}

/// Fill in a `server-busy` finding: `what` did not run ("the throughput test", "the timed
/// download") because the server refused it for want of room.
pub fn describe(mut f: Finding, what: &str, busy: &ServerBusy) -> Finding {
    let said = terminal_safe_line(&busy.message);
    f.title = format!("the server was busy: {what} not run");
    f.summary = format!(
        "The server refused {what} for want of room, so this report lacks it; this says nothing \
         about the path. The server said: {said}."
    );
    if let Some(reason) = &busy.reason {
        let reason = terminal_safe_line(reason);
        let mut ev = Evidence::new("the server's refusal", Quantity::Text(reason.to_string()));
        if let Some(flag) = operator_flag(&reason) {
            ev = ev.with_detail(format!("raised by `pathdoc server {flag}`"));
        }
        f.evidence.push(ev);
    }
    if let Some(limit) = busy.limit.filter(|&l| l > 0) {
        f.evidence.push(
            Evidence::new("the server's limit", Quantity::Count(u64::from(limit)))
                .with_detail("the bound the refusal names"),
        );
    }
    let own = busy
        .reason
        .as_deref()
        .is_some_and(|r| r.ends_with("per-client") || r.ends_with("per-session"));
    let holders = if own {
        "other checks from this client address hold now"
    } else {
        "the server's other clients hold now"
    };
    f.remedies.push(
        Remedy::new(format!(
            "Run the check again in a minute or two: {what} needs room that {holders}"
        ))
        .on(Host::Client),
    );
    let fair = busy
        .reason
        .as_deref()
        .is_some_and(|r| r.ends_with("fair-share"));
    let raise = match busy.reason.as_deref().and_then(operator_flag) {
        Some(flag) => format!("raise `{flag}` if the host has room for it (docs/server.md, resource model: what each unit costs)"),
        None => "raise the limit the refusal names if the host has room for it (docs/server.md, resource model)".to_string(),
    };
    let group = if fair {
        "; if one subscriber holds the pool from many addresses (the server log's `refused` and \
         `counters` lines), count them as one client with `--ipv6-prefix 56` or `--ipv4-prefix 24`"
    } else {
        ""
    };
    f.remedies.push(
        Remedy::new(format!(
            "The server was out of room ({}): {raise}{group}",
            busy.reason.as_deref().map_or_else(
                || "no reason given".to_string(),
                |r| terminal_safe_line(r).to_string()
            )
        ))
        .on(Host::Server),
    );
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    #[test]
    fn flags_follow_the_reasons_the_server_logs() {
        for (reason, flag) in [
            ("sessions-per-client", Some("--max-sessions-per-ip")),
            ("sessions-total", Some("--max-sessions")),
            ("sessions-fair-share", Some("--max-sessions")),
            ("streams-fair-share", Some("--max-streams")),
            ("streams-per-client", Some("--max-streams-per-ip")),
            ("bulk-total", Some("--max-bulk")),
            ("bulk-per-session", None),
            ("idle-probes-fair-share", Some("--max-idle-probes")),
            ("idle-probes-per-client", Some("--max-idle-probes-per-ip")),
            ("handshakes-total", Some("--max-handshakes")),
            ("connections-per-client", Some("--max-connections-per-ip")),
            ("once-busy", None),
            ("", None),
        ] {
            assert_eq!(operator_flag(reason), flag, "{reason}");
        }
    }

    #[test]
    fn a_busy_finding_has_the_figures_a_retry_hint_and_the_operators_fix() {
        let busy = ServerBusy::new(
            "the server is busy: 64 of its 64 throughput streams are in use\x1b[2J",
            Some("streams-fair-share".into()),
            Some(64),
        );
        let f = describe(
            Finding::new("throughput", SERVER_BUSY, Status::Warn, ""),
            "the upload test",
            &busy,
        );
        assert_eq!(f.title, "the server was busy: the upload test not run");
        assert!(f.summary.contains("64 of its 64"), "{}", f.summary);
        assert!(!f.summary.contains('\x1b'), "{}", f.summary);
        assert_eq!(f.evidence.len(), 2);
        assert_eq!(f.evidence[1].value, Quantity::Count(64));
        assert_eq!(f.remedies[0].host, Some(Host::Client));
        assert_eq!(f.remedies[1].host, Some(Host::Server));
        assert!(f.remedies[1].description.contains("--max-streams"));
        assert!(f.remedies[1].description.contains("--ipv6-prefix 56"));
        // An older server: only words, still a WARN with both remedies.
        let old = describe(
            Finding::new("mtu", SERVER_BUSY, Status::Warn, ""),
            "the mtu check",
            &ServerBusy::new("x".repeat(70_000), None, None),
        );
        assert!(old.evidence.is_empty());
        assert_eq!(old.remedies.len(), 2);
        assert!(old.summary.len() < 2000);
    }
}
