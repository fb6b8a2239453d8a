//! The cgroup `cpu` controller: how much CPU a process's cgroup may use and has used, and (for
//! the lab) a cgroup that caps the processes put into it.
//!
//! The one job of this module is the cgroup filesystem. Both layouts are handled: cgroup v2
//! (`cpu.max`, `cpu.stat` with `usage_usec`) where the unified hierarchy carries the cpu
//! controller, and cgroup v1 (`cpu.cfs_quota_us`/`cpu.cfs_period_us`, `cpuacct.usage`) on hybrid
//! machines where cpu is still a v1 controller. Hierarchies are found in `/proc/self/mountinfo`.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The CPU limit and usage of one cgroup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CgroupCpu {
    /// The cgroup directory read.
    pub path: PathBuf,
    /// CPU allowance in cores (quota / period); `None` = unlimited.
    pub limit_cores: Option<f64>,
    /// CPU seconds the cgroup has used so far.
    pub usage_seconds: f64,
    /// Scheduler periods elapsed, and periods in which the cgroup hit its quota.
    pub periods: u64,
    pub throttled_periods: u64,
}

/// The cpu cgroup of `pid` with its limit and usage. `Ok(None)` when the process is in no cgroup
/// with a cpu controller this module can read.
pub fn cpu_of(pid: u32) -> io::Result<Option<CgroupCpu>> {
    let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    for (dir, v2) in cpu_cgroup_dirs(&membership, &mounts) {
        if let Some(cpu) = read_cpu(&dir, v2) {
            return Ok(Some(cpu));
        }
    }
    Ok(None)
}

fn read_cpu(dir: &Path, v2: bool) -> Option<CgroupCpu> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name));
    let stat_text = read("cpu.stat").unwrap_or_default();
    let stat_field = |key: &str| -> u64 {
        stat_text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or(0)
    };
    let (limit_cores, usage_seconds) = if v2 {
        let max = read("cpu.max").ok()?;
        (parse_cpu_max(&max), stat_field("usage_usec") as f64 / 1e6)
    } else {
        let quota: f64 = read("cpu.cfs_quota_us").ok()?.trim().parse().ok()?;
        let period: f64 = read("cpu.cfs_period_us")
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(100_000.0);
        // cpuacct is usually co-mounted with cpu; when it is a separate hierarchy, the same
        // relative path is looked up there.
        let usage_ns: f64 = read("cpuacct.usage")
            .ok()
            .or_else(|| v1_sibling(dir, "cpuacct").and_then(|d| std::fs::read_to_string(d).ok()))
            .and_then(|u| u.trim().parse().ok())
            .unwrap_or(0.0);
        (
            (quota > 0.0).then(|| quota / period.max(1.0)),
            usage_ns / 1e9,
        )
    };
    Some(CgroupCpu {
        path: dir.to_path_buf(),
        limit_cores,
        usage_seconds,
        periods: stat_field("nr_periods"),
        throttled_periods: stat_field("nr_throttled"),
    })
}

/// `<cpuacct mount>/<same relative path>/cpuacct.usage` for a v1 cpu cgroup directory.
fn v1_sibling(cpu_dir: &Path, controller: &str) -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let cpu_mount = cgroup_mounts(&mounts, false, "cpu")
        .into_iter()
        .find(|m| cpu_dir.starts_with(m))?;
    let rel = cpu_dir.strip_prefix(&cpu_mount).ok()?;
    let other = cgroup_mounts(&mounts, false, controller)
        .into_iter()
        .next()?;
    Some(
        Path::new(&other)
            .join(rel)
            .join(format!("{controller}.usage")),
    )
}

/// `"max 100000"` → None, `"25000 100000"` → Some(0.25).
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let quota: f64 = parts.next()?.parse().ok()?;
    let period: f64 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(100_000.0);
    (period > 0.0).then(|| quota / period)
}

/// Candidate directories of the cpu controller for a process: `(dir, is_v2)`, v2 first.
fn cpu_cgroup_dirs(membership: &str, mountinfo: &str) -> Vec<(PathBuf, bool)> {
    let mut v2 = Vec::new();
    let mut v1 = Vec::new();
    for line in membership.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            for mount in cgroup_mounts(mountinfo, true, "") {
                if v2_has_cpu(Path::new(&mount)) {
                    v2.push((Path::new(&mount).join(rel), true));
                }
            }
        } else if controllers.split(',').any(|c| c == "cpu") {
            for mount in cgroup_mounts(mountinfo, false, "cpu") {
                v1.push((Path::new(&mount).join(rel), false));
            }
        }
    }
    v2.extend(v1);
    v2
}

fn v2_has_cpu(mount: &Path) -> bool {
    std::fs::read_to_string(mount.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu"))
}

/// Mount points of cgroup2 (`v2`) or of a cgroup v1 hierarchy carrying `controller`.
fn cgroup_mounts(mountinfo: &str, v2: bool, controller: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let fstype = r.next()?;
            let _source = r.next();
            let options = r.next().unwrap_or("");
            let mount_point = left.split_whitespace().nth(4)?.to_string();
            let wanted = if v2 {
                fstype == "cgroup2"
            } else {
                fstype == "cgroup" && options.split(',').any(|o| o == controller)
            };
            wanted.then_some(mount_point)
        })
        .collect()
}

/// The groups directly under `parent` in the cpu hierarchy (v2 when it carries cpu, else v1):
/// what a crashed run may have left behind.
pub fn groups_under(parent: &str) -> Vec<CpuLimitGroup> {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut roots: Vec<(PathBuf, bool)> = cgroup_mounts(&mounts, true, "")
        .into_iter()
        .map(PathBuf::from)
        .filter(|m| v2_has_cpu(m))
        .map(|m| (m, true))
        .collect();
    roots.extend(
        cgroup_mounts(&mounts, false, "cpu")
            .into_iter()
            .map(|m| (PathBuf::from(m), false)),
    );
    let mut out = Vec::new();
    for (root, v2) in roots {
        if let Ok(dir) = std::fs::read_dir(root.join(parent)) {
            for e in dir.filter_map(|e| e.ok()) {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(CpuLimitGroup { path: e.path(), v2 });
                }
            }
        }
    }
    out
}

/// A cgroup this process created to cap CPU. Removing it is explicit ([`CpuLimitGroup::remove`])
/// because the lab records the path and removes it from another process too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuLimitGroup {
    pub path: PathBuf,
    pub v2: bool,
}

/// Why a CPU-capping cgroup cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no writable cgroup cpu controller: neither cgroup v2 with the cpu controller nor a cgroup v1 `cpu` hierarchy is mounted (see /proc/self/mountinfo)")]
    NoCpuController,
    #[error("{action} {path}: {source} (cgroups need root and a writable /sys/fs/cgroup; in a container, mount it read-write)")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl CpuLimitGroup {
    /// Create `<parent>/<name>` under the cpu controller with an allowance of `cores` CPUs
    /// (`cpu.max` = `cores × 100000 100000`). `parent` is created if needed; on cgroup v2 the cpu
    /// controller is enabled in its `cgroup.subtree_control` (and the root's).
    pub fn create(parent: &str, name: &str, cores: f64) -> Result<Self, CgroupError> {
        let mounts =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| CgroupError::Io {
                action: "reading",
                path: "/proc/self/mountinfo".into(),
                source,
            })?;
        let v2_root = cgroup_mounts(&mounts, true, "")
            .into_iter()
            .map(PathBuf::from)
            .find(|m| v2_has_cpu(m));
        let (root, v2) = match v2_root {
            Some(root) => (root, true),
            None => match cgroup_mounts(&mounts, false, "cpu").into_iter().next() {
                Some(m) => (PathBuf::from(m), false),
                None => return Err(CgroupError::NoCpuController),
            },
        };
        let io_err = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| CgroupError::Io {
                action,
                path,
                source,
            }
        };
        let parent_dir = root.join(parent);
        std::fs::create_dir_all(&parent_dir).map_err(io_err("creating", &parent_dir))?;
        if v2 {
            for dir in [&root, &parent_dir] {
                let control = dir.join("cgroup.subtree_control");
                let enabled = std::fs::read_to_string(&control).unwrap_or_default();
                if !enabled.split_whitespace().any(|c| c == "cpu") {
                    std::fs::write(&control, "+cpu")
                        .map_err(io_err("enabling cpu in", &control))?;
                }
            }
        }
        let path = parent_dir.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("creating", &path)(e)),
        }
        let group = CpuLimitGroup { path, v2 };
        let period = 100_000u64;
        let quota = ((cores * period as f64).round() as u64).max(1000);
        let (file, value) = if v2 {
            ("cpu.max", format!("{quota} {period}"))
        } else {
            std::fs::write(group.path.join("cpu.cfs_period_us"), period.to_string())
                .map_err(io_err("writing", &group.path.join("cpu.cfs_period_us")))?;
            ("cpu.cfs_quota_us", quota.to_string())
        };
        let target = group.path.join(file);
        if let Err(e) = std::fs::write(&target, value) {
            let _ = std::fs::remove_dir(&group.path);
            return Err(io_err("writing", &target)(e));
        }
        Ok(group)
    }

    /// The file a process writes its pid (or `0` for itself) into to join.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// Move `pid` into the group.
    pub fn add(&self, pid: u32) -> io::Result<()> {
        std::fs::write(self.procs_file(), pid.to_string())
    }

    /// Pids in the group now.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.procs_file())
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Remove the (empty) group directory. Missing is fine.
    pub fn remove(&self) -> io::Result<()> {
        match std::fs::remove_dir(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Current limit and usage.
    pub fn cpu(&self) -> Option<CgroupCpu> {
        read_cpu(&self.path, self.v2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_forms() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("25000 100000\n"), Some(0.25));
        assert_eq!(parse_cpu_max("200000 100000"), Some(2.0));
        assert_eq!(parse_cpu_max(""), None);
    }

    #[test]
    fn finds_v1_and_v2_hierarchies() {
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory";
        let membership = "4:memory:/x\n1:cpu:/pathdoc-lab/a\n0::/";
        let dirs = cpu_cgroup_dirs(membership, mountinfo);
        assert!(dirs.contains(&(PathBuf::from("/sys/fs/cgroup/cpu/pathdoc-lab/a"), false)));
        assert_eq!(
            cgroup_mounts(mountinfo, true, ""),
            ["/sys/fs/cgroup/unified"]
        );
        assert_eq!(
            cgroup_mounts(mountinfo, false, "memory"),
            ["/sys/fs/cgroup/memory"]
        );
    }

    #[test]
    fn reading_this_process_never_fails() {
        // Whatever the machine's layout, a process's own cgroup reads without error.
        let _ = cpu_of(std::process::id()).unwrap();
    }

    /// Root only: a capped group really caps a busy process.
    #[test]
    fn a_capped_group_throttles_a_busy_loop() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let name = format!("pathdoc-sys-test-{}", std::process::id());
        let group = match CpuLimitGroup::create("pathdoc-test", &name, 0.2) {
            Ok(g) => g,
            Err(CgroupError::NoCpuController) => return,
            Err(e) => panic!("{e}"),
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        group.add(child.id()).unwrap();
        let before = crate::process::stat(child.id()).unwrap().cpu_seconds;
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let after = crate::process::stat(child.id()).unwrap().cpu_seconds;
        let cpu = group.cpu().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let _ = group.remove();
        if let Some(parent) = group.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        assert_eq!(cpu.limit_cores, Some(0.2));
        let share = (after - before) / 1.5;
        assert!(
            share < 0.35,
            "a 20 % cap let the loop use {share:.2} of a core"
        );
        assert!(cpu.throttled_periods > 0, "{cpu:?}");
    }
}
