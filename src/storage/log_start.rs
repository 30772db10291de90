//! The durable log start of a partition (`log-start`): the offset below which its records are
//! deleted (Kafka's DeleteRecords), when that is above the first segment's base offset.
//!
//! Why a file of its own: deleting records moves the log start to any offset, usually inside a
//! segment that must stay (it holds the records after it). The segment files alone then cannot
//! say where the log starts, and a restart without this file would serve the deleted records
//! again. Written with the same durable replace as the recovery point (temporary file, fsync,
//! rename, directory fsync), *before* the new log start is published and before any segment
//! below it is deleted, so a crash leaves the old or the new value and never a log whose first
//! segment is above the recorded value by accident (the open takes the larger of the two).

use std::io;
use std::path::Path;

use super::durable_file::write_durably;

/// Name of the log start file in a partition directory.
pub const LOG_START_FILE: &str = "log-start";

/// The recorded log start, `None` when there is none (records were never deleted: the log
/// starts at its first segment).
pub fn load(directory: &Path) -> io::Result<Option<u64>> {
    let path = directory.join(LOG_START_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: not an offset; restore it from a backup, or remove it to serve the log from its first segment",
                    path.display()
                ),
            )
        }),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Records `offset` as the log start, durably (the caller never records a lower value).
pub fn save(directory: &Path, offset: u64) -> io::Result<()> {
    write_durably(directory, LOG_START_FILE, format!("{offset}\n").as_bytes())
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_saved_log_start_loads_back_and_none_is_recorded_at_first() {
        // Proves: a partition that never deleted records has no log start recorded, and a
        // saved one reads back as written (`offset\n`).
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        save(dir.path(), 187).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(187));
        let text = std::fs::read(dir.path().join(LOG_START_FILE)).unwrap();
        assert_eq!(text, b"187\n");
    }

    #[test]
    fn a_damaged_log_start_file_is_refused_with_what_to_do() {
        // Proves: a file that is not an offset refuses the open instead of serving deleted
        // records again, and the error names the file and the way out.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOG_START_FILE), b"12x\n").unwrap();
        let error = load(dir.path()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            error.to_string().contains("log-start: not an offset"),
            "{error}"
        );
    }
}
