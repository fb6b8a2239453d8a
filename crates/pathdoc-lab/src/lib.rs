//! Network-namespace lab: builds paths with conntrack NAT, nftables filters, MTU, rate, loss and delay.
pub mod delay_line;
