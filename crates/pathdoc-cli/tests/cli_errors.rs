//! Bad input and missing prerequisites give a clear message and the "could not run" exit code
//! (2), never a panic or a hang. Loopback only.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::Duration;

use support::free_loopback_port;

fn pathdoc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pathdoc"))
        .args(args)
        .output()
        .expect("run pathdoc")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn lab_without_root_names_the_missing_privilege() {
    // setpriv drops to nobody; skip only if the tool itself is missing (util-linux).
    let Ok(out) = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_pathdoc"))
        .args(["lab", "up", "--scenario", "clean"])
        .output()
    else {
        panic!("setpriv (util-linux) is needed for this test");
    };
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("needs root"), "{}", text(&out));
}

#[test]
fn unknown_scenario_lists_the_real_ones() {
    let out = pathdoc(&["lab", "up", "--scenario", "no-such-thing"]);
    assert_eq!(out.status.code(), Some(2));
    let t = text(&out);
    assert!(
        t.contains("unknown scenario") && t.contains("pmtu-blackhole"),
        "{t}"
    );
}

#[test]
fn check_against_nothing_is_could_not_run_with_json_reason() {
    // Bind then drop: a port nobody listens on.
    let port = free_loopback_port();
    let out = pathdoc(&["check", &format!("127.0.0.1:{port}"), "--mtu", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(report["schema"], "pathdoc.report/1");
    let finding = &report["findings"][0];
    assert_eq!(finding["status"], "inconclusive");
    assert!(
        finding["summary"].as_str().unwrap().contains("refused"),
        "{finding}"
    );
}

#[test]
fn check_against_a_foreign_server_says_what_it_heard() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let http = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    });
    let out = pathdoc(&["check", &addr.to_string(), "--mtu"]);
    http.join().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("not speaking the pathdoc protocol") && t.contains("HTTP/1"),
        "{t}"
    );
}

#[test]
fn a_wrong_token_is_refused_with_the_reason() {
    let port = free_loopback_port();
    let listen = format!("127.0.0.1:{port}");
    /// Kills the server even when an assertion fails.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(
        Command::new(env!("CARGO_BIN_EXE_pathdoc"))
            .args(["server", "--listen", &listen, "--auth-token", "s3cret"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    for _ in 0..50 {
        if std::net::TcpStream::connect(&listen).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = pathdoc(&["check", &listen, "--mtu", "--auth-token", "wrong"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("wrong auth token"), "{}", text(&out));
}
