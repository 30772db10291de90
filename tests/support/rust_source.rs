//! A small reader of the crate's own Rust sources, for the tests that check `src/` as text: the
//! module graph (`tests/server/module_graph.rs`) and the size of each file
//! (`tests/server/source_size.rs`).
//!
//! Why a parser this small: both tests need the same few things (the `.rs` files under `src/`,
//! which of them exist only for tests, the code without comments and string literals, and where
//! the `#[cfg(test)]` items are), and one copy keeps the two from disagreeing on what test code
//! is. Blanking keeps every newline, so a position in the blanked code is on the same line as in
//! the source.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The crate's `src/` directory.
pub fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, appended to `out`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// Files that exist only for tests: declared as `#[cfg(test)] mod name;` in their parent.
pub fn test_only_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut test_only = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("read");
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            if is_test_cfg(pair[0]) {
                if let Some(name) = pair[1]
                    .strip_prefix("mod ")
                    .or_else(|| pair[1].strip_prefix("pub mod "))
                    .or_else(|| pair[1].strip_prefix("pub(crate) mod "))
                    .and_then(|rest| rest.strip_suffix(';'))
                {
                    let parent = file.parent().expect("parent");
                    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                    let base = if stem == "mod" || stem == "lib" {
                        parent.to_path_buf()
                    } else {
                        parent.join(stem)
                    };
                    test_only.insert(base.join(format!("{name}.rs")));
                    test_only.insert(base.join(name).join("mod.rs"));
                }
            }
        }
    }
    test_only
}

/// Whether a (trimmed) line is a `#[cfg(test)]` or `#[cfg(all(test, ..))]` attribute.
fn is_test_cfg(line: &str) -> bool {
    line.starts_with("#[cfg(") && {
        let inner = &line["#[cfg(".len()..];
        inner.starts_with("test") || inner.starts_with("all(test")
    }
}

/// The code with comments, string and char literals blanked out (their newlines kept, so
/// every line of the source is a line of the result).
pub fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let keep_newlines = |out: &mut String, skipped: &[char]| {
        out.extend(skipped.iter().filter(|c| **c == '\n'));
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
            keep_newlines(&mut out, &chars[start..i.min(chars.len())]);
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !is_ident(prev(&chars, i))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push('"');
            keep_newlines(&mut out, &chars[i..j.min(chars.len())]);
            out.push('"');
            i = j;
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push('"');
            keep_newlines(&mut out, &chars[start..i.min(chars.len())]);
            out.push('"');
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev(chars: &[char], i: usize) -> char {
    if i == 0 {
        ' '
    } else {
        chars[i - 1]
    }
}

/// Whether `c` may be part of an identifier.
pub fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where the items that `#[cfg(test)]` (or `#[cfg(all(test, ..))]`) guards are in `code` (the
/// output of [`code_only`]): each from its attribute to the end of the item, byte ranges in
/// source order.
pub fn test_item_spans(code: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = find_test_cfg(&code[from..]) {
        let start = from + found;
        let after = &code[start..];
        let attribute_end = after.find(']').map_or(after.len(), |end| end + 1);
        let item = &after[attribute_end..];
        // The item ends at its first `;` outside any brackets, or at the brace closing its body.
        let mut depth = 0usize;
        let mut end = item.len();
        for (index, c) in item.char_indices() {
            match c {
                '{' | '(' | '[' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = index + 1;
                        break;
                    }
                }
                ')' | ']' => depth = depth.saturating_sub(1),
                ';' if depth == 0 => {
                    end = index + 1;
                    break;
                }
                _ => {}
            }
        }
        let stop = start + attribute_end + end;
        spans.push(start..stop);
        from = stop;
    }
    spans
}

/// The code without the items that `#[cfg(test)]` (or `#[cfg(all(test, ..))]`) guards.
pub fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut kept_from = 0;
    for span in test_item_spans(code) {
        out.push_str(&code[kept_from..span.start]);
        kept_from = span.end;
    }
    out.push_str(&code[kept_from..]);
    out
}

fn find_test_cfg(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(") {
        let at = from + found;
        let inner = &code[at + "#[cfg(".len()..];
        if inner.starts_with("test") || inner.starts_with("all(test") {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The lines of `source` that are not test code: every line (blank lines and comments included)
/// but those a `#[cfg(test)]` item spans, from its attribute's line to its last line.
pub fn non_test_lines(source: &str) -> usize {
    let code = code_only(source);
    let line_of = |position: usize| code[..position].matches('\n').count();
    let mut test_lines = BTreeSet::new();
    for span in test_item_spans(&code) {
        let last = span.end.saturating_sub(1).max(span.start);
        test_lines.extend(line_of(span.start)..=line_of(last));
    }
    source.lines().count().saturating_sub(test_lines.len())
}
