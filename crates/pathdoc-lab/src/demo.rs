//! `pathdoc lab demo`: one step per built-in scenario that brings the lab up and shows, with real
//! traffic, the fault it reproduces. Steps are plain data ([`DemoStep`]) so later checks can run
//! their own diagnosis on the same lab (see `extra` hooks in the CLI).

use std::time::Duration;

use pathdoc_core::units::{format_bytes, format_rate};

use crate::error::LabError;
use crate::icmp_count::FragNeededCounter;
use crate::lab::Lab;
use crate::topology::Topology;
use crate::traffic::{self, TcpPair};

/// Where a step writes its observations (one line each).
pub type Say<'a> = &'a mut dyn FnMut(String);

/// One scenario of the demo.
#[derive(Clone, Copy)]
pub struct DemoStep {
    pub scenario: &'static str,
    /// What the step shows.
    pub title: &'static str,
    /// Scale the scenario for a short demo (same code path, shorter timeouts).
    pub adjust: fn(&mut Topology),
    /// Run traffic and report what happened.
    pub show: fn(&Lab, Say) -> Result<(), LabError>,
}

impl std::fmt::Debug for DemoStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoStep")
            .field("scenario", &self.scenario)
            .field("title", &self.title)
            .finish()
    }
}

/// Idle time the demo uses for NAT timeouts: established timeout in seconds after scaling.
pub const DEMO_NAT_TIMEOUT_S: u32 = 3;

fn no_adjust(_: &mut Topology) {}

/// The built-in steps, one per scenario, in order.
pub fn builtin_steps() -> Vec<DemoStep> {
    vec![
        DemoStep {
            scenario: "clean",
            title: "no faults: small RTT, full speed",
            adjust: no_adjust,
            show: show_clean,
        },
        DemoStep {
            scenario: "modem-idle",
            title: "strict NAT forgets an idle connection; nothing revives it",
            adjust: |t| t.hops[0].conntrack.tcp_established = Some(DEMO_NAT_TIMEOUT_S),
            show: show_modem_idle,
        },
        DemoStep {
            scenario: "cgnat-chain",
            title: "carrier NAT times out first; a client packet rebuilds state",
            adjust: |t| t.hops[1].conntrack.tcp_established = Some(DEMO_NAT_TIMEOUT_S),
            show: show_cgnat,
        },
        DemoStep {
            scenario: "pmtu-blackhole",
            title: "a 1000-byte download passes, 1 MiB stalls",
            adjust: no_adjust,
            show: show_pmtu,
        },
        DemoStep {
            scenario: "nic-ignores-mtu",
            title: "ICMP too-big reaches the server, yet downloads crawl",
            adjust: no_adjust,
            show: show_nic_ignores_mtu,
        },
        DemoStep {
            scenario: "lossy-long-fat",
            title: "0.3 % loss at 40 ms RTT caps CUBIC",
            adjust: no_adjust,
            show: show_lossy,
        },
        DemoStep {
            scenario: "window-limited",
            title: "256 KiB receive buffer caps a 100 ms path",
            adjust: no_adjust,
            show: show_window,
        },
        DemoStep {
            scenario: "slow-lossy-duplex",
            title: "uploads crawl, downloads are fine",
            adjust: no_adjust,
            show: show_duplex,
        },
        DemoStep {
            scenario: "ssh-window-limited",
            title: "SSH crawls at 2 MiB/RTT where plain TCP is fast",
            adjust: no_adjust,
            show: show_ssh_window,
        },
        DemoStep {
            scenario: "ssh-cpu-limited",
            title: "a capped CPU: the cipher decides SSH's speed",
            adjust: no_adjust,
            show: show_ssh_cpu,
        },
        DemoStep {
            scenario: "policed-line",
            title: "a 20 Mbit/s policer: heavy loss, no queueing delay",
            adjust: no_adjust,
            show: show_policed,
        },
        DemoStep {
            scenario: "bloated-uplink",
            title: "a 500 ms uplink buffer: ping under an upload",
            adjust: no_adjust,
            show: show_bloated,
        },
        DemoStep {
            scenario: "shared-bottleneck",
            title: "a busy line: this transfer gets its share, not the line's rate",
            adjust: no_adjust,
            show: show_shared,
        },
        DemoStep {
            scenario: "v6-ptb-blackhole",
            title: "IPv4 downloads fine; over IPv6 big packets vanish",
            adjust: no_adjust,
            show: show_v6_ptb,
        },
        DemoStep {
            scenario: "v6-firewall-idle",
            title: "an idle IPv6 connection dies; IPv4 on the same router survives",
            adjust: |t| {
                t.hops[0].conntrack.tcp_established = Some(DEMO_V4_TIMEOUT_S);
                t.hops[0].conntrack6.tcp_established = Some(DEMO_NAT_TIMEOUT_S);
            },
            show: show_v6_idle,
        },
    ]
}

/// The demo's NAT44 timeout in `v6-firewall-idle`: longer than the IPv6 firewall's
/// [`DEMO_NAT_TIMEOUT_S`], as 600 s is longer than 60 s in the scenario.
pub const DEMO_V4_TIMEOUT_S: u32 = 8;

/// One `ping -M do` of a whole `packet`-byte IP packet from the client, summarised.
fn df_ping(lab: &Lab, server: std::net::IpAddr, packet: u32) -> Result<String, LabError> {
    let v6 = server.is_ipv6();
    let payload = packet - if v6 { 48 } else { 28 };
    let (fam, server) = (if v6 { "-6" } else { "-4" }, server.to_string());
    let args = ["-n", fam, "-M", "do", "-c", "2", "-W", "1", "-i", "0.3"];
    let size = payload.to_string();
    let mut cmd = lab.command("client", "ping");
    cmd.args(args).args(["-s", &size, &server]);
    let out = crate::exec::run_unchecked(&mut cmd, None, Duration::from_secs(5))?;
    let text = format!("{}{}", out.stdout, out.stderr);
    let summary = text
        .lines()
        .find(|l| l.contains("too long") || l.contains("Packet too big"))
        .or_else(|| text.lines().find(|l| l.contains("packets transmitted")))
        .unwrap_or("no output")
        .trim()
        .to_string();
    Ok(format!(
        "ping {fam} -M do -s {size} ({packet} B packets): {summary}"
    ))
}

fn show_v6_ptb(lab: &Lab, say: Say) -> Result<(), LabError> {
    let (v4, v6) = (lab.addr("server"), lab.addr_in("server", true));
    let v6 = v6.ok_or_else(|| LabError::Measurement("the lab carries no IPv6".into()))?;
    // Downloads first: once the client has met the tunnel itself (ping, tracepath) its kernel
    // advertises a smaller MSS and TCP downloads are protected for ~10 min.
    for server in [v4, v6] {
        let t = traffic::download_in(lab, server, 1024 * 1024, Duration::from_secs(4))?;
        say(format!(
            "download 1 MiB over {}: {} after {} ms{}",
            if server.is_ipv6() { "IPv6" } else { "IPv4" },
            if t.completed { "complete" } else { "STALLED" },
            t.elapsed_ms,
            if t.completed {
                String::new()
            } else {
                format!(", only {} received", format_bytes(t.received))
            }
        ));
    }
    say(df_ping(lab, v4, 1500)?);
    say(df_ping(lab, v6, 1500)?);
    if crate::preflight::require_tools(&["tracepath"]).is_ok() {
        let mut cmd = lab.command("client", "tracepath");
        cmd.args(["-6", "-n", "-m", "6", &v6.to_string()]);
        let out = crate::exec::run_unchecked(&mut cmd, None, Duration::from_secs(15))?;
        if let Some(line) = out.stdout.lines().find(|l| l.contains("Resume")) {
            say(format!(
                "tracepath -6 from the client: {} (the client's own side of PMTUD works; the server's never hears of the tunnel)",
                line.trim()
            ));
        }
    }
    // What the client learned above would protect its downloads; pathdoc's check should see
    // the path as a client that has not met the tunnel yet.
    let _ = lab.run(
        "client",
        "ip",
        &["-6", "route", "flush", "cache"],
        Duration::from_secs(3),
    );
    say("flushed the client's IPv6 route cache (the PMTU ping and tracepath taught it)".into());
    Ok(())
}

fn show_v6_idle(lab: &Lab, say: Say) -> Result<(), LabError> {
    let v6 = lab
        .addr_in("server", true)
        .ok_or_else(|| LabError::Measurement("the lab carries no IPv6".into()))?;
    let idle = Duration::from_secs(u64::from(DEMO_NAT_TIMEOUT_S) + 2);
    let mut pairs = Vec::new();
    for server in [lab.addr("server"), v6] {
        let mut pair = TcpPair::open_to(lab, server)?;
        let ok = pair.server_to_client(b"hello", Duration::from_secs(2))?;
        pairs.push((server, pair, ok));
    }
    say(format!(
        "idle for {} s (IPv6 firewall timeout {DEMO_NAT_TIMEOUT_S} s, NAT44 {DEMO_V4_TIMEOUT_S} s)...",
        idle.as_secs()
    ));
    std::thread::sleep(idle);
    for (server, mut pair, fresh) in pairs {
        let ok = pair.server_to_client(b"ping after idle", Duration::from_secs(2))?;
        say(format!(
            "{} connection to {server}: fresh {}, after idle server → client {}",
            if server.is_ipv6() { "IPv6" } else { "IPv4" },
            if fresh { "arrives" } else { "LOST" },
            if ok {
                "arrives"
            } else {
                "never arrives (the firewall forgot the connection)"
            }
        ));
    }
    Ok(())
}

fn rtt(lab: &Lab, say: Say) -> Result<(), LabError> {
    let p = traffic::ping(lab, "client", lab.addr("server"), 10, 0.05, None)?;
    say(format!(
        "ping client → server: {}/{} replies, RTT min/avg/max {:.1}/{:.1}/{:.1} ms",
        p.received, p.transmitted, p.rtt_min_ms, p.rtt_avg_ms, p.rtt_max_ms
    ));
    Ok(())
}

fn rate(lab: &Lab, say: Say, label: &str, reverse: bool) -> Result<f64, LabError> {
    // CUBIC per socket: the namespaces inherit the machine's default, which may be BBR (and a
    // netns may not switch its default to a congestion control outside the allowed list).
    let r = traffic::iperf3(lab, "client", "server", 3, reverse, &["-C", "cubic"])?;
    say(format!(
        "iperf3 {label} (CUBIC): {} goodput, {} retransmissions",
        format_rate(r.bits_per_second),
        r.retransmits
    ));
    Ok(r.bits_per_second)
}

fn show_clean(lab: &Lab, say: Say) -> Result<(), LabError> {
    rtt(lab, say)?;
    rate(lab, say, "download (server → client)", true)?;
    Ok(())
}

fn idle_then_probe(lab: &Lab, say: Say, idle: Duration) -> Result<TcpPair, LabError> {
    let mut pair = TcpPair::open(lab)?;
    let ok = pair.server_to_client(b"hello", Duration::from_secs(2))?;
    say(format!(
        "fresh connection: server → client {}",
        if ok { "arrives" } else { "LOST" }
    ));
    say(format!(
        "idle for {} s (NAT established timeout {} s)...",
        idle.as_secs(),
        DEMO_NAT_TIMEOUT_S
    ));
    std::thread::sleep(idle);
    let ok = pair.server_to_client(b"ping after idle", Duration::from_secs(2))?;
    say(format!(
        "after idle: server → client {}",
        if ok {
            "arrives"
        } else {
            "never arrives (NAT state is gone, dropped silently)"
        }
    ));
    Ok(pair)
}

fn show_modem_idle(lab: &Lab, say: Say) -> Result<(), LabError> {
    let mut pair = idle_then_probe(lab, say, Duration::from_secs(DEMO_NAT_TIMEOUT_S as u64 + 2))?;
    let ok = pair.client_to_server(b"are you there?", Duration::from_secs(2))?;
    say(format!(
        "client speaks: client → server {}",
        if ok {
            "arrives"
        } else {
            "dropped too: the strict NAT does not rebuild state mid-stream, the session is dead"
        }
    ));
    Ok(())
}

fn show_cgnat(lab: &Lab, say: Say) -> Result<(), LabError> {
    let mut pair = idle_then_probe(lab, say, Duration::from_secs(DEMO_NAT_TIMEOUT_S as u64 + 2))?;
    let ok = pair.client_to_server(b"are you there?", Duration::from_secs(3))?;
    say(format!(
        "client speaks: client → server {}",
        if ok {
            "arrives (the loose carrier NAT rebuilt state)"
        } else {
            "LOST"
        }
    ));
    let ok = pair.server_to_client(b"yes", Duration::from_secs(5))?;
    say(format!(
        "then server → client {}",
        if ok {
            "arrives again: client keepalives would have saved it"
        } else {
            "LOST"
        }
    ));
    Ok(())
}

fn show_pmtu(lab: &Lab, say: Say) -> Result<(), LabError> {
    for bytes in [1000, 1024 * 1024] {
        let t = traffic::download(lab, bytes, Duration::from_secs(4))?;
        say(format!(
            "download {}: {} after {} ms{}",
            format_bytes(bytes),
            if t.completed { "complete" } else { "STALLED" },
            t.elapsed_ms,
            if t.completed {
                String::new()
            } else {
                format!(", only {} received", format_bytes(t.received))
            }
        ));
    }
    Ok(())
}

fn show_nic_ignores_mtu(lab: &Lab, say: Say) -> Result<(), LabError> {
    let counter = FragNeededCounter::install(lab, "server")?;
    let small = traffic::download(lab, 1000, Duration::from_secs(4))?;
    say(format!(
        "download {}: {} after {} ms",
        format_bytes(small.requested),
        if small.completed {
            "complete"
        } else {
            "STALLED"
        },
        small.elapsed_ms
    ));
    let big = traffic::download(lab, 4 << 20, Duration::from_secs(4))?;
    say(format!(
        "download {}: {} in {} ms ({} goodput)",
        format_bytes(big.requested),
        if big.completed {
            "complete"
        } else {
            "CRAWLING"
        },
        big.elapsed_ms,
        format_rate(big.received as f64 * 8.0 / (big.elapsed_ms.max(1) as f64 / 1000.0))
    ));
    rate(lab, say, "download (server → client)", true)?;
    say(format!(
        "ICMP frag-needed arriving at the server: {} packets — PMTUD is signalled, but the NIC keeps sending 1500-byte frames",
        counter.packets()?
    ));
    Ok(())
}

fn show_lossy(lab: &Lab, say: Say) -> Result<(), LabError> {
    rtt(lab, say)?;
    rate(lab, say, "download on a 1 Gbit/s link", true)?;
    Ok(())
}

fn show_window(lab: &Lab, say: Say) -> Result<(), LabError> {
    rtt(lab, say)?;
    let bps = rate(lab, say, "download on a 1 Gbit/s link", true)?;
    say(format!(
        "256 KiB / 100 ms = {} is the ceiling; measured {}",
        format_rate(262144.0 * 8.0 / 0.1),
        format_rate(bps)
    ));
    Ok(())
}

fn show_duplex(lab: &Lab, say: Say) -> Result<(), LabError> {
    rate(lab, say, "download (server → client)", true)?;
    rate(lab, say, "upload (client → server, bursty loss)", false)?;
    Ok(())
}

fn show_ssh_window(lab: &Lab, say: Say) -> Result<(), LabError> {
    rtt(lab, say)?;
    rate(lab, say, "download (plain TCP)", true)?;
    let t = traffic::ssh_transfer(
        lab,
        "server",
        64 << 20,
        "aes128-gcm@openssh.com",
        true,
        Duration::from_secs(60),
    )?;
    say(format!(
        "ssh download of {} (aes128-gcm): {} in {:.1} s including login and slow start, {} goodput; 2 MiB / 100 ms = {}",
        format_bytes(t.bytes),
        format_bytes(t.bytes),
        t.seconds,
        format_rate(t.bits_per_second()),
        format_rate(2.0 * 1048576.0 * 8.0 / 0.1)
    ));
    Ok(())
}

fn show_ssh_cpu(lab: &Lab, say: Say) -> Result<(), LabError> {
    rate(lab, say, "upload (plain TCP)", false)?;
    for cipher in ["chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com"] {
        let t = traffic::ssh_transfer(
            lab,
            "server",
            400 << 20,
            cipher,
            false,
            Duration::from_secs(60),
        )?;
        say(format!(
            "ssh upload of {} with {cipher}: {} goodput including login (server CPU capped at 10 % of a core)",
            format_bytes(t.bytes),
            format_rate(t.bits_per_second())
        ));
    }
    Ok(())
}

/// Ping client → server while an iperf3 transfer (CUBIC, 4 s) loads one direction: the RTT an
/// interactive session beside a bulk transfer sees.
fn ping_under_load(lab: &Lab, say: Say, label: &str, reverse: bool) -> Result<(), LabError> {
    let (load, ping) = std::thread::scope(|s| {
        let load =
            s.spawn(|| traffic::iperf3(lab, "client", "server", 4, reverse, &["-C", "cubic"]));
        // Let the transfer fill the queue before probing.
        std::thread::sleep(Duration::from_millis(1500));
        let ping = traffic::ping(lab, "client", lab.addr("server"), 10, 0.2, None);
        let load = load
            .join()
            .unwrap_or_else(|_| Err(LabError::Measurement("iperf3 thread panicked".into())));
        (load, ping)
    });
    let (load, ping) = (load?, ping?);
    say(format!(
        "ping during iperf3 {label} (CUBIC, {}, {} retransmissions): RTT min/avg/max {:.1}/{:.1}/{:.1} ms, {}/{} replies",
        format_rate(load.bits_per_second),
        load.retransmits,
        ping.rtt_min_ms,
        ping.rtt_avg_ms,
        ping.rtt_max_ms,
        ping.received,
        ping.transmitted
    ));
    Ok(())
}

fn show_policed(lab: &Lab, say: Say) -> Result<(), LabError> {
    rtt(lab, say)?;
    ping_under_load(lab, say, "download", true)?;
    rate(lab, say, "upload (policed)", false)?;
    say("the RTT hardly grows while the retransmissions pile up: a policer drops, it does not queue".into());
    Ok(())
}

fn show_bloated(lab: &Lab, say: Say) -> Result<(), LabError> {
    rtt(lab, say)?;
    ping_under_load(lab, say, "upload", false)?;
    ping_under_load(lab, say, "download", true)?;
    Ok(())
}

fn show_shared(lab: &Lab, say: Say) -> Result<(), LabError> {
    let flows: u32 = lab.plan().cross.iter().map(|c| c.traffic.flows).sum();
    say(format!(
        "{flows} background bulk flow(s) between two other hosts keep the 50 Mbit/s line busy"
    ));
    // The idle RTT is 40 ms; the neighbours' standing queue already shows in a plain ping.
    rtt(lab, say)?;
    let got = rate(lab, say, "download (server → client)", true)?;
    say(format!(
        "the line carries 50 Mbit/s; this transfer got {} ({:.0} %) beside {flows} other flow(s), whose fair share each would be 1/{} ({:.0} %)",
        format_rate(got),
        got / 50e6 * 100.0,
        flows + 1,
        100.0 / f64::from(flows + 1)
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_step_per_scenario_and_adjustments_apply() {
        let steps = builtin_steps();
        let names: Vec<&str> = steps.iter().map(|s| s.scenario).collect();
        assert_eq!(names, crate::scenarios::names());
        for s in steps {
            let mut t = Topology::scenario(s.scenario).unwrap();
            (s.adjust)(&mut t);
            t.validate().unwrap();
        }
    }
}
