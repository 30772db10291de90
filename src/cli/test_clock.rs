//! The hidden `serve --test-clock-skew-file PATH`: a test's handle on a real server's lease
//! clock. A thread re-reads the file every [`POLL`] and jumps a [`SkewedClock`] forward to the
//! number of milliseconds it holds, so the nemesis can make one broker's clock run ahead (its
//! leases and its leadership deadline expire early) without a production knob anyone would
//! set by mistake: the flag is hidden from `--help` and warns when it moves the clock.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SkewedClock};

/// How often the file is read.
const POLL: Duration = Duration::from_millis(20);

/// A clock that follows the skew written to `path` (missing or unparsable: no change).
pub fn follow_skew_file(path: PathBuf) -> Arc<dyn Clock> {
    let clock = Arc::new(SkewedClock::new());
    let followed = Arc::clone(&clock);
    tracing::warn!(
        path = %path.display(),
        "--test-clock-skew-file: this server's lease clock follows a file (testing only)"
    );
    std::thread::Builder::new()
        .name("test-clock".into())
        .spawn(move || loop {
            if let Some(total) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
            {
                if followed.jump_to(Duration::from_millis(total)) {
                    tracing::warn!(skew_ms = total, "lease clock jumped forward (testing only)");
                }
            }
            std::thread::sleep(POLL);
        })
        .expect("spawn the test clock thread");
    clock
}
