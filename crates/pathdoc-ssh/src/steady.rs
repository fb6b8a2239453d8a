//! The steady part of one SSH transfer, summarised from the samples taken on both ends: the SSH
//! stream's rate, each process's share of a core, the sender's TCP chronographs and RTT. Pure.
//!
//! The first part of a transfer is slow start (at 100 ms RTT, eight round trips to fill a 2 MiB
//! window), so the summary starts at the first sample after [`WARMUP_SHARE`] of the sampled span.

use serde::{Deserialize, Serialize};

use crate::evidence::SideSample;

/// Share of the sampled span skipped as warm-up.
pub const WARMUP_SHARE: f64 = 0.35;

/// Which way data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Way {
    /// Client → server (`… | ssh host 'cat > /dev/null'`).
    Upload,
    /// Server → client (`ssh host 'head -c N /dev/zero' | …`).
    Download,
}

impl Way {
    pub fn label(self) -> &'static str {
        match self {
            Way::Upload => "upload",
            Way::Download => "download",
        }
    }
    pub fn direction(self) -> pathdoc_core::Direction {
        match self {
            Way::Upload => pathdoc_core::Direction::ClientToServer,
            Way::Download => pathdoc_core::Direction::ServerToClient,
        }
    }
}

/// CPU use of one end during the steady part.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct SideCpu {
    /// The `ssh` (client) or `sshd` session process (server): share of one core.
    pub ssh_process: Option<f64>,
    /// The remote command (`cat`/`head`), server only.
    pub command: Option<f64>,
    /// The cgroup's CPU allowance in cores, when capped.
    pub cgroup_limit: Option<f64>,
    /// Share of scheduler periods in which the cgroup hit its cap.
    pub cgroup_throttled: Option<f64>,
    /// The whole machine's busy share of all its CPUs, and how many there are.
    pub host_busy: Option<f64>,
    pub host_cpus: Option<u32>,
}

impl SideCpu {
    /// How close to its CPU ceiling this end ran, 0..≈1: the busiest of "the crypto process
    /// on one core", "the cgroup at its cap" and "every CPU of the machine busy".
    pub fn saturation(&self) -> Option<f64> {
        let proc_share = self.ssh_process?;
        let mut sat = proc_share; // one process, one core
        if let Some(limit) = self.cgroup_limit.filter(|l| *l > 0.0) {
            let used = proc_share + self.command.unwrap_or(0.0);
            sat = sat.max(used / limit.min(1.0));
            if let Some(t) = self.cgroup_throttled {
                // Throttled in most periods: the cap, not the work, set the pace.
                if t >= 0.5 {
                    sat = sat.max(0.9 + 0.1 * t);
                }
            }
        }
        if let Some(busy) = self.host_busy {
            // Every CPU busy and the crypto process holding a fair share of one: starved.
            if busy >= 0.9 && proc_share >= 0.5 {
                sat = sat.max(busy);
            }
        }
        Some(sat)
    }
}

/// The steady part of one transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steady {
    /// Window start and end, seconds after the far end said it was ready.
    pub from: f64,
    pub to: f64,
    /// Bytes of the SSH connection's TCP stream in the window (payload plus ≈ 0.1 % SSH framing).
    pub tcp_bytes: u64,
    /// `tcp_bytes` as bit/s.
    pub rate_bps: f64,
    pub client: SideCpu,
    pub server: SideCpu,
    /// The sending end's smoothed RTT (mean of the window's samples) and its minimum RTT.
    pub rtt_ms: Option<f64>,
    pub min_rtt_ms: Option<f64>,
    /// Shares of the window's wall time the sender's TCP was busy, limited by the receiver's
    /// window, limited by its own send buffer (Linux TCP chronographs, `tcpi_*_limited`).
    pub busy_share: Option<f64>,
    pub rwnd_limited_share: Option<f64>,
    pub sndbuf_limited_share: Option<f64>,
    /// Retransmitted segments in the window.
    pub retransmits: Option<u64>,
    /// Sender's congestion window, send buffer; receiver's receive buffer (last sample).
    pub cwnd_bytes: Option<u64>,
    pub sndbuf_bytes: Option<u64>,
    pub rcvbuf_bytes: Option<u64>,
    pub congestion_control: Option<String>,
}

impl Steady {
    /// Share of the sender's busy time it was limited by the receive window or its send buffer.
    pub fn buffer_limited_of_busy(&self) -> Option<f64> {
        let busy = self.busy_share.filter(|b| *b > 0.0)?;
        let limited =
            self.rwnd_limited_share.unwrap_or(0.0) + self.sndbuf_limited_share.unwrap_or(0.0);
        Some((limited / busy).min(1.0))
    }
}

fn share(a: Option<f64>, b: Option<f64>, dt: f64) -> Option<f64> {
    Some(((b? - a?) / dt).max(0.0))
}

/// Summarise the steady window. `local` and `remote` are the samples of the client and the
/// server, in time order. `None` when fewer than two local samples fall in the window.
pub fn summarize(way: Way, local: &[SideSample], remote: &[SideSample]) -> Option<Steady> {
    let with_tcp: Vec<&SideSample> = local.iter().filter(|s| s.tcp.is_some()).collect();
    let span = with_tcp.last()?.t;
    let start = with_tcp.iter().position(|s| s.t >= WARMUP_SHARE * span)?;
    let (a, b) = (with_tcp[start], *with_tcp.last()?);
    let dt = b.t - a.t;
    if dt <= 0.05 {
        return None;
    }
    let (ta, tb) = (a.tcp.as_ref()?, b.tcp.as_ref()?);
    // The client's own socket counts the stream: acked bytes when it sends, received when not.
    let tcp_bytes = match way {
        Way::Upload => tb.bytes_acked.saturating_sub(ta.bytes_acked),
        Way::Download => tb.bytes_received.saturating_sub(ta.bytes_received),
    };
    let rwin: Vec<&SideSample> = remote
        .iter()
        .filter(|s| s.t >= a.t - 0.01 && s.t <= b.t + 0.01)
        .collect();
    let (ra, rb) = (rwin.first().copied(), rwin.last().copied());
    let rdt = match (ra, rb) {
        (Some(x), Some(y)) if y.t - x.t > 0.05 => Some(y.t - x.t),
        _ => None,
    };
    let side_cpu = |x: Option<&SideSample>, y: Option<&SideSample>, dt: Option<f64>| -> SideCpu {
        let (Some(x), Some(y), Some(dt)) = (x, y, dt) else {
            return SideCpu::default();
        };
        let cpu = |s: &SideSample| s.ssh_process.as_ref().map(|p| p.cpu_seconds);
        let cmd = |s: &SideSample| s.command.as_ref().map(|p| p.cpu_seconds);
        let same_proc =
            x.ssh_process.as_ref().map(|p| p.pid) == y.ssh_process.as_ref().map(|p| p.pid);
        let throttled = match (&x.cgroup, &y.cgroup) {
            (Some(g0), Some(g1)) if g1.periods > g0.periods => Some(
                (g1.throttled_periods.saturating_sub(g0.throttled_periods)) as f64
                    / (g1.periods - g0.periods) as f64,
            ),
            _ => None,
        };
        let host_busy = match (&x.host, &y.host) {
            (Some(h0), Some(h1)) if h1.total_seconds > h0.total_seconds => {
                Some((h1.busy_seconds - h0.busy_seconds) / (h1.total_seconds - h0.total_seconds))
            }
            _ => None,
        };
        SideCpu {
            ssh_process: if same_proc {
                share(cpu(x), cpu(y), dt)
            } else {
                None
            },
            command: share(cmd(x), cmd(y), dt),
            cgroup_limit: y.cgroup.as_ref().and_then(|g| g.limit_cores),
            cgroup_throttled: throttled,
            host_busy,
            host_cpus: y.host.as_ref().map(|h| h.cpus),
        }
    };
    let client = side_cpu(Some(a), Some(b), Some(dt));
    let server = side_cpu(ra, rb, rdt);
    // The sender's TCP: the client's socket on upload, the server's on download.
    let (sa, sb, sdt, sender_win): (
        Option<&SideSample>,
        Option<&SideSample>,
        Option<f64>,
        Vec<&SideSample>,
    ) = match way {
        Way::Upload => (Some(a), Some(b), Some(dt), with_tcp[start..].to_vec()),
        Way::Download => (ra, rb, rdt, rwin.clone()),
    };
    let stcp = |s: Option<&SideSample>| s.and_then(|s| s.tcp);
    let chrono = |f: fn(&pathdoc_sys::tcp_info::TcpInfo) -> u64| -> Option<f64> {
        let (x, y, dt) = (stcp(sa)?, stcp(sb)?, sdt?);
        if !y.has(pathdoc_sys::tcp_info::field::SNDBUF_LIMITED) {
            return None;
        }
        Some((f(&y).saturating_sub(f(&x)) as f64 / 1e6 / dt).clamp(0.0, 1.0))
    };
    let rtts: Vec<f64> = sender_win
        .iter()
        .filter_map(|s| s.tcp.map(|t| t.rtt as f64 / 1000.0))
        .filter(|r| *r > 0.0)
        .collect();
    let receiver_last = match way {
        Way::Upload => rb,
        Way::Download => Some(b),
    };
    Some(Steady {
        from: a.t,
        to: b.t,
        tcp_bytes,
        rate_bps: tcp_bytes as f64 * 8.0 / dt,
        client,
        server,
        rtt_ms: (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64),
        min_rtt_ms: stcp(sb)
            .filter(|t| t.min_rtt > 0)
            .map(|t| t.min_rtt as f64 / 1000.0),
        busy_share: chrono(|t| t.busy_time),
        rwnd_limited_share: chrono(|t| t.rwnd_limited),
        sndbuf_limited_share: chrono(|t| t.sndbuf_limited),
        retransmits: match (stcp(sa), stcp(sb)) {
            (Some(x), Some(y)) => Some(u64::from(y.total_retrans.saturating_sub(x.total_retrans))),
            _ => None,
        },
        cwnd_bytes: stcp(sb).map(|t| t.cwnd_bytes()),
        sndbuf_bytes: sb.and_then(|s| s.mem).map(|m| u64::from(m.sndbuf)),
        rcvbuf_bytes: receiver_last
            .and_then(|s| s.mem)
            .map(|m| u64::from(m.rcvbuf)),
        congestion_control: sb.and_then(|s| s.congestion_control.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathdoc_sys::process::ProcStat;
    use pathdoc_sys::tcp_info::TcpInfo;

    fn sample(t: f64, acked: u64, cpu: f64, rtt_us: u32) -> SideSample {
        SideSample {
            t,
            tcp: Some(TcpInfo {
                bytes_acked: acked,
                bytes_received: acked,
                rtt: rtt_us,
                min_rtt: rtt_us - 1000,
                busy_time: (t * 1e6) as u64,
                rwnd_limited: (t * 0.5e6) as u64,
                kernel_len: pathdoc_sys::tcp_info::KERNEL_STRUCT_LEN as u32,
                ..Default::default()
            }),
            ssh_process: Some(ProcStat {
                pid: 7,
                comm: "ssh".into(),
                ppid: 1,
                cpu_seconds: cpu,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn skips_the_warm_up_and_measures_the_rest() {
        // 0..4 s, 10 MB/s after a slow first second; ssh at 40 % of a core.
        let local: Vec<SideSample> = (0..=16)
            .map(|i| {
                let t = i as f64 * 0.25;
                let bytes = if t < 1.0 {
                    (t * 2e6) as u64
                } else {
                    2_000_000 + ((t - 1.0) * 1e7) as u64
                };
                sample(t, bytes, t * 0.4, 100_000)
            })
            .collect();
        let s = summarize(Way::Upload, &local, &[]).unwrap();
        assert!(s.from >= 1.4 && s.to == 4.0, "{s:?}");
        assert!((s.rate_bps - 80e6).abs() < 1e3, "{}", s.rate_bps);
        assert!((s.client.ssh_process.unwrap() - 0.4).abs() < 1e-9);
        assert_eq!(s.rtt_ms, Some(100.0));
        assert!((s.rwnd_limited_share.unwrap() - 0.5).abs() < 1e-6);
        assert_eq!(s.server, SideCpu::default());
        assert!(summarize(Way::Upload, &local[..1], &[]).is_none());
        assert!(summarize(Way::Upload, &[], &[]).is_none());
    }

    #[test]
    fn saturation_names_the_binding_ceiling() {
        let free = SideCpu {
            ssh_process: Some(0.3),
            ..Default::default()
        };
        assert_eq!(free.saturation(), Some(0.3));
        let capped = SideCpu {
            ssh_process: Some(0.17),
            command: Some(0.02),
            cgroup_limit: Some(0.2),
            cgroup_throttled: Some(0.8),
            ..Default::default()
        };
        assert!(capped.saturation().unwrap() >= 0.95);
        let starved = SideCpu {
            ssh_process: Some(0.6),
            host_busy: Some(0.97),
            host_cpus: Some(2),
            ..Default::default()
        };
        assert!(starved.saturation().unwrap() >= 0.9);
        assert_eq!(SideCpu::default().saturation(), None);
    }
}
