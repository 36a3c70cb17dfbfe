//! The checklist of a SQL function, and one source per fact.
//!
//! Every function of the extension (read from the catalog of a database
//! where this checkout's build is installed, and from the `#[pg_extern]`s of
//! `src/`) must have:
//! - a typed call in `harness/src/calls.rs`;
//! - an entry in `harness/tests/privileges.rs` (which role may run it);
//! - rows in `harness/tests/bad_input.rs` (its bad arguments);
//! - a section in the README's reference and in `docs/contract.md`.
//!
//! The source of a function's facts is its `COMMENT ON FUNCTION` text
//! (`sql/finalize.sql`; what `\df+` shows). The README section, the
//! `docs/contract.md` section and the Rust doc comment of the `#[pg_extern]`
//! must agree with it: the heading's arguments are the catalog's (casts
//! dropped), the set of SQLSTATEs each names is the comment's, and every
//! limit the comment states (`1..1000`, `7 days`, `128 bytes`) appears in
//! both sections. CONTRIBUTING.md, "Adding a SQL function", walks through it.

mod common;

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
            comment: r.get(2),
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
    for entry in ok(std::fs::read_dir(repo_root().join("src")), "src/") {
        let path = ok(entry, "src/").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = ok(std::fs::read_to_string(&path), "a source file");
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
fn every_function_has_its_call_privileges_bad_input_and_docs() {
    let functions = catalog();
    let names: BTreeSet<String> = functions.iter().map(|f| f.name.clone()).collect();
    assert!(names.contains("work_claim"), "the catalog lists {names:?}");
    assert_eq!(
        pg_externs().into_keys().collect::<BTreeSet<_>>(),
        names,
        "the #[pg_extern]s of src/ and the installed functions differ: is this \
         checkout's build installed (scripts/test.sh installs it)?"
    );

    let calls = read("harness/src/calls.rs");
    let privileges = read("harness/tests/privileges.rs");
    let bad_input = read("harness/tests/bad_input.rs");
    let readme = read("README.md");
    let contract = read("docs/contract.md");
    let mut missing = Vec::new();
    for name in &names {
        let mut need = |ok: bool, what: &str| {
            if !ok {
                missing.push(format!("{name}: {what}"));
            }
        };
        need(
            calls.contains(&format!("workfence.{name}(")),
            "a typed call in harness/src/calls.rs",
        );
        need(
            privileges.contains(&format!("\"{name}\"")),
            "an entry in harness/tests/privileges.rs's function lists",
        );
        need(
            bad_input.contains(&format!("name: \"{name}\"")),
            "a Function in harness/tests/bad_input.rs",
        );
        need(
            !sections(&readme, name).is_empty(),
            "a ### section in README.md's reference",
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
fn the_readme_the_contract_and_the_rust_docs_agree_with_each_functions_comment() {
    let readme = read("README.md");
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
        for (doc_name, doc) in [("README.md", &readme), ("docs/contract.md", &contract)] {
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
        "the docs disagree with the COMMENT ON FUNCTION texts (sql/finalize.sql, the one \
         source of each function's facts):\n  {}",
        disagreements.join("\n  ")
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
