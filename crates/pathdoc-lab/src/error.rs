//! The lab's typed errors: every failure names what was attempted and how to fix it.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while building, using or tearing down a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("pathdoc lab needs root (it creates network namespaces, veth links and nftables rules); run it with sudo")]
    NotRoot,
    #[error(
        "required tool `{tool}` was not found in PATH; install it with `apt-get install {package}`"
    )]
    MissingTool { tool: String, package: String },
    #[error("kernel feature missing: {feature} ({hint})")]
    MissingKernelFeature { feature: String, hint: String },
    #[error("invalid topology: {0}")]
    Topology(String),
    #[error("unknown scenario `{name}`; built-in scenarios: {known}")]
    UnknownScenario { name: String, known: String },
    #[error("unknown host `{host}` in lab `{lab}`; hosts are: {known}")]
    UnknownHost {
        lab: String,
        host: String,
        known: String,
    },
    #[error("invalid lab name or prefix `{value}`: {why}")]
    InvalidName { value: String, why: String },
    #[error("a lab named `{0}` already exists (see `pathdoc lab status`, remove it with `pathdoc lab down {0}`)")]
    NameTaken(String),
    #[error("no lab named `{0}` (see `pathdoc lab status`)")]
    NoSuchLab(String),
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` did not finish within {timeout:?} and was killed")]
    CommandTimeout { command: String, timeout: Duration },
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("lab state file {path}: {message}")]
    State { path: PathBuf, message: String },
    #[error("delay line for link {link} did not start: {message}")]
    DelayLine { link: String, message: String },
    #[error("traffic measurement failed: {0}")]
    Measurement(String),
    #[error(transparent)]
    Netns(#[from] pathdoc_sys::netns::NetnsError),
    #[error(transparent)]
    Sysctl(#[from] pathdoc_sys::netns::SysctlError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl LabError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        LabError::Io {
            context: context.into(),
            source,
        }
    }
}
