//! Small helpers every test crate of the workspace shares (the harness's
//! own `tests/`, the dashboard's `ui/tests/`): an unwrap that shows the
//! server's message, and the SQL blocks of the documentation, run as they
//! are written.

use std::error::Error;

/// Unwraps, or panics with `what`, the error and its chain of sources (a
/// `postgres::Error` says only "db error"; its source has the server's
/// message; a missing extension's error says how to install it).
pub fn ok<T, E: Error>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {}", crate::cli::error_chain(&e)))
}

/// The SQL of the one ```sql block between `<!-- {marker}:begin -->` and
/// `<!-- {marker}:end -->` in `doc` (the text of `file`): the tests run the
/// documentation's SQL itself, so the two cannot drift apart. Panics, naming
/// `file`, when the markers or the block are missing.
pub fn doc_sql_block(doc: &'static str, file: &str, marker: &str) -> &'static str {
    let begin = format!("<!-- {marker}:begin -->");
    let end = format!("<!-- {marker}:end -->");
    let start = doc
        .find(&begin)
        .unwrap_or_else(|| panic!("{file} has no {begin}"))
        + begin.len();
    let length = doc[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("{file} has no {end}"));
    doc[start..start + length]
        .trim()
        .strip_prefix("```sql")
        .and_then(|block| block.strip_suffix("```"))
        .unwrap_or_else(|| panic!("{begin} in {file} must enclose exactly one ```sql block"))
}
