//! An in-memory `ReplicaLog` that keeps the trait's contract faithfully, for the simulation.
//!
//! A record is a `u64` value stamped with the leader epoch that wrote it and the id of the topic
//! lineage (`lineage.rs`) whose leader wrote it, which travels with it when it is replicated. The leader-epoch fence
//! (lower fenced, equal fine, higher unknown) runs inside `append_replicated` under the same lock
//! as the write; the fence floor never goes down (not on truncation, not on a crash). Durability
//! follows a flush policy: replicated appends are synced before they return (`flush always` on a
//! follower, which must sync before it reports an offset), a leader's own appends become durable
//! only at its next group-commit sync, and a crash loses everything past the durable end.
//! `become_leader`/`become_follower` are durable at once (the epoch checkpoint is fsynced).
//!
//! A leader's DeleteRecords moves its log start (durably, never past its high watermark), and
//! a leader refuses to serve a fetch below it; a follower whose whole log lies below its
//! leader's log start starts over there. The records below a log start stay in `records`, so
//! that every replica's vector keeps indexing offsets from 0 for the checker: a follower that
//! starts over is given all the leader's deleted records as filler (`start_over_with`), in
//! place of every record it had (the partition's start-over deletes them all), which no one
//! may read or serve as a record of its own again (they are below its log start).

use std::sync::Mutex;

use fencelog::cluster::replica_log::{ReplicaLog, ReplicaLogError};
use fencelog::cluster::LeaderEpoch;
use fencelog::storage::leader_epochs;

/// One stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub value: u64,
    pub epoch: LeaderEpoch,
    /// The lineage whose leader appended it (never changed by replication).
    pub lineage: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Follower,
    Leader(LeaderEpoch),
}

#[derive(Debug, Clone)]
struct State {
    records: Vec<Record>,
    history: Vec<(LeaderEpoch, u64)>,
    floor: LeaderEpoch,
    high_watermark: u64,
    durable_end: u64,
    /// Records below it are deleted (kept in `records` only as filler; see the module docs).
    log_start: u64,
    role: Role,
}

/// The in-memory log of one replica.
#[derive(Debug)]
pub struct SimLog {
    state: Mutex<State>,
}

/// Encodes replicated batches: base offset, count, then each record's value and lineage (the
/// records' epoch travels as `records_epoch`).
pub fn encode_batches(base_offset: u64, records: &[Record]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(16 + 16 * records.len());
    bytes.extend_from_slice(&base_offset.to_be_bytes());
    bytes.extend_from_slice(&(records.len() as u64).to_be_bytes());
    for record in records {
        bytes.extend_from_slice(&record.value.to_be_bytes());
        bytes.extend_from_slice(&u64::from(record.lineage).to_be_bytes());
    }
    bytes
}

/// The (value, lineage) pairs of encoded batches, after their base offset.
pub fn decode_batches(bytes: &[u8]) -> Result<(u64, Vec<(u64, u32)>), ReplicaLogError> {
    let word = |index: usize| -> Option<u64> {
        let slice = bytes.get(index * 8..index * 8 + 8)?;
        Some(u64::from_be_bytes(slice.try_into().ok()?))
    };
    let corrupt = || ReplicaLogError::Corrupt("short batch".to_string());
    let base = word(0).ok_or_else(corrupt)?;
    let count = word(1).ok_or_else(corrupt)? as usize;
    if bytes.len() != 16 + 16 * count {
        return Err(corrupt());
    }
    let values = (0..count)
        .map(|i| {
            let value = word(2 + 2 * i).expect("length checked");
            let lineage = word(3 + 2 * i).expect("length checked") as u32;
            (value, lineage)
        })
        .collect();
    Ok((base, values))
}

impl SimLog {
    pub fn new() -> Self {
        SimLog {
            state: Mutex::new(State {
                records: Vec::new(),
                history: Vec::new(),
                floor: 0,
                high_watermark: 0,
                durable_end: 0,
                log_start: 0,
                role: Role::Follower,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("sim log lock")
    }

    /// A producer append on the leader of `epoch`: the fence check and the write under one lock.
    /// The records are stamped with the leader's `lineage`. Returns the first offset.
    pub fn append_as_leader(
        &self,
        values: &[u64],
        epoch: LeaderEpoch,
        lineage: u32,
    ) -> Result<u64, String> {
        let mut state = self.lock();
        if state.role != Role::Leader(epoch) || state.floor != epoch {
            return Err(format!(
                "not leader of epoch {epoch} (role {:?}, floor {})",
                state.role, state.floor
            ));
        }
        let base = state.records.len() as u64;
        state.records.extend(values.iter().map(|&value| Record {
            value,
            epoch,
            lineage,
        }));
        Ok(base)
    }

    /// A leader's DeleteRecords: moves the log start up to `offset`, never past the high
    /// watermark (nor back); durable at once, as the `log-start` file is. Returns the log start.
    pub fn delete_records_before(&self, offset: u64) -> Result<u64, String> {
        let mut state = self.lock();
        if !matches!(state.role, Role::Leader(_)) {
            return Err("only a leader deletes records".into());
        }
        if offset > state.high_watermark {
            return Err(format!(
                "offset {offset} is past the high watermark {}",
                state.high_watermark
            ));
        }
        state.log_start = state.log_start.max(offset);
        Ok(state.log_start)
    }

    /// `ReplicaLog::start_over_at(offset)` with `filler`, the leader's deleted records from 0 to
    /// `offset`, standing in for every record below the new start (see the module docs). As the
    /// partition does: only a follower, only past the log end (a no-op at it); the history is
    /// emptied, the floor stays, the log start, high watermark and durable end become `offset`.
    pub fn start_over_with(&self, offset: u64, filler: &[Record]) -> Result<(), ReplicaLogError> {
        let mut state = self.lock();
        if state.role != Role::Follower {
            return Err(ReplicaLogError::Storage(
                "a leader never starts over".into(),
            ));
        }
        let log_end = state.records.len() as u64;
        if offset < log_end {
            return Err(ReplicaLogError::Storage(format!(
                "a start-over at {offset} is below the log end {log_end}"
            )));
        }
        if offset == log_end {
            return Ok(());
        }
        assert_eq!(
            filler.len() as u64,
            offset,
            "the filler covers every offset below the new start"
        );
        state.records = filler.to_vec();
        state.history.clear();
        state.log_start = offset;
        state.high_watermark = state.high_watermark.max(offset);
        state.durable_end = offset;
        Ok(())
    }

    /// `Partition::follow_log_start` with `filler`, every record of the leader's below its log
    /// start: this log's start moves up to the leader's, never past its own high watermark, and
    /// the records below it become the leader's (see the module docs). Durable at once, as the
    /// partition's `log-start` file is written durably.
    pub fn follow_log_start_with(&self, filler: &[Record]) {
        let mut state = self.lock();
        let target = (filler.len() as u64)
            .min(state.high_watermark)
            .min(state.records.len() as u64);
        if target <= state.log_start {
            return;
        }
        let below = target as usize;
        state.records[..below].copy_from_slice(&filler[..below]);
        state.log_start = target;
    }

    /// The group-commit sync: everything written is durable.
    pub fn sync(&self) -> u64 {
        let mut state = self.lock();
        state.durable_end = state.records.len() as u64;
        state.durable_end
    }

    pub fn durable_end(&self) -> u64 {
        self.lock().durable_end
    }

    /// A crash: the unsynced suffix is lost, the history entries past the new end with it; the
    /// fence floor and the (durable, capped) high watermark survive; the restarted replica is no
    /// one's leader until `become_leader`.
    pub fn crash(&self) {
        let mut state = self.lock();
        let durable_end = state.durable_end;
        state.records.truncate(durable_end as usize);
        state.history.retain(|(_, start)| *start <= durable_end);
        state.high_watermark = state.high_watermark.min(durable_end);
        // Never past the log end (the partition's open does the same); the high watermark a
        // log start is bounded by is durable, so this never moves it in practice.
        state.log_start = state.log_start.min(durable_end);
        state.role = Role::Follower;
    }

    pub fn records(&self) -> Vec<Record> {
        self.lock().records.clone()
    }

    pub fn history(&self) -> Vec<(LeaderEpoch, u64)> {
        self.lock().history.clone()
    }

    /// Up to `max` records from `from` to `to` (exclusive).
    pub fn read(&self, from: u64, to: u64, max: u64) -> Vec<Record> {
        let state = self.lock();
        let end = to.min(from + max).min(state.records.len() as u64);
        state.records[from.min(end) as usize..end as usize].to_vec()
    }

    /// The records from `from` to `to` (exclusive), as far as the log reaches.
    pub fn range(&self, from: u64, to: u64) -> Vec<Record> {
        let state = self.lock();
        let end = (to as usize).min(state.records.len());
        state.records[(from as usize).min(end)..end].to_vec()
    }
}

impl ReplicaLog for SimLog {
    fn log_end_offset(&self) -> u64 {
        self.lock().records.len() as u64
    }

    fn log_start_offset(&self) -> u64 {
        self.lock().log_start
    }

    fn high_watermark(&self) -> u64 {
        self.lock().high_watermark
    }

    fn durable_end_offset(&self) -> u64 {
        self.lock().durable_end
    }

    fn leader_epoch_floor(&self) -> LeaderEpoch {
        self.lock().floor
    }

    fn latest_epoch_entry(&self) -> Option<(LeaderEpoch, u64)> {
        self.lock().history.last().copied()
    }

    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
        let state = self.lock();
        leader_epochs::end_offset_for(&state.history, epoch, state.records.len() as u64)
    }

    fn become_leader(&self, epoch: LeaderEpoch) -> Result<(), ReplicaLogError> {
        let mut state = self.lock();
        if epoch < state.floor {
            return Err(ReplicaLogError::EpochNotNewer {
                epoch,
                current: state.floor,
            });
        }
        // The checkpoint write syncs the log too, so the history never names a start past it.
        state.durable_end = state.records.len() as u64;
        state.floor = epoch;
        let end = state.records.len() as u64;
        if state
            .history
            .last()
            .is_none_or(|(latest, _)| *latest < epoch)
        {
            state.history.push((epoch, end));
        }
        state.role = Role::Leader(epoch);
        Ok(())
    }

    fn become_follower(&self, epoch: LeaderEpoch) -> Result<(), ReplicaLogError> {
        let mut state = self.lock();
        if epoch < state.floor {
            return Err(ReplicaLogError::EpochNotNewer {
                epoch,
                current: state.floor,
            });
        }
        state.floor = epoch;
        state.role = Role::Follower;
        Ok(())
    }

    fn append_replicated(
        &self,
        batches: &[u8],
        records_epoch: LeaderEpoch,
        leader_epoch: LeaderEpoch,
    ) -> Result<u64, ReplicaLogError> {
        let mut state = self.lock();
        // The fence first, in the same critical section as the write.
        if leader_epoch < state.floor {
            return Err(ReplicaLogError::FencedLeaderEpoch {
                epoch: leader_epoch,
                current: state.floor,
            });
        }
        if leader_epoch > state.floor {
            return Err(ReplicaLogError::UnknownLeaderEpoch {
                epoch: leader_epoch,
                current: state.floor,
            });
        }
        if state.role != Role::Follower {
            return Err(ReplicaLogError::Storage(
                "a leader does not append replicated records".into(),
            ));
        }
        let (base_offset, values) = decode_batches(batches)?;
        let log_end_offset = state.records.len() as u64;
        if base_offset != log_end_offset {
            return Err(ReplicaLogError::OffsetMismatch {
                base_offset,
                log_end_offset,
            });
        }
        if records_epoch > leader_epoch {
            return Err(ReplicaLogError::Corrupt(format!(
                "records of epoch {records_epoch} from the leader of {leader_epoch}"
            )));
        }
        if values.is_empty() {
            return Ok(log_end_offset);
        }
        match state.history.last() {
            Some((latest, _)) if *latest > records_epoch => {
                return Err(ReplicaLogError::Corrupt(format!(
                    "records of epoch {records_epoch} after epoch {latest}"
                )));
            }
            Some((latest, _)) if *latest == records_epoch => {}
            _ => state.history.push((records_epoch, base_offset)),
        }
        state
            .records
            .extend(values.iter().map(|&(value, lineage)| Record {
                value,
                epoch: records_epoch,
                lineage,
            }));
        // flush always on a follower: synced before the offset is reported.
        state.durable_end = state.records.len() as u64;
        Ok(state.durable_end)
    }

    fn start_over_at(&self, offset: u64) -> Result<(), ReplicaLogError> {
        assert_eq!(
            offset,
            self.log_end_offset(),
            "the simulation starts a log over with start_over_with (it needs the filler)"
        );
        self.start_over_with(offset, &[])
    }

    fn truncate_to(&self, offset: u64) -> Result<(), ReplicaLogError> {
        let mut state = self.lock();
        // Below the high watermark only when the leader's log is shorter (the follower counts
        // it, and the checker holds it to be a bug here, where nothing synced is lost).
        state.high_watermark = state.high_watermark.min(offset);
        if offset > state.records.len() as u64 {
            return Ok(());
        }
        // At the log end this still drops epochs that wrote nothing (an ex-leader's last one),
        // which the follower's epoch-end rounds need to get past.
        state.records.truncate(offset as usize);
        state.durable_end = state.durable_end.min(offset);
        state.history.retain(|(_, start)| *start < offset);
        // Only below a high watermark a crash left under the log start (as the partition does).
        state.log_start = state.log_start.min(offset);
        Ok(())
    }

    fn advance_high_watermark(&self, offset: u64) {
        let mut state = self.lock();
        let capped = offset.min(state.durable_end);
        if capped > state.high_watermark {
            state.high_watermark = capped;
        }
    }
}
