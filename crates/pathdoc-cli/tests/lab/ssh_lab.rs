//! End-to-end tests of `--ssh` and `pathdoc ssh` with real OpenSSH: the lab runs sshd in its
//! server namespace with per-lab keys, the client namespace runs the real `pathdoc` with the
//! lab's ssh_config (`-F`). Bootstrap: same findings as a manually started server, nothing left
//! on the far end (also after SIGKILL), clear errors with exit 2. Diagnosis: the two SSH
//! scenarios get their verdicts with the numbers behind them; a clean path gets no claim the
//! numbers do not support. Labs have their own prefixes and are removed on drop.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pathdoc_lab::{Lab, Topology};
use serde_json::Value;
use support::{find, findings, ids, run, run_json, Cleanup, PathdocServer, PATHDOC};

const STEM: &str = "pds";

struct SshLab {
    lab: Lab,
    _cleanup: Cleanup,
}

impl SshLab {
    fn up(test: &str, topology: Topology) -> SshLab {
        let cleanup = Cleanup::new(STEM, test);
        let lab = Lab::up(&topology, &support::opts(STEM, test)).expect("lab up");
        SshLab {
            lab,
            _cleanup: cleanup,
        }
    }

    fn config(&self) -> String {
        self.lab
            .ssh_config()
            .expect("the lab runs sshd")
            .display()
            .to_string()
    }

    /// `pathdoc <args> -F <lab ssh_config> --json` in the client; (exit code, stdout, stderr).
    fn pathdoc(&self, args: &[&str], deadline: Duration) -> (i32, String, String) {
        let mut cmd = self.lab.command("client", PATHDOC);
        cmd.args(args).args(["-F", &self.config()]);
        run(cmd, deadline)
    }

    /// Processes in the server namespace whose name starts with "pathdoc".
    fn far_end_pathdocs(&self) -> Vec<String> {
        let out = Command::new("ip")
            .args(["netns", "pids", self.lab.netns("server")])
            .output()
            .expect("ip netns pids");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
                comm.starts_with("pathdoc")
                    .then(|| format!("{pid} {}", comm.trim()))
            })
            .collect()
    }

    /// Wait up to `patience` for the far end to have no pathdoc process.
    fn assert_far_end_clean(&self, patience: Duration) {
        let until = Instant::now() + patience;
        loop {
            let left = self.far_end_pathdocs();
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < until,
                "pathdoc still running on the far end after {patience:?}: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn cache_dir(&self) -> PathBuf {
        let ssh_dir = Path::new(&self.config()).parent().unwrap().to_path_buf();
        ssh_dir.join("cache.server").join("pathdoc")
    }
}

/// A topology with sshd on the server.
fn with_sshd(scenario: &str) -> Topology {
    let mut t = Topology::scenario(scenario).unwrap();
    t.server.sshd = true;
    t
}

fn outcome(report: &Value) -> Vec<String> {
    let mut v: Vec<String> = findings(report)
        .into_iter()
        .map(|f| {
            format!(
                "{}={}",
                f["id"].as_str().unwrap(),
                f["status"].as_str().unwrap()
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn ssh_bootstrap_gives_the_manual_servers_findings_and_leaves_only_the_cache() {
    let _shared = crate::support::shared();
    let l = SshLab::up("boot", with_sshd("clean"));
    let manual = {
        let server = PathdocServer::start(&l.lab);
        let (code, report, _) = run_json(
            &l.lab,
            "client",
            &["check", &server.addr(), "--mtu", "--json"],
            Duration::from_secs(60),
        );
        assert_eq!(code, 0, "{:?}", ids(&report));
        report
    };
    // A copy an older build left three days ago: pruned when this build is copied.
    std::fs::create_dir_all(l.cache_dir()).unwrap();
    let stale = l.cache_dir().join("pathdoc-0.0.1-x86_64-0123456789abcdef");
    std::fs::write(&stale, b"old build").unwrap();
    let three_days_ago = std::time::SystemTime::now() - Duration::from_secs(3 * 86_400);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(three_days_ago)
        .unwrap();
    let (code, out, err) = l.pathdoc(
        &["check", "--ssh", "server", "--mtu", "--json"],
        Duration::from_secs(90),
    );
    let via_ssh = support::parse_report(code, &out, &err);
    assert_eq!(code, 0, "{:?}\n{err}", ids(&via_ssh));
    // The report names the far end as the user wrote it, with the temporary server's address.
    let target = via_ssh["target"].as_str().unwrap();
    assert!(
        target.starts_with("server over SSH (203.0.113.10:"),
        "{target}"
    );
    // The same verdicts, and the next step: `pathdoc ssh` to this host with the ssh options kept.
    let next = find(&via_ssh, "ssh-next-step").expect("a next step after check --ssh");
    assert_eq!(next["status"], "info");
    let title = next["title"].as_str().unwrap();
    let expected = format!("`pathdoc ssh server -F {}`", l.config());
    assert!(title.contains(&expected), "{title}");
    let mut without_next: Vec<String> = outcome(&via_ssh);
    without_next.retain(|o| o != "ssh-next-step=info");
    assert_eq!(without_next, outcome(&manual));
    assert!(!outcome(&manual).is_empty());
    l.assert_far_end_clean(Duration::from_secs(5));
    // The copy stays in the far end's cache (and is reused), until --ssh-clean removes it; the
    // stale copy of another build is gone.
    let cached: Vec<_> = std::fs::read_dir(l.cache_dir()).unwrap().collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert!(!stale.exists(), "a copy unused for 3 days was kept");
    let (code, out, err) = l.pathdoc(
        &["speed", "--ssh", "server", "-t", "1s", "--json"],
        Duration::from_secs(60),
    );
    // A lab on two shared cores may be CPU-bound (`cpu-limited`, exit 1: a true verdict);
    // this test is about the bootstrap, so any measured result will do.
    let speed = support::parse_report(code, &out, &err);
    assert!(code == 0 || code == 1, "{:?}\n{err}", outcome(&speed));
    assert!(
        outcome(&speed)
            .iter()
            .any(|i| i.starts_with("upload-rate=")),
        "{:?}",
        outcome(&speed)
    );
    assert!(
        find(&speed, "ssh-next-step").is_some(),
        "{:?}",
        outcome(&speed)
    );
    l.assert_far_end_clean(Duration::from_secs(5));
    let cached: Vec<_> = std::fs::read_dir(l.cache_dir()).unwrap().collect();
    assert_eq!(
        cached.len(),
        1,
        "the second run must reuse the copy: {cached:?}"
    );
    let (code, out, err) = l.pathdoc(
        &["check", "--ssh", "server", "--ssh-clean"],
        Duration::from_secs(30),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("removed 1 cached"), "{out}");
    assert!(!l.cache_dir().exists(), "cache dir left behind");
}

#[test]
fn sigkill_of_the_client_stops_the_far_end_server() {
    let _shared = crate::support::shared();
    let l = SshLab::up("kill", with_sshd("clean"));
    let mut cmd = l.lab.command("client", PATHDOC);
    cmd.args(["check", "--ssh", "server", "-F", &l.config()])
        .args(["--throughput", "--throughput-time", "30s", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while l.far_end_pathdocs().is_empty() {
        assert!(Instant::now() < until, "the far-end server never started");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the client exited early"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2)); // mid-check
    child.kill().unwrap(); // SIGKILL: no handler, no cleanup code of ours runs
    child.wait().unwrap();
    l.assert_far_end_clean(Duration::from_secs(10));
    // The far end's shell removes the private copy the server ran from once it exits.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = std::fs::read_dir(l.cache_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        if left.iter().all(|n| n.starts_with("pathdoc-")) {
            break;
        }
        assert!(Instant::now() < until, "left on the far end: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_exit_2(l: &SshLab, args: &[&str], needle: &str) {
    let (code, out, err) = l.pathdoc(args, Duration::from_secs(60));
    assert_eq!(code, 2, "{args:?}: exit {code}\nstdout {out}\nstderr {err}");
    assert!(err.contains(needle), "{args:?}: {needle:?} not in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The same failure under `--json`: a `pathdoc.error/1` document whose kind a script can branch on.
fn assert_error_kind(l: &SshLab, args: &[&str], kind: &str) {
    let args = [args, &["--json"]].concat();
    let (code, out, err) = l.pathdoc(&args, Duration::from_secs(60));
    assert_eq!(code, 2, "{args:?}: exit {code}\nstdout {out}\nstderr {err}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(doc["schema"], "pathdoc.error/1", "{doc:#}");
    assert_eq!(doc["error"]["kind"], kind, "{doc:#}");
}

#[test]
fn bad_host_key_refused_login_other_arch_and_blocked_port_are_clear_errors() {
    let _shared = crate::support::shared();
    let l = SshLab::up("err", with_sshd("clean"));
    let dir = Path::new(&l.config()).parent().unwrap().to_path_buf();

    // A known_hosts with some other key for the server.
    let other = dir.join("other_key");
    run(
        {
            let mut c = Command::new("ssh-keygen");
            c.args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&other);
            c
        },
        Duration::from_secs(10),
    );
    let key = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let bad_known = dir.join("bad_known_hosts");
    std::fs::write(&bad_known, format!("server,203.0.113.10 {key}")).unwrap();
    let opt = format!("UserKnownHostsFile={}", bad_known.display());
    assert_exit_2(
        &l,
        &["check", "--ssh", "server", "-o", &opt, "--mtu"],
        "does not match",
    );
    assert_error_kind(
        &l,
        &["check", "--ssh", "server", "-o", &opt, "--mtu"],
        "ssh-host-key",
    );

    // sshd admits only root.
    assert_exit_2(
        &l,
        &["check", "--ssh", "nobody@server", "--mtu"],
        "refused the SSH login",
    );
    assert_error_kind(&l, &["ssh", "nobody@server"], "ssh-login");

    // A far end whose `uname -m` says riscv64: a second sshd whose sessions see a shim first.
    let shim = dir.join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    let uname = shim.join("uname");
    std::fs::write(
        &uname,
        "#!/bin/sh\nif [ \"$1\" = -m ]; then echo riscv64; else exec /usr/bin/uname \"$@\"; fi\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&uname, std::fs::Permissions::from_mode(0o755)).unwrap();
    let main_cfg = std::fs::read_to_string(dir.join("sshd_config.server")).unwrap();
    let cfg: String = main_cfg
        .lines()
        .map(|line| {
            if line == "Port 22" {
                "Port 2222".to_string()
            } else if let Some(v) = line.strip_prefix("SetEnv ") {
                format!("SetEnv {v} PATH={}:/usr/bin:/bin", shim.display())
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let alt = dir.join("sshd_config.alt");
    std::fs::write(&alt, cfg + "\n").unwrap();
    let mut sshd = Command::new("/usr/sbin/sshd");
    sshd.args(["-D", "-e", "-f"])
        .arg(&alt)
        .stderr(Stdio::null());
    let _alt_sshd = l.lab.spawn("server", sshd).unwrap();
    support::wait_listening(&l.lab, "client", "203.0.113.10:2222".parse().unwrap());
    assert_exit_2(
        &l,
        &[
            "check",
            "--ssh",
            "server:2222",
            "-o",
            "HostKeyAlias=server",
            "--mtu",
        ],
        "riscv64",
    );

    // The far end's firewall lets only SSH in.
    let rules = "table inet pds_block { chain input { type filter hook input priority 0; policy accept; tcp dport != { 22, 2222 } drop; }; }";
    pathdoc_lab::exec::in_netns(l.lab.netns("server"), "nft", &["-f", "-"], Some(rules)).unwrap();
    assert_exit_2(
        &l,
        &["check", "--ssh", "server", "--mtu"],
        "blocks TCP port",
    );

    // SSH itself black-holed (a firewall that drops port 22): a clear error in seconds, no hang.
    let hole = "table inet pds_ssh_hole { chain input { type filter hook input priority -10; policy accept; tcp dport 22 drop; }; }";
    pathdoc_lab::exec::in_netns(l.lab.netns("server"), "nft", &["-f", "-"], Some(hole)).unwrap();
    let started = Instant::now();
    assert_error_kind(&l, &["check", "--ssh", "server", "--mtu"], "ssh");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "took {:?}",
        started.elapsed()
    );
    l.assert_far_end_clean(Duration::from_secs(10));
}

/// `pathdoc ssh -F cfg server <extra> --json`; the report.
fn ssh_report(l: &SshLab, extra: &[&str]) -> Value {
    let args = [&["ssh", "server"], extra, &["--json"]].concat();
    let (code, out, err) = l.pathdoc(&args, Duration::from_secs(240));
    let report = support::parse_report(code, &out, &err);
    assert!(
        code == 0 || code == 1 || code == 3,
        "exit {code}: {:?}\n{err}",
        ids(&report)
    );
    report
}

fn verdict<'a>(report: &'a Value, direction: &str) -> &'a Value {
    findings(report)
        .into_iter()
        .find(|f| f["direction"] == direction && f["id"] != "ssh-versions")
        .unwrap_or_else(|| panic!("no {direction} verdict in {:?}", ids(report)))
}

fn evidence(f: &Value, prefix: &str) -> Option<f64> {
    f["evidence"]
        .as_array()?
        .iter()
        .find(|e| e["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .and_then(|e| e["value"]["value"].as_f64())
}

#[test]
fn window_limited_scenario_is_channel_window_limited() {
    let _serial = support::serial();
    let l = SshLab::up("win", Topology::scenario("ssh-window-limited").unwrap());
    let html = Path::new(&l.config()).parent().unwrap().join("win.html");
    let html_arg = html.display().to_string();
    let report = ssh_report(
        &l,
        &[
            "-t",
            "4s",
            "--ciphers",
            "aes128-gcm@openssh.com",
            "--report",
            &html_arg,
        ],
    );
    // The HTML report draws the cipher chart per direction with the window line the text states.
    let page = std::fs::read_to_string(&html).expect("pathdoc ssh --report wrote the page");
    for id in ["plot-ssh-ciphers-upload", "plot-ssh-ciphers-download"] {
        assert!(page.contains(&format!("id=\"{id}\"")), "{id} missing");
    }
    assert!(page.contains("SSH channel window / RTT ceiling"));
    assert!(page.contains("aes128-gcm@openssh.com"));
    for dir in ["client-to-server", "server-to-client"] {
        let f = verdict(&report, dir);
        assert_eq!(f["id"], "ssh-window-limited", "{dir}: {f:#}");
        assert_eq!(f["status"], "warn");
        let rate = evidence(f, "SSH ").unwrap();
        let window = evidence(f, "SSH channel window").unwrap();
        let rtt = evidence(f, "RTT of the SSH connection").unwrap();
        let raw = evidence(f, "raw TCP").unwrap();
        assert_eq!(window, 2.0 * 1024.0 * 1024.0, "{dir}");
        assert!((0.095..0.12).contains(&rtt), "{dir}: RTT {rtt}");
        let ceiling = window * 8.0 / rtt;
        assert!(
            (ceiling - rate).abs() <= 0.15 * rate,
            "{dir}: window/RTT {ceiling} vs SSH {rate}"
        );
        assert!(raw >= 2.0 * rate, "{dir}: raw TCP {raw} vs SSH {rate}");
        // Both units, labelled.
        assert!(evidence(f, "SSH ").is_some());
        assert!(f["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["value"]["unit"] == "B/s"));
        let hosts: Vec<&str> = f["remedies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["host"]["kind"].as_str().unwrap())
            .collect();
        assert!(
            hosts.contains(&"both-ends") && hosts.contains(&"client"),
            "{hosts:?}"
        );
    }
    l.assert_far_end_clean(Duration::from_secs(5));
}

#[test]
fn cpu_limited_scenario_blames_the_capped_sshd_and_names_the_faster_cipher() {
    let _serial = support::serial();
    let l = SshLab::up("cpu", Topology::scenario("ssh-cpu-limited").unwrap());
    let report = ssh_report(&l, &["-t", "3s"]);
    let f = verdict(&report, "client-to-server");
    assert_eq!(f["id"], "ssh-cpu-limited", "{f:#}");
    let title = f["title"].as_str().unwrap();
    assert!(title.contains("sshd (server)"), "{title}");
    // The cipher comparison: at least three ciphers measured, the best clearly faster than the
    // slowest, and the title names the fastest when it beats the default.
    let ciphers: Vec<(String, f64)> = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let n = e["name"].as_str()?.strip_prefix("cipher ")?;
            Some((n.to_string(), e["value"]["value"].as_f64()?))
        })
        .collect();
    assert!(ciphers.len() >= 3, "{ciphers:?}");
    let (best, slowest) = (ciphers[0].1, ciphers.last().unwrap().1);
    assert!(best >= 1.2 * slowest, "{ciphers:?}");
    let default = ciphers
        .iter()
        .find(|c| c.0.contains("negotiated by default"))
        .expect("the default cipher is measured");
    // The fastest is named when it beats the default by the 15 % that makes switching worth it.
    if ciphers[0].1 >= 1.15 * default.1 {
        let name = ciphers[0].0.split(' ').next().unwrap();
        assert!(title.contains(name), "{title} should name {name}");
        let r = &f["remedies"][0];
        assert_eq!(r["host"]["kind"], "client");
        assert!(
            r["command"]
                .as_str()
                .unwrap()
                .contains(&format!("Ciphers {name}")),
            "{r:#}"
        );
    }
    // Downloads are encrypted by the same capped sshd.
    let down = verdict(&report, "server-to-client");
    assert_eq!(down["id"], "ssh-cpu-limited", "{down:#}");
    assert!(down["title"].as_str().unwrap().contains("sshd (server)"));
    // The server's cgroup cap shows in the evidence and a remedy is on the server.
    let sshd = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str().unwrap().starts_with("CPU of sshd"))
        .expect("sshd CPU evidence");
    assert!(
        sshd["detail"].as_str().unwrap().contains("cgroup cap 10 %"),
        "{sshd:#}"
    );
    assert!(f["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["host"]["kind"] == "server"));
}

#[test]
fn clean_path_gets_no_claim_the_numbers_do_not_support() {
    let _serial = support::serial();
    let l = SshLab::up("clean", with_sshd("clean"));
    let report = ssh_report(&l, &["-t", "3s", "--ciphers", "aes128-gcm@openssh.com"]);
    let transfers = report["data"]["ssh"]["transfers"].as_array().unwrap();
    // The far end's evidence service answers for the SSH connection of each transfer (it
    // refuses every other connection, docs/ssh.md).
    for t in transfers {
        let samples = t["server_samples"].as_array().unwrap();
        assert!(
            samples.iter().any(|s| s["tcp"].is_object()),
            "no far-end TCP_INFO for the SSH connection: {samples:?}"
        );
    }
    for dir in ["client-to-server", "server-to-client"] {
        let f = verdict(&report, dir);
        assert_ne!(f["status"], "fail", "{f:#}");
        match f["id"].as_str().unwrap() {
            // 5 ms RTT: 2 MiB / 5 ms = 3.4 Gbit/s, never the window.
            "ssh-window-limited" => panic!("window limit claimed on a 5 ms path: {f:#}"),
            "ssh-cpu-limited" => {
                // The claim needs a saturated process in the default transfer's numbers.
                let way = if dir == "client-to-server" {
                    "upload"
                } else {
                    "download"
                };
                let t = transfers
                    .iter()
                    .find(|t| t["way"] == way && t["requested_cipher"].is_null())
                    .unwrap();
                let s = &t["steady"];
                let share = |side: &str| s[side]["ssh_process"].as_f64().unwrap_or(0.0);
                let busy = |side: &str| s[side]["host_busy"].as_f64().unwrap_or(0.0);
                let ok = share("client") >= 0.85
                    || share("server") >= 0.85
                    || (busy("client") >= 0.9 && share("client") >= 0.5)
                    || (busy("server") >= 0.9 && share("server") >= 0.5);
                assert!(ok, "CPU limit claimed without a saturated CPU: {s:#}");
            }
            "ssh-network-limited" => {
                let rate = evidence(f, "SSH ").unwrap();
                let raw = evidence(f, "raw TCP").unwrap();
                assert!(rate >= 0.8 * raw, "{rate} vs {raw}");
            }
            _ => {}
        }
    }
    assert!(find(&report, "ssh-versions").is_some());
}

/// A second sshd (port 2222) whose sessions find `shim` first on their PATH.
fn shimmed_sshd(l: &SshLab, shim: &Path) -> pathdoc_lab::LabProcess {
    let dir = Path::new(&l.config()).parent().unwrap().to_path_buf();
    let main_cfg = std::fs::read_to_string(dir.join("sshd_config.server")).unwrap();
    let cfg: String = main_cfg
        .lines()
        .map(|line| {
            if line == "Port 22" {
                "Port 2222".to_string()
            } else if let Some(v) = line.strip_prefix("SetEnv ") {
                format!("SetEnv {v} PATH={}:/usr/bin:/bin", shim.display())
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let alt = dir.join("sshd_config.shim");
    std::fs::write(&alt, cfg + "\n").unwrap();
    let mut sshd = Command::new("/usr/sbin/sshd");
    sshd.args(["-D", "-e", "-f"])
        .arg(&alt)
        .stderr(Stdio::null());
    let process = l.lab.spawn("server", sshd).unwrap();
    support::wait_listening(&l.lab, "client", "203.0.113.10:2222".parse().unwrap());
    process
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The far end's cache directory must be one only the login user can change (as OpenSSH's
/// StrictModes), and the binary that runs is the one whose checksum was verified. The attacker
/// is a `sha256sum` on the far end's PATH that, right after reporting the true checksum of our
/// cached copy, replaces that copy with another program — as the uid owning the directory (the
/// racing user of another uid), or as the login user for a directory that is ours. Whatever
/// pathdoc does, that program must never run. (Before the fix it ran, as root, every time.)
#[test]
fn far_end_cache_of_another_user_is_refused_and_a_swapped_binary_never_runs() {
    let _shared = crate::support::shared();
    use std::os::unix::fs::{chown, symlink};
    let l = SshLab::up("trust", with_sshd("clean"));
    let scratch = std::env::temp_dir().join(format!("pathdoc-trust-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    chmod(&scratch, 0o755);
    let ran = scratch.join("evil-ran");
    let evil = scratch.join("evil");
    std::fs::write(
        &evil,
        format!("#!/bin/sh\necho \"$@\" >> {}\nexit 1\n", ran.display()),
    )
    .unwrap();
    chmod(&evil, 0o755);
    let swapped = scratch.join("swapped");
    let shim = scratch.join("shim");
    std::fs::create_dir(&shim).unwrap();
    chmod(&shim, 0o755);
    std::fs::write(
        shim.join("sha256sum"),
        format!(
            "#!/bin/sh\nsrc=$(readlink /proc/$$/fd/0)\n/usr/bin/sha256sum\n\
             case $src in */pathdoc-*-*-*) if [ ! -e {sw} ]; then touch {sw}; d=$(dirname \"$src\"); o=$(stat -c %u \"$d\"); \
             setpriv --reuid=$o --regid=$o --clear-groups /bin/sh -c 'cp {evil} \"$1.new\" && mv -f \"$1.new\" \"$1\"' sh \"$src\"; fi;; esac\n",
            sw = swapped.display(),
            evil = evil.display(),
        ),
    )
    .unwrap();
    chmod(&shim.join("sha256sum"), 0o755);
    let _sshd = shimmed_sshd(&l, &shim);

    let sum = Command::new("sha256sum").arg(PATHDOC).output().unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout)[..16].to_string();
    let name = format!(
        "pathdoc-{}-{}-{sum}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    );
    let cache = l.cache_dir();
    let base = cache.parent().unwrap().to_path_buf();
    // A cache directory `dir` holding a valid copy of this very binary, owned by `uid`.
    let plant = |dir: &Path, uid: u32, mode: u32| {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::copy(PATHDOC, dir.join(&name)).unwrap();
        chown(dir.join(&name), Some(uid), Some(uid)).unwrap();
        chown(dir, Some(uid), Some(uid)).unwrap();
        chmod(dir, mode);
    };
    let reset = || {
        let _ = std::fs::remove_file(&cache);
        let _ = std::fs::remove_dir_all(&cache);
        let _ = std::fs::remove_file(&swapped);
    };
    let via_shim = [
        "check",
        "--ssh",
        "server:2222",
        "-o",
        "HostKeyAlias=server",
        "--mtu",
    ];
    let refused = |needles: &[&str]| {
        let (code, out, err) = l.pathdoc(&via_shim, Duration::from_secs(60));
        assert!(
            !ran.exists(),
            "the swapped-in program ran: {:?}\n{err}",
            std::fs::read_to_string(&ran)
        );
        assert_eq!(code, 2, "exit {code}\nstdout {out}\nstderr {err}");
        for needle in needles {
            assert!(err.contains(needle), "{needle:?} not in: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    };
    let refusal = "refusing to use the far end's cache directory";

    // Owned by another uid.
    plant(&cache, 65534, 0o755);
    refused(&[
        refusal,
        &cache.display().to_string(),
        "owned by uid 65534",
        "remove it",
    ]);
    // A symlink into another user's directory.
    reset();
    let theirs = scratch.join("theirs");
    plant(&theirs, 65534, 0o755);
    symlink(&theirs, &cache).unwrap();
    refused(&[
        refusal,
        &cache.display().to_string(),
        "symbolic link",
        "rm ",
    ]);
    // Ours, but group- and world-writable; then a parent it created that is group-writable.
    reset();
    plant(&cache, 0, 0o777);
    refused(&[refusal, "writable by others", "chmod go-w"]);
    chmod(&cache, 0o700);
    chmod(&base, 0o775);
    refused(&[refusal, &base.display().to_string(), "writable by others"]);
    chmod(&base, 0o755);
    // Ours and private: the copy is swapped right after its checksum was read, so the file at
    // the cached path is no longer what was verified. The server runs only a private copy whose
    // own checksum was verified: here that fails, clearly, and nothing else runs.
    reset();
    plant(&cache, 0, 0o700);
    refused(&["changed after it was checked", &name]);
    assert!(swapped.exists(), "the attack was not attempted");

    // `--ssh-clean` on a cache directory that links elsewhere removes nothing there.
    reset();
    let elsewhere = scratch.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let keep = [elsewhere.join(&name), elsewhere.join(".upload-1")];
    for k in &keep {
        std::fs::write(k, b"not pathdoc's").unwrap();
    }
    symlink(&elsewhere, &cache).unwrap();
    let (code, out, err) = l.pathdoc(
        &["check", "--ssh", "server", "--ssh-clean"],
        Duration::from_secs(30),
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("symbolic link"), "{err}");
    for k in &keep {
        assert!(k.exists(), "--ssh-clean removed {}", k.display());
    }
    reset();
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// The temporary server listens on the address SSH reached the far end by, not on every
/// interface, and a private run copy it used is gone when it stops.
#[test]
fn temporary_server_listens_only_on_the_ssh_address() {
    let _shared = crate::support::shared();
    let l = SshLab::up("listen", with_sshd("clean"));
    let mut cmd = l.lab.command("client", PATHDOC);
    cmd.args(["check", "--ssh", "server", "-F", &l.config()])
        .args(["--throughput", "--throughput-time", "5s", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let listening = loop {
        let out = Command::new("ip")
            .args(["netns", "exec", l.lab.netns("server"), "ss", "-Htlnp"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let ours: Vec<String> = text
            .lines()
            .filter(|l| l.contains("\"pathdoc\""))
            .map(str::to_string)
            .collect();
        if !ours.is_empty() {
            break ours;
        }
        assert!(Instant::now() < until, "the far-end server never listened");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the client exited early"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for line in &listening {
        // State, Recv-Q, Send-Q, then the local address.
        let local = line.split_whitespace().nth(3).unwrap_or_default();
        assert!(local.starts_with("203.0.113.10:"), "{line}");
    }
    let status = child.wait().unwrap();
    assert!(matches!(status.code(), Some(0 | 1)), "{status:?}");
    l.assert_far_end_clean(Duration::from_secs(10));
    let left: Vec<_> = std::fs::read_dir(l.cache_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("pathdoc-"), "{left:?}");
}

/// Issue 17: a full capture of an SSH download held at the 2 MiB channel window (1 Gbit/s,
/// 100 ms RTT) is healthy TCP, but `pathdoc analyze` names the sender held back by its
/// application at ≈ 2 MiB in flight and points to `pathdoc ssh` (it used to say "healthy").
/// Captured on the sender (sshd's host): only there are the bytes in flight the window's.
#[test]
fn analyze_names_the_channel_window_in_a_capture_of_an_ssh_download() {
    let _serial = support::serial();
    let l = SshLab::up("acap", Topology::scenario("ssh-window-limited").unwrap());
    let file = std::env::temp_dir().join(format!("pathdoc-ssh-acap-{}.pcap", std::process::id()));
    let cap = pathdoc_lab::capture::start(
        &l.lab,
        "server",
        None,
        &file,
        &pathdoc_lab::capture::CaptureOptions {
            snaplen: 128,
            filter: Some("tcp port 22".into()),
        },
    )
    .expect("start tcpdump");
    // 64 MB at the window's ≈ 165 Mbit/s: about 3 s of transfer, 30 RTTs.
    let mut ssh = l.lab.command("client", "timeout");
    ssh.args(["20", "ssh", "-F", &l.config(), "server"])
        .arg("head -c 64000000 /dev/zero")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    assert!(ssh.status().unwrap().success());
    cap.stop().unwrap();
    let out = Command::new(PATHDOC)
        .args(["analyze", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let held = find(&report, "sender-application-limited")
        .unwrap_or_else(|| panic!("{:?}", outcome(&report)));
    assert_eq!(held["direction"], "server-to-client", "{held:#}");
    let summary = held["summary"].as_str().unwrap();
    assert!(
        summary.contains("channel window") && summary.contains("pathdoc ssh"),
        "{summary}"
    );
    // Kept when an assertion fails, to look at.
    let _ = std::fs::remove_file(&file);
}

/// `--ssh` and `pathdoc ssh` to the far end by its IPv6 address (a dual-stack lab): the probe,
/// the temporary server on the IPv6 address SSH reached, the check through it, and measured SSH
/// transfers — everything over IPv6, with the destination written as users write it.
#[test]
fn ssh_and_check_ssh_work_over_ipv6() {
    let _serial = crate::support::serial();
    let mut topology = with_sshd("clean");
    topology.family = pathdoc_lab::topology::Family::Dual;
    let l = SshLab::up("v6", topology);
    let v6 = l.lab.addr6("server").expect("a dual-stack lab");
    let dest = format!("root@[{v6}]");

    let (code, out, err) = l.pathdoc(
        &["check", "--ssh", &dest, "--mtu", "--json"],
        Duration::from_secs(90),
    );
    let report = support::parse_report(code, &out, &err);
    assert_eq!(code, 0, "{:?}\n{err}", outcome(&report));
    let target = report["target"].as_str().unwrap();
    assert!(
        target.contains(&format!("over SSH ([{v6}]:")),
        "the temporary server is reached over IPv6: {target}"
    );
    assert_eq!(report["data"]["mtu"]["ipv6"], true, "{}", report["data"]);
    l.assert_far_end_clean(Duration::from_secs(5));

    let (code, out, err) = l.pathdoc(
        &[
            "ssh",
            &dest,
            "-t",
            "1s",
            "--ciphers",
            "aes128-gcm@openssh.com",
            "--json",
        ],
        Duration::from_secs(120),
    );
    let report = support::parse_report(code, &out, &err);
    assert_ne!(code, 2, "{:?}\n{err}", outcome(&report));
    assert!(support::check_failures(&report).is_empty(), "{out}");
    for direction in ["client-to-server", "server-to-client"] {
        verdict(&report, direction);
    }
    l.assert_far_end_clean(Duration::from_secs(5));
}
