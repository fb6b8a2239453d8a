//! Shared helpers of the lab end-to-end tests: unique prefixes, a cleanup guard that runs even
//! when a test panics, and the "nothing is left behind" assertion.

#![allow(dead_code)]

use std::path::PathBuf;

use pathdoc_lab::{state, LabOptions};

/// Options for a test lab: its own prefix `pdt-<test>-`, delay lines run by the built binary.
pub fn opts(test: &str) -> LabOptions {
    LabOptions {
        name: None,
        prefix: prefix(test),
        helper_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_pathdoc"))),
    }
}

pub fn prefix(test: &str) -> String {
    format!("pdt-{test}-")
}

/// Removes everything with the test's prefix when dropped (also on panic), after the `Lab`s
/// themselves had their chance.
pub struct Cleanup(pub String);

impl Cleanup {
    pub fn new(test: &str) -> Self {
        let p = prefix(test);
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

/// Assert that no namespace, state file or process of labs with this prefix remains.
pub fn assert_nothing_left(test: &str, pids: &[u32]) {
    let p = prefix(test);
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
