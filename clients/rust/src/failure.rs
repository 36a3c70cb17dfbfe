//! The text `work_fail` records for a handler's error: its type (when one is known), its
//! message and the messages of its `source()` chain, bounded (clients/README.md, *A worker
//! runner*, step 4).

use std::error::Error as StdError;

/// The most bytes of error text the runner sends to `work_fail`: what the server keeps.
pub(crate) const MAX_ERROR_TEXT: usize = 2048;

/// The most bytes of one line (the error's own, or one cause's).
const MAX_LINE: usize = 1024;

/// The most `source()` links followed (a chain longer than this is cut, as a cycle would be).
const MAX_CHAIN: usize = 32;

/// A handler that panicked, as the error `work_fail` records.
#[derive(Debug, thiserror::Error)]
#[error("handler panicked: {0}")]
pub(crate) struct Panicked(pub(crate) String);

/// The text `work_fail` records for `error`: its `Display`, preceded by its type when one is
/// known (`KeyMissing: no key "invoice"`), then one line `caused by: ...` per error of its
/// `source()` chain, each with its type the same way; a cause whose text the line above already
/// shows is left out. Each line is at most 1024 bytes (cut at a character boundary and ended
/// with `...`), the whole at most [`MAX_ERROR_TEXT`] bytes: the causes farthest from the error
/// are the ones left out, and the text then ends with `[cut: N more lines]`.
pub(crate) fn error_text(error: &(dyn StdError + 'static)) -> String {
    let mut lines = vec![clipped(line(error))];
    let mut above = error.to_string();
    let mut cause = error.source();
    for _ in 0..MAX_CHAIN {
        let Some(e) = cause else {
            break;
        };
        let shown = e.to_string();
        if !above.contains(&shown) {
            lines.push(clipped(format!("caused by: {}", line(e))));
        }
        above = shown;
        cause = e.source();
    }
    joined(&lines, MAX_ERROR_TEXT)
}

/// The first line of [`error_text`]'s text: what the log line `fail .. error=` shows.
pub(crate) fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// `<type>: <Display>`, or the `Display` alone when no type is known.
fn line(error: &(dyn StdError + 'static)) -> String {
    match type_name(error) {
        Some(name) => format!("{name}: {error}"),
        None => error.to_string(),
    }
}

/// The type of `error`, where it can be told from a `dyn Error`: the library's own and a few
/// common ones by downcasting; otherwise the name a derived `Debug` begins with (`KeyMissing {
/// .. }`, `KeyMissing(..)`, a unit `Timeout`: the struct's name, or the enum variant's). `None`
/// for a string turned into an error (`"text".into()`, whose `Debug` is a quoted string), a
/// panic, and a hand-written `Debug` that does not begin with a name.
fn type_name(error: &(dyn StdError + 'static)) -> Option<String> {
    if error.is::<Panicked>() {
        return None;
    }
    if error.is::<crate::Error>() {
        return Some("workfence::Error".to_owned());
    }
    if error.is::<tokio_postgres::Error>() {
        return Some("tokio_postgres::Error".to_owned());
    }
    if let Some(io) = error.downcast_ref::<std::io::Error>() {
        return Some(format!("std::io::Error({:?})", io.kind()));
    }
    if error.is::<serde_json::Error>() {
        return Some("serde_json::Error".to_owned());
    }
    debug_name(&format!("{error:?}"))
}

/// The identifier a derived `Debug` output begins with: an ASCII capital, then letters, digits,
/// `_` or `::`, followed by nothing, `(`, `{` or ` {`.
fn debug_name(debug: &str) -> Option<String> {
    if !debug.starts_with(|c: char| c.is_ascii_uppercase()) {
        return None;
    }
    let end = debug
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(debug.len());
    let (name, rest) = debug.split_at(end);
    let follows =
        rest.is_empty() || rest.starts_with('(') || rest.starts_with('{') || rest.starts_with(" {");
    (follows && !name.ends_with(':')).then(|| name.to_owned())
}

/// `line` cut to at most [`MAX_LINE`] bytes at a character boundary and ended with `...` when
/// it was longer.
fn clipped(line: String) -> String {
    if line.len() <= MAX_LINE {
        return line;
    }
    let mut end = MAX_LINE - "...".len();
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

/// `lines` joined with newlines, as many as fit in `max` bytes (the first always: it is at most
/// [`MAX_LINE`]), then `[cut: N more lines]` when some did not fit.
fn joined(lines: &[String], max: usize) -> String {
    let mut text = String::new();
    for (n, line) in lines.iter().enumerate() {
        let left = lines.len() - n - 1;
        // Room for this line, and for the marker if lines are left after it.
        let marker = if left > 0 {
            format!("\n[cut: {left} more lines]").len()
        } else {
            0
        };
        let sep = usize::from(n > 0);
        if n > 0 && text.len() + sep + line.len() + marker > max {
            text.push_str(&format!("\n[cut: {} more lines]", lines.len() - n));
            return text;
        }
        if n > 0 {
            text.push('\n');
        }
        text.push_str(line);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("no key {0:?}")]
    struct KeyMissing(String);

    #[derive(Debug, thiserror::Error)]
    enum InvoiceError {
        #[error("invoice {id} could not be read")]
        Unreadable {
            id: i64,
            #[source]
            cause: std::io::Error,
        },
        #[error("invoice rejected: {0}")]
        Rejected(#[from] KeyMissing),
    }

    #[test]
    fn a_string_error_is_its_text_alone() {
        let e: Box<dyn StdError + Send + Sync> = "boom 1".into();
        assert_eq!(error_text(&*e), "boom 1");
        let e: Box<dyn StdError + Send + Sync> = String::from("Boom").into();
        assert_eq!(error_text(&*e), "Boom");
        assert_eq!(
            error_text(&Panicked("kaput 2".to_owned())),
            "handler panicked: kaput 2"
        );
    }

    #[test]
    fn the_type_and_the_source_chain_are_kept() {
        assert_eq!(
            error_text(&KeyMissing("invoice".to_owned())),
            r#"KeyMissing: no key "invoice""#
        );
        let e = InvoiceError::Unreadable {
            id: 7,
            cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        };
        assert_eq!(
            error_text(&e),
            "Unreadable: invoice 7 could not be read\n\
             caused by: std::io::Error(NotFound): no such file"
        );
        // A cause the message above already shows is not repeated, but its own cause is.
        let e = InvoiceError::Rejected(KeyMissing("invoice".to_owned()));
        assert_eq!(
            error_text(&e),
            r#"Rejected: invoice rejected: no key "invoice""#
        );
        let e = crate::Error::config("lease", "zero");
        assert_eq!(
            error_text(&e),
            "workfence::Error: invalid setting lease: zero"
        );
    }

    #[test]
    fn a_derived_debug_names_the_type_and_prose_does_not() {
        assert_eq!(
            debug_name("KeyMissing(\"x\")").as_deref(),
            Some("KeyMissing")
        );
        assert_eq!(debug_name("Timeout").as_deref(), Some("Timeout"));
        assert_eq!(debug_name("Bad { at: 1 }").as_deref(), Some("Bad"));
        assert_eq!(debug_name("Failed to connect"), None);
        assert_eq!(debug_name("\"quoted\""), None);
        assert_eq!(debug_name("lower(1)"), None);
        assert_eq!(debug_name("Odd::"), None);
    }

    #[test]
    fn a_line_is_cut_at_1024_bytes_and_the_text_at_2048() {
        let long = "é".repeat(3000); // 6000 bytes
        let e: Box<dyn StdError + Send + Sync> = long.clone().into();
        let text = error_text(&*e);
        assert!(text.len() <= MAX_LINE, "{}", text.len());
        assert!(text.ends_with("..."), "{text}");
        assert!(long.starts_with(text.trim_end_matches("...")));
        assert_eq!(first_line("a\nb"), "a");
        // Twenty causes of 200 bytes: the farthest ones are cut, and counted.
        let lines: Vec<String> = (0..20).map(|n| format!("{n:0>200}")).collect();
        let text = joined(&lines, MAX_ERROR_TEXT);
        assert!(text.len() <= MAX_ERROR_TEXT, "{}", text.len());
        let kept = text.lines().count() - 1;
        assert!(
            text.ends_with(&format!("\n[cut: {} more lines]", 20 - kept)),
            "{text}"
        );
        assert!(kept >= 9, "{kept} lines kept");
        let short = ["a".to_owned(), "b".to_owned()];
        assert_eq!(joined(&short, MAX_ERROR_TEXT), "a\nb");
    }
}
