//! Shell completions and man pages generate from the real command definition, and the tools
//! that consume them accept them: `bash -n` parses the bash script, `man -l` renders the pages.

use std::process::Command;

const PATHDOC: &str = env!("CARGO_BIN_EXE_pathdoc");

fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(PATHDOC).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_cover_every_command_and_flag() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        for word in [
            "check",
            "speed",
            "server",
            "lab",
            "throughput-time",
            "idle-max",
            "bind",
        ] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let dir = std::env::temp_dir().join(format!("pathdoc-completions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pathdoc.bash");
    std::fs::write(&file, stdout_of(&["completions", "bash"])).unwrap();
    let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(syntax.status.success(), "bash -n: {syntax:?}");
    let bad = Command::new(PATHDOC)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn man_pages_render() {
    let main = stdout_of(&["man"]);
    assert!(
        main.starts_with(".ie") || main.contains(".TH pathdoc 1"),
        "{main}"
    );
    let dir = std::env::temp_dir().join(format!("pathdoc-man-{}", std::process::id()));
    let out = Command::new(PATHDOC)
        .args(["man", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for page in [
        "pathdoc.1",
        "pathdoc-check.1",
        "pathdoc-speed.1",
        "pathdoc-lab-up.1",
    ] {
        assert!(
            names.iter().any(|n| n == page),
            "{page} missing from {names:?}"
        );
    }
    let rendered = Command::new("man")
        .arg("-l")
        .arg(dir.join("pathdoc-check.1"))
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(rendered.status.success(), "{rendered:?}");
    assert!(
        text.contains("--throughput-time") && text.contains("Examples:"),
        "{text}"
    );
    let page = stdout_of(&["man", "speed"]);
    assert!(page.contains("pathdoc\\-speed"), "{page}");
}

#[test]
fn version_names_the_commit() {
    let v = stdout_of(&["--version"]);
    assert!(v.starts_with("pathdoc 0."), "{v}");
    assert!(v.contains("(commit "), "{v}");
}

/// The subcommand names listed under "Commands:" in a help text (without `help`).
fn commands_in(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn every_command_has_examples_in_its_help() {
    let top = commands_in(&stdout_of(&["--help"]));
    assert!(top.len() >= 5, "{top:?}");
    let mut paths: Vec<Vec<String>> = top.iter().map(|c| vec![c.clone()]).collect();
    for sub in commands_in(&stdout_of(&["lab", "--help"])) {
        paths.push(vec!["lab".into(), sub]);
    }
    for path in paths {
        let args: Vec<&str> = path.iter().map(String::as_str).chain(["--help"]).collect();
        let help = stdout_of(&args);
        assert!(
            help.contains("Examples:\n  pathdoc "),
            "no examples in {path:?}:\n{help}"
        );
    }
}

/// ARCHITECTURE.md's crate graph is the real one: its dependency list equals the normal
/// dependencies between workspace crates that `cargo metadata` reports, and every crate is drawn
/// in the diagram and has a row in the "owns" table.
#[test]
fn architecture_crate_graph_matches_cargo_metadata() {
    use std::collections::BTreeSet;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata: {out:?}");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let short = |name: &str| name.trim_start_matches("pathdoc-").to_string();
    let mut real = BTreeSet::new();
    let mut crates = BTreeSet::new();
    for package in meta["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        crates.insert(name.to_string());
        for dep in package["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            if dep_name.starts_with("pathdoc-") && dep["kind"].is_null() {
                real.insert((short(name), short(dep_name)));
            }
        }
    }

    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let begin = doc
        .find("<!-- crate-graph:begin -->")
        .expect("crate-graph marker");
    let end = doc
        .find("<!-- crate-graph:end -->")
        .expect("crate-graph end marker");
    let mut drawn = BTreeSet::new();
    let mut listed = BTreeSet::new();
    for row in doc[begin..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        listed.insert(name.to_string());
        for dep in cells[2].split(',').map(str::trim).filter(|d| *d != "—") {
            drawn.insert((short(name), dep.to_string()));
        }
    }
    let missing: Vec<_> = real.difference(&drawn).collect();
    let extra: Vec<_> = drawn.difference(&real).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ARCHITECTURE.md's crate graph is out of date: edges missing {missing:?}, edges that \
         do not exist {extra:?}"
    );
    assert_eq!(
        listed, crates,
        "every crate needs one row in the crate-graph list"
    );
    let diagram = &doc[doc.find("## Crates").unwrap()..begin];
    let owns = &doc[doc
        .find("| crate | owns | does not |")
        .expect("the owns table")..];
    for name in &crates {
        assert!(
            diagram.contains(name.as_str()),
            "{name} is not drawn in ARCHITECTURE.md's diagram"
        );
        assert!(
            owns.contains(&format!("| `{name}` | ")),
            "{name} has no row in ARCHITECTURE.md's \"owns\" table"
        );
    }
}
