//! Network namespaces by name (the `ip netns` convention: a bind mount at `/run/netns/<name>`).
//!
//! The one job of this module is to run code inside a named network namespace without moving the
//! calling process: [`run_in_netns`] starts a fresh thread, switches only that thread into the
//! namespace with `setns(2)`, runs the closure and returns its result. Sockets created inside the
//! closure stay bound to that namespace for their whole life, so the usual pattern is to create
//! (connect, bind, listen) inside the closure, return the socket, and use it from any thread:
//!
//! ```no_run
//! use std::net::TcpStream;
//! let stream: std::io::Result<TcpStream> =
//!     pathdoc_sys::netns::run_in_netns("pd-ab12-client", || TcpStream::connect("203.0.113.10:5201"))
//!         .expect("enter namespace");
//! ```
//!
//! Files under `/proc/sys/net` opened by that thread also belong to the namespace, which is how
//! per-namespace sysctls are written without spawning `ip netns exec`.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// Where `ip netns` keeps the bind mounts that name namespaces.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Failure to enter a named network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("network namespace `{name}` cannot be opened at {path}: {source} (does it exist? see `ip netns list`)")]
    Open {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("setns into network namespace `{name}` failed: {source} (needs root / CAP_SYS_ADMIN)")]
    Setns { name: String, source: nix::Error },
    #[error("could not start a thread for network namespace `{name}`: {source}")]
    Thread {
        name: String,
        source: std::io::Error,
    },
    #[error("code running inside network namespace `{name}` panicked: {message}")]
    Panicked { name: String, message: String },
}

/// The bind-mount path of the named namespace.
pub fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_RUN_DIR).join(name)
}

/// Whether a namespace with this name exists (its bind mount is present).
pub fn exists(name: &str) -> bool {
    netns_path(name).exists()
}

/// Names of all named network namespaces that start with `prefix`, sorted.
pub fn list_with_prefix(prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(NETNS_RUN_DIR) {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(prefix))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// Run `f` on a new thread that has joined the named network namespace and return its result.
///
/// The caller's thread and the rest of the process stay where they are. A panic inside `f` is
/// caught and reported as [`NetnsError::Panicked`]. `f` may borrow from the caller (the thread is
/// scoped and joined before this returns).
pub fn run_in_netns<F, T>(name: &str, f: F) -> Result<T, NetnsError>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let path = netns_path(name);
    let file = File::open(&path).map_err(|source| NetnsError::Open {
        name: name.to_string(),
        path,
        source,
    })?;
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn_scoped(scope, || -> Result<T, NetnsError> {
                nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(
                    |source| NetnsError::Setns {
                        name: name.to_string(),
                        source,
                    },
                )?;
                Ok(f())
            })
            .map_err(|source| NetnsError::Thread {
                name: name.to_string(),
                source,
            })?;
        match handle.join() {
            Ok(result) => result,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_string());
                Err(NetnsError::Panicked {
                    name: name.to_string(),
                    message,
                })
            }
        }
    })
}

/// Write a sysctl inside the named namespace, e.g. `("net.ipv4.ip_forward", "1")`.
///
/// Only namespaced sysctls (`net.*`) make sense here; others would change the whole machine and are
/// refused.
pub fn write_sysctl(netns: &str, key: &str, value: &str) -> Result<(), SysctlError> {
    if !key.starts_with("net.") || key.contains("..") || key.contains('/') {
        return Err(SysctlError::NotNamespaced {
            key: key.to_string(),
        });
    }
    let path = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
    let outcome = run_in_netns(netns, || std::fs::write(&path, value))?;
    outcome.map_err(|source| SysctlError::Write {
        netns: netns.to_string(),
        key: key.to_string(),
        value: value.to_string(),
        source,
    })
}

/// Read a sysctl inside the named namespace (trimmed).
pub fn read_sysctl(netns: &str, key: &str) -> Result<String, SysctlError> {
    if !key.starts_with("net.") || key.contains("..") || key.contains('/') {
        return Err(SysctlError::NotNamespaced {
            key: key.to_string(),
        });
    }
    let path = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
    let outcome = run_in_netns(netns, || std::fs::read_to_string(&path))?;
    outcome
        .map(|s| s.trim().to_string())
        .map_err(|source| SysctlError::Read {
            netns: netns.to_string(),
            key: key.to_string(),
            source,
        })
}

/// Failure to read or write a per-namespace sysctl.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    #[error("sysctl `{key}` is not a per-network-namespace setting (expected `net.*`)")]
    NotNamespaced { key: String },
    #[error("cannot set sysctl {key}={value:?} in namespace `{netns}`: {source}")]
    Write {
        netns: String,
        key: String,
        value: String,
        source: std::io::Error,
    },
    #[error("cannot read sysctl {key} in namespace `{netns}`: {source}")]
    Read {
        netns: String,
        key: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Netns(#[from] NetnsError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_namespace_is_a_clear_error() {
        let err = run_in_netns("pathdoc-no-such-namespace", || 1).unwrap_err();
        assert!(matches!(err, NetnsError::Open { .. }), "{err}");
        assert!(err.to_string().contains("pathdoc-no-such-namespace"));
    }

    #[test]
    fn non_net_sysctls_are_refused() {
        let err = write_sysctl("whatever", "kernel.panic", "1").unwrap_err();
        assert!(matches!(err, SysctlError::NotNamespaced { .. }));
        let err = write_sysctl("whatever", "net.ipv4/../../kernel", "1").unwrap_err();
        assert!(matches!(err, SysctlError::NotNamespaced { .. }));
    }
}
