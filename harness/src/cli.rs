//! What every binary of the workspace does with `-h` / `--help`.

/// True, after printing `usage` to stdout, when any command-line argument
/// is `-h` or `--help`: the caller then exits 0 without doing anything else.
pub fn help_requested(usage: &str) -> bool {
    let asked = std::env::args()
        .skip(1)
        .any(|arg| arg == "-h" || arg == "--help");
    if asked {
        println!("{usage}");
    }
    asked
}
