//! The packaged systemd units under a live systemd. The .deb is built from this test build and
//! unpacked; a real systemd boots in a container (`systemd-nspawn --volatile=yes`: the host's
//! /usr with the package laid over it read-only, a throwaway root, a private network namespace)
//! and starts `pathdoc-server.service` and `pathdoc-exporter.service` exactly as shipped. A real
//! check then runs against the server from inside that network namespace, and the exporter probes
//! it, so every hardening line (dynamic user, no capabilities, seccomp's @system-service, the
//! address families) is proven not to break what the server and exporter do.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::package::{build_and_unpack, ok, Scratch};
use crate::support::{self, PATHDOC};

const TOKEN: &str = "systemd-unit-test-token";

/// A systemd booted in a container; halted (then killed, if it lingers) on drop.
struct Container {
    nspawn: Child,
    /// The container's PID 1 (systemd), as the host numbers it.
    init: u32,
}

impl Container {
    /// Boot systemd to basic.target with `overlay_usr` laid over the host's /usr.
    fn boot(name: &str, overlay_usr: &Path, log: &Path) -> Container {
        let log = std::fs::File::create(log).expect("nspawn log");
        let nspawn = Command::new("systemd-nspawn")
            .args(["-q", "-D", "/", "--volatile=yes", "--private-network"])
            // No systemd-machined on the host to register with.
            .args(["--register=no", "--keep-unit", "-M", name])
            .arg(format!("--overlay-ro=/usr:{}:/usr", overlay_usr.display()))
            .args([
                "--boot",
                "systemd.firstboot=off",
                "systemd.unit=basic.target",
                // The units want network-online.target; with loopback only, networkd's
                // wait-online would hold it (and the units) for its 2-minute timeout.
                "systemd.mask=systemd-networkd-wait-online.service",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("systemd-nspawn (apt-get install systemd-container)");
        let nspawn_pid = nspawn.id();
        let mut container = Container { nspawn, init: 0 };
        container.init = wait_for(Duration::from_secs(30), "the container's systemd", || {
            child_named(nspawn_pid, "systemd")
        });
        wait_for(Duration::from_secs(60), "basic.target", || {
            let (_, out, _) = support::run(
                container.exec(&["systemctl", "is-active", "basic.target"]),
                Duration::from_secs(10),
            );
            (out.trim() == "active").then_some(())
        });
        container
    }

    /// `args` run inside the container (all its namespaces).
    fn exec(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.init.to_string(), "-a"]).args(args);
        cmd
    }

    /// `program` from the host's file system, run in the container's network namespace only.
    fn in_its_network(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.init.to_string(), "-n", program]);
        cmd
    }

    /// Start `unit` and wait until `port` listens on loopback inside the container.
    fn start(&self, unit: &str, port: u16) {
        ok(
            self.exec(&["systemctl", "start", unit]),
            Duration::from_secs(30),
        );
        wait_for(
            Duration::from_secs(20),
            &format!("{unit} on port {port}"),
            || {
                let mut ss = self.in_its_network("ss");
                ss.args(["-Hltn", &format!("sport = :{port}")]);
                let (_, out, _) = support::run(ss, Duration::from_secs(10));
                (!out.trim().is_empty()).then_some(())
            },
        );
    }

    /// The `/proc/PID/status` of `unit`'s main process.
    fn main_process_status(&self, unit: &str) -> String {
        let pid = ok(
            self.exec(&["systemctl", "show", "-p", "MainPID", "--value", unit]),
            Duration::from_secs(10),
        );
        ok(
            self.exec(&["cat", &format!("/proc/{}/status", pid.trim())]),
            Duration::from_secs(10),
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SIGTERM asks nspawn to halt the container cleanly; a container that does not stop in
        // time dies with its PID 1.
        // SAFETY: kill(2) on a pid we spawned and have not reaped; no memory is involved.
        unsafe { libc::kill(self.nspawn.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.init != 0 {
            // SAFETY: as above; killing a PID namespace's init ends every process in it.
            unsafe { libc::kill(self.init as i32, libc::SIGKILL) };
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

/// Poll `probe` every 200 ms until it gives a value; fail the test after `deadline`.
fn wait_for<T>(deadline: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(start.elapsed() < deadline, "no {what} within {deadline:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The pid of a process named `comm` whose parent is `parent`.
fn child_named(parent: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid …"; comm may hold spaces, so split at the last ')'.
        let (head, rest) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1;
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == parent && name == comm).then_some(pid)
    })
}

/// The value of `field` in a `/proc/PID/status` text.
fn status_field<'a>(status: &'a str, field: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in\n{status}"))
        .trim()
}

/// The process runs as a dynamic user with no capability, no way to gain privileges and a seccomp
/// filter: the unit's sandbox really applied.
fn assert_sandboxed(unit: &str, status: &str) {
    let uid: u32 = status_field(status, "Uid")
        .split_whitespace()
        .next()
        .and_then(|u| u.parse().ok())
        .expect("a uid");
    // systemd allocates DynamicUser uids from 61184–65519.
    assert!((61184..=65519).contains(&uid), "{unit} runs as uid {uid}");
    assert_eq!(status_field(status, "CapEff"), "0000000000000000", "{unit}");
    assert_eq!(status_field(status, "NoNewPrivs"), "1", "{unit}");
    assert_eq!(status_field(status, "Seccomp"), "2", "{unit}");
}

/// The unpacked package's /usr, as a merged-/usr system has it (`/lib` is `/usr/lib`), ready to be
/// laid over the host's /usr.
fn package_usr(root: &Path) -> std::path::PathBuf {
    let units = root.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&units).expect("usr/lib/systemd/system");
    for unit in ["pathdoc-server.service", "pathdoc-exporter.service"] {
        std::fs::copy(root.join("lib/systemd/system").join(unit), units.join(unit))
            .unwrap_or_else(|e| panic!("{unit} not in the package: {e}"));
    }
    root.join("usr")
}

/// The server unit's check: a full quick check from inside the container's network.
fn check_against_the_server_unit(container: &Container) {
    container.start("pathdoc-server.service", 7224);
    let quick = support::quick_check("127.0.0.1:7224");
    let mut check = container.in_its_network(PATHDOC);
    check.args(quick.get_args());
    let (code, out, err) = support::run(check, Duration::from_secs(120));
    let report: Value = support::parse_report(code, &out, &err);
    assert!(code == 0 || code == 1, "exit {code}: {out}\n{err}");
    assert!(support::check_failures(&report).is_empty(), "{out}");
    for f in support::findings(&report) {
        assert_ne!(f["status"], "fail", "{f}");
    }
    // The server read its own interface (getifaddrs needs AF_NETLINK under the unit's
    // RestrictAddressFamilies) and saw the client's IPv4 address unmapped on its [::] listener.
    let mtu = &report["data"]["mtu"];
    assert_eq!(mtu["server_nic"]["iface"], "lo", "{mtu}");
    let observed = mtu["client_observed"].as_str().unwrap_or_default();
    assert!(observed.starts_with("127.0.0.1:"), "{observed}");
    assert_sandboxed(
        "pathdoc-server",
        &container.main_process_status("pathdoc-server.service"),
    );
}

/// The exporter unit, with its config as a credential, probes the server unit.
fn probe_through_the_exporter_unit(container: &Container, example: &Path) {
    let config = std::fs::read_to_string(example)
        .expect("the package's example exporter config")
        .replace("replace-with-a-long-random-token", TOKEN)
        .replace("server.example.net:7224", "127.0.0.1:7224");
    ok(
        container.exec(&[
            "sh",
            "-c",
            "mkdir -p /etc/pathdoc && umask 077 && printf %s \"$1\" > /etc/pathdoc/exporter.toml",
            "sh",
            &config,
        ]),
        Duration::from_secs(10),
    );
    container.start("pathdoc-exporter.service", 9724);
    let mut curl = container.in_its_network("curl");
    curl.args(["-sS", "--max-time", "60", "-H"])
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .arg("http://127.0.0.1:9724/probe?target=127.0.0.1:7224&module=mtu");
    let metrics = ok(curl, Duration::from_secs(90));
    assert!(metrics.contains("probe_success 1"), "{metrics}");
    assert!(metrics.contains("pathdoc_path_mtu_bytes{"), "{metrics}");
    assert_sandboxed(
        "pathdoc-exporter",
        &container.main_process_status("pathdoc-exporter.service"),
    );
}

#[test]
fn packaged_units_run_sandboxed_under_a_live_systemd() {
    let _cores = support::shared();
    let scratch = Scratch::new("units");
    let (_deb, root) = build_and_unpack(&scratch);
    let usr = package_usr(&root);
    let log = scratch.0.join("nspawn.log");
    let container = Container::boot(&format!("pathdoc-units-{}", std::process::id()), &usr, &log);
    check_against_the_server_unit(&container);
    probe_through_the_exporter_unit(
        &container,
        &root.join("usr/share/doc/pathdoc/examples/pathdoc-exporter.toml"),
    );
    let journal = ok(
        container.exec(&[
            "journalctl",
            "-o",
            "cat",
            "-u",
            "pathdoc-server",
            "-u",
            "pathdoc-exporter",
        ]),
        Duration::from_secs(20),
    );
    assert!(!journal.contains("\"level\":\"ERROR\""), "{journal}");
    drop(container);
}
