//! Shared support of the end-to-end tests: unique lab prefixes, a cleanup guard that runs even
//! when a test panics, a `pathdoc server` guard that waits until it accepts connections, running
//! the built binary with a deadline and reading its JSON report, and the "nothing is left behind"
//! assertion. Each test binary uses a subset.

#![allow(dead_code)]

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pathdoc_lab::{state, Lab, LabError, LabOptions, LabProcess, Topology};
use serde_json::Value;

pub mod package;

/// The built `pathdoc` binary.
pub const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");

/// Port the lab tests run `pathdoc server` on (the client's default port).
pub const SERVER_PORT: u16 = 7224;

/// Options for a test lab: its own prefix `<stem>-<test>-`, delay lines run by the built binary.
/// `stem` is the test file's own (e.g. `pdt`, `pdi`), so prefixes stay unique per file and test.
pub fn opts(stem: &str, test: &str) -> LabOptions {
    LabOptions {
        name: None,
        prefix: prefix(stem, test),
        helper_exe: Some(PathBuf::from(PATHDOC)),
    }
}

/// `PATHDOC_TEST_NS_TAG` (optional) goes first so two checkouts can run the same tests on one
/// machine at once without tearing down each other's namespaces.
pub fn prefix(stem: &str, test: &str) -> String {
    let tag = std::env::var("PATHDOC_TEST_NS_TAG").unwrap_or_default();
    format!("{tag}{stem}-{test}-")
}

/// Removes everything with the test's prefix when dropped (also on panic), after the `Lab`s
/// themselves had their chance.
pub struct Cleanup(pub String);

impl Cleanup {
    pub fn new(stem: &str, test: &str) -> Self {
        let p = prefix(stem, test);
        // A previous crashed run of the same test must not make this one fail.
        let _ = state::destroy_all(&p);
        Cleanup(p)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = state::destroy_all(&self.0);
    }
}

/// Wait (at most 10 s) until `addr` accepts a TCP connection made from `host`'s namespace.
pub fn wait_listening(lab: &Lab, host: &str, addr: SocketAddr) {
    let ns = lab.netns(host).to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let up = pathdoc_sys::netns::run_in_netns(&ns, || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(300))
        })
        .expect("enter the namespace");
        if up.is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nothing listening at {addr} (seen from {host}) within 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The address family a lab test's check runs over. Table-driven tests list the families they
/// run (`for ip in [Ip::V4, Ip::V6]`); which test runs where is in docs/lab.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ip {
    V4,
    V6,
}

impl Ip {
    /// The topology for this family: unchanged for IPv4 (an IPv4-only lab, as before issue 21),
    /// dual-stack for IPv6 so the same hops, links and faults carry IPv6 too.
    pub fn topology(self, t: &Topology) -> Topology {
        let mut t = t.clone();
        if self == Ip::V6 && !t.family.has_v6() {
            t.family = pathdoc_lab::topology::Family::Dual;
        }
        t
    }
    /// A suffix that keeps lab names unique per family.
    pub fn tag(self) -> &'static str {
        match self {
            Ip::V4 => "4",
            Ip::V6 => "6",
        }
    }
}

/// `pathdoc server` in the lab's server host, killed on drop (or by `Lab::down`).
pub struct PathdocServer {
    _process: LabProcess,
    addr: SocketAddr,
}

impl PathdocServer {
    /// Start it on [`SERVER_PORT`] and return once the client host can connect to it.
    pub fn start(lab: &Lab) -> Self {
        Self::start_with(lab, &[])
    }

    /// The same with extra `pathdoc server` arguments (limits).
    pub fn start_with(lab: &Lab, extra: &[&str]) -> Self {
        Self::start_in(lab, extra, Ip::V4)
    }

    /// The same, reached over `ip` (IPv6: listening on `[::]`, in a lab that carries IPv6).
    pub fn start_in(lab: &Lab, extra: &[&str], ip: Ip) -> Self {
        let v6 = ip == Ip::V6 || lab.addr("server").is_ipv6();
        let listen = if v6 {
            format!("[::]:{SERVER_PORT}")
        } else {
            format!("0.0.0.0:{SERVER_PORT}")
        };
        let mut cmd = lab.command("server", PATHDOC);
        cmd.args(["server", "--listen", &listen])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let process = lab.spawn("server", cmd).expect("spawn pathdoc server");
        let host = lab
            .addr_in("server", v6)
            .expect("the lab carries the test's family");
        let addr = SocketAddr::new(host, SERVER_PORT);
        wait_listening(lab, "client", addr);
        PathdocServer {
            _process: process,
            addr,
        }
    }

    /// `address:port` as the client passes it.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// The server's address in the test's family.
    pub fn ip(&self) -> IpAddr {
        self.addr.ip()
    }
}

/// A lab with `pathdoc server` running and the test's cleanup guard. Field order is drop order:
/// the server dies before the lab, the lab before the cleanup sweep.
pub struct ServerLab {
    pub server: PathdocServer,
    pub lab: Lab,
    _cleanup: Cleanup,
}

impl ServerLab {
    pub fn up(stem: &str, test: &str, topology: &Topology) -> Self {
        Self::up_with(stem, test, topology, &[])
    }

    /// The same with extra `pathdoc server` arguments.
    pub fn up_with(stem: &str, test: &str, topology: &Topology, server_args: &[&str]) -> Self {
        Self::up_in(stem, test, topology, server_args, Ip::V4)
    }

    /// A lab for one family of a table-driven test: the topology made dual-stack for IPv6, the
    /// lab named `<test><4|6>`, and `server.addr()` in that family.
    pub fn up_ip(stem: &str, test: &str, topology: &Topology, ip: Ip) -> Self {
        let test = format!("{test}{}", ip.tag());
        Self::up_in(stem, &test, &ip.topology(topology), &[], ip)
    }

    fn up_in(stem: &str, test: &str, topology: &Topology, server_args: &[&str], ip: Ip) -> Self {
        let cleanup = Cleanup::new(stem, test);
        let lab = Lab::up(topology, &opts(stem, test)).expect("lab up");
        let server = PathdocServer::start_in(&lab, server_args, ip);
        ServerLab {
            server,
            lab,
            _cleanup: cleanup,
        }
    }

    /// Stop the server, then tear the lab down explicitly (the cleanup sweep still runs).
    pub fn down(self) -> Result<(), LabError> {
        let ServerLab {
            server,
            lab,
            _cleanup,
        } = self;
        drop(server);
        lab.down().map(|_| ())
    }
}

/// Run a command to completion; panics (after killing it) if it is still running after
/// `deadline`. Returns (exit code, stdout, stderr); both pipes are drained while it runs.
pub fn run(mut cmd: Command, deadline: Duration) -> (i32, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.code().unwrap_or(-1),
        out.join().unwrap(),
        err.join().unwrap(),
    )
}

/// Parse a JSON report from stdout; the panic shows exit code, stdout and stderr when it is not.
pub fn parse_report(code: i32, stdout: &str, stderr: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| {
        panic!("no JSON report ({e}); exit {code}\nstdout: {stdout}\nstderr: {stderr}")
    })
}

/// Run the built `pathdoc` with `args` in a lab host within `deadline`; returns (exit code,
/// JSON report from stdout, wall seconds).
pub fn run_json(lab: &Lab, host: &str, args: &[&str], deadline: Duration) -> (i32, Value, f64) {
    let mut cmd = lab.command(host, PATHDOC);
    cmd.args(args);
    let start = Instant::now();
    let (code, out, err) = run(cmd, deadline);
    let secs = start.elapsed().as_secs_f64();
    (code, parse_report(code, &out, &err), secs)
}

/// All findings of a report.
pub fn findings(report: &Value) -> Vec<&Value> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .collect()
}

/// The finding with this id, if the report has one.
pub fn find<'a>(report: &'a Value, id: &str) -> Option<&'a Value> {
    findings(report).into_iter().find(|f| f["id"] == id)
}

/// The finding with this id about this direction (`client-to-server`, `server-to-client`), if
/// the report has one.
pub fn find_dir<'a>(report: &'a Value, id: &str, direction: &str) -> Option<&'a Value> {
    findings(report)
        .into_iter()
        .find(|f| f["id"] == id && f["direction"] == direction)
}

/// The finding with this id; panics with the whole report when there is none.
pub fn finding<'a>(report: &'a Value, id: &str) -> &'a Value {
    find(report, id).unwrap_or_else(|| panic!("no finding {id} in {report:#}"))
}

/// `id[/direction]=status` of every finding, with the summary of those that are neither pass nor info: a
/// compact view for assertion messages.
pub fn ids(report: &Value) -> Vec<String> {
    findings(report)
        .into_iter()
        .map(|f| {
            let (id, status) = (f["id"].as_str().unwrap(), f["status"].as_str().unwrap());
            let id = match f["direction"].as_str() {
                Some(d) => format!("{id}/{d}"),
                None => id.to_string(),
            };
            match status {
                "pass" | "info" => format!("{id}={status}"),
                _ => format!("{id}={status} ({})", f["summary"].as_str().unwrap_or("")),
            }
        })
        .collect()
}

/// A loopback port nobody listens on (bound, then released).
pub fn free_loopback_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Assert that no namespace, state file or process of labs with this prefix remains.
pub fn assert_nothing_left(stem: &str, test: &str, pids: &[u32]) {
    let p = prefix(stem, test);
    let ns = pathdoc_sys::netns::list_with_prefix(&p);
    assert!(ns.is_empty(), "namespaces left behind: {ns:?}");
    assert!(state::list(&p).is_empty(), "state files left behind");
    let files: Vec<_> = std::fs::read_dir(state::state_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&p))
                .collect()
        })
        .unwrap_or_default();
    assert!(files.is_empty(), "files left in the state dir: {files:?}");
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let alive = !stat.is_empty()
            && !stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
                .unwrap_or(false);
        assert!(!alive, "process {pid} still running: {stat}");
    }
    // No lab veth ever lives in the root namespace; make sure none leaked there either.
    let links = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    let links = String::from_utf8_lossy(&links.stdout);
    for name in ["wan0", "lan0", "dla", "dlb"] {
        assert!(
            !links.contains(&format!(": {name}@")),
            "lab interface {name} in the root namespace:\n{links}"
        );
    }
}

/// 4-sigma binomial bound on a loss count.
pub fn binomial_bound(n: u64, p: f64) -> f64 {
    4.0 * (n as f64 * p * (1.0 - p)).sqrt()
}

/// One lock for the whole test binary. Tests that measure time or throughput take it
/// exclusively ([`serial`]): nothing else of the binary runs beside them, so they never share
/// the two cores. Every other test takes it shared ([`shared`]) and runs beside its kind. A lab
/// test that takes neither would run beside a throughput measurement, so
/// `loopback::test_tiers` checks that each lab test takes one as its first statement.
static CORES: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The cores to itself, for a test that measures time or throughput.
pub fn serial() -> std::sync::RwLockWriteGuard<'static, ()> {
    CORES
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A share of the cores, for a test whose verdicts do not depend on timing (it may run beside
/// other such tests, never beside a [`serial`] one).
#[allow(dead_code)] // the loopback tier uses only `serial`
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    CORES
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The `pathdoc` binary [`LoopbackServer`] runs the server from: this build, or the one named
/// by `PATHDOC_SERVER_UNDER_TEST` (to measure an older build under the same load).
pub fn server_binary() -> String {
    std::env::var("PATHDOC_SERVER_UNDER_TEST").unwrap_or_else(|_| PATHDOC.to_string())
}

/// A `pathdoc server` child whose stderr goes to a file; SIGTERM and reaped on drop.
pub struct LoopbackServer {
    child: Option<std::process::Child>,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl LoopbackServer {
    /// Start `pathdoc server <args>` listening on `addr` (given via `listen_args`), stderr to a
    /// file, and wait until it accepts connections.
    pub fn start(addr: SocketAddr, args: &[&str]) -> LoopbackServer {
        let log = std::env::temp_dir().join(format!(
            "pathdoc-server-test-{}-{}.log",
            std::process::id(),
            addr.port()
        ));
        let child = Command::new(server_binary())
            .arg("server")
            .args(args)
            .env_remove("NO_COLOR")
            .env_remove("PATHDOC_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let server = LoopbackServer {
            child: Some(child),
            addr,
            log,
        };
        server.wait_listening();
        server
    }

    pub fn on_free_port(extra: &[&str]) -> LoopbackServer {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_loopback_port())
            .parse()
            .unwrap();
        let listen = addr.to_string();
        let mut args = vec!["--listen", &listen];
        args.extend_from_slice(extra);
        LoopbackServer::start(addr, &args)
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server did not start; its log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, wait (≤ 10 s) and return the whole log.
    pub fn stop(mut self) -> String {
        self.terminate();
        self.log_text()
    }

    /// The child process, for a test that waits for it itself.
    pub fn take_child(&mut self) -> std::process::Child {
        self.child.take().expect("server child")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions; the pid is our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        self.terminate();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The shortest full `check --mtu --throughput` (about 2 s on loopback).
pub fn quick_check(server: &str) -> Command {
    let mut cmd = Command::new(PATHDOC);
    cmd.args([
        "check",
        server,
        "--mtu",
        "--throughput",
        "--throughput-time",
        "500ms",
        "--mtu-bulk-ms",
        "200",
        "--mtu-wait-ms",
        "100",
        "--json",
    ]);
    cmd
}

/// Summaries of the `check-failed` findings (a check that could not run).
pub fn check_failures(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "check-failed")
        .map(|f| f["summary"].to_string())
        .collect()
}

/// Start `cmd` with SIGINT at its default action, as a terminal's foreground job has it, whatever
/// this test process inherited: run from a script's background job (`.ci/run &`, nohup) the tests
/// get SIGINT ignored, and pathdoc rightly keeps an inherited ignore (a background job must not
/// take the terminal's Ctrl-C), so a Ctrl-C test would wait for nothing.
pub fn with_sigint_default(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    }
}
