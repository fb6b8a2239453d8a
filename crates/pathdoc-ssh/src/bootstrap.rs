//! `--ssh`: run the checks against a temporary `pathdoc server` started over SSH, so nothing has
//! to be installed on the far end first.
//!
//! Phases, each one `ssh` with a deadline:
//! 1. **probe** — a small POSIX `sh` script reports the far end's `uname -m`/`uname -s`, its
//!    cache directory (`${XDG_CACHE_HOME:-$HOME/.cache}/pathdoc`), a `pathdoc` on its PATH and
//!    its version, and the checksum of a cached copy;
//! 2. **binary** — use a `pathdoc` of the same version there, or our own cached copy (same
//!    SHA-256), or copy this binary (same architecture only) into the cache: written to a fresh
//!    temp name (`set -C`), checksum-verified there, then hard-linked into place so an existing
//!    file is never overwritten, and run once (`--version`) to prove it works there;
//! 3. **server** — `pathdoc server --listen 0.0.0.0:0 --auth-token-stdin --exit-on-stdin-eof
//!    --ready-line`: the random token goes over stdin (never on a command line `ps` shows), the
//!    server prints its ephemeral port, and exits when its stdin — the SSH channel — closes;
//! 4. **reach** — a TCP connection from here to that port, or [`SshError::PortBlocked`].
//!
//! [`RemoteServer`] closes the channel when dropped; the local `ssh` dies with pathdoc
//! (`PR_SET_PDEATHSIG`), so even a SIGKILLed pathdoc leaves no server behind.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pathdoc_core::Progress;
use sha2::{Digest, Sha256};

use crate::dest::{ResolvedConfig, SshDest};
use crate::error::SshError;
use crate::process::{self, tail};

/// This build's version: a far-end `pathdoc` is used only if it reports exactly this.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// What the server prints on stdout once it listens: `pathdoc-server-ready ADDR`.
pub const READY_PREFIX: &str = "pathdoc-server-ready ";

/// How to bootstrap.
#[derive(Debug, Clone)]
pub struct BootstrapOptions {
    /// TCP/UDP port of the temporary server; 0 lets the far end's kernel pick one.
    pub server_port: u16,
    /// Also serve the SSH evidence service (TCP_INFO and CPU of the far end's sshd), for
    /// `pathdoc ssh`.
    pub ssh_evidence: bool,
    /// Deadline of each phase (the copy gets more, scaled by size).
    pub step_timeout: Duration,
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        BootstrapOptions {
            server_port: 0,
            ssh_evidence: false,
            step_timeout: Duration::from_secs(60),
        }
    }
}

/// Where the far end's pathdoc came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BinarySource {
    /// A `pathdoc` of the same version on the far end's PATH.
    Installed,
    /// Our own copy from an earlier run, checksum matching.
    Cached,
    /// Copied by this run.
    Copied,
}

/// What the probe learned about the far end.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct RemoteFacts {
    pub arch: String,
    pub os: String,
    pub cache_dir: String,
    /// `$SSH_CONNECTION` as the far end saw the probe: client ip, client port, server ip, port.
    pub ssh_connection: String,
    pub pathdoc_on_path: Option<String>,
    pub pathdoc_on_path_version: Option<String>,
    pub cached: Option<String>,
    pub cached_sha256: Option<String>,
    pub hash_tool: Option<String>,
    /// The cache directory (or one above it) is not safe to run a binary from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsafe_cache: Option<UnsafeDir>,
}

impl RemoteFacts {
    fn parse(text: &str) -> Self {
        let mut f = RemoteFacts::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim().to_string();
            let opt = || (!v.is_empty()).then(|| v.clone());
            match k.trim() {
                "arch" => f.arch = v.clone(),
                "os" => f.os = v.clone(),
                "cache" => f.cache_dir = v.clone(),
                "conn" => f.ssh_connection = v.clone(),
                "path" => f.pathdoc_on_path = opt(),
                "path_version" => f.pathdoc_on_path_version = opt(),
                "cached" => f.cached = opt(),
                "cached_sum" => f.cached_sha256 = opt(),
                "hash" => f.hash_tool = opt(),
                _ => {}
            }
        }
        f.unsafe_cache = UnsafeDir::parse(text);
        f
    }
}

/// A running temporary server on the far end. Dropping it closes its SSH channel, which stops
/// the server; [`RemoteServer::stop`] does the same and waits for it.
pub struct RemoteServer {
    /// Where to connect to it from here.
    pub addr: SocketAddr,
    /// Its auth token (pass as the client's `--auth-token`).
    pub token: String,
    pub facts: RemoteFacts,
    pub source: BinarySource,
    /// The binary it runs, on the far end.
    pub remote_binary: String,
    dest: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl std::fmt::Debug for RemoteServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteServer")
            .field("addr", &self.addr)
            .field("dest", &self.dest)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl RemoteServer {
    /// Whether the SSH session (and so the server) is still up.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Close the channel and wait (up to 10 s) for the far end to stop; returns what the server
    /// and ssh printed on stderr.
    pub fn stop(mut self) -> String {
        self.shutdown(Duration::from_secs(10))
    }

    fn shutdown(&mut self, patience: Duration) -> String {
        drop(self.stdin.take()); // EOF on the server's stdin: it exits, then ssh does
        if let Some(mut child) = self.child.take() {
            if process::wait_deadline(&mut child, patience).is_none() {
                tracing::warn!(dest = %self.dest, "ssh to the temporary server did not exit; killed");
            }
        }
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        self.shutdown(Duration::from_secs(5));
    }
}

/// The far end's view of the architecture names std uses.
fn same_arch(remote_uname_m: &str) -> bool {
    let local = std::env::consts::ARCH;
    let remote = match remote_uname_m {
        "arm64" | "aarch64_be" => "aarch64",
        "i386" | "i486" | "i586" | "i686" => "x86",
        "amd64" => "x86_64",
        r if r.starts_with("armv") => "arm",
        r => r,
    };
    local == remote
}

/// Characters a remote path may have to be put in double quotes in a shell script safely.
fn shell_safe(path: &str) -> bool {
    !path.is_empty()
        && path.starts_with('/')
        && !path
            .chars()
            .any(|c| matches!(c, '"' | '$' | '`' | '\\' | '\'' | '\n' | '\r' | '!'))
}

/// The remote command: run `script` under `/bin/sh` whatever the login shell is.
fn sh(script: &str) -> String {
    debug_assert!(!script.contains('\''));
    format!("exec /bin/sh -c '{script}'")
}

const HASH_FN: &str =
    "h() { if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi; };";

/// `safe DIR`: whether only the login user (and root) can change what is in `DIR`, as OpenSSH's
/// StrictModes judges `~/.ssh`. `DIR` itself must be a real directory (not a symlink) owned by
/// the user and not group/world-writable; every directory above it, on the path as written and
/// as resolved (`pwd -P`), must be owned by the user or root and not group/world-writable unless
/// sticky (`/tmp`). An absent `DIR` is safe (it will be created with umask 077). On failure it
/// prints `unsafe=PATH`, `unsafe_found=…`, `unsafe_why=symlink|owner|writable|type` and
/// `unsafe_uid=UID`.
const SAFE_FN: &str = "u=$(id -u); \
    unsafe() { echo \"unsafe=$1\"; echo \"unsafe_found=$2\"; echo \"unsafe_why=$3\"; echo \"unsafe_uid=$u\"; return 1; }; \
    chk() { _m=$(ls -ldn -- \"$1\" 2>/dev/null) || return 0; set -- \"$1\" \"$2\" $_m; \
      case $3 in l*) if [ \"$2\" = 1 ]; then unsafe \"$1\" \"is a symbolic link to $(readlink -- \"$1\")\" symlink; return 1; fi; \
        if [ \"$5\" = \"$u\" ] || [ \"$5\" = 0 ]; then return 0; fi; unsafe \"$1\" \"is a symbolic link owned by uid $5\" owner; return 1;; \
        d*) ;; *) unsafe \"$1\" \"is not a directory (mode $3)\" type; return 1;; esac; \
      if [ \"$5\" != \"$u\" ] && { [ \"$2\" = 1 ] || [ \"$5\" != 0 ]; }; then unsafe \"$1\" \"is owned by uid $5 (mode $3)\" owner; return 1; fi; \
      case $3 in ?????w*|????????w*) case $3 in ?????????[tT]*) if [ \"$2\" = 0 ]; then return 0; fi;; esac; \
        unsafe \"$1\" \"is writable by others (mode $3, owner uid $5)\" writable; return 1;; esac; return 0; }; \
    safe() { chk \"$1\" 1 || return 1; _p=$(dirname -- \"$1\"); \
      while :; do chk \"$_p\" 0 || return 1; case $_p in /|.) break;; esac; _p=$(dirname -- \"$_p\"); done; \
      _q=$(cd -P -- \"$(dirname -- \"$1\")\" 2>/dev/null && pwd -P) || return 0; \
      while [ -n \"$_q\" ]; do chk \"$_q\" 0 || return 1; [ \"$_q\" = / ] && break; _q=$(dirname -- \"$_q\"); done; return 0; };";

/// The far end's cache directory, as every script computes it.
const CACHE_DIR: &str = "c=${XDG_CACHE_HOME:-$HOME/.cache}/pathdoc;";

/// A cache directory [`SAFE_FN`] refused.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct UnsafeDir {
    /// The directory that failed (the cache directory or one above it).
    pub path: String,
    /// What was found, in words (owner, mode, link target).
    pub found: String,
    /// `symlink`, `owner`, `writable` or `type`.
    pub why: String,
    /// The login user's uid on the far end.
    pub uid: String,
}

impl UnsafeDir {
    /// From the `unsafe*=` lines of [`SAFE_FN`], if there are any.
    fn parse(text: &str) -> Option<UnsafeDir> {
        let mut d = UnsafeDir::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim().to_string();
            match k.trim() {
                "unsafe" => d.path = v,
                "unsafe_found" => d.found = v,
                "unsafe_why" => d.why = v,
                "unsafe_uid" => d.uid = v,
                _ => {}
            }
        }
        (!d.path.is_empty()).then_some(d)
    }

    fn into_error(self, dest: &str) -> SshError {
        let path = &self.path;
        let fix = match self.why.as_str() {
            "symlink" => format!(
                "pathdoc runs binaries only from a directory it created: remove the link (`rm {path}`) and rerun, pathdoc then creates a private directory there"
            ),
            "writable" => format!(
                "Make it writable only by its owner (`chmod go-w {path}`), or remove it, and rerun"
            ),
            "owner" => format!(
                "It must belong to you (uid {}) or, for a directory above the cache, to root: remove it (as its owner or root) and rerun, or point XDG_CACHE_HOME on the far end at a directory only you can write",
                self.uid
            ),
            _ => format!("Remove {path} and rerun"),
        };
        SshError::UnsafeCache {
            dest: dest.to_string(),
            path: self.path,
            found: self.found,
            fix,
        }
    }
}

/// Name of our copy in the far end's cache: version, architecture and checksum prefix, so two
/// builds never share a file.
pub fn cached_name(sha256: &str) -> String {
    format!(
        "pathdoc-{VERSION}-{}-{}",
        std::env::consts::ARCH,
        &sha256[..16.min(sha256.len())]
    )
}

fn probe_script(name: &str) -> String {
    format!(
        "{HASH_FN} {SAFE_FN} echo arch=$(uname -m); echo os=$(uname -s); \
         {CACHE_DIR} echo cache=$c; echo conn=$SSH_CONNECTION; \
         p=$(command -v pathdoc 2>/dev/null) && echo path=$p && echo path_version=$(\"$p\" --version 2>/dev/null); \
         if safe \"$c\"; then f=$c/{name}; if [ -L \"$f\" ]; then echo cached=$f; echo cached_sum=symlink; \
         elif [ -e \"$f\" ]; then touch \"$f\" 2>/dev/null; echo cached=$f; echo cached_sum=$(h < \"$f\" 2>/dev/null | cut -d\" \" -f1); fi; fi; \
         for t in sha256sum shasum; do command -v $t >/dev/null 2>&1 && echo hash=$t && break; done; echo end=1"
    )
}

/// The local binary and its checksum.
struct LocalBinary {
    bytes: Vec<u8>,
    sha256: String,
}

fn local_binary() -> Result<LocalBinary, SshError> {
    let exe = std::env::current_exe().map_err(|source| SshError::Io {
        context: "locating this pathdoc binary".into(),
        source,
    })?;
    let bytes = std::fs::read(&exe).map_err(|source| SshError::Io {
        context: format!("reading {}", exe.display()),
        source,
    })?;
    let sha256 = hex(&Sha256::digest(&bytes));
    Ok(LocalBinary { bytes, sha256 })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Phase 1.
pub fn probe(dest: &SshDest, name: &str, deadline: Duration) -> Result<RemoteFacts, SshError> {
    let run = dest.run_remote(&["-T"], &sh(&probe_script(name)), None, deadline)?;
    if !run.success || !run.stdout.contains("end=1") {
        return Err(process::classify(dest, &run, "probing the far end"));
    }
    Ok(RemoteFacts::parse(&run.stdout))
}

/// What the temporary server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Launch {
    /// A `pathdoc` of this version on the far end's PATH, run where it is.
    Installed(String),
    /// Our copy in the cache directory (file name, SHA-256): the launch script re-checks the
    /// directory, copies the file once into a fresh private directory, verifies the copy's
    /// checksum and runs that copy, so nothing swapped in after a check can run.
    Cached { name: String, sha256: String },
}

/// Phase 2: the binary the server will run, and where it came from.
fn choose_binary(
    dest: &SshDest,
    facts: &RemoteFacts,
    local: &LocalBinary,
    progress: &dyn Progress,
    deadline: Duration,
) -> Result<(Launch, BinarySource), SshError> {
    let ours = format!("pathdoc {VERSION}");
    if facts.os != "Linux" {
        return Err(SshError::ArchMismatch {
            dest: dest.destination.clone(),
            remote: format!("{} {}", facts.os, facts.arch),
            local: format!("Linux {}", std::env::consts::ARCH),
            version: VERSION.into(),
        });
    }
    if let (Some(path), Some(v)) = (&facts.pathdoc_on_path, &facts.pathdoc_on_path_version) {
        if v.trim() == ours && shell_safe(path) {
            return Ok((Launch::Installed(path.clone()), BinarySource::Installed));
        }
    }
    if !same_arch(&facts.arch) {
        return Err(SshError::ArchMismatch {
            dest: dest.destination.clone(),
            remote: format!("{} {}", facts.os, facts.arch),
            local: format!("Linux {}", std::env::consts::ARCH),
            version: VERSION.into(),
        });
    }
    if let Some(bad) = &facts.unsafe_cache {
        return Err(bad.clone().into_error(&dest.destination));
    }
    if !shell_safe(&facts.cache_dir) {
        return Err(SshError::Copy {
            dest: dest.destination.clone(),
            detail: format!(
                "the far end's cache directory {:?} is not an absolute path pathdoc can quote safely",
                facts.cache_dir
            ),
        });
    }
    let name = cached_name(&local.sha256);
    let launch = Launch::Cached {
        name: name.clone(),
        sha256: local.sha256.clone(),
    };
    if let Some(found) = &facts.cached {
        let sum = facts.cached_sha256.clone().unwrap_or_default();
        if sum == local.sha256 {
            return Ok((launch, BinarySource::Cached));
        }
        return Err(SshError::ForeignFile {
            dest: dest.destination.clone(),
            path: found.clone(),
            found: match sum.as_str() {
                "" => "unreadable".into(),
                "symlink" => "a symbolic link".into(),
                _ => sum,
            },
            expected: local.sha256.clone(),
        });
    }
    if facts.hash_tool.is_none() {
        return Err(SshError::Copy {
            dest: dest.destination.clone(),
            detail: "neither sha256sum nor shasum exists there, so the copy cannot be verified; install coreutils or pathdoc itself".into(),
        });
    }
    progress.status(&format!(
        "ssh: copying pathdoc ({}) to {}:{}",
        pathdoc_core::units::format_bytes(local.bytes.len() as u64),
        dest.destination,
        facts.cache_dir
    ));
    copy_binary(dest, local, &name, deadline)?;
    Ok((launch, BinarySource::Copied))
}

/// Copies of other builds in the far end's cache (only names pathdoc writes, see
/// [`cached_name`]) that no run has used for this many days are removed when a new build is
/// copied: each build is ≈ 15 MiB, and a developer's far end would otherwise keep them all. A
/// run touches its copy when it finds it, so "used" is the file's mtime.
pub const STALE_DAYS: u32 = 1;
const STALE_DAYS_MINUS_ONE: u32 = STALE_DAYS - 1;
const STALE_PATTERN: &str = "pathdoc-*-*-????????????????";

/// The far end's side of the copy: check the cache directory (before and after creating it),
/// write to a fresh `mktemp` name, verify the checksum, prove it runs, link it into place only
/// if nothing is there, then prune stale copies of other builds.
fn copy_script(sum: &str, name: &str) -> String {
    format!(
        "{HASH_FN} {SAFE_FN} set -e; umask 077; {CACHE_DIR} safe \"$c\" || exit 7; mkdir -p \"$c\"; safe \"$c\" || exit 7; \
         t=$(mktemp \"$c/.upload-XXXXXX\"); cat > \"$t\"; \
         s=$(h < \"$t\" | cut -d\" \" -f1); \
         if [ \"$s\" != \"{sum}\" ]; then rm -f \"$t\"; echo \"checksum-mismatch $s\"; exit 3; fi; \
         chmod 700 \"$t\"; if v=$(\"$t\" --version 2>&1); then echo \"version=$v\"; else rm -f \"$t\"; echo \"does-not-run $v\"; exit 5; fi; \
         if ln \"$t\" \"$c/{name}\" 2>/dev/null; then rm -f \"$t\"; else rm -f \"$t\"; echo exists; exit 4; fi; \
         find \"$c\" -maxdepth 1 -type f -name \"{STALE_PATTERN}\" ! -name \"{name}\" -mtime +{STALE_DAYS_MINUS_ONE} -exec rm -f {{}} + 2>/dev/null || true",
    )
}

fn copy_binary(
    dest: &SshDest,
    local: &LocalBinary,
    name: &str,
    deadline: Duration,
) -> Result<(), SshError> {
    let script = copy_script(&local.sha256, name);
    // Room for a slow uplink: at least 1 Mbit/s for the binary on top of the step deadline.
    let budget = deadline + Duration::from_secs(local.bytes.len() as u64 * 8 / 1_000_000);
    let run = dest.run_remote(&["-T"], &sh(&script), Some(&local.bytes), budget)?;
    let out = run.stdout.trim();
    let fail = |detail: String| SshError::Copy {
        dest: dest.destination.clone(),
        detail,
    };
    match run.code {
        Some(0) if out.contains(&format!("version=pathdoc {VERSION}")) => Ok(()),
        Some(0) => Err(fail(format!("the copy answered {out:?} to --version"))),
        Some(3) => Err(fail(format!(
            "the checksum on the far end differs from this binary's ({out}); the transfer was corrupted"
        ))),
        Some(4) => Err(SshError::ForeignFile {
            dest: dest.destination.clone(),
            path: name.to_string(),
            found: "(appeared during the copy)".into(),
            expected: local.sha256.clone(),
        }),
        Some(5) => Err(fail(format!(
            "the copied binary does not run there ({}); run pathdoc from its portable build (scripts/package.sh --portable: glibc 2.17 or newer, README \"Install\"), or install pathdoc {VERSION} on the far end's PATH, then retry",
            out.trim_start_matches("does-not-run").trim()
        ))),
        Some(7) => Err(UnsafeDir::parse(out)
            .map(|d| d.into_error(&dest.destination))
            .unwrap_or_else(|| fail(out.to_string()))),
        _ => Err(process::classify(dest, &run, "copying pathdoc")),
    }
}

/// Start the temporary server on `dest` and prove it is reachable from here.
///
/// Call from a thread that outlives the returned server (the main thread): the local `ssh` is
/// tied to the calling thread's life (see [`crate::process`]).
pub fn bootstrap(
    dest: &SshDest,
    opts: &BootstrapOptions,
    progress: &dyn Progress,
) -> Result<RemoteServer, SshError> {
    progress.status(&format!("ssh: connecting to {}", dest.destination));
    let config = dest.resolve_config()?;
    let ips = config.addresses()?;
    if ips.is_empty() {
        return Err(SshError::Connect {
            dest: dest.destination.clone(),
            detail: format!("{} resolves to no address", config.hostname),
        });
    }
    // The probe looks for the checksum-named file of *this* binary, so hash first.
    let local = local_binary()?;
    let facts = probe(dest, &cached_name(&local.sha256), opts.step_timeout)?;
    let ip = server_address(&ips, &facts.ssh_connection);
    let (launch, source) = choose_binary(dest, &facts, &local, progress, opts.step_timeout)?;
    progress.status(&format!(
        "ssh: starting pathdoc server on {}",
        dest.destination
    ));
    let mut server = start_server(dest, &launch, &facts.cache_dir, ip, opts)?;
    server.facts = facts;
    server.source = source;
    check_reachable(dest, &config, &mut server)?;
    Ok(server)
}

/// Where the client reaches the temporary server: the address its SSH session reached the far
/// end by (`$SSH_CONNECTION`'s third field), which is where the server listens. A name with A
/// and AAAA records is reached over IPv6 first by OpenSSH, so the first resolved address (IPv4)
/// would find nothing listening. Failing that, a resolved address of the same family, then the
/// first one (`resolved` is not empty).
fn server_address(resolved: &[IpAddr], ssh_connection: &str) -> IpAddr {
    let reached = ssh_connection
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.parse::<IpAddr>().ok())
        .map(|a| a.to_canonical());
    match reached {
        Some(a) if resolved.contains(&a) => a,
        Some(a) => resolved
            .iter()
            .find(|r| r.is_ipv6() == a.is_ipv6())
            .copied()
            .unwrap_or(resolved[0]),
        None => resolved[0],
    }
}

/// The far end's part of phase 3. The server listens only on the address this SSH session
/// reached the far end by (`$SSH_CONNECTION`'s third field), falling back to the wildcard of
/// `ip`'s family only if sshd did not set it.
fn launch_script(launch: &Launch, ip: IpAddr, opts: &BootstrapOptions) -> String {
    let port = opts.server_port;
    let wildcard = match ip {
        IpAddr::V4(_) => format!("0.0.0.0:{port}"),
        IpAddr::V6(_) => format!("[::]:{port}"),
    };
    let evidence = if opts.ssh_evidence {
        " --ssh-evidence"
    } else {
        ""
    };
    let listen = format!(
        "set -- $SSH_CONNECTION; case ${{3:-}} in \"\") l=\"{wildcard}\";; *:*) l=\"[$3]:{port}\";; *) l=\"$3:{port}\";; esac;"
    );
    let args = format!(
        "server --listen \"$l\" --auth-token-stdin --exit-on-stdin-eof --ready-line{evidence}"
    );
    match launch {
        Launch::Installed(binary) => format!("{listen} exec \"{binary}\" {args}"),
        // Not `exec`: the shell stays to remove the private copy when the server exits (on
        // stdin EOF, which is also what any end of the SSH session gives it).
        Launch::Cached { name, sha256 } => format!(
            "{HASH_FN} {SAFE_FN} umask 077; {CACHE_DIR} safe \"$c\" >&2 || exit 7; f=\"$c/{name}\"; \
             if [ -L \"$f\" ] || [ ! -f \"$f\" ]; then echo \"pathdoc-bootstrap: $f is not a regular file\" >&2; exit 9; fi; \
             d=$(mktemp -d \"$c/.run-XXXXXX\") || exit 8; b=\"$d/pathdoc\"; \
             if ! cat < \"$f\" > \"$b\" || ! chmod 700 \"$b\"; then rm -rf \"$d\"; exit 8; fi; \
             s=$(h < \"$b\" | cut -d\" \" -f1); \
             if [ \"$s\" != \"{sha256}\" ]; then rm -rf \"$d\"; echo \"pathdoc-bootstrap: checksum-mismatch $f $s\" >&2; exit 3; fi; \
             {listen} \"$b\" {args}; r=$?; rm -rf \"$d\"; exit $r"
        ),
    }
}

/// Why the launch script stopped before the server ran, from its stderr.
fn launch_refusal(dest: &SshDest, launch: &Launch, stderr: &str) -> Option<SshError> {
    if let Some(bad) = UnsafeDir::parse(stderr) {
        return Some(bad.into_error(&dest.destination));
    }
    let Launch::Cached { sha256, .. } = launch else {
        return None;
    };
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pathdoc-bootstrap: "))?;
    Some(match line.strip_prefix("checksum-mismatch ") {
        Some(rest) => {
            let (path, found) = rest.rsplit_once(' ').unwrap_or((rest, ""));
            SshError::ForeignFile {
                dest: dest.destination.clone(),
                path: path.to_string(),
                found: format!("{found}, changed after it was checked; it was not run"),
                expected: sha256.clone(),
            }
        }
        None => SshError::ServerStart {
            dest: dest.destination.clone(),
            detail: line.to_string(),
        },
    })
}

fn start_server(
    dest: &SshDest,
    launch: &Launch,
    cache_dir: &str,
    ip: IpAddr,
    opts: &BootstrapOptions,
) -> Result<RemoteServer, SshError> {
    let script = launch_script(launch, ip, opts);
    let remote_binary = match launch {
        Launch::Installed(path) => path.clone(),
        Launch::Cached { name, .. } => format!("{cache_dir}/{name}"),
    };
    let mut args: Vec<OsString> = dest.option_args();
    for a in [
        "-T",
        "-o",
        "ServerAliveInterval=10",
        "-o",
        "ServerAliveCountMax=3",
        "--",
    ] {
        args.push(a.into());
    }
    args.push(dest.destination.clone().into());
    args.push(sh(&script).into());
    let mut cmd = process::command(dest, &args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = process::spawn(cmd)?;
    let token = random_token();
    let mut stdin = child.stdin.take();
    if let Some(pipe) = stdin.as_mut() {
        // Small: fits the pipe buffer, so this never blocks on a far end that is slow to start.
        let _ = pipe.write_all(format!("{token}\n").as_bytes());
        let _ = pipe.flush();
    }
    let stderr = process::drain(child.stderr.take());
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.trim().strip_prefix(READY_PREFIX) {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
    }
    let mut server = RemoteServer {
        addr: SocketAddr::new(ip, 0),
        token,
        facts: RemoteFacts::default(),
        source: BinarySource::Installed,
        remote_binary,
        dest: dest.destination.clone(),
        child: Some(child),
        stdin,
        stderr: Some(stderr),
    };
    let deadline = Instant::now() + opts.step_timeout;
    let announced = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(addr) => break addr,
            Err(mpsc::RecvTimeoutError::Timeout)
                if Instant::now() < deadline && server.is_running() => {}
            Err(_) => {
                let running = server.is_running();
                let text = server.shutdown(Duration::from_secs(2));
                if let Some(refused) = launch_refusal(dest, launch, &text) {
                    return Err(refused);
                }
                let detail = if running {
                    format!("it printed no ready line within {:?}", opts.step_timeout)
                } else {
                    format!("it exited: {}", tail(&text))
                };
                return Err(SshError::ServerStart {
                    dest: dest.destination.clone(),
                    detail,
                });
            }
        }
    };
    let bound = announced
        .parse::<SocketAddr>()
        .map_err(|_| SshError::ServerStart {
            dest: dest.destination.clone(),
            detail: format!("unreadable ready line {announced:?}"),
        })?;
    server.addr = reach_address(ip, bound);
    Ok(server)
}

/// Where to connect to a server that bound `bound`: the address `ssh` resolved (it may be a
/// NAT's public address for the far end's private one), unless the server bound the other
/// family, which only happens when ssh reached the far end over that family: then its own.
fn reach_address(resolved: IpAddr, bound: SocketAddr) -> SocketAddr {
    let specific = !bound.ip().is_unspecified();
    if specific && resolved.is_ipv4() != bound.ip().is_ipv4() {
        bound
    } else {
        SocketAddr::new(resolved, bound.port())
    }
}

fn random_token() -> String {
    use rand::RngCore;
    let mut raw = [0u8; 24];
    rand::thread_rng().fill_bytes(&mut raw);
    hex(&raw)
}

/// Phase 4: a TCP connection from here to the server's port (two tries, 5 s each).
fn check_reachable(
    dest: &SshDest,
    config: &ResolvedConfig,
    server: &mut RemoteServer,
) -> Result<(), SshError> {
    let mut last = String::new();
    for _ in 0..2 {
        match TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    let proxied = if config.proxied {
        format!(
            ". Note: {} is reached through a ProxyJump/ProxyCommand, so it may not be directly reachable from here at all",
            dest.destination
        )
    } else {
        String::new()
    };
    Err(SshError::PortBlocked {
        dest: dest.destination.clone(),
        addr: server.addr,
        port: server.addr.port(),
        detail: last,
        proxied,
    })
}

/// What `--ssh-clean` removed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CleanReport {
    pub cache_dir: String,
    pub removed: u64,
}

/// Remove pathdoc's cached copies (`pathdoc-<version>-<arch>-<sum>`, interrupted uploads and
/// private run copies) from the far end's cache directory, and the directory if that leaves it
/// empty. A cache directory [`SAFE_FN`] refuses (a symlink, someone else's) is left alone and
/// named in the error: nothing outside pathdoc's own directory is ever removed.
pub fn clean(dest: &SshDest, deadline: Duration) -> Result<CleanReport, SshError> {
    let script = format!(
        "{SAFE_FN} {CACHE_DIR} echo cache=$c; safe \"$c\" || exit 7; n=0; \
         for f in \"$c\"/pathdoc-*-*-* \"$c\"/.upload-*; do if [ -f \"$f\" ] && [ ! -L \"$f\" ] && rm -f \"$f\"; then n=$((n+1)); fi; done; \
         for d in \"$c\"/.run-*; do if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then rm -rf \"$d\"; fi; done; \
         rmdir \"$c\" 2>/dev/null; echo removed=$n"
    );
    let run = dest.run_remote(&["-T"], &sh(&script), None, deadline)?;
    if run.code == Some(7) {
        if let Some(bad) = UnsafeDir::parse(&run.stdout) {
            return Err(bad.into_error(&dest.destination));
        }
    }
    if !run.success {
        return Err(process::classify(
            dest,
            &run,
            "removing cached pathdoc copies",
        ));
    }
    let mut report = CleanReport {
        cache_dir: String::new(),
        removed: 0,
    };
    for line in run.stdout.lines() {
        if let Some(c) = line.strip_prefix("cache=") {
            report.cache_dir = c.to_string();
        } else if let Some(n) = line.strip_prefix("removed=") {
            report.removed = n.trim().parse().unwrap_or(0);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_server_is_reached_by_the_address_ssh_used() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let both = [ip("203.0.113.10"), ip("2001:db8:113::10")];
        let conn = |server: &str| format!("198.51.100.7 50000 {server} 22");
        // A dual-stack name that OpenSSH reached over IPv6: not the IPv4 address listed first.
        assert_eq!(
            server_address(&both, &conn("2001:db8:113::10")),
            ip("2001:db8:113::10")
        );
        assert_eq!(
            server_address(&both, &conn("203.0.113.10")),
            ip("203.0.113.10")
        );
        // Behind a NAT the far end's own address is not one the client resolved: same family.
        assert_eq!(
            server_address(&both, &conn("2001:db8:ffff::5")),
            ip("2001:db8:113::10")
        );
        assert_eq!(server_address(&both, &conn("10.0.0.5")), ip("203.0.113.10"));
        assert_eq!(
            server_address(&both, &conn("::ffff:203.0.113.10")),
            ip("203.0.113.10")
        );
        // No $SSH_CONNECTION (an sshd that does not set it): the first address.
        assert_eq!(server_address(&both, ""), ip("203.0.113.10"));
        assert_eq!(
            server_address(&[ip("2001:db8:113::10")], &conn("10.0.0.5")),
            ip("2001:db8:113::10")
        );
    }

    #[test]
    fn scripts_survive_single_quoting() {
        let s = probe_script("pathdoc-0.1.0-x86_64-0123456789abcdef");
        assert!(!s.contains('\''), "{s}");
        let c = copy_script("ab", "pathdoc-0.1.0-x86_64-0123456789abcdef");
        assert!(!c.contains('\''), "{c}");
        assert!(c.contains("-mtime +0"), "{c}");
        for launch in [
            Launch::Installed("/usr/bin/pathdoc".into()),
            Launch::Cached {
                name: "pathdoc-0.1.0-x86_64-0123456789abcdef".into(),
                sha256: "ab".into(),
            },
        ] {
            let l = launch_script(&launch, "192.0.2.1".parse().unwrap(), &Default::default());
            assert!(!l.contains('\''), "{l}");
        }
        assert!(sh("echo hi").starts_with("exec /bin/sh -c 'echo hi'"));
    }

    #[test]
    fn probe_output_parses() {
        let f = RemoteFacts::parse(
            "arch=x86_64\nos=Linux\ncache=/home/a/.cache/pathdoc\nconn=192.0.2.1 5000 203.0.113.10 22\npath=\ncached=/home/a/.cache/pathdoc/x\ncached_sum=abc\nhash=sha256sum\nend=1\n",
        );
        assert_eq!(f.arch, "x86_64");
        assert_eq!(f.pathdoc_on_path, None);
        assert_eq!(f.cached.as_deref(), Some("/home/a/.cache/pathdoc/x"));
        assert_eq!(f.hash_tool.as_deref(), Some("sha256sum"));
    }

    /// Runs [`SAFE_FN`] in the local `/bin/sh` on `dir`: `Ok` or the `unsafe_why` it printed.
    fn judge(dir: &std::path::Path) -> Result<(), String> {
        let script = format!("{SAFE_FN} safe \"$1\"");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &script, "sh"])
            .arg(dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        match UnsafeDir::parse(&text) {
            None if out.status.success() => Ok(()),
            None => Err(format!("failed without saying why: {text}")),
            Some(d) => {
                assert!(!out.status.success(), "{text}");
                Err(format!("{}:{}", d.why, d.path))
            }
        }
    }

    #[test]
    fn the_cache_directory_is_judged_as_strict_modes_would() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let mode = |p: &std::path::Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let root = std::env::temp_dir().join(format!("pathdoc-safe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let base = root.join("cache");
        let cache = base.join("pathdoc");
        std::fs::create_dir_all(&cache).unwrap();
        mode(&root, 0o700);
        mode(&base, 0o700);
        mode(&cache, 0o700);
        assert_eq!(judge(&cache), Ok(()));
        assert_eq!(
            judge(&base.join("absent")),
            Ok(()),
            "created later, umask 077"
        );
        mode(&cache, 0o770);
        assert_eq!(judge(&cache), Err(format!("writable:{}", cache.display())));
        mode(&cache, 0o700);
        // A parent it creates, group-writable.
        mode(&base, 0o775);
        assert_eq!(judge(&cache), Err(format!("writable:{}", base.display())));
        // Sticky and world-writable like /tmp is fine above the cache directory, not for it.
        mode(&base, 0o1777);
        assert_eq!(judge(&cache), Ok(()));
        mode(&cache, 0o1777);
        assert!(judge(&cache).unwrap_err().starts_with("writable:"));
        mode(&cache, 0o700);
        mode(&base, 0o700);
        // A symlink, even to a directory of our own.
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = base.join("linked");
        symlink(&elsewhere, &link).unwrap();
        assert_eq!(judge(&link), Err(format!("symlink:{}", link.display())));
        // Another user's directory (needs root to make one).
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).unwrap();
            assert_eq!(judge(&cache), Err(format!("owner:{}", cache.display())));
            std::os::unix::fs::chown(&cache, Some(0), Some(0)).unwrap();
            // Above the cache a directory of root or the user is fine; of another user not,
            // also when reached through a symlink (the resolved path is judged too).
            std::os::unix::fs::chown(&elsewhere, Some(65534), Some(65534)).unwrap();
            std::fs::create_dir(elsewhere.join("pathdoc")).unwrap();
            assert_eq!(
                judge(&link.join("pathdoc")),
                Err(format!("owner:{}", elsewhere.display()))
            );
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_server_is_reached_by_the_address_it_bound() {
        let v4: IpAddr = "203.0.113.10".parse().unwrap();
        // Behind a NAT the far end binds its private address; we connect to the public one.
        let private: SocketAddr = "10.0.0.5:4000".parse().unwrap();
        assert_eq!(
            reach_address(v4, private),
            "203.0.113.10:4000".parse().unwrap()
        );
        // ssh went over IPv6 although the name's first address is IPv4: use what it bound.
        let v6: SocketAddr = "[2001:db8::5]:4000".parse().unwrap();
        assert_eq!(reach_address(v4, v6), v6);
        let wild: SocketAddr = "[::]:4000".parse().unwrap();
        assert_eq!(
            reach_address(v4, wild),
            "203.0.113.10:4000".parse().unwrap()
        );
    }

    #[test]
    fn unsafe_lines_become_an_error_naming_path_owner_and_fix() {
        let d = UnsafeDir::parse(
            "cache=/x\nunsafe=/home/a/.cache/pathdoc\nunsafe_found=is owned by uid 1001 (mode drwxrwxrwx)\nunsafe_why=owner\nunsafe_uid=1000\n",
        )
        .unwrap();
        let text = d.into_error("host").to_string();
        for needle in [
            "/home/a/.cache/pathdoc",
            "uid 1001",
            "drwxrwxrwx",
            "uid 1000",
            "remove it",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
        assert_eq!(UnsafeDir::parse("cache=/x\nend=1\n"), None);
    }

    #[test]
    fn architectures_and_paths() {
        assert!(same_arch(std::env::consts::ARCH));
        assert!(!same_arch("riscv64") || std::env::consts::ARCH == "riscv64");
        assert!(shell_safe("/home/alice/.cache/pathdoc"));
        assert!(shell_safe("/home/a b/.cache"));
        for bad in ["relative", "/x/$(rm)", "/x\"y", "/a'b", "/a`b", ""] {
            assert!(!shell_safe(bad), "{bad}");
        }
        let name = cached_name("0123456789abcdef0123");
        assert_eq!(
            name,
            format!(
                "pathdoc-{VERSION}-{}-0123456789abcdef",
                std::env::consts::ARCH
            )
        );
        assert_eq!(random_token().len(), 48);
    }
}
