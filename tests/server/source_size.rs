//! No source file of `src/` holds more than [`LIMIT`] lines of non-test code: a file that grows
//! past it is split into a folder module of parts with one job each (issue 52).
//!
//! Why a test: the limit held only while someone looked. Files crept to 1,100 and 1,400 lines
//! between reviews, one copy of a rule at a time; a test sees every commit.
//!
//! What counts: every line of a `.rs` file under `src/` (code, comments, doc comments, blank
//! lines) except the lines of `#[cfg(test)]` and `#[cfg(all(test, ..))]` items (whole test
//! modules and functions, from the attribute to the item's end), and except files that exist
//! only for tests (declared `#[cfg(test)] mod name;` in their parent). The parser is the module
//! graph test's, shared in `tests/support/rust_source.rs`.

use std::path::Path;

use crate::support::rust_source::{non_test_lines, rust_files, src_dir, test_only_files};

/// The most non-test lines a source file may hold.
const LIMIT: usize = 800;

/// Proves: every file of `src/` is within [`LIMIT`] non-test lines.
#[test]
fn no_source_file_is_over_800_non_test_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let test_only = test_only_files(&files);
    let mut problems = Vec::new();
    for file in files.iter().filter(|file| !test_only.contains(*file)) {
        let relative = file
            .strip_prefix(root)
            .expect("under the crate")
            .display()
            .to_string();
        let count = non_test_lines(&std::fs::read_to_string(file).expect("read a source file"));
        if count > LIMIT {
            problems.push(format!(
                "{relative}: {count} non-test lines (limit {LIMIT}); split it into a folder \
                 module of parts with one job each"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "source files over {LIMIT} non-test lines:\n  {}",
        problems.join("\n  ")
    );
}

/// Proves: the counter counts code, comments and blank lines, and skips test modules, test
/// functions and `#[cfg(all(test, ..))]` items whole, however their braces, strings and
/// comments look inside.
#[test]
fn the_line_counter_skips_test_modules_and_counts_the_rest() {
    let source = r#"//! A module.

/// A function.
fn kept() -> [u8; 2] {
    let _text = "a { brace and a ; in a string
that spans two lines";
    [0; 2]
}

#[cfg(test)]
mod tests {
    /* a } in a comment */
    fn helper() -> char { '}' }
}

#[cfg(all(test, fencelog_loom))]
const MODELS: [u8; 3] = [1, 2, 3];

#[cfg(test)]
fn one_more() {}
struct AlsoKept;
"#;
    // Kept: lines 1-9 (doc, blank, function, blank), 15 and 18 (blanks), 21 (the struct).
    assert_eq!(non_test_lines(source), 12);
    assert_eq!(non_test_lines("fn f() {}\n#[cfg(test)]\nmod tests;\n"), 1);
}
