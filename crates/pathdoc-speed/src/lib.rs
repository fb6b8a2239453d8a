//! Throughput check: goodput both ways and what limits it, from TCP_INFO on both ends.
