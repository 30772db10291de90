//! The one place that names locks and atomics used by the fence, so that loom can swap them.
//!
//! Under `--cfg fencelog_loom` these are loom's model-checked types; otherwise std's. We use a
//! crate-specific cfg rather than plain `loom` because `--cfg loom` also switches tokio and other
//! dependencies into their own loom modes, which we do not want to model.

#[cfg(fencelog_loom)]
pub use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(fencelog_loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard};

#[cfg(not(fencelog_loom))]
pub use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(fencelog_loom))]
pub use std::sync::{Arc, Mutex, MutexGuard};
