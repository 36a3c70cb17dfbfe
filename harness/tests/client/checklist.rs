//! The checklist of a SQL function, and one source per fact.
//!
//! Every function of the extension (read from the catalog of a database
//! where this checkout's build is installed, and from the `#[pg_extern]`s of
//! `src/`) must have:
//! - an entry in `sql/functions.toml`, the table of the SQL surface, with
//!   the catalog's arguments and result (so a section in `docs/reference.md`,
//!   a row in the README's index, a `COMMENT ON FUNCTION`, its group
//!   role's `GRANT EXECUTE` in `docs/operations.md`, which
//!   `harness/tests/client/privileges.rs` runs, and its typed binding in
//!   `harness/src/calls/generated.rs`, which the calls of
//!   `harness/src/calls.rs` wrap, generated from it and checked current
//!   here);
//! - a section in `docs/contract.md`.
//!
//! Its bad input needs nothing here: `harness/tests/client/bad_input.rs`
//! calls every function of `sql/functions.toml`, and fails on an argument
//! name it has no bad values for.
//!
//! The source of a function's facts is its `COMMENT ON FUNCTION` text
//! (the table's `comment`; what `\df+` shows). The reference section (the
//! table's `doc`), the `docs/contract.md` section and the Rust doc comment of
//! the `#[pg_extern]` must agree with it: the heading's arguments are the
//! catalog's (casts dropped), the set of SQLSTATEs each names is the
//! comment's, and every limit the comment states (`1..1000`, `7 days`,
//! `128 bytes`) appears in both sections. CONTRIBUTING.md, "Adding a SQL
//! function", walks through it.
//!
//! And no stale words (issue 30): no planned section of a guide names a
//! function the catalog has, no sentence of a guide says a function the
//! catalog has is planned or missing, and every link to a section finds its
//! heading. The exact rules are written above their tests, at the end.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use common::{ok, repo_root, shared_cluster};

fn read(relative: &str) -> String {
    ok(
        std::fs::read_to_string(repo_root().join(relative)),
        relative,
    )
}

/// One function as the catalog describes it.
#[derive(Debug)]
struct Function {
    name: String,
    /// `pg_get_function_arguments`, casts dropped.
    arguments: String,
    /// `pg_get_function_result`.
    result: String,
    /// `COMMENT ON FUNCTION`.
    comment: String,
}

/// The public functions of the installed extension: every function of
/// schema `workfence` but the trigger function (`items_sequence_floor`) and
/// the old signatures an update keeps under another name until the
/// next one (`work_claim_retired_0_1_0`, `work_enqueue_retired_0_5_0`).
fn catalog() -> &'static [Function] {
    static CATALOG: OnceLock<Vec<Function>> = OnceLock::new();
    CATALOG.get_or_init(read_catalog)
}

fn read_catalog() -> Vec<Function> {
    let cluster = shared_cluster();
    ok(cluster.create_database("checklist"), "create database");
    let mut c = ok(cluster.connect_to("checklist"), "connect");
    let rows = ok(
        c.query(
            r"SELECT p.proname::text,
                     pg_catalog.pg_get_function_arguments(p.oid),
                     pg_catalog.pg_get_function_result(p.oid),
                     coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), '')
                FROM pg_catalog.pg_proc AS p
                JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
               WHERE n.nspname = 'workfence'
                 AND p.prorettype <> 'pg_catalog.trigger'::pg_catalog.regtype
                 AND p.proname NOT LIKE '%\_retired\_%'
               ORDER BY 1, 2",
            &[],
        ),
        "the extension's functions",
    );
    rows.iter()
        .map(|r| Function {
            name: r.get(0),
            arguments: drop_casts(r.get(1)),
            result: r.get(2),
            comment: r.get(3),
        })
        .collect()
}

/// `a jsonb DEFAULT '{}'::jsonb, b text DEFAULT NULL::text` →
/// `a jsonb DEFAULT '{}', b text DEFAULT NULL`.
fn drop_casts(arguments: &str) -> String {
    arguments
        .split(", ")
        .map(|arg| arg.split("::").next().unwrap_or(arg))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `#[pg_extern]` functions of `src/` that define SQL (not `sql = false`):
/// SQL name → the `///` doc comments above the attribute, one per overload.
fn pg_externs() -> BTreeMap<String, Vec<String>> {
    let mut found = BTreeMap::new();
    for (_, text) in common::extension_sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.starts_with("#[pg_extern") {
                continue;
            }
            let end = (i..lines.len())
                .find(|&k| lines[k].trim_end().ends_with(")]") || lines[k] == "#[pg_extern]")
                .unwrap_or(i);
            let attribute = lines[i..=end].join(" ");
            if attribute.contains("sql = false") {
                continue;
            }
            let fn_name = lines[end + 1..]
                .iter()
                .find_map(|l| l.split("fn ").nth(1))
                .and_then(|f| f.split(['(', '<']).next())
                .map(str::trim);
            let sql_name = attribute
                .split("name = \"")
                .nth(1)
                .and_then(|n| n.split('"').next());
            let Some(name) = sql_name.or(fn_name) else {
                continue;
            };
            let doc: Vec<&str> = lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("///"))
                .map(|l| l.trim_start_matches('/'))
                .collect();
            let doc: Vec<&str> = doc.into_iter().rev().collect();
            found
                .entry(name.to_owned())
                .or_insert_with(Vec::new)
                .push(doc.join("\n"));
        }
    }
    found
}

/// The section of markdown `doc` whose heading starts with ``### `{name}(``,
/// up to the next heading, keyed by the heading's arguments (overloads have
/// one section each).
fn sections(doc: &str, name: &str) -> BTreeMap<String, String> {
    let prefix = format!("### `{name}(");
    let mut found = BTreeMap::new();
    let lines: Vec<&str> = doc.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(heading) = line.strip_prefix(&prefix) else {
            continue;
        };
        let arguments = up_to_closing_paren(heading).to_owned();
        let body: Vec<&str> = lines[i..]
            .iter()
            .enumerate()
            .take_while(|(j, l)| *j == 0 || !l.starts_with('#'))
            .map(|(_, l)| *l)
            .collect();
        found.insert(arguments, body.join("\n"));
    }
    found
}

/// `text` up to the `)` that closes a `(` just before it.
fn up_to_closing_paren(text: &str) -> &str {
    let mut depth = 1;
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[..at];
                }
            }
            _ => {}
        }
    }
    text
}

/// SQLSTATE classes the extension raises or documents.
const CLASSES: &[&str] = &[
    "08", "0A", "22", "23", "25", "40", "42", "53", "54", "55", "57", "XX",
];

/// The SQLSTATEs named in `text`: five-character words of a known class.
fn sqlstates(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| {
            w.len() == 5
                && w.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
                && CLASSES.iter().any(|class| w.starts_with(class))
                && w.chars().skip(2).any(|c| c.is_ascii_digit())
        })
        .map(str::to_owned)
        .collect()
}

/// Units a limit is stated in.
const UNITS: &[&str] = &[
    "bytes", "byte", "days", "day", "hours", "hour", "minutes", "minute", "seconds", "second",
    "entries", "items",
];

/// The limits stated in `text`: ranges `a..b` of whole numbers, and a whole
/// number followed by a unit (`7 days`, `128 bytes`).
fn limits(text: &str) -> BTreeSet<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ',' | ';' | '[' | ']'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut found = BTreeSet::new();
    for (i, word) in words.iter().enumerate() {
        let word = word.trim_end_matches(['.', ':']);
        if let Some((low, high)) = word.split_once("..") {
            if is_number(low) && is_number(high) {
                found.insert(word.to_owned());
            }
        } else if is_number(word) {
            if let Some(unit) = words.get(i + 1) {
                let unit = unit.trim_end_matches(['.', ':']);
                if UNITS.contains(&unit) {
                    found.insert(format!("{word} {unit}"));
                }
            }
        }
    }
    found
}

fn is_number(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| c.is_ascii_digit())
}

#[test]
fn every_function_has_its_call_and_docs() {
    let functions = catalog();
    let names: BTreeSet<String> = functions.iter().map(|f| f.name.clone()).collect();
    assert!(names.contains("work_claim"), "the catalog lists {names:?}");
    assert_eq!(
        pg_externs().into_keys().collect::<BTreeSet<_>>(),
        names,
        "the #[pg_extern]s of src/ and the installed functions differ: is this \
         checkout's build installed (scripts/test.sh installs it)?"
    );

    let bindings = read("harness/src/calls/generated.rs");
    let reference = read("docs/reference.md");
    let contract = read("docs/contract.md");
    let mut missing = Vec::new();
    for name in &names {
        let mut need = |ok: bool, what: &str| {
            if !ok {
                missing.push(format!("{name}: {what}"));
            }
        };
        // The bindings are generated from the table, so this holds when the
        // function is in the table and the file is current (the test below).
        need(
            bindings.contains(&format!("workfence.{name}(")),
            "a typed binding in harness/src/calls/generated.rs (its [[function]] in \
             sql/functions.toml, then `cargo run -p workfence-surface`)",
        );
        need(
            !sections(&reference, name).is_empty(),
            "a [[function]] in sql/functions.toml (its docs/reference.md section)",
        );
        need(
            !sections(&contract, name).is_empty(),
            "a ### section in docs/contract.md",
        );
    }
    assert!(
        missing.is_empty(),
        "a SQL function is not finished (see CONTRIBUTING.md, \"Adding a SQL function\"):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_reference_the_contract_and_the_rust_docs_agree_with_each_functions_comment() {
    let reference = read("docs/reference.md");
    let contract = read("docs/contract.md");
    let rust_docs = pg_externs();
    let mut disagreements = Vec::new();
    for function in catalog() {
        let name = &function.name;
        assert!(
            !function.comment.is_empty(),
            "{name}({}) has no COMMENT ON FUNCTION",
            function.arguments
        );
        let states = sqlstates(&function.comment);
        let stated_limits = limits(&function.comment);
        for (doc_name, doc) in [
            ("docs/reference.md", &reference),
            ("docs/contract.md", &contract),
        ] {
            let Some(section) = sections(doc, name).remove(&function.arguments) else {
                disagreements.push(format!(
                    "{doc_name}: no heading ### `{name}({})` (the catalog's arguments)",
                    function.arguments
                ));
                continue;
            };
            let documented = sqlstates(&section);
            if documented != states {
                disagreements.push(format!(
                    "{doc_name}, {name}: SQLSTATEs {documented:?}, the COMMENT says {states:?}"
                ));
            }
            for limit in &stated_limits {
                if !section.contains(limit.as_str()) {
                    disagreements.push(format!(
                        "{doc_name}, {name}: the limit {limit:?} of the COMMENT is not stated"
                    ));
                }
            }
        }
        // Overloads each have their doc: one of them must name exactly the
        // SQLSTATEs of this overload's COMMENT.
        let docs = rust_docs.get(name).cloned().unwrap_or_default();
        if docs.iter().all(String::is_empty) {
            disagreements.push(format!(
                "src/: no doc comment on the #[pg_extern] of {name}"
            ));
        } else if !docs.iter().any(|doc| sqlstates(doc) == states) {
            let documented: Vec<_> = docs.iter().map(|doc| sqlstates(doc)).collect();
            disagreements.push(format!(
                "src/ doc of {name}: SQLSTATEs {documented:?}, the COMMENT of ({}) says {states:?}",
                function.arguments
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "the docs disagree with the COMMENT ON FUNCTION texts (the `comment` of each \
         function's row in sql/functions.toml, the one source of its facts):\n  {}",
        disagreements.join("\n  ")
    );
}

/// The table of the SQL surface is the installed extension's: the same
/// functions with the same arguments, results and comments, and every file
/// generated from it is current (`cargo run -p workfence-surface`).
#[test]
fn the_surface_table_is_the_catalog_and_its_generated_files_are_current() {
    let root = repo_root();
    let surface = ok(
        workfence_surface::Surface::load(&root),
        "sql/functions.toml",
    );
    let table: BTreeSet<(String, String, String, String)> = surface
        .functions
        .iter()
        .map(|f| {
            let (name, arguments, returns) = (&f.name, &f.arguments, &f.returns);
            let comment = &f.comment;
            (
                name.clone(),
                arguments.clone(),
                returns.clone(),
                comment.clone(),
            )
        })
        .collect();
    let installed: BTreeSet<(String, String, String, String)> = catalog()
        .iter()
        .map(|f| {
            let (name, arguments, result) = (&f.name, &f.arguments, &f.result);
            (
                name.clone(),
                arguments.clone(),
                result.clone(),
                f.comment.clone(),
            )
        })
        .collect();
    let only_table: Vec<_> = table.difference(&installed).collect();
    let only_catalog: Vec<_> = installed.difference(&table).collect();
    assert!(
        only_table.is_empty() && only_catalog.is_empty(),
        "sql/functions.toml and the installed catalog differ (name, arguments, result, \
         comment):\n  only in the table: {only_table:#?}\n  only installed: {only_catalog:#?}\n\
         (is this checkout's build installed? scripts/install-build.sh 15)"
    );
    let stale = ok(surface.stale(&root), "the generated files");
    assert!(
        stale.is_empty(),
        "stale: {stale:?}; run `cargo run -p workfence-surface` to render them from \
         sql/functions.toml (and edit the table, not them)"
    );
}

/// The install script of this build as pgrx generated it, without the lines
/// that give a statement's place in the source (`-- src/lib.rs:78`), which
/// move with every edit.
fn without_source_lines(script: &str) -> String {
    script
        .lines()
        .filter(|line| {
            let Some(place) = line.strip_prefix("-- ") else {
                return true;
            };
            let Some((path, number)) = place.rsplit_once(':') else {
                return true;
            };
            let is_source = (path.ends_with(".rs") || path.ends_with(".sql"))
                && !path.contains(' ')
                && !number.is_empty()
                && number.bytes().all(|b| b.is_ascii_digit());
            !is_source
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The install script is committed (`sql/generated/pg_workfence.sql`), so a
/// change's SQL shows in its diff: it must be the one the installed build
/// generated (source places left out). `WORKFENCE_UPDATE_INSTALL_SCRIPT=1`
/// rewrites it from the installed build.
#[test]
fn the_committed_install_script_is_the_installed_builds() {
    let manifest = read("Cargo.toml");
    let version = manifest
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("Cargo.toml has a version line");
    let pg_config = workfence_harness::pg_config();
    let sharedir = ok(
        std::process::Command::new(&pg_config)
            .arg("--sharedir")
            .output(),
        "pg_config --sharedir",
    );
    let sharedir = String::from_utf8_lossy(&sharedir.stdout).trim().to_string();
    let installed_path = format!("{sharedir}/extension/pg_workfence--{version}.sql");
    let installed = without_source_lines(&ok(
        std::fs::read_to_string(&installed_path),
        &installed_path,
    ));
    let committed_path = repo_root().join("sql/generated/pg_workfence.sql");
    if std::env::var_os("WORKFENCE_UPDATE_INSTALL_SCRIPT").is_some() {
        ok(
            std::fs::write(&committed_path, &installed),
            "writing sql/generated/pg_workfence.sql",
        );
        return;
    }
    let committed = read("sql/generated/pg_workfence.sql");
    if committed != installed {
        let first = committed
            .lines()
            .zip(installed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(installed.lines().count()));
        panic!(
            "sql/generated/pg_workfence.sql is not the install script of the installed build \
             ({installed_path}); they part at line {}:\n  committed: {:?}\n  installed: {:?}\n\
             After scripts/install-build.sh 15, WORKFENCE_UPDATE_INSTALL_SCRIPT=1 cargo test -p \
             workfence-harness --release --test client -- checklist:: rewrites it; commit it with the change.",
            first + 1,
            committed.lines().nth(first),
            installed.lines().nth(first),
        );
    }
}

#[test]
fn source_places_are_left_out_of_the_committed_script_and_nothing_else() {
    let script = "-- src/lib.rs:78\n-- bootstrap\n-- see sql/x.sql: the rest\nCREATE TABLE t ();\n";
    assert_eq!(
        without_source_lines(script),
        "-- bootstrap\n-- see sql/x.sql: the rest\nCREATE TABLE t ();\n"
    );
}

#[test]
fn the_fact_readers_find_what_they_look_for() {
    assert_eq!(
        sqlstates("Errors: 22004 NULL argument, 22023 bad owner; 25P01 outside; 10000 items"),
        ["22004", "22023", "25P01"].map(String::from).into()
    );
    assert_eq!(
        limits("max_items (1..1000), lease not in (0, 7 days], 2^n/2..2^n s, at most 128 bytes."),
        ["1..1000", "7 days", "128 bytes"].map(String::from).into()
    );
    assert_eq!(
        drop_casts("queue text, payload jsonb DEFAULT '{}'::jsonb, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone"),
        "queue text, payload jsonb DEFAULT '{}', run_at timestamp with time zone DEFAULT NULL"
    );
    let doc =
        "# T\n### `f(a int) → TABLE(x int)`\nraises 22023\n### `f(b text) → y`\n55000\n## next";
    let found = sections(doc, "f");
    assert_eq!(found.len(), 2);
    assert!(found["a int"].contains("22023") && !found["a int"].contains("55000"));
}

// ---------------------------------------------------------------------------
// Stale words: what the guides say is planned or missing, against the catalog.
//
// The rules, each a test below:
// (a) A *planned section* is a heading (of any level, outside code blocks)
//     that contains the word "planned", in any case (docs/contract.md's
//     convention: `## Planned: <topic> (issue N)`), and every line up to the
//     next heading of its level or a higher one. No planned section of any
//     guide may name a shipped function. A shipped function is one of the
//     catalog's (`catalog()`: schema `workfence`, no `*_retired_*`, no
//     trigger function); it is named where its name occurs as a whole word
//     (`work_items` does not name `work_item`), except in a signature,
//     `name(arg type, ...)` (every listed argument a name and a type, `...`
//     allowed), that lists an argument no overload of `name` has: that plans
//     a new argument of a built function, which is fine until it ships.
// (b) No sentence of a guide outside its planned sections both names a
//     shipped function and says it is not there, with one of `NOT_THERE`'s
//     phrases or "has no / there is no ... function"; and no sentence says
//     "has no / there is no ... function" without a code span between "no"
//     and "function" naming the function (a denial the catalog cannot be
//     checked against). Phrases are matched in the sentence's prose only:
//     code spans and quoted text ("function workfence.work_claim(unknown,
//     unknown, smallint) does not exist", the server's words) left out.
//     "does not exist" and "not yet" are not on the list: the guides use
//     them for tokens, items and databases ("a token that ... does not
//     exist yet", "not yet due").
// (c) Every link to an anchor (`](#x)`, `](file.md#x)`) in a guide names a
//     heading of the file it points to (GitHub's anchors: the heading's text
//     lowercased, all but letters, digits, `_`, `-` and spaces dropped,
//     spaces made `-`; `-1`, `-2` ... for repeated headings), so a contents
//     line cannot point at a section that moved (docs/contract.md's
//     `#planned-flow-control-issue-17` after flow control shipped).
// ---------------------------------------------------------------------------

/// The guides: every page a user or a contributor reads.
fn guides() -> Vec<(String, String)> {
    let mut names: Vec<String> = [
        "README.md",
        "CONTRIBUTING.md",
        "clients/README.md",
        "ui/README.md",
    ]
    .map(String::from)
    .into();
    let mut docs: Vec<String> = ok(std::fs::read_dir(repo_root().join("docs")), "docs/")
        .map(|entry| {
            ok(entry, "docs/")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|name| {
            let text = read(&name);
            (name, text)
        })
        .collect()
}

/// Shipped function → the argument names of all its overloads.
type Shipped = BTreeMap<String, BTreeSet<String>>;

/// The catalog's functions and their argument names.
fn shipped() -> Shipped {
    let mut found = Shipped::new();
    for function in catalog() {
        let names = found.entry(function.name.clone()).or_default();
        for argument in function.arguments.split(", ") {
            let mut words = argument.split_whitespace();
            let first = words.next().unwrap_or_default();
            let name = if matches!(first, "IN" | "INOUT" | "VARIADIC") {
                words.next().unwrap_or_default()
            } else {
                first
            };
            if !name.is_empty() {
                names.insert(name.to_owned());
            }
        }
    }
    // An empty catalog would let the rules that read it pass on nothing.
    assert!(
        found.len() >= 20,
        "the catalog lists {} functions: not a fresh install",
        found.len()
    );
    found
}

fn is_identifier_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_identifier(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && word.chars().all(is_identifier_char)
}

/// The lines of `doc` that are prose or headings, with their line numbers
/// (from 1): fenced code blocks and HTML comments left out.
fn prose_lines(doc: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut fenced = false;
    let mut comment = false;
    for (i, line) in doc.lines().enumerate() {
        let trimmed = line.trim_start();
        if comment {
            comment = !line.contains("-->");
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if trimmed.starts_with("<!--") {
            comment = !trimmed.contains("-->");
            continue;
        }
        lines.push((i + 1, line));
    }
    lines
}

/// `(level, text)` of a heading line.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    (level > 0 && line[level..].starts_with(' ')).then(|| (level, line[level..].trim()))
}

/// Whether `text` has `word` as a whole word (any case).
fn has_word(text: &str, word: &str) -> bool {
    let text = text.to_lowercase();
    text.match_indices(word).any(|(at, _)| {
        !text[..at].ends_with(|c: char| is_identifier_char(c) || c == '-')
            && !text[at + word.len()..].starts_with(is_identifier_char)
    })
}

/// Which lines of `doc` (numbers from 1) belong to a planned section (see
/// the rules above), the heading's line included: line → that heading.
fn planned_lines(doc: &str) -> BTreeMap<usize, String> {
    let mut found = BTreeMap::new();
    let mut open: Option<(usize, String)> = None;
    for (number, line) in prose_lines(doc) {
        if let Some((level, text)) = heading(line) {
            if open.as_ref().is_some_and(|(at, _)| level <= *at) {
                open = None;
            }
            if open.is_none() && has_word(text, "planned") {
                open = Some((level, line.to_owned()));
            }
        }
        if let Some((_, heading)) = &open {
            found.insert(number, heading.clone());
        }
    }
    found
}

/// The shipped functions `text` names (see the rules above).
fn shipped_named(text: &str, shipped: &Shipped) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (name, arguments) in shipped {
        for (at, _) in text.match_indices(name.as_str()) {
            let after = &text[at + name.len()..];
            if text[..at].ends_with(is_identifier_char) || after.starts_with(is_identifier_char) {
                continue;
            }
            if let Some(listed) = after.strip_prefix('(') {
                let listed = up_to_closing_paren(listed);
                if plans_a_new_argument(listed, arguments) {
                    continue;
                }
            }
            named.insert(name.clone());
        }
    }
    named
}

/// Whether `listed` (what a `name(...)` lists) is a signature (each item a
/// name and a type, or `...`) with an argument name outside `arguments`.
fn plans_a_new_argument(listed: &str, arguments: &BTreeSet<String>) -> bool {
    let items: Vec<&str> = listed
        .split(',')
        .map(str::trim)
        .filter(|item| *item != "...")
        .collect();
    let signature = !items.is_empty()
        && items.iter().all(|item| {
            let mut words = item.split_whitespace();
            let name = words.next().unwrap_or_default();
            let kind = words.next().unwrap_or_default();
            !item.contains("=>")
                && is_identifier(name)
                && kind.starts_with(|c: char| c.is_ascii_alphabetic())
        });
    signature
        && items.iter().any(|item| {
            let name = item.split_whitespace().next().unwrap_or_default();
            !arguments.contains(name)
        })
}

/// The sentences of `doc` outside its planned sections, each with the line
/// it starts on. A paragraph, a list item, a table row and a heading are
/// each split at a `.`, `!` or `?` (outside a code span) followed by a space
/// and a capital letter, a backtick, `*` or `[`.
fn sentences(doc: &str) -> Vec<(usize, String)> {
    let planned = planned_lines(doc);
    let mut blocks: Vec<(usize, String)> = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut last = 0;
    for (number, line) in prose_lines(doc) {
        let trimmed = line.trim();
        let starts_block = number != last + 1
            || trimmed.is_empty()
            || trimmed.starts_with('#')
            || trimmed.starts_with('|')
            || trimmed.starts_with("- ")
            || trimmed.starts_with("* ")
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        last = number;
        if starts_block {
            blocks.extend(current.take());
        }
        if trimmed.is_empty() || planned.contains_key(&number) {
            continue;
        }
        match &mut current {
            Some((_, text)) => {
                text.push(' ');
                text.push_str(trimmed);
            }
            None => current = Some((number, trimmed.to_owned())),
        }
        if trimmed.starts_with('#') || trimmed.starts_with('|') {
            blocks.extend(current.take());
        }
    }
    blocks.extend(current);

    let mut found = Vec::new();
    for (number, block) in blocks {
        let chars: Vec<(usize, char)> = block.char_indices().collect();
        let mut start = 0;
        let mut in_code = false;
        for (k, &(at, c)) in chars.iter().enumerate() {
            if c == '`' {
                in_code = !in_code;
            }
            let ends = !in_code
                && matches!(c, '.' | '!' | '?')
                && chars.get(k + 1).is_some_and(|&(_, n)| n == ' ')
                && chars
                    .get(k + 2)
                    .is_some_and(|&(_, n)| n.is_uppercase() || matches!(n, '`' | '*' | '['));
            if ends {
                found.push((number, block[start..=at].trim().to_owned()));
                start = at + 1;
            }
        }
        let rest = block[start..].trim();
        if !rest.is_empty() {
            found.push((number, rest.to_owned()));
        }
    }
    found
}

/// The words of `sentence`'s prose, lowercased: each code span is the one
/// word `CODE`, quoted text ("...", “...”) is left out, emphasis marks dropped.
fn prose_words(sentence: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut in_code = false;
    let mut in_quote = false;
    for c in sentence.chars() {
        match c {
            '`' => {
                if !in_code {
                    prose.push_str(" CODE ");
                }
                in_code = !in_code;
            }
            _ if in_code => {}
            '"' => in_quote = !in_quote,
            '“' => in_quote = true,
            '”' => in_quote = false,
            _ if in_quote => {}
            '*' => {}
            c => prose.push(c),
        }
    }
    prose
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '\'')))
        .filter(|w| !w.is_empty())
        .map(|w| {
            if w == "CODE" {
                w.to_owned()
            } else {
                w.to_lowercase()
            }
        })
        .collect()
}

/// Phrases that say a function is not there (yet), matched as whole words.
const NOT_THERE: &[&str] = &[
    "planned",
    "not built",
    "not yet built",
    "will add",
    "will be added",
    "coming release",
    "coming releases",
    "later release",
    "future release",
];

/// What a sentence's prose says about a function's absence.
#[derive(Debug, PartialEq)]
enum Denial {
    /// One of `NOT_THERE`'s phrases.
    Phrase(&'static str),
    /// "has no / there is no ... function", naming it in a code span.
    NoFunction,
    /// The same, naming no function.
    NoUnnamedFunction,
}

fn denial(words: &[String]) -> Option<Denial> {
    for phrase in NOT_THERE {
        let phrase_words: Vec<&str> = phrase.split(' ').collect();
        if words
            .windows(phrase_words.len())
            .any(|w| w.iter().zip(&phrase_words).all(|(a, b)| a == b))
        {
            return Some(Denial::Phrase(phrase));
        }
    }
    for (i, word) in words.iter().enumerate() {
        let denies = word == "no"
            && i > 0
            && matches!(
                words[i - 1].as_str(),
                "has" | "have" | "is" | "are" | "there's"
            );
        if !denies {
            continue;
        }
        let window = &words[i + 1..words.len().min(i + 5)];
        if let Some(end) = window
            .iter()
            .position(|w| w == "function" || w == "functions")
        {
            return Some(if window[..end].iter().any(|w| w == "CODE") {
                Denial::NoFunction
            } else {
                Denial::NoUnnamedFunction
            });
        }
    }
    None
}

/// Rule (a) over one guide: `file:line: ...` for each shipped function a
/// planned section names.
fn planned_but_shipped(file: &str, doc: &str, shipped: &Shipped) -> Vec<String> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut found = Vec::new();
    for (number, heading) in planned_lines(doc) {
        for name in shipped_named(lines[number - 1], shipped) {
            found.push(format!(
                "{file}:{number}: the planned section {heading:?} names {name}, which the \
                 extension has: move what shipped out of the planned section"
            ));
        }
    }
    found
}

/// Rule (b) over one guide.
fn said_missing_but_shipped(file: &str, doc: &str, shipped: &Shipped) -> Vec<String> {
    let mut found = Vec::new();
    for (number, sentence) in sentences(doc) {
        let Some(denial) = denial(&prose_words(&sentence)) else {
            continue;
        };
        let named = shipped_named(&sentence, shipped);
        if denial == Denial::NoUnnamedFunction {
            found.push(format!(
                "{file}:{number}: says the extension has no such function without naming it \
                 (name it in backticks, so that the catalog can be checked): {sentence:?}"
            ));
        } else if !named.is_empty() {
            found.push(format!(
                "{file}:{number}: names {named:?}, which the extension has, and says it is \
                 not there ({denial:?}): {sentence:?}"
            ));
        }
    }
    found
}

/// GitHub's anchor of a heading's text (before the `-N` of a repeat): the
/// generator's, which links the README's index to the reference.
use workfence_surface::github_anchor as anchor;

/// Every anchor of `doc`'s headings.
fn anchors(doc: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = BTreeSet::new();
    for (_, line) in prose_lines(doc) {
        let Some((_, text)) = heading(line) else {
            continue;
        };
        let base = anchor(text);
        let repeat = seen.entry(base.clone()).or_insert(0);
        found.insert(if *repeat == 0 {
            base.clone()
        } else {
            format!("{base}-{repeat}")
        });
        *repeat += 1;
    }
    found
}

/// Rule (c) over one guide: `file:line: ...` for each link to an anchor
/// that no heading of its target has. `docs` maps a repository path to its
/// text.
fn dangling_anchors(file: &str, doc: &str, docs: &BTreeMap<String, String>) -> Vec<String> {
    let dir = std::path::Path::new(file)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    let mut found = Vec::new();
    for (number, line) in prose_lines(doc) {
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            let target = &rest[..rest.find(')').unwrap_or(rest.len())];
            let Some((path, fragment)) = target.split_once('#') else {
                continue;
            };
            if path.contains("://") {
                continue;
            }
            let resolved = if path.is_empty() {
                file.to_owned()
            } else {
                normalize(&dir.join(path))
            };
            let Some(text) = docs.get(&resolved) else {
                found.push(format!(
                    "{file}:{number}: links to {target}, a file that is not a guide"
                ));
                continue;
            };
            if !anchors(text).contains(fragment) {
                found.push(format!(
                    "{file}:{number}: links to {target}, but {resolved} has no heading with \
                     that anchor"
                ));
            }
        }
    }
    found
}

/// `a/b/../c` → `a/c`, as a repository path.
fn normalize(path: &std::path::Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}

#[test]
fn no_planned_section_names_a_shipped_function() {
    let shipped = shipped();
    let mut found = Vec::new();
    for (file, doc) in guides() {
        found.extend(planned_but_shipped(&file, &doc, &shipped));
    }
    assert!(
        found.is_empty(),
        "a planned section names a function the extension has:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn no_guide_says_a_shipped_function_is_missing_or_planned() {
    let shipped = shipped();
    let mut found = Vec::new();
    for (file, doc) in guides() {
        found.extend(said_missing_but_shipped(&file, &doc, &shipped));
    }
    assert!(
        found.is_empty(),
        "a guide says a function the extension has is not there:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn every_link_to_a_section_finds_its_heading() {
    let docs: BTreeMap<String, String> = guides().into_iter().collect();
    let mut found = Vec::new();
    for (file, doc) in &docs {
        found.extend(dangling_anchors(file, doc, &docs));
    }
    assert!(
        found.is_empty(),
        "a link points at a section that is not there:\n  {}",
        found.join("\n  ")
    );
}

/// The stale words of issue 30, as they were, and their neighbours that are
/// not stale: the rules catch the first and leave the second alone.
#[test]
fn the_stale_words_rules_catch_the_old_texts_and_only_them() {
    let shipped: Shipped = [
        (
            "work_enqueue",
            &["queue", "payload", "key", "group_key"][..],
        ),
        ("work_limit", &["queue", "concurrency", "rate", "per"][..]),
        ("work_item", &["queue", "key", "id"][..]),
        ("work_items", &["queue", "state", "after", "max"][..]),
        (
            "work_claim",
            &["queue", "owner", "lease", "max_items", "wait"][..],
        ),
        ("work_renew", &["id", "owner", "epoch", "lease"][..]),
    ]
    .into_iter()
    .map(|(name, args)| {
        (
            name.to_owned(),
            args.iter().map(|a| a.to_string()).collect(),
        )
    })
    .collect();

    // docs/contract.md before flow control moved out of its planned section
    // (0.10.0 shipped both).
    let old_contract = "# The pg_workfence contract\n\n\
        Contents: [Functions](#the-functions) · planned:\n\
        [flow control](#planned-flow-control-issue-17)\n\n\
        ## The functions\n\n\
        ### `work_limit(queue text) → void`\n\nSets limits.\n\n\
        ## Planned: flow control (issue 17)\n\n\
        **Planned**, not built: issue 17 builds it.\n\n\
        | function or object | returns | does |\n|---|---|---|\n\
        | `work_enqueue(..., group_key text DEFAULT NULL)` | | at most one item of a group |\n\
        | `work_limit(queue text, concurrency int DEFAULT NULL)` | void | caps a queue |\n";
    let found = planned_but_shipped("contract.md", old_contract, &shipped);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].contains("names work_enqueue") && found[1].contains("names work_limit"));
    // The planned section is rule (a)'s alone; the contents line's anchor is
    // rule (c)'s.
    assert_eq!(
        said_missing_but_shipped("contract.md", old_contract, &shipped),
        Vec::<String>::new()
    );
    let docs = BTreeMap::from([("contract.md".to_owned(), old_contract.to_owned())]);
    let found = dangling_anchors("contract.md", old_contract, &docs);
    assert!(found.is_empty(), "{found:#?}");
    let moved = old_contract.replace(
        "## Planned: flow control (issue 17)",
        "## Flow control (0.10.0)",
    );
    let docs = BTreeMap::from([("contract.md".to_owned(), moved.clone())]);
    let found = dangling_anchors("contract.md", &moved, &docs);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("#planned-flow-control-issue-17"));

    // A planned new argument of a built function is not stale until it ships.
    let planned_argument = "## Planned: priorities\n\n\
        | `work_claim(..., min_priority integer DEFAULT NULL)` | | claims only ... |\n\
        `work_claim(q, o, '30 s')` is how it is called today.\n";
    let found = planned_but_shipped("x.md", planned_argument, &shipped);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains(":4:") && found[0].contains("work_claim"));

    // docs/replicated-job-store.md before 0.6.0's work_item was named there.
    let old_recipe = "Reading a job's status needs more, because the extension has **no \
        status-by-key function**, and the group roles cannot read `workfence.items` (a \
        `SELECT` on it fails with 42501). Give the replicas a read path.";
    let found = said_missing_but_shipped("recipe.md", old_recipe, &shipped);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("without naming it"));
    let named = "The extension has no `work_item` function yet.";
    let found = said_missing_but_shipped("x.md", named, &shipped);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("work_item"));
    let stale = "- `work_limit` is planned for a coming release.\n\
        - A later release will add `work_items(queue)`: a page of items.";
    assert_eq!(said_missing_but_shipped("x.md", stale, &shipped).len(), 2);

    // Not stale: the server's error message quoted, a call that finds no
    // function, a token that does not exist yet, re-planned statements, a
    // function that is not the extension's.
    let fine = "An interval goes as text: a bare number is not one (`work_claim(q, o, 30)` \
        finds no function; pass `'30 seconds'`).\n\n\
        | 42883 | \"function workfence.work_claim(unknown, unknown, smallint) does not exist\" |\n\n\
        A token that, seen from the heartbeat's connection, does not exist yet: the \
        heartbeat's `work_renew` returns false.\n\n\
        The claim was re-planned on every call. `work_claim` took 375 µs.\n\n\
        Status by key: `work_item(queue, key)` (from 0.6.0); there is no bulk form of \
        `work_items`.\n\n\
        ```sql\n-- planned: work_limit\n```\n";
    assert_eq!(
        said_missing_but_shipped("x.md", fine, &shipped),
        Vec::<String>::new()
    );
    assert_eq!(
        planned_but_shipped("x.md", fine, &shipped),
        Vec::<String>::new()
    );
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        anchor("`work_pause(queue text) → boolean`"),
        "work_pausequeue-text--boolean"
    );
    assert_eq!(
        anchor("Flow control (from 0.10.0)"),
        "flow-control-from-0100"
    );
    let doc = "# A\n## Setup\n```\n# not a heading\n```\n## Setup\n";
    assert_eq!(
        anchors(doc),
        ["a", "setup", "setup-1"].map(String::from).into()
    );
}
