//! Starting the system `ssh`: every child dies with pathdoc (`PR_SET_PDEATHSIG`), every run has a
//! deadline, and an `ssh` failure becomes an error that says what went wrong (host key, login,
//! connection) instead of ssh's raw stderr.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, so long-lived sessions
//! (the temporary server, transfers) must be started from a thread that outlives them — in
//! pathdoc, the main thread.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::dest::SshDest;
use crate::error::SshError;

/// Exit status ssh itself uses for its own failures (as opposed to the remote command's).
pub const SSH_FAILURE: i32 = 255;

/// A finished `ssh`.
#[derive(Debug, Clone)]
pub struct SshRun {
    pub code: Option<i32>,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl SshRun {
    /// The last few lines of stderr, for messages.
    pub fn stderr_tail(&self) -> String {
        tail(&self.stderr)
    }
}

/// The last 6 non-empty lines of `text`, joined with " | ".
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(6)..].join(" | ")
}

/// A `Command` for `ssh` with `args` that dies when this thread's process dies and never waits
/// on a closed terminal.
pub fn command(dest: &SshDest, args: &[OsString]) -> Command {
    let mut cmd = Command::new(&dest.program);
    cmd.args(args);
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: runs between fork and exec; prctl, getppid and kill are async-signal-safe and the
    // closure allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would ever signal us.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
    cmd
}

/// Start ssh; a missing binary is [`SshError::NoSsh`].
pub fn spawn(mut cmd: Command) -> Result<Child, SshError> {
    cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            SshError::NoSsh(e)
        } else {
            SshError::Io {
                context: "starting ssh".into(),
                source: e,
            }
        }
    })
}

/// Run `ssh args…` to completion, feeding `input` on stdin (stdin is empty otherwise). Killed
/// and reported as [`SshError::Timeout`] after `deadline`.
pub fn run(
    dest: &SshDest,
    args: &[OsString],
    input: Option<&[u8]>,
    deadline: Duration,
) -> Result<SshRun, SshError> {
    let mut cmd = command(dest, args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn(cmd)?;
    let stdin = child.stdin.take();
    let data = input.map(<[u8]>::to_vec);
    let writer = std::thread::spawn(move || {
        if let (Some(mut pipe), Some(data)) = (stdin, data) {
            // A remote command that exits early closes the pipe; its exit status tells why.
            let _ = pipe.write_all(&data);
        }
    });
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let Some(status) = wait_deadline(&mut child, deadline) else {
        // A grandchild may still hold the pipes; the drain threads end when it does.
        return Err(SshError::Timeout {
            what: "ssh".into(),
            dest: dest.destination.clone(),
            after: deadline,
            detail: String::new(),
        });
    };
    let _ = writer.join();
    Ok(SshRun {
        code: status.code(),
        success: status.success(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Read a pipe to its end on a thread.
pub fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Wait for `child` up to `deadline`; kill and reap it then and return `None`.
pub fn wait_deadline(child: &mut Child, deadline: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + deadline;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() >= until => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => return None,
        }
    }
}

/// Turn a failed ssh into the error a user can act on. `what` says what pathdoc was doing.
pub fn classify(dest: &SshDest, run: &SshRun, what: &str) -> SshError {
    let e = &run.stderr;
    let host = dest.host().to_string();
    if e.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || e.contains("Host key for") && e.contains("has changed")
    {
        return SshError::HostKeyMismatch {
            host,
            known_hosts: dest.known_hosts_name(),
            ssh: dest.ssh_command(),
            detail: tail(e),
        };
    }
    if e.contains("Host key verification failed") {
        return SshError::HostKeyUnknown {
            host,
            ssh: dest.ssh_command(),
            detail: tail(e),
        };
    }
    if e.contains("Permission denied") || e.contains("Too many authentication failures") {
        return SshError::LoginRefused {
            dest: dest.destination.clone(),
            ssh: dest.ssh_command(),
            detail: tail(e),
        };
    }
    if run.code == Some(SSH_FAILURE)
        && (e.contains("ssh:")
            || e.contains("Connection")
            || e.contains("kex_exchange")
            || e.contains("not responding"))
    {
        return SshError::Connect {
            dest: dest.destination.clone(),
            detail: tail(e),
        };
    }
    SshError::Remote {
        dest: dest.destination.clone(),
        what: what.to_string(),
        detail: format!(
            "exit status {}{}",
            run.code
                .map(|c| c.to_string())
                .unwrap_or("by signal".into()),
            match tail(e) {
                t if t.is_empty() => String::new(),
                t => format!(": {t}"),
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(stderr: &str, code: i32) -> SshRun {
        SshRun {
            code: Some(code),
            success: false,
            stdout: String::new(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn host_key_and_login_hints_keep_user_and_port() {
        let d = SshDest::parse("root@127.0.0.1:2222").unwrap();
        let mismatch =
            "WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!\nHost key verification failed.\n";
        let text = classify(&d, &run_with(mismatch, 255), "x").to_string();
        assert!(text.contains("`ssh-keygen -R [127.0.0.1]:2222`"), "{text}");
        assert!(text.contains("`ssh -p 2222 root@127.0.0.1`"), "{text}");
        let unknown = "Host key verification failed.\r\n";
        let text = classify(&d, &run_with(unknown, 255), "x").to_string();
        assert!(
            text.contains("connect once with `ssh -p 2222 root@127.0.0.1`"),
            "{text}"
        );
        let denied = "root@127.0.0.1: Permission denied (publickey).\r\n";
        let text = classify(&d, &run_with(denied, 255), "x").to_string();
        assert!(
            text.contains("`ssh -p 2222 root@127.0.0.1` works"),
            "{text}"
        );
        let plain = SshDest::parse("nas:22").unwrap();
        assert_eq!(plain.known_hosts_name(), "nas");
        assert_eq!(plain.ssh_command(), "ssh -p 22 nas");
    }

    #[test]
    fn classifies_the_usual_ssh_failures() {
        let d = SshDest::parse("root@server").unwrap();
        let mismatch = "@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n...\nHost key verification failed.\n";
        assert!(matches!(
            classify(&d, &run_with(mismatch, 255), "x"),
            SshError::HostKeyMismatch { .. }
        ));
        let unknown = "No ED25519 host key is known for server and you have requested strict checking.\r\nHost key verification failed.\r\n";
        assert!(matches!(
            classify(&d, &run_with(unknown, 255), "x"),
            SshError::HostKeyUnknown { .. }
        ));
        let denied = "nobody@server: Permission denied (publickey).\r\n";
        assert!(matches!(
            classify(&d, &run_with(denied, 255), "x"),
            SshError::LoginRefused { .. }
        ));
        let refused = "ssh: connect to host 203.0.113.10 port 22: Connection refused\r\n";
        assert!(matches!(
            classify(&d, &run_with(refused, 255), "x"),
            SshError::Connect { .. }
        ));
        let remote = classify(&d, &run_with("sh: 1: nope: not found", 127), "probing");
        assert!(
            remote.to_string().contains("probing") && remote.to_string().contains("127"),
            "{remote}"
        );
    }

    #[test]
    fn a_missing_ssh_binary_says_so() {
        let mut d = SshDest::parse("h").unwrap();
        d.program = "/nonexistent/ssh".into();
        let e = run(&d, &[], None, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, SshError::NoSsh(_)), "{e}");
    }

    #[test]
    fn runs_with_input_and_deadline() {
        let mut d = SshDest::parse("h").unwrap();
        d.program = "sh".into();
        let out = run(
            &d,
            &["-c".into(), "wc -c".into()],
            Some(b"hello"),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(out.stdout.trim(), "5");
        let started = Instant::now();
        let e = run(
            &d,
            &["-c".into(), "sleep 5".into()],
            None,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(matches!(e, SshError::Timeout { .. }));
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
