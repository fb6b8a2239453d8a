//! What a host's network interface is: the facts `ethtool -i`, `ethtool -k` and
//! `systemd-detect-virt` give, for the interface that owns a local address (the one a connection
//! uses). Driver and offloads come from the SIOCETHTOOL ioctl (ETHTOOL_GDRVINFO, ETHTOOL_GTSO/
//! GGSO/GGRO), the MTU from SIOCGIFMTU, the virtual-machine facts from DMI (/sys/class/dmi/id)
//! and the CPU's `hypervisor` flag. Every fact is optional: an interface without ethtool support
//! or a kernel without DMI just leaves it out.

use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// The facts about one interface and the machine it is in: a plain report type, so it lives in
/// pathdoc-core where the HTML report reads it too.
pub use pathdoc_core::nic::NicFacts;

/// The facts for the interface that owns `local` (a connection's local address), or `None` when
/// no interface has it (e.g. a loopback-only test).
pub fn facts_for_local_addr(local: IpAddr) -> Option<NicFacts> {
    // A dual-stack listener (`[::]`, the server's default) sees IPv4 clients on a v4-mapped local
    // address (::ffff:192.0.2.1), which no interface carries; the interface has the IPv4 one.
    let iface = iface_with_addr(local.to_canonical())?;
    Some(facts_for_iface(&iface))
}

/// The facts for the interface named `iface`.
pub fn facts_for_iface(iface: &str) -> NicFacts {
    let ethtool = Ethtool::open(iface);
    let get = |cmd| ethtool.as_ref().and_then(|e| e.flag(cmd));
    NicFacts {
        iface: iface.to_string(),
        driver: ethtool
            .as_ref()
            .and_then(|e| e.driver())
            .or_else(|| sysfs_driver(iface)),
        mtu: read_trimmed(&format!("/sys/class/net/{iface}/mtu")).and_then(|m| m.parse().ok()),
        tso: get(ETHTOOL_GTSO),
        gso: get(ETHTOOL_GGSO),
        gro: get(ETHTOOL_GGRO),
        machine: machine_kind(
            read_trimmed("/sys/class/dmi/id/sys_vendor").as_deref(),
            read_trimmed("/sys/class/dmi/id/product_name").as_deref(),
            std::fs::read_to_string("/proc/cpuinfo")
                .map(|c| cpuinfo_has_hypervisor_flag(&c))
                .unwrap_or(false),
        ),
    }
}

fn iface_with_addr(local: IpAddr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let Some(storage) = a.address else { continue };
        let matches = match local {
            IpAddr::V4(v4) => storage.as_sockaddr_in().is_some_and(|s| s.ip() == v4),
            IpAddr::V6(v6) => storage.as_sockaddr_in6().is_some_and(|s| s.ip() == v6),
        };
        if matches {
            return Some(a.interface_name);
        }
    }
    None
}

fn read_trimmed(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The driver from /sys/class/net/IF/device/driver (physical and PCI-emulated NICs only).
fn sysfs_driver(iface: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/class/net/{iface}/device/driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// systemd-detect-virt's DMI reading, reduced to the names an admin recognises.
pub fn machine_kind(vendor: Option<&str>, product: Option<&str>, hypervisor_flag: bool) -> String {
    let vendor = vendor.unwrap_or("");
    let product = product.unwrap_or("");
    let has = |s: &str, what: &str| s.to_ascii_lowercase().contains(&what.to_ascii_lowercase());
    let named = if has(product, "KVM") || has(vendor, "QEMU") || has(product, "QEMU") {
        Some("KVM/QEMU guest")
    } else if has(vendor, "VMware") {
        Some("VMware guest")
    } else if has(product, "VirtualBox") || has(vendor, "innotek") {
        Some("VirtualBox guest")
    } else if has(vendor, "Microsoft") && has(product, "Virtual") {
        Some("Hyper-V guest")
    } else if has(vendor, "Xen") {
        Some("Xen guest")
    } else if has(vendor, "Amazon EC2") {
        Some("Amazon EC2 guest")
    } else if has(vendor, "Google") {
        Some("Google Compute Engine guest")
    } else {
        None
    };
    match (named, hypervisor_flag) {
        (Some(n), _) => format!("{n} (DMI: {vendor} {product})").replace(" )", ")"),
        (None, true) => "virtual machine (CPU hypervisor flag)".to_string(),
        (None, false) => "no virtual machine seen".to_string(),
    }
}

fn cpuinfo_has_hypervisor_flag(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_GGRO: u32 = 0x2b;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `struct ifreq` with the `ifr_data` member.
#[repr(C)]
struct IfreqData {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// A datagram socket to send SIOCETHTOOL requests about one interface.
struct Ethtool {
    socket: std::net::UdpSocket,
    name: [u8; libc::IFNAMSIZ],
}

impl Ethtool {
    fn open(iface: &str) -> Option<Ethtool> {
        let bytes = iface.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
            return None;
        }
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..bytes.len()].copy_from_slice(bytes);
        let socket = std::net::UdpSocket::bind("0.0.0.0:0")
            .or_else(|_| std::net::UdpSocket::bind("[::]:0"))
            .ok()?;
        Some(Ethtool { socket, name })
    }

    /// Runs one ethtool command whose buffer starts with its `cmd` word.
    fn request<T>(&self, buffer: &mut T) -> bool {
        let mut req = IfreqData {
            name: self.name,
            data: (buffer as *mut T).cast(),
            _pad: [0; 16],
        };
        // SAFETY: `req` is a valid ifreq whose data pointer refers to `buffer`, a live, correctly
        // laid out ethtool structure for the command written in its first word; the kernel
        // writes at most size_of::<T>() bytes into it.
        let rc = unsafe {
            libc::ioctl(
                self.socket.as_raw_fd(),
                SIOCETHTOOL as _,
                &mut req as *mut IfreqData,
            )
        };
        rc == 0
    }

    fn flag(&self, cmd: u32) -> Option<bool> {
        let mut value = EthtoolValue { cmd, data: 0 };
        self.request(&mut value).then_some(value.data != 0)
    }

    fn driver(&self) -> Option<String> {
        // SAFETY: an all-zero ethtool_drvinfo is a valid value (integers and byte arrays).
        let mut info: EthtoolDrvinfo = unsafe { std::mem::zeroed() };
        info.cmd = ETHTOOL_GDRVINFO;
        if !self.request(&mut info) {
            return None;
        }
        let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
        let driver = String::from_utf8_lossy(&info.driver[..end]).into_owned();
        (!driver.is_empty()).then_some(driver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_machine_like_systemd_detect_virt() {
        assert_eq!(
            machine_kind(
                Some("QEMU"),
                Some("Standard PC (i440FX + PIIX, 1996)"),
                true
            ),
            "KVM/QEMU guest (DMI: QEMU Standard PC (i440FX + PIIX, 1996))"
        );
        assert!(machine_kind(Some("VMware, Inc."), Some("VMware7,1"), true).starts_with("VMware"));
        assert_eq!(
            machine_kind(None, None, true),
            "virtual machine (CPU hypervisor flag)"
        );
        assert_eq!(
            machine_kind(Some("Dell Inc."), Some("PowerEdge R640"), false),
            "no virtual machine seen"
        );
    }

    #[test]
    fn finds_the_hypervisor_flag() {
        assert!(cpuinfo_has_hypervisor_flag(
            "processor : 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"
        ));
        assert!(!cpuinfo_has_hypervisor_flag("flags\t\t: fpu vme\n"));
    }

    #[test]
    fn loopback_has_facts_and_unknown_addresses_none() {
        let lo = facts_for_iface("lo");
        assert_eq!(lo.iface, "lo");
        assert_eq!(lo.mtu, Some(65536));
        // The loopback device answers ETHTOOL_GTSO (software offloads are always on for it).
        assert!(lo.tso.is_some(), "{lo:?}");
        assert!(lo.describe().starts_with("lo: driver"));
        assert!(facts_for_local_addr("127.0.0.1".parse().unwrap()).is_some());
        assert!(facts_for_local_addr("192.0.2.254".parse().unwrap()).is_none());
    }
}
