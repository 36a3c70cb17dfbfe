//! The extension's modules import one another one way (issue 31): no file
//! of `src/` reaches, through the `crate::` paths it names, a file that
//! reaches it back. The shared pieces sit below the verbs (`types`, `sql`,
//! `keys`, `take`, `plans`), and the commit's effects are handed to the
//! backend layer (`xact`) by `_PG_init` rather than named by it. Reads the
//! source only: no server.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{ok, repo_root};

/// Each module of `src/` (a file `src/<name>.rs`) with the modules it
/// names as `crate::<name>` (also inside `use crate::{a, b}`), comment
/// lines left out.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = repo_root().join("src");
    let mut sources = BTreeMap::new();
    for entry in ok(std::fs::read_dir(&dir), "src/") {
        let path = ok(entry, "src/ entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let text = ok(std::fs::read_to_string(&path), "a source file");
        let code: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect();
        sources.insert(name, code.join("\n"));
    }
    let modules: BTreeSet<String> = sources.keys().filter(|m| *m != "lib").cloned().collect();
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    sources
        .iter()
        .map(|(name, code)| {
            let mut named = BTreeSet::new();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let listed: Vec<String> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .map(|item| word(item.trim()))
                        .collect(),
                    None => vec![word(rest)],
                };
                named.extend(
                    listed
                        .into_iter()
                        .filter(|m| modules.contains(m) && m != name),
                );
            }
            (name.clone(), named)
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

#[test]
fn no_module_of_src_imports_one_that_imports_it_back() {
    let graph = imports();
    assert!(
        graph.len() > 20 && graph["claim"].contains("flow") && graph["flow"].contains("take"),
        "the reading of src/ found too little: {graph:?}"
    );
    if let Some(found) = cycle(&graph) {
        panic!(
            "an import cycle among the files of src/: {} (move the shared item below \
             both, or hand the call in as xact's CommitHooks are)",
            found.join(" -> ")
        );
    }
}
