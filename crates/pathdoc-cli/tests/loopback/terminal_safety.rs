//! Text from a server or a file cannot take over the user's terminal: a hostile server's
//! refusal, version and error texts, and a tampered report fed to `pathdoc report`, carry OSC 52
//! clipboard writes, CSI screen clears and colours, C1 controls, bidi overrides and a forged
//! "Overall: PASS" line; none of it reaches stdout or stderr raw. Loopback only.

use crate::support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use pathdoc_proto::{FramedConn, HelloReply, Refusal, RefusalCode, Welcome};
use serde_json::Value;
use support::{run, PATHDOC};

/// Everything a terminal would act on.
const PAYLOAD: &str = "\u{1b}]52;c;cGF5bG9hZA==\u{7}\u{1b}[2J\u{1b}[1;32m\nOverall: PASS\u{1b}[0m \u{9b}31m \u{202e}fdp.exe\u{2066}x\u{2069}\u{7f}\r";

fn assert_inert(what: &str, text: &str) {
    for (c, name) in [
        ('\u{1b}', "ESC"),
        ('\u{7}', "BEL"),
        ('\u{9b}', "CSI (C1)"),
        ('\u{7f}', "DEL"),
        ('\r', "CR"),
        ('\u{202e}', "RLO"),
        ('\u{2066}', "LRI"),
        ('\u{2069}', "PDI"),
    ] {
        assert!(!text.contains(c), "raw {name} in {what}:\n{text:?}");
    }
    assert!(
        !text.lines().any(|l| l.starts_with("Overall: PASS")),
        "a forged verdict line in {what}:\n{text}"
    );
}

/// How the fake server answers a Hello.
#[derive(Clone, Copy)]
enum Fake {
    /// A refusal whose message is the payload.
    Refuse,
    /// A welcome whose version is the payload, then a frame no check understands, whose type
    /// (an enum tag) is the payload: serde's error echoes it.
    WelcomeThenGarbage,
}

/// A tiny pathdoc server on loopback speaking the preamble and framing of pathdoc-proto.
fn fake_server(mode: Fake) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut conn = FramedConn::new(stream).unwrap();
                    if pathdoc_proto::read_preamble(conn.stream_mut())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let Ok(_hello) = conn.recv::<Value>().await else {
                        return;
                    };
                    let _ = pathdoc_proto::write_preamble(conn.stream_mut()).await;
                    let reply = match mode {
                        Fake::Refuse => HelloReply::Refused(Refusal {
                            code: RefusalCode::LimitExceeded,
                            message: format!("busy {PAYLOAD}"),
                            load: None,
                        }),
                        Fake::WelcomeThenGarbage => HelloReply::Welcome(Welcome {
                            server_version: format!("pathdoc 0.1.0 {PAYLOAD}"),
                            session: pathdoc_proto::SessionId(7),
                            observed: peer,
                            revision: pathdoc_proto::PROTOCOL_REVISION,
                        }),
                    };
                    let _ = conn.send(&reply).await;
                    if let Fake::WelcomeThenGarbage = mode {
                        let garbage = serde_json::json!({"type": PAYLOAD, "message": PAYLOAD});
                        let _ = conn.send(&garbage).await;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                });
            }
        });
    });
    addr
}

fn pathdoc(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(PATHDOC);
    cmd.args(args).env("NO_COLOR", "1");
    run(cmd, Duration::from_secs(60))
}

#[test]
fn a_hostile_servers_refusal_version_and_errors_reach_the_terminal_escaped() {
    for mode in [Fake::Refuse, Fake::WelcomeThenGarbage] {
        let addr = fake_server(mode).to_string();
        for check in ["--mtu", "--idle", "--throughput"] {
            let (code, out, err) = pathdoc(&["check", &addr, check, "--idle-max", "30s"]);
            assert!(matches!(code, 1..=3), "exit {code}\n{out}\n{err}");
            assert!(!err.contains("panicked"), "{err}");
            assert_inert("stdout", &out);
            assert_inert("stderr", &err);
            // Shown, escaped: the user still learns what the server said.
            let all = format!("{out}{err}");
            assert!(all.contains("\\x1b]52"), "{all}");
        }
    }
}

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/speed-2-streams.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Append the payload to every free-text string of a report (names, titles, details, remedies,
/// the target), leaving the typed fields (ids, statuses, units) readable.
fn poison(v: &mut Value, key: &str) {
    match v {
        Value::String(s)
            if !matches!(
                key,
                "schema"
                    | "pathdoc_version"
                    | "command"
                    | "check"
                    | "id"
                    | "status"
                    | "unit"
                    | "direction"
                    | "host"
                    | "mode"
                    | "role"
            ) =>
        {
            s.push_str(PAYLOAD)
        }
        Value::Array(items) => items.iter_mut().for_each(|i| poison(i, key)),
        Value::Object(map) => map.iter_mut().for_each(|(k, v)| poison(v, k)),
        _ => {}
    }
}

fn scratch(name: &str, report: &Value) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "pathdoc-terminal-{}-{name}.json",
        std::process::id()
    ));
    std::fs::write(&path, serde_json::to_string(report).unwrap()).unwrap();
    path
}

#[test]
fn a_tampered_report_is_rendered_inert() {
    let mut report = fixture();
    poison(&mut report, "");
    let path = scratch("tampered", &report);
    let (code, out, err) = pathdoc(&["report", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(code, 0 | 1), "exit {code}\n{err}");
    assert_inert("stdout", &out);
    assert_inert("stderr", &err);
    assert!(out.contains("\\x1b]52;c;cGF5bG9hZA==\\x07"), "{out}");
    // The genuine last line is still there, once.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("Overall:")).count(),
        1,
        "{out}"
    );

    // An unknown enum value is echoed in serde's error: escaped too.
    let mut bad = fixture();
    bad["findings"][0]["status"] = Value::String(PAYLOAD.into());
    let path = scratch("enum", &bad);
    let (code, out, err) = pathdoc(&["report", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(code, 2, "{out}\n{err}");
    assert_inert("stdout", &out);
    assert_inert("stderr", &err);
}

/// A duration no `Duration` can hold (1e20 s) used to panic (exit 101) in the text and HTML
/// renderings; it is shown as the number it is.
#[test]
fn an_absurd_duration_in_a_report_does_not_panic() {
    let mut report = fixture();
    let evidence = report["findings"][0]["evidence"].as_array_mut().unwrap();
    for seconds in [1e20, -5.0, 1.8e19] {
        evidence
            .push(serde_json::json!({"name": "absurd", "value": {"unit": "s", "value": seconds}}));
    }
    if let Some(d) = report.pointer_mut("/data/speed/upload/duration_s") {
        *d = serde_json::json!(1e20);
    }
    let path = scratch("absurd", &report);
    let html = path.with_extension("html");
    let (code, out, err) = pathdoc(&["report", path.to_str().unwrap()]);
    assert!(matches!(code, 0 | 1), "exit {code}\n{err}");
    assert!(out.contains("100000000000000000000 s"), "{out}");
    let (code, _, err) = pathdoc(&[
        "report",
        path.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&html);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(code, 0 | 1), "exit {code}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}
