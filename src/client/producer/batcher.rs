//! The batching task: the one task per producer that owns its batches. It fills them from the
//! handle's queue, closes them (fixing their sequence numbers), puts them on the wire in order,
//! resends them after transient failures, and answers every send.
//!
//! One task owning all of it is what keeps the order: batches are closed, numbered, sent and
//! completed in one sequence, so a resend or a failure can never reorder the partition's log.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::batches::{Acknowledgement, ClosedBatch, InFlight, OpenBatch, Reply, Session};
use super::{Command, ProducerConfig, Shared};
use crate::batch::{add_sequence, BatchBuilder};
use crate::client::{Client, ClientError, Outcome, ProduceAck, ProducerId};

/// First pause before resending after a retriable failure; it doubles up to
/// [`MAX_RETRY_BACKOFF`].
pub const INITIAL_RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// Longest pause between resends.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// The batching task: fills batches from the queue, sends them, resends them after transient
/// failures, answers the sends.
pub(super) struct Batcher {
    client: Client,
    shared: Arc<Shared>,
    /// `Some` for an idempotent producer.
    session: Option<Session>,
    config: ProducerConfig,
    open: Option<OpenBatch>,
    ready: VecDeque<ClosedBatch>,
    /// In send order; acknowledgements arrive in the same order.
    in_flight: VecDeque<InFlight>,
    /// Flush waiters, each with the number of batches that must be done first.
    flushes: Vec<(u64, oneshot::Sender<()>)>,
    /// Batches closed so far.
    closed: u64,
    /// Batches answered (or failed) so far; they complete in close order.
    done: u64,
    /// Why an idempotent producer stopped sending: a batch failed for good.
    halted: Option<ClientError>,
    /// When resending may start after a transient failure.
    retry_at: Option<Instant>,
    /// Transient failures in a row (for the backoff).
    retries: u32,
}

impl Batcher {
    /// The task of a producer just started: nothing queued, sequences from 0 when idempotent.
    pub(super) fn new(
        client: Client,
        shared: Arc<Shared>,
        producer_id: Option<ProducerId>,
        config: ProducerConfig,
    ) -> Batcher {
        Batcher {
            client,
            shared,
            session: producer_id.map(|id| Session {
                id,
                next_sequence: 0,
            }),
            config,
            open: None,
            ready: VecDeque::new(),
            in_flight: VecDeque::new(),
            flushes: Vec::new(),
            closed: 0,
            done: 0,
            halted: None,
            retry_at: None,
            retries: 0,
        }
    }

    pub(super) async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut input_open = true;
        loop {
            if let Some(error) = self.shared.dead.get().cloned() {
                // Killed from outside the batches' answers (the lease keeper): what is on the
                // wire may have landed.
                self.fail_in_flight_unknown(&error);
                self.fail_everything(&error);
            }
            if self.retry_at.is_some_and(|at| at <= Instant::now()) {
                self.retry_at = None;
            }
            self.dispatch().await;
            self.answer_flushes();
            if !input_open
                && self.open.is_none()
                && self.ready.is_empty()
                && self.in_flight.is_empty()
            {
                return;
            }
            let has_slot =
                self.in_flight.len() < self.config.max_in_flight && self.retry_at.is_none();
            // Backpressure: take no more records while a full batch waits for a slot.
            let accepting = input_open && self.ready.is_empty();
            // Linger only matters when the batch could be sent; otherwise it keeps filling.
            let linger = self
                .open
                .as_ref()
                .filter(|_| has_slot)
                .map(|open| open.deadline);
            tokio::select! {
                command = commands.recv(), if accepting => match command {
                    None => {
                        input_open = false;
                        self.close_open();
                    }
                    Some(Command::Record { key, value, timestamp, reply, permit }) => {
                        self.add(timestamp, Reply { key, value, sender: reply, _permit: permit });
                    }
                    Some(Command::Flush(waiter)) => {
                        self.close_open();
                        self.flushes.push((self.closed, waiter));
                    }
                    Some(Command::Resume(done)) => {
                        let _ = done.send(self.resume().await);
                    }
                },
                () = sleep_until_opt(linger), if linger.is_some() => self.close_open(),
                () = sleep_until_opt(self.retry_at), if self.retry_at.is_some() => {}
                result = front_acknowledgement(&mut self.in_flight), if !self.in_flight.is_empty() => {
                    self.complete_front(result);
                }
                () = self.shared.died.notified() => {}
            }
        }
    }

    fn add(&mut self, timestamp: i64, reply: Reply) {
        if let Some(error) = self.shared.dead.get() {
            reply.fail(error.clone());
            return;
        }
        if let Some(cause) = &self.halted {
            reply.fail(halted(cause));
            return;
        }
        let key = reply.key.clone();
        let value = reply.value.clone();
        let size = BatchBuilder::record_len(key.as_deref(), Some(&value), &[]);
        if let Some(open) = &self.open {
            if open.builder.encoded_len() + size > self.config.batch_bytes {
                self.close_open();
            }
        }
        let epoch = self.shared.epoch;
        let linger = self.config.linger;
        let producer = self
            .session
            .as_ref()
            .map(|session| (session.id.producer_id, session.id.producer_epoch));
        let codec = self.config.compression;
        let open = self.open.get_or_insert_with(|| OpenBatch {
            builder: BatchBuilder::reusing_with_producer(epoch, producer, Default::default(), 0)
                .compression(codec)
                // `ProducerConfig::validate` refused a codec this build lacks.
                .expect("a built codec"),
            replies: Vec::new(),
            deadline: Instant::now() + linger,
        });
        open.builder.push(timestamp, key.as_deref(), Some(&value));
        open.replies.push(reply);
        if open.replies.len() >= self.config.batch_records
            || open.builder.encoded_len() >= self.config.batch_bytes
        {
            self.close_open();
        }
    }

    /// Closes the open batch: its sequence numbers are fixed now, in close order.
    fn close_open(&mut self) {
        if let Some(open) = self.open.take() {
            self.closed += 1;
            let bytes = match &mut self.session {
                Some(session) => {
                    let base_sequence = session.next_sequence;
                    session.next_sequence = add_sequence(base_sequence, open.builder.len());
                    open.builder.finish_with_sequence(base_sequence)
                }
                None => open.builder.finish(),
            };
            self.ready.push_back(ClosedBatch {
                bytes,
                replies: open.replies,
                give_up_at: Instant::now() + self.config.delivery_timeout,
                maybe_landed: false,
                last_error: None,
            });
        }
    }

    /// Sends ready batches while there is an in-flight slot (and no resend is waiting for its
    /// backoff). Each batch is put on the wire before the next is started, so pipelined batches
    /// are appended in order.
    async fn dispatch(&mut self) {
        if let Some(cause) = self.halted.clone() {
            self.fail_ready(&halted(&cause));
            return;
        }
        while self.retry_at.is_none() && self.in_flight.len() < self.config.max_in_flight {
            let Some(batch) = self.ready.pop_front() else {
                return;
            };
            // Its delivery timeout ran out while it waited (a backoff, a slot): it is not sent
            // again. Batches complete in order, so it fails once those on the wire before it
            // are answered (their deadlines are earlier), and the producer halts behind it.
            if Instant::now() >= batch.give_up_at {
                if !self.in_flight.is_empty() {
                    self.ready.push_front(batch);
                    return;
                }
                self.expire(batch);
                if let Some(cause) = self.halted.clone() {
                    self.fail_ready(&halted(&cause));
                }
                return;
            }
            let start = self.client.start_produce(
                &self.shared.topic,
                self.shared.partition,
                batch.bytes.clone(),
                self.config.acks,
                batch.give_up_at,
            );
            // Putting this batch on the wire may wait (a reconnect, a slot on the connection)
            // until its own delivery deadline, which is later than those of the batches already
            // on the wire. The oldest of those is answered, or reaches its deadline, meanwhile:
            // it is handled at once, so the wait of a newer batch never delays the failure of
            // an older one past that older one's deadline (which the command exits on).
            let started = tokio::select! {
                // First: a produce that was put on the wire is never dropped.
                biased;
                started = start => started,
                older = front_acknowledgement(&mut self.in_flight), if !self.in_flight.is_empty() => {
                    // Nothing of this batch was sent (`start_produce` hands the request to the
                    // connection only as it completes): back to the head of the queue, behind
                    // the batches on the wire.
                    self.ready.push_front(batch);
                    self.complete_front(older);
                    return;
                }
            };
            let ack: Acknowledgement = match started {
                Ok(acknowledged) => Box::pin(acknowledged),
                // Failures to start join the queue too, so batches complete in close order.
                Err(error) => Box::pin(std::future::ready(Err(error))),
            };
            self.in_flight.push_back(InFlight { batch, ack });
        }
    }

    /// Fails `batch`, the oldest pending, whose delivery timeout ran out before it could be
    /// sent (again): with the error of its last attempt, unknown if an earlier send of it got
    /// no answer. The producer halts behind it like behind any batch that failed for good.
    fn expire(&mut self, mut batch: ClosedBatch) {
        let timed_out = ClientError::Timeout {
            after: self.config.delivery_timeout,
        };
        let error = batch.last_error.take().unwrap_or(timed_out);
        self.fail_oldest(batch, error);
    }

    /// Handles the oldest batch's outcome.
    fn complete_front(&mut self, result: Result<ProduceAck, ClientError>) {
        let Some(front) = self.in_flight.pop_front() else {
            return;
        };
        match result {
            Ok(ack) => {
                self.retries = 0;
                self.done += 1;
                for (index, reply) in front.batch.replies.into_iter().enumerate() {
                    reply.succeed(ack.base_offset + index as u64);
                }
            }
            Err(error) if error.is_fencing() => {
                let error = batch_error(&front.batch, error);
                self.shared.kill(error.clone());
                self.in_flight.push_front(front);
                self.fail_everything(&error);
            }
            Err(error)
                if self.session.is_some()
                    && self.halted.is_none()
                    && error.is_retriable()
                    && Instant::now() < front.batch.give_up_at =>
            {
                self.rewind(front, &error);
            }
            Err(error) => self.fail_oldest(front.batch, error),
        }
    }

    /// The oldest batch failed for good with `error`: its sends fail, and an idempotent
    /// producer halts (the server would refuse the gap behind it).
    fn fail_oldest(&mut self, batch: ClosedBatch, error: ClientError) {
        self.done += 1;
        // Behind a failed batch the server refuses the gap: say why, not "out of order".
        let error = match &self.halted {
            Some(cause) => halted(cause),
            None => batch_error(&batch, error),
        };
        for reply in batch.replies {
            reply.fail(error.clone());
        }
        if self.session.is_some() && self.halted.is_none() {
            tracing::warn!(topic = %self.shared.topic, partition = self.shared.partition, %error, "batch failed; the producer sends nothing more until resumed");
            self.halted = Some(error);
        }
    }

    /// A transient failure of the oldest batch: every batch on the wire goes back to the head
    /// of the queue, in order, to be resent after a backoff (on a new connection if the old one
    /// broke). Those that landed already are answered as duplicates with their offsets.
    fn rewind(&mut self, front: InFlight, error: &ClientError) {
        // No answer (a broken connection, a timeout): each batch on the wire may have landed.
        let unanswered = error.outcome() == Outcome::Unknown;
        let mut batches: Vec<ClosedBatch> = std::iter::once(front)
            .chain(self.in_flight.drain(..))
            .map(|in_flight| in_flight.batch)
            .map(|mut batch| {
                batch.maybe_landed |= unanswered;
                batch
            })
            .collect();
        // What the oldest is failed with if its delivery timeout runs out before a resend.
        if let Some(oldest) = batches.first_mut() {
            oldest.last_error = Some(error.clone());
        }
        let give_up_at = batches.first().map(|oldest| oldest.give_up_at);
        // Only a failure without an answer counts as a resend in the stats: a refusal that says
        // nothing was written (a NOT_LEADER redirect, a partition not ready yet) is the ordinary
        // way to find the leader, not a connection failure to report.
        if unanswered {
            self.shared
                .batches_resent
                .fetch_add(batches.len() as u64, Ordering::Relaxed);
            self.shared.resends.fetch_add(1, Ordering::Relaxed);
        }
        while let Some(batch) = batches.pop() {
            self.ready.push_front(batch);
        }
        let backoff = INITIAL_RETRY_BACKOFF
            .saturating_mul(1 << self.retries.min(10))
            .min(MAX_RETRY_BACKOFF);
        self.retries += 1;
        tracing::info!(topic = %self.shared.topic, partition = self.shared.partition, %error, batches = self.ready.len(), ?backoff, "resending unacknowledged batches");
        // Never past the oldest batch's delivery deadline: it fails then, without waiting.
        let retry_at = Instant::now() + backoff;
        self.retry_at = Some(give_up_at.map_or(retry_at, |give_up_at| retry_at.min(give_up_at)));
    }

    /// Starts a new session after a halt: the next producer epoch (or a new producer id when
    /// the epochs run out), sequences from 0.
    async fn resume(&mut self) -> Result<(), ClientError> {
        if let Some(error) = self.shared.dead.get() {
            return Err(error.clone());
        }
        if self.halted.is_none() {
            return Ok(());
        }
        // Batches behind the failure that are still in flight are refused by the server; wait
        // for their answers so that none of them is resent in the new session.
        while let Some(front) = self.in_flight.front_mut() {
            let result = front.ack.as_mut().await;
            self.complete_front(result);
        }
        if let Some(session) = &mut self.session {
            match session.id.producer_epoch.checked_add(1) {
                Some(next) => session.id.producer_epoch = next,
                None => session.id = self.client.init_producer_id().await?,
            }
            session.next_sequence = 0;
        }
        self.halted = None;
        Ok(())
    }

    /// Fails every batch on the wire with [`ClientError::OutcomeUnknown`] caused by `error`: the
    /// producer stopped for a reason other than their answers, so they may have been appended.
    fn fail_in_flight_unknown(&mut self, error: &ClientError) {
        let unknown = ClientError::OutcomeUnknown {
            cause: Box::new(error.clone()),
        };
        for in_flight in self.in_flight.drain(..) {
            self.done += 1;
            for reply in in_flight.batch.replies {
                reply.fail(unknown.clone());
            }
        }
    }

    /// Fails every record not yet acknowledged (in flight, ready, open) with `error`. For the
    /// batches on the wire that is right only when `error` answered the oldest of them (a
    /// producer's batches land in sequence order: none behind a batch that was not appended
    /// was).
    fn fail_everything(&mut self, error: &ClientError) {
        for in_flight in self.in_flight.drain(..) {
            self.done += 1;
            for reply in in_flight.batch.replies {
                reply.fail(error.clone());
            }
        }
        self.fail_ready(error);
    }

    /// Fails every record not yet sent with `error`.
    fn fail_ready(&mut self, error: &ClientError) {
        self.close_open();
        while let Some(batch) = self.ready.pop_front() {
            self.done += 1;
            for reply in batch.replies {
                reply.fail(error.clone());
            }
        }
    }

    fn answer_flushes(&mut self) {
        let done = self.done;
        let mut index = 0;
        while index < self.flushes.len() {
            if self.flushes[index].0 <= done {
                let (_, waiter) = self.flushes.swap_remove(index);
                let _ = waiter.send(());
            } else {
                index += 1;
            }
        }
    }
}

/// The error a failed batch's records get: the answer itself, unless an earlier send of the
/// batch got no answer and this answer does not speak for earlier sends (it came from before
/// the partition's resend check: not the leader, too few replicas, ...): then the batch may
/// be in the log, and the outcome is unknown.
fn batch_error(batch: &ClosedBatch, error: ClientError) -> ClientError {
    if batch.maybe_landed && error.outcome() == Outcome::NotWritten && !error.covers_earlier_sends()
    {
        ClientError::OutcomeUnknown {
            cause: Box::new(error),
        }
    } else {
        error
    }
}

/// The error of a record behind a failed batch.
fn halted(cause: &ClientError) -> ClientError {
    ClientError::ProducerHalted {
        cause: Box::new(cause.clone()),
    }
}

/// The outcome of the oldest batch on the wire (acknowledgements arrive in send order, so only
/// the oldest needs polling). Cancel-safe: the future stays in the queue until it completes.
async fn front_acknowledgement(
    in_flight: &mut VecDeque<InFlight>,
) -> Result<ProduceAck, ClientError> {
    match in_flight.front_mut() {
        Some(front) => front.ack.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
