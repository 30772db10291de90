//! Live progress: counters the load generators bump, and an indicatif bar on stderr that shows
//! them (hidden for `--json` and when stderr is not a terminal, so scripts see clean output).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Records acknowledged and received so far, warm-up included.
#[derive(Debug, Default)]
pub struct Counters {
    /// Records acknowledged to producers.
    pub produced: AtomicU64,
    /// Records received by consumers.
    pub consumed: AtomicU64,
    /// Bytes of the batches producers sent (as they went on the wire, compressed or not),
    /// warm-up included.
    pub sent_batch_bytes: AtomicU64,
    /// Bytes of the values in those batches.
    pub sent_value_bytes: AtomicU64,
}

impl Counters {
    /// Adds acknowledged records.
    pub fn add_produced(&self, records: u64) {
        self.produced.fetch_add(records, Ordering::Relaxed);
    }

    /// Adds a sent batch of `batch_bytes` bytes holding `value_bytes` bytes of values.
    pub fn add_sent(&self, batch_bytes: usize, value_bytes: u64) {
        self.sent_batch_bytes
            .fetch_add(batch_bytes as u64, Ordering::Relaxed);
        self.sent_value_bytes
            .fetch_add(value_bytes, Ordering::Relaxed);
    }

    /// Bytes on the wire per value byte of the batches sent so far (`None` before any).
    pub fn wire_bytes_per_value_byte(&self) -> Option<f64> {
        let values = self.sent_value_bytes.load(Ordering::Relaxed);
        (values > 0).then(|| self.sent_batch_bytes.load(Ordering::Relaxed) as f64 / values as f64)
    }

    /// Adds received records.
    pub fn add_consumed(&self, records: u64) {
        self.consumed.fetch_add(records, Ordering::Relaxed);
    }
}

/// The progress bar and the task that refreshes it.
pub struct Progress {
    bar: ProgressBar,
    refresh: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// A bar on stderr, or a hidden one if `hidden` or stderr is not a terminal.
    pub fn new(hidden: bool) -> Self {
        let target = if hidden || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        Self { bar, refresh: None }
    }

    /// Shows a phase of `total` length (a bar), or of unknown length (a spinner), refreshing
    /// its message from `counters` ten times a second.
    pub fn phase(&mut self, name: &'static str, total: Option<Duration>, counters: Arc<Counters>) {
        self.stop_refresh();
        let style = match total {
            Some(total) => {
                self.bar.set_length(total.as_millis() as u64);
                ProgressStyle::with_template("{spinner} {prefix:>8} [{bar:30}] {elapsed:>4} {msg}")
            }
            None => {
                self.bar.unset_length();
                ProgressStyle::with_template("{spinner} {prefix:>8} {elapsed:>4} {msg}")
            }
        }
        .expect("valid progress template")
        .progress_chars("=> ");
        self.bar.set_style(style);
        self.bar.set_prefix(name);
        self.bar.reset();
        let bar = self.bar.clone();
        self.refresh = Some(tokio::spawn(async move {
            let started = Instant::now();
            let mut last = (0u64, 0u64, started);
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let now = Instant::now();
                let produced = counters.produced.load(Ordering::Relaxed);
                let consumed = counters.consumed.load(Ordering::Relaxed);
                let seconds = now.duration_since(last.2).as_secs_f64().max(1e-3);
                if now.duration_since(last.2) >= Duration::from_millis(500) {
                    let produce_rate = (produced - last.0) as f64 / seconds;
                    let consume_rate = (consumed - last.1) as f64 / seconds;
                    bar.set_message(format!(
                        "produced {produced} ({produce_rate:.0}/s)  consumed {consumed} ({consume_rate:.0}/s)"
                    ));
                    last = (produced, consumed, now);
                }
                bar.set_position(now.duration_since(started).as_millis() as u64);
            }
        }));
    }

    fn stop_refresh(&mut self) {
        if let Some(refresh) = self.refresh.take() {
            refresh.abort();
        }
    }

    /// Removes the bar.
    pub fn finish(mut self) {
        self.stop_refresh();
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop_refresh();
    }
}
