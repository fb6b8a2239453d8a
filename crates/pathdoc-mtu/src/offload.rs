//! Seed 003's second fault: the server's NIC cuts TCP segmentation offload at a fixed frame size
//! (QEMU's emulated rtl8139: 1500 B) whatever MSS and path MTU its kernel asks for. Pure: reads
//! [`MtuData`], returns the `nic-offload-ignores-mtu` finding when the signature is there.
//!
//! The signature, all measured by the check:
//! - the server→client path loses sizes above `mtu`, and UDP probes up to `mtu` pass;
//! - in the download with the client's MSS set to fit that path, the server's kernel sends
//!   segments that fit (TCP_INFO `snd_mss` + headers ≤ `mtu`), yet a large share of them is
//!   retransmitted ([`CRAWL_RETRANS_FRACTION`]): what leaves the server is bigger than its TCP
//!   asked for;
//! - where ICMP reaches the server (PMTUD signalled), its kernel already knows the smaller path
//!   MTU (TCP_INFO `pmtu` ≤ `mtu`) and ICMP too-big still kept arriving during that download.
//!   Where ICMP is filtered (a black hole), the black hole is the first fault to fix and this one
//!   is named as the second.

use pathdoc_core::{Evidence, Finding, Host, Quantity, Remedy, Status};

use crate::analysis::{BulkRun, Outcome};
use crate::verdict::MtuData;
use crate::wire::BulkServerStats;

/// The finding id.
pub const ID: &str = "nic-offload-ignores-mtu";

/// Share of data segments retransmitted above which a download "crawls": a healthy path
/// retransmits well under 1 %; even a congested one rarely a fifth of everything.
pub const CRAWL_RETRANS_FRACTION: f64 = 0.2;

/// Whether a download lost a crawl-sized share of its segments (by the server's TCP_INFO).
pub fn crawled(run: &BulkRun) -> bool {
    run.server
        .and_then(|s| s.retrans_fraction())
        .is_some_and(|f| f >= CRAWL_RETRANS_FRACTION)
}

/// How the server learns about the smaller MTU on this path.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Icmp {
    /// ICMP too-big reaches it: `during` more arrived in the reduced-MSS download.
    Reaches { during: u64 },
    /// It does not (PMTUD black hole or a bad suggestion): that fault comes first.
    Lost,
}

/// The measured signature of a NIC that ignores the MTU.
struct Signature<'a> {
    mtu: u16,
    reduced: &'a BulkRun,
    stats: BulkServerStats,
    retrans: f64,
    icmp: Icmp,
}

fn signature(data: &MtuData) -> Option<Signature<'_>> {
    let down = data.down.as_ref()?;
    let mtu = down.outcome.mtu().filter(|_| down.outcome.has_drop())?;
    let reduced = data.bulk_reduced.as_ref()?;
    let stats = reduced.server?;
    let retrans = stats.retrans_fraction()?;
    let header = if data.ipv6 { 60 } else { 40 };
    let fits = stats.snd_mss + header <= u32::from(mtu);
    // UDP probes of every size up to the path MTU arrived whole: the path itself does not lose
    // packets that fit, so TCP's losses are its own frames' size.
    let probes_pass = down
        .probes
        .iter()
        .filter(|p| p.size <= mtu)
        .all(|p| p.received == p.sent);
    if !fits || !probes_pass || retrans < CRAWL_RETRANS_FRACTION {
        return None;
    }
    let icmp = match down.outcome {
        Outcome::Signalled { .. } => {
            let during = stats.icmp_too_big_in?;
            if during == 0 || stats.pmtu > u32::from(mtu) {
                return None;
            }
            Icmp::Reaches { during }
        }
        _ => Icmp::Lost,
    };
    Some(Signature {
        mtu,
        reduced,
        stats,
        retrans,
        icmp,
    })
}

/// Whether the check saw this fault (other findings then leave the downloads to it).
pub fn detected(data: &MtuData) -> bool {
    signature(data).is_some()
}

/// The `nic-offload-ignores-mtu` finding, when the signature is there.
pub fn finding(data: &MtuData) -> Option<Finding> {
    let sig = signature(data)?;
    let header = if data.ipv6 { 60 } else { 40 };
    let s = sig.stats;
    let percent = sig.retrans * 100.0;
    let nic = data.server_nic.as_ref();
    let nic_text = nic
        .map(|n| format!(" The server's interface: {}.", n.describe()))
        .unwrap_or_default();
    let crawl = format!(
        "with the client's MSS set to {} the server's kernel sent segments of MSS {} ({} B packets, which fit the {} B path; UDP probes of that size pass), yet {percent:.0} % of its {} data segments were retransmitted and the download moved {}",
        sig.reduced.client_mss.unwrap_or(0),
        s.snd_mss,
        s.snd_mss + header,
        sig.mtu,
        s.data_segs_out.unwrap_or(0),
        Quantity::Goodput(sig.reduced.goodput_bps()),
    );
    let (title, summary) = match sig.icmp {
        Icmp::Reaches { during } => (
            "the server's network interface sends frames larger than its TCP stack asked for: segmentation offload ignores the path MTU".to_string(),
            format!(
                "ICMP too-big reaches the server and its kernel already uses a {} B path MTU towards the client. Still, {crawl}, while {during} more ICMP destination-unreachable messages arrived: frames larger than the path MTU still leave the server. The kernel hands its NIC large TCP super-segments (TSO/GSO) and the NIC cuts them at its own fixed size (QEMU's emulated rtl8139 cuts at 1500 B), ignoring the MSS and path MTU.{nic_text}",
                s.pmtu
            ),
        ),
        Icmp::Lost => (
            "second fault, fix after the black hole: the server's network interface sends frames larger than its TCP stack asked for".to_string(),
            format!(
                "Fix the PMTUD black hole first (ICMP too-big does not reach the server). A second fault already shows: {crawl}. Frames larger than the kernel asked for leave the server: its NIC's segmentation offload ignores the MSS and path MTU, so downloads will still crawl after ICMP is let in until this is fixed too.{nic_text}"
            ),
        ),
    };
    // Most telling first (compact output shows the first few): what the server is, that ICMP
    // kept arriving, what its kernel believes, and what was lost anyway.
    let mut f = Finding::new("mtu", ID, Status::Fail, title)
        .direction(pathdoc_core::Direction::ServerToClient)
        .summary(summary)
        .requirement("TCP segmentation offload must cut super-segments at the MSS the kernel gives (gso_size), never at a fixed frame size; RFC 1191 PMTUD only works if the sender's frames follow the MTU it learned");
    if let Some(n) = nic {
        f = f.evidence(
            Evidence::new("server interface", Quantity::Text(n.describe())).with_detail(
                "ethtool ioctl (driver, TSO/GSO/GRO), interface MTU, DMI and CPU flags",
            ),
        );
    }
    if let Icmp::Reaches { during } = sig.icmp {
        f = f.evidence(
            Evidence::new(
                "ICMP too-big received by the server during the reduced-MSS download",
                Quantity::Count(during),
            )
            .with_detail("/proc/net/snmp Icmp InDestUnreachs (+ Icmp6InPktTooBigs), before and after; its kernel already knew the path MTU"),
        );
    }
    f = f
        .evidence(
            Evidence::new("server kernel: MSS and path MTU towards the client", Quantity::Text(format!("snd_mss {} B, pmtu {} B", s.snd_mss, s.pmtu)))
                .with_detail("TCP_INFO of the reduced-MSS download socket"),
        )
        .evidence(
            Evidence::new("retransmitted share of the reduced-MSS download", Quantity::Percent(percent))
                .with_detail(format!(
                    "{} of {} data segments (TCP_INFO total_retrans / data_segs_out); crawl threshold {:.0} %",
                    s.total_retrans,
                    s.data_segs_out.unwrap_or(0),
                    CRAWL_RETRANS_FRACTION * 100.0
                )),
        )
        .evidence(Evidence::new("server→client path MTU", Quantity::Bytes(u64::from(sig.mtu))));
    if let Some(full) = &data.bulk_full {
        f = f.evidence(Evidence::new(
            "download with the client's normal MSS",
            Quantity::Goodput(full.goodput_bps()),
        ));
    }
    f = f.evidence(Evidence::new(
        format!(
            "download with the client's MSS set to {}",
            sig.reduced.client_mss.unwrap_or(0)
        ),
        Quantity::Goodput(sig.reduced.goodput_bps()),
    ));
    Some(f.remedies(remedies(data, sig.mtu)))
}

/// The fixes, all on the server: offloads off (now and persisted), a paravirtual NIC, and the
/// route-MTU lock that hid the fault in the seed.
fn remedies(data: &MtuData, mtu: u16) -> Vec<Remedy> {
    let iface = data
        .server_nic
        .as_ref()
        .map(|n| n.iface.clone())
        .unwrap_or_else(|| "IFACE".into());
    let client = data
        .client_observed
        .as_deref()
        .and_then(|a| {
            a.rsplit_once(':')
                .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
        })
        .unwrap_or_else(|| "CLIENT_ADDR".into());
    vec![
        Remedy::new(format!("Turn TCP and generic segmentation offload off on {iface}, the interface towards the client: the kernel then cuts segments itself, at the MSS and path MTU it knows"))
            .on(Host::Server)
            .with_command(format!("ethtool -K {iface} tso off gso off")),
        Remedy::new("Persist it across reboots with a systemd .link file (or a udev rule running the same ethtool command)")
            .on(Host::Server)
            .with_command(format!("printf '[Match]\\nOriginalName={iface}\\n\\n[Link]\\nTCPSegmentationOffload=false\\nGenericSegmentationOffload=false\\n' > /etc/systemd/network/10-{iface}-offload.link")),
        Remedy::new("If the server is a VM with an emulated NIC (rtl8139 / 8139cp, e1000), give it a paravirtual one: libvirt `<model type='virtio'/>` in the interface definition (virsh edit), then reboot the guest")
            .on(Host::Other { name: "the hypervisor hosting the server VM".into() })
            .with_command("virsh edit VM   # <interface …><model type='virtio'/></interface>"),
        Remedy::new("Stopgap that hid the fault in seed 003: lock the route MTU towards the client (replace GATEWAY with the server's next hop); with a locked MTU Linux sends without DF, so routers fragment the NIC's big frames instead of dropping them")
            .on(Host::Server)
            .with_command(format!("ip route add {client} via GATEWAY mtu lock {mtu}")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{Direction, Outcome};
    use crate::verdict::{findings, DirectionData, ProbeRow};

    fn down(outcome: Outcome) -> DirectionData {
        DirectionData {
            direction: Direction::ServerToClient,
            max_probed: 1500,
            local_limit: Some(1501),
            probes: vec![
                ProbeRow {
                    size: 1500,
                    sent: 3,
                    received: 0,
                },
                ProbeRow {
                    size: 1420,
                    sent: 3,
                    received: 3,
                },
                ProbeRow {
                    size: 1000,
                    sent: 3,
                    received: 3,
                },
            ],
            icmp: vec![],
            outcome,
            ttl_scan: vec![],
            location: None,
            cached_pmtu: None,
        }
    }

    fn signalled() -> Outcome {
        Outcome::Signalled {
            mtu: 1420,
            ptb_mtu: 1420,
            ptb_from: None,
        }
    }

    fn run(mss: Option<u32>, bytes: u64, retrans: u32, sent: u32, icmp: u64, pmtu: u32) -> BulkRun {
        BulkRun {
            client_mss: mss,
            seconds: 1.0,
            bytes,
            rcv_mss: None,
            server: Some(BulkServerStats {
                bytes_acked: bytes,
                snd_mss: 1368,
                pmtu,
                total_retrans: retrans,
                data_segs_out: Some(sent),
                icmp_too_big_in: Some(icmp),
            }),
        }
    }

    /// The lab's nic-ignores-mtu figures: 30 KB and 55 KB in 1 s, ~70 % retransmitted.
    fn nic_fault(outcome: Outcome, icmp: u64, pmtu: u32) -> MtuData {
        MtuData {
            server: "203.0.113.10:7224".into(),
            client_observed: Some("100.64.1.2:40000".into()),
            down: Some(down(outcome)),
            bulk_full: Some(run(None, 30_096, 55, 81, icmp, pmtu)),
            bulk_reduced: Some(run(Some(1380), 54_720, 107, 149, icmp, pmtu)),
            server_nic: Some(pathdoc_sys::nic::NicFacts {
                iface: "ens18".into(),
                driver: Some("8139cp".into()),
                mtu: Some(1500),
                tso: Some(true),
                gso: Some(true),
                gro: Some(true),
                machine: "KVM/QEMU guest".into(),
            }),
            ..Default::default()
        }
    }

    fn ids(data: &MtuData) -> Vec<(String, Status)> {
        findings(data)
            .iter()
            .map(|f| (f.id.clone(), f.status))
            .collect()
    }

    #[test]
    fn icmp_arrives_yet_segments_that_fit_are_lost() {
        let data = nic_fault(signalled(), 61, 1420);
        let f = finding(&data).expect("fires");
        assert_eq!(f.status, Status::Fail);
        let text = format!("{} {}", f.title, f.summary);
        assert!(
            text.contains("larger than its TCP stack asked for"),
            "{text}"
        );
        assert!(
            text.contains("driver 8139cp") && text.contains("TSO on") && text.contains("KVM"),
            "{text}"
        );
        let commands: Vec<String> = f
            .remedies
            .iter()
            .filter_map(|r| r.command.clone())
            .collect();
        assert!(
            commands
                .iter()
                .any(|c| c == "ethtool -K ens18 tso off gso off"),
            "{commands:?}"
        );
        assert!(commands
            .iter()
            .any(|c| c.contains("mtu lock 1420") && c.contains("100.64.1.2")));
        assert!(f.remedies.iter().all(|r| r.host != Some(Host::Client)));
        // The downloads are the offload finding's: no "not slowed" PASS beside it.
        let all = ids(&data);
        assert!(
            !all.iter()
                .any(|(id, _)| *id == "bulk-download" || *id == "bulk-download-stall"),
            "{all:?}"
        );
    }

    #[test]
    fn black_hole_first_then_the_nic() {
        let data = nic_fault(
            Outcome::BlackHole {
                mtu: 1420,
                smallest_lost: 1421,
            },
            0,
            1500,
        );
        let all = ids(&data);
        let hole = all
            .iter()
            .position(|(id, _)| *id == "pmtud-black-hole")
            .expect("black hole named");
        let nic = all.iter().position(|(id, _)| *id == ID).expect("nic named");
        assert!(hole < nic, "{all:?}");
        assert_eq!(
            all[hole].1,
            Status::Fail,
            "the black hole is not 'protected' when even small segments crawl"
        );
        let f = finding(&data).unwrap();
        assert!(
            f.summary.starts_with("Fix the PMTUD black hole first"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn healthy_and_other_faults_do_not_fire() {
        // PMTUD works and the reduced download is clean.
        let mut ok = nic_fault(signalled(), 1, 1420);
        ok.bulk_reduced = Some(run(Some(1380), 50_000_000, 0, 36_000, 0, 1420));
        assert!(finding(&ok).is_none());
        // A plain black hole: the reduced-MSS download is fast.
        let mut hole = nic_fault(
            Outcome::BlackHole {
                mtu: 1420,
                smallest_lost: 1421,
            },
            0,
            1500,
        );
        hole.bulk_full = Some(run(None, 0, 3, 3, 0, 1500));
        hole.bulk_reduced = Some(run(Some(1380), 400_000_000, 2, 290_000, 0, 1500));
        assert!(finding(&hole).is_none());
        assert!(ids(&hole).contains(&("bulk-download-stall".to_string(), Status::Fail)));
        // ICMP arrives but no more came during the download: not this fault.
        assert!(finding(&nic_fault(signalled(), 0, 1420)).is_none());
        // The path itself loses small probes: loss, not frame size.
        let mut lossy = nic_fault(signalled(), 61, 1420);
        lossy.down.as_mut().unwrap().probes[2].received = 2;
        assert!(finding(&lossy).is_none());
        // An older server without the counters: no guess.
        let mut old = nic_fault(signalled(), 61, 1420);
        if let Some(s) = old.bulk_reduced.as_mut().unwrap().server.as_mut() {
            s.data_segs_out = None;
        }
        assert!(finding(&old).is_none());
        // No smaller MTU on the path.
        let clean = nic_fault(
            Outcome::Clean {
                mtu: 1500,
                cap: crate::search::SizeCap::SenderInterface,
            },
            61,
            1500,
        );
        assert!(finding(&clean).is_none());
    }
}
