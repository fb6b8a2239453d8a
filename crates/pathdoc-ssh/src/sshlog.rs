//! What OpenSSH's client says about a connection at `-vv` (written with `-E FILE`): both
//! versions, each side's cipher offer, the negotiated cipher and MAC per direction, and the
//! channel windows the peers announce (`channels.c`: `open confirm rwindow … rmax …`,
//! `rcvd adjust …`, `window … sent adjust …`).

use serde::{Deserialize, Serialize};

/// A cipher (and MAC, for non-AEAD ciphers) for one direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Negotiated {
    pub cipher: String,
    /// `<implicit>` for AEAD ciphers (aes-gcm, chacha20-poly1305).
    pub mac: String,
}

/// The facts of one `ssh -vv` log.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SshLog {
    /// e.g. `OpenSSH_9.2p1 Debian-2+deb12u10`.
    pub local_version: Option<String>,
    pub remote_version: Option<String>,
    /// The client's cipher proposal (client→server list), in preference order.
    pub client_ciphers: Vec<String>,
    /// The server's cipher proposal.
    pub server_ciphers: Vec<String>,
    pub server_macs: Vec<String>,
    pub client_to_server: Option<Negotiated>,
    pub server_to_client: Option<Negotiated>,
    /// The window the server opened the session channel with (`rwindow`) and its packet size.
    pub open_rwindow: Option<u64>,
    pub open_rmax: Option<u64>,
    /// `rcvd adjust N` lines: how much the server added to our send window, in order (first few).
    pub adjusts_received: Vec<u64>,
    pub max_adjust_received: Option<u64>,
    /// The largest `window W sent adjust A` total W + A: our own (the client's) receive window.
    pub local_window: Option<u64>,
    /// HPN-SSH's `Window growth to N` lines: the largest window it grew to.
    pub hpn_window_growth: Option<u64>,
}

impl SshLog {
    pub fn parse(text: &str) -> SshLog {
        let mut log = SshLog::default();
        let mut proposal: Option<bool> = None; // Some(true) = local client, Some(false) = peer
        for raw in text.lines() {
            let line = raw.trim_end_matches('\r');
            let msg = line
                .split_once(": ")
                .filter(|(lvl, _)| lvl.starts_with("debug"))
                .map(|(_, m)| m)
                .unwrap_or(line);
            if let Some(v) = msg.strip_prefix("Local version string SSH-2.0-") {
                log.local_version = Some(v.trim().to_string());
            } else if let Some((_, v)) = msg.split_once("remote software version ") {
                log.remote_version = Some(v.trim().to_string());
            } else if msg.starts_with("local client KEXINIT proposal") {
                proposal = Some(true);
            } else if msg.starts_with("peer server KEXINIT proposal") {
                proposal = Some(false);
            } else if let Some(list) = msg.strip_prefix("ciphers ctos: ") {
                let v: Vec<String> = list.trim().split(',').map(str::to_string).collect();
                match proposal {
                    Some(true) => log.client_ciphers = v,
                    Some(false) => log.server_ciphers = v,
                    None => {}
                }
            } else if let Some(list) = msg.strip_prefix("MACs ctos: ") {
                if proposal == Some(false) {
                    log.server_macs = list.trim().split(',').map(str::to_string).collect();
                }
            } else if let Some(rest) = msg.strip_prefix("kex: client->server cipher: ") {
                log.client_to_server = parse_negotiated(rest);
            } else if let Some(rest) = msg.strip_prefix("kex: server->client cipher: ") {
                log.server_to_client = parse_negotiated(rest);
            } else if let Some(rest) = channel0(msg) {
                log.channel_event(rest);
            } else if let Some((_, rest)) = msg.split_once("Window growth to ") {
                if let Some(n) = first_number(rest) {
                    log.hpn_window_growth = Some(log.hpn_window_growth.unwrap_or(0).max(n));
                }
            }
        }
        log
    }

    fn channel_event(&mut self, rest: &str) {
        if let Some(r) = rest.strip_prefix("open confirm rwindow ") {
            let mut it = r.split_whitespace();
            self.open_rwindow = it.next().and_then(|n| n.parse().ok());
            if it.next() == Some("rmax") {
                self.open_rmax = it.next().and_then(|n| n.parse().ok());
            }
        } else if let Some(r) = rest.strip_prefix("rcvd adjust ") {
            if let Some(n) = first_number(r) {
                if self.adjusts_received.len() < 8 {
                    self.adjusts_received.push(n);
                }
                self.max_adjust_received = Some(self.max_adjust_received.unwrap_or(0).max(n));
            }
        } else if let Some(r) = rest.strip_prefix("window ") {
            // "window 1966080 sent adjust 131072"
            let mut it = r.split_whitespace();
            let w = it.next().and_then(|n| n.parse::<u64>().ok());
            let a = (it.next() == Some("sent") && it.next() == Some("adjust"))
                .then(|| it.next().and_then(|n| n.parse::<u64>().ok()))
                .flatten();
            if let (Some(w), Some(a)) = (w, a) {
                self.local_window = Some(self.local_window.unwrap_or(0).max(w + a));
            }
        }
    }

    /// The window the server lets us fill before it must send an adjust: its initial window
    /// plus its largest adjust (OpenSSH opens with 0 and adjusts to 2 MiB at once).
    pub fn peer_window(&self) -> Option<u64> {
        let adj = self.max_adjust_received?;
        Some(self.open_rwindow.unwrap_or(0) + adj)
    }

    /// HPN-SSH announces itself in the version string (`…-hpn14v12`, `hpnssh`).
    pub fn remote_is_hpn(&self) -> bool {
        self.remote_version
            .as_deref()
            .is_some_and(|v| v.to_ascii_lowercase().contains("hpn"))
    }

    pub fn local_is_hpn(&self) -> bool {
        self.local_version
            .as_deref()
            .is_some_and(|v| v.to_ascii_lowercase().contains("hpn"))
    }

    /// `(major, minor)` of an `OpenSSH_9.2p1 …` version string.
    pub fn openssh_version(v: &str) -> Option<(u32, u32)> {
        let rest = v.strip_prefix("OpenSSH_")?;
        let mut parts = rest.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    }
}

fn channel0(msg: &str) -> Option<&str> {
    msg.strip_prefix("channel 0: ")
}

fn first_number(s: &str) -> Option<u64> {
    s.split(|c: char| !c.is_ascii_digit())
        .find(|p| !p.is_empty())
        .and_then(|p| p.parse().ok())
}

fn parse_negotiated(rest: &str) -> Option<Negotiated> {
    // "aes128-gcm@openssh.com MAC: <implicit> compression: none"
    let (cipher, after) = rest.split_once(" MAC: ")?;
    let mac = after.split_whitespace().next().unwrap_or("").to_string();
    Some(Negotiated {
        cipher: cipher.trim().to_string(),
        mac,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPLOAD: &str = "\
debug1: Local version string SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u10\r
debug1: Remote protocol version 2.0, remote software version OpenSSH_9.2p1 Debian-2+deb12u10\r
debug2: local client KEXINIT proposal\r
debug2: ciphers ctos: chacha20-poly1305@openssh.com,aes128-ctr,aes128-gcm@openssh.com\r
debug2: MACs ctos: umac-64-etm@openssh.com,hmac-sha2-256\r
debug2: peer server KEXINIT proposal\r
debug2: ciphers ctos: aes256-gcm@openssh.com,aes128-ctr\r
debug2: MACs ctos: umac-64-etm@openssh.com\r
debug1: kex: server->client cipher: aes128-ctr MAC: umac-64-etm@openssh.com compression: none\r
debug1: kex: client->server cipher: aes128-ctr MAC: umac-64-etm@openssh.com compression: none\r
debug2: channel 0: open confirm rwindow 0 rmax 32768\r
debug2: channel 0: rcvd adjust 2097152\r
debug2: channel 0: rcvd adjust 65536\r
debug2: channel 0: window 1966080 sent adjust 131072\r
";

    #[test]
    fn reads_versions_offers_negotiation_and_windows() {
        let log = SshLog::parse(UPLOAD);
        assert_eq!(
            log.remote_version.as_deref(),
            Some("OpenSSH_9.2p1 Debian-2+deb12u10")
        );
        assert_eq!(log.client_ciphers.len(), 3);
        assert_eq!(log.server_ciphers, ["aes256-gcm@openssh.com", "aes128-ctr"]);
        assert_eq!(log.server_macs, ["umac-64-etm@openssh.com"]);
        let c = log.client_to_server.clone().unwrap();
        assert_eq!(
            (c.cipher.as_str(), c.mac.as_str()),
            ("aes128-ctr", "umac-64-etm@openssh.com")
        );
        assert_eq!(log.open_rwindow, Some(0));
        assert_eq!(log.open_rmax, Some(32768));
        assert_eq!(log.peer_window(), Some(2 * 1024 * 1024));
        assert_eq!(log.local_window, Some(2 * 1024 * 1024));
        assert!(!log.remote_is_hpn());
        assert_eq!(
            SshLog::openssh_version(log.remote_version.as_deref().unwrap()),
            Some((9, 2))
        );
    }

    #[test]
    fn hpn_and_garbage() {
        let log = SshLog::parse(
            "debug1: Remote protocol version 2.0, remote software version OpenSSH_8.9p1-hpn15v2\n\
             debug2: Channel 0: Window growth to 16777216 by 14680064 bytes\n\
             debug2: channel 0: rcvd adjust banana\n\u{0}\u{1}garbage",
        );
        assert!(log.remote_is_hpn());
        assert_eq!(log.hpn_window_growth, Some(16777216));
        assert_eq!(log.peer_window(), None);
        assert_eq!(SshLog::parse(""), SshLog::default());
    }
}
