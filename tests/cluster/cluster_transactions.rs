//! Kafka transactions on a cluster, in one process (issue 31, docs/kafka.md "Transactions on
//! a cluster"): the coordinators' shared lease at a partition's leader, the refusal of a
//! deposed coordinator's markers there, the transaction state moving with its offsets
//! partition, and a partition leader's verification of a transaction with its coordinator.
//! `tests/cli/kafka_cluster_transactions.rs` runs Kafka clients against processes.

use std::time::{Duration, Instant};

use fencelog::batch::{control_batch, BatchBuilder, ControlMarker};
use fencelog::broker::cluster::ClusterError;
use fencelog::broker::transactions::{
    InitOutcome, TransactionMetadata, TransactionRegistry, UpdateError,
};
use fencelog::broker::BrokerError;
use fencelog::client::{Client, ClientError, Lease};
use fencelog::domain::NodeId;
use fencelog::protocol::{Acks, ErrorCode};
use fencelog::testing::{TestCluster, TestClusterNode};

use crate::support::eventually;

const TTL: Duration = Duration::from_secs(30);
const CONVERGE: Duration = Duration::from_secs(20);
const SHARED: &str = "kafka-transactions";

/// The broker coordinating transactional id `id` (the leader of its offsets partition, the
/// offsets topic created first if needed), once one does that is not `not`.
async fn coordinator_of(cluster: &TestCluster, id: &str, not: Option<NodeId>) -> NodeId {
    let asking = cluster
        .nodes()
        .iter()
        .find(|node| node.is_running())
        .expect("a running broker");
    let offsets = std::sync::Arc::clone(asking.service().replicated_offsets().expect("a cluster"));
    eventually("a coordinator", || async {
        match offsets.coordinator_of(id).await {
            Ok(node) if Some(node) != not => Ok(node),
            Ok(node) => Err(format!("still broker {node}")),
            Err(error) => Err(error.to_string()),
        }
    })
    .await
}

/// A running broker other than `node`.
fn other_than(cluster: &TestCluster, node: NodeId) -> &TestClusterNode {
    cluster
        .nodes()
        .iter()
        .find(|other| other.id() != node && other.is_running())
        .expect("another running broker")
}

/// `holder`'s lease on `topic`/0 at its leader, once the partition is led.
async fn lease(client: &Client, topic: &str, holder: &str) -> Result<Lease, ClientError> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        match client.acquire_lease(topic, 0, holder, TTL).await {
            Err(error)
                if error.code().is_some_and(|code| code.is_retriable())
                    && error.code() != Some(ErrorCode::LeaseHeld)
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// Two coordinators (two connections, as two brokers' coordinators would have) join one shared
/// lease: the same epoch and lease id; a native holder is refused while it lives. Under it a
/// transaction's unverified first batch is refused, its marker (coordinator epoch 3) lands
/// with acks=all, and a marker of
/// the same producer from coordinator epoch 2 (a deposed coordinator) is refused with
/// COORDINATOR_FENCED and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinators_share_the_lease_and_a_deposed_coordinators_marker_is_refused() {
    let cluster = TestCluster::start(3).await.expect("start the cluster");
    let connect = || async { cluster.client().await.expect("connect") };
    let (first, second) = (connect().await, connect().await);
    crate::support::create_replicated(&first, "payments", 1)
        .await
        .expect("create");

    let shared = lease(&first, "payments", SHARED)
        .await
        .expect("the shared lease");
    let joined = lease(&second, "payments", SHARED).await.expect("joined");
    assert_eq!(
        (joined.epoch, joined.lease_id),
        (shared.epoch, shared.lease_id),
        "the second coordinator joins the first one's lease"
    );
    let native = lease(&first, "payments", "bob").await;
    assert!(
        matches!(&native, Err(error) if error.code() == Some(ErrorCode::LeaseHeld)),
        "{native:?}"
    );

    // A transaction's first batch on a replicated partition is the leader's to verify with
    // the coordinator (the Kafka listener does): sent as is, it would open a transaction
    // nothing vouches for, and is refused.
    let mut data = BatchBuilder::with_producer(shared.epoch, 9, 0).transactional();
    data.push(1, None, Some(b"debit"));
    let unverified = first
        .produce_with_acks("payments", 0, data.finish(), Acks::All)
        .await
        .expect_err("an unverified transaction's batch");
    assert_eq!(
        unverified.code(),
        Some(ErrorCode::InvalidTransactionState),
        "{unverified}"
    );
    let marker = |coordinator_epoch| {
        control_batch(
            shared.epoch,
            9,
            0,
            ControlMarker::Commit,
            coordinator_epoch,
            1,
        )
    };
    second
        .produce_with_acks("payments", 0, marker(3), Acks::All)
        .await
        .expect("the current coordinator's marker");
    let end = first.list_offsets("payments", 0).await.unwrap().latest;
    let refused = first
        .produce_with_acks("payments", 0, marker(2), Acks::All)
        .await
        .expect_err("a deposed coordinator's marker");
    assert_eq!(
        refused.code(),
        Some(ErrorCode::CoordinatorFenced),
        "{refused}"
    );
    assert_eq!(
        first.list_offsets("payments", 0).await.unwrap().latest,
        end,
        "nothing written"
    );
}

/// The coordinator's way to a cluster's partitions (`ClusterPartitions`, a native client of the
/// cluster): two brokers' coordinators acquire the same shared lease, a marker lands at the
/// leader with acks=all under it, and a partition a native holder leases is refused as held
/// (the transaction waits, the native holder is never fenced).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinators_reach_the_partitions_through_the_cluster() {
    use fencelog::broker::transactions::{ClusterPartitions, TransactionPartitions};
    use fencelog::broker::BrokerError;
    use fencelog::lease::{AuthorityError, LeaseError};

    let cluster = TestCluster::start(3).await.expect("start the cluster");
    let client = cluster.client().await.expect("connect");
    crate::support::create_replicated(&client, "ledger", 2)
        .await
        .expect("create");
    lease(&client, "ledger", "bob")
        .await
        .expect("bob's lease on partition 0");
    let (one, two) = (&cluster.nodes()[0], &cluster.nodes()[1]);
    let first = ClusterPartitions::new(std::sync::Arc::clone(one.driver().unwrap()));
    let second = ClusterPartitions::new(std::sync::Arc::clone(two.driver().unwrap()));

    let held = first.acquire("ledger", 0, 30_000).await;
    assert!(
        matches!(
            &held,
            Err(BrokerError::Lease(AuthorityError::Refused(LeaseError::Held { holder, .. }))) if holder == "bob"
        ),
        "{held:?}"
    );
    assert_eq!(
        client.list_offsets("ledger", 0).await.unwrap().latest,
        0,
        "bob's partition untouched"
    );

    // Partition 1, once led.
    let grant = eventually("the shared lease on partition 1", || {
        first.acquire("ledger", 1, 30_000)
    })
    .await;
    let joined = second.acquire("ledger", 1, 30_000).await.expect("joined");
    assert_eq!(
        (joined.epoch, joined.lease_id),
        (grant.epoch, grant.lease_id)
    );
    second
        .renew("ledger", 1, grant.lease_id)
        .await
        .expect("renewed by the other coordinator");

    let marker = control_batch(grant.epoch, 21, 0, ControlMarker::Commit, 0, 1);
    second
        .write_marker("ledger", 1, grant.epoch, marker)
        .await
        .expect("the marker, at the leader, acks=all");
    assert_eq!(client.list_offsets("ledger", 1).await.unwrap().latest, 1);
}

/// Transaction state in the offsets topic (the plan's step 1): the leader of a transactional
/// id's offsets partition stores the id's state with acks=all, another broker is told it is
/// not the coordinator, and after the coordinator crashes the new leader of that partition
/// loads the same producer id and epoch; forgetting the id is stored the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_state_moves_with_its_offsets_partition_leader() {
    const ID: &str = "payments-tx";
    let mut cluster = TestCluster::start(3).await.expect("start the cluster");
    let offsets = |node: &TestClusterNode| {
        std::sync::Arc::clone(node.service().replicated_offsets().expect("a cluster"))
    };
    let coordinator = coordinator_of(&cluster, ID, None).await;
    let mut state = TransactionMetadata::new(ID, 4242, 60_000);
    state.producer_epoch = 7;

    let leader = cluster.node(coordinator);
    let (stored_at, service) = (offsets(leader), std::sync::Arc::clone(leader.service()));
    eventually("store the state", || {
        stored_at.save_transaction(service.groups().coordinator(), ID, Some(state.clone()))
    })
    .await;
    let other = other_than(&cluster, coordinator);
    let refused = offsets(other)
        .save_transaction(
            other.service().groups().coordinator(),
            ID,
            Some(state.clone()),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(BrokerError::Cluster(ClusterError::NotCoordinator { .. }))
        ),
        "only the coordinator stores: {refused:?}"
    );
    let too_long = "x".repeat(500);
    let refused = stored_at
        .save_transaction(service.groups().coordinator(), &too_long, None)
        .await;
    assert!(
        matches!(refused, Err(BrokerError::InvalidRequest(_))),
        "{refused:?}"
    );

    cluster.node(coordinator).crash().await;
    let moved = coordinator_of(&cluster, ID, Some(coordinator)).await;
    let next = cluster.node(moved);
    let (loaded_at, service) = (offsets(next), std::sync::Arc::clone(next.service()));
    let loaded = eventually("load the state", || {
        loaded_at.transaction(service.groups().coordinator(), ID)
    })
    .await;
    assert_eq!(
        loaded.as_ref(),
        Some(&state),
        "the new coordinator has the id's producer id and epoch"
    );

    eventually("forget the id", || {
        loaded_at.save_transaction(service.groups().coordinator(), ID, None)
    })
    .await;
    let forgotten = loaded_at
        .transaction(service.groups().coordinator(), ID)
        .await
        .expect("read");
    assert_eq!(forgotten, None);
}

/// A cluster broker's transaction registry keeps each id's state in its offsets partition:
/// its coordinator creates the id, another broker's registry is told it is not the coordinator
/// (nothing stored, no working copy kept), and after the coordinator crashes the new one reads
/// the id back, moves its producer epoch on from there, and writes its markers with a higher
/// coordinator epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_replicated_registry_moves_with_the_coordinator() {
    const ID: &str = "orders-tx";
    let mut cluster = TestCluster::start(3).await.expect("start the cluster");
    let registry = |node: &TestClusterNode| {
        let service = node.service();
        TransactionRegistry::replicated(
            std::sync::Arc::clone(service.replicated_offsets().expect("a cluster")),
            std::sync::Arc::clone(service.groups().coordinator()),
        )
    };
    let coordinator = coordinator_of(&cluster, ID, None).await;
    let at_coordinator = registry(cluster.node(coordinator));
    eventually("create the id", || {
        at_coordinator.update(ID, |current| {
            assert!(current.is_none());
            Ok((TransactionMetadata::new(ID, 31, 60_000), ()))
        })
    })
    .await;
    let first_epoch = at_coordinator.coordinator_epoch(ID);
    assert!(
        first_epoch > 0,
        "a cluster coordinator's epoch is its leader epoch"
    );
    let at_other = registry(other_than(&cluster, coordinator));
    let refused = at_other
        .update(ID, |_| Ok((TransactionMetadata::new(ID, 99, 60_000), ())))
        .await;
    assert!(
        matches!(
            refused,
            Err(UpdateError::Cluster(BrokerError::Cluster(
                ClusterError::NotCoordinator { .. }
            )))
        ),
        "{refused:?}"
    );
    assert!(at_other.get(ID).is_none(), "no working copy elsewhere");

    cluster.node(coordinator).crash().await;
    let moved = coordinator_of(&cluster, ID, Some(coordinator)).await;
    let at_new = registry(cluster.node(moved));
    let epoch = eventually("bump the epoch", || {
        at_new.update(ID, |current| {
            let current = current.expect("the new coordinator read the id back");
            assert_eq!(current.producer_id, 31);
            match current.init_producer_id(60_000, || 32)? {
                InitOutcome::Ready(next) => {
                    let epoch = next.producer_epoch;
                    Ok((next, epoch))
                }
                InitOutcome::AbortFirst(_) => panic!("nothing open"),
            }
        })
    })
    .await;
    assert_eq!(epoch, 1, "the epoch moves on from the stored one");
    assert_eq!(at_new.get(ID).map(|state| state.producer_epoch), Some(1));
    assert!(
        at_new.coordinator_epoch(ID) > first_epoch,
        "the new coordinator's markers fence the old one's"
    );
}

/// The coordinator every cluster broker runs, through the broker-to-broker question a
/// partition's leader asks (`VerifyTransaction`, routed like a group request to the id's
/// coordinator, whichever broker the client reached): unknown id, partition not added and a
/// transaction ended are refused with INVALID_TRANSACTION_STATE; an open transaction with the
/// partition is confirmed; a fenced producer epoch is refused as fenced. Native atomic appends
/// are refused on a cluster with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitions_leader_verifies_a_transaction_with_its_coordinator() {
    use fencelog::protocol::TransactionProducer;
    const ID: &str = "verified-tx";
    let mut cluster = TestCluster::start(3).await.expect("start the cluster");
    let client = cluster.client().await.expect("connect");
    crate::support::create_replicated(&client, "ledger", 2)
        .await
        .expect("create");
    let coordinator = coordinator_of(&cluster, ID, None).await;
    let service = std::sync::Arc::clone(cluster.node(coordinator).service());
    let transactions = std::sync::Arc::clone(service.transactions());
    let producer = |producer_id, producer_epoch| TransactionProducer {
        transactional_id: ID.into(),
        producer_id,
        producer_epoch,
    };
    let refused_code = |result: Result<(), ClientError>| {
        result
            .expect_err("refused")
            .code()
            .expect("a server's refusal")
    };
    let verify = |producer_id, producer_epoch, partition| {
        client.verify_transaction(producer(producer_id, producer_epoch), "ledger", partition)
    };
    assert_eq!(
        refused_code(verify(1, 0, 0).await),
        ErrorCode::InvalidTransactionState,
        "an id nobody started"
    );

    let (producer_id, epoch) = eventually("InitProducerId", || {
        transactions.init_producer_id(ID, 60_000, None)
    })
    .await;
    let added = eventually("AddPartitionsToTxn", || {
        transactions.add_partitions(ID, producer_id, epoch, vec![("ledger".into(), 0)])
    })
    .await;
    assert!(added.iter().all(|(_, result)| result.is_ok()), "{added:?}");
    verify(producer_id, epoch, 0)
        .await
        .expect("open with the partition");
    assert_eq!(
        refused_code(verify(producer_id, epoch, 1).await),
        ErrorCode::InvalidTransactionState,
        "a partition never added"
    );
    assert_eq!(
        refused_code(verify(producer_id, epoch - 1, 0).await),
        ErrorCode::ProducerFenced,
        "an older instance"
    );
    transactions
        .end(ID, producer_id, epoch, false)
        .await
        .expect("abort");
    assert_eq!(
        refused_code(verify(producer_id, epoch, 0).await),
        ErrorCode::InvalidTransactionState,
        "the transaction ended"
    );

    let native = client.init_transaction("native-tx", TTL).await;
    assert!(
        matches!(&native, Err(error) if error.code() == Some(ErrorCode::InvalidRequest)
            && error.to_string().contains("standalone")),
        "{native:?}"
    );
}
