//! OpenSSH in the lab: per-lab host and user keys, an `sshd_config` for a host's namespace, and
//! an `ssh_config` for the client so `ssh -F <config> server` logs in without a prompt.
//!
//! Everything lives in one directory under the lab's state dir (`<state>/<lab-id>.ssh/`), which
//! the teardown removes. The far end's `XDG_CACHE_HOME` points into it too (sshd `SetEnv`), so a
//! pathdoc copied there by `pathdoc … --ssh` is the lab's, not the machine's.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::LabError;
use crate::exec;

/// The user the lab logs in as (the lab runs as root; `AllowUsers` admits no one else).
pub const LOGIN_USER: &str = "root";

/// Where sshd usually lives; it must be started by absolute path (it re-executes itself).
const SSHD_CANDIDATES: &[&str] = &["/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd"];

/// The files of one sshd host.
#[derive(Debug, Clone)]
pub struct SshdFiles {
    pub dir: PathBuf,
    pub host: String,
    pub addr: Ipv4Addr,
    /// The host's IPv6 address in a dual-stack or IPv6 lab: sshd listens there too.
    pub addr6: Option<Ipv6Addr>,
    pub sshd_config: PathBuf,
    /// For the client: `ssh -F <client_config> <host>`.
    pub client_config: PathBuf,
    pub identity: PathBuf,
    pub known_hosts: PathBuf,
    /// The far end's cache directory (`XDG_CACHE_HOME` of its sessions).
    pub remote_cache: PathBuf,
}

/// The sshd binary, or the error that says which package provides it.
pub fn sshd_binary() -> Result<PathBuf, LabError> {
    SSHD_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| LabError::MissingTool {
            tool: "sshd".into(),
            package: "openssh-server".into(),
        })
}

/// Generate keys and write both configs for `host` (address `addr`, and `addr6` when the lab has
/// IPv6) into `dir`.
pub fn prepare(
    dir: &Path,
    host: &str,
    addr: Ipv4Addr,
    addr6: Option<Ipv6Addr>,
) -> Result<SshdFiles, LabError> {
    crate::preflight::require_tools(&["ssh", "ssh-keygen"])?;
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    let files = SshdFiles {
        dir: dir.to_path_buf(),
        host: host.to_string(),
        addr,
        addr6,
        sshd_config: dir.join(format!("sshd_config.{host}")),
        client_config: dir.join("ssh_config"),
        identity: dir.join("id_ed25519"),
        known_hosts: dir.join("known_hosts"),
        remote_cache: dir.join(format!("cache.{host}")),
    };
    let host_key = dir.join(format!("ssh_host_ed25519_key.{host}"));
    for (key, comment) in [
        (&host_key, format!("pathdoc-lab-{host}")),
        (&files.identity, "pathdoc-lab-user".to_string()),
    ] {
        if !key.exists() {
            exec::run(
                Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", "", "-C", &comment, "-f"])
                    .arg(key),
                None,
                exec::QUICK,
            )?;
        }
    }
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| LabError::io(format!("reading {}", p.display()), e))
    };
    let write = |p: &Path, text: &str| {
        std::fs::write(p, text).map_err(|e| LabError::io(format!("writing {}", p.display()), e))
    };
    let host_pub = read(&host_key.with_extension(format!("{host}.pub")))?;
    let user_pub = read(&files.identity.with_extension("pub"))?;
    write(&dir.join("authorized_keys"), &user_pub)?;
    // Every sshd host of the lab adds its line; the client trusts each by name and address.
    let mut known = std::fs::read_to_string(&files.known_hosts).unwrap_or_default();
    let names = match addr6 {
        Some(a6) => format!("{host},{addr},{a6}"),
        None => format!("{host},{addr}"),
    };
    known.push_str(&format!("{names} {}\n", host_pub.trim()));
    write(&files.known_hosts, &known)?;
    write(&files.sshd_config, &sshd_config(&files, &host_key))?;
    let mut client = std::fs::read_to_string(&files.client_config).unwrap_or_default();
    client.push_str(&client_block(&files));
    write(&files.client_config, &client)?;
    std::fs::create_dir_all(&files.remote_cache)
        .map_err(|e| LabError::io(format!("creating {}", files.remote_cache.display()), e))?;
    Ok(files)
}

fn sshd_config(f: &SshdFiles, host_key: &Path) -> String {
    let listen6 = f
        .addr6
        .map(|a| format!("ListenAddress {a}\n"))
        .unwrap_or_default();
    format!(
        "# pathdoc lab: sshd for host {host}\n\
         Port 22\n\
         ListenAddress {addr}\n\
         {listen6}\
         HostKey {key}\n\
         PidFile none\n\
         AuthorizedKeysFile {dir}/authorized_keys\n\
         AllowUsers {user}\n\
         PermitRootLogin prohibit-password\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         StrictModes no\n\
         X11Forwarding no\n\
         PrintMotd no\n\
         Subsystem sftp internal-sftp\n\
         SetEnv XDG_CACHE_HOME={cache}\n",
        host = f.host,
        addr = f.addr,
        key = host_key.display(),
        dir = f.dir.display(),
        user = LOGIN_USER,
        cache = f.remote_cache.display(),
    )
}

/// The client's `Host` blocks: the host's name and IPv4 address go to IPv4; its IPv6 address,
/// when it has one, keeps its own block so `ssh 2001:db8:…` is not rewritten to IPv4.
fn client_block(f: &SshdFiles) -> String {
    let mut text = host_block(f, &format!("{} {}", f.host, f.addr), &f.addr.to_string());
    if let Some(a6) = f.addr6 {
        text.push_str(&host_block(f, &a6.to_string(), &a6.to_string()));
    }
    text
}

fn host_block(f: &SshdFiles, patterns: &str, host_name: &str) -> String {
    format!(
        "Host {patterns}\n\
         \x20   HostName {host_name}\n\
         \x20   User {user}\n\
         \x20   IdentityFile {id}\n\
         \x20   IdentitiesOnly yes\n\
         \x20   UserKnownHostsFile {kh}\n\
         \x20   GlobalKnownHostsFile /dev/null\n\
         \x20   StrictHostKeyChecking yes\n\
         \x20   BatchMode yes\n\
         \x20   ConnectTimeout 10\n",
        user = LOGIN_USER,
        id = f.identity.display(),
        kh = f.known_hosts.display(),
    )
}

/// sshd needs its privilege-separation directory (Debian: `/run/sshd`, made by the service unit,
/// which the lab does not use).
pub fn ensure_privsep_dir() -> Result<(), LabError> {
    let dir = Path::new("/run/sshd");
    if !dir.is_dir() {
        std::fs::create_dir_all(dir).map_err(|e| LabError::io("creating /run/sshd", e))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    }
    Ok(())
}

/// Check the config with `sshd -t` so a bad config is an error naming the line, not a silent
/// daemon that never listens.
pub fn test_config(sshd: &Path, files: &SshdFiles) -> Result<(), LabError> {
    exec::run(
        Command::new(sshd)
            .arg("-t")
            .arg("-f")
            .arg(&files.sshd_config),
        None,
        exec::QUICK,
    )
    .map(|_| ())
}

/// Arguments that run sshd in the foreground with its log on stderr.
pub fn sshd_args(files: &SshdFiles) -> Vec<String> {
    vec![
        "-D".into(),
        "-e".into(),
        "-f".into(),
        files.sshd_config.display().to_string(),
    ]
}

/// How long sshd may take to start listening.
pub const START_PATIENCE: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_name_every_file_and_lock_logins_down() {
        let f = SshdFiles {
            dir: "/run/pathdoc/labs/pd-x.ssh".into(),
            host: "server".into(),
            addr: Ipv4Addr::new(203, 0, 113, 10),
            addr6: None,
            sshd_config: "/d/sshd_config.server".into(),
            client_config: "/d/ssh_config".into(),
            identity: "/d/id_ed25519".into(),
            known_hosts: "/d/known_hosts".into(),
            remote_cache: "/d/cache.server".into(),
        };
        let s = sshd_config(&f, Path::new("/d/hk"));
        for needle in [
            "ListenAddress 203.0.113.10",
            "HostKey /d/hk",
            "PasswordAuthentication no",
            "AllowUsers root",
            "SetEnv XDG_CACHE_HOME=/d/cache.server",
        ] {
            assert!(s.contains(needle), "{needle} missing in\n{s}");
        }
        let c = client_block(&f);
        assert!(c.starts_with("Host server 203.0.113.10\n"), "{c}");
        assert!(c.contains("    IdentityFile /d/id_ed25519\n"));
        assert!(c.contains("StrictHostKeyChecking yes"));
        assert!(c.contains("BatchMode yes"));
        assert!(!s.contains("ListenAddress 2001"), "{s}");

        // A dual-stack host: sshd on both addresses, and the IPv6 address a block of its own
        // (in the IPv4 block, `HostName` would send `ssh 2001:db8:…` over IPv4).
        let f6 = SshdFiles {
            addr6: Some("2001:db8:113::10".parse().unwrap()),
            ..f
        };
        let s6 = sshd_config(&f6, Path::new("/d/hk"));
        assert!(s6.contains("ListenAddress 203.0.113.10\nListenAddress 2001:db8:113::10\n"));
        let c6 = client_block(&f6);
        assert!(c6.starts_with("Host server 203.0.113.10\n    HostName 203.0.113.10\n"));
        assert!(c6.contains("Host 2001:db8:113::10\n    HostName 2001:db8:113::10\n"));
    }
}
