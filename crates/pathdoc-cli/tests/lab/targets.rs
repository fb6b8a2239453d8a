//! Server targets as users write them: `host:port` with a host name, `[v6]:port`, a bare IPv6
//! address, `-4`/`-6`, a name with several addresses of which the first is dead (tried with a
//! stagger, not after a timeout), and `--bind` for the source address.
//!
//! Names come from a hosts file private to a test network namespace (`ip netns exec` mounts
//! `/etc/netns/<ns>/hosts` over `/etc/hosts`), so no system file is touched; the guard removes the
//! namespace, the file and the server even when an assertion fails.

use crate::support;

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");
const STEM: &str = "pdn";

/// Quick mtu check options: no hop location, no bulk download.
const QUICK_MTU: &[&str] = &["--mtu", "--mtu-max-ttl", "0", "--mtu-bulk", "0s", "--json"];

/// A network namespace with loopback up, its own hosts file and a `pathdoc server`.
struct Netns {
    name: String,
    server: Option<std::process::Child>,
}

impl Netns {
    fn new(test: &str, hosts: &str) -> Netns {
        let name = format!("{}ns", support::prefix(STEM, test));
        // A crashed earlier run's leftovers (quietly: usually there are none).
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let ns = Netns { name, server: None };
        ns.ip(&["netns", "add", &ns.name]);
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        std::fs::create_dir_all(ns.etc()).unwrap();
        std::fs::write(ns.etc().join("hosts"), hosts).unwrap();
        ns
    }

    fn etc(&self) -> std::path::PathBuf {
        std::path::Path::new("/etc/netns").join(&self.name)
    }

    fn ip(&self, args: &[&str]) {
        let ok = Command::new("ip").args(args).status().unwrap().success();
        assert!(ok, "ip {args:?}");
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

    /// `pathdoc server --listen addr`, returning once it accepts connections.
    fn start_server(&mut self, listen: SocketAddr) {
        let child = self
            .exec(&[PATHDOC, "server", "--listen", &listen.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.server = Some(child);
        let probe = if listen.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], listen.port()))
        } else {
            listen
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = pathdoc_sys::netns::run_in_netns(&self.name, || {
                TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_ok()
            })
            .unwrap();
            if up {
                return;
            }
            assert!(Instant::now() < deadline, "server did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run `pathdoc ARGS` in the namespace: (exit code, stdout, stderr, seconds).
    fn pathdoc(&self, args: &[&str]) -> (i32, String, String, f64) {
        let mut cmd = self.exec(&[PATHDOC]);
        cmd.args(args);
        let t0 = Instant::now();
        let (code, out, err) = support::run(cmd, Duration::from_secs(60));
        (code, out, err, t0.elapsed().as_secs_f64())
    }

    fn report(&self, args: &[&str]) -> (Value, f64) {
        let (code, out, err, secs) = self.pathdoc(args);
        let report = support::parse_report(code, &out, &err);
        assert!(
            [0, 1, 3].contains(&code),
            "{args:?}: exit {code}\n{out}{err}"
        );
        (report, secs)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::fs::remove_dir_all(self.etc());
    }
}

fn port() -> u16 {
    support::free_loopback_port()
}

#[test]
fn a_host_name_with_a_port_works_on_loopback() {
    let _shared = crate::support::shared();
    let listen = format!("127.0.0.1:{}", port());
    let mut server = Command::new(PATHDOC)
        .args(["server", "--listen", &listen])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&listen).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let target = listen.replace("127.0.0.1", "localhost");
    let mut cmd = Command::new(PATHDOC);
    cmd.arg("check").arg(&target).args(QUICK_MTU);
    let (code, out, err) = support::run(cmd, Duration::from_secs(60));
    let _ = server.kill();
    let _ = server.wait();
    let report = support::parse_report(code, &out, &err);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(report["target"], format!("{target} ({listen})"));
}

#[test]
fn ipv6_forms_and_address_families() {
    let _shared = crate::support::shared();
    let p = port();
    let mut ns = Netns::new("fam", "127.0.0.1 localhost\n::1 multi\n127.0.0.1 multi\n");
    // Dual-stack: one server answers on ::1 and 127.0.0.1.
    ns.start_server(format!("[::]:{p}").parse().unwrap());
    let target = |r: &Value| r["target"].as_str().unwrap().to_string();
    let ps = p.to_string();

    let (r, _) = ns.report(&[&["check", &format!("[::1]:{p}")], QUICK_MTU].concat());
    assert_eq!(target(&r), format!("[::1]:{p}"));
    let (r, _) = ns.report(&[&["check", "::1", "--port", &ps], QUICK_MTU].concat());
    assert_eq!(target(&r), format!("[::1]:{p}"));
    let (r, _) = ns.report(&[&["check", &format!("multi:{p}"), "-6"], QUICK_MTU].concat());
    assert_eq!(target(&r), format!("multi:{p} ([::1]:{p})"));
    let (r, _) = ns.report(&[&["check", &format!("multi:{p}"), "-4"], QUICK_MTU].concat());
    assert_eq!(target(&r), format!("multi:{p} (127.0.0.1:{p})"));
    // `localhost` has no IPv6 address in this hosts file.
    let (code, out, err, _) =
        ns.pathdoc(&["check", &format!("localhost:{p}"), "-6", "--json", "-q"]);
    assert_eq!(code, 2, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["error"]["kind"], "resolve", "{doc:#}");
    assert!(doc["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no IPv6 address"));
}

#[test]
fn a_dead_first_address_costs_a_stagger_not_a_timeout() {
    let _shared = crate::support::shared();
    let p = port();
    let mut ns = Netns::new("dead", "::1 multi\n127.0.0.1 multi\n");
    ns.start_server(format!("127.0.0.1:{p}").parse().unwrap());
    // The first address (::1) drops every SYN: a connect there would hang for the full timeout.
    let rules = format!(
        "table inet pdn {{\n chain input {{\n  type filter hook input priority 0;\n  ip6 daddr ::1 tcp dport {p} drop\n }}\n}}\n"
    );
    let mut nft = ns.exec(&["nft", "-f", "-"]);
    nft.stdin(Stdio::piped());
    let mut child = nft.spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), rules.as_bytes()).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "nft rules");

    let (r, secs) = ns.report(&[&["check", &format!("multi:{p}")], QUICK_MTU].concat());
    assert_eq!(r["target"], format!("multi:{p} (127.0.0.1:{p})"));
    // Sequential attempts would spend the 10-s connect timeout on ::1 first; both families are
    // reached at once, and the silent one gets 4 s more once the other answered.
    assert!(secs < 8.0, "took {secs:.1} s");
    // The name has both families, so the silent one is a finding of its own.
    let lost = crate::support::finding(&r, "family-unreachable");
    assert_eq!(lost["status"], "warn", "{lost:#}");
    assert_eq!(lost["family"], "ipv6", "{lost:#}");
    assert!(
        lost["title"].as_str().unwrap().starts_with("IPv6 only: "),
        "{lost:#}"
    );

    // Only the dead family: unreachable, found once, with the firewall hint.
    let (code, out, err, secs) =
        ns.pathdoc(&["check", &format!("multi:{p}"), "-6", "--json", "-q"]);
    assert_eq!(code, 2, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["error"]["kind"], "unreachable", "{doc:#}");
    assert!(doc["error"]["hint"].as_str().unwrap().contains("firewall"));
    assert!(secs < 15.0, "took {secs:.1} s");
}

#[test]
fn bind_sets_the_source_address_of_the_checks() {
    let _shared = crate::support::shared();
    let p = port();
    let mut ns = Netns::new("bind", "127.0.0.1 localhost\n");
    ns.start_server(format!("127.0.0.1:{p}").parse().unwrap());
    let target = format!("127.0.0.1:{p}");
    let (r, _) = ns.report(&[&["check", &target, "--bind", "127.0.0.2"], QUICK_MTU].concat());
    let seen = r["data"]["mtu"]["client_observed"].as_str().unwrap_or("");
    assert!(seen.starts_with("127.0.0.2:"), "server saw {seen:?}: {r:#}");
    // The throughput check's connections bind too (they would fail on a wrong family).
    let (code, out, err, _) = ns.pathdoc(&[
        "check",
        &target,
        "--bind",
        "127.0.0.2",
        "--throughput",
        "--throughput-time",
        "500ms",
        "--json",
    ]);
    let r = support::parse_report(code, &out, &err);
    assert!(
        support::find(&r, "check-failed").is_none(),
        "{:?}",
        support::ids(&r)
    );
}
