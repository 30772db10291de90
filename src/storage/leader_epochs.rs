//! The leader-epoch history and floor of a replicated partition, and the file that keeps them.
//!
//! A replica must answer two questions about leader epochs, and they must not be confused
//! (see `docs/replication.md`): *which leader wrote which records* (the **history**: lines of
//! `epoch start_offset`, cut when the log is truncated, so that a follower can find where its log
//! and the leader's part ways, Kafka's OffsetsForLeaderEpoch), and *which leader epochs are
//! fenced* (the **floor**: the highest leader epoch ever installed; it never goes down, not when
//! the log is cut, not across restarts). Losing that distinction is how stale leaders come back.
//!
//! The file also remembers whether a lease was ever granted on the partition (writers without a
//! lease are refused from then on, across leader changes) and the high watermark as of the last
//! write of the file (so that a restarted replica does not expose, nor refuse to truncate,
//! records it cannot know are committed).
//!
//! A partition directory without the file is a standalone partition: empty history, floor 0,
//! exactly as before replication existed. The file is written only by the first
//! `become_leader`/`become_follower`, and then replaced whole and durably (temporary file,
//! fsync, rename, directory fsync) on every change.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::durable_file::write_durably;
use crate::domain::LeaderEpoch;

/// Name of the leader-epoch file in a partition directory.
pub const LEADER_EPOCHS_FILE: &str = "leader-epochs";
/// Most `epoch start_offset` lines the history keeps. Entries whose records retention already
/// deleted are dropped first; a history still full after that refuses the new entry (an error
/// that says so) rather than forget where a kept epoch starts, which would make a follower
/// truncate records it must keep.
pub const LEADER_EPOCH_HISTORY_MAX: usize = 4096;

/// First word of the line holding the floor.
const FLOOR_KEYWORD: &str = "floor";
/// A line of its own: a lease was granted on the partition since its creation.
const LEASED_KEYWORD: &str = "leased";
/// First word of the line holding the high watermark as of the file's last write.
const HIGH_WATERMARK_KEYWORD: &str = "high-watermark";

/// What the leader-epoch file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochs {
    /// The highest leader epoch ever installed. Never lowered.
    pub floor: LeaderEpoch,
    /// Whether a lease was granted since the partition's creation (by this replica, or by a
    /// leader whose leased records this replica copied).
    pub leased: bool,
    /// The high watermark when the file was last written (a lower bound of the real one).
    pub high_watermark: u64,
    /// `(leader epoch, first offset)`, oldest first; epochs and offsets strictly increase.
    pub history: Vec<(LeaderEpoch, u64)>,
}

/// [`LeaderEpochs::end_offset_for`] on any history (`(leader epoch, first offset)`, oldest
/// first), for the replica logs of tests and the simulation, which keep theirs in memory: one
/// rule, wherever the history lives.
pub fn end_offset_for(
    history: &[(LeaderEpoch, u64)],
    epoch: LeaderEpoch,
    log_end: u64,
) -> Option<(LeaderEpoch, u64)> {
    let at = history.partition_point(|(entry, _)| *entry <= epoch);
    let Some(index) = at.checked_sub(1) else {
        return history
            .first()
            .map(|(_, first_start)| (epoch, *first_start));
    };
    let end = history
        .get(index + 1)
        .map_or(log_end, |(_, next_start)| *next_start);
    Some((history[index].0, end))
}

impl LeaderEpochs {
    /// The newest entry.
    pub fn latest(&self) -> Option<(LeaderEpoch, u64)> {
        self.history.last().copied()
    }

    /// Adds `(epoch, start_offset)` as the newest entry. Entries starting at or after
    /// `start_offset` had no records (it is the log end) and go, as Kafka's history does, so
    /// start offsets strictly increase. Entries wholly below `log_start` (retention deleted their
    /// records) make room when the history is full; if none can go, the history is full: error.
    pub fn push(
        &mut self,
        epoch: LeaderEpoch,
        start_offset: u64,
        log_start: u64,
    ) -> io::Result<()> {
        self.history.retain(|(_, start)| *start < start_offset);
        if let Some((latest, _)) = self.latest() {
            if epoch <= latest {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("leader epoch {epoch} does not follow the history's latest {latest}"),
                ));
            }
        }
        while self.history.len() >= LEADER_EPOCH_HISTORY_MAX {
            let wholly_deleted = self
                .history
                .get(1)
                .is_some_and(|(_, next_start)| *next_start <= log_start);
            if !wholly_deleted {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!(
                        "the leader-epoch history is full ({LEADER_EPOCH_HISTORY_MAX} entries with records still kept); lower the topic's retention so that old epochs' records are deleted"
                    ),
                ));
            }
            self.history.remove(0);
        }
        self.history.push((epoch, start_offset));
        Ok(())
    }

    /// Cuts the history for a log that ends at `log_end`: entries starting at or after it go.
    /// The floor stays.
    pub fn cut(&mut self, log_end: u64) {
        self.history.retain(|(_, start)| *start < log_end);
    }

    /// Kafka's OffsetsForLeaderEpoch on a log ending at `log_end`: the largest epoch `<= epoch`
    /// in the history and the offset where it ended (the next entry's start, or `log_end` for
    /// the latest). When every entry is above `epoch` (this log holds nothing of it: it started
    /// over past it, or its old entries went), `epoch` itself, ended where the first entry
    /// starts: an asker holding records of `epoch` cuts there, as Kafka's leader answers. `None`
    /// only for an empty history.
    pub fn end_offset_for(&self, epoch: LeaderEpoch, log_end: u64) -> Option<(LeaderEpoch, u64)> {
        end_offset_for(&self.history, epoch, log_end)
    }

    /// The leader epoch that wrote `offset` and where the next epoch starts (`None` for the
    /// latest). Offsets before the first entry (written before the partition was replicated)
    /// count as the first entry's. `None` for an empty history.
    pub fn epoch_at(&self, offset: u64) -> Option<(LeaderEpoch, Option<u64>)> {
        let at = self.history.partition_point(|(_, start)| *start <= offset);
        let index = at.saturating_sub(1);
        let (epoch, _) = *self.history.get(index)?;
        Some((epoch, self.history.get(index + 1).map(|(_, start)| *start)))
    }

    fn encode(&self) -> String {
        let mut text = format!("{FLOOR_KEYWORD} {}\n", self.floor);
        if self.leased {
            text.push_str(LEASED_KEYWORD);
            text.push('\n');
        }
        text.push_str(&format!(
            "{HIGH_WATERMARK_KEYWORD} {}\n",
            self.high_watermark
        ));
        for (epoch, start) in &self.history {
            text.push_str(&format!("{epoch} {start}\n"));
        }
        text
    }

    fn decode(path: &Path, text: &str) -> io::Result<Self> {
        let mut epochs = LeaderEpochs::default();
        for (number, line) in text.lines().enumerate() {
            let invalid = || {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: line {} is not `{FLOOR_KEYWORD} N`, `{LEASED_KEYWORD}`, `{HIGH_WATERMARK_KEYWORD} N` nor `epoch start_offset` (restore the file from a backup, or remove the partition's replica and let it copy the leader again)",
                        path.display(),
                        number + 1
                    ),
                )
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [FLOOR_KEYWORD, floor] => epochs.floor = floor.parse().map_err(|_| invalid())?,
                [LEASED_KEYWORD] => epochs.leased = true,
                [HIGH_WATERMARK_KEYWORD, offset] => {
                    epochs.high_watermark = offset.parse().map_err(|_| invalid())?
                }
                [epoch, start] => {
                    let entry = (
                        epoch.parse().map_err(|_| invalid())?,
                        start.parse().map_err(|_| invalid())?,
                    );
                    if epochs
                        .latest()
                        .is_some_and(|(e, s)| entry.0 <= e || entry.1 <= s)
                    {
                        return Err(invalid());
                    }
                    epochs.history.push(entry);
                }
                _ => return Err(invalid()),
            }
        }
        // The floor is at least every epoch the history names, whatever the file says.
        if let Some((latest, _)) = epochs.latest() {
            epochs.floor = epochs.floor.max(latest);
        }
        Ok(epochs)
    }
}

/// The leader-epoch file of one partition, and what it holds. `None` inside: a standalone
/// partition (no file).
#[derive(Debug)]
pub struct LeaderEpochFile {
    directory: PathBuf,
    epochs: Option<LeaderEpochs>,
}

impl LeaderEpochFile {
    /// Loads the file of the partition in `directory` (a standalone partition if there is none).
    pub fn load(directory: &Path) -> io::Result<Self> {
        let path = directory.join(LEADER_EPOCHS_FILE);
        let epochs = match fs::read_to_string(&path) {
            Ok(text) => Some(LeaderEpochs::decode(&path, &text)?),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        Ok(Self {
            directory: directory.to_path_buf(),
            epochs,
        })
    }

    /// What the file holds; `None` for a standalone partition.
    pub fn epochs(&self) -> Option<&LeaderEpochs> {
        self.epochs.as_ref()
    }

    /// Whether the partition was ever given a replication role (the file exists).
    pub fn is_replicated(&self) -> bool {
        self.epochs.is_some()
    }

    /// The floor (0 for a standalone partition).
    pub fn floor(&self) -> LeaderEpoch {
        self.epochs.as_ref().map_or(0, |epochs| epochs.floor)
    }

    /// Replaces the file's contents with `epochs`, durably; on failure nothing changes.
    pub fn save(&mut self, epochs: LeaderEpochs) -> io::Result<()> {
        if let Some(current) = &self.epochs {
            debug_assert!(epochs.floor >= current.floor, "the floor never goes down");
        }
        write_durably(
            &self.directory,
            LEADER_EPOCHS_FILE,
            epochs.encode().as_bytes(),
        )?;
        self.epochs = Some(epochs);
        Ok(())
    }

    /// After recovery: a history entry past the log end describes records the log does not
    /// have, and goes; when recovery cut the log (`cut`), so do entries at the log end (the epoch
    /// they start lost its records). The floor stays. Rewritten only if something changed.
    pub fn fit_to_log(&mut self, log_end: u64, cut: bool) -> io::Result<()> {
        let Some(current) = &self.epochs else {
            return Ok(());
        };
        let mut fitted = current.clone();
        fitted
            .history
            .retain(|(_, start)| *start < log_end || (*start == log_end && !cut));
        fitted.high_watermark = fitted.high_watermark.min(log_end);
        if &fitted != current {
            self.save(fitted)?;
        }
        Ok(())
    }
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    fn epochs(history: &[(LeaderEpoch, u64)]) -> LeaderEpochs {
        LeaderEpochs {
            floor: history.last().map_or(0, |(epoch, _)| *epoch),
            history: history.to_vec(),
            ..LeaderEpochs::default()
        }
    }

    /// OffsetsForLeaderEpoch: the largest epoch at or below the one asked, ending where the
    /// next starts (or at the log end); an epoch older than the whole history ended where the
    /// history starts; nothing only for an empty history.
    #[test]
    fn end_offset_for_epoch_follows_kafka() {
        let history = epochs(&[(2, 0), (4, 10), (7, 25)]);
        assert_eq!(history.end_offset_for(1, 40), Some((1, 0)));
        assert_eq!(epochs(&[(5, 12)]).end_offset_for(3, 40), Some((3, 12)));
        assert_eq!(history.end_offset_for(2, 40), Some((2, 10)));
        assert_eq!(history.end_offset_for(3, 40), Some((2, 10)));
        assert_eq!(history.end_offset_for(4, 40), Some((4, 25)));
        assert_eq!(history.end_offset_for(7, 40), Some((7, 40)));
        assert_eq!(history.end_offset_for(9, 40), Some((7, 40)));
        assert_eq!(LeaderEpochs::default().end_offset_for(3, 40), None);
    }

    /// Which epoch wrote an offset, and where the read must stop.
    #[test]
    fn epoch_at_finds_the_entry_and_its_boundary() {
        let history = epochs(&[(2, 5), (4, 10)]);
        assert_eq!(history.epoch_at(0), Some((2, Some(10))));
        assert_eq!(history.epoch_at(9), Some((2, Some(10))));
        assert_eq!(history.epoch_at(10), Some((4, None)));
        assert_eq!(LeaderEpochs::default().epoch_at(0), None);
    }

    /// A new entry replaces empty epochs at its start; older epochs are refused; cutting keeps
    /// the floor.
    #[test]
    fn push_and_cut_keep_the_history_ordered_and_the_floor() {
        let mut history = epochs(&[(2, 0), (3, 10)]);
        history.push(5, 10, 0).unwrap();
        assert_eq!(history.history, vec![(2, 0), (5, 10)]);
        assert!(history.push(4, 12, 0).is_err());
        history.floor = 5;
        history.cut(10);
        assert_eq!(history.history, vec![(2, 0)]);
        assert_eq!(history.floor, 5);
    }

    /// The file round-trips, keeps the floor above the history, and a standalone partition has
    /// none.
    #[test]
    fn file_round_trips() {
        let directory = tempfile::tempdir().unwrap();
        let mut file = LeaderEpochFile::load(directory.path()).unwrap();
        assert!(!file.is_replicated());
        let written = LeaderEpochs {
            floor: 9,
            leased: true,
            high_watermark: 12,
            history: vec![(3, 0), (7, 12)],
        };
        file.save(written.clone()).unwrap();
        let reloaded = LeaderEpochFile::load(directory.path()).unwrap();
        assert_eq!(reloaded.epochs(), Some(&written));
        assert_eq!(
            fs::read_to_string(directory.path().join(LEADER_EPOCHS_FILE)).unwrap(),
            "floor 9\nleased\nhigh-watermark 12\n3 0\n7 12\n"
        );
        fs::write(directory.path().join(LEADER_EPOCHS_FILE), "7 0\n3 5\n").unwrap();
        assert!(LeaderEpochFile::load(directory.path()).is_err());
    }

    /// After a torn tail was cut, entries at or past the new end go; the floor stays.
    #[test]
    fn fitting_to_a_cut_log_drops_entries_past_it() {
        let directory = tempfile::tempdir().unwrap();
        let mut file = LeaderEpochFile::load(directory.path()).unwrap();
        file.save(epochs(&[(1, 0), (2, 8), (3, 20)])).unwrap();
        file.fit_to_log(20, false).unwrap();
        assert_eq!(file.epochs().unwrap().history.len(), 3);
        file.fit_to_log(20, true).unwrap();
        assert_eq!(file.epochs().unwrap().history, vec![(1, 0), (2, 8)]);
        let reloaded = LeaderEpochFile::load(directory.path()).unwrap();
        assert_eq!(reloaded.floor(), 3);
    }

    /// The history is bounded: epochs retention emptied make room, kept ones are an error.
    #[test]
    fn history_is_bounded() {
        let mut history = LeaderEpochs::default();
        for epoch in 0..LEADER_EPOCH_HISTORY_MAX as u32 {
            history.push(epoch, u64::from(epoch) * 10, 0).unwrap();
        }
        let next = LEADER_EPOCH_HISTORY_MAX as u32;
        assert!(history.push(next, u64::from(next) * 10, 0).is_err());
        history.push(next, u64::from(next) * 10, 25).unwrap();
        assert_eq!(history.history.len(), LEADER_EPOCH_HISTORY_MAX);
        assert_eq!(history.history[0], (1, 10));
    }
}
