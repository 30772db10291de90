//! Producer ids for idempotent appends: unique on this broker for ever, across restarts.
//!
//! A producer id names a producer's sequence numbers on every partition; two producers sharing
//! one would see each other's batches as duplicates or gaps. Ids are handed out from blocks of
//! [`PRODUCER_ID_BLOCK`]: before the first id of a block is given out, the end of the block is
//! written durably to [`PRODUCER_ID_FILE`], so after a crash the next broker starts past every id
//! that might have been handed out (at the cost of skipping the unused rest of a block). Kafka's
//! controller allocates producer id blocks the same way.
//!
//! In a cluster (see `docs/architecture.md`) the blocks will be reserved in etcd instead of this
//! file; the allocator's interface stays.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::domain::NodeId;
use crate::storage::durable_file::write_durably;

/// Ids reserved by one durable write.
pub const PRODUCER_ID_BLOCK: i64 = 1000;
/// Name of the file in the data directory holding the first id not yet reserved.
pub const PRODUCER_ID_FILE: &str = "producer-id-block";

/// Highest node id a cluster broker may have: producer ids a broker hands out carry its node id
/// above [`PRODUCER_ID_LOCAL_BITS`] bits, so ids from different brokers never collide (a
/// producer whose partition's leader moves keeps its id) and stay positive.
pub const CLUSTER_NODE_ID_MAX: u32 = (1 << 22) - 1;
/// Bits of a cluster producer id that count the ids one broker handed out.
pub const PRODUCER_ID_LOCAL_BITS: u32 = 40;

/// A producer id broker `node_id` allocated locally (`local`), made unique in the cluster.
pub fn cluster_producer_id(node_id: NodeId, local: i64) -> i64 {
    (i64::from(node_id) << PRODUCER_ID_LOCAL_BITS) | (local & ((1 << PRODUCER_ID_LOCAL_BITS) - 1))
}

/// Hands out producer ids.
#[derive(Debug)]
pub struct ProducerIds {
    directory: PathBuf,
    /// `(next id to hand out, first id not reserved)`.
    range: Mutex<(i64, i64)>,
}

impl ProducerIds {
    /// Loads the reservation from `directory` (none yet: ids start at 0).
    pub fn open(directory: &Path) -> io::Result<Self> {
        let path = directory.join(PRODUCER_ID_FILE);
        let reserved = match std::fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|id| *id >= 0)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: not a producer id", path.display()),
                    )
                })?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => 0,
            Err(error) => return Err(error),
        };
        Ok(Self {
            directory: directory.to_path_buf(),
            range: Mutex::new((reserved, reserved)),
        })
    }

    /// A producer id never handed out before by this data directory.
    pub fn allocate(&self) -> io::Result<i64> {
        let mut range = self.range.lock().expect("producer id lock poisoned");
        let (next, reserved) = *range;
        if next >= reserved {
            let end = next.checked_add(PRODUCER_ID_BLOCK).ok_or_else(|| {
                io::Error::other("producer ids are exhausted (the next block would overflow)")
            })?;
            write_durably(
                &self.directory,
                PRODUCER_ID_FILE,
                format!("{end}\n").as_bytes(),
            )?;
            range.1 = end;
        }
        range.0 = next + 1;
        Ok(next)
    }
}

/// Where new producer ids come from, chosen once at assembly: the data directory's blocks
/// alone standalone; on a cluster the same blocks under this broker's node id (so two brokers
/// never hand out one id). Cheap to clone.
#[derive(Debug, Clone)]
pub struct ProducerIdSource {
    broker: std::sync::Arc<super::Broker>,
    /// On a cluster: the node id every id carries above [`PRODUCER_ID_LOCAL_BITS`] bits.
    cluster_node: Option<NodeId>,
}

impl ProducerIdSource {
    /// A standalone broker's ids.
    pub fn local(broker: std::sync::Arc<super::Broker>) -> Self {
        Self {
            broker,
            cluster_node: None,
        }
    }

    /// The ids of cluster member `node_id`.
    pub fn cluster(broker: std::sync::Arc<super::Broker>, node_id: NodeId) -> Self {
        Self {
            broker,
            cluster_node: Some(node_id),
        }
    }

    /// A new producer id. Off the async workers: a new block of ids is reserved with an fsync
    /// now and then.
    pub async fn next(&self) -> Result<i64, super::BrokerError> {
        let broker = std::sync::Arc::clone(&self.broker);
        let local = super::blocking(move || broker.allocate_producer_id()).await?;
        Ok(match self.cluster_node {
            Some(node_id) => cluster_producer_id(node_id, local),
            None => local,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let first: Vec<i64> = (0..3).map(|_| ids.allocate().unwrap()).collect();
        assert_eq!(first, [0, 1, 2]);
        drop(ids);
        let reopened = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(reopened.allocate().unwrap(), PRODUCER_ID_BLOCK);
        for _ in 0..PRODUCER_ID_BLOCK {
            reopened.allocate().unwrap();
        }
        drop(reopened);
        assert_eq!(
            ProducerIds::open(dir.path()).unwrap().allocate().unwrap(),
            3 * PRODUCER_ID_BLOCK
        );
    }

    #[test]
    fn a_damaged_file_is_an_error_not_a_reuse() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(PRODUCER_ID_FILE), "garbage").unwrap();
        assert!(ProducerIds::open(dir.path()).is_err());
    }
}
