//! The end-of-run checker: what every replica holds against what producers and consumers were
//! told, after the cluster healed and caught up.
//!
//! 1. The rules broken while running (a consumer saw the high watermark go back, two replicas
//!    disagreed below a high watermark, epochs went down along a log, an unclean election or
//!    any other bad transition in the store).
//! 2. Liveness after healing: a leader, the full ISR, every ISR member's log identical to the
//!    leader's and committed up to its end, and writes acknowledged on every partition after
//!    the heal.
//! 3. Every acknowledged value present exactly once, at its acknowledged offset (which catches
//!    a write acknowledged by a deposed leader that the new leader never had), in each
//!    producer's send order; nothing refused present; nothing present that nobody sent; every
//!    record a consumer read still there.
//! 4. No follower ever needed its high watermark to stop a truncation (an invariant of the
//!    truncation by leader epoch).
//! 5. Topic delete and re-create (`lineage.rs`): 1 and 3 hold for the partition's final
//!    lineage (what older ones acknowledged went with their topic, and must not be in the
//!    final log); every record is of the final lineage; the floors and producer epochs rose.

use std::collections::BTreeMap;

use fencelog::cluster::replica_log::ReplicaLog;

use super::world::{Outcome, World};

pub fn check(world: &World) -> Vec<String> {
    let mut failures: Vec<String> = world.observed.violations.clone();
    failures.extend(world.store.violations.iter().cloned());
    let clamped = world.truncations_below_high_watermark_total();
    if clamped > 0 {
        failures.push(format!(
            "{clamped} truncations went below a high watermark: the leader lacked committed records"
        ));
    }
    failures.extend(super::lineage::check(
        &world.store.lineages,
        &world.observed.grants,
    ));
    let plan = &world.plan;
    for partition in 0..plan.partitions {
        let Some(state) = world
            .store
            .partition(partition)
            .map(|state| state.value.clone())
        else {
            failures.push(format!("p{partition}: deleted after healing"));
            continue;
        };
        let lineage = world.store.lineage_of(partition).expect("present");
        let Some(leader) = state.leader else {
            failures.push(format!("p{partition}: no leader after healing: {state:?}"));
            continue;
        };
        if state.isr.len() != state.replicas.len() {
            failures.push(format!(
                "p{partition}: the ISR is not full after healing: {state:?}"
            ));
        }
        let leader_log = &world.logs[leader as usize][partition];
        let records = leader_log.records();
        if let Some(record) = records.iter().find(|record| record.lineage != lineage) {
            failures.push(format!(
                "p{partition}: leader {leader}'s final log holds value {:x} of lineage {}, not of the topic's lineage {lineage}",
                record.value, record.lineage
            ));
        }
        if leader_log.high_watermark() != records.len() as u64 {
            failures.push(format!(
                "p{partition}: the leader's high watermark {} is not its log end {} after healing",
                leader_log.high_watermark(),
                records.len()
            ));
        }
        for member in &state.isr {
            let other = world.logs[*member as usize][partition].records();
            if other != records {
                let at = records
                    .iter()
                    .zip(&other)
                    .position(|(a, b)| a != b)
                    .unwrap_or(records.len().min(other.len()));
                failures.push(format!(
                    "p{partition}: ISR member {member}'s log ({} records) differs from leader {leader}'s ({}) from offset {at}",
                    other.len(),
                    records.len()
                ));
            }
        }
        let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
        for (offset, record) in records.iter().enumerate() {
            if let Some(first) = seen.insert(record.value, offset as u64) {
                failures.push(format!(
                    "p{partition}: value {:x} twice, at {first} and {offset}",
                    record.value
                ));
            }
            match world.observed.values.get(&record.value) {
                None => failures.push(format!(
                    "p{partition}: value {:x} at {offset} was never sent",
                    record.value
                )),
                Some((_, sent_to, _)) if *sent_to != partition => failures.push(format!(
                    "p{partition}: value {:x} at {offset} was sent to p{sent_to}",
                    record.value
                )),
                Some((_, _, Outcome::Refused)) => failures.push(format!(
                    "p{partition}: value {:x} at {offset} was refused before it was written",
                    record.value
                )),
                _ => {}
            }
        }
        for (value, (_, sent_to, outcome)) in &world.observed.values {
            if *sent_to != partition {
                continue;
            }
            if let Outcome::Acked {
                offset,
                at_ms,
                lineage: acked_in,
            } = outcome
            {
                if *acked_in != lineage {
                    // Acknowledged by a deleted topic of the name: gone with it.
                    if let Some(at) = seen.get(value) {
                        failures.push(format!(
                            "p{partition}: value {value:x} acknowledged in deleted lineage {acked_in} is at {at} in lineage {lineage}"
                        ));
                    }
                    continue;
                }
                match seen.get(value) {
                    Some(at) if at == offset => {}
                    Some(at) => failures.push(format!(
                        "p{partition}: value {value:x} acknowledged at offset {offset} (at {at_ms} ms) is at {at}"
                    )),
                    None => failures.push(format!(
                        "p{partition}: value {value:x} acknowledged at offset {offset} (at {at_ms} ms) is LOST"
                    )),
                }
            }
        }
        for (read_partition, read_lineage, offset, value) in &world.observed.consumer_reads {
            if *read_partition == partition
                && *read_lineage == lineage
                && records.get(*offset as usize).map(|r| r.value) != Some(*value)
            {
                failures.push(format!(
                    "p{partition}: a consumer read {value:x} at {offset}, the final log has {:?}",
                    records.get(*offset as usize)
                ));
            }
        }
        if !world
            .acks_by_time
            .iter()
            .any(|(at, acked)| *acked == partition && *at > plan.heal_ms)
        {
            failures.push(format!("p{partition}: nothing acknowledged after healing"));
        }
    }
    for (producer, values) in world.observed.sent.iter().enumerate() {
        // Offsets start again in a re-created topic: the order holds within one lineage.
        let mut last: BTreeMap<(usize, u32), u64> = BTreeMap::new();
        for value in values {
            if let Some((
                _,
                partition,
                Outcome::Acked {
                    offset, lineage, ..
                },
            )) = world.observed.values.get(value)
            {
                if let Some(previous) = last.insert((*partition, *lineage), *offset) {
                    if previous >= *offset {
                        failures.push(format!(
                            "producer {producer}: value {value:x} acknowledged at {offset}, before an earlier value at {previous}"
                        ));
                    }
                }
            }
        }
    }
    failures
}
