//! A broker whose lease clock jumps forward (the nemesis's `clock-jump`, through the hidden
//! `serve --test-clock-skew-file`) stops acknowledging while its registration looks lapsed by
//! its own clock, then leads again once its next keep-alive lands: the registration's deadline
//! and the driver read the same clock. (Before they did, a jump past the registration TTL left
//! the partition without a serving leader for good.)
//!
//! Skipped with a note where the `etcd` binary is missing (`.ci/run` installs `etcd-server`).

use std::process::Command;
use std::time::{Duration, Instant};

use fencelog::batch::BatchBuilder;
use fencelog::client::Client;
use fencelog::protocol::Acks;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::BIN;

/// How long the broker may take to lead again after the jump.
const RECOVER: Duration = Duration::from_secs(30);

/// Acquires the lease and appends one record with acks=all, retrying until `deadline`; the
/// last error when it never succeeds.
async fn write_one(client: &Client, value: &str, deadline: Instant) -> Result<u64, String> {
    loop {
        let attempt = async {
            let lease = client
                .acquire_lease("clock", 0, "writer", Duration::from_secs(30))
                .await
                .map_err(|error| error.to_string())?;
            let mut batch = BatchBuilder::new(lease.epoch);
            batch.push(0, None, Some(value.as_bytes()));
            client
                .produce_with_acks("clock", 0, batch.finish(), Acks::All)
                .await
                .map(|appended| appended.base_offset)
                .map_err(|error| error.to_string())
        };
        match attempt.await {
            Ok(offset) => return Ok(offset),
            Err(error) if Instant::now() >= deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_clock_jumps_past_its_registration_leads_again() {
    let test = "a_leader_whose_clock_jumps_past_its_registration_leads_again";
    let Some(etcd) = EtcdServer::start_or_skip(test) else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let skew_file = root.path().join("clock");
    let mut broker = BrokerProcess::prepare(1, &root, &etcd.endpoint());
    broker.extra.push("--test-clock-skew-file".to_owned());
    broker.extra.push(skew_file.display().to_string());
    tokio::task::block_in_place(|| broker.spawn());
    let created = Command::new(BIN)
        .args(["topic", "create", "clock", "--partitions", "1"])
        .args(["--replication-factor", "1", "--addr", &broker.addr])
        .output()
        .expect("run fencelog topic create");
    assert!(created.status.success(), "{created:?}\n{}", broker.log());
    let client = Client::builder()
        .addrs([broker.addr.clone()])
        .request_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let before = write_one(&client, "before", Instant::now() + RECOVER)
        .await
        .unwrap_or_else(|error| panic!("first write: {error}\n{}", broker.log()));

    // Ten seconds ahead: five times the test brokers' 2 s registration TTL.
    std::fs::write(&skew_file, "10000").expect("jump the clock");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = write_one(&client, "after", Instant::now() + RECOVER)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "the broker never led again after its clock jumped: {error}\n{}",
                broker.log()
            )
        });
    assert!(after > before);
    assert!(
        broker.log().contains("lease clock jumped forward"),
        "{}",
        broker.log()
    );
}
