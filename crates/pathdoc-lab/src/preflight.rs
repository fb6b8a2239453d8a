//! Preflight checks: root, the tools the lab drives, and the kernel features it needs, each
//! failing with a message that says what is missing and how to install it.

use std::path::Path;

use crate::error::LabError;

/// Debian package that provides a tool the lab (or its demo) runs.
pub fn package_for(tool: &str) -> &'static str {
    match tool {
        "ip" | "tc" => "iproute2",
        "nft" => "nftables",
        "ethtool" => "ethtool",
        "ping" => "iputils-ping",
        "iperf3" => "iperf3",
        "conntrack" => "conntrack",
        "tcpdump" => "tcpdump",
        "ssh" | "ssh-keygen" => "openssh-client",
        "sshd" => "openssh-server",
        _ => "the package that provides it",
    }
}

/// Whether `tool` is an executable somewhere on PATH.
pub fn have_tool(tool: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        let p = dir.join(tool);
        p.is_file() && {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        }
    })
}

/// Fail with [`LabError::MissingTool`] unless every tool is on PATH.
pub fn require_tools(tools: &[&str]) -> Result<(), LabError> {
    for tool in tools {
        if !have_tool(tool) {
            return Err(LabError::MissingTool {
                tool: tool.to_string(),
                package: package_for(tool).to_string(),
            });
        }
    }
    Ok(())
}

/// Fail with [`LabError::NotRoot`] unless the effective uid is 0.
pub fn require_root() -> Result<(), LabError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(LabError::NotRoot)
    }
}

/// What building a lab needs: root, network namespaces, and `ip`, `nft`, `ethtool` (plus `tc`
/// when a link has a rate limit).
pub fn check_for_up(needs_tc: bool, needs_tun: bool) -> Result<(), LabError> {
    require_root()?;
    if !Path::new("/proc/self/ns/net").exists() {
        return Err(LabError::MissingKernelFeature {
            feature: "network namespaces".into(),
            hint: "the kernel needs CONFIG_NET_NS=y".into(),
        });
    }
    let mut tools = vec!["ip", "nft", "ethtool"];
    if needs_tc {
        tools.push("tc");
    }
    require_tools(&tools)?;
    if needs_tun && !Path::new("/dev/net/tun").exists() {
        return Err(LabError::MissingKernelFeature {
            feature: "TUN device /dev/net/tun".into(),
            hint: "load it with `modprobe tun` (CONFIG_TUN)".into(),
        });
    }
    Ok(())
}

/// What `pathdoc lab demo` needs on top of [`check_for_up`]: traffic tools.
pub fn check_for_demo() -> Result<(), LabError> {
    require_tools(&["ping", "iperf3"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_message_says_how_to_install() {
        let text = require_tools(&["pathdoc-surely-missing"])
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("pathdoc-surely-missing") && text.contains("apt-get install"),
            "{text}"
        );
        assert_eq!(package_for("nft"), "nftables");
        assert_eq!(package_for("tc"), "iproute2");
    }
}
