//! Every way a command can fail to run, as one typed error with a kind scripts can branch on, a
//! message in words and a hint with the way out. Rendered as text on stderr or as the
//! `pathdoc.error/1` document on stdout (docs/output.md); the exit code is always 2.

use std::fmt;

use pathdoc_lab::LabError;
use pathdoc_proto::preflight::{AttemptError, PreflightError};
use pathdoc_proto::RefusalCode;
use pathdoc_ssh::SshError;
use serde::Serialize;

/// Schema tag of the error document.
pub const ERROR_SCHEMA: &str = "pathdoc.error/1";

/// What kind of failure; the JSON `error.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Bad arguments or option values.
    Usage,
    /// The server's name does not resolve (or not to the wanted address family).
    Resolve,
    /// Nothing listens there: the connection was refused (TCP RST).
    ConnectionRefused,
    /// No answer to the connect (timeout) or no route to the server.
    Unreachable,
    /// Something answered, but not a pathdoc server (silent, closed, another protocol).
    NotPathdoc,
    /// A pathdoc server of another protocol version.
    VersionMismatch,
    /// The server requires a token, or ours is wrong.
    Auth,
    /// The server turned us away for another reason (limits, check not offered).
    ServerRefused,
    /// Needs root.
    Privilege,
    /// A required tool or kernel feature is missing.
    MissingTool,
    /// A lab operation failed (no such lab, name taken, a command failed).
    Lab,
    /// SSH refused the far end's host key (changed, or not yet known).
    SshHostKey,
    /// The far end refused the SSH login.
    SshLogin,
    /// An SSH step failed: connecting, copying pathdoc, starting or talking to the far-end server.
    Ssh,
    /// Anything else (I/O, internal).
    Other,
}

/// A command that could not run.
#[derive(Debug, Clone, Serialize)]
pub struct CliError {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// For network failures: each address tried and what happened there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub address: String,
    pub error: String,
}

impl CliError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
            hint: None,
            attempts: Vec::new(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        CliError::new(ErrorKind::Usage, message)
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Find the typed error in an `anyhow` chain, or classify the errors of the libraries.
    pub fn from_anyhow(err: &anyhow::Error) -> CliError {
        for cause in err.chain() {
            if let Some(e) = cause.downcast_ref::<CliError>() {
                return e.clone();
            }
            if let Some(e) = cause.downcast_ref::<LabError>() {
                return from_lab(e, &format!("{err:#}"));
            }
            if let Some(e) = cause.downcast_ref::<SshError>() {
                return CliError::new(ssh_kind(e), without_os_error(&format!("{err:#}")));
            }
        }
        CliError::new(ErrorKind::Other, without_os_error(&format!("{err:#}")))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

fn from_lab(e: &LabError, full: &str) -> CliError {
    let kind = match e {
        LabError::NotRoot => ErrorKind::Privilege,
        LabError::MissingTool { .. } | LabError::MissingKernelFeature { .. } => {
            ErrorKind::MissingTool
        }
        LabError::UnknownScenario { .. }
        | LabError::Topology(_)
        | LabError::InvalidName { .. }
        | LabError::UnknownHost { .. } => ErrorKind::Usage,
        _ => ErrorKind::Lab,
    };
    CliError::new(kind, full.to_string())
}

fn ssh_kind(e: &SshError) -> ErrorKind {
    match e {
        SshError::NoSsh(_) | SshError::ArchMismatch { .. } => ErrorKind::MissingTool,
        SshError::BadDestination { .. } => ErrorKind::Usage,
        SshError::HostKeyMismatch { .. } | SshError::HostKeyUnknown { .. } => ErrorKind::SshHostKey,
        SshError::LoginRefused { .. } => ErrorKind::SshLogin,
        // The far-end server started, but its port is not reachable from here.
        SshError::PortBlocked { .. } => ErrorKind::Unreachable,
        SshError::Connect { .. }
        | SshError::Timeout { .. }
        | SshError::ForeignFile { .. }
        | SshError::UnsafeCache { .. }
        | SshError::Copy { .. }
        | SshError::ServerStart { .. }
        | SshError::Remote { .. }
        | SshError::Io { .. } => ErrorKind::Ssh,
    }
}

/// "Connection refused (os error 111)" → "connection refused": the errno is noise to a user.
pub fn without_os_error(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(start) = out.find(" (os error ") {
        match out[start..].find(')') {
            Some(end) => out.replace_range(start..start + end + 1, ""),
            None => break,
        }
    }
    out
}

/// The preflight found no pathdoc server at `shown` (`host:port` as the user typed it): say
/// what is there instead and what to do about it.
pub fn from_preflight(shown: &str, host: &str, port: u16, e: &PreflightError) -> CliError {
    let attempts: Vec<Attempt> = e
        .attempts
        .iter()
        .map(|(a, err)| Attempt {
            address: a.to_string(),
            error: without_os_error(&err.to_string()),
        })
        .collect();
    let Some((addr, decisive)) = e.decisive() else {
        return CliError::new(ErrorKind::Resolve, format!("{shown} has no address to try"));
    };
    let at = if shown == addr.to_string() {
        shown.to_string()
    } else {
        format!("{shown} ({addr})")
    };
    let what = without_os_error(&decisive.to_string());
    let (kind, message, hint) = match decisive {
        AttemptError::ConnectionRefused => (
            ErrorKind::ConnectionRefused,
            format!("cannot connect to {at}: connection refused"),
            format!("is `pathdoc server` running on {host}, and is TCP port {port} open there?"),
        ),
        AttemptError::ConnectTimeout(_) => (
            ErrorKind::Unreachable,
            format!("cannot connect to {at}: {what}"),
            format!("a firewall may drop TCP port {port} on the way to {host} or in front of it; check that `pathdoc server` runs there and that TCP and UDP port {port} are allowed"),
        ),
        AttemptError::Unreachable(_) => (
            ErrorKind::Unreachable,
            format!("cannot connect to {at}: {what}"),
            format!("check the address and this host's route to it (`ip route get {}`)", addr.ip()),
        ),
        AttemptError::Silent(_) | AttemptError::ClosedSilently => (
            ErrorKind::NotPathdoc,
            format!("{at} {what}: not a pathdoc server?"),
            format!("check the port: `pathdoc server` listens on TCP and UDP {} unless started with --listen", pathdoc_proto::DEFAULT_PORT),
        ),
        AttemptError::Foreign(bytes) => (
            ErrorKind::NotPathdoc,
            format!("{at} is not a pathdoc server: it {what}{}", guess_protocol(bytes)),
            format!("point pathdoc at the port `pathdoc server` listens on (default {})", pathdoc_proto::DEFAULT_PORT),
        ),
        AttemptError::Protocol(_) => (
            ErrorKind::NotPathdoc,
            format!("{at} answered, but not as a pathdoc server does: {what}"),
            "check that a pathdoc server listens there".to_string(),
        ),
        AttemptError::VersionMismatch { .. } => (
            ErrorKind::VersionMismatch,
            format!("{at} {what}"),
            "run the same pathdoc release on both ends (upgrade the older one)".to_string(),
        ),
        AttemptError::Refused(r) => refusal(&at, r.code, &r.message),
    };
    let mut err = CliError::new(kind, message).hint(hint);
    if attempts.len() > 1 {
        err.message.push_str(&format!(
            " (tried {} addresses: {})",
            attempts.len(),
            attempts
                .iter()
                .map(|a| format!("{} {}", a.address, a.error))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    err.attempts = attempts;
    err
}

fn refusal(at: &str, code: RefusalCode, message: &str) -> (ErrorKind, String, String) {
    match code {
        RefusalCode::AuthRequired | RefusalCode::AuthFailed => (
            ErrorKind::Auth,
            format!("the pathdoc server at {at} refused us: {message}"),
            "pass the server's token with --auth-token TOKEN or the PATHDOC_AUTH_TOKEN environment variable".into(),
        ),
        RefusalCode::VersionMismatch => (
            ErrorKind::VersionMismatch,
            format!("the pathdoc server at {at} refused us: {message}"),
            "run the same pathdoc release on both ends (upgrade the older one)".into(),
        ),
        RefusalCode::LimitExceeded => (
            ErrorKind::ServerRefused,
            format!("the pathdoc server at {at} refused us: {message}"),
            "wait until your earlier runs have ended, or ask the server's operator to raise its limits (docs/server.md)".into(),
        ),
        _ => (
            ErrorKind::ServerRefused,
            format!("the pathdoc server at {at} refused us: {message}"),
            "see the server's log for the reason".into(),
        ),
    }
}

/// A word on what a foreign greeting looks like, when it is recognisable.
fn guess_protocol(bytes: &[u8]) -> &'static str {
    let starts = |p: &[u8]| bytes.starts_with(p);
    if starts(b"SSH-") {
        " (an SSH server)"
    } else if starts(b"HTTP/") {
        " (an HTTP server)"
    } else if bytes.first() == Some(&0x15) || bytes.first() == Some(&0x16) {
        " (a TLS server)"
    } else if starts(b"220") {
        " (an SMTP or FTP server)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_numbers_are_dropped() {
        assert_eq!(
            without_os_error("connect: Connection refused (os error 111); again (os error 1)"),
            "connect: Connection refused; again"
        );
    }

    #[test]
    fn a_refused_connect_names_the_server_and_port() {
        let addr = "192.0.2.7:7224".parse().unwrap();
        let e = PreflightError {
            attempts: vec![(addr, AttemptError::ConnectionRefused)],
        };
        let c = from_preflight("server.example.net:7224", "server.example.net", 7224, &e);
        assert_eq!(c.kind, ErrorKind::ConnectionRefused);
        assert!(
            c.message
                .contains("server.example.net:7224 (192.0.2.7:7224)"),
            "{}",
            c.message
        );
        let hint = c.hint.unwrap();
        assert!(
            hint.contains("pathdoc server") && hint.contains("7224"),
            "{hint}"
        );
    }

    #[test]
    fn refusal_codes_become_kinds_without_rust_names() {
        let addr = "192.0.2.7:7224".parse().unwrap();
        let e = PreflightError {
            attempts: vec![(
                addr,
                AttemptError::Refused(pathdoc_proto::Refusal {
                    code: RefusalCode::LimitExceeded,
                    message: "too many sessions from 192.0.2.1 (limit 8)".into(),
                    load: None,
                }),
            )],
        };
        let c = from_preflight("192.0.2.7:7224", "192.0.2.7", 7224, &e);
        assert_eq!(c.kind, ErrorKind::ServerRefused);
        assert!(!c.message.contains("LimitExceeded"), "{}", c.message);
    }

    /// SSH failures used to come out as `"kind": "other"`, which a script cannot branch on.
    #[test]
    fn ssh_errors_have_kinds_scripts_can_branch_on() {
        let kind = |e: SshError| {
            let err = anyhow::Error::new(e).context("pathdoc ssh nas");
            CliError::from_anyhow(&err).kind
        };
        let host_key = SshError::HostKeyMismatch {
            host: "nas".into(),
            known_hosts: "nas".into(),
            ssh: "ssh nas".into(),
            detail: "REMOTE HOST IDENTIFICATION HAS CHANGED".into(),
        };
        assert_eq!(kind(host_key), ErrorKind::SshHostKey);
        let login = SshError::LoginRefused {
            dest: "u@nas".into(),
            ssh: "ssh u@nas".into(),
            detail: "Permission denied (publickey).".into(),
        };
        assert_eq!(kind(login), ErrorKind::SshLogin);
        let blocked = SshError::PortBlocked {
            dest: "nas".into(),
            addr: "192.0.2.7:7224".parse().unwrap(),
            port: 7224,
            detail: "timed out".into(),
            proxied: String::new(),
        };
        assert_eq!(kind(blocked), ErrorKind::Unreachable);
        let connect = SshError::Connect {
            dest: "nas".into(),
            detail: "Connection timed out".into(),
        };
        assert_eq!(kind(connect), ErrorKind::Ssh);
        let json = serde_json::to_value(ErrorKind::SshHostKey).unwrap();
        assert_eq!(json, "ssh-host-key");
    }
}
