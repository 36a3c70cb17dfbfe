//! The extension's modules import one another one way (issue 31), and the
//! folders of `src/` show the layers: `base/` (shared types, the error
//! enum), `pg/` (the server's facilities), `access/` (argument checks,
//! grants), `store/` (the items' SQL), `backend/` (per-backend state, what
//! runs after commit), `verbs/` (the state machine), and at the top the
//! files of `src/` itself (`lib.rs`, the maintenance worker). A file imports
//! only from its own layer or one below it, and no file reaches, through
//! the `crate::` paths it names, a file that reaches it back: a claim's path
//! only goes down. The backend layer's commit effects call the verbs through
//! `xact::CommitHooks`, handed in by `_PG_init`. Reads the source only: no
//! server.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

/// The layers, bottom first: the folders of `src/`. The files directly in
/// `src/` are the top layer, above all of these.
const LAYERS: [&str; 6] = ["base", "pg", "access", "store", "backend", "verbs"];

/// A module's name: `layer/file` for a file in a layer's folder
/// (`verbs/claim`), the file's name for one directly in `src/`
/// (`maintenance`); a folder's `mod.rs` is `layer/mod`.
fn module_of(relative: &str) -> String {
    relative.trim_end_matches(".rs").to_owned()
}

/// The layer of a module: its index in [`LAYERS`], or `LAYERS.len()` for
/// the top (a file directly in `src/`). Panics on a folder that is not a
/// layer: a new folder must take its place in [`LAYERS`].
fn layer_of(module: &str) -> usize {
    match module.split_once('/') {
        Some((folder, _)) => LAYERS.iter().position(|l| *l == folder).unwrap_or_else(|| {
            panic!("src/{folder}/ is not a layer: give it its place in LAYERS (layers.rs)")
        }),
        None => LAYERS.len(),
    }
}

/// The leading identifier of `s`.
fn word(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The names a `crate::` path at the start of `rest` reaches: `layer::file`
/// or `layer::{file, file::Item}` name files of a layer, `file` a file
/// directly in `src/`.
fn named(rest: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let first = word(rest);
    if !LAYERS.contains(&first.as_str()) {
        return vec![first]
            .into_iter()
            .filter(|m| modules.contains(m))
            .collect();
    }
    let after = rest[first.len()..].strip_prefix("::").unwrap_or_default();
    let files: Vec<String> = match after.strip_prefix('{') {
        Some(group) => group
            .split('}')
            .next()
            .unwrap_or_default()
            .split(',')
            .map(|item| word(item.trim()))
            .collect(),
        None => vec![word(after)],
    };
    files
        .into_iter()
        .map(|file| format!("{first}/{file}"))
        .filter(|m| modules.contains(m))
        .collect()
}

/// Each module of `src/` with the modules it names as `crate::...`,
/// comment lines left out.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let sources: BTreeMap<String, String> = common::extension_sources()
        .into_iter()
        .map(|(relative, text)| {
            let code: Vec<&str> = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect();
            (module_of(&relative), code.join("\n"))
        })
        .collect();
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(name, code)| {
            let mut reached = BTreeSet::new();
            for (i, _) in code.match_indices("crate::") {
                reached.extend(
                    named(&code[i + "crate::".len()..], &modules)
                        .into_iter()
                        .filter(|m| m != name),
                );
            }
            // `super::file` in a layer's file names a file of the same layer
            // (`super::{a, b}` too); what is not a file there (an item of
            // a test module's parent) is left out by `named`.
            if let Some((layer, _)) = name.split_once('/') {
                for (i, _) in code.match_indices("super::") {
                    let rest = format!("{layer}::{}", &code[i + "super::".len()..]);
                    reached.extend(named(&rest, &modules).into_iter().filter(|m| m != name));
                }
            }
            (name.clone(), reached)
        })
        .collect()
}

/// A cycle of `graph` (its modules in import order, the first again at the
/// end), if it has one: a depth-first search that meets a module still on
/// its path.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut found = path[at..].to_vec();
            found.push(module.to_owned());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(graph, module, &mut Vec::new(), &mut done))
}

/// The reading of `src/` found the layout it checks, so that the tests
/// below cannot pass on nothing.
fn checked_imports() -> BTreeMap<String, BTreeSet<String>> {
    let graph = imports();
    assert!(
        graph.len() > 25
            && graph["verbs/claim"].contains("verbs/flow")
            && graph["verbs/flow"].contains("store/take")
            && graph["backend/wait"].contains("backend/paused"),
        "the reading of src/ found too little: {graph:?}"
    );
    graph
}

#[test]
fn no_module_of_src_imports_one_that_imports_it_back() {
    if let Some(found) = cycle(&checked_imports()) {
        panic!(
            "an import cycle among the files of src/: {} (move the shared item below \
             both, or hand the call in as xact's CommitHooks are)",
            found.join(" -> ")
        );
    }
}

#[test]
fn every_import_points_to_the_same_layer_or_one_below() {
    let mut upward = Vec::new();
    for (module, reached) in checked_imports() {
        for target in reached {
            if layer_of(&target) > layer_of(&module) {
                upward.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that point up the layers {LAYERS:?} (bottom first): {upward:?} (move the \
         shared item down, or hand the call in as xact's CommitHooks are)"
    );
}

#[test]
fn the_layer_check_sees_an_import_that_points_up() {
    let modules: BTreeSet<String> = ["base/types", "verbs/claim", "backend/wait"]
        .into_iter()
        .map(String::from)
        .collect();
    let reached = named("verbs::{claim, lease::X}", &modules);
    assert_eq!(reached, vec!["verbs/claim".to_owned()]);
    assert!(layer_of(&reached[0]) > layer_of("backend/wait"));
    assert_eq!(
        named("backend::wait::queue_key", &modules),
        vec!["backend/wait"]
    );
    assert_eq!(layer_of("maintenance"), LAYERS.len());
}
