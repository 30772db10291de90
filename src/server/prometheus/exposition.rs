//! The Prometheus text exposition (format 0.0.4), built at scrape time.
//!
//! A scrape takes the broker's live topics and reads each partition's counters and offsets:
//! nothing is registered per partition, so creating or deleting a topic needs no bookkeeping
//! here, and gauges such as the log end offset cost nothing between scrapes. The text itself is
//! written by prometheus-client's encoder (names, `_total` suffixes, label escaping, histogram
//! buckets), through a [`Collector`] that describes each family once and then each partition.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder,
    NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::broker::{BrokerService, Topic};
use crate::metrics::histogram::{HistogramSnapshot, NANOS_PER_SECOND};
use crate::metrics::PartitionCounts;
use crate::metrics::{ListenerMetrics, Metrics};

/// The `Content-Type` of what [`render`] returns.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Every series of the server behind `service`, as Prometheus text.
pub fn render(service: &BrokerService) -> String {
    let scrape = Scrape {
        topics: service.broker().topics(),
        metrics: Arc::clone(service.metrics()),
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text
}

/// What one scrape reads.
#[derive(Debug)]
struct Scrape {
    topics: Vec<Arc<Topic>>,
    metrics: Arc<Metrics>,
}

/// One partition's values at the scrape.
struct PartitionSample<'a> {
    labels: PartitionLabels<'a>,
    counts: PartitionCounts,
    log_start_offset: u64,
    log_end_offset: u64,
    high_watermark: u64,
    epoch: u64,
    refusing_writes: bool,
}

/// The `topic` and `partition` labels.
#[derive(Debug, Clone, Copy)]
struct PartitionLabels<'a> {
    topic: &'a str,
    partition: u32,
}

impl EncodeLabelSet for PartitionLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        ("topic", self.topic).encode(encoder.encode_label())?;
        ("partition", self.partition).encode(encoder.encode_label())
    }
}

/// The `listener` label, and `api` for request latency.
#[derive(Debug, Clone, Copy)]
struct ListenerLabels<'a> {
    listener: &'a str,
    api: Option<&'a str>,
}

impl EncodeLabelSet for ListenerLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        ("listener", self.listener).encode(encoder.encode_label())?;
        match self.api {
            Some(api) => ("api", api).encode(encoder.encode_label()),
            None => Ok(()),
        }
    }
}

/// A per-partition counter family: name without `_total` (the encoder adds it), help, value.
type CounterFamily = (&'static str, &'static str, fn(&PartitionCounts) -> u64);

const PARTITION_COUNTERS: &[CounterFamily] = &[
    (
        "fencelog_produce_records",
        "Records appended and acknowledged.",
        |counts| counts.produce_records,
    ),
    (
        "fencelog_produce_bytes",
        "Bytes of the batches appended and acknowledged (stored format).",
        |counts| counts.produce_bytes,
    ),
    (
        "fencelog_fetch_records",
        "Records returned to fetches.",
        |counts| counts.fetch_records,
    ),
    (
        "fencelog_fetch_bytes",
        "Bytes of the batches returned to fetches.",
        |counts| counts.fetch_bytes,
    ),
    (
        "fencelog_fenced",
        "Appends refused by the fence: a stale epoch, or no lease on a leased partition.",
        |counts| counts.fenced,
    ),
    (
        "fencelog_unknown_epoch",
        "Appends refused for an epoch that was never granted.",
        |counts| counts.unknown_epoch,
    ),
    (
        "fencelog_lease_grants",
        "Leases granted (each installs a new epoch).",
        |counts| counts.lease_grants,
    ),
    (
        "fencelog_lease_renewals",
        "Leases renewed.",
        |counts| counts.lease_renewals,
    ),
    (
        "fencelog_lease_expiries",
        "Leases that ran out unrenewed, counted when the server notices (next acquire, renew or release).",
        |counts| counts.lease_expiries,
    ),
    (
        "fencelog_storage_sync_failures",
        "Syncs (fsync, msync) and writes of the partition's files that failed at the disk; one of its log stops its writes until a restart.",
        |counts| counts.storage_failures,
    ),
];

/// A per-partition gauge family: name, help, value.
type GaugeFamily = (&'static str, &'static str, fn(&PartitionSample) -> u64);

const PARTITION_GAUGES: &[GaugeFamily] = &[
    (
        "fencelog_log_end_offset",
        "The offset the next appended record will get.",
        |sample| sample.log_end_offset,
    ),
    (
        "fencelog_log_start_offset",
        "The first offset still kept (retention moves it).",
        |sample| sample.log_start_offset,
    ),
    (
        "fencelog_high_watermark",
        "Offsets below it are acknowledged and readable.",
        |sample| sample.high_watermark,
    ),
    (
        "fencelog_partition_epoch",
        "The epoch the partition's fence enforces.",
        |sample| sample.epoch,
    ),
    (
        "fencelog_partition_refusing_writes",
        "1 while the partition refuses every write after its disk failed a sync or write (until a restart), else 0.",
        |sample| u64::from(sample.refusing_writes),
    ),
];

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let samples = self.partition_samples();
        for (name, help, value) in PARTITION_COUNTERS {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for sample in &samples {
                ConstCounter::new(value(&sample.counts))
                    .encode(family.encode_family(&sample.labels)?)?;
            }
        }
        for (name, help, value) in PARTITION_GAUGES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for sample in &samples {
                gauge(value(sample)).encode(family.encode_family(&sample.labels)?)?;
            }
        }
        let family = encoder.encode_descriptor(
            "fencelog_partitions_refusing_writes",
            "Partitions refusing every write after their disk failed a sync or write (until a restart).",
            None,
            MetricType::Gauge,
        )?;
        let refusing = samples
            .iter()
            .filter(|sample| sample.refusing_writes)
            .count();
        gauge(refusing as u64).encode(family)?;
        // In a cluster, per-partition replication gauges (fencelog_isr_size, and the high
        // watermark as the leader computes it) go here, next to the standalone ones above.
        self.encode_histograms(&mut encoder)?;
        self.encode_listeners(&mut encoder)
    }
}

impl Scrape {
    fn partition_samples(&self) -> Vec<PartitionSample<'_>> {
        let mut samples = Vec::new();
        for topic in &self.topics {
            for (index, slot) in topic.partitions().iter().enumerate() {
                // A partition that could not be opened has nothing to count.
                let Some(partition) = slot.open() else {
                    continue;
                };
                samples.push(PartitionSample {
                    labels: PartitionLabels {
                        topic: topic.name(),
                        partition: u32::try_from(index).expect("partition indexes fit u32"),
                    },
                    counts: partition.metrics().counts(),
                    log_start_offset: partition.log_start_offset(),
                    log_end_offset: partition.log_end_offset(),
                    high_watermark: partition.high_watermark(),
                    epoch: partition.current_epoch(),
                    refusing_writes: partition.refuses_writes(),
                });
            }
        }
        samples
    }

    /// The server-wide histograms: every live partition's plus those of deleted topics.
    fn encode_histograms(&self, encoder: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
        let retired = self.metrics.retired();
        let (mut batch_bytes, mut sync_duration) = (retired.batch_bytes, retired.sync_duration);
        for topic in &self.topics {
            for partition in topic.open_partitions() {
                batch_bytes.add(partition.metrics().batch_bytes());
                sync_duration.add(partition.metrics().sync_duration());
            }
        }
        let metric = encoder.encode_descriptor(
            "fencelog_sync_duration_seconds",
            "Time to sync (fsync) the written ranges of a partition, per sync.",
            None,
            MetricType::Histogram,
        )?;
        histogram(metric, &sync_duration, NANOS_PER_SECOND)?;
        let metric = encoder.encode_descriptor(
            "fencelog_produce_batch_bytes",
            "Size of each batch appended, in bytes (stored format).",
            None,
            MetricType::Histogram,
        )?;
        histogram(metric, &batch_bytes, 1.0)
    }

    fn encode_listeners(&self, encoder: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
        let listeners: Vec<Arc<ListenerMetrics>> = self.metrics.listeners();
        let mut family = encoder.encode_descriptor(
            "fencelog_connections",
            "Connections open now.",
            None,
            MetricType::Gauge,
        )?;
        for listener in &listeners {
            let labels = ListenerLabels {
                listener: listener.name(),
                api: None,
            };
            ConstGauge::new(listener.connections()).encode(family.encode_family(&labels)?)?;
        }
        encode_listener_counter(
            encoder,
            &listeners,
            "fencelog_connections_refused",
            "Connections refused at the connection limit.",
            ListenerMetrics::refused,
        )?;
        encode_listener_counter(
            encoder,
            &listeners,
            "fencelog_spliced_requests",
            "Produce requests whose batch went from the socket into the log by splice, without a copy in the server's memory.",
            ListenerMetrics::spliced,
        )?;
        let mut family = encoder.encode_descriptor(
            "fencelog_request_duration_seconds",
            "Time from reading a request to handing its response to the writer, in request order.",
            None,
            MetricType::Histogram,
        )?;
        for listener in &listeners {
            for (api, durations) in listener.request_durations() {
                let labels = ListenerLabels {
                    listener: listener.name(),
                    api: Some(&api),
                };
                histogram(family.encode_family(&labels)?, &durations, NANOS_PER_SECOND)?;
            }
        }
        Ok(())
    }
}

/// A gauge of an offset or epoch (exposed as a float64 by Prometheus anyway).
fn gauge(value: u64) -> ConstGauge<u64> {
    ConstGauge::new(value)
}

/// Writes `snapshot`, its bounds and sum divided by `scale` (nanoseconds to seconds).
fn histogram(
    mut encoder: MetricEncoder,
    snapshot: &HistogramSnapshot,
    scale: f64,
) -> Result<(), fmt::Error> {
    encoder.encode_histogram::<NoLabelSet>(
        snapshot.sum() as f64 / scale,
        snapshot.count(),
        &snapshot.scaled_buckets(scale),
        None,
    )
}

/// One counter family with a series per listener (the `listener` label), read with `value`.
fn encode_listener_counter(
    encoder: &mut DescriptorEncoder,
    listeners: &[Arc<ListenerMetrics>],
    name: &str,
    help: &str,
    value: fn(&ListenerMetrics) -> u64,
) -> Result<(), fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for listener in listeners {
        let labels = ListenerLabels {
            listener: listener.name(),
            api: None,
        };
        ConstCounter::new(value(listener)).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

// A real server: not under the loom build, whose primitives only run inside a model.
#[cfg(not(fencelog_loom))]
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::client::{BatchBuilder, Client, ClientError};
    use crate::domain::TopicConfig;
    use crate::protocol::{ErrorCode, Outcome};
    use crate::storage::durable_file::{faults, FileOperation};
    use crate::testing::TestServer;

    fn batch(epoch: u64, value: &str) -> bytes::Bytes {
        let mut builder = BatchBuilder::new(epoch);
        builder.push(1_000, None, Some(value.as_bytes()));
        builder.finish()
    }

    /// The server's answer to a produce that failed, as code and message.
    fn refusal(result: Result<crate::client::ProduceAck, ClientError>) -> (ErrorCode, String) {
        match result {
            Err(ClientError::Server { code, message }) => (code, message),
            other => panic!("expected a server error, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_sync_is_answered_counted_and_recovered_by_a_restart() {
        // Proves, over the native protocol: the produce whose sync fails answers STORAGE_ERROR
        // (outcome unknown) naming the file and the OS error, later ones STORAGE_ERROR saying
        // the partition refuses writes, the other partition goes on; the exposition counts the
        // failure and the refusing partition; a restart serves the acknowledged record and takes
        // writes again.
        let server = TestServer::start().await.unwrap();
        let client = Client::connect(server.addr()).await.unwrap();
        client
            .create_topic("t", 2, TopicConfig::default())
            .await
            .unwrap();
        let lease = |client: &Client, partition| {
            let client = client.clone();
            async move {
                let ttl = Duration::from_secs(120);
                let lease = client.acquire_lease("t", partition, "writer", ttl).await;
                lease.unwrap().epoch
            }
        };
        let (epoch, other_epoch) = (lease(&client, 0).await, lease(&client, 1).await);
        client
            .produce("t", 0, batch(epoch, "before"))
            .await
            .unwrap();
        let directory = server
            .broker()
            .partition("t", 0)
            .unwrap()
            .directory()
            .to_path_buf();

        let fault = faults::inject(FileOperation::Sync, &directory, libc::EIO);
        let (code, message) = refusal(client.produce("t", 0, batch(epoch, "failed")).await);
        assert_eq!(code, ErrorCode::StorageError, "{message}");
        assert_eq!(code.outcome(), Outcome::Unknown);
        assert!(
            message.contains("sync of") && message.contains("os error 5"),
            "{message}"
        );
        drop(fault);
        let (code, message) = refusal(client.produce("t", 0, batch(epoch, "refused")).await);
        assert_eq!(code, ErrorCode::StorageError, "{message}");
        assert!(message.contains("refuses writes"), "{message}");
        client
            .produce("t", 1, batch(other_epoch, "other"))
            .await
            .unwrap();

        let text = super::render(server.service());
        for series in [
            r#"fencelog_storage_sync_failures_total{topic="t",partition="0"} 1"#,
            r#"fencelog_storage_sync_failures_total{topic="t",partition="1"} 0"#,
            r#"fencelog_partition_refusing_writes{topic="t",partition="0"} 1"#,
            r#"fencelog_partition_refusing_writes{topic="t",partition="1"} 0"#,
            "fencelog_partitions_refusing_writes 1",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }

        drop(client);
        let server = server.restart().await.unwrap();
        let client = Client::connect(server.addr()).await.unwrap();
        let fetched = client
            .fetch("t", 0, 0, 1 << 20, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(
            fetched.records[0].value.as_deref(),
            Some(&b"before"[..]),
            "the acknowledged record"
        );
        let epoch = lease(&client, 0).await;
        let after = client.produce("t", 0, batch(epoch, "after")).await.unwrap();
        assert!(after.base_offset >= 1);
        assert!(super::render(server.service()).contains("fencelog_partitions_refusing_writes 0"));
    }
}
