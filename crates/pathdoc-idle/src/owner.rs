//! Who runs the box that forgets, and what the user can do about it: the one place that
//! decides, so every finding of a report gives the same advice (pure).
//!
//! The box is named by the address it answers TTL-expired probes from, usually its inside one:
//! an RFC 1918 address is in the user's premises (their own router, or the ISP's modem/router
//! there — pathdoc cannot tell which, so both remedies are given, each on its host); RFC 6598
//! 100.64.0.0/10 is the carrier's NAT; a public address is the ISP's or a transit network, or the
//! server's side when it is the last router before the server.

use std::net::IpAddr;
use std::time::Duration;

use pathdoc_core::units::format_duration;
use pathdoc_core::{Host, Remedy};

use crate::hops::PathHops;

/// Whose box a hop is, as far as its address says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// RFC 1918 address: the user's own router, or the ISP's modem/router on their premises.
    Premises { hop: usize, addr: IpAddr },
    /// RFC 6598 carrier-grade NAT space: the ISP's CGN.
    Carrier { hop: usize, addr: IpAddr },
    /// A public address before the last router: the ISP's network (or a transit network).
    Network { hop: usize, addr: IpAddr },
    /// The last router before the server, with a public address: the server's side.
    ServerSide { hop: usize, addr: IpAddr },
    /// The hop does not answer TTL-expired probes.
    Silent { hop: usize },
    /// The box is not located (no culprit search, or it was inconclusive).
    Unknown,
}

fn is_cgn(v4: std::net::Ipv4Addr) -> bool {
    let o = v4.octets();
    o[0] == 100 && (o[1] & 0xc0) == 64
}

fn is_private(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_private() || v4.is_link_local(),
        // Unique local fc00::/7 and link-local fe80::/10.
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xfe00) == 0xfc00 || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

impl Owner {
    /// The owner of hop `hop` (1-based, from the client) on `path`.
    pub fn of(path: &PathHops, hop: usize) -> Owner {
        match path.addr(hop) {
            None => Owner::Silent { hop },
            Some(addr) if is_private(addr) => Owner::Premises { hop, addr },
            // IPv6 has no private LAN ranges in practice: the first router is the client's own
            // gateway (the home router whose RFC 6092 firewall keeps the state).
            Some(IpAddr::V6(v6)) if hop == 1 => Owner::Premises {
                hop,
                addr: IpAddr::V6(v6),
            },
            Some(IpAddr::V4(v4)) if is_cgn(v4) => Owner::Carrier {
                hop,
                addr: v4.into(),
            },
            Some(addr) if hop == path.routers && path.routers > 1 => {
                Owner::ServerSide { hop, addr }
            }
            Some(addr) => Owner::Network { hop, addr },
        }
    }

    /// The owner when the only router on the path must be the box (one router: nothing else
    /// can hold state), otherwise unknown.
    pub fn of_only_router(path: Option<&PathHops>) -> Owner {
        match path {
            Some(p) if p.routers == 1 => Owner::of(p, 1),
            _ => Owner::Unknown,
        }
    }

    pub fn hop(&self) -> Option<usize> {
        match self {
            Owner::Premises { hop, .. }
            | Owner::Carrier { hop, .. }
            | Owner::Network { hop, .. }
            | Owner::ServerSide { hop, .. }
            | Owner::Silent { hop } => Some(*hop),
            Owner::Unknown => None,
        }
    }

    fn addr(&self) -> Option<IpAddr> {
        match self {
            Owner::Premises { addr, .. }
            | Owner::Carrier { addr, .. }
            | Owner::Network { addr, .. }
            | Owner::ServerSide { addr, .. } => Some(*addr),
            _ => None,
        }
    }

    /// The box in words, e.g. "the carrier's CGN (hop 2, 100.64.1.1; …)".
    pub fn words(&self) -> String {
        match self {
            Owner::Premises { hop: 1, addr } => {
                format!("your home router or the ISP's modem (hop 1, {addr})")
            }
            Owner::Premises { hop, addr } => {
                format!("a router inside your premises (hop {hop}, {addr})")
            }
            Owner::Carrier { hop, addr } => format!(
                "the carrier's CGN (hop {hop}, {addr}; 100.64.0.0/10 is RFC 6598 carrier-NAT space)"
            ),
            Owner::Network { hop, addr } => {
                format!("a router in your ISP's or a transit network (hop {hop}, {addr})")
            }
            Owner::ServerSide { hop, addr } => format!(
                "the last router before the server (hop {hop}, {addr}): the server's firewall or hosting network"
            ),
            Owner::Silent { hop } => {
                format!("the box at hop {hop} (it does not answer TTL-expired probes)")
            }
            Owner::Unknown => "a stateful box on the path (not located)".to_string(),
        }
    }

    /// The router host of a remedy applied on this box.
    fn router(&self) -> Host {
        Host::Router {
            hop: self.hop().map(|h| h as u32),
            address: self.addr().map(|a| a.to_string()),
        }
    }
}

/// The timeout that is too short, for the remedies' wording.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Established TCP connections forgotten after `timeout` (RFC 5382 REQ-5: ≥ 2 h 4 min; for
    /// an IPv6 firewall without NAT, `v6_firewall`, RFC 6092 REC-35 with the same floor).
    TcpEstablished {
        timeout: Duration,
        pm: Duration,
        v6_firewall: bool,
    },
    /// UDP bindings of one class forgotten after `timeout` (RFC 4787 REQ-5: ≥ 2 min).
    Udp {
        stream: bool,
        timeout: Duration,
        pm: Duration,
    },
}

impl Fault {
    fn complaint(&self) -> String {
        match *self {
            Fault::TcpEstablished {
                timeout,
                pm,
                v6_firewall: false,
            } => format!(
                "\"Idle TCP connections through your network are dropped after about {} (measured with server-initiated \
                 probes, ±{}); RFC 5382 REQ-5 requires at least 2 hours 4 minutes. Please raise the established-connection \
                 timeout of your NAT/CGN or give me a public address.\"",
                format_duration(timeout),
                format_duration(pm)
            ),
            Fault::TcpEstablished {
                timeout,
                pm,
                v6_firewall: true,
            } => format!(
                "\"Idle IPv6 TCP connections through your network are dropped after about {} (measured with \
                 server-initiated probes, ±{}); there is no NAT on the IPv6 path, so it is a stateful IPv6 firewall, and \
                 RFC 6092 REC-35 requires it to keep established connections at least 2 hours 4 minutes. Please raise \
                 its established-connection timeout.\"",
                format_duration(timeout),
                format_duration(pm)
            ),
            Fault::Udp { stream, timeout, pm } => format!(
                "\"UDP {} through your network are dropped after about {} (±{}); RFC 4787 REQ-5 requires at least 2 minutes \
                 (5 minutes recommended). Please raise the UDP mapping timeout of your NAT/CGN.\"",
                if stream { "flows that go quiet" } else { "mappings after a single request and reply" },
                format_duration(timeout),
                format_duration(pm)
            ),
        }
    }

    /// The Linux conntrack setting a user-run router would change.
    fn sysctl(&self) -> &'static str {
        match self {
            Fault::TcpEstablished { .. } => {
                "sysctl -w net.netfilter.nf_conntrack_tcp_timeout_established=7440"
            }
            Fault::Udp { stream: true, .. } => {
                "sysctl -w net.netfilter.nf_conntrack_udp_timeout_stream=300"
            }
            Fault::Udp { stream: false, .. } => {
                "sysctl -w net.netfilter.nf_conntrack_udp_timeout=120"
            }
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Fault::TcpEstablished {
                v6_firewall: false,
                ..
            } => "TCP established-connection timeout to at least 2 h 4 min (RFC 5382 REQ-5)",
            Fault::TcpEstablished {
                v6_firewall: true, ..
            } => {
                "IPv6 firewall's TCP established-connection timeout to at least 2 h 4 min (RFC 6092 REC-35)"
            }
            Fault::Udp { stream: true, .. } => {
                "UDP stream timeout to at least 2 min, 5 min recommended (RFC 4787 REQ-5)"
            }
            Fault::Udp { stream: false, .. } => {
                "UDP timeout for single-exchange mappings to at least 2 min (RFC 4787 REQ-5)"
            }
        }
    }
}

/// What to do about the box itself, on the host that can do it. Every finding about a box's
/// timeout takes its box remedies from here, so they cannot disagree.
pub fn box_remedies(owner: &Owner, fault: Fault) -> Vec<Remedy> {
    let raise_own = |who: String| {
        Remedy::new(format!(
            "If you administer {who}: raise its {}; on a Linux-based router (OpenWrt and most home routers):",
            fault.what()
        ))
        .on(owner.router())
        .with_command(fault.sysctl())
    };
    let tell_isp = |who: String| {
        Remedy::new(format!(
            "If {who} is your ISP's: tell them {}",
            fault.complaint()
        ))
        .on(Host::Isp)
    };
    match owner {
        Owner::Premises { .. } => vec![
            raise_own("this router".to_string()),
            Remedy::new(format!(
                "If it is the ISP's modem/router (you cannot log in to it): ask the ISP to raise its {} or to put it \
                 in bridge mode so your own router does the NAT; meanwhile use the keepalives above. For the ISP: {}",
                fault.what(),
                fault.complaint()
            ))
            .on(Host::Isp),
        ],
        Owner::Carrier { .. } | Owner::Network { .. } => vec![Remedy::new(format!(
            "Ask your ISP to raise the {} of {}: it is theirs, you cannot change it. Tell them {}",
            fault.what(),
            owner.words(),
            fault.complaint()
        ))
        .on(Host::Isp)],
        Owner::ServerSide { .. } => vec![Remedy::new(format!(
            "Ask the server's operator to raise the {} of the firewall or load balancer in front of it ({}).",
            fault.what(),
            owner.words()
        ))
        .on(Host::Other {
            name: "the server's network (firewall, load balancer)".into(),
        })],
        Owner::Silent { hop } => vec![
            raise_own(format!("the box at hop {hop}")),
            tell_isp(format!("the box at hop {hop}")),
        ],
        Owner::Unknown => vec![
            raise_own("the NAT that forgets (the check did not locate it)".to_string()),
            tell_isp("that NAT".to_string()),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(addrs: &[Option<&str>]) -> PathHops {
        PathHops {
            routers: addrs.len(),
            addrs: addrs
                .iter()
                .map(|a| a.map(|a| a.parse().unwrap()))
                .collect(),
        }
    }

    #[test]
    fn owners_from_addresses() {
        let p = path(&[
            Some("192.168.1.1"),
            Some("100.64.1.1"),
            None,
            Some("198.51.100.1"),
            Some("203.0.113.1"),
        ]);
        assert!(matches!(Owner::of(&p, 1), Owner::Premises { hop: 1, .. }));
        assert!(matches!(Owner::of(&p, 2), Owner::Carrier { hop: 2, .. }));
        assert_eq!(Owner::of(&p, 3), Owner::Silent { hop: 3 });
        assert!(matches!(Owner::of(&p, 4), Owner::Network { hop: 4, .. }));
        assert!(matches!(Owner::of(&p, 5), Owner::ServerSide { hop: 5, .. }));
        assert_eq!(Owner::of_only_router(Some(&p)), Owner::Unknown);
        assert!(matches!(
            Owner::of_only_router(Some(&path(&[Some("10.0.0.1")]))),
            Owner::Premises { hop: 1, .. }
        ));
    }

    #[test]
    fn remedies_name_their_host_and_never_tell_a_user_to_tune_an_isp_box() {
        let fault = Fault::TcpEstablished {
            timeout: Duration::from_secs(3600),
            pm: Duration::from_secs(5),
            v6_firewall: false,
        };
        let p = path(&[Some("192.168.1.1"), Some("100.64.1.1")]);
        let cgn = box_remedies(&Owner::of(&p, 2), fault);
        assert!(cgn.iter().all(|r| r.host == Some(Host::Isp)), "{cgn:?}");
        assert!(cgn.iter().all(|r| r.command.is_none()), "{cgn:?}");
        let home = box_remedies(&Owner::of(&p, 1), fault);
        assert_eq!(
            home[0].host,
            Some(Host::Router {
                hop: Some(1),
                address: Some("192.168.1.1".into())
            })
        );
        assert!(home[0].description.starts_with("If you administer"));
        assert_eq!(home[1].host, Some(Host::Isp));
        for owner in [Owner::Unknown, Owner::Silent { hop: 3 }] {
            assert!(box_remedies(&owner, fault).iter().all(|r| r.host.is_some()));
        }
    }

    #[test]
    fn an_ipv6_firewall_without_nat_is_held_to_rfc_6092_not_the_nat_rfc() {
        let fault = |v6_firewall| Fault::TcpEstablished {
            timeout: Duration::from_secs(3600),
            pm: Duration::from_secs(5),
            v6_firewall,
        };
        assert!(fault(true).what().contains("RFC 6092 REC-35"));
        assert!(fault(true).complaint().contains("no NAT on the IPv6 path"));
        assert!(!fault(true).complaint().contains("5382"));
        assert!(fault(false).what().contains("RFC 5382 REQ-5"));
        assert!(crate::verdict::tcp_requirement(true).starts_with("RFC 6092 REC-35"));
    }
}
