//! End-to-end: lab lifecycle. `down`, drop and panics remove everything; the CLI's up/status/
//! list/down/exec work across processes with versioned JSON; `down --all` removes orphans; bad
//! input is a clear error.

use crate::support;

use std::process::Command;

use pathdoc_lab::{Lab, Topology};
use serde_json::Value;
use support::{assert_nothing_left, opts, prefix, Cleanup};

/// Lab prefix stem of this file: labs are `pdt-<test>-`.
const STEM: &str = "pdt";

fn pathdoc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pathdoc"))
        .args(args)
        .output()
        .expect("run pathdoc");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn down_removes_namespaces_links_and_processes() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "down");
    let topo = Topology::from_toml("[[hop]]\nkind = \"nat\"\n[[link]]\ndelay_ms = 1.0\n").unwrap();
    let lab = Lab::up(&topo, &opts(STEM, "down")).unwrap();
    assert_eq!(
        lab.plan().namespaces().len(),
        4,
        "client, hop1, server, delay element"
    );
    for ns in lab.plan().namespaces() {
        assert!(pathdoc_sys::netns::exists(&ns), "{ns}");
    }
    let mut sleeper = lab.command("server", "sleep");
    sleeper.arg("300");
    let proc_ = lab.spawn("server", sleeper).unwrap();
    let mut pids: Vec<u32> = lab.state().processes.iter().map(|p| p.pid).collect();
    pids.push(proc_.pid());
    assert_eq!(pids.len(), 3, "delay line + sleeper (recorded) + sleeper");
    let td = lab.down().unwrap();
    assert_eq!(td.namespaces.len(), 4);
    drop(proc_);
    assert_nothing_left(STEM, "down", &pids);
}

#[test]
fn drop_and_panic_tear_down() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "panic");
    let result = std::panic::catch_unwind(|| {
        let lab = Lab::up(
            &Topology::scenario("modem-idle").unwrap(),
            &opts(STEM, "panic"),
        )
        .unwrap();
        assert!(pathdoc_sys::netns::exists(lab.netns("hop1")));
        panic!("test failure inside a lab");
    });
    assert!(result.is_err());
    assert_nothing_left(STEM, "panic", &[]);
}

#[test]
fn names_are_unique_and_validated() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "names");
    let mut o = opts(STEM, "names");
    o.name = Some("twin".into());
    let lab = Lab::up(&Topology::default(), &o).unwrap();
    let err = Lab::up(&Topology::default(), &o).unwrap_err().to_string();
    assert!(err.contains("already exists"), "{err}");
    o.name = Some("Bad Name".into());
    let err = Lab::up(&Topology::default(), &o).unwrap_err().to_string();
    assert!(err.contains("invalid lab name"), "{err}");
    // Unknown host is a clear error, not a panic, through the checked accessor.
    assert!(lab
        .host("hop7")
        .unwrap_err()
        .to_string()
        .contains("client, server"));
    drop(lab);
    assert_nothing_left(STEM, "names", &[]);
}

#[test]
fn cli_up_status_exec_down_with_json() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "cli");
    let p = prefix(STEM, "cli");
    let (code, out, err) = pathdoc(&[
        "lab",
        "up",
        "--scenario",
        "cgnat-chain",
        "--name",
        "one",
        "--prefix",
        &p,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["schema"], "pathdoc.lab/1");
    assert_eq!(doc["lab"]["hosts"][0]["addr"], "192.168.1.100");
    assert_eq!(doc["lab"]["hosts"][3]["addr"], "203.0.113.10");

    let (code, out, _) = pathdoc(&["lab", "status", "--prefix", &p, "--json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["labs"][0]["lab"]["name"], "one");
    assert_eq!(doc["labs"][0]["complete"], true);

    // exec runs inside the host's namespace: the server sees its own address only.
    let (code, out, _) = pathdoc(&[
        "lab", "exec", "one", "server", "--prefix", &p, "--", "ip", "-4", "-o", "addr", "show",
        "dev", "lan0",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("203.0.113.10/24"), "{out}");
    let (code, _, _) = pathdoc(&[
        "lab",
        "exec",
        "one",
        "client",
        "--prefix",
        &p,
        "--",
        "ping",
        "-c",
        "1",
        "-W",
        "2",
        "203.0.113.10",
    ]);
    assert_eq!(code, 0, "client reaches the server through two NATs");

    let (code, out, _) = pathdoc(&["lab", "down", "one", "--prefix", &p, "--json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["removed"]["namespaces"].as_array().unwrap().len(), 4);
    let (code, _, err) = pathdoc(&["lab", "down", "one", "--prefix", &p]);
    assert_eq!(code, 2);
    assert!(err.contains("no lab named `one`"), "{err}");
    assert_nothing_left(STEM, "cli", &[]);
}

#[test]
fn down_all_removes_orphans() {
    let _shared = crate::support::shared();
    let _c = Cleanup::new(STEM, "orphan");
    let p = prefix(STEM, "orphan");
    let (code, _, err) = pathdoc(&[
        "lab",
        "up",
        "--scenario",
        "clean",
        "--name",
        "left",
        "--prefix",
        &p,
    ]);
    assert_eq!(code, 0, "{err}");
    let st = pathdoc_lab::state::load(&p, "left").unwrap();
    let pids: Vec<u32> = st.processes.iter().map(|x| x.pid).collect();
    assert_eq!(
        pids.len(),
        1,
        "clean has one delay line that outlives `lab up`"
    );
    // An orphan namespace with no state file, as after a crash mid-build.
    let orphan = format!("{p}crash-client");
    assert!(Command::new("ip")
        .args(["netns", "add", &orphan])
        .status()
        .unwrap()
        .success());
    let (code, out, _) = pathdoc(&["lab", "status", "--prefix", &p]);
    assert_eq!(code, 1, "orphans make status non-zero");
    assert!(out.contains(&orphan), "{out}");
    let (code, out, err) = pathdoc(&["lab", "down", "--all", "--prefix", &p]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed 5 namespace(s)"), "{out}");
    assert_nothing_left(STEM, "orphan", &pids);
}

#[test]
fn cli_list_and_bad_input() {
    let _shared = crate::support::shared();
    let (code, out, _) = pathdoc(&["lab", "list", "--json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["schema"], "pathdoc.lab/1");
    let names: Vec<&str> = doc["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "clean",
            "modem-idle",
            "cgnat-chain",
            "pmtu-blackhole",
            "nic-ignores-mtu",
            "lossy-long-fat",
            "window-limited",
            "slow-lossy-duplex",
            "ssh-window-limited",
            "ssh-cpu-limited",
            "policed-line",
            "bloated-uplink",
            "shared-bottleneck",
            "v6-ptb-blackhole",
            "v6-firewall-idle"
        ]
    );
    let (_, out, _) = pathdoc(&["lab", "list"]);
    // The story in words, not an internal reference number.
    assert!(
        out.contains("Deutsche Telekom") && !out.contains("seed"),
        "{out}"
    );

    let (code, _, err) = pathdoc(&["lab", "up", "--scenario", "nope", "--prefix", "pdt-bad-"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown scenario `nope`") && err.contains("modem-idle"),
        "{err}"
    );
    let bad = std::env::temp_dir().join(format!("pathdoc-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "[[link]]\nmtu = 40\n").unwrap();
    let (code, _, err) = pathdoc(&[
        "lab",
        "up",
        "--topology",
        bad.to_str().unwrap(),
        "--prefix",
        "pdt-bad-",
    ]);
    let _ = std::fs::remove_file(&bad);
    assert_eq!(code, 2);
    assert!(err.contains("mtu 40 out of range"), "{err}");
    assert!(pathdoc_sys::netns::list_with_prefix("pdt-bad-").is_empty());
}

#[test]
fn example_topology_parses_and_plans() {
    let _shared = crate::support::shared();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/topology.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let topo = Topology::from_toml(&text).unwrap();
    assert_eq!(topo.host_names(), ["client", "hop1", "hop2", "server"]);
    let plan = pathdoc_lab::plan::plan(&topo, "x");
    assert_eq!(
        plan.host("server").unwrap().primary_addr().to_string(),
        "203.0.113.10"
    );
    assert!(!topo.describe_faults().is_empty());
}

/// Ctrl-C in the middle of `pathdoc lab demo` (while pathdoc's own server and check run in the
/// lab) removes the lab and ends every process it started, as a terminal's SIGINT to the whole
/// foreground process group would.
#[test]
fn ctrl_c_during_the_demo_leaves_nothing_behind() {
    let _shared = crate::support::shared();
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    let _c = Cleanup::new(STEM, "sigint");
    let p = prefix(STEM, "sigint");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_pathdoc"))
        .args(["lab", "demo", "--only", "modem-idle", "--prefix", &p])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start the demo");
    let pgid = demo.id() as i32;

    // Interrupt once pathdoc's server runs in the lab (the check is then under way).
    let deadline = Instant::now() + Duration::from_secs(60);
    let pids: Vec<u32> = loop {
        let labs = pathdoc_lab::state::list(&p);
        if let Some(st) = labs.first() {
            if st
                .processes
                .iter()
                .any(|x| x.what.contains(" server --listen"))
            {
                break st.processes.iter().map(|x| x.pid).collect();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the demo never started pathdoc's server in its lab"
        );
        assert!(
            demo.try_wait().unwrap().is_none(),
            "the demo ended before it could be interrupted"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) with a negative pid signals our own child's process group.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);

    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = demo.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(130), "interrupted demo exits 130");
    // Processes in the lab's namespaces may take a moment to be reaped after the signal.
    std::thread::sleep(Duration::from_millis(500));
    assert_nothing_left(STEM, "sigint", &pids);
    let alive = live_processes_in_group(pgid);
    assert!(
        alive.is_empty(),
        "processes of the interrupted demo still run: {alive:?}"
    );
}

/// Processes of process group `pgid` that are still running (zombies, which have exited and
/// only wait to be reaped by init, do not count), as "pid (comm) state".
fn live_processes_in_group(pgid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            // pid (comm) state ppid pgrp ...; comm may contain spaces, so split at the last ')'.
            let (head, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let (state, group) = (*fields.first()?, fields.get(2)?.parse::<i32>().ok()?);
            (group == pgid && state != "Z" && state != "X").then(|| format!("{head}) {state}"))
        })
        .collect()
}
