//! The address and namespace plan of a lab: pure computation from a [`Topology`], no kernel calls,
//! so it is unit-tested and printed before anything is built.
//!
//! Host `p` (client = 0, server = N+1) owns interface `wan0` towards the server (link `p`) and
//! `lan0` towards the client (link `p-1`). Subnets: link 0 is the client LAN 192.168.1.0/24
//! (client .100, hop1 .1); link N is 203.0.113.0/24 (hopN .1, server .10); links in between are
//! carrier space 100.64.i.0/24 (upstream hop .1, downstream hop .2). A link with delay or jitter
//! gets an element namespace `<lab>-dl<i>` with interfaces `dla` (client side) and `dlb`.
//! Routes: a default route upstream; routes to subnets on the client side only while no NAT hop
//! hides them (a server never learns the private ranges behind a NAT).

use std::net::Ipv4Addr;

use serde::Serialize;

use crate::topology::{Direction, DirectionSettings, HopKind, Topology};

/// One interface of a host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IfacePlan {
    pub name: String,
    pub link: usize,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// Interface MTU (the larger of the link's two directions).
    pub mtu: u32,
    /// MTU of this host's route out of this interface, when the direction's MTU is smaller.
    pub route_mtu: Option<u32>,
    /// The host at the other end of the link.
    pub peer: String,
    pub peer_addr: Ipv4Addr,
}

/// A route a host installs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoutePlan {
    /// `default` or `a.b.c.d/len`.
    pub dest: String,
    pub via: Ipv4Addr,
    pub dev: String,
    pub mtu: Option<u32>,
}

/// One host namespace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostPlan {
    pub name: String,
    pub netns: String,
    pub position: usize,
    pub is_nat: bool,
    pub ifaces: Vec<IfacePlan>,
    pub routes: Vec<RoutePlan>,
}

impl HostPlan {
    /// The host's primary address: the one facing the server (for the server, its only one).
    pub fn primary_addr(&self) -> Ipv4Addr {
        self.iface("wan0")
            .or_else(|| self.iface("lan0"))
            .map(|i| i.addr)
            .unwrap_or(Ipv4Addr::UNSPECIFIED)
    }
    pub fn iface(&self, name: &str) -> Option<&IfacePlan> {
        self.ifaces.iter().find(|i| i.name == name)
    }
}

/// One link and its two directions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkPlan {
    pub index: usize,
    pub left: String,
    pub right: String,
    pub subnet: String,
    pub up: DirectionSettings,
    pub down: DirectionSettings,
    /// Namespace of the delay-line element, when the link has delay or jitter or a host's NIC
    /// fault.
    pub element_netns: Option<String>,
    /// A host's fixed-size NIC segmentation (`nic_segments_at`) emulated by the element, per
    /// direction: up is the client's NIC, down the server's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_segments_up: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_segments_down: Option<u16>,
}

/// Interface names in an element namespace.
pub const ELEMENT_IFACE_A: &str = "dla";
pub const ELEMENT_IFACE_B: &str = "dlb";

/// The complete plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub hosts: Vec<HostPlan>,
    pub links: Vec<LinkPlan>,
}

impl Plan {
    pub fn host(&self, name: &str) -> Option<&HostPlan> {
        self.hosts.iter().find(|h| h.name == name)
    }
    /// Every namespace the lab creates (hosts, then elements).
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self.hosts.iter().map(|h| h.netns.clone()).collect();
        v.extend(self.links.iter().filter_map(|l| l.element_netns.clone()));
        v
    }
}

/// Addresses of link `i` of a chain with `links` links: (subnet base, prefix, left, right).
fn link_addrs(i: usize, links: usize) -> (Ipv4Addr, Ipv4Addr, Ipv4Addr) {
    let last = links - 1;
    if i == last {
        let left_last = if i == 0 { 100 } else { 1 };
        (
            Ipv4Addr::new(203, 0, 113, 0),
            Ipv4Addr::new(203, 0, 113, left_last),
            Ipv4Addr::new(203, 0, 113, 10),
        )
    } else if i == 0 {
        (
            Ipv4Addr::new(192, 168, 1, 0),
            Ipv4Addr::new(192, 168, 1, 100),
            Ipv4Addr::new(192, 168, 1, 1),
        )
    } else {
        let n = i as u8;
        (
            Ipv4Addr::new(100, 64, n, 0),
            Ipv4Addr::new(100, 64, n, 2),
            Ipv4Addr::new(100, 64, n, 1),
        )
    }
}

/// Compute the plan for `topology` with namespaces named `<lab_id>-<host>`.
pub fn plan(topology: &Topology, lab_id: &str) -> Plan {
    let names = topology.host_names();
    let nlinks = topology.link_count();
    let is_nat = |pos: usize| {
        pos >= 1 && pos <= topology.hops.len() && topology.hops[pos - 1].kind == HopKind::Nat
    };

    let links: Vec<LinkPlan> = (0..nlinks)
        .map(|i| {
            let spec = topology.link(i);
            let (base, _, _) = link_addrs(i, nlinks);
            let (nic_segments_up, nic_segments_down) = topology.nic_segments_on_link(i);
            LinkPlan {
                index: i,
                left: names[i].clone(),
                right: names[i + 1].clone(),
                subnet: format!("{base}/24"),
                up: spec.direction(Direction::Up),
                down: spec.direction(Direction::Down),
                element_netns: topology
                    .link_needs_element(i)
                    .then(|| format!("{lab_id}-dl{i}")),
                nic_segments_up,
                nic_segments_down,
            }
        })
        .collect();

    let mut hosts = Vec::new();
    for (pos, name) in names.iter().enumerate() {
        let mut ifaces = Vec::new();
        if pos > 0 {
            // lan0 on link pos-1, this host is its right end and sends "down".
            let l = &links[pos - 1];
            let (_, left, right) = link_addrs(pos - 1, nlinks);
            let mtu = l.up.mtu.max(l.down.mtu);
            ifaces.push(IfacePlan {
                name: "lan0".into(),
                link: pos - 1,
                addr: right,
                prefix_len: 24,
                mtu,
                route_mtu: (l.down.mtu < mtu).then_some(l.down.mtu),
                peer: names[pos - 1].clone(),
                peer_addr: left,
            });
        }
        if pos < nlinks {
            let l = &links[pos];
            let (_, left, right) = link_addrs(pos, nlinks);
            let mtu = l.up.mtu.max(l.down.mtu);
            ifaces.push(IfacePlan {
                name: "wan0".into(),
                link: pos,
                addr: left,
                prefix_len: 24,
                mtu,
                route_mtu: (l.up.mtu < mtu).then_some(l.up.mtu),
                peer: names[pos + 1].clone(),
                peer_addr: right,
            });
        }
        let mut routes = Vec::new();
        if let Some(wan) = ifaces.iter().find(|i| i.name == "wan0") {
            routes.push(RoutePlan {
                dest: "default".into(),
                via: wan.peer_addr,
                dev: "wan0".into(),
                mtu: wan.route_mtu,
            });
        }
        if pos >= 2 {
            let lan = ifaces
                .iter()
                .find(|i| i.name == "lan0")
                .expect("pos>0 has lan0");
            // Subnet j (j < pos-1) is reachable leftwards while hosts j+1..pos-1 are all routers.
            for j in (0..pos - 1).rev() {
                if is_nat(j + 1) {
                    break;
                }
                routes.push(RoutePlan {
                    dest: links[j].subnet.clone(),
                    via: lan.peer_addr,
                    dev: "lan0".into(),
                    mtu: lan.route_mtu,
                });
            }
        }
        hosts.push(HostPlan {
            name: name.clone(),
            netns: format!("{lab_id}-{name}"),
            position: pos,
            is_nat: is_nat(pos),
            ifaces,
            routes,
        });
    }
    Plan { hosts, links }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios;

    #[test]
    fn single_nat_hop() {
        let p = plan(&scenarios::topology("modem-idle").unwrap(), "pd-x");
        assert_eq!(p.namespaces(), ["pd-x-client", "pd-x-hop1", "pd-x-server"]);
        let c = p.host("client").unwrap();
        assert_eq!(c.primary_addr(), Ipv4Addr::new(192, 168, 1, 100));
        assert_eq!(c.routes[0].via, Ipv4Addr::new(192, 168, 1, 1));
        let s = p.host("server").unwrap();
        assert_eq!(s.primary_addr(), Ipv4Addr::new(203, 0, 113, 10));
        assert!(
            s.routes.is_empty(),
            "server must not route into the NATed LAN: {:?}",
            s.routes
        );
        assert_eq!(
            p.host("hop1").unwrap().primary_addr(),
            Ipv4Addr::new(203, 0, 113, 1)
        );
    }

    #[test]
    fn routers_expose_client_subnets() {
        let t = Topology::from_toml("[[hop]]\n[[hop]]\n").unwrap();
        let p = plan(&t, "l");
        let s = p.host("server").unwrap();
        let dests: Vec<&str> = s.routes.iter().map(|r| r.dest.as_str()).collect();
        assert_eq!(dests, ["100.64.1.0/24", "192.168.1.0/24"]);
        assert_eq!(p.host("hop2").unwrap().routes.len(), 2); // default + 192.168.1.0/24
    }

    #[test]
    fn nat_in_the_middle_hides_the_lan() {
        let p = plan(&scenarios::topology("cgnat-chain").unwrap(), "l");
        assert!(p
            .host("hop2")
            .unwrap()
            .routes
            .iter()
            .all(|r| r.dest == "default"));
        assert_eq!(
            p.host("hop1").unwrap().iface("wan0").unwrap().addr,
            Ipv4Addr::new(100, 64, 1, 2)
        );
        assert_eq!(
            p.host("hop2").unwrap().iface("lan0").unwrap().addr,
            Ipv4Addr::new(100, 64, 1, 1)
        );
    }

    #[test]
    fn asymmetric_mtu_uses_route_mtu_on_the_sender() {
        let p = plan(&scenarios::topology("pmtu-blackhole").unwrap(), "l");
        let hop2_lan = p.host("hop2").unwrap().iface("lan0").unwrap().clone();
        assert_eq!(hop2_lan.mtu, 1500);
        assert_eq!(hop2_lan.route_mtu, Some(1420));
        assert_eq!(
            p.host("hop1").unwrap().iface("wan0").unwrap().route_mtu,
            None
        );
    }

    #[test]
    fn delay_links_get_an_element() {
        let p = plan(&scenarios::topology("lossy-long-fat").unwrap(), "l");
        assert_eq!(p.links[1].element_netns.as_deref(), Some("l-dl1"));
        assert!(p.links[0].element_netns.is_none());
        assert_eq!(p.namespaces().len(), 4);
    }

    #[test]
    fn direct_link_without_hops() {
        let p = plan(&Topology::default(), "l");
        assert_eq!(
            p.host("client").unwrap().primary_addr(),
            Ipv4Addr::new(203, 0, 113, 100)
        );
        assert_eq!(
            p.host("server").unwrap().primary_addr(),
            Ipv4Addr::new(203, 0, 113, 10)
        );
    }
}
