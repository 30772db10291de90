//! `fencelog demo`: the paused-holder story, against a real server, printed as it happens.
//!
//! A acquires the lease and writes, then pauses past its TTL (a stand-in for a GC pause or a VM
//! migration). B acquires the next epoch and writes. A wakes up, still believing it is the
//! holder, and writes: the server rejects it. The demo ends by reading the partition back to show
//! that only A's pre-pause records and B's records are in the log.

use std::time::{Duration, Instant};

use clap::Args;

use super::CliError;
use crate::batch::now_ms;
use crate::batch::BatchBuilder;
use crate::client::{Client, ClientError};
use crate::protocol::{FlushPolicy, TopicConfig};
use crate::testing::TestServer;

/// Arguments of `fencelog demo`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog demo                     # on an in-process server of its own
  fencelog demo --ttl 2s
  fencelog demo --addr 127.0.0.1:7171   # against a running server (leaves its demo-* topic)")]
pub struct DemoArgs {
    /// Run against this server instead of an in-process one on a temporary directory (it
    /// creates a `demo-*` topic there and leaves it behind). FENCELOG_ADDR is not read: the
    /// demo uses a server of its own unless this flag names one.
    #[arg(long)]
    pub addr: Option<String>,
    /// The lease TTL holder A is granted (it pauses for 1.5 times this).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// TLS to the server at --addr.
    #[command(flatten)]
    pub tls: super::tls::ClientTlsArgs,
}

struct Timeline {
    started: Instant,
}

impl Timeline {
    fn say(&self, who: &str, epoch: Option<u64>, what: &str, result: &str) {
        let epoch = epoch.map_or_else(|| "-".to_string(), |e| e.to_string());
        println!(
            "[{:>7.3}s] {who:<2} epoch {epoch:<3} {what:<44} {result}",
            self.started.elapsed().as_secs_f64()
        );
    }
}

fn batch(epoch: u64, value: &str) -> bytes::Bytes {
    let mut builder = BatchBuilder::new(epoch);
    builder.push(now_ms(), None, Some(value.as_bytes()));
    builder.finish()
}

fn fail(error: impl std::fmt::Display) -> CliError {
    CliError::with_code(super::error::codes::DEMO_FAILED, error.to_string())
}

/// Runs the demo. Exit status 0 when the story ends as fencing promises, 1 otherwise.
pub fn run(args: DemoArgs) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(fail)?;
    runtime.block_on(story(args))
}

async fn story(args: DemoArgs) -> Result<(), CliError> {
    if let Some(addr) = &args.addr {
        super::address::check_host_port("--addr", addr, super::address::AddressKind::Native)?;
    }
    let (_server, addr) = match &args.addr {
        Some(addr) => {
            println!("running against the fencelog server at {addr} (--addr); what the demo writes stays there");
            (None, addr.clone())
        }
        None => {
            let server = TestServer::start().await.map_err(fail)?;
            let addr = server.addr().to_string();
            println!(
                "started an in-process fencelog server on {addr} (data in {})",
                server.data_dir().display()
            );
            (Some(server), addr)
        }
    };
    let client = match args.tls.client_tls()? {
        Some(_) if args.addr.is_none() => {
            return Err(CliError::invalid_argument(
                "the --tls flags need --addr: the in-process server serves plain TCP",
            ))
        }
        Some(tls) => {
            Client::builder()
                .addr(addr.as_str())
                .tls(tls)
                .connect()
                .await
        }
        None => Client::connect(addr.as_str()).await,
    }
    .map_err(fail)?;
    let topic = format!("demo-{:08x}", rand::random::<u32>());
    let config = TopicConfig {
        flush: FlushPolicy::Always,
        ..TopicConfig::default()
    };
    client.create_topic(&topic, 1, config).await.map_err(fail)?;
    println!(
        "topic {topic}, partition 0, flush always; lease TTL {}\n",
        humantime::format_duration(args.ttl)
    );
    let timeline = Timeline {
        started: Instant::now(),
    };

    let a = client
        .acquire_lease(&topic, 0, "A", args.ttl)
        .await
        .map_err(fail)?;
    timeline.say(
        "A",
        Some(a.epoch),
        "acquire lease",
        &format!("granted (ttl {} ms)", a.ttl_ms),
    );
    for n in 1..=3 {
        let value = format!("A: order {n}");
        let ack = client
            .produce(&topic, 0, batch(a.epoch, &value))
            .await
            .map_err(fail)?;
        timeline.say(
            "A",
            Some(a.epoch),
            &format!("write {value:?}"),
            &format!("ok, offset {}", ack.base_offset),
        );
    }

    let pause = args.ttl + args.ttl / 2;
    timeline.say(
        "A",
        Some(a.epoch),
        &format!(
            "pauses for {} (GC pause)",
            humantime::format_duration(pause)
        ),
        "its lease expires; A does not know",
    );
    tokio::time::sleep(pause).await;

    let b = client
        .acquire_lease(&topic, 0, "B", Duration::from_secs(30))
        .await
        .map_err(fail)?;
    timeline.say(
        "B",
        Some(b.epoch),
        "acquire lease",
        "granted: A is fenced from now on",
    );
    for n in 1..=2 {
        let value = format!("B: order {n}");
        let ack = client
            .produce(&topic, 0, batch(b.epoch, &value))
            .await
            .map_err(fail)?;
        timeline.say(
            "B",
            Some(b.epoch),
            &format!("write {value:?}"),
            &format!("ok, offset {}", ack.base_offset),
        );
    }

    timeline.say(
        "A",
        Some(a.epoch),
        "wakes up, still believes it holds the lease",
        "",
    );
    let stale = client
        .produce(&topic, 0, batch(a.epoch, "A: order 4"))
        .await;
    let fenced = matches!(&stale, Err(ClientError::Fenced { .. }));
    let outcome = match &stale {
        Err(error) => format!("REJECTED: {error}"),
        Ok(ack) => format!(
            "ACCEPTED at offset {} (this must never happen)",
            ack.base_offset
        ),
    };
    timeline.say("A", Some(a.epoch), "write \"A: order 4\"", &outcome);
    let renew = client.renew_lease(&topic, 0, a.lease_id).await;
    let renew_outcome = match &renew {
        Err(error) => format!("refused: {error}"),
        Ok(_) => "renewed (this must never happen)".to_string(),
    };
    timeline.say("A", Some(a.epoch), "renew lease", &renew_outcome);

    println!("\nthe partition, read back:");
    let read = client
        .fetch(&topic, 0, 0, 1 << 20, Duration::ZERO)
        .await
        .map_err(fail)?;
    for record in &read.records {
        let value = record
            .value
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        println!(
            "  offset {}  epoch {}  {}",
            record.offset, record.epoch, value
        );
    }
    let values: Vec<String> = read
        .records
        .iter()
        .map(|r| {
            r.value
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned()
        })
        .collect();
    let expected = [
        "A: order 1",
        "A: order 2",
        "A: order 3",
        "B: order 1",
        "B: order 2",
    ];
    if fenced && values == expected {
        println!("\nOK: only A's writes from before the pause and B's writes are in the log; A's late write was fenced.");
        Ok(())
    } else {
        Err(CliError::with_code(
            super::error::codes::DEMO_FAILED,
            format!(
            "the story did not end as fencing promises: stale write {outcome}; log holds {values:?}"
        ),
        ))
    }
}
