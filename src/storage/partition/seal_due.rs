//! When a full segment's deferred seal comes due (flush `never`: `PartitionConfig::seal_delay`).
//!
//! A segment of records the partition wrote itself waits `seal_delay` after the roll: its newest
//! records were written moments ago, and a segment that retention deletes within the delay is
//! never synced at all. A follower's copy is different: a follower catching up (new, or back
//! after a restart) copies in seconds segments its leader wrote and sealed long ago. Waiting the
//! whole delay after *its* roll would leave every segment it copied in the last 30 s unsynced,
//! so that a power cut of every replica, which may elect that follower, could take the
//! partition's log back by far more than its last 30 s (the nemesis saw 109 s, from offset 0).
//! So a segment of copied records is due `seal_delay` after the newest record's timestamp (as the
//! leader's would have been, give or take the producers' clocks), and never later than
//! `seal_delay` after the roll: a follower holds no more unsynced than its leader did.
//!
//! Due times of one partition never go backwards: the seal thread runs a partition's jobs in
//! roll order only because their due times do not decrease (`seal::serve`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a segment's seal waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SealDue {
    /// `seal_delay` after the roll: the partition wrote these records itself, just now.
    AfterRoll,
    /// `seal_delay` after the newest record's timestamp, and at the latest `seal_delay` after
    /// the roll: records copied from a leader, which may have written them long ago.
    AfterNewestRecord,
}

/// When a segment rolled `now` (wall clock `wall_now_ms`, ms since the Unix epoch), whose newest
/// record has timestamp `newest_record_ms` (`i64::MAX` when unknown), is sealed; never before
/// `previous`, the due time of the partition's previous seal.
pub(crate) fn seal_due_at(
    due: SealDue,
    delay: Duration,
    now: Instant,
    wall_now_ms: i64,
    newest_record_ms: i64,
    previous: Instant,
) -> Instant {
    let wait = match due {
        SealDue::AfterRoll => delay,
        SealDue::AfterNewestRecord => {
            // A timestamp in the future (a producer's clock ahead) counts as now.
            let age_ms = wall_now_ms.saturating_sub(newest_record_ms).max(0);
            delay.saturating_sub(Duration::from_millis(age_ms.unsigned_abs()))
        }
    };
    (now + wait).max(previous)
}

/// The wall clock in ms since the Unix epoch, as record timestamps count.
pub(crate) fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    const DELAY: Duration = Duration::from_secs(30);
    const WALL_NOW: i64 = 1_800_000_000_000;

    /// The partition's own records wait the whole delay, whatever their timestamps.
    #[test]
    fn own_records_wait_the_delay_after_the_roll() {
        let now = Instant::now();
        let due = seal_due_at(SealDue::AfterRoll, DELAY, now, WALL_NOW, 0, now);
        assert_eq!(due, now + DELAY);
    }

    /// Copied records are due the delay after their newest timestamp: at once when older than
    /// it, sooner when younger, the whole delay when unknown or in the future.
    #[test]
    fn copied_records_are_due_the_delay_after_their_newest_timestamp() {
        let now = Instant::now();
        let due = |newest| {
            seal_due_at(
                SealDue::AfterNewestRecord,
                DELAY,
                now,
                WALL_NOW,
                newest,
                now,
            )
        };
        assert_eq!(due(WALL_NOW - 109_000), now);
        assert_eq!(due(WALL_NOW - 10_000), now + Duration::from_secs(20));
        assert_eq!(due(WALL_NOW + 5_000), now + DELAY);
        assert_eq!(due(i64::MAX), now + DELAY);
        assert_eq!(due(i64::MIN), now);
    }

    /// A partition's due times never go backwards (its seals run in roll order).
    #[test]
    fn due_times_never_go_backwards() {
        let now = Instant::now();
        let previous = now + Duration::from_secs(12);
        let due = seal_due_at(
            SealDue::AfterNewestRecord,
            DELAY,
            now,
            WALL_NOW,
            WALL_NOW - 60_000,
            previous,
        );
        assert_eq!(due, previous);
    }
}
