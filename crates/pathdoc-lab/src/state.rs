//! Lab state on disk (`/run/pathdoc/labs/<prefix><name>.json`) and teardown from it, so `down`
//! and `status` work from another process and `down --all` removes orphans after a crash.

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::LabError;
use crate::exec;
use crate::topology::Topology;

/// Schema tag of lab JSON documents (state file and `--json` output).
pub const SCHEMA: &str = "pathdoc.lab/1";

/// Default state directory; override with `PATHDOC_LAB_STATE_DIR`.
pub const DEFAULT_STATE_DIR: &str = "/run/pathdoc/labs";

/// One host as recorded in the state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostState {
    pub name: String,
    pub netns: String,
    /// The primary address: IPv4, or IPv6 in an IPv6-only lab.
    pub addr: IpAddr,
    /// The primary IPv6 address in a dual-stack lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr6: Option<Ipv6Addr>,
    /// `name addr/len mtu N` for each interface.
    pub ifaces: Vec<String>,
}

/// A running helper process recorded in the state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessState {
    pub pid: u32,
    pub netns: String,
    pub what: String,
}

/// Everything needed to show or remove a lab from another process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabState {
    pub schema: String,
    pub name: String,
    pub prefix: String,
    pub scenario: Option<String>,
    pub description: Option<String>,
    pub created_unix: u64,
    pub hosts: Vec<HostState>,
    pub namespaces: Vec<String>,
    pub processes: Vec<ProcessState>,
    pub faults: Vec<String>,
    pub topology: Topology,
    /// CPU-capping cgroups of hosts with `cpu_max_percent`, removed at teardown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<HostCgroup>,
    /// Directories the lab made (sshd keys and configs), removed at teardown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<PathBuf>,
    /// `ssh -F <this> <host>` logs in to the lab's sshd hosts from the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_config: Option<PathBuf>,
}

/// A host's CPU cgroup as recorded in the state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCgroup {
    pub host: String,
    pub group: pathdoc_sys::cgroup::CpuLimitGroup,
}

impl LabState {
    /// `<prefix><name>`: the namespace name stem and state file stem.
    pub fn id(&self) -> String {
        format!("{}{}", self.prefix, self.name)
    }
    /// Whether every namespace still exists.
    pub fn is_complete(&self) -> bool {
        self.namespaces
            .iter()
            .all(|n| pathdoc_sys::netns::exists(n))
    }
    /// Recorded processes that are still running.
    pub fn live_processes(&self) -> Vec<&ProcessState> {
        self.processes.iter().filter(|p| pid_alive(p.pid)).collect()
    }
}

/// The state directory in use.
pub fn state_dir() -> PathBuf {
    std::env::var_os("PATHDOC_LAB_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// Path of a lab's state file.
pub fn state_path(prefix: &str, name: &str) -> PathBuf {
    state_dir().join(format!("{prefix}{name}.json"))
}

/// Write the state file (atomically: temp file + rename).
pub fn save(path: &Path, state: &LabState) -> Result<(), LabError> {
    let text = serde_json::to_string_pretty(state).map_err(|e| LabError::State {
        path: path.into(),
        message: e.to_string(),
    })?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .map_err(|e| LabError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| LabError::io(format!("renaming {}", tmp.display()), e))
}

/// Read one state file.
pub fn load_path(path: &Path) -> Result<LabState, LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LabError::io(format!("reading {}", path.display()), e))?;
    let state: LabState = serde_json::from_str(&text).map_err(|e| LabError::State {
        path: path.into(),
        message: e.to_string(),
    })?;
    if state.schema != SCHEMA {
        return Err(LabError::State {
            path: path.into(),
            message: format!("schema {} is not {SCHEMA}", state.schema),
        });
    }
    Ok(state)
}

/// Load the lab `name` under `prefix`.
pub fn load(prefix: &str, name: &str) -> Result<LabState, LabError> {
    let path = state_path(prefix, name);
    if !path.exists() {
        return Err(LabError::NoSuchLab(name.to_string()));
    }
    load_path(&path)
}

/// All labs whose state files carry `prefix`, sorted by name (unreadable files are skipped).
pub fn list(prefix: &str) -> Vec<LabState> {
    let mut out: Vec<LabState> = std::fs::read_dir(state_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .filter_map(|p| load_path(&p).ok())
                .filter(|s| s.prefix == prefix)
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What a teardown removed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Teardown {
    pub namespaces: Vec<String>,
    pub killed_pids: Vec<u32>,
    pub state_files: Vec<PathBuf>,
}

impl Teardown {
    pub fn merge(&mut self, other: Teardown) {
        self.namespaces.extend(other.namespaces);
        self.killed_pids.extend(other.killed_pids);
        self.state_files.extend(other.state_files);
    }
}

pub(crate) fn pid_alive(pid: u32) -> bool {
    // A zombie is dead for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// Pids of processes whose network namespace is `netns`.
fn pids_in(netns: &str) -> Vec<u32> {
    exec::ip(None, &["netns", "pids", netns])
        .map(|out| {
            out.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn kill_all(pids: &[u32]) -> Vec<u32> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let own = std::process::id();
    let pids: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| *p != own && *p > 1)
        .collect();
    for p in &pids {
        let _ = kill(Pid::from_raw(*p as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline && pids.iter().any(|p| pid_alive(*p)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for p in &pids {
        if pid_alive(*p) {
            let _ = kill(Pid::from_raw(*p as i32), Signal::SIGKILL);
        }
    }
    pids
}

/// Kill every process inside `namespaces` and delete them. Missing namespaces are skipped.
pub fn destroy_namespaces(namespaces: &[String]) -> Result<Teardown, LabError> {
    let mut td = Teardown::default();
    let present: Vec<&String> = namespaces
        .iter()
        .filter(|n| pathdoc_sys::netns::exists(n))
        .collect();
    let mut pids = Vec::new();
    for ns in &present {
        pids.extend(pids_in(ns));
    }
    pids.sort_unstable();
    pids.dedup();
    td.killed_pids = kill_all(&pids);
    for ns in namespaces {
        crate::hosts::remove(ns);
    }
    let mut first_err = None;
    for ns in present {
        match exec::ip(None, &["netns", "del", ns]) {
            Ok(_) => td.namespaces.push(ns.clone()),
            Err(e) if pathdoc_sys::netns::exists(ns) => {
                first_err.get_or_insert(e);
            }
            Err(_) => td.namespaces.push(ns.clone()),
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(td),
    }
}

/// Remove a recorded lab: its processes, namespaces, logs and state file.
pub fn destroy(state: &LabState) -> Result<Teardown, LabError> {
    let mut td = Teardown::default();
    // Recorded processes are normally inside the namespaces; kill stragglers only if they still
    // are (their netns link names one of ours), so a recycled pid is never hit.
    let stragglers: Vec<u32> = state
        .processes
        .iter()
        .filter(|p| pid_alive(p.pid) && same_netns(p.pid, &p.netns))
        .map(|p| p.pid)
        .collect();
    td.killed_pids.extend(kill_all(&stragglers));
    td.merge(destroy_namespaces(&state.namespaces)?);
    remove_cgroups(&state.cgroups);
    for dir in &state.dirs {
        // Only directories inside the state dir named after this lab: never follow a tampered
        // state file elsewhere.
        let ours = dir.starts_with(state_dir())
            && dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&state.id()));
        if ours {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let path = state_path(&state.prefix, &state.name);
    for log in logs_of(&state.id()) {
        let _ = std::fs::remove_file(log);
    }
    if path.exists() {
        std::fs::remove_file(&path)
            .map_err(|e| LabError::io(format!("removing {}", path.display()), e))?;
        td.state_files.push(path);
    }
    Ok(td)
}

/// Kill what is left in the lab's cgroups (everything in them was started by the lab) and remove
/// them.
fn remove_cgroups(groups: &[HostCgroup]) {
    for g in groups {
        let name_ok = g
            .group
            .path
            .components()
            .any(|c| c.as_os_str() == crate::lab::CGROUP_PARENT);
        if !name_ok {
            continue;
        }
        kill_all(&g.group.pids());
        if let Err(e) = g.group.remove() {
            tracing::warn!("removing cgroup {}: {e}", g.group.path.display());
        }
        // The shared parent goes too once no other lab uses it (rmdir fails while it has children).
        if let Some(parent) = g.group.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

fn same_netns(pid: u32, netns: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let a = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino());
    let b = std::fs::metadata(pathdoc_sys::netns::netns_path(netns)).map(|m| m.ino());
    matches!((a, b), (Ok(x), Ok(y)) if x == y)
}

pub(crate) fn log_path(lab_id: &str, what: &str) -> PathBuf {
    state_dir().join(format!("{lab_id}.{what}.log"))
}

fn logs_of(lab_id: &str) -> Vec<PathBuf> {
    std::fs::read_dir(state_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with(&format!("{lab_id}.")) && n.ends_with(".log")
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `down --all`: remove every recorded lab with `prefix` and every namespace whose name starts
/// with `prefix` (orphans of a crashed run).
pub fn destroy_all(prefix: &str) -> Result<Teardown, LabError> {
    if prefix.is_empty() {
        return Err(LabError::InvalidName {
            value: prefix.into(),
            why: "refusing to remove every namespace: empty prefix".into(),
        });
    }
    let mut td = Teardown::default();
    for state in list(prefix) {
        td.merge(destroy(&state)?);
    }
    let orphans = pathdoc_sys::netns::list_with_prefix(prefix);
    td.merge(destroy_namespaces(&orphans)?);
    // CPU cgroups of crashed labs: named `<prefix><lab>-<host>`.
    let orphan_groups: Vec<HostCgroup> =
        pathdoc_sys::cgroup::groups_under(crate::lab::CGROUP_PARENT)
            .into_iter()
            .filter(|g| {
                g.path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .map(|group| HostCgroup {
                host: String::new(),
                group,
            })
            .collect();
    remove_cgroups(&orphan_groups);
    // State files that failed to parse but carry the prefix.
    if let Ok(dir) = std::fs::read_dir(state_dir()) {
        for e in dir.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(prefix)
                && (name.ends_with(".json") || name.ends_with(".log") || name.ends_with(".tmp"))
            {
                let _ = std::fs::remove_file(e.path());
                td.state_files.push(e.path());
            } else if name.starts_with(prefix) && name.ends_with(".ssh") {
                let _ = std::fs::remove_dir_all(e.path());
                td.state_files.push(e.path());
            }
        }
    }
    Ok(td)
}
