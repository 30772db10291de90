//! The replica log (issue 11, storage layer): a leader partition and follower partitions in
//! temporary directories, with batches copied across by the leader-side read and the
//! follower's replicated append, as the replication logic will copy them over the network.

use crate::support::storage;

use std::path::Path;

use bytes::Bytes;
use fencelog::batch::{BatchBuilder, BatchHeader};
use fencelog::cluster::producer_epoch_base;
use fencelog::cluster::replica_log::{ReplicaLog, ReplicaLogError};
use fencelog::compression::Codec;
use fencelog::storage::{
    FenceError, FlushPolicy, Partition, PartitionConfig, ReplicaError, Role, StorageError,
    WriteCredential,
};
use storage::*;

pub(crate) fn open(directory: &Path, config: PartitionConfig) -> Partition {
    Partition::open("t/0", directory, config, &seal_worker()).expect("open partition")
}

pub(crate) fn small(flush: FlushPolicy) -> PartitionConfig {
    config(SMALL_SEGMENT_BYTES, flush)
}

/// Copies everything `leader` has beyond `follower`'s log end, one read (of one leader epoch)
/// at a time, with `leader_epoch` as the fetch's epoch. Returns the follower's log end.
pub(crate) fn replicate(leader: &Partition, follower: &Partition, leader_epoch: u32) -> u64 {
    loop {
        let from = follower.log_end_offset();
        let read = leader.read_for_replication(from, 1500).unwrap();
        if read.batches.is_empty() {
            assert_eq!(from, leader.log_end_offset(), "nothing left to copy");
            return from;
        }
        let bytes: Vec<u8> = read.batches.concat();
        let end = follower
            .append_replicated(&bytes, read.records_epoch, leader_epoch)
            .unwrap();
        assert!(end > from);
    }
}

/// Every batch of the log, byte for byte, read the way a leader reads for followers (not
/// limited by the high watermark), checked to be dense.
fn all_batches(partition: &Partition) -> Vec<Bytes> {
    let mut offset = partition.log_start_offset();
    let mut batches = Vec::new();
    loop {
        let read = partition.read_for_replication(offset, 1 << 20).unwrap();
        if read.batches.is_empty() {
            assert_eq!(offset, partition.log_end_offset());
            return batches;
        }
        for batch in read.batches {
            let header = BatchHeader::parse(&batch).unwrap();
            assert_eq!(header.base_offset, offset, "dense");
            offset = header.next_offset();
            batches.push(batch);
        }
    }
}

/// The `.log` files of a partition directory, by name, with their bytes.
pub(crate) fn segment_files(directory: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".log"))
        .map(|entry| {
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// A granted producer epoch on a leader of `leader_epoch`: the base plus one grant.
pub(crate) fn grant(leader: &Partition, leader_epoch: u32) -> u64 {
    let epoch = leader.current_epoch() + 1;
    assert!(epoch > producer_epoch_base(leader_epoch));
    leader.install_epoch(epoch).unwrap();
    epoch
}

#[test]
fn replicated_logs_are_byte_identical_to_the_leader() {
    // Proves: batches copied with the leader-side read and `append_replicated` land byte for
    // byte (same segment files, rolls included), the follower's history names the leader's
    // epoch from its first offset, and under flush `always` the follower reports only a
    // synced end.
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small(FlushPolicy::Always));
    let follower = open(follower_dir.path(), small(FlushPolicy::Always));
    leader.become_leader(1).unwrap();
    follower.become_follower(1).unwrap();
    let epoch = grant(&leader, 1);
    for tag in 0..40 {
        leader
            .append(&batch(
                epoch,
                tag,
                1 + (tag % 3) as u32,
                40 + tag as usize * 7,
            ))
            .unwrap();
    }
    let end = replicate(&leader, &follower, 1);
    assert_eq!(end, leader.log_end_offset());
    assert_eq!(
        follower.acknowledged_end_offset(),
        end,
        "synced before it returned"
    );
    assert_eq!(all_batches(&follower), all_batches(&leader));
    assert_eq!(
        segment_files(follower_dir.path()),
        segment_files(leader_dir.path())
    );
    assert!(segment_files(leader_dir.path()).len() > 2, "the log rolled");
    assert_eq!(follower.leader_epoch_history(), vec![(1, 0)]);
    assert_eq!(leader.leader_epoch_history(), vec![(1, 0)]);
}

#[test]
fn compressed_batches_replicate_as_they_were_sent() {
    // Proves: a compressing producer's batches (magic 2, every codec) are appended by the
    // leader, copied by a follower (which validates them by decompressing them), land byte for
    // byte, and read back with their records on the follower.
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small(FlushPolicy::Never));
    let follower = open(follower_dir.path(), small(FlushPolicy::Never));
    leader.become_leader(1).unwrap();
    follower.become_follower(1).unwrap();
    let epoch = grant(&leader, 1);
    let codecs = [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];
    for (tag, codec) in codecs.iter().cycle().take(12).enumerate() {
        let mut builder = BatchBuilder::new(epoch).compression(*codec).unwrap();
        for index in 0..50 {
            let value = format!(r#"{{"batch":{tag},"index":{index},"codec":"{codec}"}}"#);
            builder.push(1_000 + index, None, Some(value.as_bytes()));
        }
        leader.append(&builder.finish()).unwrap();
    }
    let end = replicate(&leader, &follower, 1);
    assert_eq!(end, 600);
    let copied = all_batches(&follower);
    assert_eq!(copied, all_batches(&leader));
    for (batch, codec) in copied.iter().zip(codecs.iter().cycle()) {
        let header = BatchHeader::parse(batch).unwrap();
        assert_eq!((header.magic, header.codec_bits()), (2, codec.attribute()));
        let records = fencelog::batch::decode_batch(batch).unwrap();
        assert_eq!(records.len(), 50);
        assert!(
            String::from_utf8_lossy(records[49].value.as_deref().unwrap())
                .contains(&format!("\"index\":49,\"codec\":\"{codec}\""))
        );
    }
}

#[test]
fn consumers_see_only_what_the_high_watermark_allows() {
    // Proves: a replicated partition publishes what `advance_high_watermark` says, capped at
    // what it acknowledged, and reads stop there; the high watermark never goes down.
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small(FlushPolicy::Never));
    let follower = open(follower_dir.path(), small(FlushPolicy::Never));
    leader.become_leader(1).unwrap();
    follower.become_follower(1).unwrap();
    let epoch = grant(&leader, 1);
    for tag in 0..5 {
        leader.append(&batch(epoch, tag, 2, 20)).unwrap();
    }
    assert_eq!(leader.acknowledged_end_offset(), 10);
    assert_eq!(leader.high_watermark(), 0, "nothing is committed yet");
    assert!(leader.read(0, 1 << 20).unwrap().batches.is_empty());
    replicate(&leader, &follower, 1);
    leader.advance_high_watermark(6);
    assert_eq!(leader.high_watermark(), 6);
    let visible = leader.read(0, 1 << 20).unwrap();
    let last = BatchHeader::parse(visible.batches.last().unwrap()).unwrap();
    assert!(
        last.next_offset() <= 6,
        "no record at or past the high watermark is served"
    );
    leader.advance_high_watermark(3);
    assert_eq!(leader.high_watermark(), 6, "never lowered");
    follower.advance_high_watermark(100);
    assert_eq!(
        follower.high_watermark(),
        10,
        "capped at what the follower holds"
    );
}

#[test]
fn fenced_and_unknown_leader_epochs_write_nothing() {
    // Proves: a replicated append from an older leader is fenced and one from a leader epoch
    // not installed is unknown, with both epochs named, and neither writes anything.
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small(FlushPolicy::Always));
    let follower = open(follower_dir.path(), small(FlushPolicy::Always));
    leader.become_leader(5).unwrap();
    follower.become_follower(5).unwrap();
    let epoch = grant(&leader, 5);
    leader.append(&batch(epoch, 0, 3, 10)).unwrap();
    let bytes = leader
        .read_for_replication(0, 1 << 20)
        .unwrap()
        .batches
        .concat();
    assert_eq!(
        ReplicaLog::append_replicated(&follower, &bytes, 4, 4),
        Err(ReplicaLogError::FencedLeaderEpoch {
            epoch: 4,
            current: 5
        })
    );
    assert_eq!(
        ReplicaLog::append_replicated(&follower, &bytes, 5, 6),
        Err(ReplicaLogError::UnknownLeaderEpoch {
            epoch: 6,
            current: 5
        })
    );
    assert_eq!(follower.log_end_offset(), 0);
    assert!(follower.leader_epoch_history().is_empty());
    assert_eq!(
        ReplicaLog::append_replicated(&follower, &bytes, 5, 5),
        Ok(3)
    );
    assert!(matches!(
        ReplicaLog::append_replicated(&follower, &bytes, 5, 5),
        Err(ReplicaLogError::OffsetMismatch {
            base_offset: 0,
            log_end_offset: 3
        })
    ));
    let mut corrupt = bytes.clone();
    *corrupt.last_mut().unwrap() ^= 1;
    assert!(matches!(
        follower.append_replicated(&corrupt, 5, 5),
        Err(StorageError::InvalidBatch(_))
    ));
    assert_eq!(follower.log_end_offset(), 3);
}

#[test]
fn producer_appends_and_grants_are_refused_on_a_follower() {
    // Proves: a follower refuses producer appends and lease grants with `NotLeader`, whose
    // message names the leader epoch it follows; a leader refuses replicated appends.
    let dir = tempfile::tempdir().unwrap();
    let partition = open(dir.path(), small(FlushPolicy::Always));
    partition.install_epoch(1).unwrap();
    partition.append(&batch(1, 0, 1, 10)).unwrap();
    partition.become_follower(7).unwrap();
    assert_eq!(partition.role(), Role::Follower);
    let refused = partition.append(&batch(1, 1, 1, 10)).unwrap_err();
    assert!(matches!(
        refused,
        StorageError::NotLeader { leader_epoch: 7 }
    ));
    assert!(refused.to_string().contains("leader epoch 7"), "{refused}");
    assert!(matches!(
        partition.append_pending_as(WriteCredential::Unleased, &batch(0, 1, 1, 10)),
        Err(StorageError::NotLeader { leader_epoch: 7 })
    ));
    assert!(matches!(
        partition.install_epoch(2),
        Err(StorageError::NotLeader { leader_epoch: 7 })
    ));
    partition.become_leader(8).unwrap();
    assert!(matches!(
        partition.append_replicated(&batch(1, 2, 1, 10), 8, 8),
        Err(StorageError::Replica(ReplicaError::NotFollower { .. }))
    ));
    assert!(matches!(
        ReplicaLog::become_follower(&partition, 7),
        Err(ReplicaLogError::EpochNotNewer {
            epoch: 7,
            current: 8
        })
    ));
}

#[test]
fn become_leader_fences_older_producer_epochs_and_grants_above_the_base() {
    // Proves: taking over in leader epoch 3 installs producer epoch 3 << 32 through the fence:
    // every older producer epoch is fenced, the base itself was never granted (unknown), and the
    // next grant is above it and writes.
    let dir = tempfile::tempdir().unwrap();
    let partition = open(dir.path(), small(FlushPolicy::Always));
    partition.install_epoch(1).unwrap();
    partition.append(&batch(1, 0, 1, 10)).unwrap();
    partition.become_leader(3).unwrap();
    let base = producer_epoch_base(3);
    assert_eq!(partition.current_epoch(), base);
    assert_eq!(partition.leader_epoch_history(), vec![(3, 1)]);
    assert!(matches!(
        partition.append(&batch(1, 1, 1, 10)),
        Err(StorageError::Fence(FenceError::Fenced {
            epoch: 1,
            current
        })) if current == base
    ));
    assert!(matches!(
        partition.append(&batch(base, 1, 1, 10)),
        Err(StorageError::Fence(FenceError::UnknownEpoch { .. }))
    ));
    let granted = grant(&partition, 3);
    assert_eq!(granted, base + 1);
    assert_eq!(
        partition
            .append(&batch(granted, 1, 1, 10))
            .unwrap()
            .base_offset,
        1
    );
    // The same leader epoch again (a restart) keeps the grant: nothing older is re-installed.
    partition.become_leader(3).unwrap();
    assert_eq!(partition.current_epoch(), granted);
}

/// A write without a lease, acknowledged.
fn append_unleased(partition: &Partition) {
    let pending = partition
        .append_pending_as(WriteCredential::Unleased, &batch(0, 9, 1, 10))
        .unwrap();
    partition.acknowledge(pending).unwrap();
}

#[test]
fn unleased_writers_pass_until_the_first_grant_across_leader_changes_and_restarts() {
    // Proves: writers without a lease keep writing on a partition that changes leaders (the
    // producer epoch base is not a grant), the first grant fences them for good, and that
    // survives a restart and a later leader change.
    let dir = tempfile::tempdir().unwrap();
    let unleased = || batch(0, 9, 1, 10);
    {
        let partition = open(dir.path(), small(FlushPolicy::Always));
        partition.become_leader(1).unwrap();
        append_unleased(&partition);
        partition.become_follower(2).unwrap();
        partition.become_leader(3).unwrap();
        append_unleased(&partition);
    }
    {
        let partition = open(dir.path(), small(FlushPolicy::Always));
        assert_eq!(
            partition.role(),
            Role::Follower,
            "a replicated partition reopens as a follower"
        );
        partition.become_leader(4).unwrap();
        append_unleased(&partition);
        grant(&partition, 4);
        assert!(matches!(
            partition.append_pending_as(WriteCredential::Unleased, &unleased()),
            Err(StorageError::Fence(FenceError::Leased { .. }))
        ));
    }
    let partition = open(dir.path(), small(FlushPolicy::Always));
    partition.become_leader(5).unwrap();
    assert!(matches!(
        partition.append_pending_as(WriteCredential::Unleased, &unleased()),
        Err(StorageError::Fence(FenceError::Leased { .. }))
    ));
}

#[test]
fn a_follower_that_copied_leased_records_stays_leased_as_leader() {
    // Proves: a grant made by another leader reaches a follower with the records it wrote: the
    // follower, once leader, refuses writers without a lease, also after a restart.
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small(FlushPolicy::Always));
    leader.become_leader(1).unwrap();
    let epoch = grant(&leader, 1);
    leader.append(&batch(epoch, 0, 1, 10)).unwrap();
    {
        let follower = open(follower_dir.path(), small(FlushPolicy::Always));
        follower.become_follower(1).unwrap();
        replicate(&leader, &follower, 1);
    }
    let follower = open(follower_dir.path(), small(FlushPolicy::Always));
    follower.become_leader(2).unwrap();
    assert!(matches!(
        follower.append_pending_as(WriteCredential::Unleased, &batch(0, 1, 1, 10)),
        Err(StorageError::Fence(FenceError::Leased { .. }))
    ));
}

/// Leader A writes 30 batches in leader epoch 1; follower C copies the first 10, then leads in
/// epoch 2 and writes 5 of its own; follower B had copied all 30 from A. Returns (A, B, C).
fn diverged_replicas(
    directories: [&Path; 3],
    flush: FlushPolicy,
) -> (Partition, Partition, Partition) {
    let a = open(directories[0], small(flush));
    let b = open(directories[1], small(flush));
    let c = open(directories[2], small(flush));
    a.become_leader(1).unwrap();
    b.become_follower(1).unwrap();
    c.become_follower(1).unwrap();
    let epoch = grant(&a, 1);
    for tag in 0..30 {
        a.append(&batch(
            epoch,
            tag,
            1 + (tag % 2) as u32,
            60 + tag as usize * 11,
        ))
        .unwrap();
    }
    replicate(&a, &b, 1);
    while c.log_end_offset() < 14 {
        let read = a.read_for_replication(c.log_end_offset(), 1).unwrap();
        c.append_replicated(&read.batches.concat(), read.records_epoch, 1)
            .unwrap();
    }
    c.become_leader(2).unwrap();
    let epoch = grant(&c, 2);
    for tag in 100..105 {
        c.append(&batch(epoch, tag, 2, 90)).unwrap();
    }
    (a, b, c)
}

#[test]
fn truncation_by_leader_epoch_then_reappend_matches_the_new_leader() {
    // Proves: a follower that copied a deposed leader's tail truncates where the new leader's
    // history says epoch 1 ended (inside a segment, with later segments deleted), then copies
    // the new leader's epoch 2 and ends byte-identical to it, files included, also after a
    // restart; its history follows and its floor never went down.
    let directories = [(); 3].map(|_| tempfile::tempdir().unwrap());
    let paths = [0, 1, 2].map(|index| directories[index].path());
    let (_a, b, c) = diverged_replicas(paths, FlushPolicy::Always);
    b.become_follower(2).unwrap();
    let (latest, _) = b.latest_leader_epoch_entry().unwrap();
    let (epoch, end) = c.end_offset_for_epoch(latest).unwrap();
    assert_eq!((epoch, end), (1, c.leader_epoch_history()[1].1));
    b.truncate_to(end).unwrap();
    assert_eq!(b.log_end_offset(), end);
    assert_eq!(
        b.leader_epoch_floor(),
        2,
        "truncation never lowers the floor"
    );
    replicate(&c, &b, 2);
    assert_eq!(all_batches(&b), all_batches(&c));
    assert_eq!(b.leader_epoch_history(), c.leader_epoch_history());
    drop(b);
    drop(c);
    assert_eq!(segment_files(paths[1]), segment_files(paths[2]));
    let b = open(paths[1], small(FlushPolicy::Always));
    let c = open(paths[2], small(FlushPolicy::Always));
    assert_eq!(all_batches(&b), all_batches(&c));
    assert_eq!(b.leader_epoch_history(), c.leader_epoch_history());
    assert_eq!(b.leader_epoch_floor(), 2);
}

#[test]
fn truncation_rebuilds_producer_state_for_the_shorter_log() {
    // Proves: after a truncation the producer-state table describes the shorter log: a retry
    // of a batch that was cut is appended again (not answered as a duplicate), and one that
    // stayed is answered with its offsets once the follower leads.
    let dir = tempfile::tempdir().unwrap();
    let leader_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small(FlushPolicy::Never));
    let follower = open(dir.path(), small(FlushPolicy::Never));
    leader.become_leader(1).unwrap();
    follower.become_follower(1).unwrap();
    let epoch = grant(&leader, 1);
    let idempotent = |sequence: i32| {
        let mut builder = fencelog::batch::BatchBuilder::with_producer(epoch, 42, 0);
        builder.push(1, None, Some(b"value"));
        builder.finish_with_sequence(sequence)
    };
    for sequence in 0..4 {
        leader.append(&idempotent(sequence)).unwrap();
    }
    replicate(&leader, &follower, 1);
    follower.truncate_to(2).unwrap();
    follower.become_leader(2).unwrap();
    let granted = grant(&follower, 2);
    let retry = |sequence: i32| {
        let mut builder = fencelog::batch::BatchBuilder::with_producer(granted, 42, 0);
        builder.push(1, None, Some(b"value"));
        builder.finish_with_sequence(sequence)
    };
    let kept = follower.append(&retry(1)).unwrap();
    assert!(kept.duplicate, "sequence 1 is still in the log");
    assert_eq!(kept.base_offset, 1);
    let cut = follower.append(&retry(2)).unwrap();
    assert!(!cut.duplicate, "sequence 2 was cut: appended again");
    assert_eq!(cut.base_offset, 2);
}

#[test]
fn truncation_below_the_high_watermark_lowers_it() {
    // Proves: a truncation below the high watermark (the follower asks only when its leader's
    // log is shorter, after a power cut lost committed records) cuts there and brings the high
    // watermark down to the cut, also across a reopen; only a follower cuts.
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), small(FlushPolicy::Always));
    let follower = open(follower_dir.path(), small(FlushPolicy::Always));
    leader.become_leader(1).unwrap();
    follower.become_follower(1).unwrap();
    let epoch = grant(&leader, 1);
    for tag in 0..10 {
        leader.append(&batch(epoch, tag, 1, 10)).unwrap();
    }
    replicate(&leader, &follower, 1);
    follower.advance_high_watermark(6);
    follower.truncate_to(8).unwrap();
    assert_eq!(follower.log_end_offset(), 8);
    assert_eq!(follower.high_watermark(), 6);
    ReplicaLog::truncate_to(&follower, 4).unwrap();
    assert_eq!(follower.log_end_offset(), 4);
    assert_eq!(follower.high_watermark(), 4);
    drop(follower);
    let follower = open(follower_dir.path(), small(FlushPolicy::Always));
    follower.become_follower(1).unwrap();
    assert_eq!(follower.log_end_offset(), 4);
    assert_eq!(follower.high_watermark(), 4);
    assert!(matches!(
        leader.truncate_to(2),
        Err(StorageError::Replica(ReplicaError::NotFollower { .. }))
    ));
}

#[test]
fn history_and_floor_survive_restarts_and_truncation() {
    // Proves: the leader-epoch history and floor are durable; a restarted replica follows with
    // the floor it had, refuses an older leader epoch, and a truncation to the log start
    // empties the history but keeps the floor, also across a restart.
    let dir = tempfile::tempdir().unwrap();
    {
        let partition = open(dir.path(), small(FlushPolicy::Always));
        partition.become_leader(3).unwrap();
        let epoch = grant(&partition, 3);
        partition.append(&batch(epoch, 0, 2, 10)).unwrap();
        partition.become_follower(7).unwrap();
    }
    {
        let partition = open(dir.path(), small(FlushPolicy::Always));
        assert_eq!(partition.leader_epoch_floor(), 7);
        assert_eq!(partition.role(), Role::Follower);
        assert_eq!(partition.leader_epoch_history(), vec![(3, 0)]);
        assert_eq!(partition.end_offset_for_epoch(5), Some((3, 2)));
        // Older than the whole history: it ended where the history starts (Kafka's answer).
        assert_eq!(partition.end_offset_for_epoch(2), Some((2, 0)));
        assert!(partition.become_leader(6).is_err());
        partition.truncate_to(0).unwrap();
        assert!(partition.leader_epoch_history().is_empty());
        assert_eq!(partition.end_offset_for_epoch(2), None);
        assert_eq!(partition.leader_epoch_floor(), 7);
    }
    let partition = open(dir.path(), small(FlushPolicy::Always));
    assert_eq!(partition.log_end_offset(), 0);
    assert_eq!(partition.leader_epoch_floor(), 7);
    assert!(partition.leader_epoch_history().is_empty());
}

#[test]
fn a_standalone_partition_is_unchanged() {
    // Proves: without a role nothing of replication shows: no leader-epoch file, the high
    // watermark follows acknowledgements, and reopening keeps it standalone.
    let dir = tempfile::tempdir().unwrap();
    {
        let partition = fresh(dir.path(), small(FlushPolicy::Always));
        partition.append(&batch(1, 0, 2, 10)).unwrap();
        assert_eq!(partition.role(), Role::Standalone);
        assert_eq!(partition.high_watermark(), 2);
        partition.advance_high_watermark(0);
        assert_eq!(partition.high_watermark(), 2);
        assert!(partition.truncate_to(0).is_err());
    }
    assert!(!dir.path().join("leader-epochs").exists());
    let partition = open(dir.path(), small(FlushPolicy::Always));
    assert_eq!(partition.role(), Role::Standalone);
    assert_eq!(partition.high_watermark(), 2);
}

#[test]
fn the_leader_read_stops_at_each_leader_epoch_boundary() {
    // Proves: one leader-side read returns batches of a single leader epoch, even with room
    // for more, and names that epoch.
    let directories = [(); 3].map(|_| tempfile::tempdir().unwrap());
    let paths = [0, 1, 2].map(|index| directories[index].path());
    let (_a, _b, c) = diverged_replicas(paths, FlushPolicy::Never);
    let boundary = c.leader_epoch_history()[1].1;
    let mut offset = 0;
    while offset < boundary {
        let read = c.read_for_replication(offset, 1 << 20).unwrap();
        assert_eq!(read.records_epoch, 1);
        let last = BatchHeader::parse(read.batches.last().unwrap()).unwrap();
        assert!(last.next_offset() <= boundary);
        offset = last.next_offset();
    }
    let read = c.read_for_replication(boundary, 1 << 20).unwrap();
    assert_eq!(read.records_epoch, 2);
    assert!(!read.batches.is_empty());
}

#[test]
fn leader_epochs_file_is_as_documented() {
    // Proves: the example of `leader-epochs` in docs/storage-format.md is what a replica writes
    // when it led in epoch 3 from offset 0, copied epoch 5's records from offset 12, was told
    // offsets below 20 are committed, and now follows the leader of epoch 7.
    const DOC: &str = include_str!("../../docs/storage-format.md");
    let section = &DOC[DOC.find("## Leader epochs (`leader-epochs`)").unwrap()..];
    let start = section.find("```leader-epochs\n").unwrap() + "```leader-epochs\n".len();
    let documented = &section[start..start + section[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    {
        let replica = open(dir.path(), small(FlushPolicy::Never));
        replica.become_leader(3).unwrap();
        let epoch = grant(&replica, 3);
        for tag in 0..6 {
            replica.append(&batch(epoch, tag, 2, 10)).unwrap();
        }
        replica.become_follower(5).unwrap();
        let copied: Vec<Bytes> = (0..4)
            .map(|tag| batch(producer_epoch_base(5) + 1, tag, 2, 10))
            .collect();
        replica
            .append_replicated(&rebase(&copied, 12), 5, 5)
            .unwrap();
        replica.advance_high_watermark(20);
        replica.become_follower(7).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("leader-epochs")).unwrap(),
        documented
    );
}

/// The batches as they would be stored from `base` on (each batch's base offset restamped;
/// outside the CRC).
fn rebase(batches: &[Bytes], base: u64) -> Vec<u8> {
    let mut next = base;
    let mut out = Vec::new();
    for batch in batches {
        let mut bytes = batch.to_vec();
        fencelog::batch::stamp_base_offset(&mut bytes, next);
        next += u64::from(BatchHeader::parse(&bytes).unwrap().record_count);
        out.extend_from_slice(&bytes);
    }
    out
}

/// One step of the follower model test.
#[derive(Debug, Clone)]
enum Step {
    /// Copy up to this many batches from the leader.
    Copy(usize),
    /// Truncate to the start of batch `index % (copied + 1)`.
    Truncate(usize),
    /// The leader says the first `index % (copied + 1)` batches are committed.
    Advance(usize),
    /// Close and reopen the follower.
    Reopen,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (1usize..8).prop_map(Step::Copy),
        2 => any::<usize>().prop_map(Step::Truncate),
        1 => any::<usize>().prop_map(Step::Advance),
        1 => Just(Step::Reopen),
    ]
}

proptest::proptest! {
    #![proptest_config(crate::support::proptest_config(24))]

    /// Proves: whatever sequence of copies, truncations, high-watermark advances and restarts
    /// a follower goes through, its log is exactly a prefix of the leader's (byte for byte),
    /// its high watermark is what the model says (down only to a cut, never past its log), a
    /// truncation below it brings it down to the cut, and its history and floor agree.
    #[test]
    fn a_follower_matches_a_simple_model(steps in proptest::collection::vec(step(), 1..24)) {
        let leader_dir = tempfile::tempdir().unwrap();
        let follower_dir = tempfile::tempdir().unwrap();
        let leader = open(leader_dir.path(), small(FlushPolicy::Never));
        leader.become_leader(1).unwrap();
        let epoch = grant(&leader, 1);
        for tag in 0..30 {
            leader.append(&batch(epoch, tag, 1 + (tag % 3) as u32, 50 + tag as usize * 13)).unwrap();
        }
        let expected = all_batches(&leader);
        let offset_of = |index: usize| {
            expected.get(index).map_or(leader.log_end_offset(), |batch| {
                BatchHeader::parse(batch).unwrap().base_offset
            })
        };
        let mut follower = open(follower_dir.path(), small(FlushPolicy::Never));
        follower.become_follower(1).unwrap();
        let (mut copied, mut high_watermark) = (0usize, 0u64);
        for step in steps {
            match step {
                Step::Copy(count) => {
                    for _ in 0..count.min(expected.len() - copied) {
                        let read = leader.read_for_replication(offset_of(copied), 1).unwrap();
                        follower.append_replicated(&read.batches.concat(), read.records_epoch, 1).unwrap();
                        copied += 1;
                    }
                }
                Step::Truncate(index) => {
                    let index = index % (copied + 1);
                    follower.truncate_to(offset_of(index)).unwrap();
                    copied = index;
                    high_watermark = high_watermark.min(offset_of(index));
                }
                Step::Advance(index) => {
                    let offset = offset_of(index % (copied + 1));
                    follower.advance_high_watermark(offset);
                    high_watermark = high_watermark.max(offset);
                }
                Step::Reopen => {
                    drop(follower);
                    follower = open(follower_dir.path(), small(FlushPolicy::Never));
                    follower.become_follower(1).unwrap();
                }
            }
            proptest::prop_assert_eq!(&all_batches(&follower), &expected[..copied]);
            proptest::prop_assert_eq!(follower.log_end_offset(), offset_of(copied));
            proptest::prop_assert_eq!(follower.high_watermark(), high_watermark);
            proptest::prop_assert_eq!(follower.leader_epoch_floor(), 1);
            let history = if copied > 0 { vec![(1, 0)] } else { vec![] };
            proptest::prop_assert_eq!(follower.leader_epoch_history(), history);
        }
    }
}

#[test]
fn truncation_into_a_sealed_segment_not_opened_since_the_restart() {
    // Proves: after a restart, sealed segments are opened on first use (not at open); a
    // truncation that cuts into one of them, with later segments to delete, opens it, cuts at
    // the batch boundary, and the follower then copies the leader again byte for byte.
    let directories = [(); 2].map(|_| tempfile::tempdir().unwrap());
    let (leader_dir, follower_dir) = (directories[0].path(), directories[1].path());
    let leader = open(leader_dir, small(FlushPolicy::Always));
    leader.become_leader(1).unwrap();
    let epoch = grant(&leader, 1);
    for tag in 0..40 {
        leader.append(&batch(epoch, tag, 2, 200)).unwrap();
    }
    {
        let follower = open(follower_dir, small(FlushPolicy::Always));
        follower.become_follower(1).unwrap();
        replicate(&leader, &follower, 1);
        assert_eq!(follower.log_end_offset(), 80);
    }
    assert!(
        segment_files(follower_dir).len() > 4,
        "the log spans several segments"
    );
    let follower = open(follower_dir, small(FlushPolicy::Always));
    follower.become_follower(2).unwrap();
    // Offset 11 is inside a batch of an early, sealed segment: the cut is before that batch.
    follower.truncate_to(11).unwrap();
    assert_eq!(follower.log_end_offset(), 10);
    assert_eq!(all_batches(&follower), all_batches(&leader)[..5].to_vec());
    drop(leader);
    let leader = open(leader_dir, small(FlushPolicy::Always));
    follower.become_follower(3).unwrap();
    leader.become_leader(3).unwrap();
    replicate(&leader, &follower, 3);
    assert_eq!(all_batches(&follower), all_batches(&leader));
}

#[test]
fn truncation_at_the_log_end_drops_an_epoch_that_wrote_nothing() {
    // Proves: a replica that led epoch 2 without writing anything, then follows epoch 3, drops
    // the empty epoch from its history when it truncates at its log end, so its next question
    // to the leader is about the epoch that really wrote its last records.
    let dir = tempfile::tempdir().unwrap();
    let partition = open(dir.path(), small(FlushPolicy::Always));
    partition.become_leader(1).unwrap();
    let epoch = grant(&partition, 1);
    partition.append(&batch(epoch, 0, 2, 10)).unwrap();
    partition.become_follower(2).unwrap();
    partition.become_leader(2).unwrap();
    assert_eq!(partition.latest_leader_epoch_entry(), Some((2, 2)));
    partition.become_follower(3).unwrap();
    partition.truncate_to(2).unwrap();
    assert_eq!(partition.log_end_offset(), 2);
    assert_eq!(partition.latest_leader_epoch_entry(), Some((1, 0)));
    assert_eq!(partition.leader_epoch_floor(), 3);
    drop(partition);
    let partition = open(dir.path(), small(FlushPolicy::Always));
    assert_eq!(partition.latest_leader_epoch_entry(), Some((1, 0)));
}
