//! Which leader epoch wrote a given offset, found from the leader-epoch history that
//! [`ReplicaLog::end_offset_for_epoch`] exposes.
//!
//! A fetch response carries records of one epoch only (the follower records that epoch in its
//! own history before it appends), so the leader needs the epoch containing the fetch offset and
//! where that epoch ends. The trait answers "where did epoch `e` end"; walking it backwards from
//! the latest entry answers "which epoch holds offset `o`" without another trait method. The walk
//! costs one lookup per epoch newer than the one found, which is a handful in practice.

use super::ReplicaLog;
use crate::cluster::LeaderEpoch;

/// The epoch holding `offset` in `log` and the offset where that epoch ends (the start of the
/// next epoch, or the log end). `None` when `offset` is at or past the log end, or below the
/// first entry of the history (records the history does not describe).
pub fn epoch_containing(log: &dyn ReplicaLog, offset: u64) -> Option<(LeaderEpoch, u64)> {
    if offset >= log.log_end_offset() {
        return None;
    }
    let (mut epoch, _) = log.latest_epoch_entry()?;
    loop {
        let (found, end) = log.end_offset_for_epoch(epoch)?;
        // The start of `found` is the end of the entry before it.
        let start = match found.checked_sub(1) {
            Some(before) => log.end_offset_for_epoch(before).map_or(0, |(_, end)| end),
            None => 0,
        };
        if offset >= start {
            return (offset < end).then_some((found, end));
        }
        epoch = found.checked_sub(1)?;
    }
}
