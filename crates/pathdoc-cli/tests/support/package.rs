//! The Debian package as the tests build it: `scripts/package.sh` run on this test build's binary,
//! unpacked with `dpkg -x` into a scratch root that is removed even when a test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{run, PATHDOC};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A scratch directory removed on drop, so a failing assertion leaves nothing behind.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pathdoc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `cmd` to completion within `deadline` and return its stdout; anything but exit 0 fails the
/// test with both outputs.
pub fn ok(cmd: Command, deadline: Duration) -> String {
    let shown = format!("{cmd:?}");
    let (code, stdout, stderr) = run(cmd, deadline);
    assert_eq!(
        code, 0,
        "{shown}: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    stdout
}

/// The .deb built from this test build's binary, and the root it unpacks to, both in `scratch`.
pub fn build_and_unpack(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let out = scratch.0.join("out");
    let mut build = Command::new(repo_root().join("scripts/package.sh"));
    build
        .args(["--binary", PATHDOC, "--compress", "gzip", "--out"])
        .arg(&out);
    ok(build, Duration::from_secs(180));
    let deb = std::fs::read_dir(&out)
        .expect("package.sh's output directory")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb in the output directory");
    let root = scratch.0.join("root");
    let mut unpack = Command::new("dpkg");
    unpack.arg("-x").arg(&deb).arg(&root);
    ok(unpack, Duration::from_secs(60));
    (deb, root)
}
