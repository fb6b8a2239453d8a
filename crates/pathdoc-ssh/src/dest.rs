//! Where to SSH to and how: `[user@]host[:port]` plus the options passed through to OpenSSH's
//! `ssh` (`-F`, `-i`, `-o`). pathdoc always runs the system `ssh`, so the user's ssh_config,
//! keys, agent, ProxyJump and known_hosts apply exactly as for their own `ssh host`.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use crate::error::SshError;
use crate::process::{self, SshRun};

/// An SSH destination and the options for every `ssh` pathdoc starts to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshDest {
    /// `user@host` or `host` as given (a host may be an ssh_config alias).
    pub destination: String,
    /// `:port` of the spec, passed as `-p`.
    pub port: Option<u16>,
    /// `-o KEY=VALUE` options, in order.
    pub options: Vec<String>,
    /// `-i FILE`.
    pub identity: Option<PathBuf>,
    /// `-F FILE` (an ssh_config to use instead of ~/.ssh/config).
    pub config: Option<PathBuf>,
    /// The `ssh` program (default `ssh` on PATH).
    pub program: PathBuf,
}

impl SshDest {
    /// Parse `[user@]host[:port]`; IPv6 hosts with a port go in brackets (`[2001:db8::1]:2222`),
    /// a bare IPv6 address has no port.
    pub fn parse(spec: &str) -> Result<SshDest, SshError> {
        let bad = |why: &str| SshError::BadDestination {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let spec_t = spec.trim();
        if spec_t.is_empty() {
            return Err(bad("empty; write [user@]host[:port]"));
        }
        if spec_t.starts_with('-') {
            return Err(bad("starts with '-' (an option, not a host)"));
        }
        if spec_t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace"));
        }
        let (user, hostport) = match spec_t.rsplit_once('@') {
            Some((u, h)) if !u.is_empty() => (Some(u), h),
            Some(_) => return Err(bad("empty user before '@'")),
            None => (None, spec_t),
        };
        let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("'[' without ']'"))?;
            let port = match after {
                "" => None,
                p => Some(
                    parse_port(p.strip_prefix(':').ok_or_else(|| bad("junk after ']'"))?)
                        .ok_or_else(|| bad("bad port"))?,
                ),
            };
            (h.to_string(), port)
        } else if hostport.matches(':').count() == 1 {
            let (h, p) = hostport.split_once(':').unwrap_or((hostport, ""));
            (
                h.to_string(),
                Some(parse_port(p).ok_or_else(|| bad("bad port"))?),
            )
        } else {
            // No colon, or a bare IPv6 address.
            (hostport.to_string(), None)
        };
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        let destination = match user {
            Some(u) => format!("{u}@{host}"),
            None => host,
        };
        Ok(SshDest {
            destination,
            port,
            options: Vec::new(),
            identity: None,
            config: None,
            program: PathBuf::from("ssh"),
        })
    }

    /// The host part (without user).
    pub fn host(&self) -> &str {
        self.destination
            .rsplit_once('@')
            .map(|(_, h)| h)
            .unwrap_or(&self.destination)
    }

    /// The plain `ssh` command a user types to reach the same user, host and port:
    /// `ssh -p 2222 root@127.0.0.1` (the `-F`/`-i`/`-o` options kept too).
    pub fn ssh_command(&self) -> String {
        let mut cmd = String::from("ssh");
        if let Some(f) = &self.config {
            cmd.push_str(&format!(" -F {}", f.display()));
        }
        if let Some(i) = &self.identity {
            cmd.push_str(&format!(" -i {}", i.display()));
        }
        for o in &self.options {
            cmd.push_str(&format!(" -o {o}"));
        }
        if let Some(p) = self.port {
            cmd.push_str(&format!(" -p {p}"));
        }
        cmd.push(' ');
        cmd.push_str(&self.destination);
        cmd
    }

    /// The host as known_hosts names it: `[127.0.0.1]:2222` for a port other than 22 (what
    /// `ssh-keygen -R` needs), the bare host otherwise.
    pub fn known_hosts_name(&self) -> String {
        match self.port {
            Some(p) if p != 22 => format!("[{}]:{p}", self.host()),
            _ => self.host().to_string(),
        }
    }

    /// The user's options as `ssh` arguments (before pathdoc's own, so the user's win: for
    /// ssh options the first value given is the one used).
    pub fn option_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if let Some(f) = &self.config {
            args.push("-F".into());
            args.push(f.into());
        }
        if let Some(i) = &self.identity {
            args.push("-i".into());
            args.push(i.into());
        }
        for o in &self.options {
            args.push("-o".into());
            args.push(o.into());
        }
        if let Some(p) = self.port {
            args.push("-p".into());
            args.push(p.to_string().into());
        }
        args
    }

    /// Ask `ssh -G` what it would connect to (config aliases, `HostName`, `Port`, proxies).
    pub fn resolve_config(&self) -> Result<ResolvedConfig, SshError> {
        let mut args = self.option_args();
        args.push("-G".into());
        args.push(self.destination.clone().into());
        let out = process::run(self, &args, None, std::time::Duration::from_secs(15))?;
        if !out.success {
            return Err(SshError::BadDestination {
                spec: self.destination.clone(),
                why: format!("`ssh -G` rejects it: {}", out.stderr_tail()),
            });
        }
        Ok(ResolvedConfig::parse(&out.stdout))
    }

    /// Run `ssh <dest> <remote command>` to completion (stdin from `input`, if any).
    pub fn run_remote(
        &self,
        extra: &[&str],
        remote: &str,
        input: Option<&[u8]>,
        deadline: std::time::Duration,
    ) -> Result<SshRun, SshError> {
        let mut args = self.option_args();
        // A host that does not answer (or stops answering mid-copy) fails in seconds with ssh's
        // own message, not at the step's deadline. After the user's -o: ssh keeps the first value.
        for o in LIVENESS_OPTIONS {
            args.push("-o".into());
            args.push(o.into());
        }
        args.extend(extra.iter().map(OsString::from));
        args.push("--".into());
        args.push(self.destination.clone().into());
        args.push(remote.into());
        process::run(self, &args, input, deadline)
    }
}

/// Options of every short remote step (probe, copy, clean): connect within 15 s, and give up on
/// a connection that has not answered for 15 s.
pub const LIVENESS_OPTIONS: [&str; 3] = [
    "ConnectTimeout=15",
    "ServerAliveInterval=5",
    "ServerAliveCountMax=3",
];

fn parse_port(p: &str) -> Option<u16> {
    p.parse().ok().filter(|&n| n > 0)
}

/// The parts of `ssh -G` output pathdoc uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResolvedConfig {
    pub hostname: String,
    pub port: u16,
    pub user: String,
    /// A ProxyJump or ProxyCommand is configured: the far end may not be directly reachable.
    pub proxied: bool,
    /// The client's cipher preference (`ciphers`).
    pub ciphers: Vec<String>,
}

impl ResolvedConfig {
    pub fn parse(text: &str) -> Self {
        let mut c = ResolvedConfig {
            port: 22,
            ..Default::default()
        };
        for line in text.lines() {
            let Some((key, value)) = line.split_once(' ') else {
                continue;
            };
            match key {
                "hostname" => c.hostname = value.trim().to_string(),
                "port" => c.port = value.trim().parse().unwrap_or(22),
                "user" => c.user = value.trim().to_string(),
                "proxyjump" | "proxycommand" if value.trim() != "none" => c.proxied = true,
                "ciphers" => {
                    c.ciphers = value.trim().split(',').map(str::to_string).collect();
                }
                _ => {}
            }
        }
        c
    }

    /// The addresses `hostname` resolves to here (for the direct TCP connection to the
    /// temporary server), IPv4 first.
    pub fn addresses(&self) -> Result<Vec<IpAddr>, SshError> {
        let host = self.hostname.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let mut ips: Vec<IpAddr> = (host, 0u16)
            .to_socket_addrs()
            .map_err(|e| SshError::Connect {
                dest: self.hostname.clone(),
                detail: format!("cannot resolve {host}: {e}"),
            })?
            .map(|a: SocketAddr| a.ip())
            .collect();
        ips.sort_by_key(|ip| ip.is_ipv6());
        ips.dedup();
        Ok(ips)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_type() {
        let d = SshDest::parse("alice@db.example.net:2222").unwrap();
        assert_eq!(d.destination, "alice@db.example.net");
        assert_eq!(d.port, Some(2222));
        assert_eq!(d.host(), "db.example.net");
        let d = SshDest::parse("server").unwrap();
        assert_eq!((d.destination.as_str(), d.port), ("server", None));
        let d = SshDest::parse("root@[2001:db8::1]:22").unwrap();
        assert_eq!(
            (d.destination.as_str(), d.port),
            ("root@2001:db8::1", Some(22))
        );
        let d = SshDest::parse("2001:db8::1").unwrap();
        assert_eq!((d.destination.as_str(), d.port), ("2001:db8::1", None));
        let d = SshDest::parse("a@b@host").unwrap();
        assert_eq!(d.destination, "a@b@host");
    }

    #[test]
    fn rejects_bad_specs_with_a_reason() {
        for bad in [
            "",
            "-oProxyCommand=x",
            "@host",
            "host:0",
            "host:99999",
            "host:x",
            "[::1",
            "a b",
            "user@",
        ] {
            let e = SshDest::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad.trim()) || bad.is_empty(), "{bad}: {e}");
        }
    }

    #[test]
    fn user_options_come_first() {
        let mut d = SshDest::parse("h:2200").unwrap();
        d.options.push("ProxyJump=bastion".into());
        d.identity = Some("/k".into());
        d.config = Some("/c".into());
        let args: Vec<String> = d
            .option_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-F",
                "/c",
                "-i",
                "/k",
                "-o",
                "ProxyJump=bastion",
                "-p",
                "2200"
            ]
        );
    }

    #[test]
    fn reads_ssh_g() {
        let c = ResolvedConfig::parse(
            "user root\nhostname 203.0.113.10\nport 2222\nproxyjump none\nciphers aes128-gcm@openssh.com,chacha20-poly1305@openssh.com\n",
        );
        assert_eq!(c.hostname, "203.0.113.10");
        assert_eq!(c.port, 2222);
        assert!(!c.proxied);
        assert_eq!(c.ciphers.len(), 2);
        assert_eq!(
            c.addresses().unwrap(),
            vec!["203.0.113.10".parse::<IpAddr>().unwrap()]
        );
        assert!(ResolvedConfig::parse("proxyjump bastion\n").proxied);
    }
}
