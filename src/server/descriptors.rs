//! Running out of file descriptors without leaving clients hanging.
//!
//! When the process reaches its open-file limit, `accept` fails with `EMFILE` (or `ENFILE` for
//! the system's table) and the connection stays in the listen backlog: the client sees a
//! connected socket that nobody answers until it times out. The classic remedy: keep one spare
//! descriptor open; when `accept` runs out, close the spare, accept the waiting connection with
//! the descriptor that frees, answer it `TOO_MANY_CONNECTIONS` (or just close it, for a protocol
//! without that answer), and open the spare again. Each refusal takes the backlog down by one,
//! so every waiting client hears an answer promptly, and the server keeps serving the
//! connections it has; once descriptors free up, accepts succeed again.

use std::fs::File;
use std::io;

/// The descriptor kept in reserve for refusing connections when the process is out of them.
#[derive(Debug)]
pub struct SpareDescriptor {
    spare: Option<File>,
}

impl SpareDescriptor {
    /// Opens the spare (`/dev/null`). Without one (already out of descriptors at start) the
    /// server still runs; refusals then wait for a descriptor like any accept.
    pub fn new() -> Self {
        Self {
            spare: open_spare(),
        }
    }

    /// Frees the spare so that the next `accept` can succeed; returns whether there was one.
    pub fn release(&mut self) -> bool {
        self.spare.take().is_some()
    }

    /// Opens the spare again if it is not held (after a refusal; it may fail while the process
    /// is still out of descriptors, and is tried again at the next refusal).
    pub fn restore(&mut self) {
        if self.spare.is_none() {
            self.spare = open_spare();
        }
    }
}

impl Default for SpareDescriptor {
    fn default() -> Self {
        Self::new()
    }
}

fn open_spare() -> Option<File> {
    File::open("/dev/null")
        .inspect_err(|error| tracing::warn!(%error, "could not open the spare descriptor"))
        .ok()
}

/// Whether an `accept` error means the process or the system is out of descriptors.
pub fn is_out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}
