//! The figures of a run, printed at its end (and copied into docs/reliability.md for the long
//! runs): faults by kind, produces by answer, the logs' lengths, what power cuts of every broker
//! took from the `flush never` topic, the stale writers' answers after power cuts, and the
//! longest windows in which a partition acknowledged nothing, each with the faults that
//! overlapped it (what bounded it).

use std::collections::BTreeMap;
use std::time::Duration;

use super::checker::{Log, Lost};
use super::faults::{FaultLog, StaleAnswer};
use super::workload::{all_partitions, Answer, History, PartitionKey};

/// How many of the longest unavailability windows the report names.
const WINDOWS_REPORTED: usize = 5;

/// A stretch in which a partition acknowledged nothing.
pub struct Window {
    pub partition: PartitionKey,
    pub from: Duration,
    pub to: Duration,
    /// The faults that overlapped it, as `kind@broker (leader) start..end`.
    pub faults: Vec<String>,
}

pub struct Figures {
    faults: Vec<(String, usize)>,
    acked: usize,
    written: usize,
    not_written: usize,
    unknown: usize,
    grants: usize,
    lease_failures: usize,
    reads: usize,
    fetch_errors: usize,
    log_lengths: Vec<(PartitionKey, usize)>,
    lost: Vec<Lost>,
    stale: [usize; 3],
    skipped_cuts: usize,
    windows: Vec<Window>,
    faults_for: Duration,
}

impl Figures {
    /// The figures of `history` and `faults`; windows are measured from `faults_from` (load ran
    /// before without faults) to `writes_end`.
    pub fn of(
        history: &History,
        faults: &FaultLog,
        logs: &BTreeMap<PartitionKey, Log>,
        lost: &[Lost],
        faults_from: Duration,
        faults_to: Duration,
        writes_end: Duration,
    ) -> Figures {
        let count =
            |f: fn(&Answer) -> bool| history.attempts.iter().filter(|a| f(&a.answer)).count();
        let mut windows = Vec::new();
        for partition in all_partitions() {
            let mut acks: Vec<Duration> = history
                .attempts
                .iter()
                .filter(|a| {
                    (a.topic, a.partition) == partition && matches!(a.answer, Answer::Acked { .. })
                })
                .map(|a| a.returned)
                .filter(|at| *at >= faults_from)
                .collect();
            acks.sort();
            let mut previous = faults_from;
            for at in acks.into_iter().chain(std::iter::once(writes_end)) {
                windows.push((partition, previous, at));
                previous = at;
            }
        }
        windows.sort_by_key(|(_, from, to)| std::cmp::Reverse(*to - *from));
        let windows = windows
            .into_iter()
            .take(WINDOWS_REPORTED)
            .map(|(partition, from, to)| Window {
                partition,
                from,
                to,
                faults: faults
                    .overlapping(from, to)
                    .into_iter()
                    .map(|f| {
                        format!(
                            "{}@{}{} {:.1}s..{:.1}s",
                            f.kind,
                            f.target(),
                            if f.leader { " (leader)" } else { "" },
                            f.start.as_secs_f64(),
                            f.end.as_secs_f64()
                        )
                    })
                    .collect(),
            })
            .collect();
        Figures {
            faults: faults
                .counts()
                .into_iter()
                .map(|(kind, n)| (kind.name().to_owned(), n))
                .collect(),
            acked: count(|a| matches!(a, Answer::Acked { .. })),
            written: count(|a| matches!(a, Answer::Written(_))),
            not_written: count(|a| matches!(a, Answer::NotWritten(_))),
            unknown: count(|a| matches!(a, Answer::Unknown(_))),
            grants: history.grants.len(),
            lease_failures: history.lease_failures,
            reads: history.reads.len(),
            fetch_errors: history.fetch_errors,
            log_lengths: logs.iter().map(|(p, log)| (*p, log.len())).collect(),
            lost: lost.to_vec(),
            stale: [
                StaleAnswer::Refused,
                StaleAnswer::Accepted,
                StaleAnswer::NoAnswer,
            ]
            .map(|answer| {
                faults
                    .stale_probes
                    .iter()
                    .filter(|p| p.answer == answer)
                    .count()
            }),
            skipped_cuts: faults.skipped_cuts,
            windows,
            faults_for: faults_to.saturating_sub(faults_from),
        }
    }

    /// The report as printed.
    pub fn render(&self, seed: u64, asked: Duration) -> String {
        let mut out = format!(
            "nemesis report (seed {seed}, faults for {:.0} s of {:.0} s asked)\n",
            self.faults_for.as_secs_f64(),
            asked.as_secs_f64()
        );
        let total: usize = self.faults.iter().map(|(_, n)| n).sum();
        out.push_str(&format!("faults injected: {total}:"));
        for (kind, n) in &self.faults {
            out.push_str(&format!(" {kind} {n},"));
        }
        out.pop();
        out.push('\n');
        out.push_str(&format!(
            "produces: {} acknowledged, {} written (no offset), {} not written, {} unknown\n",
            self.acked, self.written, self.not_written, self.unknown
        ));
        out.push_str(&format!(
            "leases granted: {} ({} acquisitions refused or failed); records read by consumers: \
             {} ({} fetch errors)\n",
            self.grants, self.lease_failures, self.reads, self.fetch_errors
        ));
        for ((topic, partition), length) in &self.log_lengths {
            out.push_str(&format!(
                "{topic}/{partition}: {length} records in the final log\n"
            ));
        }
        for lost in &self.lost {
            let oldest = lost.oldest_acknowledged.map_or(String::new(), |age| {
                format!(
                    ", the oldest acknowledged {:.1} s before the cut",
                    age.as_secs_f64()
                )
            });
            out.push_str(&format!(
                "power cut of every broker at {:.1}s: {}/{} lost its unsynced tail from offset {} \
                 ({} acknowledged records{oldest})\n",
                lost.cut.as_secs_f64(),
                lost.partition.0,
                lost.partition.1,
                lost.from_offset,
                lost.acknowledged
            ));
        }
        let [refused, accepted, no_answer] = self.stale;
        out.push_str(&format!(
            "stale writers after power cuts: {refused} refused, {accepted} accepted, {no_answer} \
             without an answer; power cuts skipped (no full ISR in time): {}\n",
            self.skipped_cuts
        ));
        out.push_str("longest windows without an acknowledgement:\n");
        for window in &self.windows {
            out.push_str(&format!(
                "  {}/{} {:.1}s..{:.1}s ({:.1} s): {}\n",
                window.partition.0,
                window.partition.1,
                window.from.as_secs_f64(),
                window.to.as_secs_f64(),
                (window.to - window.from).as_secs_f64(),
                if window.faults.is_empty() {
                    "no fault overlapped".to_owned()
                } else {
                    window.faults.join(", ")
                }
            ));
        }
        out
    }
}
