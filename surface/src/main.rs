//! `workfence-surface`: renders the files generated from `sql/functions.toml`
//! (see the library's doc), or with `--check` fails when one is stale.

use std::path::PathBuf;
use std::process::ExitCode;

use workfence_surface::Surface;

const USAGE: &str = "usage: workfence-surface [--check]
  Renders the regions generated from sql/functions.toml into sql/finalize.sql,
  docs/reference.md, README.md, router/install.sql and docs/operations.md, and the typed
  calls' bindings, harness/src/calls/generated.rs (run from anywhere in the
  repository: cargo run -p workfence-surface). --check writes nothing and
  exits 1 when a file is stale.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => false,
        ["--check"] => true,
        ["--help" | "-h"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // The repository's root: this crate's parent directory.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("surface/ has a parent")
        .to_path_buf();
    let result = Surface::load(&root).and_then(|surface| {
        if check {
            surface.stale(&root)
        } else {
            surface.write(&root)
        }
    });
    match result {
        Ok(files) if check && !files.is_empty() => {
            eprintln!(
                "stale: {} (cargo run -p workfence-surface rewrites them from sql/functions.toml)",
                files.join(", ")
            );
            ExitCode::FAILURE
        }
        Ok(files) => {
            for file in files {
                println!("wrote {file}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("workfence-surface: {error}");
            ExitCode::FAILURE
        }
    }
}
