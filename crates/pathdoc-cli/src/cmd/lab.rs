//! `pathdoc lab …`: build, inspect and remove namespace labs, and run the demo. The work is done
//! by `pathdoc-lab`; this module parses arguments and renders text or `--json` (schema
//! `pathdoc.lab/1`).

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::Context;
use clap::{Args, Subcommand};
use pathdoc_lab::demo::{self, DemoStep};
use pathdoc_lab::{state, Lab, LabOptions, LabState, Teardown, Topology, SCHEMA};
use serde_json::json;

use crate::error::{CliError, ErrorKind};
use crate::Global;

pub const EXAMPLES: &str = "Examples:
  pathdoc lab list                                    # the scenarios and the story each reproduces
  pathdoc lab up --scenario pmtu-blackhole --name bh  # build one and leave it running
  pathdoc lab exec bh client -- ping -c3 203.0.113.10 # run a command in one of its hosts
  pathdoc lab status                                  # what is running
  pathdoc lab down bh                                 # remove it
  pathdoc lab demo --only modem-idle                  # show a fault and pathdoc's diagnosis

Labs are network namespaces named <prefix><lab>-<host>; --prefix (or PATHDOC_LAB_PREFIX) keeps
several users' labs apart. Needs root.";

#[derive(Args, Debug)]
pub struct LabArgs {
    /// Namespace prefix of the labs to act on.
    #[arg(long, global = true, env = "PATHDOC_LAB_PREFIX", default_value = pathdoc_lab::lab::DEFAULT_PREFIX)]
    prefix: String,
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand, Debug)]
enum LabCommand {
    /// Build a lab from a built-in scenario or a TOML topology and leave it running.
    #[command(
        after_help = "Examples:\n  pathdoc lab up --scenario modem-idle --name home\n  pathdoc lab up --topology examples/topology.toml\n  pathdoc lab up --scenario clean --prefix alice-    # keep apart from other users' labs"
    )]
    Up(UpArgs),
    /// Remove a lab (namespaces, links, processes, state), or every lab with the prefix.
    #[command(
        after_help = "Examples:\n  pathdoc lab down home\n  pathdoc lab down --all --prefix alice-    # every lab (and orphan namespace) of that prefix only"
    )]
    Down(DownArgs),
    /// Show running labs, or one lab in detail.
    #[command(after_help = "Examples:\n  pathdoc lab status\n  pathdoc lab status home --json")]
    Status(StatusArgs),
    /// List the built-in scenarios and the failure story each reproduces.
    #[command(
        after_help = "Examples:\n  pathdoc lab list\n  pathdoc lab list --json | jq -r '.scenarios[].name'"
    )]
    List,
    /// Run a command inside one host of a lab.
    #[command(
        after_help = "Examples:\n  pathdoc lab exec home client -- ping -c 3 203.0.113.10\n  pathdoc lab exec home server -- pathdoc server\n  pathdoc lab exec home client -- pathdoc check 203.0.113.10 --idle --idle-max 2min"
    )]
    Exec(ExecArgs),
    /// Bring up each scenario in turn and show its fault with real traffic (about 4 minutes on two
    /// cores; --only SCENARIO for one).
    #[command(
        after_help = "Examples:\n  pathdoc lab demo\n  pathdoc lab demo --only pmtu-blackhole --only modem-idle"
    )]
    Demo(DemoArgs),
    /// Record packets on one interface of a lab host (tcpdump in its namespace) for `pathdoc analyze`.
    #[command(after_help = super::lab_capture::EXAMPLES)]
    Capture(super::lab_capture::CaptureArgs),
    #[command(hide = true, name = "delay-line")]
    DelayLine(super::lab_delay_line::DelayLineArgs),
}

#[derive(Args, Debug)]
struct UpArgs {
    /// Built-in scenario (see `pathdoc lab list`).
    #[arg(long, conflicts_with = "topology")]
    scenario: Option<String>,
    /// TOML topology file (format: docs/lab.md, example: examples/topology.toml).
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Lab name (default: random 4-character id).
    #[arg(long)]
    name: Option<String>,
}

#[derive(Args, Debug)]
struct DownArgs {
    /// Lab to remove.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    name: Option<String>,
    /// Remove every lab and every namespace with the prefix (orphans after a crash included).
    #[arg(long)]
    all: bool,
}

#[derive(Args, Debug)]
struct StatusArgs {
    name: Option<String>,
}

#[derive(Args, Debug)]
struct ExecArgs {
    name: String,
    /// `client`, `hop1`..`hopN` or `server`.
    host: String,
    /// The command, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Only these scenarios (default: all, in order).
    #[arg(long = "only", value_name = "SCENARIO")]
    only: Vec<String>,
}

impl LabArgs {
    /// `up`, `down`, … for messages and the error document.
    pub fn subcommand_name(&self) -> &'static str {
        match self.command {
            LabCommand::Up(_) => "up",
            LabCommand::Down(_) => "down",
            LabCommand::Status(_) => "status",
            LabCommand::List => "list",
            LabCommand::Exec(_) => "exec",
            LabCommand::Demo(_) => "demo",
            LabCommand::DelayLine(_) => "delay-line",
            LabCommand::Capture(_) => "capture",
        }
    }
}

pub fn run(args: LabArgs, global: Global) -> anyhow::Result<i32> {
    let prefix = args.prefix.clone();
    let result = match args.command {
        LabCommand::Up(a) => up(a, &args.prefix, global),
        LabCommand::Down(a) => down(a, &args.prefix, global),
        LabCommand::Status(a) => status(a, &args.prefix, global),
        LabCommand::List => list(global),
        LabCommand::Exec(a) => exec(a, &args.prefix),
        LabCommand::Demo(a) => run_demo(a, &args.prefix, global),
        LabCommand::Capture(a) => super::lab_capture::run(a, &args.prefix, global),
        LabCommand::DelayLine(a) => super::lab_delay_line::run(a),
    };
    result.map_err(|e| with_prefix_hint(e, &prefix))
}

/// The lab crate's messages about a lab by name, restated with the prefix in use: a hint without
/// it would act on other users' labs (or the default prefix's) when copied.
fn with_prefix_hint(err: anyhow::Error, prefix: &str) -> anyhow::Error {
    let Some(lab_err) = err
        .chain()
        .find_map(|c| c.downcast_ref::<pathdoc_lab::LabError>())
    else {
        return err;
    };
    let status = format!("pathdoc lab status --prefix {prefix}");
    let cli = match lab_err {
        pathdoc_lab::LabError::NoSuchLab(name) => CliError::new(
            ErrorKind::Lab,
            format!("no lab named `{name}` with prefix `{prefix}`"),
        )
        .hint(format!("see `{status}`")),
        pathdoc_lab::LabError::NameTaken(name) => CliError::new(
            ErrorKind::Lab,
            format!("a lab named `{name}` already exists with prefix `{prefix}`"),
        )
        .hint(format!(
            "see `{status}`; remove it with `pathdoc lab down {name} --prefix {prefix}`"
        )),
        _ => return err,
    };
    cli.into()
}

fn load_topology(scenario: Option<&str>, file: Option<&PathBuf>) -> anyhow::Result<Topology> {
    match (scenario, file) {
        (_, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading topology {}", path.display()))?;
            Topology::from_toml(&text).with_context(|| format!("in {}", path.display()))
        }
        (Some(name), None) => Ok(Topology::scenario(name)?),
        (None, None) => Ok(Topology::scenario("clean")?),
    }
}

fn up(a: UpArgs, prefix: &str, global: Global) -> anyhow::Result<i32> {
    let topo = load_topology(a.scenario.as_deref(), a.topology.as_ref())?;
    let opts = LabOptions {
        name: a.name,
        prefix: prefix.to_string(),
        helper_exe: None,
    };
    let lab = Lab::up(&topo, &opts)?;
    let st = lab.persist();
    if global.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"schema": SCHEMA, "command": "up", "lab": st}))?
        );
    } else {
        crate::out!("{}", render_lab(&st, true));
    }
    Ok(0)
}

/// The "use it" lines of a dual-stack lab: IPv6 too, and `pathdoc check server` by name (the
/// lab's hosts file gives `server` both addresses), which checks both families side by side.
fn usage_dual(s: &mut String, st: &LabState, flag: &str) {
    let name = &st.name;
    if let Some(a6) = st
        .hosts
        .iter()
        .find(|h| h.name == "server")
        .and_then(|h| h.addr6)
    {
        s.push_str(&format!(
            "  pathdoc lab exec {name}{flag} client -- ping -6 -c 3 {a6}\n"
        ));
    }
    s.push_str(&format!(
        "  pathdoc lab exec {name}{flag} server -- pathdoc server --listen [::]:7224   # IPv4 and IPv6; in a second terminal\n"
    ));
    s.push_str(&format!(
        "  pathdoc lab exec {name}{flag} client -- pathdoc check server   # by name: both families side by side (-4/-6: one)\n"
    ));
}

fn render_lab(st: &LabState, usage: bool) -> String {
    let mut s = String::new();
    let what = st
        .scenario
        .as_deref()
        .map(|n| format!(" (scenario {n})"))
        .unwrap_or_default();
    s.push_str(&format!(
        "lab {}{what}: {}\n",
        st.name,
        st.description.as_deref().unwrap_or("custom topology")
    ));
    s.push_str("hosts:\n");
    for h in &st.hosts {
        // A dual-stack lab's hosts have an IPv6 address beside the IPv4 one.
        let addr6 = h.addr6.map(|a| format!(" {a}")).unwrap_or_default();
        s.push_str(&format!(
            "  {:<7} {:<15}{addr6} netns {}\n",
            h.name, h.addr, h.netns
        ));
        for i in &h.ifaces {
            s.push_str(&format!("          {i}\n"));
        }
    }
    if st.faults.is_empty() {
        s.push_str("faults: none\n");
    } else {
        s.push_str("faults:\n");
        for f in &st.faults {
            s.push_str(&format!("  - {f}\n"));
        }
    }
    if !st.processes.is_empty() {
        s.push_str("processes:\n");
        for p in &st.processes {
            let alive = if state_alive(p.pid) {
                "running"
            } else {
                "gone"
            };
            s.push_str(&format!(
                "  - pid {} in {} ({}): {}\n",
                p.pid, p.netns, alive, p.what
            ));
        }
    }
    if usage {
        let server = st
            .hosts
            .iter()
            .find(|h| h.name == "server")
            .map(|h| h.addr.to_string())
            .unwrap_or_default();
        // Always spelled out: PATHDOC_LAB_PREFIX may differ in the shell the hint is pasted in.
        let flag = format!(" --prefix {}", st.prefix);
        s.push_str("use it:\n");
        s.push_str(&format!(
            "  pathdoc lab exec {}{flag} client -- ping -c 3 {server}\n",
            st.name
        ));
        let dual = st.topology.family.has_v4() && st.topology.family.has_v6();
        if dual {
            usage_dual(&mut s, st, &flag);
        } else {
            s.push_str(&format!(
                "  pathdoc lab exec {}{flag} server -- pathdoc server      # in a second terminal\n",
                st.name
            ));
            s.push_str(&format!(
                "  pathdoc lab exec {}{flag} client -- pathdoc check {server}\n",
                st.name
            ));
        }
        if let Some(c) = st.hosts.first() {
            s.push_str(&format!("  ip netns exec {} bash\n", c.netns));
        }
        if let Some(cfg) = &st.ssh_config {
            let sshd = st.topology.sshd_hosts().join(" ");
            s.push_str(&format!(
                "  pathdoc lab exec {}{flag} client -- ssh -F {} {sshd}\n",
                st.name,
                cfg.display()
            ));
            s.push_str(&format!(
                "  pathdoc lab exec {}{flag} client -- pathdoc ssh -F {} {sshd}\n",
                st.name,
                cfg.display()
            ));
        }
        s.push_str(&format!(
            "remove it:\n  pathdoc lab down {}{flag}\n",
            st.name
        ));
    }
    s
}

fn state_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn render_teardown(td: &Teardown) -> String {
    format!(
        "removed {} namespace(s), stopped {} process(es), removed {} state file(s)\n",
        td.namespaces.len(),
        td.killed_pids.len(),
        td.state_files.len()
    )
}

fn down(a: DownArgs, prefix: &str, global: Global) -> anyhow::Result<i32> {
    pathdoc_lab::preflight::require_root()?;
    let (td, what) = if a.all {
        (
            state::destroy_all(prefix)?,
            format!("every lab with prefix {prefix}"),
        )
    } else {
        let name = a.name.unwrap_or_default();
        let st = state::load(prefix, &name)?;
        (state::destroy(&st)?, format!("lab {name}"))
    };
    if global.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"schema": SCHEMA, "command": "down", "removed": td})
            )?
        );
    } else {
        crate::out!("{what}: {}", render_teardown(&td));
    }
    Ok(0)
}

fn status(a: StatusArgs, prefix: &str, global: Global) -> anyhow::Result<i32> {
    let labs = match &a.name {
        Some(name) => vec![state::load(prefix, name)?],
        None => state::list(prefix),
    };
    let orphans: Vec<String> = pathdoc_sys::netns::list_with_prefix(prefix)
        .into_iter()
        .filter(|ns| !labs.iter().any(|l| l.namespaces.contains(ns)))
        .collect();
    let healthy = labs.iter().all(|l| l.is_complete());
    if global.json {
        let docs: Vec<_> = labs
            .iter()
            .map(|l| json!({"lab": l, "complete": l.is_complete(), "live_pids": l.live_processes().iter().map(|p| p.pid).collect::<Vec<_>>()}))
            .collect();
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"schema": SCHEMA, "command": "status", "labs": docs, "orphan_namespaces": orphans})
            )?
        );
    } else {
        if labs.is_empty() {
            crate::outln!("no labs with prefix {prefix}");
        }
        for l in &labs {
            if a.name.is_some() {
                crate::out!("{}", render_lab(l, true));
            } else {
                let what = l.scenario.clone().unwrap_or_else(|| "custom".into());
                let server = l
                    .hosts
                    .iter()
                    .find(|h| h.name == "server")
                    .map(|h| h.addr.to_string())
                    .unwrap_or_default();
                crate::outln!(
                    "{:<10} {:<18} {} hosts, server {server}",
                    l.name,
                    what,
                    l.hosts.len()
                );
            }
            if !l.is_complete() {
                crate::outln!(
                    "  ! some namespaces of {} are gone; remove the rest with `pathdoc lab down {} --prefix {prefix}`",
                    l.name, l.name
                );
            }
        }
        if !orphans.is_empty() {
            crate::outln!(
                "orphan namespaces (no state file): {}; `pathdoc lab down --all --prefix {prefix}` removes them and every other lab with prefix {prefix}",
                orphans.join(", ")
            );
        }
    }
    Ok(if healthy && orphans.is_empty() { 0 } else { 1 })
}

fn list(global: Global) -> anyhow::Result<i32> {
    let scenarios = pathdoc_lab::scenarios::SCENARIOS;
    if global.json {
        let docs: Vec<_> = scenarios
            .iter()
            // `seed` is the old name of `story`, kept for scripts written against pathdoc.lab/1.
            .map(|s| json!({"name": s.name, "summary": s.summary, "story": s.seed, "seed": s.seed}))
            .collect();
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"schema": SCHEMA, "command": "list", "scenarios": docs})
            )?
        );
    } else {
        for s in scenarios {
            crate::outln!("{:<18} {}\n{:<18} story: {}", s.name, s.summary, "", s.seed);
        }
    }
    Ok(0)
}

fn exec(a: ExecArgs, prefix: &str) -> anyhow::Result<i32> {
    let st = state::load(prefix, &a.name)?;
    let host = st
        .hosts
        .iter()
        .find(|h| h.name == a.host)
        .with_context(|| {
            format!(
                "no host `{}` in lab {}; hosts: {}",
                a.host,
                a.name,
                st.hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    // A CPU-capped host: what runs there joins its cgroup (through this process, which only waits).
    if let Some(g) = st.cgroups.iter().find(|g| g.host == a.host) {
        g.group
            .add(std::process::id())
            .with_context(|| format!("joining the CPU cgroup {}", g.group.path.display()))?;
    }
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", &host.netns])
        .args(&a.command)
        .status()
        .with_context(|| {
            format!(
                "running `ip netns exec {} {}`",
                host.netns,
                a.command.join(" ")
            )
        })?;
    Ok(status.code().unwrap_or(2))
}

/// The lab the demo is currently running, so Ctrl-C can remove it.
static DEMO_LAB: Mutex<Option<(String, String)>> = Mutex::new(None);

/// Set by the Ctrl-C handler before it tears the lab down. A step that fails because the same
/// signal killed its child processes is not a demo failure; the main thread then starts nothing
/// new and leaves the exit (130) to the handler.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called by the main thread once it has seen the interruption: wait for the handler to finish
/// the teardown and exit, but never forever.
fn wait_for_interrupt_handler() -> i32 {
    std::thread::sleep(std::time::Duration::from_secs(30));
    130
}

fn run_demo(a: DemoArgs, prefix: &str, global: Global) -> anyhow::Result<i32> {
    pathdoc_lab::preflight::check_for_up(true, false)?;
    pathdoc_lab::preflight::check_for_demo()?;
    let steps: Vec<DemoStep> = demo::builtin_steps()
        .into_iter()
        .filter(|s| a.only.is_empty() || a.only.iter().any(|o| o == s.scenario))
        .collect();
    if steps.is_empty() {
        anyhow::bail!(
            "no demo step matches {:?}; scenarios: {}",
            a.only,
            pathdoc_lab::scenarios::names().join(", ")
        );
    }
    let handler_prefix = prefix.to_string();
    ctrlc::set_handler(move || {
        INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
        let current = DEMO_LAB.lock().map(|g| g.clone()).unwrap_or(None);
        if let Some((p, name)) = current {
            if let Ok(st) = state::load(&p, &name) {
                let _ = state::destroy(&st);
            }
        }
        let _ = state::destroy_all(&format!("{handler_prefix}demo{}-", std::process::id()));
        crate::errln!("\npathdoc lab demo: interrupted; lab removed");
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")?;

    let mut results = Vec::new();
    let mut failed = false;
    let started = std::time::Instant::now();
    for (i, step) in steps.iter().enumerate() {
        let mut topo = Topology::scenario(step.scenario)?;
        (step.adjust)(&mut topo);
        let name = format!("demo{}-{i}", std::process::id());
        *DEMO_LAB.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((prefix.to_string(), name.clone()));
        let mut lines: Vec<String> = Vec::new();
        if !global.json {
            crate::outln!("== {} — {}", step.scenario, step.title);
            if let Some(info) = pathdoc_lab::scenarios::info(step.scenario) {
                crate::outln!("   story: {}", info.seed);
            }
        }
        let mut say = |line: String| {
            if !global.json {
                crate::outln!("   {line}");
            }
            lines.push(line);
        };
        let outcome = (|| -> Result<(), pathdoc_lab::LabError> {
            let opts = LabOptions {
                name: Some(name.clone()),
                prefix: prefix.to_string(),
                helper_exe: None,
            };
            let lab = Lab::up(&topo, &opts)?;
            for f in lab.state().faults {
                say(format!("fault: {f}"));
            }
            (step.show)(&lab, &mut say)?;
            super::lab_demo_checks::run(&lab, &mut say, step.scenario)?;
            lab.down()?;
            Ok(())
        })();
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(wait_for_interrupt_handler());
        }
        *DEMO_LAB.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let error = outcome.err().map(|e| e.to_string());
        if let Some(e) = &error {
            failed = true;
            if !global.json {
                crate::outln!("   error: {e}");
            }
        }
        results.push(json!({"scenario": step.scenario, "title": step.title, "observations": lines, "error": error}));
    }
    if global.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"schema": SCHEMA, "command": "demo", "steps": results})
            )?
        );
    } else {
        crate::outln!("demo finished in {:.0} s", started.elapsed().as_secs_f64());
    }
    Ok(if failed { 2 } else { 0 })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::Ipv4Addr;

    /// Every help text of `pathdoc lab` and its subcommands.
    fn lab_help_texts() -> Vec<(String, String)> {
        let mut cli = crate::cli_command();
        cli.build();
        let lab = cli.find_subcommand("lab").expect("lab command").clone();
        let mut texts = vec![(
            "lab".to_string(),
            lab.clone().render_long_help().to_string(),
        )];
        for sub in lab.get_subcommands() {
            let name = format!("lab {}", sub.get_name());
            texts.push((name, sub.clone().render_long_help().to_string()));
        }
        texts
    }

    /// IPv4 literals in a text (dotted quads with nothing address-like glued on).
    fn ipv4_literals(text: &str) -> Vec<Ipv4Addr> {
        text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter_map(|word| word.trim_matches('.').parse().ok())
            .collect()
    }

    /// The examples are meant to be pasted into a running lab, so every address they name must
    /// be one some built-in scenario gives a host (`10.0.2.2` never existed: the server is
    /// 203.0.113.10, the client 192.168.1.100).
    #[test]
    fn help_examples_use_addresses_a_lab_has() {
        let mut planned = BTreeSet::new();
        for name in pathdoc_lab::scenarios::names() {
            let topology = pathdoc_lab::scenarios::topology(name).expect("built-in scenario");
            for host in pathdoc_lab::plan::plan(&topology, "t").hosts {
                planned.extend(host.ifaces.iter().map(|iface| iface.addr));
            }
        }
        let mut checked = 0;
        for (command, help) in lab_help_texts() {
            for addr in ipv4_literals(&help) {
                assert!(
                    planned.contains(&addr),
                    "`pathdoc {command} --help` names {addr}, which no lab host has; planned: {planned:?}"
                );
                checked += 1;
            }
        }
        assert!(
            checked >= 3,
            "the examples name lab addresses ({checked} found)"
        );
    }
}
