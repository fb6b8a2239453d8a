//! End-to-end: conntrack NAT hops. A strict NAT with a 3 s established timeout kills an idle TCP
//! connection for good; a loose NAT rebuilds state from the client's next packet.

use crate::support;

use std::time::Duration;

use pathdoc_lab::traffic::TcpPair;
use pathdoc_lab::{Lab, Topology};
use support::{assert_nothing_left, opts, Cleanup};

/// Lab prefix stem of this file: labs are `pdt-<test>-`.
const STEM: &str = "pdt";

fn nat(strict: bool) -> Topology {
    Topology::from_toml(&format!(
        "[[hop]]\nkind = \"nat\"\nstrict = {strict}\nconntrack = {{ tcp_established = 3 }}\n"
    ))
    .unwrap()
}

#[test]
fn strict_nat_kills_idle_connections_for_good() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "natstrict");
    let lab = Lab::up(&nat(true), &opts(STEM, "natstrict")).unwrap();
    // The client's address is hidden: the server sees the NAT's.
    let mut short = TcpPair::open(&lab).unwrap();
    let mut long = TcpPair::open(&lab).unwrap();
    assert_eq!(long.server.peer_addr().unwrap().ip(), lab.addr("hop1"));
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        short
            .server_to_client(b"after 1 s", Duration::from_secs(2))
            .unwrap(),
        "idle 1 s < 3 s timeout: must arrive"
    );
    std::thread::sleep(Duration::from_secs(4)); // `long` idle for 5 s now
    assert!(
        !long
            .server_to_client(b"after 5 s", Duration::from_millis(1500))
            .unwrap(),
        "idle 5 s > 3 s timeout: must not arrive"
    );
    assert!(
        !long
            .client_to_server(b"client speaks", Duration::from_millis(1500))
            .unwrap(),
        "strict NAT must not rebuild state"
    );
    lab.down().unwrap();
    assert_nothing_left(STEM, "natstrict", &[]);
}

#[test]
fn loose_nat_rebuilds_state_from_client_packets() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "natloose");
    let lab = Lab::up(&nat(false), &opts(STEM, "natloose")).unwrap();
    let mut pair = TcpPair::open(&lab).unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !pair
            .server_to_client(b"after 5 s", Duration::from_millis(1500))
            .unwrap(),
        "state expired: inbound dropped"
    );
    assert!(
        pair.client_to_server(b"client speaks", Duration::from_secs(3))
            .unwrap(),
        "loose NAT passes the client's packet"
    );
    assert!(
        pair.server_to_client(b"welcome back", Duration::from_secs(5))
            .unwrap(),
        "and the connection works again"
    );
    lab.down().unwrap();
    assert_nothing_left(STEM, "natloose", &[]);
}
