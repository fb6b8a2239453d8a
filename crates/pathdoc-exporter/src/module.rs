//! The checks the exporter can run as modules. A [`ModuleKind`] is one check's part here: its
//! name, the settings a `[modules.NAME]` table of it may hold, and how they are read into the
//! [`Check`] the probes and idle monitors run.
//!
//! The exporter keeps no list of kinds: the binary's check registry (pathdoc-cli's `CHECKS`)
//! names each check's kind, or marks it not exported, and passes the kinds to
//! [`Config::parse`](crate::Config::parse). A config naming any other check is refused.

use std::time::Duration;

use pathdoc_core::CheckName;
use pathdoc_idle::defaults as idle_defaults;
use serde::Deserialize;

use crate::config::{opt_duration, Check, MAX_SCRAPE_THROUGHPUT_TIME};

/// One check the exporter can run, and how its module's settings are read.
#[derive(Debug)]
pub struct ModuleKind {
    pub check: CheckName,
    /// The settings its `[modules.NAME]` table may hold besides `check`.
    pub settings: &'static [&'static str],
    read: fn(&RawModule, &Field) -> Result<Check, String>,
}

/// The path-MTU check, once per scrape.
pub static MTU: ModuleKind = ModuleKind {
    check: CheckName::Mtu,
    settings: &[
        "min_size", "max_size", "attempts", "wait", "max_ttl", "bulk",
    ],
    read: read_mtu,
};

/// The throughput check, both directions once per scrape.
pub static THROUGHPUT: ModuleKind = ModuleKind {
    check: CheckName::Throughput,
    settings: &["time", "streams", "congestion_control"],
    read: read_throughput,
};

/// The idle check: hours long, so a background monitor per target; a scrape reads its latest.
pub static IDLE: ModuleKind = ModuleKind {
    check: CheckName::Idle,
    settings: &[
        "idle_max",
        "resolution",
        "max_probes",
        "interval",
        "udp",
        "culprit",
    ],
    read: read_idle,
};

/// A `[modules.NAME]` table as written: every kind's settings, each optional.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModule {
    check: String,
    // mtu
    min_size: Option<u16>,
    max_size: Option<u16>,
    attempts: Option<u8>,
    wait: Option<String>,
    max_ttl: Option<u8>,
    bulk: Option<String>,
    // throughput
    time: Option<String>,
    streams: Option<u32>,
    congestion_control: Option<String>,
    // idle
    idle_max: Option<String>,
    resolution: Option<String>,
    max_probes: Option<usize>,
    interval: Option<String>,
    udp: Option<bool>,
    culprit: Option<bool>,
}

impl RawModule {
    /// Each setting's name and whether the table holds it.
    fn written(&self) -> [(&'static str, bool); 15] {
        [
            ("min_size", self.min_size.is_some()),
            ("max_size", self.max_size.is_some()),
            ("attempts", self.attempts.is_some()),
            ("wait", self.wait.is_some()),
            ("max_ttl", self.max_ttl.is_some()),
            ("bulk", self.bulk.is_some()),
            ("time", self.time.is_some()),
            ("streams", self.streams.is_some()),
            ("congestion_control", self.congestion_control.is_some()),
            ("idle_max", self.idle_max.is_some()),
            ("resolution", self.resolution.is_some()),
            ("max_probes", self.max_probes.is_some()),
            ("interval", self.interval.is_some()),
            ("udp", self.udp.is_some()),
            ("culprit", self.culprit.is_some()),
        ]
    }
}

/// A setting's full name in messages: `modules.NAME.SETTING`.
pub(crate) struct Field<'a> {
    module: &'a str,
}

impl Field<'_> {
    fn name(&self, setting: &str) -> String {
        format!("modules.{}.{setting}", self.module)
    }

    fn duration(&self, setting: &str, text: Option<&str>) -> Result<Option<Duration>, String> {
        opt_duration(&self.name(setting), text)
    }
}

/// Read module `name`: its `check` must be one of `kinds`, its settings that kind's.
pub(crate) fn read(name: &str, m: &RawModule, kinds: &[&ModuleKind]) -> Result<Check, String> {
    let field = Field { module: name };
    let kind = m
        .check
        .parse::<CheckName>()
        .ok()
        .and_then(|c| kinds.iter().find(|k| k.check == c))
        .ok_or_else(|| {
            let known: Vec<String> = kinds.iter().map(|k| k.check.to_string()).collect();
            format!(
                "{}: unknown check {:?} (this exporter runs {})",
                field.name("check"),
                m.check,
                known.join(", ")
            )
        })?;
    if let Some((setting, _)) = m
        .written()
        .iter()
        .find(|(s, written)| *written && !kind.settings.contains(s))
    {
        return Err(format!(
            "{}: not a setting of the {} check",
            field.name(setting),
            m.check
        ));
    }
    (kind.read)(m, &field)
}

fn read_mtu(m: &RawModule, field: &Field) -> Result<Check, String> {
    let defaults = pathdoc_mtu::MtuOptions::default();
    Ok(Check::Mtu {
        min_size: m.min_size.unwrap_or(defaults.min_size),
        max_size: m.max_size.unwrap_or(defaults.max_size),
        attempts: m.attempts.unwrap_or(defaults.attempts),
        wait: field
            .duration("wait", m.wait.as_deref())?
            .unwrap_or(defaults.wait),
        max_ttl: m.max_ttl.unwrap_or(defaults.max_ttl),
        bulk: field
            .duration("bulk", m.bulk.as_deref())?
            .unwrap_or(defaults.bulk),
    })
}

fn read_throughput(m: &RawModule, field: &Field) -> Result<Check, String> {
    let time = field
        .duration("time", m.time.as_deref())?
        .unwrap_or(Duration::from_secs(5));
    if time.is_zero() || time > MAX_SCRAPE_THROUGHPUT_TIME {
        return Err(format!(
            "{}: must be more than 0 and at most {} s",
            field.name("time"),
            MAX_SCRAPE_THROUGHPUT_TIME.as_secs()
        ));
    }
    let streams = m.streams.unwrap_or(1);
    if streams == 0 || streams > pathdoc_speed::spec::MAX_STREAMS {
        return Err(format!(
            "{}: must be 1..={}",
            field.name("streams"),
            pathdoc_speed::spec::MAX_STREAMS
        ));
    }
    Ok(Check::Throughput {
        time,
        streams,
        congestion_control: m.congestion_control.clone(),
    })
}

fn read_idle(m: &RawModule, field: &Field) -> Result<Check, String> {
    let idle_max = field
        .duration("idle_max", m.idle_max.as_deref())?
        .unwrap_or(idle_defaults::HORIZON);
    let resolution = field
        .duration("resolution", m.resolution.as_deref())?
        .unwrap_or(idle_defaults::RESOLUTION);
    let max_probes = m.max_probes.unwrap_or(idle_defaults::MAX_PROBES as usize);
    let bounds =
        idle_defaults::MAX_PROBES_FLOOR as usize..=idle_defaults::MAX_PROBES_CEILING as usize;
    if !bounds.contains(&max_probes) {
        return Err(format!(
            "{}: must be {}..={}",
            field.name("max_probes"),
            bounds.start(),
            bounds.end()
        ));
    }
    Ok(Check::Idle {
        idle_max,
        resolution,
        max_probes,
        interval: field
            .duration("interval", m.interval.as_deref())?
            .unwrap_or(Duration::from_secs(60)),
        udp: m.udp.unwrap_or(true),
        culprit: m.culprit.unwrap_or(true),
    })
}
