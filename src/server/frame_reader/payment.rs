//! Paying for the bytes read: from the connection's own share of memory first, then from the
//! server's shared budget, waiting (and reading nothing) while neither has enough.
//!
//! Why apart: this is the reader's promise that a stranger holds no memory it has not paid for;
//! the rest of the reader only calls `pay` and `try_pay` before and after each read.

use tokio::io::AsyncRead;
use tokio::time::Instant;

use super::super::memory_budget::BudgetError;
use super::{FrameReader, FrameRefusal, ReadError, SpliceCapable};

impl<R: AsyncRead + SpliceCapable + Unpin> FrameReader<R> {
    /// Pays for every buffered byte before the next read (and before a frame is handed on):
    /// from the connection's own share first, then from the shared budget; waits up to
    /// `buffer_wait` while neither has enough, reading nothing meanwhile (backpressure).
    pub(super) async fn pay(&mut self) -> Result<(), ReadError> {
        loop {
            self.try_pay();
            let debt = self.unpaid();
            if debt == 0 {
                break;
            }
            self.wait_for_memory(debt).await?;
        }
        if let Some(since) = self.waiting_since.take() {
            self.waited += since.elapsed();
        }
        Ok(())
    }

    /// Bytes read (into the buffer or a pipe) and not paid for yet.
    fn unpaid(&self) -> usize {
        let piped = self.piping.as_ref().map_or(0, |piping| piping.pipe.holds());
        (self.buffer.len() + piped).saturating_sub(self.held.bytes())
    }

    /// Pays what it can of the buffered bytes now, without waiting.
    pub(super) fn try_pay(&mut self) {
        let debt = self.unpaid();
        let from_own = debt.min(self.own.available());
        if let Some(reservation) = self.own.try_reserve(from_own) {
            self.held.merge(reservation);
        }
        let debt = self.unpaid();
        let from_shared = debt.min(self.shared.available());
        if let Some(reservation) = self.shared.try_reserve(from_shared) {
            self.held.merge(reservation);
        }
    }

    /// Waits until either pool can give some bytes: `needed` of the shared budget, or one byte
    /// of the connection's own share (given back by a request answered meanwhile).
    async fn wait_for_memory(&mut self, needed: usize) -> Result<(), ReadError> {
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        let remaining = self.limits.buffer_wait.saturating_sub(since.elapsed());
        let header = self.frame.and_then(|frame| frame.header);
        let refusal = FrameRefusal::Budget(BudgetError::Exhausted {
            budget_bytes: self.shared.total(),
            waited_ms: u64::try_from(self.limits.buffer_wait.as_millis()).unwrap_or(u64::MAX),
        });
        let exhausted = move || ReadError::Refused { header, refusal };
        if remaining.is_zero() {
            return Err(exhausted());
        }
        let needed = needed.clamp(1, self.shared.total().max(1));
        let reserved = tokio::select! {
            shared = self.shared.reserve(needed, remaining) => shared,
            own = self.own.reserve(1, remaining) => own,
        };
        match reserved {
            Ok(reservation) => {
                self.held.merge(reservation);
                Ok(())
            }
            Err(_) => Err(exhausted()),
        }
    }
}
