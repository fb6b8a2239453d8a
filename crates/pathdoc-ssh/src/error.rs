//! What can go wrong over SSH, each with what to do about it. Every variant is a "could not
//! run" (exit 2) for the CLI.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("cannot run `ssh`: {0} (install OpenSSH's client: apt-get install openssh-client)")]
    NoSsh(std::io::Error),
    #[error("bad SSH destination {spec:?}: {why}")]
    BadDestination { spec: String, why: String },
    #[error("the host key of {host} does not match the one in known_hosts: ssh refused to connect (a man-in-the-middle, or the host was reinstalled). If the change is expected, remove the old key with `ssh-keygen -R {known_hosts}` and connect once with `{ssh}` to check and accept the new one. ssh said: {detail}")]
    HostKeyMismatch {
        host: String,
        /// The host's name in known_hosts: `[host]:port` for a port other than 22.
        known_hosts: String,
        /// The `ssh` command that reaches the same host, user and port.
        ssh: String,
        detail: String,
    },
    #[error("the host key of {host} could not be verified (not in known_hosts, and ssh may not ask here): connect once with `{ssh}` to check and accept it. ssh said: {detail}")]
    HostKeyUnknown {
        host: String,
        /// The `ssh` command that reaches the same host, user and port.
        ssh: String,
        detail: String,
    },
    #[error("{dest} refused the SSH login: {}. Check the user name and that `{ssh}` works without a password prompt (a key in ssh-agent or -i KEY)", detail.trim_end_matches('.'))]
    LoginRefused {
        dest: String,
        /// The `ssh` command that reaches the same host, user and port.
        ssh: String,
        detail: String,
    },
    #[error("cannot connect to {dest} over SSH: {detail}")]
    Connect { dest: String, detail: String },
    #[error("{what} on {dest} did not finish within {after:?}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Timeout {
        what: String,
        dest: String,
        after: Duration,
        detail: String,
    },
    #[error("{dest} is {remote} and has no pathdoc {version}; this pathdoc is a {local} binary and is only copied to the same architecture. Install pathdoc {version} on {dest} (so `pathdoc` is on its PATH) and retry")]
    ArchMismatch {
        dest: String,
        remote: String,
        local: String,
        version: String,
    },
    #[error("refusing to overwrite {path} on {dest}: it exists but is not the pathdoc binary this run would write (SHA-256 {found}, expected {expected}). Remove it (or run with --ssh-clean) and retry")]
    ForeignFile {
        dest: String,
        path: String,
        found: String,
        expected: String,
    },
    #[error("refusing to use the far end's cache directory on {dest}: {path} {found}, so another user could replace the pathdoc binary run from it (as the user you log in as). {fix}")]
    UnsafeCache {
        dest: String,
        path: String,
        /// What was found: owner, mode or link target, in words.
        found: String,
        /// What to do about it.
        fix: String,
    },
    #[error("copying pathdoc to {dest} failed: {detail}")]
    Copy { dest: String, detail: String },
    #[error("the pathdoc server on {dest} did not start: {detail}")]
    ServerStart { dest: String, detail: String },
    #[error("the temporary pathdoc server runs on {dest}, but this host cannot reach it at {addr}: {detail}. A firewall on the far end (or on the way) blocks TCP port {port}: allow TCP and UDP port {port} from this host there (e.g. `nft insert rule inet filter input tcp dport {port} accept` and the same for udp), or choose a port that is open with --ssh-server-port{proxied}")]
    PortBlocked {
        dest: String,
        addr: std::net::SocketAddr,
        port: u16,
        detail: String,
        proxied: String,
    },
    #[error("{what} on {dest} failed: {detail}")]
    Remote {
        dest: String,
        what: String,
        detail: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}
