//! Finding ids cannot drift: every id the code can emit is in its check's `FINDING_IDS`
//! registry, every registered id is emitted somewhere, and docs/output.md lists exactly the
//! registered ids of each check. No lab, no network: it reads the sources.
//!
//! "Can emit" is read from the source: the id argument of every `Finding::new` outside test
//! modules must be a string literal, a local bound by `let id = …` to literals, or the
//! parameter of a local closure whose calls pass literals. Anything else (a `format!`) fails
//! the test with the place to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pathdoc_core::CheckName;

/// One registered finding id.
struct Registered {
    id: String,
    meaning: String,
}

/// The check registry (crates/pathdoc-cli/src/checks.rs) as `pathdoc registry` prints it.
fn registry() -> serde_json::Value {
    let out = std::process::Command::new(crate::support::PATHDOC)
        .arg("registry")
        .output()
        .expect("running pathdoc registry");
    assert!(out.status.success(), "pathdoc registry: {out:?}");
    serde_json::from_slice(&out.stdout).expect("pathdoc registry prints JSON")
}

fn ids(list: &serde_json::Value) -> Vec<Registered> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|i| Registered {
            id: i["id"].as_str().unwrap().to_string(),
            meaning: i["meaning"].as_str().unwrap().to_string(),
        })
        .collect()
}

/// Each registered check's doc section (its name), the crate whose sources emit its findings,
/// and its ids; then the generic ids every front end emits, in pathdoc-core's registry.
fn checks() -> Vec<(String, String, Vec<Registered>)> {
    let registry = registry();
    let mut out: Vec<(String, String, Vec<Registered>)> = registry["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["crate"].as_str().unwrap().to_string(),
                ids(&c["finding_ids"]),
            )
        })
        .collect();
    out.push((
        "any check".to_string(),
        "pathdoc-cli".to_string(),
        ids(&registry["generic_finding_ids"]),
    ));
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Index just past the bracket that closes the one at `open` (strings and chars skipped).
fn matching(text: &[u8], open: usize) -> usize {
    let mut depth = 0i32;
    let mut i = open;
    while i < text.len() {
        match text[i] {
            b'"' => {
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    if text[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'\'' if i + 2 < text.len() && (text[i + 2] == b'\'' || text[i + 1] == b'\\') => {
                i += if text[i + 1] == b'\\' { 3 } else { 2 };
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    text.len()
}

/// The source without `#[cfg(test)]` items (the block after the attribute).
fn without_tests(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find('{') else {
            return out;
        };
        let end = matching(after.as_bytes(), open);
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Top-level comma-separated arguments of the call whose `(` is at `open`.
fn args(text: &str, open: usize) -> Vec<String> {
    let end = matching(text.as_bytes(), open);
    let inner = &text[open + 1..end - 1];
    let mut out = Vec::new();
    let (mut depth, mut start, mut in_str) = (0i32, 0, false);
    let b = inner.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'(' | b'[' | b'{' if !in_str => depth += 1,
            b')' | b']' | b'}' if !in_str => depth -= 1,
            b',' if !in_str && depth == 0 => {
                out.push(inner[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(inner[start..].trim().to_string());
    out
}

fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.contains('-')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Id-like string literals in `text`.
fn id_literals(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| is_id(s))
        .map(String::from)
        .collect()
}

/// The ids `arg` (the id argument of the `Finding::new` at `at` in `src`) can take, or why not.
/// Locals and closure parameters are looked up at their nearest binding before the call; the
/// calls of a function whose parameter it is are looked up in `callers` (the whole crate: a
/// `pub(crate) fn finding(c, id, …)` is called from other modules too).
fn resolve(arg: &str, src: &str, at: usize, callers: &str) -> Result<Vec<String>, String> {
    let before = &src[..at];
    if arg.starts_with('"') && arg.ends_with('"') {
        return Ok(vec![arg.trim_matches('"').to_string()]);
    }
    // A constant, e.g. `CHECK_FAILED` or `pathdoc_core::report::CHECK_FAILED`.
    let last = arg.rsplit("::").next().unwrap_or(arg);
    if !last.is_empty()
        && last
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return string_consts()
            .get(last)
            .map(|v| vec![v.clone()])
            .ok_or_else(|| format!("no `const {last}: &str = \"…\"` in the workspace"));
    }
    let ident_ok = arg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident_ok {
        return Err(format!("the id is computed (`{arg}`): use literal ids"));
    }
    // `let id = if … { "a" } else { "b" };`
    let binding = before.rfind(&format!("let {arg} = "));
    let param = parameter_of(arg, before);
    if let Some(at) = binding.filter(|b| param.as_ref().is_none_or(|p| *b > p.at)) {
        let stmt = &src[at..at + src[at..].find(';').unwrap_or(0)];
        let lits = id_literals(stmt);
        if !lits.is_empty() {
            return Ok(lits);
        }
    }
    // A parameter of a local closure or function: `let finding = |id: &'static str, …|
    // Finding::new(CHECK, id, …)` or `fn finding(c: &C, id: &str, …) -> Finding`, and its
    // calls `finding("a", …)` / `finding(c, "a", …)`: the literals at the parameter's place.
    if let Some(p) = param {
        let mut lits = Vec::new();
        let call = format!("{}(", p.callable);
        let mut from = 0;
        let src = if p.function { callers } else { src };
        while let Some(i) = src[from..].find(&call) {
            let open = from + i + p.callable.len();
            let head = &src[..from + i];
            let preceded = head
                .chars()
                .last()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'));
            if preceded && !head.trim_end().ends_with("fn") {
                if let Some(a) = args(src, open).get(p.position) {
                    lits.extend(id_literals(a));
                }
            }
            from = open + 1;
        }
        if !lits.is_empty() {
            return Ok(lits);
        }
    }
    Err(format!("cannot tell which id `{arg}` holds"))
}

/// The closure or function, nearest before a call site, that has a parameter named `arg`.
struct Parameter {
    /// Where its definition starts.
    at: usize,
    callable: String,
    position: usize,
    /// A `fn` (callable from other modules), not a local closure.
    function: bool,
}

fn parameter_of(arg: &str, before: &str) -> Option<Parameter> {
    let named = |params: &[String]| {
        params.iter().position(|p| {
            p.split(':')
                .next()
                .map(str::trim)
                .map(|n| n.trim_start_matches("mut "))
                == Some(arg)
        })
    };
    // `fn name(…)` (no generics in the name part).
    let function = before.rfind("fn ").and_then(|at| {
        let rest = &before[at + 3..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let open = at + 3 + name.len();
        (before.as_bytes().get(open) == Some(&b'(')).then_some(())?;
        let position = named(&args(before, open))?;
        Some(Parameter {
            at,
            callable: name,
            position,
            function: true,
        })
    });
    // `let name = |…|` (or `move |…|`): the last such closure with that parameter.
    let mut closure = None;
    let mut from = 0;
    while let Some(i) = before[from..].find("let ") {
        let let_at = from + i;
        from = let_at + 4;
        let head = &before[let_at + 4..];
        let name: String = head
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some(rest) = head[name.len()..].strip_prefix(" = ") else {
            continue;
        };
        let Some(rest) = rest.trim_start_matches("move ").strip_prefix('|') else {
            continue;
        };
        let Some(close) = rest.find('|') else {
            continue;
        };
        let params: Vec<String> = rest[..close]
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        if let Some(position) = named(&params) {
            closure = Some(Parameter {
                at: let_at,
                callable: name,
                position,
                function: false,
            });
        }
    }
    match (function, closure) {
        (Some(f), Some(c)) => Some(if f.at > c.at { f } else { c }),
        (f, c) => f.or(c),
    }
}

/// `const NAME: &str = "value";` of every workspace crate's sources.
fn string_consts() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates"), &mut files);
    let mut out = BTreeMap::new();
    for f in files
        .iter()
        .filter(|f| f.components().any(|c| c.as_os_str() == "src"))
    {
        let src = std::fs::read_to_string(f).unwrap_or_default();
        for line in src.lines() {
            let line = line.trim_start().trim_start_matches("pub ");
            let Some(rest) = line.strip_prefix("const ") else {
                continue;
            };
            let Some((name, value)) = rest.split_once(": &str = \"") else {
                continue;
            };
            if let Some(value) = value.strip_suffix("\";") {
                out.insert(name.trim().to_string(), value.to_string());
            }
        }
    }
    out
}

/// What the sources can emit: per check, each id with where; and per check, the calls whose id
/// could not be read. A finding's check is its first argument: a literal, the file's
/// `const CHECK`, or else the default check of its crate (the front end's generic ids).
type Emitted = BTreeMap<String, BTreeMap<String, String>>;

fn emitted() -> (Emitted, BTreeMap<String, Vec<String>>) {
    let checks = checks();
    let defaults: BTreeMap<&str, &str> = checks
        .iter()
        .map(|(c, k, _)| (k.as_str(), c.as_str()))
        .collect();
    let mut ids: Emitted = BTreeMap::new();
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let crates = workspace().join("crates");
    for krate in std::fs::read_dir(&crates).unwrap().flatten() {
        let name = krate.file_name().to_string_lossy().into_owned();
        let mut files = Vec::new();
        let src_dir = krate.path().join("src");
        if !src_dir.is_dir() {
            continue;
        }
        rust_files(&src_dir, &mut files);
        let crate_src: String = files
            .iter()
            .map(|f| without_tests(&std::fs::read_to_string(f).unwrap()))
            .collect::<Vec<_>>()
            .join("\n");
        for f in files {
            let raw = std::fs::read_to_string(&f).unwrap();
            // A whole file of tests (`#![cfg(test)]`, e.g. checks/toy.rs) emits nothing.
            if raw.contains("\n#![cfg(test)]") {
                continue;
            }
            let src = without_tests(&raw);
            let own_check = src.lines().find_map(|l| {
                let l = l.trim_start().trim_start_matches("pub ");
                let variant = l
                    .strip_prefix("const CHECK: CheckName = CheckName::")?
                    .strip_suffix(';')?;
                let name = CheckName::ALL
                    .into_iter()
                    .find(|c| format!("{c:?}") == variant)?;
                Some(name.as_str().to_string())
            });
            let mut from = 0;
            while let Some(i) = src[from..].find("Finding::new(") {
                let open = from + i + "Finding::new".len();
                from = open + 1;
                let a = args(&src, open);
                let check = match a.first().map(String::as_str) {
                    Some(lit) if lit.starts_with('"') => lit.trim_matches('"').to_string(),
                    Some("CHECK") if own_check.is_some() => own_check.clone().unwrap(),
                    _ => defaults
                        .get(name.as_str())
                        .unwrap_or(&"unknown")
                        .to_string(),
                };
                let place = format!("{}:{}", f.display(), src[..open].lines().count());
                match a.get(1).map(|arg| resolve(arg, &src, open, &crate_src)) {
                    Some(Ok(lits)) => {
                        for l in lits {
                            ids.entry(check.clone())
                                .or_default()
                                .entry(l)
                                .or_insert_with(|| place.clone());
                        }
                    }
                    Some(Err(why)) => problems
                        .entry(check)
                        .or_default()
                        .push(format!("{place}: {why}")),
                    None => problems
                        .entry(check)
                        .or_default()
                        .push(format!("{place}: no id argument")),
                }
            }
        }
    }
    (ids, problems)
}

/// `### <check>` sections under `## Finding ids` in docs/output.md: the ids of each table.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(workspace().join("docs/output.md")).unwrap();
    let section = doc
        .split("\n## Finding ids")
        .nth(1)
        .expect("docs/output.md has a `## Finding ids` section");
    let section = section.split("\n## ").next().unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = None;
    for line in section.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            current = Some(h.trim().to_string());
            out.entry(h.trim().to_string()).or_default();
        } else if let (Some(c), Some(cell)) = (&current, line.strip_prefix("| `")) {
            let id = cell.split('`').next().unwrap().to_string();
            out.get_mut(c).unwrap().insert(id);
        }
    }
    out
}

/// A check whose findings the sources emit but which `checks()` does not name would be checked
/// against nothing: its ids could drift unnoticed.
#[test]
fn every_check_that_emits_findings_is_listed() {
    let checks = checks();
    let listed: BTreeSet<&str> = checks.iter().map(|(c, _, _)| c.as_str()).collect();
    let (emitted, unreadable) = emitted();
    let unlisted: Vec<String> = emitted
        .keys()
        .chain(unreadable.keys())
        .filter(|c| !listed.contains(c.as_str()))
        .map(|c| {
            let place = emitted
                .get(c)
                .and_then(|ids| ids.values().next().cloned())
                .or_else(|| unreadable.get(c).and_then(|p| p.first().cloned()))
                .unwrap_or_default();
            format!("check `{c}` (e.g. {place}) is not in the check registry (crates/pathdoc-cli/src/checks.rs)")
        })
        .collect();
    assert!(unlisted.is_empty(), "\n{}", unlisted.join("\n"));
}

#[test]
fn every_emitted_id_is_registered_and_documented_and_every_documented_id_exists() {
    let docs = documented();
    let (emitted, unreadable) = emitted();
    let mut problems = Vec::new();
    for (check, krate, registry) in checks() {
        let check = check.as_str();
        assert!(!registry.is_empty(), "{check}: no finding ids registered");
        let registered: BTreeSet<String> = registry.iter().map(|i| i.id.to_string()).collect();
        assert_eq!(
            registered.len(),
            registry.len(),
            "{check}: an id is registered twice"
        );
        for i in &registry {
            assert!(is_id(&i.id), "{check}: `{}` is not a kebab-case id", i.id);
            assert!(!i.meaning.is_empty(), "{check}: `{}` has no meaning", i.id);
        }
        problems.extend(unreadable.get(check).cloned().unwrap_or_default());
        let code = emitted.get(check).cloned().unwrap_or_default();
        for (id, place) in &code {
            if !registered.contains(id) {
                problems.push(format!(
                    "{place}: `{id}` is emitted but not in {krate}'s FINDING_IDS"
                ));
            }
        }
        for id in &registered {
            if !code.contains_key(id) {
                problems.push(format!(
                    "{check}: `{id}` is registered but no code emits it"
                ));
            }
        }
        match docs.get(check) {
            None => problems.push(format!("docs/output.md has no `### {check}` table")),
            Some(listed) => {
                for (id, place) in &code {
                    if !listed.contains(id) {
                        problems.push(format!(
                            "{place}: `{id}` is emitted but docs/output.md ({check}) does not list it"
                        ));
                    }
                }
                for id in registered.difference(listed) {
                    problems.push(format!("docs/output.md ({check}): `{id}` is missing"));
                }
                for id in listed.difference(&registered) {
                    problems.push(format!("docs/output.md ({check}): `{id}` does not exist"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_source_reader_sees_through_locals_and_closures() {
    let src = r#"
        fn f() {
            let finding = |id: &'static str, s| Finding::new(CHECK, id, s, "t");
            finding("path-mtu", 1);
            finding(
                "pmtud-black-hole",
                2,
            );
            let id = if x { "udp-a-b" } else { "udp-c-d" };
            Finding::new(CHECK, id, 3, "t");
            Finding::new(CHECK, format!("{}-rate", d), 3, "t");
        }
        fn finding(c: &Conn, id: &str, status: Status) -> Finding {
            Finding::new(CHECK, id, status, label(c))
        }
        fn g(c: &Conn) {
            let f = finding(c, "idle-death", Status::Fail);
            let g = finding(
                c,
                "rst-injected",
                Status::Fail,
            );
        }
        #[cfg(test)]
        mod tests { fn g() { Finding::new(CHECK, "test-only", 1, "x"); } }
    "#;
    let src = without_tests(src);
    assert!(!src.contains("test-only"));
    let closure = src.find("Finding::new(CHECK, id, s").unwrap() + "Finding::new".len();
    assert_eq!(
        resolve("id", &src, closure, &src).unwrap(),
        vec!["path-mtu", "pmtud-black-hole"]
    );
    let local = src.find("Finding::new(CHECK, id, 3").unwrap() + "Finding::new".len();
    assert_eq!(args(&src, local)[1], "id");
    assert_eq!(
        resolve("id", &src, local, &src).unwrap(),
        vec!["udp-a-b", "udp-c-d"]
    );
    assert!(resolve("format!(\"{}-rate\", d)", &src, local, &src).is_err());
    let function = src.find("Finding::new(CHECK, id, status").unwrap() + "Finding::new".len();
    assert_eq!(
        resolve("id", &src, function, &src).unwrap(),
        vec!["idle-death", "rst-injected"]
    );
    assert_eq!(
        resolve("pathdoc_core::report::CHECK_FAILED", &src, local, &src).unwrap(),
        vec!["check-failed"]
    );
}

/// Every registered check has its docs page, every check `pathdoc check` runs has its far end in
/// every `pathdoc server`, and every exported check's module is documented in docs/exporter.md
/// (the registry's `exporter` cannot be left out: a check is exported or marked not exported).
#[test]
fn every_registered_check_has_docs_ids_and_a_server_service() {
    let mut problems = Vec::new();
    let exporter_doc = std::fs::read_to_string(workspace().join("docs/exporter.md")).unwrap();
    for c in registry()["checks"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let docs = c["docs"].as_str().unwrap();
        match std::fs::read_to_string(workspace().join(docs)) {
            Ok(page) if page.starts_with("# ") => {}
            _ => problems.push(format!(
                "{name}: no docs page {docs} (starting with a `# ` title)"
            )),
        }
        if c["finding_ids"].as_array().is_none_or(|a| a.is_empty()) {
            problems.push(format!("{name}: no finding ids"));
        }
        if c["flag"].is_string() && (c["service"].is_null() || c["service_offered"] != "always") {
            problems.push(format!(
                "{name}: `pathdoc check` runs it but not every server has its service"
            ));
        }
        if c["exporter"] == true && !exporter_doc.contains(&format!("check = \"{name}\"")) {
            problems.push(format!(
                "{name}: docs/exporter.md shows no `check = \"{name}\"` module"
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
