//! Cross traffic: background bulk flows across one link between two extra hosts, so a
//! diagnosed transfer shares the link's queue with traffic it cannot see — the neighbours on a
//! busy access line. Real sockets: iperf3 (`-P flows`, `-C cc`, `-R` for `down`), the server on
//! the server-side host, the client (which opens the connections, so a NAT hop lets them in) on
//! the client-side one. The hosts' processes are the lab's daemons: killed with it.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::error::LabError;
use crate::exec;
use crate::plan::{CrossEnd, CrossPlan, Plan};
use crate::topology::Direction;

/// The iperf3 port the cross flows use (iperf3's default).
pub const PORT: u16 = 5201;
/// How long the flows run: iperf3's longest test; the lab stops them long before.
pub const DURATION_S: u32 = 86_400;
/// How long the iperf3 server may take to listen, and the client to get its flows going.
pub const START_PATIENCE: Duration = Duration::from_secs(5);

/// `ip -batch` lines for one end: the veth pair from its hop, addresses, the cross host's default
/// route through its hop.
fn wire_batch(end: &CrossEnd) -> (String, String) {
    let hop = format!(
        "link add name {iface} type veth peer name eth0 netns {ns}\n\
         addr add {hop_addr}/24 dev {iface}\nlink set dev {iface} up\n",
        iface = end.hop_iface,
        ns = end.netns,
        hop_addr = end.hop_addr,
    );
    let host = format!(
        "addr add {}/24 dev eth0\nlink set dev eth0 up\nroute replace default via {} dev eth0\n",
        end.addr, end.hop_addr
    );
    (hop, host)
}

/// Build the two ends of `c`: veth pairs, addresses, routes, offloads off (the shaper must see
/// MTU-sized packets, as for every lab link). The congestion control is set per socket (iperf3
/// `-C`, which the server applies too): a namespace may not switch its default to one outside
/// the allowed list.
pub(crate) fn wire(plan: &Plan, c: &CrossPlan) -> Result<(), LabError> {
    for end in [&c.near, &c.far] {
        let hop_ns = plan
            .host(&end.hop)
            .map(|h| h.netns.clone())
            .ok_or_else(|| LabError::Topology(format!("no host {} for {}", end.hop, end.name)))?;
        let (hop_batch, host_batch) = wire_batch(end);
        for (ns, batch) in [(&hop_ns, &hop_batch), (&end.netns, &host_batch)] {
            exec::run(
                Command::new("ip").args(["-n", ns, "-batch", "-"]),
                Some(batch),
                exec::QUICK,
            )?;
        }
        for (ns, iface) in [(&hop_ns, end.hop_iface.as_str()), (&end.netns, "eth0")] {
            exec::in_netns(
                ns,
                "ethtool",
                &["-K", iface, "tso", "off", "gso", "off", "gro", "off"],
                None,
            )?;
        }
    }
    if let (Some(r), Some(far_hop)) = (&c.far_hop_route, plan.host(&c.far.hop)) {
        exec::ip(
            Some(&far_hop.netns),
            &[
                "route",
                "replace",
                &r.dest,
                "via",
                &r.via.to_string(),
                "dev",
                &r.dev,
            ],
        )?;
    }
    Ok(())
}

/// The end whose sockets send the cross flows' data.
pub fn sender(c: &CrossPlan) -> &CrossEnd {
    match c.traffic.direction {
        Direction::Down => &c.far,
        Direction::Up => &c.near,
    }
}

/// The iperf3 server's arguments (on the far end).
pub fn server_args(c: &CrossPlan) -> Vec<String> {
    vec![
        "-s".into(),
        "-B".into(),
        c.far.addr.to_string(),
        "-p".into(),
        PORT.to_string(),
    ]
}

/// The iperf3 client's arguments (on the near end): `flows` parallel streams for a day, data
/// towards the client side (`-R`) for `down`.
pub fn client_args(c: &CrossPlan) -> Vec<String> {
    let mut args: Vec<String> = [
        "-c",
        &c.far.addr.to_string(),
        "-p",
        &PORT.to_string(),
        "-P",
        &c.traffic.flows.to_string(),
        "-t",
        &DURATION_S.to_string(),
        "-C",
        &c.traffic.cc,
        "-i",
        "10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if c.traffic.direction == Direction::Down {
        args.push("-R".into());
    }
    args
}

/// Whether a TCP socket listens on `addr` in the calling thread's namespace (`/proc/net/tcp`
/// through `thread-self`: the namespace of the thread, not the process).
fn listening(addr: SocketAddr) -> bool {
    let SocketAddr::V4(v4) = addr else {
        return false;
    };
    let want = format!(
        "{:08X}:{:04X} 00000000:0000 0A",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    std::fs::read_to_string("/proc/thread-self/net/tcp").is_ok_and(|t| t.contains(&want))
}

/// Wait until the iperf3 server of `c` listens, within [`START_PATIENCE`].
pub(crate) fn wait_listening(c: &CrossPlan) -> Result<(), LabError> {
    let addr = SocketAddr::from((c.far.addr, PORT));
    let deadline = Instant::now() + START_PATIENCE;
    while Instant::now() < deadline {
        if pathdoc_sys::netns::run_in_netns(&c.far.netns, move || listening(addr))? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(LabError::Topology(format!(
        "cross traffic on link {}: iperf3 did not listen on {addr} within {:?}",
        c.link, START_PATIENCE
    )))
}
