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
//! leader's log up to the high watermark; a stale writer is refused after every power cut.
//!
//! Each topic is held to its flush policy's promise. A `flush always` topic loses nothing
//! acknowledged, whatever loses power. A `flush never` topic loses nothing acknowledged while
//! at most one broker at a time loses power (the nemesis waits for the full ISR before each
//! cut); when every broker loses power at once it may lose exactly its unsynced tail: per
//! partition and per such cut, the records acknowledged (or read by a consumer) before the cut
//! that the final log no longer holds at their offsets must be every such record from one
//! offset on (a suffix), and none of them may be anywhere else in the log. Their offsets are
//! then given out again (Kafka's model), so a record read before the cut may differ from the
//! one the final log holds there. On any topic the high watermark a consumer saw may go back
//! across such a cut (only across it): the leader then elected starts from its checkpointed
//! watermark. [`Lost`] counts what each cut took.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use fencelog::domain::FlushPolicy;

use super::faults::{StaleAnswer, StaleProbe};
use super::workload::{flush_of, Answer, History, PartitionKey};

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

/// What one power cut of every broker took from one `flush never` partition: the acknowledged
/// records from `from_offset` on (as of the cut), `acknowledged` of them.
#[derive(Debug, Clone)]
pub struct Lost {
    pub partition: PartitionKey,
    pub cut: Duration,
    pub from_offset: u64,
    pub acknowledged: usize,
    /// How long before the cut the oldest of them was acknowledged: what `flush never` bounds
    /// (about 30 s, `docs/reliability.md` §1), unless an earlier cut kept the log from syncing.
    pub oldest_acknowledged: Option<Duration>,
}

/// What a partition may have lost to power cuts of every broker: the acknowledged values gone,
/// and the reads made before a cut at or above its truncation point (`(cut, offset)`).
#[derive(Default)]
struct Allowed<'h> {
    lost_values: HashSet<&'h str>,
    truncations: Vec<(Duration, u64)>,
}

impl Allowed<'_> {
    fn excuses_read(&self, at: Duration, offset: u64) -> bool {
        self.truncations
            .iter()
            .any(|(cut, from)| at < *cut && offset >= *from)
    }
}

/// Checks the history against the final logs (`logs[partition]`); `cuts` are the instants at
/// which a power cut of every broker dropped the unsynced writes. Returns what each cut took
/// from each `flush never` partition.
pub fn check_history(
    history: &History,
    logs: &BTreeMap<PartitionKey, Log>,
    cuts: &[Duration],
    out: &mut Violations,
) -> Vec<Lost> {
    let mut lost = Vec::new();
    let mut allowed = BTreeMap::new();
    for (key, log) in logs {
        let allowance = if flush_of(key.0) == FlushPolicy::Never {
            unsynced_tails(history, *key, log, cuts, &mut lost, out)
        } else {
            Allowed::default()
        };
        check_partition(history, *key, log, &allowance, out);
        allowed.insert(*key, allowance);
    }
    check_grants(history, out);
    for regression in &history.regressions {
        // Across a power cut of every broker the high watermark may go back on any topic: the
        // leader elected then starts from its checkpointed watermark until the followers fetch
        // (Kafka's leader does the same). The records read must still be the final log's
        // (checked below), and, but for a `flush never` tail, nothing acknowledged is lost.
        let across_a_cut = cuts
            .iter()
            .any(|cut| regression.before_at < *cut && *cut <= regression.at);
        if across_a_cut {
            continue;
        }
        out.add(
            "high watermark went back",
            format!(
                "{}/{}: a consumer saw {} then {} at {:?}",
                regression.topic,
                regression.partition,
                regression.before,
                regression.after,
                regression.at
            ),
        );
    }
    for read in &history.reads {
        let key = (read.topic, read.partition);
        let log = &logs[&key];
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
        if held != Some(&(read.value.clone(), read.epoch))
            && !allowed[&key].excuses_read(read.at, read.offset)
        {
            out.add(
                "a record read is not in the final log",
                format!(
                    "{}/{} offset {}: read {:?} (epoch {}), the final log holds {held:?}",
                    read.topic, read.partition, read.offset, read.value, read.epoch
                ),
            );
        }
    }
    lost
}

/// For a `flush never` partition: what each power cut of every broker took. For each cut, the
/// records acknowledged or read before it (and not taken by an earlier cut) that the final log
/// does not hold at their offsets must be all of those from one offset on, and none of them may
/// be anywhere in the log.
fn unsynced_tails<'h>(
    history: &'h History,
    (topic, partition): PartitionKey,
    log: &Log,
    cuts: &[Duration],
    lost: &mut Vec<Lost>,
    out: &mut Violations,
) -> Allowed<'h> {
    let mut allowed = Allowed::default();
    let positions: HashMap<&str, usize> = log
        .iter()
        .enumerate()
        .map(|(offset, (value, _))| (value.as_str(), offset))
        .collect();
    // (when it was known, offset, value, acknowledged): what the clients were told was there.
    let mut known: Vec<(Duration, u64, &str, bool)> = Vec::new();
    for attempt in &history.attempts {
        if let (true, Answer::Acked { offset }) = (
            attempt.topic == topic && attempt.partition == partition,
            &attempt.answer,
        ) {
            known.push((attempt.returned, *offset, attempt.value.as_str(), true));
        }
    }
    for read in &history.reads {
        if read.topic == topic && read.partition == partition {
            known.push((read.at, read.offset, read.value.as_str(), false));
        }
    }
    let mut excused: HashSet<(u64, &str)> = HashSet::new();
    for cut in cuts {
        let before: Vec<&(Duration, u64, &str, bool)> = known
            .iter()
            .filter(|(at, offset, value, _)| at < cut && !excused.contains(&(*offset, *value)))
            .collect();
        let held_at =
            |offset: u64, value: &str| positions.get(value).map(|at| *at as u64) == Some(offset);
        let Some(from) = before
            .iter()
            .filter(|(_, offset, value, _)| !held_at(*offset, value))
            .map(|(_, offset, _, _)| *offset)
            .min()
        else {
            continue;
        };
        let mut acknowledged = HashSet::new();
        let mut oldest_acknowledged: Option<Duration> = None;
        for (at, offset, value, acked) in before.iter().filter(|k| k.1 >= from) {
            if let Some(at) = positions.get(value) {
                out.add(
                    "lost more than the unsynced tail",
                    format!(
                        "{topic}/{partition}: the power cut of every broker at {cut:?} lost \
                         offsets from {from} on, yet {value} (at {offset} before it) is in the \
                         final log at {at}"
                    ),
                );
                continue;
            }
            excused.insert((*offset, *value));
            if *acked {
                allowed.lost_values.insert(value);
                acknowledged.insert(*value);
                let age = cut.saturating_sub(*at);
                oldest_acknowledged =
                    Some(oldest_acknowledged.map_or(age, |oldest| oldest.max(age)));
            }
        }
        allowed.truncations.push((*cut, from));
        lost.push(Lost {
            partition: (topic, partition),
            cut: *cut,
            from_offset: from,
            acknowledged: acknowledged.len(),
            oldest_acknowledged,
        });
    }
    allowed
}

/// After every power cut a writer one epoch below the highest granted was refused as fenced.
pub fn check_stale_probes(probes: &[StaleProbe], out: &mut Violations) {
    for probe in probes {
        if probe.answer == StaleAnswer::Accepted {
            out.add(
                "a stale writer was accepted after a power cut",
                format!(
                    "{}/{}: epoch {}: {}",
                    probe.partition.0, probe.partition.1, probe.epoch, probe.detail
                ),
            );
        }
    }
}

fn check_partition(
    history: &History,
    (topic, partition): PartitionKey,
    log: &Log,
    allowed: &Allowed,
    out: &mut Violations,
) {
    let mut positions: HashMap<&str, usize> = HashMap::new();
    for (offset, (value, _)) in log.iter().enumerate() {
        if let Some(first) = positions.insert(value.as_str(), offset) {
            out.add(
                "duplicated",
                format!("{topic}/{partition}: {value} at offsets {first} and {offset}"),
            );
        }
    }
    for pair in log.windows(2) {
        if pair[1].1 < pair[0].1 {
            out.add(
                "epoch decreased along the log",
                format!("{topic}/{partition}: {:?} then {:?}", pair[0], pair[1]),
            );
        }
    }
    let attempts: HashMap<&str, _> = history
        .attempts
        .iter()
        .filter(|a| a.topic == topic && a.partition == partition)
        .map(|a| (a.value.as_str(), a))
        .collect();
    for (offset, (value, _)) in log.iter().enumerate() {
        if !attempts.contains_key(value.as_str()) {
            out.add(
                "in the log, never sent",
                format!("{topic}/{partition}: {value:?} at offset {offset}"),
            );
        }
    }
    for attempt in attempts.values() {
        if allowed.lost_values.contains(attempt.value.as_str()) {
            continue;
        }
        let found = positions.get(attempt.value.as_str()).copied();
        match (&attempt.answer, found) {
            (Answer::Acked { offset }, Some(at))
                if at as u64 == *offset && log[at].1 != attempt.epoch =>
            {
                out.add(
                    "acknowledged under another epoch",
                    format!(
                        "{topic}/{partition}: {} sent under {} is in the log under {}",
                        attempt.value, attempt.epoch, log[at].1
                    ),
                );
            }
            (Answer::Acked { offset }, Some(at)) if at as u64 == *offset => {}
            (Answer::Acked { offset }, at) => out.add(
                "acknowledged, not at its offset",
                format!(
                    "{topic}/{partition}: {} acknowledged at {offset} (at {:?}), found at {at:?}",
                    attempt.value, attempt.returned
                ),
            ),
            // Written without an offset before a cut that took a tail: it may have been in it.
            (Answer::Written(_), None)
                if allowed
                    .truncations
                    .iter()
                    .any(|(cut, _)| attempt.returned < *cut) => {}
            (Answer::Written(why), None) => out.add(
                "answered written, missing",
                format!("{topic}/{partition}: {} ({why})", attempt.value),
            ),
            (Answer::NotWritten(why), Some(at)) => out.add(
                "answered not written, present",
                format!(
                    "{topic}/{partition}: {} at offset {at}, answered at {:?}: {why}",
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
        .filter(|a| !allowed.lost_values.contains(a.value.as_str()))
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
                        "{topic}/{partition}: {earlier_value} at {earlier} was acknowledged \
                         before {value} was sent, which got {offset}"
                    ),
                );
            }
        }
    }
}

/// A lease granted after another grant of the same partition was answered has a higher epoch.
fn check_grants(history: &History, out: &mut Violations) {
    let mut by_partition: BTreeMap<PartitionKey, Vec<_>> = BTreeMap::new();
    for grant in &history.grants {
        by_partition
            .entry((grant.topic, grant.partition))
            .or_default()
            .push(grant);
    }
    for ((topic, partition), grants) in by_partition {
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
                            "{topic}/{partition}: {} was granted epoch {} at {:?}, then {} \
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
pub fn check_replica(
    broker: u32,
    (topic, partition): PartitionKey,
    files: &Log,
    log: &Log,
    out: &mut Violations,
) {
    let common = files.len().min(log.len());
    if let Some(offset) = (0..common).find(|i| files[*i] != log[*i]) {
        out.add(
            "replica differs from the leader",
            format!(
                "broker {broker} {topic}/{partition} offset {offset}: files hold {:?}, the \
                 leader served {:?}",
                files[offset], log[offset]
            ),
        );
    } else if files.len() < log.len() {
        out.add(
            "replica differs from the leader",
            format!(
                "broker {broker} {topic}/{partition}: its files end at {}, below the high \
                 watermark {}",
                files.len(),
                log.len()
            ),
        );
    }
}
