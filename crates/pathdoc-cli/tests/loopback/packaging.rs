//! The Debian package (scripts/package.sh): built from this test build's binary, unpacked into a
//! scratch root with `dpkg -x` (no install, no root), and the unpacked binary run. Also the C
//! library the packaged binary needs, measured with `objdump -T` as the package's Depends says.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::package::{build_and_unpack, ok, repo_root, Scratch};

/// The highest `GLIBC_x.y` symbol version a binary imports, as `(x, y)`.
fn highest_glibc(binary: &Path) -> (u32, u32) {
    let mut cmd = Command::new("objdump");
    cmd.arg("-T").arg(binary);
    let symbols = ok(cmd, Duration::from_secs(60));
    // Versions show as `GLIBC_2.17` or `(GLIBC_2.2.5)`.
    symbols
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let (major, minor) = v.split_once('.')?;
            let minor = minor.split('.').next()?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .max()
        .unwrap_or_else(|| panic!("no GLIBC symbol versions in {}", binary.display()))
}

#[test]
fn the_deb_unpacks_into_a_scratch_root_and_its_binary_runs() {
    let scratch = Scratch::new("deb");
    let (deb, root) = build_and_unpack(&scratch);
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("pathdoc_{}-1_", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );

    let binary = root.join("usr/bin/pathdoc");
    let mut version = Command::new(&binary);
    version.arg("--version");
    let version = ok(version, Duration::from_secs(10));
    assert!(
        version.starts_with(&format!("pathdoc {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let mut help = Command::new(&binary);
    help.arg("--help");
    let help = ok(help, Duration::from_secs(10));
    for command in ["check", "ssh", "server", "exporter", "analyze"] {
        assert!(help.contains(command), "--help lacks {command}: {help}");
    }

    for file in [
        "usr/share/man/man1/pathdoc.1.gz",
        "usr/share/man/man1/pathdoc-check.1.gz",
        "usr/share/man/man1/pathdoc-ssh.1.gz",
        "usr/share/bash-completion/completions/pathdoc",
        "usr/share/zsh/vendor-completions/_pathdoc",
        "usr/share/fish/vendor_completions.d/pathdoc.fish",
        "usr/share/doc/pathdoc/README.md",
        "usr/share/doc/pathdoc/copyright",
        "usr/share/doc/pathdoc/docs/ssh.md",
        "usr/share/doc/pathdoc/examples/pathdoc-exporter.toml",
        "usr/share/doc/pathdoc/examples/prometheus/prometheus.yml",
    ] {
        let len = std::fs::metadata(root.join(file))
            .unwrap_or_else(|e| panic!("{file} not in the package: {e}"))
            .len();
        assert!(len > 0, "{file} is empty");
    }

    // The units start the packaged binary, as an unprivileged dynamic user with no capability.
    for unit in ["pathdoc-server.service", "pathdoc-exporter.service"] {
        let text = std::fs::read_to_string(root.join("lib/systemd/system").join(unit))
            .unwrap_or_else(|e| panic!("{unit} not in the package: {e}"));
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap_or_else(|| panic!("{unit}: no ExecStart"));
        assert!(exec.starts_with("/usr/bin/pathdoc "), "{unit}: {exec}");
        for line in [
            "DynamicUser=yes",
            "CapabilityBoundingSet=",
            "NoNewPrivileges=yes",
        ] {
            assert!(text.lines().any(|l| l == line), "{unit} lacks {line}");
        }
    }

    // Depends names the C library the binary needs, as objdump measures it.
    let mut field = Command::new("dpkg-deb");
    field.args(["-f"]).arg(&deb).arg("Depends");
    let depends = ok(field, Duration::from_secs(10));
    let (major, minor) = highest_glibc(&binary);
    assert!(
        depends.contains(&format!("libc6 (>= {major}.{minor})")),
        "Depends: {depends} (the binary needs GLIBC_{major}.{minor})"
    );
}

/// The build `--ssh` should copy to old far ends: `scripts/package.sh --portable` (cargo-zigbuild,
/// glibc 2.17's symbol versions) needs at most GLIBC_2.17 and runs a real check. `.ci/run` builds
/// it (its `portable` tier) and sets `PATHDOC_REQUIRE_PORTABLE=1`, so there a missing build fails;
/// a developer's `cargo test` without one skips with a note.
#[test]
fn the_portable_build_needs_at_most_glibc_2_17_and_runs_a_check() {
    let binary = std::env::var_os("PATHDOC_PORTABLE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/x86_64-unknown-linux-gnu/release/pathdoc"));
    if !binary.exists() {
        let note = format!(
            "no portable build at {} (scripts/package.sh --portable makes one)",
            binary.display()
        );
        assert!(
            std::env::var_os("PATHDOC_REQUIRE_PORTABLE").is_none(),
            "{note}, and PATHDOC_REQUIRE_PORTABLE is set"
        );
        eprintln!("{note}; not checked");
        return;
    }
    let (major, minor) = highest_glibc(&binary);
    assert!(
        (major, minor) <= (2, 17),
        "{} needs GLIBC_{major}.{minor}; an old far end (RHEL 7, glibc 2.17) cannot run it",
        binary.display()
    );
    // No libgcc_s either: RHEL 7 has one, but a minimal container may not.
    let mut needed = Command::new("objdump");
    needed.arg("-p").arg(&binary);
    let needed = ok(needed, Duration::from_secs(60));
    assert!(!needed.contains("libgcc_s"), "{needed}");

    // The portable binary is the whole program: it checks a server of this build on loopback.
    let server = support::LoopbackServer::on_free_port(&[]);
    let quick = support::quick_check(&server.addr.to_string());
    let mut check = Command::new(&binary);
    check.args(quick.get_args());
    let (code, out, err) = support::run(check, Duration::from_secs(60));
    let report = support::parse_report(code, &out, &err);
    assert!(support::check_failures(&report).is_empty(), "{out}");
    assert!(code == 0 || code == 1, "exit {code}: {out}\n{err}");
}
