//! The consumer-protocol state machine, driven with explicit clocks: joining, a second member
//! that waits until the first revoked, leaving, session expiry, stale and fenced epochs, static
//! members, both assignors, and a partition count change.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::*;

fn topics(counts: &[(&str, u32)]) -> BTreeMap<String, u32> {
    counts.iter().map(|(t, c)| (t.to_string(), *c)).collect()
}

fn parts(topic: &str, partitions: &[u32]) -> Assignment {
    let mut out = Assignment::new();
    if !partitions.is_empty() {
        out.insert(topic.to_owned(), partitions.iter().copied().collect());
    }
    out
}

fn join(member: &str, subscribed: &[&str]) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout: Some(Duration::from_secs(30)),
        subscribed_topic_names: Some(subscribed.iter().map(|t| t.to_string()).collect()),
        owned: Some(Assignment::new()),
        ..HeartbeatRequest::default()
    }
}

fn beat(member: &str, epoch: i32, owned: Option<Assignment>) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        owned,
        ..HeartbeatRequest::default()
    }
}

/// Every partition of `group` owned by at most one member (assigned or still revoking).
fn assert_no_double_ownership(groups: &ConsumerGroups, now: Instant) {
    let described = groups.describe("g", now).expect("group");
    let mut seen = BTreeSet::new();
    for member in &described.members {
        for (topic, partition) in assignment::pairs(&member.assignment) {
            assert!(
                seen.insert((topic.to_owned(), partition)),
                "{topic}/{partition} twice"
            );
        }
    }
}

/// A lone member gets every partition at once, in epoch 1.
#[test]
fn a_first_member_gets_every_partition_in_the_first_epoch() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let now = Instant::now();
    let answer = groups
        .heartbeat(join("a", &["t"]), &topics(&[("t", 3)]), now)
        .unwrap();
    assert_eq!(answer.member_epoch, 1);
    assert_eq!(answer.assignment, Some(parts("t", &[0, 1, 2])));
    assert_eq!(answer.heartbeat_interval, DEFAULT_HEARTBEAT_INTERVAL);
    let steady = groups
        .heartbeat(beat("a", 1, None), &topics(&[("t", 3)]), now)
        .unwrap();
    assert_eq!((steady.member_epoch, steady.assignment), (1, None));
    assert_eq!(
        groups.describe("g", now).unwrap().state,
        ConsumerGroupState::Stable
    );
}

/// A second member gets the partitions the first gives up only after the first confirmed
/// their revocation; until then nobody owns them twice.
#[test]
fn a_second_member_waits_until_the_first_revoked() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let t = topics(&[("t", 4)]);
    let now = Instant::now();
    groups.heartbeat(join("a", &["t"]), &t, now).unwrap();
    let b = groups.heartbeat(join("b", &["t"]), &t, now).unwrap();
    // b is in epoch 2 but its partitions are a's until a lets them go.
    assert_eq!(b.member_epoch, 2);
    assert_eq!(b.assignment, Some(Assignment::new()));
    assert_no_double_ownership(&groups, now);
    // a is told to keep two: its epoch stays until it confirms.
    let a = groups.heartbeat(beat("a", 1, None), &t, now).unwrap();
    assert_eq!(a.member_epoch, 1);
    let kept = a.assignment.clone().expect("a's shrunk assignment");
    assert_eq!(assignment::count(&kept), 2);
    // b still gets nothing while a has not confirmed.
    let b = groups.heartbeat(beat("b", 2, None), &t, now).unwrap();
    assert_eq!(b.assignment, None);
    assert_eq!(
        groups.describe("g", now).unwrap().state,
        ConsumerGroupState::Reconciling
    );
    // a confirms: it moves to epoch 2; then b gets the other two.
    let a = groups
        .heartbeat(beat("a", 1, Some(kept.clone())), &t, now)
        .unwrap();
    assert_eq!(a.member_epoch, 2);
    let b = groups.heartbeat(beat("b", 2, None), &t, now).unwrap();
    let given = b.assignment.expect("b's partitions");
    assert_eq!(assignment::count(&given), 2);
    assert!(!assignment::intersects(&given, &kept));
    assert_no_double_ownership(&groups, now);
    assert_eq!(
        groups.describe("g", now).unwrap().state,
        ConsumerGroupState::Stable
    );
}

/// KIP-1251: a commit carrying the member's previous epoch (its heartbeat moved the epoch
/// while the commit was in flight) is accepted for the partitions it has held since that
/// epoch, and stale for one it gave up or one it was given only in the newer epoch.
#[test]
fn a_commit_in_the_previous_epoch_is_accepted_for_partitions_still_held_since_then() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let t = topics(&[("t", 2)]);
    let now = Instant::now();
    groups.heartbeat(join("a", &["t"]), &t, now).unwrap();
    groups.heartbeat(join("b", &["t"]), &t, now).unwrap();
    let a = groups.heartbeat(beat("a", 1, None), &t, now).unwrap();
    let kept = a.assignment.unwrap();
    let (_, kept_partitions) = kept.iter().next().unwrap();
    let kept_partition = *kept_partitions.iter().next().unwrap();
    let given_up = 1 - kept_partition;
    let a = groups.heartbeat(beat("a", 1, Some(kept)), &t, now).unwrap();
    assert_eq!(a.member_epoch, 2);
    let stale = Some(Err(ConsumerGroupError::StaleMemberEpoch {
        got: 1,
        current: 2,
    }));
    assert_eq!(
        groups.check_offsets("g", "a", 1, Some(&[("t", kept_partition)]), now),
        Some(Ok(()))
    );
    assert_eq!(
        groups.check_offsets("g", "a", 1, Some(&[("t", given_up)]), now),
        stale
    );
    assert_eq!(
        groups.check_offsets(
            "g",
            "a",
            1,
            Some(&[("t", kept_partition), ("t", given_up)]),
            now
        ),
        stale
    );
    // b was given its partition in epoch 2: a commit of it in epoch 1 is stale.
    groups.heartbeat(beat("b", 2, None), &t, now).unwrap();
    assert_eq!(
        groups.check_offsets("g", "b", 2, Some(&[("t", given_up)]), now),
        Some(Ok(()))
    );
    assert_eq!(
        groups.check_offsets("g", "b", 1, Some(&[("t", given_up)]), now),
        Some(Err(ConsumerGroupError::StaleMemberEpoch {
            got: 1,
            current: 2
        }))
    );
    // A fetch must carry the current epoch.
    assert_eq!(groups.check_offsets("g", "a", 1, None, now), stale);
}

/// A member that leaves (epoch -1) frees its partitions for the others at once.
#[test]
fn a_leaving_member_frees_its_partitions() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let t = topics(&[("t", 2)]);
    let now = Instant::now();
    groups.heartbeat(join("a", &["t"]), &t, now).unwrap();
    groups.heartbeat(join("b", &["t"]), &t, now).unwrap();
    let a = groups.heartbeat(beat("a", 1, None), &t, now).unwrap();
    let kept = a.assignment.unwrap();
    groups.heartbeat(beat("a", 1, Some(kept)), &t, now).unwrap();
    let b = groups.heartbeat(beat("b", 2, None), &t, now).unwrap();
    assert_eq!(assignment::count(&b.assignment.unwrap()), 1);
    let left = groups
        .heartbeat(beat("a", LEAVE_EPOCH, None), &t, now)
        .unwrap();
    assert_eq!(left.member_epoch, LEAVE_EPOCH);
    let b = groups.heartbeat(beat("b", 2, None), &t, now).unwrap();
    assert_eq!(b.member_epoch, 3);
    assert_eq!(b.assignment, Some(parts("t", &[0, 1])));
    // The last member leaving forgets the group.
    groups
        .heartbeat(beat("b", LEAVE_EPOCH, None), &t, now)
        .unwrap();
    assert!(groups.describe("g", now).is_none());
}

/// A member without heartbeats for the session timeout is removed, and so is one that does not
/// confirm a revocation within its rebalance timeout; the others get their partitions.
#[test]
fn silent_members_expire_and_slow_revokers_are_removed() {
    let config = ConsumerGroupConfig::default();
    let groups = ConsumerGroups::new(config.clone());
    let t = topics(&[("t", 2)]);
    let start = Instant::now();
    groups.heartbeat(join("a", &["t"]), &t, start).unwrap();
    groups.heartbeat(join("b", &["t"]), &t, start).unwrap();
    // a is told to revoke, and never confirms: after its rebalance timeout (30 s) it is gone.
    groups.heartbeat(beat("a", 1, None), &t, start).unwrap();
    let later = start + Duration::from_secs(31);
    let b = groups.heartbeat(beat("b", 2, None), &t, later).unwrap();
    assert_eq!(b.assignment, Some(parts("t", &[0, 1])));
    assert_eq!(
        groups.heartbeat(beat("a", 1, None), &t, later),
        Err(ConsumerGroupError::UnknownMemberId)
    );
    // b goes silent for longer than the session timeout.
    let much_later = later + config.session_timeout + Duration::from_secs(1);
    assert!(groups.describe("g", much_later).is_none());
}

/// A heartbeat with an epoch the member is not in is fenced; a member joining again with
/// epoch 0 gets its partitions back; commits check the epoch too (older: stale; newer:
/// fenced; outside the group: unknown member).
#[test]
fn wrong_epochs_are_fenced_and_stale_commits_refused() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let t = topics(&[("t", 2)]);
    let now = Instant::now();
    groups.heartbeat(join("a", &["t"]), &t, now).unwrap();
    assert_eq!(
        groups.heartbeat(beat("a", 7, None), &t, now),
        Err(ConsumerGroupError::FencedMemberEpoch { got: 7, current: 1 })
    );
    // Joining again (its join answer was lost): it owns nothing and gets its partitions back.
    let retry = groups.heartbeat(join("a", &["t"]), &t, now).unwrap();
    assert_eq!(retry.member_epoch, 1);
    assert_eq!(retry.assignment, Some(parts("t", &[0, 1])));
    assert_eq!(groups.check_offsets("g", "a", 1, None, now), Some(Ok(())));
    assert_eq!(
        groups.check_offsets("g", "a", 0, None, now),
        Some(Err(ConsumerGroupError::StaleMemberEpoch {
            got: 0,
            current: 1
        }))
    );
    assert_eq!(
        groups.check_offsets("g", "a", 2, None, now),
        Some(Err(ConsumerGroupError::FencedMemberEpoch {
            got: 2,
            current: 1
        }))
    );
    assert_eq!(
        groups.check_offsets("g", "", -1, None, now),
        Some(Err(ConsumerGroupError::UnknownMemberId))
    );
    assert_eq!(groups.check_offsets("other", "", -1, None, now), None);
    assert_eq!(
        groups.heartbeat(beat("zz", 3, None), &t, now),
        Err(ConsumerGroupError::UnknownMemberId)
    );
}

/// Malformed heartbeats, unknown assignors, regex subscriptions and a full group are refused
/// with their own errors.
#[test]
fn refusals_have_their_errors() {
    let config = ConsumerGroupConfig {
        max_members_per_group: 1,
        ..ConsumerGroupConfig::default()
    };
    let groups = ConsumerGroups::new(config);
    let t = topics(&[("t", 1)]);
    let now = Instant::now();
    let invalid = |result: Result<HeartbeatAnswer, ConsumerGroupError>| {
        matches!(result, Err(ConsumerGroupError::InvalidRequest { .. }))
    };
    assert!(invalid(groups.heartbeat(join("", &["t"]), &t, now)));
    let mut no_subscription = join("a", &["t"]);
    no_subscription.subscribed_topic_names = None;
    assert!(invalid(groups.heartbeat(no_subscription, &t, now)));
    let mut long = join("a", &["t"]);
    long.instance_id = Some("i".repeat(MAX_MEMBER_ID_BYTES + 1));
    assert!(invalid(groups.heartbeat(long, &t, now)));
    let mut regex = join("a", &["t"]);
    regex.subscribed_topic_regex = Some("^t.*".into());
    assert!(invalid(groups.heartbeat(regex, &t, now)));
    let mut sticky = join("a", &["t"]);
    sticky.server_assignor = Some("sticky".into());
    assert_eq!(
        groups.heartbeat(sticky, &t, now),
        Err(ConsumerGroupError::UnsupportedAssignor {
            name: "sticky".into()
        })
    );
    groups.heartbeat(join("a", &["t"]), &t, now).unwrap();
    assert_eq!(
        groups.heartbeat(join("b", &["t"]), &t, now),
        Err(ConsumerGroupError::GroupMaxSizeReached { max: 1 })
    );
}

/// A static member's instance id is its own while it lives; after a static leave (-2) its
/// next incarnation takes its place and its partitions without a rebalance.
#[test]
fn a_static_member_rejoins_with_its_assignment() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let t = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut first = join("a1", &["t"]);
    first.instance_id = Some("i".into());
    groups.heartbeat(first.clone(), &t, now).unwrap();
    let mut second = join("a2", &["t"]);
    second.instance_id = Some("i".into());
    assert_eq!(
        groups.heartbeat(second.clone(), &t, now),
        Err(ConsumerGroupError::UnreleasedInstanceId {
            instance_id: "i".into()
        })
    );
    let left = groups
        .heartbeat(beat("a1", STATIC_LEAVE_EPOCH, None), &t, now)
        .unwrap();
    assert_eq!(left.member_epoch, STATIC_LEAVE_EPOCH);
    let back = groups.heartbeat(second, &t, now).unwrap();
    assert_eq!(back.member_epoch, 1);
    assert_eq!(back.assignment, Some(parts("t", &[0, 1])));
}

/// More partitions on a subscribed topic move the group epoch and the new ones are assigned;
/// a retry of the lost answer (previous epoch, owned partitions it had) is answered, not
/// fenced.
#[test]
fn a_partition_count_change_reassigns() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let now = Instant::now();
    groups
        .heartbeat(join("a", &["t"]), &topics(&[("t", 1)]), now)
        .unwrap();
    let grown = groups
        .heartbeat(beat("a", 1, None), &topics(&[("t", 3)]), now)
        .unwrap();
    assert_eq!(grown.member_epoch, 2);
    assert_eq!(grown.assignment, Some(parts("t", &[0, 1, 2])));
    // The answer was lost: the member retries with its previous epoch and what it owned then,
    // and is told its current epoch and assignment rather than fenced.
    let retried = groups
        .heartbeat(
            beat("a", 1, Some(parts("t", &[0]))),
            &topics(&[("t", 3)]),
            now,
        )
        .unwrap();
    assert_eq!(retried.member_epoch, 2);
    assert_eq!(retried.assignment, Some(parts("t", &[0, 1, 2])));
}

fn subscriptions(members: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    members
        .iter()
        .map(|(m, topics)| {
            (
                m.to_string(),
                topics.iter().map(|t| t.to_string()).collect(),
            )
        })
        .collect()
}

/// Range gives each member contiguous partitions of each topic, the first ones one more.
#[test]
fn the_range_assignor_splits_each_topic_in_ranges() {
    let subs = subscriptions(&[("a", &["t", "u"]), ("b", &["t", "u"])]);
    let targets = Assignor::Range.assign(&subs, &topics(&[("t", 3), ("u", 2)]), &BTreeMap::new());
    let mut a = parts("t", &[0, 1]);
    a.extend(parts("u", &[0]));
    let mut b = parts("t", &[2]);
    b.extend(parts("u", &[1]));
    assert_eq!(targets["a"], a);
    assert_eq!(targets["b"], b);
}

/// Uniform balances within one partition, assigns every partition once, and keeps what a
/// member had when another joins.
#[test]
fn the_uniform_assignor_is_balanced_complete_and_sticky() {
    let counts = topics(&[("t", 5), ("u", 2)]);
    let two = subscriptions(&[("a", &["t", "u"]), ("b", &["t", "u"])]);
    let before = Assignor::Uniform.assign(&two, &counts, &BTreeMap::new());
    let three = subscriptions(&[("a", &["t", "u"]), ("b", &["t", "u"]), ("c", &["t", "u"])]);
    let after = Assignor::Uniform.assign(&three, &counts, &before);
    let sizes: Vec<usize> = after.values().map(assignment::count).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 7);
    assert!(
        sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
        "{sizes:?}"
    );
    let mut all = BTreeSet::new();
    for target in after.values() {
        for pair in assignment::pairs(target) {
            assert!(all.insert((pair.0.to_owned(), pair.1)));
        }
    }
    for member in ["a", "b"] {
        let kept = assignment::intersection(&before[member], &after[member]);
        assert!(assignment::count(&kept) >= 2, "{member} kept {kept:?}");
    }
    // A member reading only `u` gets only `u` partitions.
    let mixed = subscriptions(&[("a", &["t", "u"]), ("b", &["u"])]);
    let targets = Assignor::Uniform.assign(&mixed, &counts, &BTreeMap::new());
    assert!(targets["b"].keys().all(|topic| topic == "u"));
    assert_eq!(targets.values().map(assignment::count).sum::<usize>(), 7);
}

/// The group uses the assignor its members ask for; range on a group asking for it.
#[test]
fn the_group_uses_the_assignor_its_members_name() {
    let groups = ConsumerGroups::new(ConsumerGroupConfig::default());
    let t = topics(&[("t", 4)]);
    let now = Instant::now();
    let mut a = join("a", &["t"]);
    a.server_assignor = Some("range".into());
    groups.heartbeat(a, &t, now).unwrap();
    assert_eq!(groups.describe("g", now).unwrap().assignor, Assignor::Range);
}
