//! Partition 1 of a simulated run (when it has two) stands for a partition written by
//! transactional producers (issue 31): a value is read as a transactional record or a
//! transaction marker of its producer, and each time a consumer reads from a leader, that
//! leader's whole log (past its high watermark too, as a real leader's producer state holds it)
//! is replayed through the real `fencelog::storage::transactions::Transactions` to find the
//! last stable offset and the aborted transactions a read_committed reader is given.
//!
//! Checked, at every such read, across leader changes and truncations:
//! * the real tracker agrees with a plain model of the log (the same last stable offset, the
//!   same visible records), so a marker past the high watermark never publishes anything;
//! * the last stable offset never passes the high watermark;
//! * within a lineage, a record once visible to a read_committed reader stays visible through
//!   every later leader, and a record once seen aborted is never visible: a failover never
//!   un-commits a transaction or publishes an aborted one.

use std::collections::{BTreeMap, BTreeSet};

use fencelog::storage::transactions::Transactions;

/// The simulated partition read as a transactional one.
pub const TRANSACTIONS_PARTITION: usize = 1;

/// What a value stands for: its producer (the sending client) and, for a marker, whether it
/// commits. Every fourth value of a client is a marker, commits and aborts alternating.
fn meaning(value: u64) -> (i64, Option<bool>) {
    let producer = (value >> 32) as i64;
    let sequence = value & 0xffff_ffff;
    if sequence.is_multiple_of(4) {
        (producer, Some((sequence / 4).is_multiple_of(2)))
    } else {
        (producer, None)
    }
}

/// What a read_committed reader of a leader sees.
#[derive(Debug, PartialEq, Eq)]
pub struct View {
    pub last_stable_offset: u64,
    /// Data values below the last stable offset that no abort covers.
    pub visible: BTreeSet<u64>,
    /// Data values below the last stable offset that an abort covers.
    pub aborted: BTreeSet<u64>,
}

/// The view through the real tracker.
fn real_view(values: &[u64], high_watermark: u64) -> View {
    let mut transactions = Transactions::default();
    for (offset, value) in values.iter().enumerate() {
        match meaning(*value) {
            (producer, None) => transactions.on_data(producer, 0, offset as u64),
            (producer, Some(commit)) => transactions.on_marker(producer, !commit, offset as u64),
        }
    }
    let last_stable_offset = transactions.last_stable_offset(high_watermark);
    let aborted_ranges = transactions.aborted_between(0, last_stable_offset);
    let mut view = View {
        last_stable_offset,
        visible: BTreeSet::new(),
        aborted: BTreeSet::new(),
    };
    for (offset, value) in values.iter().enumerate().take(last_stable_offset as usize) {
        let (producer, marker) = meaning(*value);
        if marker.is_some() {
            continue;
        }
        let offset = offset as u64;
        let dropped = aborted_ranges.iter().any(|aborted| {
            aborted.producer_id == producer
                && aborted.first_offset <= offset
                && offset < aborted.last_offset
        });
        if dropped {
            view.aborted.insert(*value);
        } else {
            view.visible.insert(*value);
        }
    }
    view
}

/// The same view from a plain model: per producer, the data since its last marker; a marker
/// below the high watermark settles them as committed or aborted; the last stable offset is the
/// first offset of the oldest unsettled transaction.
fn model_view(values: &[u64], high_watermark: u64) -> View {
    let mut open: BTreeMap<i64, Vec<(u64, u64)>> = BTreeMap::new();
    let mut settled: BTreeMap<u64, bool> = BTreeMap::new();
    let mut unsettled_from = high_watermark;
    for (offset, value) in values.iter().enumerate() {
        let offset = offset as u64;
        match meaning(*value) {
            (producer, None) => open.entry(producer).or_default().push((offset, *value)),
            (producer, Some(commit)) => {
                let records = open.remove(&producer).unwrap_or_default();
                if offset < high_watermark {
                    for (_, data) in records {
                        settled.insert(data, commit);
                    }
                } else if let Some((first, _)) = records.first() {
                    unsettled_from = unsettled_from.min(*first);
                }
            }
        }
    }
    for records in open.values() {
        if let Some((first, _)) = records.first() {
            unsettled_from = unsettled_from.min(*first);
        }
    }
    let last_stable_offset = unsettled_from.min(high_watermark);
    let mut view = View {
        last_stable_offset,
        visible: BTreeSet::new(),
        aborted: BTreeSet::new(),
    };
    for value in values.iter().take(last_stable_offset as usize) {
        match settled.get(value) {
            Some(true) => {
                view.visible.insert(*value);
            }
            Some(false) => {
                view.aborted.insert(*value);
            }
            None => {}
        }
    }
    view
}

/// What read_committed readers saw of one lineage of the partition so far.
#[derive(Debug, Default)]
pub struct Seen {
    visible: BTreeSet<u64>,
    aborted: BTreeSet<u64>,
}

/// Checks one read of a leader's log `values` at `high_watermark` against the model and
/// against what readers saw before (`seen`, of the same lineage), then remembers it. How many
/// records the read showed visible and aborted.
pub fn check_read(
    values: &[u64],
    high_watermark: u64,
    seen: &mut Seen,
) -> Result<(usize, usize), String> {
    let real = real_view(values, high_watermark);
    let model = model_view(values, high_watermark);
    if real != model {
        return Err(format!(
            "the transaction tracker disagrees with the model at high watermark {high_watermark}: last stable offset {} vs {}, visible {:?} vs {:?}",
            real.last_stable_offset, model.last_stable_offset, real.visible, model.visible
        ));
    }
    if real.last_stable_offset > high_watermark {
        return Err(format!(
            "last stable offset {} past the high watermark {high_watermark}",
            real.last_stable_offset
        ));
    }
    if let Some(lost) = seen
        .visible
        .iter()
        .find(|value| !real.visible.contains(value))
    {
        return Err(format!(
            "value {lost} was visible to read_committed and is not any more (last stable offset {})",
            real.last_stable_offset
        ));
    }
    if let Some(value) = real
        .visible
        .iter()
        .find(|value| seen.aborted.contains(value))
    {
        return Err(format!("value {value} was seen aborted and is now visible"));
    }
    let counts = (real.visible.len(), real.aborted.len());
    seen.visible.extend(real.visible);
    seen.aborted.extend(real.aborted);
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(client: u64, sequence: u64) -> u64 {
        ((client + 1) << 32) | sequence
    }

    #[test]
    fn the_tracker_and_the_model_agree_on_a_marker_past_the_high_watermark() {
        // Client 0: data 5, 6, 7, then its commit marker (sequence 8) at offset 3.
        let log = [value(0, 5), value(0, 6), value(0, 7), value(0, 8)];
        let held = real_view(&log, 3);
        assert_eq!(
            held.last_stable_offset, 0,
            "the marker is not replicated yet"
        );
        assert!(held.visible.is_empty());
        let settled = real_view(&log, 4);
        assert_eq!(settled, model_view(&log, 4));
        assert_eq!(settled.visible.len(), 3);
        let mut seen = Seen::default();
        check_read(&log, 4, &mut seen).unwrap();
        // A leader that lost the marker cannot un-commit what readers saw.
        assert!(check_read(&log[..3], 3, &mut seen).is_err());
    }
}
