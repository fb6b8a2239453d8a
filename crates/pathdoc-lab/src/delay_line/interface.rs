//! Prepares an element namespace's interface for the delay line: up, and invisible at layer 3.

use std::path::Path;
use std::process::Command;

use super::packet_socket::interface_index;
use super::DelayLineError;

/// Makes `name` (in the calling thread's network namespace) ready to be one port of a delay line.
///
/// It brings the link up and disables IPv6 on it, so the element never speaks on the segment itself
/// (no router solicitations, no duplicate-address probes): the hosts on either side see only each
/// other. Promiscuous mode is not set here; the delay line's receive sockets hold a promiscuous
/// membership for as long as they run. Offloads are left as they are: keep TSO/GSO and
/// tx-checksumming on (the veth defaults) so super-frames cross the line in one piece.
pub fn prepare_interface(name: &str) -> Result<(), DelayLineError> {
    if interface_index(name).is_none() {
        return Err(DelayLineError::InterfaceNotFound {
            name: name.to_string(),
        });
    }
    let disable_ipv6 = Path::new("/proc/sys/net/ipv6/conf")
        .join(name)
        .join("disable_ipv6");
    if disable_ipv6.exists() {
        std::fs::write(&disable_ipv6, "1").map_err(|source| io_error(&disable_ipv6, source))?;
    }
    let output = Command::new("ip")
        .args(["link", "set", "dev", name, "up"])
        .output()
        .map_err(|source| DelayLineError::Io {
            context: "running `ip link set up`".into(),
            source,
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("Operation not permitted") {
            return Err(DelayLineError::PermissionDenied {
                what: format!("bringing interface {name} up"),
            });
        }
        return Err(DelayLineError::Command {
            command: format!("ip link set dev {name} up"),
            stderr: stderr.trim().to_string(),
        });
    }
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> DelayLineError {
    if source.kind() == std::io::ErrorKind::PermissionDenied {
        return DelayLineError::PermissionDenied {
            what: format!("writing {}", path.display()),
        };
    }
    DelayLineError::Io {
        context: format!("writing {}", path.display()),
        source,
    }
}
