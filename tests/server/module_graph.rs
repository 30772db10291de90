//! The top-level modules of `src/` form the layered graph that `docs/architecture.md` draws: a
//! module imports (names `crate::other` in non-test code) only the modules its row in the
//! "Allowed imports" table lists, and that table has no cycle, so neither has the code.
//!
//! Why a test: the layering stays true only while something checks it. The parser is small on
//! purpose: it drops comments, string and char literals and `#[cfg(test)]` items (test modules
//! may reach anywhere; that part is shared with the file-size test, in
//! `tests/support/rust_source.rs`), then reads every `crate::name` path, including each first
//! name of a `crate::{a, b}` group.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::rust_source::{
    code_only, is_ident, rust_files, src_dir, test_only_files, without_test_items,
};

const ARCHITECTURE: &str = include_str!("../../docs/architecture.md");
const TABLE_BEGIN: &str = "<!-- module-graph:begin -->";
const TABLE_END: &str = "<!-- module-graph:end -->";

pub(crate) type Graph = BTreeMap<String, BTreeSet<String>>;

/// Proves: every edge of the code is allowed by the table, every top-level module has a row,
/// and the allowed graph (hence the code's) is acyclic.
#[test]
fn top_level_modules_import_only_what_the_architecture_table_allows() {
    let allowed = allowed_edges();
    let actual = actual_edges();
    let mut problems = Vec::new();
    for module in actual.keys() {
        if !allowed.contains_key(module) {
            problems.push(format!("module `{module}` has no row in the table"));
        }
    }
    for (module, imports) in &actual {
        for import in imports {
            let ok = allowed.get(module).is_some_and(|set| set.contains(import));
            if !ok {
                problems.push(format!(
                    "`{module}` imports `{import}`, which the table does not allow ({})",
                    where_used(module, import).join(", ")
                ));
            }
        }
    }
    if let Some(cycle) = find_cycle(&allowed) {
        problems.push(format!(
            "the allowed graph has a cycle: {}",
            cycle.join(" -> ")
        ));
    }
    if let Some(cycle) = find_cycle(&actual) {
        problems.push(format!("the code has a cycle: {}", cycle.join(" -> ")));
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's module graph is not what src/ does:\n  {}",
        problems.join("\n  ")
    );
}

/// Proves: the parser sees through what it must (comments, strings, test modules, groups).
#[test]
fn the_import_parser_skips_comments_strings_and_test_code() {
    let source = r#"
        //! see crate::ignored_doc
        use crate::{alpha::X, beta};
        /* crate::ignored_block */
        fn f() { let _ = "crate::ignored_string"; let _ = crate::gamma::y(); let _c = '{'; }
        #[cfg(test)]
        mod tests { use crate::ignored_test; }
        #[cfg(all(test, fencelog_loom))]
        use crate::ignored_loom;
        struct S<'a>(&'a str);
    "#;
    let found = imports_of(source);
    let expected: BTreeSet<String> = ["alpha", "beta", "gamma"].map(String::from).into();
    assert_eq!(found, expected);
}

/// The table between the markers: `| module | may import |`, names in backticks.
fn allowed_edges() -> Graph {
    let begin = ARCHITECTURE
        .find(TABLE_BEGIN)
        .expect("docs/architecture.md has the module-graph table markers");
    let end = ARCHITECTURE.find(TABLE_END).expect("table end marker");
    let mut graph = Graph::new();
    for line in ARCHITECTURE[begin..end].lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 || !cells[1].starts_with('`') {
            continue;
        }
        let module = cells[1].trim_matches('`').to_string();
        let imports = cells[2]
            .split(',')
            .map(|name| name.trim().trim_matches('`').to_string())
            .filter(|name| !name.is_empty() && name != "nothing")
            .collect();
        graph.insert(module, imports);
    }
    graph
}

/// The top-level module a file under `src/` belongs to (`None`: the crate root files).
fn top_module(relative: &Path) -> Option<String> {
    let first = relative
        .components()
        .next()?
        .as_os_str()
        .to_str()?
        .to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

fn actual_edges() -> Graph {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let test_only = test_only_files(&files);
    let mut graph = Graph::new();
    for file in &files {
        if test_only.contains(file) {
            continue;
        }
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(module) = top_module(relative) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        let imports = graph.entry(module.clone()).or_default();
        for import in imports_of(&text) {
            if import != module && import != "self" {
                imports.insert(import);
            }
        }
    }
    graph
}

fn where_used(module: &str, import: &str) -> Vec<String> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .iter()
        .filter(|file| {
            let relative = file.strip_prefix(&src).expect("under src");
            top_module(relative).as_deref() == Some(module)
                && imports_of(&std::fs::read_to_string(file).expect("read")).contains(import)
        })
        .map(|file| file.strip_prefix(&src).unwrap().display().to_string())
        .collect()
}

/// The top-level module names `source` reaches through `crate::` paths.
fn imports_of(source: &str) -> BTreeSet<String> {
    let code = without_test_items(&code_only(source));
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(position) = rest.find("crate::") {
        let before = rest[..position].chars().last().unwrap_or(' ');
        rest = &rest[position + "crate::".len()..];
        if is_ident(before) || before == '$' {
            continue;
        }
        let trimmed = rest.trim_start();
        if let Some(group) = trimmed.strip_prefix('{') {
            // `crate::{a::X, b}`: the first name of every item at the group's top level.
            let mut depth = 0usize;
            let mut expect_name = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        expect_name = false;
                    }
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if expect_name && is_ident(c) => name.push(c),
                    _ => {
                        if !name.is_empty() {
                            found.insert(std::mem::take(&mut name));
                        }
                        if !c.is_whitespace() {
                            expect_name = false;
                        }
                    }
                }
            }
            if !name.is_empty() {
                found.insert(name);
            }
        } else {
            let name: String = trimmed.chars().take_while(|c| is_ident(*c)).collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// A cycle of `graph` as the list of its modules (first repeated last), if it has one.
/// A cycle of `graph` (module -> the modules it imports), if it has one.
pub(crate) fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Visiting) => {
                let start = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Visiting);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}
