//! What `pathdoc lab demo` runs of pathdoc's own checks on each scenario: the real binary, a
//! `pathdoc server` in the lab's server namespace and `pathdoc check … --json` in its client,
//! exactly as a user would run them, with the verdicts shown in compact form.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pathdoc_core::Report;
use pathdoc_lab::demo::Say;
use pathdoc_lab::{Lab, LabError};

use crate::output;

/// The `pathdoc check` arguments the demo uses on a scenario (time scaled down: the demo's
/// NATs forget after seconds, not hours), or `None` when the scenario has no check yet.
pub fn check_args(scenario: &str) -> Option<&'static [&'static str]> {
    Some(match scenario {
        // The false-alarm control: every check that runs here must come back healthy.
        "clean" => &["--mtu", "--throughput", "--throughput-time", "3s"],
        "modem-idle" | "cgnat-chain" => &[
            "--idle",
            "--idle-max",
            "12s",
            "--idle-resolution",
            "1s",
            "--idle-no-udp",
        ],
        "pmtu-blackhole" | "nic-ignores-mtu" | "v6-ptb-blackhole" => &["--mtu"],
        // Past the NAT44's demo timeout (8 s), so both families' timeouts are measured.
        "v6-firewall-idle" => &[
            "--idle",
            "--idle-max",
            "12s",
            "--idle-resolution",
            "1s",
            "--idle-no-udp",
        ],
        "lossy-long-fat" => &[
            "--throughput",
            "--throughput-time",
            "4s",
            "--throughput-compare-cc",
        ],
        "window-limited" => &["--throughput", "--throughput-time", "4s"],
        "policed-line" | "bloated-uplink" | "shared-bottleneck" => &[
            "--throughput",
            "--throughput-time",
            "4s",
            "--throughput-cc",
            "cubic",
        ],
        // The duplex-mismatch story had a loss-based sender; BBR would hide the rate loss.
        "slow-lossy-duplex" => &[
            "--throughput",
            "--throughput-time",
            "4s",
            "--throughput-cc",
            "cubic",
        ],
        _ => return None,
    })
}

/// The `pathdoc ssh` arguments the demo uses on the SSH scenarios (short transfers), or `None`.
pub fn ssh_args(scenario: &str) -> Option<&'static [&'static str]> {
    Some(match scenario {
        // Every cipher hits the same window ceiling; one besides the default makes the point.
        "ssh-window-limited" => &["-t", "3s", "--ciphers", "aes128-gcm@openssh.com"],
        "ssh-cpu-limited" => &["-t", "3s"],
        _ => return None,
    })
}

/// Run `pathdoc ssh` with the lab's ssh_config in the client, exactly as a user would.
fn run_ssh(lab: &Lab, say: Say, args: &[&str]) -> Result<(), LabError> {
    let exe = std::env::current_exe()
        .map_err(|e| LabError::Measurement(format!("cannot find the pathdoc binary: {e}")))?;
    let config = lab
        .ssh_config()
        .ok_or_else(|| LabError::Measurement("this scenario runs no sshd".into()))?;
    let mut cmd = lab.command("client", &exe);
    cmd.args(["ssh", "server", "-F"])
        .arg(&config)
        .args(args)
        .arg("--json");
    let done = pathdoc_lab::exec::run_unchecked(&mut cmd, None, Duration::from_secs(180))?;
    let report: Report = serde_json::from_str(&done.stdout).map_err(|e| {
        LabError::Measurement(format!(
            "pathdoc ssh printed no report ({e}): {}",
            done.stderr.trim()
        ))
    })?;
    say(format!(
        "pathdoc ssh -F {} server {}:",
        config.display(),
        args.join(" ")
    ));
    for line in output::render_compact(&report) {
        say(format!("  {line}"));
    }
    Ok(())
}

/// Run the scenario's checks (if any) and tell the user what pathdoc concluded.
pub fn run(lab: &Lab, say: Say, scenario: &str) -> Result<(), LabError> {
    if let Some(args) = ssh_args(scenario) {
        return run_ssh(lab, say, args);
    }
    if scenario == "modem-idle" {
        analyze_both_ends(lab, say)?;
    }
    let Some(args) = check_args(scenario) else {
        return Ok(());
    };
    if scenario.starts_with("v6-") {
        return run_both_families(lab, say, args);
    }
    let html = report_file(scenario);
    let mut full: Vec<&str> = args.to_vec();
    let html_arg = html.as_ref().map(|p| p.to_string_lossy().into_owned());
    if let Some(p) = &html_arg {
        full.extend(["--report", p.as_str()]);
    }
    let report = run_check(lab, &full, Duration::from_secs(120))?;
    say(format!(
        "pathdoc check {} {}:",
        report.target,
        args.join(" ")
    ));
    for line in output::render_compact(&report) {
        say(format!("  {line}"));
    }
    if let Some(p) = html.filter(|p| p.exists()) {
        say(format!(
            "  HTML report with plots (what you would mail to your ISP): {}",
            p.display()
        ));
    }
    Ok(())
}

/// The IPv6 scenarios: one `pathdoc check server` by name, as a dual-stack user runs it — the
/// lab's hosts file gives `server` an IPv4 and an IPv6 address, so the one report holds both
/// families, the one that fails headed "IPv6 only" next to the one that does not.
fn run_both_families(lab: &Lab, say: Say, args: &[&str]) -> Result<(), LabError> {
    let Some(v6) = lab.addr_in("server", true) else {
        return Err(LabError::Measurement(
            "an IPv6 scenario without IPv6 addresses".into(),
        ));
    };
    let port = pathdoc_proto::DEFAULT_PORT;
    let wait = SocketAddr::new(v6, port);
    // Both families run one after the other: twice one family's time.
    let report = run_check_target(lab, wait, "server", args, Duration::from_secs(240))?;
    say(format!(
        "pathdoc check server {} (`server` has an IPv4 and an IPv6 address, so one run checks both: {}):",
        args.join(" "),
        report.target
    ));
    for line in output::render_compact(&report) {
        say(format!("  {line}"));
    }
    Ok(())
}

/// The one scenario whose check also writes an HTML report (`--report`), and where: the idle
/// ladder against the RFC 5382 line is the picture seed 000's author needed for the ISP.
fn report_file(scenario: &str) -> Option<std::path::PathBuf> {
    (scenario == "modem-idle")
        .then(|| std::env::temp_dir().join(format!("pathdoc-demo-{scenario}.html")))
}

/// Start `pathdoc server` in the lab's server, wait until it accepts, run `pathdoc check` with
/// `args` in the client and parse its JSON report. The server is stopped when this returns.
pub fn run_check(lab: &Lab, args: &[&str], deadline: Duration) -> Result<Report, LabError> {
    run_check_in(lab, lab.addr("server"), args, deadline)
}

/// [`run_check`] against one of the server's addresses (either family); the server listens on
/// that family's wildcard address.
pub fn run_check_in(
    lab: &Lab,
    server_ip: std::net::IpAddr,
    args: &[&str],
    deadline: Duration,
) -> Result<Report, LabError> {
    let addr = SocketAddr::new(server_ip, pathdoc_proto::DEFAULT_PORT);
    run_check_target(lab, addr, &addr.to_string(), args, deadline)
}

/// Start `pathdoc server` on the wildcard address of `wait`'s family (IPv6's `[::]` takes IPv4
/// too), wait until `wait` accepts, and run `pathdoc check TARGET ARGS --json` in the client.
fn run_check_target(
    lab: &Lab,
    wait: SocketAddr,
    target: &str,
    args: &[&str],
    deadline: Duration,
) -> Result<Report, LabError> {
    let exe = std::env::current_exe()
        .map_err(|e| LabError::Measurement(format!("cannot find the pathdoc binary: {e}")))?;
    let port = wait.port();
    let listen = if wait.is_ipv6() {
        format!("[::]:{port}")
    } else {
        format!("0.0.0.0:{port}")
    };
    let mut server = lab.command("server", &exe);
    server
        .args(["server", "--listen", &listen])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _server = lab.spawn("server", server)?;
    wait_until_listening(lab, wait, Duration::from_secs(10))?;

    let mut check = lab.command("client", &exe);
    check.arg("check").arg(target).args(args).arg("--json");
    let done = pathdoc_lab::exec::run_unchecked(&mut check, None, deadline)?;
    serde_json::from_str(&done.stdout).map_err(|e| {
        // Under --json an error that kept the check from running is an error document on stdout.
        let why = serde_json::from_str::<serde_json::Value>(&done.stdout)
            .ok()
            .and_then(|doc| doc["error"]["message"].as_str().map(String::from))
            .unwrap_or_else(|| format!("{e}: {}", done.stderr.trim()));
        LabError::Measurement(format!(
            "pathdoc check {} printed no report: {why}",
            args.join(" ")
        ))
    })
}

fn wait_until_listening(lab: &Lab, addr: SocketAddr, patience: Duration) -> Result<(), LabError> {
    let ns = lab.netns("client").to_string();
    let give_up = Instant::now() + patience;
    loop {
        let connected = pathdoc_sys::netns::run_in_netns(&ns, || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
        })
        .map_err(|e| LabError::Measurement(e.to_string()))?;
        if connected {
            return Ok(());
        }
        if Instant::now() > give_up {
            return Err(LabError::Measurement(format!(
                "pathdoc server did not come up at {addr}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Seed 000 from captures: record both ends while an idle connection's keepalives die at the
/// strict NAT, then `pathdoc analyze client.pcap server.pcap` says where they vanished.
fn analyze_both_ends(lab: &Lab, say: Say) -> Result<(), LabError> {
    use pathdoc_lab::capture::{self, CaptureOptions, KeepaliveSide};
    let dir = std::env::temp_dir().join(format!("pathdoc-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError::Measurement(format!("creating {}: {e}", dir.display())))?;
    let (client, server) = (dir.join("client.pcap"), dir.join("server.pcap"));
    let opts = CaptureOptions {
        snaplen: 128,
        filter: Some("tcp".into()),
    };
    let result = (|| -> Result<Report, LabError> {
        let c = capture::start(lab, "client", None, &client, &opts)?;
        let s = capture::start(lab, "server", None, &server, &opts)?;
        say(
            "captures on client and server; an idle connection with client keepalives after 5 s..."
                .into(),
        );
        capture::idle_keepalive_connection(
            lab,
            KeepaliveSide::Client,
            Duration::from_secs(5),
            Duration::from_secs(1),
            3,
            Duration::from_secs(15),
        )?;
        // A fresh connection afterwards shows both captures were still running.
        let mut again = pathdoc_lab::traffic::TcpPair::open(lab)?;
        again.client_to_server(b"back", Duration::from_secs(2))?;
        drop(again);
        c.stop()?;
        s.stop()?;
        let exe = std::env::current_exe()
            .map_err(|e| LabError::Measurement(format!("cannot find the pathdoc binary: {e}")))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("analyze").arg(&client).arg(&server).arg("--json");
        let done = pathdoc_lab::exec::run_unchecked(&mut cmd, None, Duration::from_secs(60))?;
        serde_json::from_str(&done.stdout).map_err(|e| {
            LabError::Measurement(format!(
                "pathdoc analyze printed no report ({e}): {}",
                done.stderr.trim()
            ))
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    say("pathdoc analyze client.pcap server.pcap:".into());
    let mut shown = report.clone();
    shown
        .findings
        .retain(|f| f.id == "lost-between-captures" || f.id == "idle-death");
    for line in output::render_compact(&shown) {
        say(format!("  {line}"));
    }
    Ok(())
}
