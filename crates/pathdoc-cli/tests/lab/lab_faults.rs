//! End-to-end: the link faults a lab injects are what the topology says, measured with real
//! traffic (ping, iperf3) through real kernel parts (nftables, tbf, the delay line).

use crate::support;

use pathdoc_lab::traffic::{iperf3, ping};
use pathdoc_lab::{Lab, Topology};
use support::{assert_nothing_left, binomial_bound, opts, Cleanup};

/// Lab prefix stem of this file: labs are `pdt-<test>-`.
const STEM: &str = "pdt";

#[test]
fn random_and_burst_loss_match_the_setting() {
    let _serial = support::serial();
    let _c = Cleanup::new(STEM, "loss");
    // 5 % random loss client → hop1 only; 2 of every 20 packets hop1 → server.
    let topo = Topology::from_toml(
        "[[hop]]\n[[link]]\n[link.up]\nloss_percent = 5.0\n[[link]]\n[link.up]\nburst_loss = { every_packets = 20, burst_packets = 2 }\n",
    )
    .unwrap();
    let lab = Lab::up(&topo, &opts(STEM, "loss")).unwrap();
    // Random loss: only the requests cross the lossy direction; replies come back clean.
    let hop1 = lab.plan().host("hop1").unwrap().iface("lan0").unwrap().addr;
    let n = 2000u64;
    let s = ping(&lab, "client", hop1.into(), n as u32, 0.001, None).unwrap();
    let lost = (s.transmitted - s.received) as f64;
    let expected = 0.05 * s.transmitted as f64;
    let bound = binomial_bound(s.transmitted, 0.05);
    assert!(
        (lost - expected).abs() <= bound,
        "random loss: lost {lost} of {}, expected {expected:.0} ± {bound:.0}",
        s.transmitted
    );
    // Burst loss to the server: requests pass link 0 (5 %) and link 1 (exactly 10 % in bursts).
    let s = ping(&lab, "client", lab.addr("server"), n as u32, 0.001, None).unwrap();
    let p = 1.0 - 0.95 * 0.90;
    let lost = (s.transmitted - s.received) as f64;
    let bound = binomial_bound(s.transmitted, 0.05) + 2.0;
    assert!(
        (lost - p * s.transmitted as f64).abs() <= bound,
        "random+burst loss: lost {lost} of {}, expected {:.0} ± {bound:.0}",
        s.transmitted,
        p * s.transmitted as f64
    );
    lab.down().unwrap();
    assert_nothing_left(STEM, "loss", &[]);
}

#[test]
fn tbf_rate_limits_each_direction() {
    let _serial = support::serial();
    let _c = Cleanup::new(STEM, "rate");
    let topo = Topology::from_toml("[[hop]]\n[[link]]\n[[link]]\n[link.down]\nrate = \"50 Mbit/s\"\n[link.up]\nrate = \"20 Mbit/s\"\n").unwrap();
    let lab = Lab::up(&topo, &opts(STEM, "rate")).unwrap();
    // tbf counts Ethernet frames (1514 bytes per 1448 bytes of TCP payload with timestamps).
    let goodput_share = 1448.0 / 1514.0;
    for (reverse, rate) in [(true, 50e6), (false, 20e6)] {
        let r = iperf3(&lab, "client", "server", 3, reverse, &[]).unwrap();
        let expected = rate * goodput_share;
        let ratio = r.bits_per_second / expected;
        assert!(
            (0.9..=1.1).contains(&ratio),
            "reverse={reverse}: {} bit/s vs expected {expected:.0} (ratio {ratio:.3})",
            r.bits_per_second
        );
    }
    lab.down().unwrap();
    assert_nothing_left(STEM, "rate", &[]);
}

#[test]
fn delay_line_sets_rtt_and_jitter() {
    let _serial = support::serial();
    let _c = Cleanup::new(STEM, "delay");
    // Link 0: 15 ms each way. Link 1: 10 ms up, 10 ± 4 ms down.
    let topo = Topology::from_toml(
        "[[hop]]\n[[link]]\ndelay_ms = 15.0\n[[link]]\ndelay_ms = 10.0\n[link.down]\njitter_ms = 4.0\n",
    )
    .unwrap();
    let lab = Lab::up(&topo, &opts(STEM, "delay")).unwrap();
    let pids: Vec<u32> = lab.state().processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), 2, "one delay line per delayed link");
    let hop1 = lab.plan().host("hop1").unwrap().iface("lan0").unwrap().addr;
    let s = ping(&lab, "client", hop1.into(), 50, 0.02, None).unwrap();
    assert_eq!(s.received, s.transmitted);
    assert!(
        (s.rtt_avg_ms - 30.0).abs() <= 2.0,
        "RTT {:.2} ms, configured 30 ms",
        s.rtt_avg_ms
    );
    assert!(
        s.rtt_min_ms >= 29.5,
        "min RTT {:.2} below the configured 30 ms",
        s.rtt_min_ms
    );
    // Through both links: 30 + 20 ms ± 4 ms of jitter on one leg.
    let s = ping(&lab, "client", lab.addr("server"), 100, 0.02, None).unwrap();
    assert_eq!(s.received, s.transmitted);
    assert!(
        s.rtt_min_ms >= 50.0 - 4.0 - 0.5,
        "min RTT {:.2}",
        s.rtt_min_ms
    );
    assert!(
        s.rtt_max_ms <= 50.0 + 4.0 + 2.0,
        "max RTT {:.2}",
        s.rtt_max_ms
    );
    assert!(
        (s.rtt_avg_ms - 50.0).abs() <= 2.5,
        "avg RTT {:.2}",
        s.rtt_avg_ms
    );
    assert!(
        s.rtt_mdev_ms >= 0.8 && s.rtt_mdev_ms <= 4.0,
        "jitter (mdev) {:.2} ms for ±4 ms uniform",
        s.rtt_mdev_ms
    );
    // TCP sees the same delay: the kernel's own RTT estimate of a connection over link 0.
    let rtt_ms = tcp_min_rtt_ms(&lab, "client", "hop1", hop1.into());
    assert!(
        (rtt_ms - 30.0).abs() <= 2.0,
        "TCP min RTT {rtt_ms:.2} ms, configured 30 ms"
    );
    lab.down().unwrap();
    assert_nothing_left(STEM, "delay", &pids);
}

/// Open a TCP connection from `client` to a listener in `server` at `addr`, exchange a few
/// round trips of data, and return the client kernel's minimum RTT (TCP_INFO) in ms.
fn tcp_min_rtt_ms(lab: &Lab, client: &str, server: &str, addr: std::net::IpAddr) -> f64 {
    use std::io::{Read, Write};
    let at = std::net::SocketAddr::new(addr, 5411);
    let listener =
        pathdoc_sys::netns::run_in_netns(lab.netns(server), || std::net::TcpListener::bind(at))
            .unwrap()
            .unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 100];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let mut conn = pathdoc_sys::netns::run_in_netns(lab.netns(client), || {
        std::net::TcpStream::connect_timeout(&at, std::time::Duration::from_secs(5))
    })
    .unwrap()
    .unwrap();
    let mut buf = [0u8; 100];
    for _ in 0..5 {
        conn.write_all(&[7u8; 100]).unwrap();
        conn.read_exact(&mut buf).unwrap();
    }
    let info = pathdoc_sys::tcp_info::tcp_info(&conn).unwrap();
    drop(conn);
    echo.join().unwrap();
    f64::from(info.min_rtt) / 1000.0
}

/// `queue_ms` sizes the tbf queue (a bulk upload through a 300 ms queue delays a ping beside it
/// by most of it), and `police` drops what exceeds its rate without queueing anything (the
/// download loses segments while a ping beside it sees no added delay).
#[test]
fn queue_size_and_policer_act_on_real_traffic() {
    let _serial = support::serial();
    let _c = Cleanup::new(STEM, "pol");
    let topo = Topology::from_toml(
        "[[hop]]\n[[link]]\n[[link]]\ndelay_ms = 5.0\n[link.up]\nrate = \"10 Mbit/s\"\nqueue_ms = 300\n[link.down]\npolice = { rate = \"10 Mbit/s\", burst = \"64 KiB\" }\n",
    )
    .unwrap();
    let lab = Lab::up(&topo, &opts(STEM, "pol")).unwrap();
    let server = lab.addr("server");
    let under_load = |reverse: bool| {
        std::thread::scope(|s| {
            let load = s.spawn(|| iperf3(&lab, "client", "server", 4, reverse, &["-C", "cubic"]));
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let p = ping(&lab, "client", server, 10, 0.2, None).unwrap();
            (load.join().unwrap().unwrap(), p)
        })
    };
    let idle = ping(&lab, "client", server, 5, 0.05, None).unwrap();
    let (up, p_up) = under_load(false);
    assert!(
        p_up.rtt_avg_ms > idle.rtt_avg_ms + 150.0,
        "a 300 ms queue under an upload ({} bit/s): ping {} ms vs {} ms idle",
        up.bits_per_second,
        p_up.rtt_avg_ms,
        idle.rtt_avg_ms
    );
    let (down, p_down) = under_load(true);
    assert!(
        p_down.rtt_avg_ms < idle.rtt_avg_ms + 5.0 && down.retransmits > 50,
        "policed download: ping {} ms vs {} ms idle, {} retransmissions",
        p_down.rtt_avg_ms,
        idle.rtt_avg_ms,
        down.retransmits
    );
    // nftables' byte bucket holds one second at the rate plus the burst (docs/lab.md): a 4 s
    // transfer gets at most 10 Mbit/s + (1.25 MB + 64 KiB) · 8 / 4 s ≈ 12.6 Mbit/s.
    assert!(
        down.bits_per_second > 8e6 && down.bits_per_second < 12.8e6,
        "policed download {} bit/s",
        down.bits_per_second
    );
    lab.down().unwrap();
    assert_nothing_left(STEM, "pol", &[]);
}
