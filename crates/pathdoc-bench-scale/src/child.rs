//! The server under test as a child process: started with a parent-death signal, its listen
//! address read from its stderr, and killed when the guard drops (also on panic) or on Ctrl-C.

use std::io::BufRead;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};

/// Pid of the live server child, for the Ctrl-C handler (0 = none).
static CHILD_PID: AtomicI32 = AtomicI32::new(0);

/// Kill the server child on SIGINT/SIGTERM, then exit; the generator's own sockets close with it.
pub fn install_signal_handler() -> anyhow::Result<()> {
    ctrlc::set_handler(|| {
        let pid = CHILD_PID.swap(0, Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        eprintln!("idle-scale: interrupted, server killed");
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")
}

/// A running server; dropping it kills the process and reaps it.
pub struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
    /// Last lines the server wrote to stderr (warnings), kept for the report.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ServerProcess {
    /// Start `cmd` and wait (at most `deadline`) for its "listening on ADDR" line. Call from the
    /// main thread: the parent-death signal fires when the spawning thread exits.
    pub fn spawn(mut cmd: Command, deadline: Duration) -> anyhow::Result<Self> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?;
        CHILD_PID.store(child.id() as i32, Ordering::SeqCst);
        let stderr = child.stderr.take().context("server stderr")?;
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log_writer = log.clone();
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if let Some(rest) = line.split("listening on ").nth(1) {
                    if let Some(addr) = rest.split_whitespace().next().and_then(|a| a.parse().ok())
                    {
                        let _ = addr_tx.send(addr);
                        continue;
                    }
                }
                let mut log = log_writer.lock().unwrap_or_else(|p| p.into_inner());
                if log.len() < 200 {
                    log.push(line);
                }
            }
        });
        let mut process = ServerProcess {
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            log,
        };
        match addr_rx.recv_timeout(deadline) {
            Ok(addr) => process.addr = addr,
            Err(_) => {
                let status = process.child.try_wait().ok().flatten();
                let log = process.log.lock().map(|l| l.join("\n")).unwrap_or_default();
                bail!("server did not report its listen address within {deadline:?} (exit status {status:?}); its stderr:\n{log}");
            }
        }
        Ok(process)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the server is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        CHILD_PID.store(0, Ordering::SeqCst);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
