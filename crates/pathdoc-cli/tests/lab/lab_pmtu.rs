//! End-to-end: the pmtu-blackhole scenario. Big downloads stall behind a 1420-byte link when the
//! server drops ICMP frag-needed; without that filter PMTU discovery works and they complete.

use crate::support;

use std::time::Duration;

use pathdoc_lab::traffic::download;
use pathdoc_lab::{Lab, Topology};
use support::{assert_nothing_left, opts, Cleanup};

/// Lab prefix stem of this file: labs are `pdt-<test>-`.
const STEM: &str = "pdt";

const MIB: u64 = 1024 * 1024;

#[test]
fn big_download_stalls_small_passes() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "pmtubh");
    let lab = Lab::up(
        &Topology::scenario("pmtu-blackhole").unwrap(),
        &opts(STEM, "pmtubh"),
    )
    .unwrap();
    let small = download(&lab, 1000, Duration::from_secs(3)).unwrap();
    assert!(
        small.completed,
        "1000 bytes fit one small segment: {small:?}"
    );
    let big = download(&lab, MIB, Duration::from_secs(3)).unwrap();
    assert!(
        !big.completed && big.received < MIB / 10,
        "1 MiB must stall: {big:?}"
    );
    lab.down().unwrap();
    assert_nothing_left(STEM, "pmtubh", &[]);
}

#[test]
fn without_the_icmp_filter_pmtud_works() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "pmtuok");
    let mut topo = Topology::scenario("pmtu-blackhole").unwrap();
    topo.server.filters.clear();
    let lab = Lab::up(&topo, &opts(STEM, "pmtuok")).unwrap();
    let big = download(&lab, MIB, Duration::from_secs(5)).unwrap();
    assert!(big.completed, "PMTUD must recover: {big:?}");
    lab.down().unwrap();
    assert_nothing_left(STEM, "pmtuok", &[]);
}
