//! Linux kernel access for pathdoc: TCP_INFO, socket options, network namespaces, sysctls.
pub mod netns;
pub mod tcp_info;
pub mod pmtu;
pub mod saved_syn;
pub mod cpu_usage;
