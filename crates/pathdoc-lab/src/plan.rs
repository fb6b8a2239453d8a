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
//!
//! IPv6 (family `dual` or `v6`) mirrors the IPv4 plan in 2001:db8::/32 (RFC 3849): link 0 is
//! 2001:db8:1::/64 (client ::100, hop1 ::1), link N 2001:db8:113::/64 (hopN ::1, server ::10),
//! carrier links 2001:db8:64:i::/64 (upstream ::1, downstream ::2). IPv6 routes to the client side
//! stop only at a `nat66` hop: an RFC 6092 firewall hides nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use crate::topology::{CrossTraffic, Direction, DirectionSettings, Family, HopKind, Topology};

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
    /// IPv6 address (/64) when the lab carries IPv6.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr6: Option<Ipv6Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_addr6: Option<Ipv6Addr>,
    /// `net.ipv6.conf.<iface>.mtu` when this host's sending direction has a smaller IPv6 MTU than
    /// the interface (an asymmetric link or a v6-only `mtu6`): forwarding and local routes honour it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu6: Option<u32>,
}

/// A route a host installs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoutePlan {
    /// `default` or `a.b.c.d/len` (`2001:db8:…/64` for IPv6 routes).
    pub dest: String,
    pub via: IpAddr,
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
    /// Whether the hop also masquerades IPv6 (`nat66`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_nat66: bool,
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
    /// The host's primary IPv6 address (server-facing), when the lab carries IPv6.
    pub fn primary_addr6(&self) -> Option<Ipv6Addr> {
        self.iface("wan0")
            .or_else(|| self.iface("lan0"))
            .and_then(|i| i.addr6)
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
    /// IPv6 prefix, when the lab carries IPv6.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet6: Option<String>,
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

/// One end of a link's cross traffic: an extra host hung off a hop by its own veth pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrossEnd {
    /// `cross<i>a` (client side) or `cross<i>b` (server side).
    pub name: String,
    pub netns: String,
    pub addr: Ipv4Addr,
    /// The hop it hangs off, that hop's interface towards it and address there.
    pub hop: String,
    pub hop_iface: String,
    pub hop_addr: Ipv4Addr,
}

/// Background flows across link `link` between two extra hosts: `near` hangs off the link's
/// client-side hop, `far` off its server-side hop. The iperf3 server runs on `far`, the client
/// (which opens the connections, so a NAT hop lets them through) on `near`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrossPlan {
    pub link: usize,
    pub traffic: CrossTraffic,
    pub near: CrossEnd,
    pub far: CrossEnd,
    /// Route the server-side hop needs back to `near`'s subnet (through the client-side hop),
    /// `None` when that hop masquerades it.
    pub far_hop_route: Option<RoutePlan>,
}

/// Subnets of link `i`'s cross hosts: 10.201.i.0/24 (client side), 10.202.i.0/24 (server side);
/// the hop is .1, the cross host .2.
pub fn cross_subnet(i: usize, far: bool) -> (Ipv4Addr, Ipv4Addr) {
    let b = if far { 202 } else { 201 };
    let n = i as u8;
    (Ipv4Addr::new(10, b, n, 1), Ipv4Addr::new(10, b, n, 2))
}

/// The complete plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub family: Family,
    pub hosts: Vec<HostPlan>,
    pub links: Vec<LinkPlan>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cross: Vec<CrossPlan>,
}

impl Plan {
    pub fn host(&self, name: &str) -> Option<&HostPlan> {
        self.hosts.iter().find(|h| h.name == name)
    }
    /// Every namespace the lab creates (hosts, then elements).
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self.hosts.iter().map(|h| h.netns.clone()).collect();
        v.extend(self.links.iter().filter_map(|l| l.element_netns.clone()));
        for c in &self.cross {
            v.push(c.near.netns.clone());
            v.push(c.far.netns.clone());
        }
        v
    }
    /// A cross-traffic host by name (`cross<i>a`, `cross<i>b`).
    pub fn cross_end(&self, name: &str) -> Option<&CrossEnd> {
        self.cross
            .iter()
            .flat_map(|c| [&c.near, &c.far])
            .find(|e| e.name == name)
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

/// IPv6 addresses of link `i` of `links`, mirroring [`link_addrs`]: (prefix, left, right).
fn link_addrs6(i: usize, links: usize) -> (Ipv6Addr, Ipv6Addr, Ipv6Addr) {
    let net = |a: u16, b: u16, host: u16| Ipv6Addr::new(0x2001, 0xdb8, a, b, 0, 0, 0, host);
    if i == links - 1 {
        let left = if i == 0 { 0x100 } else { 1 };
        (net(0x113, 0, 0), net(0x113, 0, left), net(0x113, 0, 0x10))
    } else if i == 0 {
        (net(1, 0, 0), net(1, 0, 0x100), net(1, 0, 1))
    } else {
        let n = i as u16;
        (net(0x64, n, 0), net(0x64, n, 2), net(0x64, n, 1))
    }
}

/// Compute the plan for `topology` with namespaces named `<lab_id>-<host>`.
pub fn plan(topology: &Topology, lab_id: &str) -> Plan {
    let names = topology.host_names();
    let nlinks = topology.link_count();
    let v6 = topology.family.has_v6();
    let is_nat = |pos: usize| {
        pos >= 1 && pos <= topology.hops.len() && topology.hops[pos - 1].kind == HopKind::Nat
    };
    let is_nat66 = |pos: usize| is_nat(pos) && topology.hops[pos - 1].nat66;

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
                subnet6: v6.then(|| format!("{}/64", link_addrs6(i, nlinks).0)),
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
            let (_, left6, right6) = link_addrs6(pos - 1, nlinks);
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
                addr6: v6.then_some(right6),
                peer_addr6: v6.then_some(left6),
                mtu6: (v6 && l.down.mtu6 < mtu).then_some(l.down.mtu6),
            });
        }
        if pos < nlinks {
            let l = &links[pos];
            let (_, left, right) = link_addrs(pos, nlinks);
            let (_, left6, right6) = link_addrs6(pos, nlinks);
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
                addr6: v6.then_some(left6),
                peer_addr6: v6.then_some(right6),
                mtu6: (v6 && l.up.mtu6 < mtu).then_some(l.up.mtu6),
            });
        }
        let mut routes = Vec::new();
        if topology.family.has_v4() {
            routes.extend(routes_of(pos, &ifaces, &links, &is_nat, false));
        }
        if v6 {
            routes.extend(routes_of(pos, &ifaces, &links, &is_nat66, true));
        }
        hosts.push(HostPlan {
            name: name.clone(),
            netns: format!("{lab_id}-{name}"),
            position: pos,
            is_nat: is_nat(pos),
            is_nat66: is_nat66(pos),
            ifaces,
            routes,
        });
    }
    let cross = topology
        .cross_links()
        .into_iter()
        .map(|(i, traffic)| cross_plan(i, traffic, &hosts, lab_id))
        .collect();
    Plan {
        family: topology.family,
        hosts,
        links,
        cross,
    }
}

/// The cross hosts of link `i` (between hosts `i` and `i+1`, both hops: validated).
fn cross_plan(i: usize, traffic: CrossTraffic, hosts: &[HostPlan], lab_id: &str) -> CrossPlan {
    let end = |far: bool| {
        let (hop_addr, addr) = cross_subnet(i, far);
        let name = format!("cross{i}{}", if far { 'b' } else { 'a' });
        CrossEnd {
            netns: format!("{lab_id}-{name}"),
            name,
            addr,
            hop: hosts[if far { i + 1 } else { i }].name.clone(),
            hop_iface: format!("x{i}"),
            hop_addr,
        }
    };
    let near_hop = &hosts[i];
    let far_hop_route = (!near_hop.is_nat).then(|| RoutePlan {
        dest: format!("10.201.{i}.0/24"),
        via: IpAddr::V4(
            near_hop
                .iface("wan0")
                .map(|w| w.addr)
                .unwrap_or(Ipv4Addr::UNSPECIFIED),
        ),
        dev: "lan0".into(),
        mtu: None,
    });
    CrossPlan {
        link: i,
        traffic,
        near: end(false),
        far: end(true),
        far_hop_route,
    }
}

/// The routes of the host at `pos` for one family: a default route upstream, and each subnet on
/// the client side while no hop in between `hides` it (NAT for IPv4, NAT66 for IPv6).
fn routes_of(
    pos: usize,
    ifaces: &[IfacePlan],
    links: &[LinkPlan],
    hides: &dyn Fn(usize) -> bool,
    v6: bool,
) -> Vec<RoutePlan> {
    let via = |i: &IfacePlan| -> Option<IpAddr> {
        if v6 {
            i.peer_addr6.map(IpAddr::V6)
        } else {
            Some(IpAddr::V4(i.peer_addr))
        }
    };
    // IPv6 route MTUs come from `net.ipv6.conf.IFACE.mtu` instead (see `IfacePlan::mtu6`).
    let mtu = |i: &IfacePlan| if v6 { None } else { i.route_mtu };
    let mut routes = Vec::new();
    if let Some(wan) = ifaces.iter().find(|i| i.name == "wan0") {
        if let Some(via) = via(wan) {
            routes.push(RoutePlan {
                dest: if v6 { "::/0" } else { "default" }.into(),
                via,
                dev: "wan0".into(),
                mtu: mtu(wan),
            });
        }
    }
    let lan = ifaces.iter().find(|i| i.name == "lan0");
    if let (true, Some(lan), Some(lan_via)) = (pos >= 2, lan, lan.and_then(via)) {
        // Subnet j (j < pos-1) is reachable leftwards while hosts j+1..pos-1 hide nothing.
        for j in (0..pos - 1).rev() {
            if hides(j + 1) {
                break;
            }
            let dest = if v6 {
                links[j].subnet6.clone().unwrap_or_default()
            } else {
                links[j].subnet.clone()
            };
            routes.push(RoutePlan {
                dest,
                via: lan_via,
                dev: "lan0".into(),
                mtu: mtu(lan),
            });
        }
    }
    routes
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
        assert_eq!(c.routes[0].via, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1)));
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
        assert!(p
            .hosts
            .iter()
            .all(|h| h.ifaces.iter().all(|i| i.addr6.is_none())));
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

    #[test]
    fn dual_stack_mirrors_the_ipv4_plan_and_routes_through_an_rfc6092_firewall() {
        let t = Topology::from_toml(
            "family = \"dual\"\n[[hop]]\nkind = \"nat\"\n[[hop]]\n[[link]]\n[[link]]\nmtu6 = 1480\n",
        )
        .unwrap();
        let p = plan(&t, "l");
        let c = p.host("client").unwrap();
        assert_eq!(c.primary_addr6(), Some("2001:db8:1::100".parse().unwrap()));
        assert_eq!(
            p.host("server").unwrap().primary_addr6(),
            Some("2001:db8:113::10".parse().unwrap())
        );
        assert_eq!(
            p.host("hop1").unwrap().iface("wan0").unwrap().addr6,
            Some("2001:db8:64:1::2".parse().unwrap())
        );
        // The NAT44 hides 192.168.1.0/24; IPv6 routes reach the client's /64.
        let dests: Vec<&str> = p
            .host("server")
            .unwrap()
            .routes
            .iter()
            .map(|r| r.dest.as_str())
            .collect();
        assert_eq!(
            dests,
            ["100.64.1.0/24", "2001:db8:64:1::/64", "2001:db8:1::/64"]
        );
        // The v6-only MTU is set on both senders of link 1; IPv4 keeps 1500.
        let hop1_wan = p.host("hop1").unwrap().iface("wan0").unwrap();
        assert_eq!(
            (hop1_wan.mtu, hop1_wan.mtu6, hop1_wan.route_mtu),
            (1500, Some(1480), None)
        );
        assert_eq!(
            p.host("hop2").unwrap().iface("lan0").unwrap().mtu6,
            Some(1480)
        );
    }

    #[test]
    fn nat66_hides_the_client_prefix() {
        let t = Topology::from_toml("family = \"dual\"\n[[hop]]\nkind = \"nat\"\nnat66 = true\n")
            .unwrap();
        let p = plan(&t, "l");
        assert!(p.host("server").unwrap().routes.is_empty());
        assert!(p.host("hop1").unwrap().is_nat66);
    }
}
