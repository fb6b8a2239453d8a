//! Server targets as users write them: `host`, `host:port`, `[v6]:port`, `[v6]`, a bare IPv6
//! literal (no port: a port needs the brackets), and their resolution to an ordered address list.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// A parsed target: the host as written (brackets removed) and the port, if it named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: Option<u16>,
}

/// Which address families to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    #[default]
    Any,
    V4,
    V6,
}

impl Family {
    fn admits(self, addr: &SocketAddr) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => addr.is_ipv4(),
            Family::V6 => addr.is_ipv6(),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Any => "IPv4 or IPv6",
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("no server given")]
    Empty,
    #[error("{text:?} is a URL; give the host name only, e.g. {host}")]
    Url { text: String, host: String },
    #[error("{text:?}: {port:?} is not a port (1-65535)")]
    BadPort { text: String, port: String },
    #[error(
        "{text:?}: an IPv6 address in brackets must look like [2001:db8::1] or [2001:db8::1]:7224"
    )]
    BadBrackets { text: String },
    #[error("cannot resolve {host:?}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host:?} has no {family} address")]
    NoAddress { host: String, family: Family },
}

impl Target {
    /// Parse what the user typed.
    pub fn parse(text: &str) -> Result<Target, TargetError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(TargetError::Empty);
        }
        if let Some((_, rest)) = t.split_once("://") {
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            return Err(TargetError::Url {
                text: t.to_string(),
                host: host.to_string(),
            });
        }
        if let Some(inner) = t.strip_prefix('[') {
            let (host, rest) = inner
                .split_once(']')
                .filter(|(h, _)| !h.is_empty())
                .ok_or_else(|| TargetError::BadBrackets { text: t.into() })?;
            let port = match rest {
                "" => None,
                r => match r.strip_prefix(':') {
                    Some(p) => Some(parse_port(t, p)?),
                    None => return Err(TargetError::BadBrackets { text: t.into() }),
                },
            };
            return Ok(Target {
                host: host.to_string(),
                port,
            });
        }
        match t.matches(':').count() {
            0 => Ok(Target {
                host: t.to_string(),
                port: None,
            }),
            1 => {
                let (host, port) = t.split_once(':').unwrap_or((t, ""));
                if host.is_empty() {
                    return Err(TargetError::Empty);
                }
                Ok(Target {
                    host: host.to_string(),
                    port: Some(parse_port(t, port)?),
                })
            }
            // Two or more colons: a bare IPv6 literal. A port needs brackets.
            _ => Ok(Target {
                host: t.to_string(),
                port: None,
            }),
        }
    }

    /// Every address of the host in the order to try them (see [`order`]), keeping only
    /// `family`. Host names go through the system resolver (getaddrinfo: /etc/hosts, DNS), which
    /// blocks; call it before or beside the async work.
    pub fn resolve(&self, port: u16, family: Family) -> Result<Vec<SocketAddr>, TargetError> {
        let all: Vec<SocketAddr> = match self.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => (self.host.as_str(), port)
                .to_socket_addrs()
                .map_err(|source| TargetError::Resolve {
                    host: self.host.clone(),
                    source,
                })?
                .collect(),
        };
        let wanted: Vec<SocketAddr> = all.into_iter().filter(|a| family.admits(a)).collect();
        if wanted.is_empty() {
            return Err(TargetError::NoAddress {
                host: self.host.clone(),
                family,
            });
        }
        Ok(order(wanted))
    }
}

fn parse_port(text: &str, port: &str) -> Result<u16, TargetError> {
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(TargetError::BadPort {
            text: text.to_string(),
            port: port.to_string(),
        }),
    }
}

/// RFC 8305 §4: keep the resolver's preference order (RFC 6724), drop duplicates, and
/// interleave the families starting with the resolver's first choice, so one broken family
/// delays the other by one attempt only.
pub fn order(addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let mut unique: Vec<SocketAddr> = Vec::new();
    for a in addrs {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    let Some(first_v6) = unique.first().map(SocketAddr::is_ipv6) else {
        return unique;
    };
    let (mut preferred, mut other): (Vec<_>, Vec<_>) =
        unique.into_iter().partition(|a| a.is_ipv6() == first_v6);
    preferred.reverse();
    other.reverse();
    let mut out = Vec::new();
    loop {
        match (preferred.pop(), other.pop()) {
            (None, None) => return out,
            (a, b) => out.extend(a.into_iter().chain(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(host: &str, port: Option<u16>) -> Target {
        Target {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn parses_the_forms_users_write() {
        let table = [
            ("server.example.net", t("server.example.net", None)),
            ("localhost:17230", t("localhost", Some(17230))),
            ("203.0.113.10", t("203.0.113.10", None)),
            ("203.0.113.10:7224", t("203.0.113.10", Some(7224))),
            ("[2001:db8::1]:7224", t("2001:db8::1", Some(7224))),
            ("[2001:db8::1]", t("2001:db8::1", None)),
            ("2001:db8::1", t("2001:db8::1", None)),
            ("::1", t("::1", None)),
            (" host ", t("host", None)),
        ];
        for (text, want) in table {
            assert_eq!(Target::parse(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn rejects_what_cannot_be_a_target() {
        for bad in [
            "",
            "host:",
            "host:0",
            "host:70000",
            "host:http",
            ":7224",
            "[::1",
            "[]:1",
            "[::1]7224",
            "http://example.net/x",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        let url = Target::parse("http://example.net:80/x").unwrap_err();
        assert!(url.to_string().contains("example.net:80"), "{url}");
    }

    #[test]
    fn literals_resolve_without_dns_and_families_filter() {
        let v6 = Target::parse("::1").unwrap();
        assert_eq!(
            v6.resolve(7224, Family::Any).unwrap(),
            vec!["[::1]:7224".parse().unwrap()]
        );
        assert!(matches!(
            v6.resolve(7224, Family::V4),
            Err(TargetError::NoAddress { .. })
        ));
        let local = Target::parse("localhost").unwrap();
        let v4 = local.resolve(9, Family::V4).unwrap();
        assert!(v4.iter().all(SocketAddr::is_ipv4) && !v4.is_empty());
    }

    #[test]
    fn families_interleave_in_resolver_order() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let got = order(vec![
            a("[2001:db8::1]:1"),
            a("[2001:db8::2]:1"),
            a("192.0.2.1:1"),
            a("[2001:db8::1]:1"),
            a("192.0.2.2:1"),
        ]);
        assert_eq!(
            got,
            vec![
                a("[2001:db8::1]:1"),
                a("192.0.2.1:1"),
                a("[2001:db8::2]:1"),
                a("192.0.2.2:1")
            ]
        );
    }
}
