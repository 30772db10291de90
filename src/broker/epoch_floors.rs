//! The fence floors of deleted topics: for each topic name, the highest epoch any partition of
//! that name ever installed, kept durably after the topic is gone.
//!
//! Why: a partition's epochs live in its own directory, which a delete removes. Without a record
//! elsewhere, a topic re-created under the same name would start again at epoch 0, accept writers
//! without a lease, and grant epoch 1 again, so a holder of the old topic's epoch 5 (a paused
//! producer that has not noticed the delete) could write into the new topic. The floor is
//! recorded *before* the delete is acknowledged, and a re-created partition starts at the floor
//! plus one (its creation epoch, see [`crate::storage::fence`]): every old holder is fenced and
//! every new grant is above every old epoch. The fence floor never goes down.
//!
//! The file (`DATA/epoch-floors`) is small text, written temp + fsync + rename + directory fsync,
//! and ends with a CRC32 of everything before its last line, so a damaged file is refused rather
//! than read as lower floors:
//!
//! ```text
//! fencelog-epoch-floors 1
//! others 0
//! orders 5
//! payments 12
//! crc32 0a1b2c3d
//! ```
//!
//! Bounded: at most [`MAX_EPOCH_FLOORS`] names are listed. When one more is needed, the listed
//! name with the lowest floor is folded into `others`, the floor of every name not listed; floors
//! only ever rise, so folding never lowers the floor any name sees.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::storage::durable_file::write_durably;

/// Name of the floors file in the data directory.
pub const EPOCH_FLOORS_FILE: &str = "epoch-floors";
/// Most topic names the file lists by name; the rest share the `others` floor.
pub const MAX_EPOCH_FLOORS: usize = 10_000;
/// Largest floors file read; a longer one is refused as damaged (far above what
/// [`MAX_EPOCH_FLOORS`] names of at most 200 bytes can take).
pub const MAX_EPOCH_FLOORS_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// First line of the file: its format and version.
const HEADER: &str = "fencelog-epoch-floors 1";

/// The floors of deleted topics' names (see the module docs).
#[derive(Debug)]
pub struct EpochFloors {
    directory: PathBuf,
    /// Floor of every name not in `by_name`.
    others: u64,
    by_name: BTreeMap<String, u64>,
}

impl EpochFloors {
    /// Reads the floors file of the data directory `directory` (no file: every floor is 0).
    /// A damaged file is an error that names it: the broker must not start with lower floors.
    pub fn open(directory: &Path) -> io::Result<Self> {
        let path = directory.join(EPOCH_FLOORS_FILE);
        let mut floors = Self {
            directory: directory.to_path_buf(),
            others: 0,
            by_name: BTreeMap::new(),
        };
        let bytes = match fs::metadata(&path) {
            Ok(metadata) if metadata.len() > MAX_EPOCH_FLOORS_FILE_BYTES => {
                return Err(damaged(
                    &path,
                    &format!("longer than {MAX_EPOCH_FLOORS_FILE_BYTES} bytes"),
                ))
            }
            Ok(_) => fs::read(&path)?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(floors),
            Err(error) => return Err(error),
        };
        let (others, by_name) = parse(&bytes).map_err(|reason| damaged(&path, &reason))?;
        floors.others = others;
        floors.by_name = by_name;
        Ok(floors)
    }

    /// The floor of `name`: the highest epoch a deleted topic of that name ever installed (0 if
    /// none was ever deleted).
    pub fn floor(&self, name: &str) -> u64 {
        self.by_name.get(name).copied().unwrap_or(self.others)
    }

    /// Raises the floor of `name` to `epoch` (never lowers it) and makes it durable before
    /// returning. On failure nothing changes in memory.
    pub fn raise(&mut self, name: &str, epoch: u64) -> io::Result<()> {
        if epoch <= self.floor(name) {
            return Ok(());
        }
        let mut by_name = self.by_name.clone();
        let mut others = self.others;
        by_name.insert(name.to_string(), epoch);
        while by_name.len() > MAX_EPOCH_FLOORS {
            let lowest = by_name
                .iter()
                .filter(|(listed, _)| listed.as_str() != name)
                .min_by_key(|(_, floor)| **floor)
                .map(|(listed, floor)| (listed.clone(), *floor))
                .expect("more than one name is listed");
            by_name.remove(&lowest.0);
            others = others.max(lowest.1);
        }
        write_durably(
            &self.directory,
            EPOCH_FLOORS_FILE,
            encode(others, &by_name).as_bytes(),
        )?;
        self.others = others;
        self.by_name = by_name;
        Ok(())
    }
}

fn damaged(path: &Path, reason: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is damaged ({reason}); it holds the fence floors of deleted topics, so the broker \
             will not start without it: restore it from a backup, or remove it only if no \
             deleted topic will be re-created while a holder of its old epochs may still write",
            path.display()
        ),
    )
}

fn encode(others: u64, by_name: &BTreeMap<String, u64>) -> String {
    let mut text = format!("{HEADER}\nothers {others}\n");
    for (name, floor) in by_name {
        text.push_str(&format!("{name} {floor}\n"));
    }
    let crc = crc32fast::hash(text.as_bytes());
    text.push_str(&format!("crc32 {crc:08x}\n"));
    text
}

fn parse(bytes: &[u8]) -> Result<(u64, BTreeMap<String, u64>), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
    let body_end = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map(|position| position + 1)
        .ok_or("no checksum line")?;
    let (body, checksum_line) = text.split_at(body_end);
    let expected = checksum_line
        .trim_end()
        .strip_prefix("crc32 ")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or("the last line is not `crc32 XXXXXXXX`")?;
    let actual = crc32fast::hash(body.as_bytes());
    if actual != expected {
        return Err(format!(
            "checksum {actual:08x} does not match the recorded {expected:08x}"
        ));
    }
    let mut lines = body.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("the first line is not `{HEADER}`"));
    }
    let others = lines
        .next()
        .and_then(|line| line.strip_prefix("others "))
        .and_then(|number| number.parse::<u64>().ok())
        .ok_or("the second line is not `others EPOCH`")?;
    let mut by_name = BTreeMap::new();
    for (number, line) in lines.enumerate() {
        let (name, floor) = line
            .rsplit_once(' ')
            .and_then(|(name, floor)| Some((name, floor.parse::<u64>().ok()?)))
            .ok_or_else(|| format!("line {} is not `NAME EPOCH`", number + 3))?;
        by_name.insert(name.to_string(), floor);
    }
    if by_name.len() > MAX_EPOCH_FLOORS {
        return Err(format!("more than {MAX_EPOCH_FLOORS} names"));
    }
    Ok((others, by_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Floors survive a reopen, only rise, and unknown names read 0.
    #[test]
    fn floors_round_trip_and_only_rise() {
        let directory = tempfile::tempdir().unwrap();
        let mut floors = EpochFloors::open(directory.path()).unwrap();
        assert_eq!(floors.floor("orders"), 0);
        floors.raise("orders", 5).unwrap();
        floors.raise("orders", 3).unwrap();
        floors.raise("pay.ments-2", 12).unwrap();
        let reopened = EpochFloors::open(directory.path()).unwrap();
        assert_eq!(reopened.floor("orders"), 5);
        assert_eq!(reopened.floor("pay.ments-2"), 12);
        assert_eq!(reopened.floor("other"), 0);
    }

    /// Every flipped byte and every truncation of the file is refused, never read as floors.
    #[test]
    fn a_damaged_file_is_refused() {
        let directory = tempfile::tempdir().unwrap();
        let mut floors = EpochFloors::open(directory.path()).unwrap();
        floors.raise("orders", 5).unwrap();
        let path = directory.path().join(EPOCH_FLOORS_FILE);
        let good = fs::read(&path).unwrap();
        for index in 0..good.len() {
            let mut bad = good.clone();
            bad[index] ^= 0x01;
            fs::write(&path, &bad).unwrap();
            if let Ok(read) = EpochFloors::open(directory.path()) {
                // A flip inside the final newline or a hex digit's case can still parse; it must
                // then read the same floors.
                assert_eq!(read.floor("orders"), 5, "byte {index}");
            }
        }
        for length in 0..good.len() - 1 {
            fs::write(&path, &good[..length]).unwrap();
            assert!(
                EpochFloors::open(directory.path()).is_err(),
                "length {length}"
            );
        }
    }

    /// Past the limit, the lowest floors fold into `others`: no name's floor goes down.
    #[test]
    fn folding_never_lowers_a_floor() {
        let directory = tempfile::tempdir().unwrap();
        let mut floors = EpochFloors::open(directory.path()).unwrap();
        let mut by_name = BTreeMap::new();
        for index in 0..MAX_EPOCH_FLOORS as u64 {
            by_name.insert(format!("t{index}"), index + 1);
        }
        floors.by_name = by_name;
        floors.raise("new", 1).unwrap();
        assert_eq!(floors.by_name.len(), MAX_EPOCH_FLOORS);
        assert_eq!(floors.floor("t0"), 1, "folded into others");
        assert_eq!(floors.floor("new"), 1);
        for index in 0..MAX_EPOCH_FLOORS as u64 {
            assert!(floors.floor(&format!("t{index}")) > index);
        }
        let reopened = EpochFloors::open(directory.path()).unwrap();
        assert_eq!(reopened.floor("t0"), 1);
        assert_eq!(reopened.floor("never-deleted"), 1);
    }
}
