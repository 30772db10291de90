//! How the cluster's small values travel: an optional node id (a leader that may be unknown) and
//! lists of node ids (replicas, in-sync replicas), shared by `Metadata`, the `NOT_LEADER` error
//! details and the replication APIs.
//!
//! "None" is a sentinel rather than a presence byte, as in Kafka (`-1`): [`NO_NODE`] is never a
//! node id (`serve --node-id` refuses it), so every node field keeps one fixed size.

use bytes::{BufMut, BytesMut};

use super::wire::{Reader, WireError};
use super::ProtocolError;
use crate::domain::NodeId;

/// The wire value of "no node" (no leader known): `0xffffffff`. Never a broker's node id.
pub const NO_NODE: u32 = u32::MAX;

/// The wire value of "no leader epoch" (`LeaderEpochEnd`: the leader's history is empty):
/// `0xffffffff`. Never a partition's leader epoch.
pub const NO_LEADER_EPOCH: u32 = u32::MAX;

/// The most node ids one replica list (replicas or in-sync replicas) may hold on the wire.
pub const MAX_REPLICA_LIST: usize = 255;

/// Writes an optional node id.
pub(in crate::protocol) fn put_node(dst: &mut BytesMut, node: Option<NodeId>) {
    dst.put_u32(node.unwrap_or(NO_NODE));
}

/// Reads an optional node id.
pub(in crate::protocol) fn read_node(
    r: &mut Reader,
    field: &'static str,
) -> Result<Option<NodeId>, WireError> {
    let node = r.u32(field)?;
    Ok((node != NO_NODE).then_some(node))
}

/// Encoded size of a node list: `u16` count, then a `u32` per node.
pub(in crate::protocol) fn node_list_len(nodes: &[NodeId]) -> usize {
    2 + 4 * nodes.len()
}

/// Writes a node list; fails, writing nothing, beyond [`MAX_REPLICA_LIST`] entries.
pub(in crate::protocol) fn put_node_list(
    dst: &mut BytesMut,
    field: &str,
    nodes: &[NodeId],
) -> Result<(), ProtocolError> {
    if nodes.len() > MAX_REPLICA_LIST {
        return Err(ProtocolError::Unencodable(format!(
            "{field} lists {} nodes; at most {MAX_REPLICA_LIST} fit",
            nodes.len()
        )));
    }
    dst.put_u16(nodes.len() as u16);
    for node in nodes {
        dst.put_u32(*node);
    }
    Ok(())
}

/// Reads a node list, refusing more than [`MAX_REPLICA_LIST`] entries before allocating.
pub(in crate::protocol) fn read_node_list(
    r: &mut Reader,
    field: &'static str,
) -> Result<Vec<NodeId>, WireError> {
    let count = usize::from(r.u16(field)?);
    if count > MAX_REPLICA_LIST {
        return Err(WireError::Invalid(format!(
            "field `{field}` lists {count} nodes; at most {MAX_REPLICA_LIST} are allowed"
        )));
    }
    let mut nodes = Vec::with_capacity(r.capped(count, 4));
    for _ in 0..count {
        nodes.push(r.u32(field)?);
    }
    Ok(nodes)
}

/// The most entries (partitions) one request or response list of the replication APIs may
/// hold; a longer list is refused as malformed before anything is allocated for it.
pub const MAX_PARTITIONS_PER_REQUEST: usize = 100_000;

/// Reads a `u32` entry count, refusing more than [`MAX_PARTITIONS_PER_REQUEST`].
pub(in crate::protocol) fn read_entry_count(
    r: &mut Reader,
    field: &'static str,
) -> Result<usize, WireError> {
    let count = r.len32(field)?;
    if count > MAX_PARTITIONS_PER_REQUEST {
        return Err(WireError::Invalid(format!(
            "field `{field}` counts {count} entries; at most {MAX_PARTITIONS_PER_REQUEST} are allowed"
        )));
    }
    Ok(count)
}

/// Writes a `u32` entry count, refusing more than [`MAX_PARTITIONS_PER_REQUEST`].
pub(in crate::protocol) fn put_entry_count(
    dst: &mut BytesMut,
    field: &str,
    count: usize,
) -> Result<(), ProtocolError> {
    if count > MAX_PARTITIONS_PER_REQUEST {
        return Err(ProtocolError::Unencodable(format!(
            "{field} has {count} entries; at most {MAX_PARTITIONS_PER_REQUEST} are allowed"
        )));
    }
    dst.put_u32(count as u32);
    Ok(())
}

/// Reads an error code inside a response entry (a per-partition outcome). A code this build
/// does not know makes the entry malformed: its meaning (retriable or not) cannot be guessed.
pub(in crate::protocol) fn read_error_code(
    r: &mut Reader,
    field: &'static str,
) -> Result<super::ErrorCode, WireError> {
    let raw = r.u16(field)?;
    super::ErrorCode::from_u16(raw).ok_or_else(|| {
        WireError::Invalid(format!("field `{field}` holds unknown error code {raw}"))
    })
}
