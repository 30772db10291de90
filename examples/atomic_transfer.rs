//! Atomic appends: a writer that leases two partitions publishes a change to both at once, or
//! not at all, and a stale writer publishes nothing.
//!
//! ```sh
//! cargo run --release --example atomic_transfer                            # in-process server
//! cargo run --release --example atomic_transfer -- --addr 127.0.0.1:7070   # against `fencelog serve`
//! ```
//!
//! Topic `ledger` has a partition of debits (0) and one of credits (1). Every transfer is a
//! debit and a credit, committed as one transaction under the writer's leases
//! (`Client::init_transaction`, docs/protocol.md section 5.19). A read_committed reader sums
//! both partitions and always finds them balanced. Then the writer's lease on the credits
//! partition goes to another writer in the middle of a transfer: the commit is refused as
//! fenced, the transfer is aborted, and the reader still finds the books balanced.

use std::time::Duration;

use bytes::Bytes;
use fencelog::client::Client;
use fencelog::protocol::TopicConfig;
use fencelog::testing::TestServer;

const TOPIC: &str = "ledger";
const TTL: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = match (args.next().as_deref(), args.next()) {
        (Some("--addr"), Some(addr)) => Some(addr),
        (None, _) => None,
        _ => return Err("usage: atomic_transfer [--addr HOST:PORT]".into()),
    };
    // Kept alive until the end when the example runs its own server.
    let mut _server = None;
    let client = match addr {
        Some(addr) => Client::connect(addr).await?,
        None => {
            let server = TestServer::builder().start().await?;
            let client = Client::connect(server.addr()).await?;
            _server = Some(server);
            client
        }
    };
    match client.create_topic(TOPIC, 2, TopicConfig::default()).await {
        Ok(()) => {}
        Err(error) if error.to_string().contains("exists") => {}
        Err(error) => return Err(error.into()),
    }
    let debits = client.acquire_lease(TOPIC, 0, "bank", TTL).await?;
    let credits = client.acquire_lease(TOPIC, 1, "bank", TTL).await?;
    let mut writer = client.init_transaction("bank-transfers", TTL).await?;
    for amount in [10, 25, 5] {
        writer
            .send(
                TOPIC,
                0,
                debits.epoch,
                &[(None, Bytes::from(format!("-{amount}")))],
            )
            .await?;
        writer
            .send(
                TOPIC,
                1,
                credits.epoch,
                &[(None, Bytes::from(format!("{amount}")))],
            )
            .await?;
        writer.commit().await?;
        println!(
            "transfer of {amount} committed; books: {}",
            books(&client).await?
        );
    }

    // The writer's lease on the credits partition lapses while it works, and another writer
    // takes the partition.
    writer
        .send(TOPIC, 0, debits.epoch, &[(None, Bytes::from("-1000"))])
        .await?;
    writer
        .send(TOPIC, 1, credits.epoch, &[(None, Bytes::from("1000"))])
        .await?;
    client.release_lease(TOPIC, 1, credits.lease_id).await?;
    let other = client.acquire_lease(TOPIC, 1, "auditor", TTL).await?;
    match writer.commit().await {
        Ok(()) => return Err("a stale writer's commit went through".into()),
        Err(error) => println!(
            "transfer of 1000 refused: {error} (the credits partition is at epoch {} now); it was aborted",
            other.epoch
        ),
    }
    println!(
        "books after the refused transfer: {}",
        books(&client).await?
    );
    Ok(())
}

/// What a read_committed reader sees: the sum of each partition, and whether they balance.
async fn books(client: &Client) -> Result<String, Box<dyn std::error::Error>> {
    let mut sums = [0i64; 2];
    for (partition, sum) in sums.iter_mut().enumerate() {
        let read = client
            .fetch_committed(TOPIC, partition as u32, 0, 1 << 20, Duration::ZERO)
            .await?;
        for record in &read.records {
            let value = std::str::from_utf8(record.value.as_deref().unwrap_or_default())?;
            *sum += value.parse::<i64>()?;
        }
    }
    let balanced = if sums[0] + sums[1] == 0 {
        "balanced"
    } else {
        "NOT BALANCED"
    };
    Ok(format!(
        "debits {}, credits {}: {balanced}",
        sums[0], sums[1]
    ))
}
