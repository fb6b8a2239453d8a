//! The lab's hosts by name: every host namespace gets `/etc/netns/<ns>/hosts`, which
//! `ip netns exec` mounts over `/etc/hosts`, so `pathdoc check server` inside the lab resolves
//! `server` (and `client`, `hop1`, …) to its IPv4 and IPv6 addresses — a dual-stack name, as a
//! user's server has, without DNS. The machine's own /etc/hosts lines come first, so nothing else
//! resolves differently. Processes entered with setns alone (`Lab::command_netns_only`) keep the
//! machine's /etc/hosts.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::error::LabError;

/// Where `ip netns exec` looks for a namespace's own /etc files.
const ETC_NETNS: &str = "/etc/netns";

/// First line of every hosts file the lab writes: teardown removes only files that carry it.
const MARKER: &str = "# written by pathdoc lab";

/// The hosts file of a lab: the machine's lines, then one line per (name, address).
pub fn hosts_file(system: &str, lab_id: &str, entries: &[(String, IpAddr)]) -> String {
    let mut s = format!("{MARKER} {lab_id}: the machine's /etc/hosts, then the lab's hosts\n");
    s.push_str(system);
    if !system.is_empty() && !system.ends_with('\n') {
        s.push('\n');
    }
    for (name, addr) in entries {
        s.push_str(&format!("{addr} {name}\n"));
    }
    s
}

fn dir(ns: &str) -> PathBuf {
    PathBuf::from(ETC_NETNS).join(ns)
}

/// Write `text` as the hosts file of namespace `ns`.
pub fn write(ns: &str, text: &str) -> Result<(), LabError> {
    let dir = dir(ns);
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join("hosts");
    std::fs::write(&path, text).map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}

/// Remove the hosts file the lab wrote for `ns` (only one carrying the marker), and the
/// directory when that leaves it empty. Quiet: there is usually none.
pub fn remove(ns: &str) {
    let dir = dir(ns);
    let path = dir.join("hosts");
    let ours = std::fs::read_to_string(&path).is_ok_and(|t| t.starts_with(MARKER));
    if ours {
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_lines_come_first_then_each_family_of_each_host() {
        let text = hosts_file(
            "127.0.0.1 localhost",
            "pdx-lab",
            &[
                ("server".into(), "10.0.2.2".parse().unwrap()),
                ("server".into(), "2001:db8:2::2".parse().unwrap()),
            ],
        );
        assert_eq!(
            text,
            "# written by pathdoc lab pdx-lab: the machine's /etc/hosts, then the lab's hosts\n\
             127.0.0.1 localhost\n10.0.2.2 server\n2001:db8:2::2 server\n"
        );
    }
}
