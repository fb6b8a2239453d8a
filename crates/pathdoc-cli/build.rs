//! Puts the git commit into `pathdoc --version` (`PATHDOC_GIT_COMMIT`). Outside a git checkout
//! (a source tarball, `cargo install` from a registry) the packager may set
//! `PATHDOC_BUILD_COMMIT`; otherwise the version says "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=PATHDOC_BUILD_COMMIT");
    let commit = std::env::var("PATHDOC_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
            // Uncommitted changes to tracked files are worth knowing about in a bug report.
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
            Some(if dirty {
                format!("{hash}-modified")
            } else {
                hash
            })
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=PATHDOC_GIT_COMMIT={commit}");
    // Rebuild when HEAD moves (a commit, a checkout) or the index changes (dirty state).
    for path in ["HEAD", "index"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}
