//! Unit tests of the committed-offset store: durability across reopen, damaged and torn files,
//! the limits, and a failed write that must not be acknowledged or kept.

use std::time::Instant;

use super::*;

fn open(directory: &Path) -> GroupOffsets {
    GroupOffsets::open(directory, GroupOffsetsConfig::default()).expect("open store")
}

fn small_limits() -> GroupOffsetsConfig {
    GroupOffsetsConfig {
        max_group_name_bytes: 8,
        max_groups: 2,
        max_offsets_per_group: 2,
        max_metadata_bytes: 4,
    }
}

#[test]
fn committed_offsets_survive_reopening() {
    // Proves: what a commit acknowledged is read back after the store is reopened, the last
    // commit of a partition wins, and groups do not see each other's offsets.
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    store
        .commit("billing", "orders", 0, CommittedOffset::at(3))
        .unwrap();
    store
        .commit(
            "billing",
            "orders",
            0,
            CommittedOffset {
                offset: 5,
                metadata: "host-1".into(),
            },
        )
        .unwrap();
    store
        .commit("billing", "orders", 1, CommittedOffset::at(9))
        .unwrap();
    store
        .commit("audit", "orders", 0, CommittedOffset::at(1))
        .unwrap();
    drop(store);

    let store = open(directory.path());
    assert_eq!(store.group_count(), 2);
    assert_eq!(
        store.committed("billing", "orders", 0).unwrap(),
        Some(CommittedOffset {
            offset: 5,
            metadata: "host-1".into()
        })
    );
    assert_eq!(
        store.committed("billing", "orders", 1).unwrap(),
        Some(CommittedOffset::at(9))
    );
    assert_eq!(
        store.committed("audit", "orders", 0).unwrap(),
        Some(CommittedOffset::at(1))
    );
    assert_eq!(store.committed("audit", "orders", 1).unwrap(), None);
    assert_eq!(store.committed("nobody", "orders", 0).unwrap(), None);
    assert_eq!(store.committed_all("billing").unwrap().len(), 2);
}

#[test]
fn an_interrupted_commit_leaves_the_previous_offset() {
    // Proves: a crash during a commit (a torn temporary file next to the bucket file) yields the
    // last acknowledged offset on reopen, never a wrong one.
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    store
        .commit("billing", "orders", 0, CommittedOffset::at(7))
        .unwrap();
    drop(store);
    let name = bucket_file::file_name(bucket_file::bucket_of("billing"));
    let next = {
        let mut groups = BucketGroups::new();
        groups
            .entry("billing".to_string())
            .or_default()
            .insert(("orders".into(), 0), CommittedOffset::at(8));
        bucket_file::encode(&groups)
    };
    let torn = &next[..next.len() / 2];
    fs::write(directory.path().join(format!("{name}.tmp")), torn).unwrap();

    let store = open(directory.path());
    assert_eq!(
        store.committed("billing", "orders", 0).unwrap(),
        Some(CommittedOffset::at(7))
    );
    // The next commit goes through and replaces the leftover.
    store
        .commit("billing", "orders", 0, CommittedOffset::at(9))
        .unwrap();
    drop(store);
    assert_eq!(
        open(directory.path())
            .committed("billing", "orders", 0)
            .unwrap(),
        Some(CommittedOffset::at(9))
    );
}

#[test]
fn a_damaged_file_is_refused_for_its_groups_only() {
    // Proves: a bucket file that fails its check is neither served nor overwritten (its group
    // answers Corrupt, for reads and commits), while other groups work on.
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    store
        .commit("billing", "orders", 0, CommittedOffset::at(7))
        .unwrap();
    store
        .commit("audit", "orders", 0, CommittedOffset::at(2))
        .unwrap();
    drop(store);
    let path = directory
        .path()
        .join(bucket_file::file_name(bucket_file::bucket_of("billing")));
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    fs::write(&path, &bytes).unwrap();

    let store = open(directory.path());
    assert!(matches!(
        store.committed("billing", "orders", 0),
        Err(GroupOffsetsError::Corrupt { .. })
    ));
    assert!(matches!(
        store.commit("billing", "orders", 0, CommittedOffset::at(8)),
        Err(GroupOffsetsError::Corrupt { .. })
    ));
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "the damaged file is left as it was"
    );
    assert_eq!(
        store.committed("audit", "orders", 0).unwrap(),
        Some(CommittedOffset::at(2))
    );
}

#[test]
fn a_failed_write_is_neither_acknowledged_nor_kept() {
    // Proves: when the disk write fails the commit returns an error and the store keeps serving
    // the last durable offset (and does not count a group that was never stored).
    let root = tempfile::tempdir().unwrap();
    let directory = root.path().join("groups");
    let store = open(&directory);
    store
        .commit("billing", "orders", 0, CommittedOffset::at(7))
        .unwrap();
    // Pull the directory out from under the store: every write now fails.
    fs::rename(&directory, root.path().join("moved")).unwrap();
    fs::write(&directory, b"not a directory").unwrap();
    assert!(matches!(
        store.commit("billing", "orders", 0, CommittedOffset::at(8)),
        Err(GroupOffsetsError::Io { .. })
    ));
    assert!(matches!(
        store.commit("audit", "orders", 0, CommittedOffset::at(1)),
        Err(GroupOffsetsError::Io { .. })
    ));
    assert_eq!(
        store.committed("billing", "orders", 0).unwrap(),
        Some(CommittedOffset::at(7))
    );
    assert_eq!(store.committed("audit", "orders", 0).unwrap(), None);
    assert_eq!(store.group_count(), 1);
}

#[test]
fn limits_are_enforced_with_typed_errors() {
    // Proves: each limit (group name length, metadata length, groups, offsets per group) refuses
    // the commit that would pass it, with its own error, and stores nothing.
    let directory = tempfile::tempdir().unwrap();
    let store = GroupOffsets::open(directory.path(), small_limits()).unwrap();
    assert!(matches!(
        store.commit("", "t", 0, CommittedOffset::at(1)),
        Err(GroupOffsetsError::InvalidGroupName { bytes: 0, max: 8 })
    ));
    assert!(matches!(
        store.committed("nine-byte", "t", 0),
        Err(GroupOffsetsError::InvalidGroupName { bytes: 9, max: 8 })
    ));
    assert!(matches!(
        store.commit("", "", 0, CommittedOffset::at(1)),
        Err(GroupOffsetsError::InvalidGroupName { .. })
    ));
    assert!(matches!(
        store.commit("g", "", 0, CommittedOffset::at(1)),
        Err(GroupOffsetsError::InvalidTopicName { .. })
    ));
    let long_metadata = CommittedOffset {
        offset: 1,
        metadata: "12345".into(),
    };
    assert!(matches!(
        store.commit("g", "t", 0, long_metadata),
        Err(GroupOffsetsError::MetadataTooLarge { bytes: 5, max: 4 })
    ));
    store.commit("a", "t", 0, CommittedOffset::at(1)).unwrap();
    store.commit("a", "t", 1, CommittedOffset::at(1)).unwrap();
    assert!(matches!(
        store.commit("a", "t", 2, CommittedOffset::at(1)),
        Err(GroupOffsetsError::TooManyOffsets { max: 2, .. })
    ));
    // Recommitting a partition the group already has is not a new entry.
    store.commit("a", "t", 1, CommittedOffset::at(2)).unwrap();
    store.commit("b", "t", 0, CommittedOffset::at(1)).unwrap();
    assert!(matches!(
        store.commit("c", "t", 0, CommittedOffset::at(1)),
        Err(GroupOffsetsError::TooManyGroups { max: 2 })
    ));
    assert_eq!(store.group_count(), 2);
    assert_eq!(store.committed("a", "t", 2).unwrap(), None);
    assert_eq!(store.committed("c", "t", 0).unwrap(), None);
    drop(store);
    let reopened = GroupOffsets::open(directory.path(), small_limits()).unwrap();
    assert_eq!(reopened.group_count(), 2);
}

#[test]
fn commit_all_writes_several_partitions_at_once() {
    // Proves: a multi-partition commit (the shape of Kafka's OffsetCommit) is stored whole.
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    let offsets = (0..3)
        .map(|partition| {
            (
                ("t".to_string(), partition),
                CommittedOffset::at(10 + u64::from(partition)),
            )
        })
        .collect();
    store.commit_all("g", offsets).unwrap();
    drop(store);
    let all = open(directory.path()).committed_all("g").unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[2], (("t".to_string(), 2), CommittedOffset::at(12)));
}

/// Not a test of behaviour: a measurement for the design note (run with
/// `cargo test --release --lib group_offsets_commit_cost -- --ignored --nocapture`). Compares
/// a commit (temporary file, fsync, rename, directory fsync) with the cheapest durable
/// alternative, an append plus `fdatasync` to one log.
#[test]
#[ignore]
fn group_offsets_commit_cost() {
    use std::io::Write;
    const COMMITS: u32 = 200;
    let directory = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let store = open(&directory.path().join("groups"));
    let started = Instant::now();
    for offset in 0..COMMITS {
        store
            .commit("bench", "orders", 0, CommittedOffset::at(u64::from(offset)))
            .unwrap();
    }
    let rewrite = started.elapsed() / COMMITS;
    let mut log = fs::File::create(directory.path().join("append.log")).unwrap();
    let started = Instant::now();
    for offset in 0..COMMITS {
        log.write_all(&u64::from(offset).to_be_bytes()).unwrap();
        log.sync_data().unwrap();
    }
    let append = started.elapsed() / COMMITS;
    println!("per commit: rewrite-and-rename {rewrite:?}, append+fdatasync {append:?}");
}

#[test]
fn group_names_lists_every_group_with_offsets_after_reopening() {
    // Proves: the admin listing names each group that committed, once, sorted, also after the
    // store is reopened; a group that never committed is not there.
    let directory = tempfile::tempdir().unwrap();
    let store = open(directory.path());
    for group in ["zeta", "alpha", "mid"] {
        store
            .commit(group, "orders", 0, CommittedOffset::at(1))
            .unwrap();
        store
            .commit(group, "orders", 1, CommittedOffset::at(2))
            .unwrap();
    }
    assert_eq!(store.group_names(), ["alpha", "mid", "zeta"]);
    drop(store);
    let reopened = open(directory.path());
    assert_eq!(reopened.group_names(), ["alpha", "mid", "zeta"]);
    assert!(reopened.has_group("mid"));
    assert!(!reopened.has_group("never"));
}

fn membership_snapshot(generation: i32) -> crate::broker::coordinator::GroupSnapshot {
    use crate::broker::coordinator::{GroupSnapshot, MemberSnapshot};
    GroupSnapshot {
        generation,
        protocol_type: Some("consumer".into()),
        protocol: Some("range".into()),
        leader: Some("m-1".into()),
        members: vec![MemberSnapshot {
            member_id: "m-1".into(),
            group_instance_id: Some("instance-1".into()),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 300_000,
            subscription: "AAE=".into(),
            assignment: "AAI=".into(),
        }],
        rebalance: false,
    }
}

#[test]
fn group_memberships_round_trip_through_their_files() {
    // Proves: what `save` stored is what `open` loads (every field), a later save of a group
    // replaces it, and a save without members removes it and its file.
    use crate::broker::coordinator::GroupStore;
    use membership::GroupMemberships;
    let directory = tempfile::tempdir().unwrap();
    let (store, loaded) = GroupMemberships::open(directory.path()).unwrap();
    assert!(
        loaded.is_empty(),
        "a directory without membership files opens empty"
    );
    store.save("billing", &membership_snapshot(3)).unwrap();
    store.save("billing", &membership_snapshot(4)).unwrap();
    store.save("audit", &membership_snapshot(7)).unwrap();
    let (_, mut loaded) = GroupMemberships::open(directory.path()).unwrap();
    loaded.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        loaded,
        vec![
            ("audit".to_string(), membership_snapshot(7)),
            ("billing".to_string(), membership_snapshot(4)),
        ]
    );
    let mut emptied = membership_snapshot(5);
    emptied.members.clear();
    store.save("billing", &emptied).unwrap();
    let (_, loaded) = GroupMemberships::open(directory.path()).unwrap();
    assert_eq!(loaded, vec![("audit".to_string(), membership_snapshot(7))]);
    let file = directory
        .path()
        .join(membership_file::file_name(bucket_file::bucket_of(
            "billing",
        )));
    assert!(!file.exists(), "a bucket without groups has no file");
}

#[test]
fn a_torn_or_damaged_membership_file_drops_its_groups_only() {
    // Proves: a truncated (torn) file, one with a flipped byte, and one of another format are
    // refused whole on open, without failing the open: their groups are dropped (members
    // rejoin), the other groups load, and the committed offsets next to them still open.
    use crate::broker::coordinator::GroupStore;
    use membership::GroupMemberships;
    let directory = tempfile::tempdir().unwrap();
    let (store, _) = GroupMemberships::open(directory.path()).unwrap();
    for group in ["torn", "flipped", "foreign", "kept"] {
        store.save(group, &membership_snapshot(2)).unwrap();
    }
    let path_of = |group: &str| {
        directory
            .path()
            .join(membership_file::file_name(bucket_file::bucket_of(group)))
    };
    let torn = fs::read(path_of("torn")).unwrap();
    fs::write(path_of("torn"), &torn[..torn.len() - 5]).unwrap();
    let mut flipped = fs::read(path_of("flipped")).unwrap();
    let last = flipped.len() - 3;
    flipped[last] ^= 0x20;
    fs::write(path_of("flipped"), &flipped).unwrap();
    fs::write(path_of("foreign"), b"not a membership file at all").unwrap();
    let (store, loaded) = GroupMemberships::open(directory.path()).unwrap();
    assert_eq!(loaded, vec![("kept".to_string(), membership_snapshot(2))]);
    // A damaged bucket is rewritten with what is saved next.
    store.save("torn", &membership_snapshot(3)).unwrap();
    let (_, mut loaded) = GroupMemberships::open(directory.path()).unwrap();
    loaded.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(loaded.len(), 2);
    assert_eq!(loaded[1], ("torn".to_string(), membership_snapshot(3)));
    open(directory.path());

    let file =
        membership_file::encode(&[("kept".to_string(), membership_snapshot(2))].into()).unwrap();
    for cut in [0, 3, membership_file::HEADER_BYTES, file.len() - 1] {
        assert!(
            membership_file::decode(bucket_file::bucket_of("kept"), &file[..cut]).is_err(),
            "a file cut at {cut} bytes is refused"
        );
    }
    assert!(membership_file::decode(bucket_file::bucket_of("other"), &file).is_err());
}
