//! What every binary of the workspace does with `-h` / `--help`.

/// True, after printing `usage` to stdout, when any command-line argument
/// is `-h` or `--help`: the caller then exits 0 without doing anything else.
///
/// A reader that closes the pipe early (`--help | head -1`, `grep -q`) is
/// not an error: the write's failure is ignored rather than panicking the
/// way `println!` does on EPIPE.
pub fn help_requested(usage: &str) -> bool {
    let asked = std::env::args()
        .skip(1)
        .any(|arg| arg == "-h" || arg == "--help");
    if asked {
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), "{usage}");
    }
    asked
}

/// `error` and each of its sources, joined by `": "`: what a binary prints
/// when it fails (a `postgres::Error` says only "db error" and keeps the
/// server's message as its source).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
