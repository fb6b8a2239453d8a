//! Issue #20: an attacker spread over the addresses of one IPv6 /64 (or the /64s of a /56) is
//! one client for the server's fairness rule, so its per-client caps bind the whole prefix and
//! a client from another prefix is still served. In a namespace the test creates, the attacker's
//! prefix is local (`ip route add local PREFIX dev lo`, `net.ipv6.ip_nonlocal_bind=1`), so it
//! binds its sockets to hundreds of addresses; the server listens on `[2001:db8:ff::1]` and the
//! legitimate client uses `2001:db8:2::1` (`--bind`). The namespace goes with the guard, also
//! when an assertion fails.

use crate::support;

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pathdoc_bench_scale::attack::Target;
use pathdoc_bench_scale::hold::{Holder, Pool};

const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");
const STEM: &str = "pdf6";
/// Legitimate checks per phase, and how many must be served (≥ 90 %).
const RUNS: u32 = 10;
const SERVED: u32 = 9;
const SERVER_IP: &str = "2001:db8:ff::1";
const CLIENT_IP: &str = "2001:db8:2::1";

/// The test's namespace: loopback up, the server's and the client's addresses, the attacker's
/// prefixes local.
struct Ns {
    name: String,
}

impl Ns {
    fn new(test: &str) -> Ns {
        let name = format!("{}ns", support::prefix(STEM, test));
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip netns add {name}");
        let ns = Ns { name };
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        for addr in [SERVER_IP, CLIENT_IP] {
            ns.exec_ok(&[
                "ip",
                "-6",
                "addr",
                "add",
                &format!("{addr}/128"),
                "dev",
                "lo",
                "nodad",
            ]);
        }
        for prefix in ["2001:db8:1::/64", "2001:db8:200::/56"] {
            ns.exec_ok(&["ip", "-6", "route", "add", "local", prefix, "dev", "lo"]);
        }
        pathdoc_sys::netns::write_sysctl(&ns.name, "net.ipv6.ip_nonlocal_bind", "1").unwrap();
        ns
    }

    fn exec(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).args(args);
        cmd
    }

    fn exec_ok(&self, args: &[&str]) {
        let ok = self.exec(args).status().unwrap().success();
        assert!(ok, "{args:?} in {}", self.name);
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A `pathdoc server` in the namespace; killed on drop.
struct Server {
    child: std::process::Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

impl Server {
    fn start(ns: &Ns, port: u16, flags: &[&str]) -> Server {
        let addr: SocketAddr = format!("[{SERVER_IP}]:{port}").parse().unwrap();
        let log = std::env::temp_dir().join(format!("{}-{port}.log", ns.name));
        let child = ns
            .exec(&[PATHDOC, "server", "--listen", &addr.to_string()])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let server = Server { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = pathdoc_sys::netns::run_in_netns(&ns.name, || {
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            })
            .unwrap();
            if up {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "server did not come up: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// What one phase measured.
#[derive(Debug)]
struct Phase {
    /// Sessions the attacker held when the checks began, and at most.
    held: u32,
    peak: u32,
    served: u32,
    summary: String,
}

/// The attacker holds live mtu sessions from `sources` (`per_address` each, re-taken every
/// 0.2 s); meanwhile `RUNS` checks from `CLIENT_IP`.
fn attack(ns: &Ns, server: &Server, sources: Vec<IpAddr>, per_address: u32) -> Phase {
    let addresses = sources.len();
    let target = Target {
        addr: server.addr,
        pid: server.child.id(),
    };
    pathdoc_sys::netns::run_in_netns(&ns.name, move || {
        // Built on this thread, so its workers (and every socket they open) are in the namespace.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let holder = rt.block_on(async {
            let h = Holder::start_from(
                target,
                Pool::MtuSessions,
                sources,
                per_address,
                Duration::from_millis(200),
            );
            tokio::time::sleep(Duration::from_secs(3)).await;
            h
        });
        let held = holder.held.load(Ordering::Relaxed);
        let mut served = 0;
        let mut first_problem = None;
        for _ in 0..RUNS {
            let mut cmd = Command::new(PATHDOC);
            cmd.args(["check", &server.addr.to_string(), "--bind", CLIENT_IP])
                .args(["--mtu", "--mtu-bulk-ms", "200", "--mtu-wait-ms", "100"])
                .args(["--mtu-max-ttl", "0", "--json"]);
            let (code, out, err) = support::run(cmd, Duration::from_secs(60));
            let report = support::parse_report(code, &out, &err);
            let bad = support::findings(&report)
                .into_iter()
                .find(|f| f["id"] == "check-failed" || f["id"] == "server-busy");
            match bad {
                None if code == 0 || code == 1 => served += 1,
                None => {
                    first_problem.get_or_insert(format!("exit {code}"));
                }
                Some(f) => {
                    first_problem.get_or_insert(f["summary"].to_string());
                }
            }
        }
        let result = rt.block_on(holder.stop());
        let summary = format!(
            "{addresses} attacker addresses × {per_address}: held {held} live sessions when the \
             checks began (peak {}; {}); the other client was served {served} of {RUNS} ({:?})",
            result.peak_held,
            result.outcomes.summary(),
            first_problem
        );
        eprintln!("{summary}");
        Phase {
            held,
            peak: result.peak_held,
            served,
            summary,
        }
    })
    .unwrap()
}

/// `n` addresses of the attacker's /64, spread over its interface ids.
fn one_64(n: u16) -> Vec<IpAddr> {
    (0..n)
        .map(|i| {
            IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0xdb8,
                1,
                0,
                0x1000 + i,
                i.wrapping_mul(7919),
                0,
                i + 1,
            ))
        })
        .collect()
}

/// One address in each of the first `n` /64s of the attacker's /56 (2001:db8:200::/56).
fn the_64s_of_a_56(n: u16) -> Vec<IpAddr> {
    (0..n)
        .map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x200, i, 0, 0, 0, 1)))
        .collect()
}

/// The session pool scaled down: 128 in total, 8 per client. Counted per address, 200
/// addresses fill it (the fair rule needs about 49 groups to leave nothing free).
const POOL: [&str; 4] = ["--max-sessions", "128", "--max-sessions-per-ip", "8"];

#[test]
fn an_attacker_spread_over_one_ipv6_64_is_one_client() {
    let _serial = support::serial();
    let _cleanup = support::Cleanup::new(STEM, "one64");
    let ns = Ns::new("one64");
    // Grouped by /64 (the default): the 200 addresses share one client's cap of 8.
    let grouped = {
        let server = Server::start(&ns, 7224, &POOL);
        attack(&ns, &server, one_64(200), 4)
    };
    // Counted per address (--ipv6-prefix 128), the same attacker takes the pool: the grouping
    // is what protects the other client.
    let per_address = {
        let mut flags = POOL.to_vec();
        flags.extend(["--ipv6-prefix", "128"]);
        let server = Server::start(&ns, 7225, &flags);
        attack(&ns, &server, one_64(200), 4)
    };
    eprintln!(
        "grouped by /64: held {} (peak {}), served {}/{RUNS}; per address: held {} (peak {}), served {}/{RUNS}",
        grouped.held, grouped.peak, grouped.served, per_address.held, per_address.peak, per_address.served
    );
    assert!(
        grouped.peak <= 8,
        "the /64 is one client: {}",
        grouped.summary
    );
    assert!(
        grouped.held >= 1,
        "the attack did not get going: {}",
        grouped.summary
    );
    assert!(grouped.served >= SERVED, "{}", grouped.summary);
    assert!(
        per_address.peak > 8,
        "counted per address the attacker should hold more than one client's cap: {}",
        per_address.summary
    );
}

#[test]
fn an_attacker_spread_over_the_64s_of_a_56_is_one_client_with_ipv6_prefix_56() {
    let _serial = support::serial();
    let _cleanup = support::Cleanup::new(STEM, "one56");
    let ns = Ns::new("one56");
    let mut flags = POOL.to_vec();
    flags.extend(["--ipv6-prefix", "56"]);
    let server = Server::start(&ns, 7224, &flags);
    // Half of a home /56, as in the issue: 128 /64s, 4 sessions from each.
    let phase = attack(&ns, &server, the_64s_of_a_56(128), 4);
    assert!(phase.peak <= 8, "the /56 is one client: {}", phase.summary);
    assert!(
        phase.held >= 1,
        "the attack did not get going: {}",
        phase.summary
    );
    assert!(phase.served >= SERVED, "{}", phase.summary);
}
