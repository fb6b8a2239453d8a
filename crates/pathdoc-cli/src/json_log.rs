//! `--log-format json`: tracing-subscriber's JSON lines, each led by a `"schema"` field so a log
//! shipper can tell pathdoc's log format and its version like every other pathdoc document
//! (docs/output.md, docs/server.md).

use std::fmt::Write as _;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// The schema of every JSON log line; fields are only added within it.
pub const LOG_SCHEMA: &str = "pathdoc.log/1";

/// Wraps a JSON event format and puts `"schema": LOG_SCHEMA` first in each object.
pub struct WithSchema<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for WithSchema<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&with_schema(&line))
    }
}

/// `{"a":1}` → `{"schema":"pathdoc.log/1","a":1}`; anything that is not an object stays as is.
fn with_schema(line: &str) -> String {
    let Some(rest) = line.strip_prefix('{') else {
        return line.to_string();
    };
    let mut out = format!("{{\"schema\":\"{LOG_SCHEMA}\"");
    if !rest.trim_start().starts_with('}') {
        out.push(',');
    }
    let _ = write!(out, "{rest}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_leads_every_object() {
        let v: serde_json::Value =
            serde_json::from_str(&with_schema("{\"level\":\"INFO\",\"message\":\"x\"}\n")).unwrap();
        assert_eq!(v["schema"], LOG_SCHEMA);
        assert_eq!(v["level"], "INFO");
        let empty: serde_json::Value = serde_json::from_str(&with_schema("{}\n")).unwrap();
        assert_eq!(empty["schema"], LOG_SCHEMA);
        assert_eq!(with_schema("not json\n"), "not json\n");
    }
}
