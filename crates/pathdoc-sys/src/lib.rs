//! Linux kernel access for pathdoc: TCP_INFO, socket options, network namespaces, sysctls.
pub mod cgroup;
pub mod cpu_usage;
pub mod fd_limit;
pub mod host_info;
pub mod icmp_counters;
pub mod netns;
pub mod nic;
pub mod pmtu;
pub mod process;
pub mod rx_time;
pub mod saved_syn;
pub mod sendq;
pub mod sock_diag;
pub mod source;
pub mod tcp_info;
