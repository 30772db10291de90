//! A follower's seals under flush `never` (issue 56): segments of records copied from a leader
//! come due the seal delay after their newest record's timestamp, not after the follower's roll
//! (`src/storage/partition/seal_due.rs`).

use std::path::Path;

use fencelog::storage::{FlushPolicy, PartitionConfig};

use super::replica_log::{grant, open, replicate, segment_files, small};
use crate::support::storage::batch_at;

/// The recovery point a partition directory's `recovery-point` file holds (0 without one).
fn recovery_point_of(directory: &Path) -> u64 {
    std::fs::read_to_string(directory.join("recovery-point"))
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// The base offset of the newest segment file (the active segment).
fn active_segment_base(directory: &Path) -> u64 {
    let (name, _) = segment_files(directory).pop().expect("a segment");
    name.trim_end_matches(".log").parse().unwrap()
}

#[test]
fn a_follower_catching_up_seals_what_it_copies_of_old_records_at_once() {
    // Proves (issue 56): under flush `never`, with a seal delay, a follower's segments of copied
    // records come due the delay after their newest record's timestamp, not after its own roll:
    // a follower catching up on records written long ago syncs them at once (the long nemesis
    // run saw a power cut of every broker elect such a follower and take its log back to offset
    // 0), while the leader's own segments, and copies of records written now, wait the delay.
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let config = PartitionConfig {
        seal_delay: std::time::Duration::from_secs(3600),
        ..small(FlushPolicy::Never)
    };
    let leader = open(leader_dir.path(), config);
    leader.become_leader(1).unwrap();
    let epoch = grant(&leader, 1);
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let an_hour_ago = now_ms() - 3_600_000;
    while segment_files(leader_dir.path()).len() < 4 {
        leader
            .append(&batch_at(epoch, an_hour_ago, 3, 200))
            .unwrap();
    }
    let follower = open(follower_dir.path(), config);
    follower.become_follower(1).unwrap();
    replicate(&leader, &follower, 1);
    let caught_up = active_segment_base(follower_dir.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while recovery_point_of(follower_dir.path()) < caught_up && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        recovery_point_of(follower_dir.path()),
        caught_up,
        "the follower synced every full segment of old records it copied"
    );
    assert_eq!(
        recovery_point_of(leader_dir.path()),
        0,
        "the leader's own segments wait the delay after its roll"
    );

    // Records written now: the follower's copies wait the delay too.
    let first_new = leader.log_end_offset();
    while active_segment_base(leader_dir.path()) <= first_new + 1 {
        leader.append(&batch_at(epoch, now_ms(), 3, 200)).unwrap();
    }
    replicate(&leader, &follower, 1);
    assert!(active_segment_base(follower_dir.path()) > caught_up);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        recovery_point_of(follower_dir.path()),
        caught_up,
        "copies of records written now are not sealed before the delay"
    );
}
