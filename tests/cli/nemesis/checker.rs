//! The nemesis's checker: what the clients were told ([`History`]) against the final log of each
//! partition (read from its leader once the cluster has healed and converged) and against each
//! replica's files. Each rule returns its violations as sentences; an empty list is a pass.
//!
//! The rules: every acknowledged value is in the log once, at the offset it was acknowledged
//! at, under its epoch; nothing answered "not written" is in the log; nothing is in the log that
//! no writer sent; no value is there twice; epochs never decrease along the log, and a lease
//! granted after another was granted has a higher epoch; an acknowledgement that came before a
//! produce was sent has the lower offset; the high watermark a consumer saw never went back, and
//! every record it read is the record the final log holds there; every replica's files equal the
//! leader's log up to the high watermark.

use std::collections::{BTreeMap, HashMap};

use super::workload::{Answer, History};

/// A partition's log: `(value, epoch)` by offset.
pub type Log = Vec<(String, u64)>;

/// The most sentences one rule reports (the rest are counted).
const MAX_REPORTED: usize = 20;

/// Collects violations, capping how many of each rule are spelled out.
#[derive(Default)]
pub struct Violations {
    by_rule: BTreeMap<&'static str, (usize, Vec<String>)>,
}

impl Violations {
    pub fn add(&mut self, rule: &'static str, sentence: String) {
        let entry = self.by_rule.entry(rule).or_default();
        entry.0 += 1;
        if entry.1.len() < MAX_REPORTED {
            entry.1.push(sentence);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_rule.is_empty()
    }

    /// One paragraph per rule broken.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for (rule, (count, sentences)) in &self.by_rule {
            out.push_str(&format!("{rule}: {count} violation(s)\n"));
            for sentence in sentences {
                out.push_str(&format!("  {sentence}\n"));
            }
        }
        out
    }
}

/// Checks the history against the final logs (`logs[partition]`).
pub fn check_history(history: &History, logs: &BTreeMap<u32, Log>, out: &mut Violations) {
    for (partition, log) in logs {
        check_partition(history, *partition, log, out);
    }
    check_grants(history, out);
    for regression in &history.regressions {
        out.add(
            "high watermark went back",
            format!(
                "partition {}: a consumer saw {} then {} at {:?}",
                regression.partition, regression.before, regression.after, regression.at
            ),
        );
    }
    for read in &history.reads {
        let log = &logs[&read.partition];
        if read.offset >= read.high_watermark {
            out.add(
                "served beyond the high watermark",
                format!(
                    "partition {}: offset {} served with high watermark {}",
                    read.partition, read.offset, read.high_watermark
                ),
            );
        }
        let held = usize::try_from(read.offset)
            .ok()
            .and_then(|offset| log.get(offset));
        if held != Some(&(read.value.clone(), read.epoch)) {
            out.add(
                "a record read is not in the final log",
                format!(
                    "partition {} offset {}: read {:?} (epoch {}), the final log holds {held:?}",
                    read.partition, read.offset, read.value, read.epoch
                ),
            );
        }
    }
}

fn check_partition(history: &History, partition: u32, log: &Log, out: &mut Violations) {
    let mut positions: HashMap<&str, usize> = HashMap::new();
    for (offset, (value, _)) in log.iter().enumerate() {
        if let Some(first) = positions.insert(value.as_str(), offset) {
            out.add(
                "duplicated",
                format!("partition {partition}: {value} at offsets {first} and {offset}"),
            );
        }
    }
    for pair in log.windows(2) {
        if pair[1].1 < pair[0].1 {
            out.add(
                "epoch decreased along the log",
                format!("partition {partition}: {:?} then {:?}", pair[0], pair[1]),
            );
        }
    }
    let attempts: HashMap<&str, _> = history
        .attempts
        .iter()
        .filter(|a| a.partition == partition)
        .map(|a| (a.value.as_str(), a))
        .collect();
    for (offset, (value, _)) in log.iter().enumerate() {
        if !attempts.contains_key(value.as_str()) {
            out.add(
                "in the log, never sent",
                format!("partition {partition}: {value:?} at offset {offset}"),
            );
        }
    }
    for attempt in attempts.values() {
        let found = positions.get(attempt.value.as_str()).copied();
        match (&attempt.answer, found) {
            (Answer::Acked { offset }, Some(at))
                if at as u64 == *offset && log[at].1 != attempt.epoch =>
            {
                out.add(
                    "acknowledged under another epoch",
                    format!(
                        "partition {partition}: {} sent under {} is in the log under {}",
                        attempt.value, attempt.epoch, log[at].1
                    ),
                );
            }
            (Answer::Acked { offset }, Some(at)) if at as u64 == *offset => {}
            (Answer::Acked { offset }, at) => out.add(
                "acknowledged, not at its offset",
                format!(
                    "partition {partition}: {} acknowledged at {offset} (at {:?}), found at {at:?}",
                    attempt.value, attempt.returned
                ),
            ),
            (Answer::Written(why), None) => out.add(
                "answered written, missing",
                format!("partition {partition}: {} ({why})", attempt.value),
            ),
            (Answer::NotWritten(why), Some(at)) => out.add(
                "answered not written, present",
                format!(
                    "partition {partition}: {} at offset {at}, answered at {:?}: {why}",
                    attempt.value, attempt.returned
                ),
            ),
            _ => {}
        }
    }
    // Real-time order: an acknowledgement received before another produce was sent has the
    // lower offset.
    let mut acked: Vec<(std::time::Duration, std::time::Duration, u64, &str)> = attempts
        .values()
        .filter_map(|a| match a.answer {
            Answer::Acked { offset } => Some((a.sent, a.returned, offset, a.value.as_str())),
            _ => None,
        })
        .collect();
    acked.sort_by_key(|(_, returned, _, _)| *returned);
    let mut by_sent = acked.clone();
    by_sent.sort_by_key(|(sent, _, _, _)| *sent);
    let mut highest: Option<(u64, &str)> = None;
    let mut next = 0;
    for (sent, _, offset, value) in by_sent {
        while next < acked.len() && acked[next].1 < sent {
            let (_, _, earlier, earlier_value) = acked[next];
            if highest.is_none_or(|(h, _)| earlier > h) {
                highest = Some((earlier, earlier_value));
            }
            next += 1;
        }
        if let Some((earlier, earlier_value)) = highest {
            if earlier >= offset {
                out.add(
                    "acknowledged out of real-time order",
                    format!(
                        "partition {partition}: {earlier_value} at {earlier} was acknowledged \
                         before {value} was sent, which got {offset}"
                    ),
                );
            }
        }
    }
}

/// A lease granted after another grant of the same partition was answered has a higher epoch.
fn check_grants(history: &History, out: &mut Violations) {
    let mut by_partition: BTreeMap<u32, Vec<_>> = BTreeMap::new();
    for grant in &history.grants {
        by_partition.entry(grant.partition).or_default().push(grant);
    }
    for (partition, grants) in by_partition {
        let mut answered = grants.clone();
        answered.sort_by_key(|g| g.returned);
        let mut asked = grants;
        asked.sort_by_key(|g| g.sent);
        let mut highest: Option<&super::workload::Grant> = None;
        let mut next = 0;
        for grant in asked {
            while next < answered.len() && answered[next].returned < grant.sent {
                if highest.is_none_or(|h| answered[next].epoch > h.epoch) {
                    highest = Some(answered[next]);
                }
                next += 1;
            }
            if let Some(earlier) = highest {
                if earlier.epoch >= grant.epoch {
                    out.add(
                        "epoch went back",
                        format!(
                            "partition {partition}: {} was granted epoch {} at {:?}, then {} \
                             asked at {:?} and got epoch {}",
                            earlier.holder,
                            earlier.epoch,
                            earlier.returned,
                            grant.holder,
                            grant.sent,
                            grant.epoch
                        ),
                    );
                }
            }
        }
    }
}

/// A replica's files (read after the brokers stopped) hold the leader's log up to the high
/// watermark (`log` is the log every replica converged on, so its length is that watermark).
pub fn check_replica(broker: u32, partition: u32, files: &Log, log: &Log, out: &mut Violations) {
    let common = files.len().min(log.len());
    if let Some(offset) = (0..common).find(|i| files[*i] != log[*i]) {
        out.add(
            "replica differs from the leader",
            format!(
                "broker {broker} partition {partition} offset {offset}: files hold {:?}, the \
                 leader served {:?}",
                files[offset], log[offset]
            ),
        );
    } else if files.len() < log.len() {
        out.add(
            "replica differs from the leader",
            format!(
                "broker {broker} partition {partition}: its files end at {}, below the high \
                 watermark {}",
                files.len(),
                log.len()
            ),
        );
    }
}
