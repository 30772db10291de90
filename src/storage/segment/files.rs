//! A segment's two files on disk, `<base offset>.log` and `<base offset>.index`: their names and
//! their removal.
//!
//! The base offset is zero-padded to the 20 digits of `u64::MAX` so that the directory listing
//! sorts in offset order and recovery can tell a segment file from anything else by its name
//! alone; every part of storage that names a segment file goes through here, so the rule is
//! written once.

use std::io;
use std::path::Path;

/// Digits in a segment file name: `u64::MAX` has 20.
const NAME_DIGITS: usize = 20;

/// `00000000000000000042.log` for base offset 42.
pub fn log_file_name(base_offset: u64) -> String {
    format!("{base_offset:0width$}.log", width = NAME_DIGITS)
}

/// `00000000000000000042.index` for base offset 42.
pub fn index_file_name(base_offset: u64) -> String {
    format!("{base_offset:0width$}.index", width = NAME_DIGITS)
}

/// The base offset named by a segment file, if `name` is one.
pub fn parse_log_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    (digits.len() == NAME_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Removes a segment's files (retention, or a cut during recovery).
pub fn delete_files(directory: &Path, base_offset: u64) -> io::Result<()> {
    for name in [log_file_name(base_offset), index_file_name(base_offset)] {
        super::super::durable_file::remove_if_present(&directory.join(name))?;
    }
    Ok(())
}
