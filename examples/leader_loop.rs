//! A leader loop: the shape of a program that must be the only writer of a partition.
//!
//! Leadership is a lease; losing it is normal (a pause longer than the TTL, a network split, an
//! operator moving the work), so a leader is a loop: acquire the lease, do leader work only
//! while [`Producer::lost`] has not resolved, and on loss stop, say why, back off and try again.
//! The epoch fence makes a late write of a deposed leader harmless to the log; stopping on
//! `lost()` keeps it from doing leader work elsewhere. See `docs/fencing.md`.
//!
//! ```sh
//! cargo run --release --example leader_loop                            # standalone, finishes by itself
//! cargo run --release --example leader_loop -- --addr 127.0.0.1:7070   # against `fencelog serve`
//! ```
//!
//! Standalone, it starts an in-process [`TestServer`] whose lease clock only moves when told
//! to, and shows one loss: during the first term a usurper moves the server's clock past the
//! leader's TTL, takes the lease (a newer epoch) and writes; the leader's next write or renewal
//! is refused, `lost()` resolves, and the leader backs off and is granted the lease again.
//! Against a real server it runs its terms without a usurper. Either way it ends after
//! `--terms` terms (default 3).

use std::sync::Arc;
use std::time::Duration;

use fencelog::batch::BatchBuilder;
use fencelog::client::{Client, ClientError, Producer};
use fencelog::protocol::{ErrorCode, TopicConfig};
use fencelog::testing::TestServer;
use tokio::sync::Notify;

/// Topic the example writes to (partition 0).
const TOPIC: &str = "leader-loop";
/// The leader's lease TTL; the producer renews it every third of it.
const LEASE_TTL: Duration = Duration::from_secs(2);
/// Records a leader writes in one term before it hands the lease back.
const RECORDS_PER_TERM: u32 = 5;
/// Pause between two records: the stand-in for real leader work.
const WORK_INTERVAL: Duration = Duration::from_millis(20);
/// First pause after a loss or a refused acquisition; doubles up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);
/// Longest pause between acquisition attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How one term ended.
enum TermEnd {
    /// The leader did its work and released the lease.
    Finished,
    /// The leader lost the right to write, for this reason.
    Lost(ClientError),
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut addr = None;
    let mut terms = 3u32;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => addr = Some(args.next().ok_or("--addr needs HOST:PORT")?),
            "--terms" => terms = args.next().ok_or("--terms needs a number")?.parse()?,
            other => return Err(format!("unknown argument {other:?} (--addr, --terms)").into()),
        }
    }
    match addr {
        Some(addr) => {
            let client = Client::connect(addr.as_str()).await?;
            create_topic(&client).await?;
            leader_loop(&client, terms, None).await?;
        }
        None => {
            let server = Arc::new(TestServer::builder().manual_clock().start().await?);
            let client = Client::connect(server.addr()).await?;
            create_topic(&client).await?;
            let usurp = Arc::new(Notify::new());
            let usurper = tokio::spawn(usurper(
                Arc::clone(&server),
                client.clone(),
                Arc::clone(&usurp),
            ));
            leader_loop(&client, terms, Some(&usurp)).await?;
            usurper.await??;
        }
    }
    Ok(())
}

/// Creates the example's topic unless it exists.
async fn create_topic(client: &Client) -> Result<(), ClientError> {
    match client.create_topic(TOPIC, 1, TopicConfig::default()).await {
        Err(error) if error.code() != Some(ErrorCode::TopicExists) => Err(error),
        _ => Ok(()),
    }
}

/// Runs `terms` terms of leadership. `usurp`, if given, is notified once, midway through the
/// first term.
async fn leader_loop(
    client: &Client,
    terms: u32,
    usurp: Option<&Notify>,
) -> Result<(), ClientError> {
    let mut backoff = INITIAL_BACKOFF;
    let mut term = 1;
    while term <= terms {
        let producer = match Producer::builder(client.clone(), TOPIC, 0)
            .lease("leader", LEASE_TTL)
            .build()
            .await
        {
            Ok(producer) => producer,
            Err(error) if error.is_retriable() => {
                println!("term {term}: lease not granted ({error}); retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            Err(error) => return Err(error),
        };
        println!("term {term}: leader with epoch {}", producer.epoch());
        let usurp = usurp.filter(|_| term == 1);
        let end = tokio::select! {
            reason = producer.lost() => TermEnd::Lost(reason),
            result = lead(&producer, term, usurp) => match result {
                Ok(()) => TermEnd::Finished,
                // A write refused by the fence: the producer is dead, with that reason.
                Err(error) => TermEnd::Lost(producer.error().ok_or(error)?),
            },
        };
        match end {
            TermEnd::Finished => {
                producer.close().await?;
                println!("term {term}: wrote {RECORDS_PER_TERM} records, released the lease");
                backoff = INITIAL_BACKOFF;
            }
            TermEnd::Lost(reason) => {
                // Stop leader work at once: another writer may already be doing it.
                println!(
                    "term {term}: lost leadership: {reason}; stopping, retrying in {backoff:?}"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        term += 1;
    }
    Ok(())
}

/// The leader work of one term: [`RECORDS_PER_TERM`] records, one at a time. With `usurp`, it
/// notifies the usurper after the second record and then waits (a paused leader) until the loss
/// stops it.
async fn lead(producer: &Producer, term: u32, usurp: Option<&Notify>) -> Result<(), ClientError> {
    for index in 0..RECORDS_PER_TERM {
        let value = format!("term {term} record {index}");
        let offset = producer
            .send(None, value.clone())
            .await
            .map_err(|error| error.into_error())?;
        println!("term {term}: wrote {value:?} at offset {offset}");
        if index == 1 {
            if let Some(usurp) = usurp {
                usurp.notify_one();
                // Paused: the producer's next renewal is refused (the lease expired on the
                // server's clock and the usurper holds a newer one), so `lost()` resolves.
                std::future::pending::<()>().await;
            }
        }
        tokio::time::sleep(WORK_INTERVAL).await;
    }
    Ok(())
}

/// Standalone mode's usurper: once notified, moves the server's lease clock past the leader's
/// TTL (as if the leader had paused that long), takes the lease with a newer epoch, writes one
/// record and releases the lease.
async fn usurper(
    server: Arc<TestServer>,
    client: Client,
    usurp: Arc<Notify>,
) -> Result<(), ClientError> {
    usurp.notified().await;
    server.advance(LEASE_TTL * 2);
    let lease = client.acquire_lease(TOPIC, 0, "usurper", LEASE_TTL).await?;
    let mut batch = BatchBuilder::new(lease.epoch);
    batch.push(fencelog::batch::now_ms(), None, Some(b"usurper"));
    let ack = client.produce(TOPIC, 0, batch.finish()).await?;
    println!(
        "usurper: granted epoch {}, wrote at offset {}, releasing",
        lease.epoch, ack.base_offset
    );
    client.release_lease(TOPIC, 0, lease.lease_id).await
}
