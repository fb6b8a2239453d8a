//! Counting ICMP "fragmentation needed" (type 3 code 4) arriving at a lab host: an nftables counter
//! in its own table, hooked before every filter (priority −300), so the count says what reached the
//! host's interface whatever its firewall then does with it.

use std::time::Duration;

use crate::error::LabError;
use crate::exec;
use crate::lab::Lab;

/// Table holding the counter, separate from the lab's own `pathdoc` table.
const TABLE: &str = "pathdoc_icmp_count";

/// A counter installed in one host's namespace; removed on drop.
#[derive(Debug)]
pub struct FragNeededCounter {
    netns: String,
}

impl FragNeededCounter {
    /// Installs the counter in `host`'s namespace (starting at zero).
    pub fn install(lab: &Lab, host: &str) -> Result<FragNeededCounter, LabError> {
        let netns = lab.netns(host).to_string();
        let ruleset = format!(
            "table ip {TABLE} {{\n  chain input {{\n    type filter hook input priority -300; policy accept;\n    icmp type destination-unreachable icmp code frag-needed counter\n  }}\n}}\n"
        );
        // A leftover table of an interrupted run would keep its old count: start afresh.
        let _ = exec::in_netns(&netns, "nft", &["delete", "table", "ip", TABLE], None);
        exec::in_netns(&netns, "nft", &["-f", "-"], Some(&ruleset))?;
        Ok(FragNeededCounter { netns })
    }

    /// ICMP frag-needed packets that arrived since [`Self::install`].
    pub fn packets(&self) -> Result<u64, LabError> {
        let mut cmd = std::process::Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.netns,
            "nft",
            "list",
            "table",
            "ip",
            TABLE,
        ]);
        let text = exec::run(&mut cmd, None, Duration::from_secs(5))?;
        parse_counter(&text).ok_or_else(|| {
            LabError::Measurement(format!("no counter in `nft list table ip {TABLE}`: {text}"))
        })
    }
}

impl Drop for FragNeededCounter {
    fn drop(&mut self) {
        let _ = exec::in_netns(&self.netns, "nft", &["delete", "table", "ip", TABLE], None);
    }
}

/// The packet count of the first `counter packets N bytes M` in `nft list` output.
fn parse_counter(text: &str) -> Option<u64> {
    let rest = &text[text.find("counter packets ")? + "counter packets ".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_packet_count() {
        let text = "table ip pathdoc_icmp_count {\n\tchain input {\n\t\ttype filter hook input priority -300; policy accept;\n\t\ticmp type destination-unreachable icmp code frag-needed counter packets 17 bytes 9520\n\t}\n}\n";
        assert_eq!(parse_counter(text), Some(17));
        assert_eq!(parse_counter("table ip x {}"), None);
    }
}
