//! What clap knows about a usage error that its one-line form would lose: the "did you mean"
//! suggestion (clap prints it as a tip below the message, which the one-line format cuts), and a
//! negative value such as `--idle-max -5s`, which clap reads as the unknown flag `-5`.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The suggestion clap made for a mistyped subcommand or flag, as " — did you mean `check`?".
pub fn suggestion(e: &clap::Error) -> Option<String> {
    let names = |v: &ContextValue| match v {
        ContextValue::String(s) => vec![s.clone()],
        ContextValue::Strings(s) => s.clone(),
        _ => Vec::new(),
    };
    let mut all: Vec<String> = Vec::new();
    for kind in [ContextKind::SuggestedSubcommand, ContextKind::SuggestedArg] {
        if let Some(v) = e.get(kind) {
            all.extend(names(v));
        }
    }
    if all.is_empty() {
        return None;
    }
    let quoted: Vec<String> = all.iter().map(|s| format!("`{s}`")).collect();
    Some(format!("; did you mean {}?", quoted.join(" or ")))
}

/// `--idle-max -5s`: clap saw `-5` as an unknown flag. Name the option and what it takes.
pub fn negative_value(e: &clap::Error, argv: &[String], command: &clap::Command) -> Option<String> {
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let at = argv.iter().position(|a| {
        a.len() > 1 && a.starts_with('-') && a[1..].starts_with(|c: char| c.is_ascii_digit())
    })?;
    let option = argv.get(at.checked_sub(1)?)?;
    let (long, value_name) = match option.strip_prefix("--") {
        Some(long) => (
            long.to_string(),
            find_value_name(command, &Flag::Long(long))?,
        ),
        None => {
            let mut c = option.strip_prefix('-')?.chars();
            let (Some(short), None) = (c.next(), c.next()) else {
                return None;
            };
            find_long_and_value_name(command, short)?
        }
    };
    let what = if value_name == "DURATION" {
        "a positive duration such as 30s, 10min or 2h10m"
    } else {
        "a positive value"
    };
    Some(format!(
        "invalid value '{}' for '--{long} <{value_name}>': negative values are not accepted; --{long} takes {what}",
        argv[at]
    ))
}

enum Flag<'a> {
    Long(&'a str),
    Short(char),
}

/// The value name of the flag in this command or any subcommand (first match).
fn find_value_name(command: &clap::Command, flag: &Flag<'_>) -> Option<String> {
    find_arg(command, flag).map(|(_, v)| v)
}

fn find_long_and_value_name(command: &clap::Command, short: char) -> Option<(String, String)> {
    find_arg(command, &Flag::Short(short))
}

/// (long name, value name) of a value-taking flag, searching subcommands depth-first.
fn find_arg(command: &clap::Command, flag: &Flag<'_>) -> Option<(String, String)> {
    for arg in command.get_arguments() {
        let hit = match flag {
            Flag::Long(l) => arg.get_long() == Some(*l),
            Flag::Short(c) => arg.get_short() == Some(*c),
        };
        if hit && arg.get_action().takes_values() {
            let value = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| "VALUE".into());
            return Some((arg.get_long()?.to_string(), value));
        }
    }
    command
        .get_subcommands()
        .find_map(|sub| find_arg(sub, flag))
}
