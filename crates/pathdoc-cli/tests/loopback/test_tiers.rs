//! The lab tier's scheduling rule, checked without root: every lab test takes the shared core
//! lock first (`support::serial()` to measure time or throughput alone, `support::shared()`
//! otherwise), so the tier can run several tests at once without disturbing a measurement.

use std::path::Path;

#[test]
fn every_lab_test_takes_the_core_lock_first() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lab");
    let mut missing = Vec::new();
    let mut tests = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = source.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim() != "#[test]" {
                continue;
            }
            let Some(fn_at) =
                (i + 1..lines.len()).find(|&j| lines[j].trim_start().starts_with("fn "))
            else {
                continue;
            };
            tests += 1;
            let first = lines
                .get(fn_at + 1..)
                .unwrap_or_default()
                .iter()
                .find(|l| !l.trim_start().starts_with("//"))
                .copied()
                .unwrap_or_default();
            if !first.contains("serial()") && !first.contains("shared()") {
                missing.push(format!("{}: {}", path.display(), lines[fn_at].trim()));
            }
        }
    }
    assert!(
        tests > 50,
        "found only {tests} lab tests in {}",
        dir.display()
    );
    assert!(
        missing.is_empty(),
        "lab tests that take neither support::serial() nor support::shared() first:\n{}",
        missing.join("\n")
    );
}
