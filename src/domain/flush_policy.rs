//! When acknowledged appends reach the disk: the durability/throughput trade-off of a topic.
//!
//! It is chosen per topic by operators (command-line flags, config files: the textual form
//! here), carried by both protocols in topic settings, and given its meaning by storage. Only the
//! meaning and the text form live here; each wire format encodes it on its own.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Flush interval used when a policy string says just `"interval"`.
pub const DEFAULT_FLUSH_INTERVAL_MS: u64 = 100;

/// When the storage layer fsyncs appended data.
///
/// `Never` is page cache only (a process crash loses nothing, an OS crash may lose anything not
/// yet written back), `Interval` syncs every `interval_ms` (an OS crash loses at most about one
/// interval), `Always` syncs before the acknowledgement (group commit). The textual form (see
/// [`FromStr`] and [`fmt::Display`]) is what command-line flags and config files use.
///
/// The serde derives serve the JSON the command line prints. The broker's on-disk `topic.json`
/// has its own versioned struct, so changing this type does not silently change the disk format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushPolicy {
    /// Never fsync explicitly; leave it to the operating system.
    Never,
    /// Fsync at most every `interval_ms` milliseconds.
    Interval {
        /// Milliseconds between fsyncs; a server rejects 0 as invalid config.
        interval_ms: u64,
    },
    /// Fsync before acknowledging every produce request.
    Always,
}

impl Default for FlushPolicy {
    /// `Always`: durability is the safe default; speed is opt-in.
    fn default() -> Self {
        FlushPolicy::Always
    }
}

impl fmt::Display for FlushPolicy {
    /// Writes the form [`FromStr`] accepts: `never`, `always`, `interval:250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlushPolicy::Never => f.write_str("never"),
            FlushPolicy::Interval { interval_ms } => write!(f, "interval:{interval_ms}ms"),
            FlushPolicy::Always => f.write_str("always"),
        }
    }
}

/// Why a flush policy string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid flush policy {input:?}: {reason} \
     (expected \"never\", \"always\", \"interval\" or \"interval:<N>ms\" / \"interval:<N>s\")"
)]
pub struct ParseFlushPolicyError {
    input: String,
    reason: &'static str,
}

impl FromStr for FlushPolicy {
    type Err = ParseFlushPolicyError;

    /// Accepts `never`, `always`, `interval` (meaning
    /// [`DEFAULT_FLUSH_INTERVAL_MS`]) and `interval:<N>` with an optional `ms`
    /// or `s` unit (no unit means milliseconds); case-insensitive. A zero
    /// interval is refused because it would silently mean "always".
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseFlushPolicyError {
            input: s.to_owned(),
            reason,
        };
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "never" => return Ok(FlushPolicy::Never),
            "always" => return Ok(FlushPolicy::Always),
            "interval" => {
                return Ok(FlushPolicy::Interval {
                    interval_ms: DEFAULT_FLUSH_INTERVAL_MS,
                })
            }
            _ => {}
        }
        let spec = lower
            .strip_prefix("interval:")
            .ok_or_else(|| err("unknown policy"))?
            .trim();
        let (digits, scale) = if let Some(d) = spec.strip_suffix("ms") {
            (d, 1)
        } else if let Some(d) = spec.strip_suffix('s') {
            (d, 1000)
        } else {
            (spec, 1)
        };
        let digits = digits.trim();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("the interval must be a whole number of ms or s"));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| err("the interval is too large"))?;
        let interval_ms = n
            .checked_mul(scale)
            .ok_or_else(|| err("the interval is too large"))?;
        if interval_ms == 0 {
            return Err(err("the interval must be at least 1 ms"));
        }
        Ok(FlushPolicy::Interval { interval_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_policy_parses_and_displays() {
        assert_eq!("never".parse(), Ok(FlushPolicy::Never));
        assert_eq!(" Always ".parse(), Ok(FlushPolicy::Always));
        assert_eq!(
            "interval".parse(),
            Ok(FlushPolicy::Interval {
                interval_ms: DEFAULT_FLUSH_INTERVAL_MS
            })
        );
        assert_eq!(
            "interval:250ms".parse(),
            Ok(FlushPolicy::Interval { interval_ms: 250 })
        );
        assert_eq!(
            "interval:2s".parse(),
            Ok(FlushPolicy::Interval { interval_ms: 2000 })
        );
        assert_eq!(
            "interval:75".parse(),
            Ok(FlushPolicy::Interval { interval_ms: 75 })
        );
        for bad in [
            "",
            "sometimes",
            "interval:",
            "interval:0ms",
            "interval:-5",
            "interval:5m",
            "interval:99999999999999999999",
            "interval:18446744073709551615s",
        ] {
            assert!(bad.parse::<FlushPolicy>().is_err(), "{bad:?} parsed");
        }
        for policy in [
            FlushPolicy::Never,
            FlushPolicy::Always,
            FlushPolicy::Interval { interval_ms: 250 },
        ] {
            assert_eq!(policy.to_string().parse(), Ok(policy));
        }
        let err = "sometimes".parse::<FlushPolicy>().unwrap_err().to_string();
        assert!(
            err.contains("sometimes") && err.contains("interval:<N>ms"),
            "{err}"
        );
    }
}
