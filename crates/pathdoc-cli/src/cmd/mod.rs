//! One module per subcommand; each turns its arguments into library calls and returns an exit code.

pub mod analyze;
pub mod check;
pub mod check_idle;
pub mod check_mtu;
pub mod check_speed;
pub mod client;
pub mod docs;
pub mod exporter;
pub mod lab;
pub mod lab_capture;
pub mod lab_delay_line;
pub mod lab_demo_checks;
pub mod report;
pub mod report_capture;
pub mod report_html;
pub mod server;
pub mod server_ssh;
pub mod speed;
pub mod ssh;
