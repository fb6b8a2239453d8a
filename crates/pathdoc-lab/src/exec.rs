//! Running external tools (`ip`, `nft`, `tc`, `ethtool`, ...) with a deadline.
//!
//! Every call has a timeout, and a failure carries the full command line and its stderr so the
//! user sees exactly what the kernel refused.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::LabError;
use crate::preflight::package_for;

/// Deadline for the quick configuration tools.
pub const QUICK: Duration = Duration::from_secs(10);

/// Render a command line for messages (arguments with spaces are quoted).
pub fn display(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    for arg in cmd.get_args() {
        let a = arg.to_string_lossy();
        if a.is_empty() || a.contains(char::is_whitespace) {
            parts.push(format!("'{a}'"));
        } else {
            parts.push(a.into_owned());
        }
    }
    parts.join(" ")
}

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct Finished {
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
    pub status: String,
}

/// Run `cmd` to completion (feeding `stdin` if given) or kill it after `timeout`.
/// Returns the output whether or not it succeeded; see [`run`] for the strict variant.
pub fn run_unchecked(
    cmd: &mut Command,
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<Finished, LabError> {
    let line = display(cmd);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            let tool = cmd.get_program().to_string_lossy().into_owned();
            LabError::MissingTool {
                package: package_for(&tool).to_string(),
                tool,
            }
        } else {
            LabError::Spawn {
                command: line.clone(),
                source,
            }
        }
    })?;
    let input = stdin.map(|s| s.to_string());
    let mut child_stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let (Some(text), Some(pipe)) = (input, child_stdin.as_mut()) {
            let _ = pipe.write_all(text.as_bytes());
        }
        drop(child_stdin);
    });
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LabError::CommandTimeout {
                    command: line,
                    timeout,
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(source) => {
                return Err(LabError::Spawn {
                    command: line,
                    source,
                })
            }
        }
    };
    let _ = writer.join();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Finished {
        stdout,
        stderr,
        success: status.success(),
        status: status.to_string(),
    })
}

/// Run `cmd`, failing with its command line and stderr unless it exits 0. Returns stdout.
pub fn run(cmd: &mut Command, stdin: Option<&str>, timeout: Duration) -> Result<String, LabError> {
    let line = display(cmd);
    let done = run_unchecked(cmd, stdin, timeout)?;
    if done.success {
        Ok(done.stdout)
    } else {
        Err(LabError::CommandFailed {
            command: line,
            status: done.status,
            stderr: done.stderr.trim().to_string(),
        })
    }
}

/// Shorthand: `ip -n NETNS <args>` (or plain `ip <args>` when `netns` is None).
pub fn ip(netns: Option<&str>, args: &[&str]) -> Result<String, LabError> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    cmd.args(args);
    run(&mut cmd, None, QUICK)
}

/// Run a program inside a namespace with `ip netns exec`.
pub fn in_netns(
    netns: &str,
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, LabError> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns, program]).args(args);
    run(&mut cmd, stdin, QUICK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_names_command_and_stderr() {
        let err = run(
            Command::new("sh").args(["-c", "echo boom >&2; exit 3"]),
            None,
            QUICK,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sh -c 'echo boom >&2; exit 3'"), "{text}");
        assert!(text.contains("boom"), "{text}");
    }

    #[test]
    fn timeout_kills() {
        let started = Instant::now();
        let err = run(
            Command::new("sleep").arg("5"),
            None,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(matches!(err, LabError::CommandTimeout { .. }));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn missing_program_is_missing_tool() {
        let err = run(&mut Command::new("pathdoc-no-such-tool"), None, QUICK).unwrap_err();
        assert!(matches!(err, LabError::MissingTool { .. }), "{err}");
    }

    #[test]
    fn stdin_is_fed() {
        let out = run(&mut Command::new("cat"), Some("hello"), QUICK).unwrap();
        assert_eq!(out, "hello");
    }
}
