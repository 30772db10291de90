//! Inside `src/broker` and `src/server`, the parts stay below the service and no folder's
//! modules import each other in a circle.
//!
//! Why a test: the broker grew back into one room once already (a produce queue that held the
//! whole service, a transaction coordinator that took it as a parameter in sixteen methods, an
//! import circle service -> produce queue -> offsets topic -> service), each step reasonable
//! alone. The top-level graph test (`module_graph.rs`) cannot see inside one top-level module;
//! this one reads every `crate::`, `super::` and `self::` path of the non-test code of both
//! folders (comments, strings and test items dropped by the shared parser,
//! `tests/support/rust_source.rs`), resolves it to a module, and draws, for each folder, an
//! edge between two of its child modules when one names the other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::module_graph::find_cycle;
use crate::support::rust_source::{
    code_only, is_ident, rust_files, src_dir, test_only_files, without_test_items,
};

/// The top-level folders whose inside is checked.
const CHECKED: &[&str] = &["broker", "server"];

/// A module path below `src/`, one segment each (`["broker", "cluster", "driver"]`).
type ModulePath = Vec<String>;

/// Proves: outside `broker/service.rs` and `broker/mod.rs`, no file of `src/broker` names
/// `BrokerService` or the `service` module in code: every part is assembled into the service,
/// none reaches up to it.
#[test]
fn no_part_of_the_broker_names_the_service_above_it() {
    let mut problems = Vec::new();
    for (file, module, code) in checked_sources() {
        let in_broker = module.first().is_some_and(|top| top == "broker");
        let is_root = module == ["broker"] || module == ["broker", "service"];
        if !in_broker || is_root {
            continue;
        }
        let names_service = code.contains("BrokerService")
            || references(&code, &module)
                .iter()
                .any(|path| path.starts_with(&["broker".to_owned(), "service".to_owned()]));
        if names_service {
            problems.push(display(&file));
        }
    }
    assert!(
        problems.is_empty(),
        "these parts of the broker name the service above them (hand them the parts they \
         need at assembly instead):\n  {}",
        problems.join("\n  ")
    );
}

/// Proves: in every folder of `src/broker` and `src/server` (the two themselves included), the
/// child modules' imports of each other form no cycle.
#[test]
fn no_folder_of_the_broker_or_the_server_has_an_import_cycle() {
    let mut graphs: BTreeMap<ModulePath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (_, module, code) in checked_sources() {
        for target in references(&code, &module) {
            let shared = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (module.get(shared), target.get(shared)) else {
                continue;
            };
            let folder = module[..shared].to_vec();
            if folder.is_empty() || !is_module(&folder, to) {
                continue;
            }
            graphs
                .entry(folder)
                .or_default()
                .entry(from.clone())
                .or_default()
                .insert(to.clone());
        }
    }
    assert!(
        graphs.contains_key(&vec!["broker".to_owned()]),
        "the parser found no edge inside src/broker: it is broken"
    );
    let cycles: Vec<String> = graphs
        .iter()
        .filter_map(|(folder, graph)| {
            find_cycle(graph).map(|cycle| format!("{}: {}", folder.join("::"), cycle.join(" -> ")))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles inside a folder:\n  {}",
        cycles.join("\n  ")
    );
}

/// Proves: the path reader resolves `crate::`, `super::` and `self::` paths and `{..}` groups,
/// nested ones too, to module paths.
#[test]
fn the_path_reader_resolves_relative_paths_and_groups() {
    let module: ModulePath = ["broker", "transactions", "writer"]
        .map(String::from)
        .to_vec();
    let code = "use super::{TransactionCoordinator, markers::{a, b}};\n\
                use crate::broker::{reads::ReadPath, cluster};\n\
                fn f() { self::inner::g(); super::super::blocking(); x::crate_like(); }";
    let found: BTreeSet<String> = references(code, &module)
        .into_iter()
        .map(|path| path.join("::"))
        .collect();
    let expected: BTreeSet<String> = [
        "broker::transactions::TransactionCoordinator",
        "broker::transactions::markers::a",
        "broker::transactions::markers::b",
        "broker::reads::ReadPath",
        "broker::cluster",
        "broker::transactions::writer::inner::g",
        "broker::blocking",
    ]
    .map(String::from)
    .into();
    assert_eq!(found, expected);
}

/// Every non-test source file of the checked folders: its path, its module path and its code
/// (comments, strings and test items dropped).
fn checked_sources() -> Vec<(PathBuf, ModulePath, String)> {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let test_only = test_only_files(&files);
    files
        .into_iter()
        .filter(|file| !test_only.contains(file))
        .filter_map(|file| {
            let module = module_path(&file)?;
            if !CHECKED.contains(&module.first()?.as_str()) {
                return None;
            }
            let source = std::fs::read_to_string(&file).expect("read a source file");
            let code = without_test_items(&code_only(&source));
            Some((file, module, code))
        })
        .collect()
}

/// The module a file under `src/` defines (`a/mod.rs` is `a`).
fn module_path(file: &Path) -> Option<ModulePath> {
    let relative = file.strip_prefix(src_dir()).ok()?;
    let mut segments: ModulePath = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = segments.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if stem != "mod" {
        segments.push(stem.to_owned());
    }
    Some(segments)
}

/// Whether `name` is a child module of `folder` (a file or a folder of it).
fn is_module(folder: &[String], name: &str) -> bool {
    let mut path = src_dir();
    path.extend(folder);
    path.join(format!("{name}.rs")).is_file() || path.join(name).join("mod.rs").is_file()
}

/// Every `crate::`, `super::` and `self::` path of `code` (in `module`), resolved to a path
/// from the crate root; each path of a `{..}` group separately.
fn references(code: &str, module: &[String]) -> Vec<ModulePath> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_path = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if starts_path {
            if let Some(base) = path_base(&chars, i, module) {
                let (base, after) = base;
                i = read_path(&chars, after, base, &mut found);
                continue;
            }
        }
        i += 1;
    }
    found
}

/// Where a path starting at `at` begins (its resolved leading `crate`/`super`/`self` segments)
/// and the position after them, or `None` when no such path starts there.
fn path_base(chars: &[char], at: usize, module: &[String]) -> Option<(ModulePath, usize)> {
    let word_at = |at: usize, word: &str| {
        let end = at + word.len();
        end + 2 <= chars.len()
            && chars[at..end].iter().copied().eq(word.chars())
            && chars[end] == ':'
            && chars[end + 1] == ':'
    };
    if word_at(at, "crate") {
        return Some((Vec::new(), at + "crate::".len()));
    }
    if word_at(at, "self") {
        return Some((module.to_vec(), at + "self::".len()));
    }
    let mut base = module.to_vec();
    let mut position = at;
    while word_at(position, "super") {
        base.pop();
        position += "super::".len();
    }
    (position > at).then_some((base, position))
}

/// Reads the rest of a path from `at` (identifiers joined by `::`, or a `{..}` group of paths)
/// onto `base`, records each whole path, and returns the position after it.
fn read_path(chars: &[char], at: usize, base: ModulePath, found: &mut Vec<ModulePath>) -> usize {
    let mut path = base;
    let mut i = at;
    loop {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i < chars.len() && chars[i] == '{' {
            i += 1;
            loop {
                while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
                    i += 1;
                }
                if i >= chars.len() || chars[i] == '}' {
                    return i + 1;
                }
                let (element_base, after) = match path_base(chars, i, &path) {
                    Some(resolved) => resolved,
                    None => (path.clone(), i),
                };
                i = read_path(chars, after, element_base, found);
            }
        }
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        if i > start {
            path.push(chars[start..i].iter().collect());
        }
        if i + 1 < chars.len() && chars[i] == ':' && chars[i + 1] == ':' {
            i += 2;
            continue;
        }
        // Skip an `as name` rename; the element ends at `,`, `}` or `;`.
        found.push(path);
        return i.max(at + 1);
    }
}

fn display(file: &Path) -> String {
    file.strip_prefix(src_dir().parent().expect("the crate"))
        .unwrap_or(file)
        .display()
        .to_string()
}
