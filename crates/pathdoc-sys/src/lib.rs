//! Linux kernel access for pathdoc: TCP_INFO, socket options, network namespaces, sysctls.
pub mod cpu_usage;
pub mod netns;
pub mod pmtu;
pub mod saved_syn;
pub mod sendq;
pub mod source;
pub mod tcp_info;
