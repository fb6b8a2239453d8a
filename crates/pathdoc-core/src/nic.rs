//! What a host's network interface is — driver, offloads, MTU, virtual machine — as the MTU
//! check reports it for both ends (`data.mtu.server_nic`, `data.mtu.client_nic`). Read from the
//! kernel by `pathdoc_sys::nic`; shown by the MTU finding and the HTML report's path table.

use serde::{Deserialize, Serialize};

/// The facts about one interface and the machine it is in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NicFacts {
    /// Interface name (`eth0`, `ens18`).
    pub iface: String,
    /// Kernel driver (`ethtool -i`): `virtio_net`, `8139cp`, `e1000`, `veth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// TCP segmentation offload (`ethtool -k`: tcp-segmentation-offload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tso: Option<bool>,
    /// Generic segmentation offload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gso: Option<bool>,
    /// Generic receive offload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gro: Option<bool>,
    /// What kind of machine this is: `KVM/QEMU guest`, `VMware guest`, `virtual machine`, or
    /// `no virtual machine seen`.
    #[serde(default)]
    pub machine: String,
}

impl NicFacts {
    /// One line as an admin would say it: "ens18: driver 8139cp, MTU 1500 B, TSO on, GSO on,
    /// GRO on; KVM/QEMU guest".
    pub fn describe(&self) -> String {
        let on_off = |v: Option<bool>| match v {
            Some(true) => "on",
            Some(false) => "off",
            None => "unknown",
        };
        let mut parts = vec![format!(
            "driver {}",
            self.driver.as_deref().unwrap_or("unknown")
        )];
        if let Some(m) = self.mtu {
            parts.push(format!("MTU {m} B"));
        }
        parts.push(format!("TSO {}", on_off(self.tso)));
        parts.push(format!("GSO {}", on_off(self.gso)));
        parts.push(format!("GRO {}", on_off(self.gro)));
        format!("{}: {}; {}", self.iface, parts.join(", "), self.machine)
    }

    /// Whether the kernel hands this interface TCP super-segments to cut (TSO or GSO on).
    pub fn segments_in_offload(&self) -> bool {
        self.tso == Some(true) || self.gso == Some(true)
    }
}
