//! Text from the network or a file made safe for a terminal or a log: control characters (C0,
//! DEL, C1 — ESC starts every terminal escape, so OSC 52 clipboard writes, CSI screen clears and
//! colours all die with it) and the Unicode bidi overrides and isolates that reorder what is
//! shown (Trojan Source, CVE-2021-42574) are written as visible escapes. HTML and JSON output
//! have their own escaping; this is for text and logs.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw.
pub fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if keep(c) || !is_unsafe(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// Text of several lines (a whole rendered report, an error with its hint): every unsafe
/// character escaped except newline and tab.
pub fn terminal_safe(s: &str) -> Cow<'_, str> {
    escape(s, |c| c == '\n' || c == '\t')
}

/// One field of one line (a server's version or message, a name, a report field): newlines,
/// carriage returns and tabs escaped too, so it cannot start a line of its own (a forged
/// "Overall: PASS").
pub fn terminal_safe_line(s: &str) -> Cow<'_, str> {
    escape(s, |_| false)
}

/// [`terminal_safe_line`] of at most `max_chars` characters of `s`, with `…` when cut: for
/// fields a peer chooses the length of (a client's version in the server's log).
pub fn log_field(s: &str, max_chars: usize) -> String {
    let mut cut: String = s.chars().take(max_chars).collect();
    let long = cut.len() < s.len();
    cut = terminal_safe_line(&cut).into_owned();
    if long {
        cut.push('…');
    }
    cut
}

/// Every string in a JSON value (keys too) through [`terminal_safe_line`], except that values
/// of the keys in `multi_line` keep their newlines (through [`terminal_safe`]): how a whole
/// report read from a file is made safe before it is rendered as text (a remedy's `command` is
/// several lines, each of which the renderer indents).
pub fn escape_json_strings(value: &mut serde_json::Value, multi_line: &[&str]) {
    escape_value(value, false, multi_line)
}

fn escape_value(value: &mut serde_json::Value, keep_newlines: bool, multi_line: &[&str]) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let safe = if keep_newlines {
                terminal_safe(s)
            } else {
                terminal_safe_line(s)
            };
            if let Cow::Owned(safe) = safe {
                *s = safe;
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| escape_value(v, keep_newlines, multi_line)),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (k, mut v) in entries {
                escape_value(&mut v, multi_line.contains(&k.as_str()), multi_line);
                map.insert(terminal_safe_line(&k).into_owned(), v);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_and_bidi_but_keeps_ordinary_text() {
        let hostile = "ok\x1b]52;c;cGF5bG9hZA==\x07\x1b[2J\u{9b}31m\u{202e}evil\u{2066}\x7f";
        let safe = terminal_safe(hostile);
        assert_eq!(
            safe,
            "ok\\x1b]52;c;cGF5bG9hZA==\\x07\\x1b[2J\\x9b31m\\u{202e}evil\\u{2066}\\x7f"
        );
        assert!(!safe.chars().any(is_unsafe));
        assert_eq!(
            terminal_safe("a\nb\tc — 10 Mbit/s µs"),
            "a\nb\tc — 10 Mbit/s µs"
        );
        assert!(matches!(terminal_safe("plain"), Cow::Borrowed(_)));
        assert_eq!(
            terminal_safe_line("x\n\rOverall: PASS"),
            "x\\n\\rOverall: PASS"
        );
    }

    #[test]
    fn log_fields_are_cut_and_escaped() {
        let long = "\n\x1b".repeat(40_000);
        let f = log_field(&long, 64);
        assert!(f.len() < 64 * 4 + 4, "{}", f.len());
        assert!(f.ends_with('…') && !f.chars().any(is_unsafe));
        assert_eq!(log_field("pathdoc 0.1.0", 64), "pathdoc 0.1.0");
    }

    #[test]
    fn json_strings_and_keys_are_escaped_in_place() {
        let mut v =
            serde_json::json!({"t\u{1b}": ["a\u{202e}", 1, {"k": "\nx", "command": "a\n\u{1b}b"}]});
        escape_json_strings(&mut v, &["command"]);
        assert_eq!(
            v,
            serde_json::json!({"t\\x1b": ["a\\u{202e}", 1, {"k": "\\nx", "command": "a\n\\x1bb"}]})
        );
    }
}
