//! The group state machine under tokio's paused clock: joins that land in one generation, the
//! leader's assignment relayed, rebalances on join, leave and session expiry, and the checks of
//! offset commits.

use std::time::Duration;

use bytes::Bytes;

use super::*;

const SESSION: Duration = Duration::from_secs(10);

fn coordinator() -> Arc<GroupCoordinator> {
    GroupCoordinator::start(CoordinatorConfig {
        initial_rebalance_delay: Duration::from_millis(300),
        ..CoordinatorConfig::default()
    })
}

fn join_request(member_id: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: SESSION,
        rebalance_timeout: Duration::from_secs(5),
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|name| (name.to_string(), Bytes::from(format!("meta-{name}"))))
            .collect(),
        require_known_member_id: false,
    }
}

fn sync_request(joined: &JoinResponse, assignments: Vec<(String, Bytes)>) -> SyncRequest {
    SyncRequest {
        group_id: "g".into(),
        generation_id: joined.generation_id,
        member_id: joined.member_id.clone(),
        assignments,
    }
}

/// Two members join one generation; the leader's assignment reaches both.
async fn two_member_group(coordinator: &Arc<GroupCoordinator>) -> (JoinResponse, JoinResponse) {
    let (a, b) = tokio::join!(
        coordinator.join(join_request("", &["range", "roundrobin"])),
        coordinator.join(join_request("", &["roundrobin", "range"])),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.generation_id, 1);
    assert_eq!(b.generation_id, 1);
    assert_eq!(a.leader, b.leader);
    let (leader, follower) = if a.leader == a.member_id {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(leader.members.len(), 2);
    assert!(follower.members.is_empty());
    (leader, follower)
}

#[tokio::test(start_paused = true)]
async fn members_joining_together_share_a_generation_and_get_the_leaders_assignment() {
    let coordinator = coordinator();
    let (leader, follower) = two_member_group(&coordinator).await;
    // One vote each: the tie goes to the first name in order.
    assert_eq!(leader.protocol_name, "range");
    let assignments = vec![
        (leader.member_id.clone(), Bytes::from_static(b"p0")),
        (follower.member_id.clone(), Bytes::from_static(b"p1")),
    ];
    let (from_follower, from_leader) = tokio::join!(
        coordinator.sync(sync_request(&follower, Vec::new())),
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            coordinator.sync(sync_request(&leader, assignments)).await
        },
    );
    assert_eq!(from_leader.unwrap(), Bytes::from_static(b"p0"));
    assert_eq!(from_follower.unwrap(), Bytes::from_static(b"p1"));
    assert_eq!(coordinator.heartbeat("g", 1, &follower.member_id), Ok(()));
    assert_eq!(coordinator.check_commit("g", 1, &leader.member_id), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_new_member_is_told_its_id_first_when_the_client_asks_for_that() {
    let coordinator = coordinator();
    let mut request = join_request("", &["range"]);
    request.require_known_member_id = true;
    let Err(GroupError::MemberIdRequired { member_id }) = coordinator.join(request.clone()).await
    else {
        panic!("expected MEMBER_ID_REQUIRED");
    };
    request.member_id = member_id.clone();
    let joined = coordinator.join(request).await.unwrap();
    assert_eq!(joined.member_id, member_id);
    assert_eq!(joined.leader, member_id);
    let mut stranger = join_request("made-up", &["range"]);
    stranger.require_known_member_id = true;
    assert_eq!(
        coordinator.join(stranger).await,
        Err(GroupError::UnknownMemberId)
    );
}

#[tokio::test(start_paused = true)]
async fn a_join_rebalances_and_heartbeats_tell_the_others_to_rejoin() {
    let coordinator = coordinator();
    let (leader, follower) = two_member_group(&coordinator).await;
    let assignments = vec![(leader.member_id.clone(), Bytes::from_static(b"all"))];
    let (_, _) = tokio::join!(
        coordinator.sync(sync_request(&leader, assignments)),
        coordinator.sync(sync_request(&follower, Vec::new())),
    );
    let newcomer = tokio::spawn({
        let coordinator = Arc::clone(&coordinator);
        async move { coordinator.join(join_request("", &["range"])).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        coordinator.heartbeat("g", 1, &leader.member_id),
        Err(GroupError::RebalanceInProgress)
    );
    // A member may still commit what it processed before it rejoins (Kafka's rule).
    assert_eq!(coordinator.check_commit("g", 1, &leader.member_id), Ok(()));
    let (again_leader, again_follower) = tokio::join!(
        coordinator.join(join_request(&leader.member_id, &["range"])),
        coordinator.join(join_request(&follower.member_id, &["range"])),
    );
    let newcomer = newcomer.await.unwrap().unwrap();
    for joined in [&again_leader.unwrap(), &again_follower.unwrap(), &newcomer] {
        assert_eq!(joined.generation_id, 2);
        assert_eq!(
            joined.leader, leader.member_id,
            "the leader stays the leader"
        );
    }
    assert!(matches!(
        coordinator.heartbeat("g", 1, &leader.member_id),
        Err(GroupError::IllegalGeneration { got: 1, current: 2 })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_member_that_stops_heartbeating_is_removed_and_the_rest_rebalance() {
    let coordinator = coordinator();
    let (leader, follower) = two_member_group(&coordinator).await;
    let assignments = vec![(leader.member_id.clone(), Bytes::from_static(b"x"))];
    let _ = tokio::join!(
        coordinator.sync(sync_request(&leader, assignments)),
        coordinator.sync(sync_request(&follower, Vec::new())),
    );
    // Only the follower heartbeats; the leader's session runs out.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = coordinator.heartbeat("g", 1, &follower.member_id);
    }
    assert_eq!(
        coordinator.heartbeat("g", 1, &leader.member_id),
        Err(GroupError::UnknownMemberId)
    );
    let alone = coordinator
        .join(join_request(&follower.member_id, &["range"]))
        .await
        .unwrap();
    assert_eq!(alone.generation_id, 2);
    assert_eq!(alone.leader, follower.member_id);
    assert_eq!(alone.members.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn members_that_do_not_rejoin_in_time_are_dropped_from_the_rebalance() {
    let coordinator = coordinator();
    let (leader, _follower) = two_member_group(&coordinator).await;
    // Only the leader rejoins; the follower's rebalance timeout (5 s) passes.
    let joined = coordinator
        .join(join_request(&leader.member_id, &["range"]))
        .await
        .unwrap();
    assert_eq!(joined.generation_id, 2);
    assert_eq!(joined.members.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn leaving_rebalances_the_rest_and_the_last_leave_empties_the_group() {
    let coordinator = coordinator();
    let (leader, follower) = two_member_group(&coordinator).await;
    assert_eq!(
        coordinator
            .leave("g", std::slice::from_ref(&follower.member_id))
            .await,
        vec![Ok(())]
    );
    assert_eq!(
        coordinator.heartbeat("g", 1, &leader.member_id),
        Err(GroupError::RebalanceInProgress)
    );
    assert_eq!(
        coordinator
            .leave("g", &[leader.member_id.clone(), "nobody".into()])
            .await,
        vec![Ok(()), Err(GroupError::UnknownMemberId)]
    );
    // No members: a consumer outside any group may commit for it again.
    assert_eq!(coordinator.check_commit("g", -1, ""), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn commits_and_joins_are_checked() {
    let coordinator = coordinator();
    let (leader, _follower) = two_member_group(&coordinator).await;
    assert!(matches!(
        coordinator.check_commit("g", -1, ""),
        Err(GroupError::IllegalGeneration { .. })
    ));
    assert_eq!(
        coordinator.check_commit("g", 1, "stranger"),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(coordinator.check_commit("other", -1, ""), Ok(()));
    let mut incompatible = join_request("", &["sticky"]);
    assert_eq!(
        coordinator.join(incompatible.clone()).await,
        Err(GroupError::InconsistentGroupProtocol)
    );
    incompatible.session_timeout = Duration::from_millis(10);
    assert!(matches!(
        coordinator.join(incompatible).await,
        Err(GroupError::InvalidSessionTimeout { .. })
    ));
    assert!(matches!(
        coordinator.check_commit("", 1, &leader.member_id),
        Err(GroupError::InvalidGroupId { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_stopped_member_expires_by_its_session_during_a_rebalance() {
    // Proves: a member that stopped heartbeating (a crashed consumer) does not hold a rebalance
    // for the whole rebalance timeout: it is removed when its session expires, and the member
    // that joined is answered then, alone in the next generation.
    let coordinator = coordinator();
    let crashed = coordinator
        .join(join_request("", &["range"]))
        .await
        .unwrap();
    let assignment = vec![(crashed.member_id.clone(), Bytes::from_static(b"all"))];
    coordinator
        .sync(sync_request(&crashed, assignment))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut newcomer = join_request("", &["range"]);
    newcomer.rebalance_timeout = Duration::from_secs(300);
    let joined = coordinator.join(newcomer).await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited <= SESSION + TICK * 2,
        "answered after {waited:?}, not after the session timeout"
    );
    assert_eq!(joined.generation_id, 2);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.members.len(), 1);
    assert_eq!(
        coordinator.heartbeat("g", 1, &crashed.member_id),
        Err(GroupError::UnknownMemberId)
    );
}

#[tokio::test(start_paused = true)]
async fn a_restarted_static_member_replaces_its_previous_incarnation_at_once() {
    // Proves: a static member (group.instance.id) that restarts without leaving joins again
    // without waiting for its old incarnation's session or rebalance timeout, and without the
    // MEMBER_ID_REQUIRED round trip; the old member id is then unknown.
    let coordinator = coordinator();
    let mut first = join_request("", &["range"]);
    first.group_instance_id = Some("instance-1".into());
    let old = coordinator.join(first.clone()).await.unwrap();
    let assignment = vec![(old.member_id.clone(), Bytes::from_static(b"all"))];
    coordinator
        .sync(sync_request(&old, assignment))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut restarted = first;
    restarted.require_known_member_id = true;
    restarted.rebalance_timeout = Duration::from_secs(300);
    let new = coordinator.join(restarted).await.unwrap();
    assert!(started.elapsed() < SESSION, "{:?}", started.elapsed());
    assert_ne!(new.member_id, old.member_id);
    assert_eq!(new.members.len(), 1);
    assert_eq!(
        coordinator.heartbeat("g", new.generation_id, &old.member_id),
        Err(GroupError::UnknownMemberId)
    );
}

/// A stable group's snapshot, restored by another coordinator (its new coordinator on a
/// cluster), answers the members' heartbeats and commits in the same generation: the group
/// stays stable across the move. An emptied group's snapshot removes it.
#[tokio::test(start_paused = true)]
async fn a_restored_snapshot_keeps_a_stable_group_stable() {
    let old = coordinator();
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&snapshots);
    old.persist_with(Arc::new(move |group, snapshot| {
        sink.lock().unwrap().push((group, snapshot));
    }));
    let (leader, follower) = two_member_group(&old).await;
    let assignments = vec![
        (leader.member_id.clone(), Bytes::from_static(b"p0")),
        (follower.member_id.clone(), Bytes::from_static(b"p1")),
    ];
    let (from_leader, from_follower) = tokio::join!(
        old.sync(sync_request(&leader, assignments)),
        old.sync(sync_request(&follower, Vec::new())),
    );
    assert_eq!(from_leader.unwrap(), Bytes::from_static(b"p0"));
    assert_eq!(from_follower.unwrap(), Bytes::from_static(b"p1"));
    let (group, snapshot) = snapshots
        .lock()
        .unwrap()
        .last()
        .cloned()
        .expect("a snapshot");
    assert_eq!(group, "g");
    assert_eq!(snapshot.generation, leader.generation_id);
    assert_eq!(snapshot.members.len(), 2);

    let new = coordinator();
    new.restore("g", &snapshot);
    new.heartbeat("g", leader.generation_id, &leader.member_id)
        .expect("the leader's heartbeat in its generation");
    new.heartbeat("g", follower.generation_id, &follower.member_id)
        .expect("the follower's heartbeat in its generation");
    new.check_commit("g", leader.generation_id, &leader.member_id)
        .expect("a commit in the generation");
    let synced = new
        .sync(sync_request(&follower, Vec::new()))
        .await
        .expect("a stable group answers a sync with the member's assignment");
    assert_eq!(synced, Bytes::from_static(b"p1"));
    // An older snapshot does not replace what the coordinator holds.
    let mut older = snapshot.clone();
    older.generation -= 1;
    older.members.clear();
    new.restore("g", &older);
    assert!(new.describe("g").is_some());

    // Both leave: the emptied group's snapshot has no members and removes the group.
    old.leave("g", &[leader.member_id.clone(), follower.member_id.clone()])
        .await;
    let (_, emptied) = snapshots.lock().unwrap().last().cloned().unwrap();
    assert!(emptied.members.is_empty());
    assert!(emptied.generation > snapshot.generation);
    new.restore("g", &emptied);
    assert!(new.describe("g").is_none());

    // A group whose coordinator moved away answers its waiters NOT_COORDINATOR.
    new.restore(
        "g",
        &snapshot_with_generation(&snapshot, emptied.generation + 1),
    );
    new.forget_groups(|group| group == "g");
    assert!(new.describe("g").is_none());
}

fn snapshot_with_generation(snapshot: &GroupSnapshot, generation: i32) -> GroupSnapshot {
    GroupSnapshot {
        generation,
        ..snapshot.clone()
    }
}

/// A store that fails every write, for the sync that must not answer an unstored assignment.
struct FailingStore;

impl GroupStore for FailingStore {
    fn save(&self, _: &str, _: &GroupSnapshot) -> Result<(), String> {
        Err("disk full".into())
    }
}

/// Runs a two-member group through one generation on `coordinator`: returns the joins after
/// both syncs were answered.
async fn stable_two_member_group(
    coordinator: &Arc<GroupCoordinator>,
) -> (JoinResponse, JoinResponse) {
    let (leader, follower) = two_member_group(coordinator).await;
    let assignments = vec![
        (leader.member_id.clone(), Bytes::from_static(b"p0")),
        (follower.member_id.clone(), Bytes::from_static(b"p1")),
    ];
    let (from_leader, from_follower) = tokio::join!(
        coordinator.sync(sync_request(&leader, assignments)),
        coordinator.sync(sync_request(&follower, Vec::new())),
    );
    assert_eq!(from_leader.unwrap(), Bytes::from_static(b"p0"));
    assert_eq!(from_follower.unwrap(), Bytes::from_static(b"p1"));
    (leader, follower)
}

fn reopened(directory: &std::path::Path) -> Arc<GroupCoordinator> {
    use crate::broker::groups::membership::GroupMemberships;
    let (store, loaded) = GroupMemberships::open(directory).unwrap();
    let coordinator = coordinator();
    coordinator.store_in(Arc::new(store), loaded);
    coordinator
}

/// Proves: with a durable store, a stable group comes back from a restart (a new coordinator
/// on the same directory) stable in the same generation: heartbeats, commits and syncs of
/// the old members succeed without a rejoin; once every member left, a restart knows no group.
#[tokio::test]
async fn a_stored_group_stays_stable_in_its_generation_across_a_restart() {
    let directory = tempfile::tempdir().unwrap();
    let before = reopened(directory.path());
    let (leader, follower) = stable_two_member_group(&before).await;
    drop(before);

    let after = reopened(directory.path());
    let described = after.describe("g").expect("the group is loaded");
    assert_eq!(described.state, GroupState::Stable);
    after
        .heartbeat("g", leader.generation_id, &leader.member_id)
        .expect("the leader's heartbeat in its generation");
    after
        .heartbeat("g", follower.generation_id, &follower.member_id)
        .expect("the follower's heartbeat in its generation");
    after
        .check_commit("g", follower.generation_id, &follower.member_id)
        .expect("a commit in the generation");
    let synced = after.sync(sync_request(&follower, Vec::new())).await;
    assert_eq!(synced.unwrap(), Bytes::from_static(b"p1"));

    // One leaves: after a restart the other is asked to rejoin (the group was rebalancing).
    let left = after
        .leave("g", std::slice::from_ref(&follower.member_id))
        .await;
    assert_eq!(left, vec![Ok(())]);
    drop(after);
    let after_leave = reopened(directory.path());
    assert_eq!(
        after_leave.heartbeat("g", leader.generation_id, &leader.member_id),
        Err(GroupError::RebalanceInProgress)
    );
    assert_eq!(
        after_leave.heartbeat("g", follower.generation_id, &follower.member_id),
        Err(GroupError::UnknownMemberId)
    );
    let left = after_leave
        .leave("g", std::slice::from_ref(&leader.member_id))
        .await;
    assert_eq!(left, vec![Ok(())]);
    drop(after_leave);
    assert!(reopened(directory.path()).describe("g").is_none());
}

/// Proves: an assignment whose generation the store could not write is not handed out: every
/// sync of the generation answers `StoreFailed` and the group rebalances.
#[tokio::test]
async fn a_generation_the_store_refuses_is_not_handed_out() {
    let coordinator = coordinator();
    coordinator.store_in(Arc::new(FailingStore), Vec::new());
    let (leader, follower) = two_member_group(&coordinator).await;
    let assignments = vec![(leader.member_id.clone(), Bytes::from_static(b"p0"))];
    let (from_leader, from_follower) = tokio::join!(
        coordinator.sync(sync_request(&leader, assignments)),
        coordinator.sync(sync_request(&follower, Vec::new())),
    );
    assert!(matches!(from_leader, Err(GroupError::StoreFailed { .. })));
    assert!(matches!(from_follower, Err(GroupError::StoreFailed { .. })));
    assert_eq!(
        coordinator.heartbeat("g", leader.generation_id, &leader.member_id),
        Err(GroupError::RebalanceInProgress)
    );
}

/// Proves (KIP-345): a restarted static member of a stable group that is not its leader
/// joins at once in the same generation with a new member id and gets its previous
/// assignment from its sync; the leader keeps heartbeating in that generation (no
/// rebalance), and the old member id is unknown.
#[tokio::test(start_paused = true)]
async fn a_restarted_static_follower_gets_its_previous_assignment_without_a_rebalance() {
    let coordinator = coordinator();
    let static_join = |instance: &str| {
        let mut request = join_request("", &["range"]);
        request.group_instance_id = Some(instance.into());
        request
    };
    let (a, b) = tokio::join!(
        coordinator.join(static_join("instance-a")),
        coordinator.join(static_join("instance-b")),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let (leader, follower, follower_instance) = match a.leader == a.member_id {
        true => (a, b, "instance-b"),
        false => (b, a, "instance-a"),
    };
    let assignments = vec![
        (leader.member_id.clone(), Bytes::from_static(b"p0")),
        (follower.member_id.clone(), Bytes::from_static(b"p1")),
    ];
    let (from_leader, _) = tokio::join!(
        coordinator.sync(sync_request(&leader, assignments)),
        coordinator.sync(sync_request(&follower, Vec::new())),
    );
    assert_eq!(from_leader.unwrap(), Bytes::from_static(b"p0"));

    let rejoined = coordinator
        .join(static_join(follower_instance))
        .await
        .unwrap();
    assert_eq!(rejoined.generation_id, follower.generation_id);
    assert_ne!(rejoined.member_id, follower.member_id);
    assert_eq!(rejoined.leader, leader.member_id);
    assert!(rejoined.members.is_empty());
    let synced = coordinator.sync(sync_request(&rejoined, Vec::new())).await;
    assert_eq!(synced.unwrap(), Bytes::from_static(b"p1"));
    coordinator
        .heartbeat("g", leader.generation_id, &leader.member_id)
        .expect("no rebalance: the leader's generation holds");
    assert_eq!(
        coordinator.heartbeat("g", follower.generation_id, &follower.member_id),
        Err(GroupError::UnknownMemberId)
    );
}

/// Proves: a snapshot taken between generations (joined, assignment not yet known) is marked
/// as rebalancing, and a group restored from it asks its members to rejoin rather than being
/// stable with no assignments.
#[tokio::test(start_paused = true)]
async fn a_snapshot_between_generations_restores_a_rebalancing_group() {
    let old = coordinator();
    let (leader, _follower) = two_member_group(&old).await;
    let snapshot = GroupSnapshot::of(&old.lock()["g"]);
    assert!(snapshot.rebalance, "{snapshot:?}");
    let new = coordinator();
    new.restore("g", &snapshot);
    assert_eq!(
        new.heartbeat("g", leader.generation_id, &leader.member_id),
        Err(GroupError::RebalanceInProgress)
    );
}
