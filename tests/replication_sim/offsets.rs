//! Partition 0 of every simulated run stands for a partition of the offsets topic
//! (`fencelog::broker::offsets_topic`): each value written there is read as a group's commit,
//! and each broker that leads it, once per leader epoch, "loads" it as a new coordinator does
//! (only once its high watermark covers its log end, replaying the records below the high
//! watermark through the real `OffsetsState`). The load must answer, for every group, the last
//! commit acknowledged before it or a commit written after that one: a coordinator move never
//! loses an acknowledged commit and never goes back to an older position.

use std::collections::BTreeMap;

use fencelog::broker::offsets_topic::{CommitEntry, OffsetsRecord, OffsetsState};

/// The simulated partition read as an offsets partition.
pub const OFFSETS_PARTITION: usize = 0;
/// Groups the commits are spread over.
const GROUPS: u64 = 4;

/// The commit value `value` stands for: group `value % GROUPS` at position `value`.
fn commit_of(value: u64) -> OffsetsRecord {
    OffsetsRecord::Commit {
        group: group_of(value),
        offsets: vec![CommitEntry {
            topic: "t".into(),
            partition: 0,
            offset: value,
            metadata: String::new(),
            lineage: 0,
        }],
    }
}

fn group_of(value: u64) -> String {
    format!("g{}", value % GROUPS)
}

/// Checks one load of `values` (the leader's log, in order) below `high_watermark`, against
/// `acknowledged` (value -> acknowledged offset, for the offsets partition, before the load).
pub fn check_load(
    values: &[u64],
    high_watermark: u64,
    acknowledged: &BTreeMap<u64, u64>,
) -> Result<(), String> {
    let mut state = OffsetsState::default();
    let mut offset_of = BTreeMap::new();
    for (offset, value) in values.iter().enumerate().take(high_watermark as usize) {
        state.apply(offset as u64, &commit_of(*value));
        offset_of.insert(*value, offset as u64);
    }
    let mut latest_acknowledged: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (value, offset) in acknowledged {
        let group = group_of(*value);
        let latest = latest_acknowledged
            .entry(group)
            .or_insert((*offset, *value));
        if *offset > latest.0 {
            *latest = (*offset, *value);
        }
    }
    for (group, (acknowledged_at, value)) in latest_acknowledged {
        let Some(answer) = state.committed(&group, "t", 0) else {
            return Err(format!(
                "the load lost group {group}'s commit {value:x} acknowledged at offset {acknowledged_at}"
            ));
        };
        let answered_at = offset_of.get(&answer.offset).copied().unwrap_or(0);
        if answered_at < acknowledged_at {
            return Err(format!(
                "the load answers group {group} with commit {:x} (offset {answered_at}), older than {value:x} acknowledged at offset {acknowledged_at}",
                answer.offset
            ));
        }
    }
    Ok(())
}
