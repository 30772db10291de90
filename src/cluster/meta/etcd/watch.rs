//! The etcd store's watch task: follows the cluster's prefix from a revision, turns etcd events
//! into [`MetaEvent`]s, and survives etcd restarts, leader changes and compaction.
//!
//! The task remembers the revision after the last event it delivered. When the stream breaks
//! (etcd restarted, its leader changed, the connection died), it re-opens the watch from that
//! revision after a [`Backoff`] wait (with jitter: every broker's watch breaks at the same
//! instant when etcd restarts), so nothing is missed and nothing repeats. When it cannot resume
//! (etcd compacted that revision away) or the consumer is too slow (the channel is full), it
//! reads a fresh snapshot and sends it as one `Resync`, then follows from there. The task ends
//! when the consumer drops the receiver.

use std::time::Duration;

use etcd_client::{Event, EventType, WatchOptions};
use tokio::sync::mpsc;

use super::super::layout::ParsedKey;
use super::super::watch::MetaEvent;
use super::super::{decode_value, validate_watch_capacity, MetaError};
use super::EtcdMetaStore;
use crate::cluster::backoff::Backoff;
use crate::cluster::Versioned;

/// First step of the wait before re-opening a broken watch (each wait is its step scaled by a
/// random factor in `[0.5, 1]`, see [`Backoff`]).
pub const WATCH_RETRY_MIN: Duration = Duration::from_millis(100);

/// Largest step of the wait between two attempts to re-open a watch.
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(2);

/// The schedule of a watch's re-opening attempts (the security store's watches use it too).
pub(in crate::cluster::meta) fn watch_backoff() -> Backoff {
    Backoff::new(WATCH_RETRY_MIN, WATCH_RETRY_MAX)
}

impl EtcdMetaStore {
    /// The changes after `revision` (exclusive of it), without a snapshot: for a consumer that
    /// kept its state and the revision it was current at. If etcd compacted that history away,
    /// the first event is a `Resync`.
    pub fn watch_after(
        &self,
        revision: i64,
        capacity: usize,
    ) -> Result<mpsc::Receiver<MetaEvent>, MetaError> {
        validate_watch_capacity(capacity)?;
        let (sender, events) = mpsc::channel(capacity);
        spawn(self.clone(), sender, revision + 1);
        Ok(events)
    }
}

/// Why following the stream stopped.
enum Stopped {
    /// The consumer dropped the receiver.
    ReceiverGone,
    /// The stream broke or could not be opened: re-open it from where it stopped.
    Broken(String),
    /// Events were lost to the consumer (a full channel, a compacted revision): resync.
    Resync(&'static str),
}

/// Starts the watch task, following from `start_revision`.
pub(super) fn spawn(store: EtcdMetaStore, sender: mpsc::Sender<MetaEvent>, start_revision: i64) {
    tokio::spawn(async move {
        tokio::select! {
            () = run(&store, &sender, start_revision) => {}
            () = sender.closed() => {}
        }
    });
}

async fn run(store: &EtcdMetaStore, sender: &mpsc::Sender<MetaEvent>, start_revision: i64) {
    let mut next_revision = start_revision;
    let mut backoff = watch_backoff();
    loop {
        match follow(store, sender, &mut next_revision, &mut backoff).await {
            Stopped::ReceiverGone => return,
            Stopped::Broken(reason) => {
                tracing::warn!(%reason, next_revision, "metadata watch broke; re-opening");
                backoff.wait().await;
            }
            Stopped::Resync(reason) => {
                tracing::info!(reason, "metadata watch resyncs from a fresh snapshot");
                let snapshot = loop {
                    match store.snapshot().await {
                        Ok(snapshot) => break snapshot,
                        Err(error) => {
                            tracing::warn!(%error, "metadata watch could not read a snapshot");
                            backoff.wait().await;
                        }
                    }
                };
                next_revision = snapshot.revision + 1;
                // Waits for room: the snapshot stands for everything dropped meanwhile.
                if sender
                    .send(MetaEvent::Resync(Box::new(snapshot)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Opens the watch at `next_revision` and forwards its events until it stops.
async fn follow(
    store: &EtcdMetaStore,
    sender: &mpsc::Sender<MetaEvent>,
    next_revision: &mut i64,
    backoff: &mut Backoff,
) -> Stopped {
    let mut client = store.client();
    let prefix = store.layout().prefix().to_owned();
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(*next_revision);
    let opened = store
        .request("open the metadata watch", async move {
            client.watch(prefix, Some(options)).await
        })
        .await;
    let mut stream = match opened {
        Ok(stream) => stream,
        Err(error) => return Stopped::Broken(error.to_string()),
    };
    loop {
        // No timeout here: a watch may be quiet for hours. HTTP/2 pings (see the etcd store's
        // transport settings) break the stream when the connection dies.
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return Stopped::Broken("etcd ended the watch stream".into()),
            Err(error) => return Stopped::Broken(error.to_string()),
        };
        backoff.reset();
        if response.compact_revision() > 0 {
            return Stopped::Resync("etcd compacted the revisions the watch needed");
        }
        if response.canceled() {
            return Stopped::Broken(format!(
                "etcd cancelled the watch: {}",
                response.cancel_reason()
            ));
        }
        let mut last_revision = None;
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            last_revision = Some(kv.mod_revision());
            let Some(meta_event) = translate(store, event) else {
                continue;
            };
            match sender.try_send(meta_event) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Stopped::Resync("the consumer fell behind (its channel is full)")
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return Stopped::ReceiverGone,
            }
        }
        // etcd sends all the events of one revision in one response, so the watch resumes
        // after whole transactions.
        if let Some(revision) = last_revision {
            *next_revision = revision + 1;
        }
    }
}

/// The metadata event an etcd event stands for, if any (partition deletions are part of a
/// topic deletion; keys outside the layout are ignored; an undecodable value is logged and
/// skipped, the next snapshot reports it as corrupt).
fn translate(store: &EtcdMetaStore, event: &Event) -> Option<MetaEvent> {
    let kv = event.kv()?;
    let key = String::from_utf8_lossy(kv.key());
    let parsed = store.layout().parse(&key)?;
    let put = event.event_type() == EventType::Put;
    let decoded = match (parsed, put) {
        (ParsedKey::Broker(_), true) => decode_value(&key, kv.value()).map(MetaEvent::BrokerUp),
        (ParsedKey::Broker(node_id), false) => Ok(MetaEvent::BrokerDown(node_id)),
        (ParsedKey::Topic(_), true) => decode_value(&key, kv.value()).map(MetaEvent::TopicCreated),
        (ParsedKey::Topic(name), false) => Ok(MetaEvent::TopicDeleted(name)),
        (ParsedKey::Partition(partition), true) => {
            decode_value(&key, kv.value()).map(|value| MetaEvent::PartitionChanged {
                partition,
                state: Versioned {
                    value,
                    revision: kv.mod_revision(),
                },
            })
        }
        (ParsedKey::Partition(_), false) => return None,
    };
    match decoded {
        Ok(meta_event) => Some(meta_event),
        Err(error @ MetaError::Corrupt { .. }) => {
            tracing::error!(%error, "skipping a corrupt metadata value in the watch");
            None
        }
        Err(error) => {
            tracing::error!(%error, "skipping a metadata event");
            None
        }
    }
}
