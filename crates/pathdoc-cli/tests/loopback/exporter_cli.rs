//! `pathdoc exporter` as a user starts it: without a config it says which file is missing and
//! where the example config is, once, in one line, and exits 2.

use std::process::Command;

const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");

#[test]
fn a_missing_config_names_the_file_and_the_example() {
    let missing =
        std::env::temp_dir().join(format!("no-such-exporter-{}.toml", std::process::id()));
    let out = Command::new(PATHDOC)
        .args(["exporter", "--config"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("no exporter config at {}", missing.display())),
        "{stderr}"
    );
    assert!(stderr.contains("dist/pathdoc-exporter.toml"), "{stderr}");
    // It said "No such file or directory: No such file or directory" before.
    assert!(
        stderr.matches("No such file").count() <= 1,
        "the OS error said twice: {stderr}"
    );

    let out = Command::new(PATHDOC)
        .args(["exporter", "--json", "--config"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "usage", "{doc:#}");
    assert!(
        doc["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("dist/pathdoc-exporter.toml"),
        "{doc:#}"
    );
}

#[test]
fn an_unreadable_config_says_why_once() {
    let dir = std::env::temp_dir().join(format!("exporter-cli-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A directory where the file should be: the read fails with an OS error other than NotFound.
    let out = Command::new(PATHDOC)
        .args(["exporter", "--config"])
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir(&dir);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("reading {}", dir.display())),
        "{stderr}"
    );
    assert_eq!(stderr.matches("directory").count(), 1, "{stderr}");
    assert!(!stderr.contains("os error"), "{stderr}");
}
