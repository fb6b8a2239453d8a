//! Next steps after a `check --ssh`/`speed --ssh` run, as INFO findings: the general checks
//! measure the path, `pathdoc ssh` what SSH itself makes of it; and an idle FAIL becomes the
//! keepalive stanza for the user's own ssh config for this very host.

use pathdoc_core::{Finding, Host, Remedy, Report, Status};

use crate::analysis::CHECK;
use crate::dest::SshDest;

/// `[user@]host[:port]` as `pathdoc ssh` and `--ssh` take it, IPv6 in brackets with a port.
pub fn spec(dest: &SshDest) -> String {
    match dest.port {
        None => dest.destination.clone(),
        Some(port) => {
            let host = dest.host();
            let user = dest.destination.strip_suffix(host).unwrap_or_default();
            if host.contains(':') {
                format!("{user}[{host}]:{port}")
            } else {
                format!("{user}{host}:{port}")
            }
        }
    }
}

/// The `pathdoc ssh` command for this destination, with the user's ssh options kept.
pub fn pathdoc_ssh_command(dest: &SshDest) -> String {
    let mut cmd = format!("pathdoc ssh {}", spec(dest));
    if let Some(f) = &dest.config {
        cmd.push_str(&format!(" -F {}", f.display()));
    }
    if let Some(i) = &dest.identity {
        cmd.push_str(&format!(" -i {}", i.display()));
    }
    for o in &dest.options {
        cmd.push_str(&format!(" -o {o}"));
    }
    cmd
}

/// The INFO finding that points from the path checks to `pathdoc ssh`.
pub fn pathdoc_ssh_finding(dest: &SshDest) -> Finding {
    let command = pathdoc_ssh_command(dest);
    Finding::new(
        CHECK,
        "ssh-next-step",
        Status::Info,
        format!("next step: for SSH transfers to this host run `{command}`"),
    )
    .summary(
        "These checks measured the path through a temporary pathdoc server. An SSH transfer \
         (scp, rsync, zfs send | ssh) can be far slower than the path: the cipher's CPU cost and \
         SSH's own channel window cap it. `pathdoc ssh` measures that over your ssh and names \
         the limit, in about a minute.",
    )
    .remedy(
        Remedy::new("Measure what caps SSH transfers to this host")
            .on(Host::Client)
            .with_command(command),
    )
}

/// After an idle FAIL whose remedy names a `ServerAliveInterval`: the stanza for this host in
/// the user's own `~/.ssh/config` (the idle check's own remedy is for `Host *`).
pub fn keepalive_finding(dest: &SshDest, report: &Report) -> Option<Finding> {
    let interval = report
        .findings
        .iter()
        .filter(|f| f.check == "idle" && f.status == Status::Fail)
        .flat_map(|f| &f.remedies)
        .filter_map(|r| r.command.as_deref())
        .filter_map(server_alive_interval)
        .min()?;
    let host = dest.host();
    let stanza =
        format!("Host {host}\n    ServerAliveInterval {interval}\n    ServerAliveCountMax 3");
    Some(
        Finding::new(
            CHECK,
            "ssh-keepalive-next-step",
            Status::Info,
            format!(
                "next step: keep your ssh sessions to {host} alive: ServerAliveInterval {interval} in ~/.ssh/config"
            ),
        )
        .summary(format!(
            "The idle check found state on the path that forgets idle connections; an ssh \
             session to {host} that sends a keepalive every {interval} s never goes idle that long. \
             Add this to ~/.ssh/config on this computer (a Host block above any `Host *`)."
        ))
        .remedy(
            Remedy::new(format!("ssh to {host}: a keepalive every {interval} s (~/.ssh/config)"))
                .on(Host::Client)
                .with_command(stanza),
        ),
    )
}

/// `N` of a `ServerAliveInterval N` line in a remedy's command.
fn server_alive_interval(command: &str) -> Option<u64> {
    command.lines().find_map(|l| {
        l.trim()
            .strip_prefix("ServerAliveInterval")
            .and_then(|n| n.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(spec: &str) -> SshDest {
        SshDest::parse(spec).unwrap()
    }

    #[test]
    fn the_command_keeps_user_port_and_options() {
        assert_eq!(spec(&dest("nas")), "nas");
        assert_eq!(spec(&dest("root@127.0.0.1:2222")), "root@127.0.0.1:2222");
        assert_eq!(spec(&dest("[2001:db8::1]:2222")), "[2001:db8::1]:2222");
        let mut d = dest("backup@nas:2222");
        d.options = vec!["ProxyJump=bastion".into()];
        assert_eq!(
            pathdoc_ssh_command(&d),
            "pathdoc ssh backup@nas:2222 -o ProxyJump=bastion"
        );
        let f = pathdoc_ssh_finding(&d);
        assert_eq!(f.status, Status::Info);
        assert!(f
            .title
            .contains("`pathdoc ssh backup@nas:2222 -o ProxyJump=bastion`"));
    }

    #[test]
    fn keepalive_follows_an_idle_fail_only() {
        let d = dest("backup@nas");
        let mut r = Report::new(pathdoc_core::Command::Check, "nas");
        assert!(keepalive_finding(&d, &r).is_none());
        r.findings.push(
            Finding::new("idle", "tcp-idle-timeout", Status::Fail, "x")
                .remedy(Remedy::new("ssh").with_command(
                    "Host *\n    ServerAliveInterval 120\n    ServerAliveCountMax 3",
                )),
        );
        let f = keepalive_finding(&d, &r).unwrap();
        let cmd = f.remedies[0].command.as_deref().unwrap();
        assert_eq!(
            cmd,
            "Host nas\n    ServerAliveInterval 120\n    ServerAliveCountMax 3"
        );
        r.findings[0].status = Status::Pass;
        assert!(keepalive_finding(&d, &r).is_none());
    }
}
