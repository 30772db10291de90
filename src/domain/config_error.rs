//! The one error of configuration checks: every `validate` of a configuration struct
//! (`ServerConfig`, `BrokerConfig`, `PartitionConfig`, `LeaseConfig`, `ClientConfig`, ...)
//! answers with a [`ConfigError`] that names the field, the value given and what is allowed, so
//! the message says what to change ("max_frame_bytes 0 is out of range 1..=16 MiB").
//!
//! It is a domain type because configurations live in every layer and each layer may name the
//! domain; a check runs where the configuration is consumed (a constructor, `Node::start`).

use std::fmt;
use std::time::Duration;

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A number outside the range it may take.
    #[error("{field} {value} is out of range {min}..={max}")]
    OutOfRange {
        /// The setting, as the struct names it.
        field: &'static str,
        /// The value given.
        value: Quantity,
        /// The smallest value allowed.
        min: Quantity,
        /// The largest value allowed.
        max: Quantity,
    },
    /// A setting that must not exceed another one does.
    #[error("{field} {value} is larger than {limit_field} {limit}")]
    AboveOther {
        /// The setting, as the struct names it.
        field: &'static str,
        /// The value given.
        value: Quantity,
        /// The setting it must not exceed.
        limit_field: &'static str,
        /// That setting's value.
        limit: Quantity,
    },
    /// A count or a length of time that must be above zero.
    #[error("{field} is 0; it must be above zero (leave it out for the default)")]
    Zero {
        /// The setting, as the struct names it.
        field: &'static str,
    },
    /// A setting that only some combinations allow.
    #[error("{field} {value} is not allowed: {reason}")]
    NotAllowed {
        /// The setting, as the struct names it.
        field: &'static str,
        /// The value given.
        value: Quantity,
        /// Why, in words a user can act on.
        reason: &'static str,
    },
}

impl ConfigError {
    /// `field` must lie in `min..=max`: `Ok` when it does, [`ConfigError::OutOfRange`] otherwise.
    pub fn check_range(
        field: &'static str,
        value: Quantity,
        min: Quantity,
        max: Quantity,
    ) -> Result<(), ConfigError> {
        if (min.raw()..=max.raw()).contains(&value.raw()) {
            Ok(())
        } else {
            Err(ConfigError::OutOfRange {
                field,
                value,
                min,
                max,
            })
        }
    }

    /// `field` must be above zero (a count or a time with no upper limit but its type's):
    /// `Ok` when it is, [`ConfigError::Zero`] otherwise.
    pub fn check_positive(field: &'static str, value: Quantity) -> Result<(), ConfigError> {
        if value.raw() > 0 {
            Ok(())
        } else {
            Err(ConfigError::Zero { field })
        }
    }

    /// `field` must not exceed `limit_field`: `Ok` when it does not, [`ConfigError::AboveOther`]
    /// otherwise.
    pub fn check_at_most(
        field: &'static str,
        value: Quantity,
        limit_field: &'static str,
        limit: Quantity,
    ) -> Result<(), ConfigError> {
        if value.raw() <= limit.raw() {
            Ok(())
        } else {
            Err(ConfigError::AboveOther {
                field,
                value,
                limit_field,
                limit,
            })
        }
    }

    /// The setting the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::OutOfRange { field, .. }
            | ConfigError::AboveOther { field, .. }
            | ConfigError::NotAllowed { field, .. }
            | ConfigError::Zero { field } => field,
        }
    }
}

/// A configured value with its unit, so a message shows `64 MiB` or `100ms` rather than a bare
/// number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// A count (connections, requests, slots, ...).
    Count(u64),
    /// A size in bytes, shown exactly (what a flag takes) and in KiB, MiB or GiB beside it when
    /// it is a whole number of them: `4096 (4 KiB)`.
    Bytes(u64),
    /// A length of time, kept in milliseconds.
    Millis(u64),
}

impl Quantity {
    /// A count from a `usize`.
    pub fn count(value: usize) -> Quantity {
        Quantity::Count(u64::try_from(value).unwrap_or(u64::MAX))
    }

    /// A size from a `usize`.
    pub fn bytes(value: usize) -> Quantity {
        Quantity::Bytes(u64::try_from(value).unwrap_or(u64::MAX))
    }

    /// A length of time, in whole milliseconds (rounded down).
    pub fn duration(value: Duration) -> Quantity {
        Quantity::Millis(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    fn raw(self) -> u64 {
        match self {
            Quantity::Count(value) | Quantity::Bytes(value) | Quantity::Millis(value) => value,
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KIB: u64 = 1024;
        match *self {
            Quantity::Count(value) => write!(f, "{value}"),
            Quantity::Bytes(value) => {
                for (unit, name) in [(KIB * KIB * KIB, "GiB"), (KIB * KIB, "MiB"), (KIB, "KiB")] {
                    if value != 0 && value % unit == 0 {
                        return write!(f, "{value} ({} {name})", value / unit);
                    }
                }
                write!(f, "{value}")
            }
            Quantity::Millis(value) => write!(f, "{value}ms"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message names the field, the value and the range, with units.
    #[test]
    fn an_out_of_range_message_names_field_value_and_range() {
        let error = ConfigError::check_range(
            "max_frame_bytes",
            Quantity::bytes(0),
            Quantity::Bytes(1),
            Quantity::Bytes(64 << 20),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "max_frame_bytes 0 is out of range 1..=67108864 (64 MiB)"
        );
        assert_eq!(error.field(), "max_frame_bytes");
        let error = ConfigError::check_at_most(
            "min_ttl_ms",
            Quantity::Millis(500),
            "max_ttl_ms",
            Quantity::Millis(100),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "min_ttl_ms 500ms is larger than max_ttl_ms 100ms"
        );
    }

    /// Both ends of a range are allowed.
    #[test]
    fn the_bounds_of_a_range_are_inside_it() {
        for value in [1, 10] {
            ConfigError::check_range(
                "x",
                Quantity::Count(value),
                Quantity::Count(1),
                Quantity::Count(10),
            )
            .unwrap();
        }
        assert_eq!(Quantity::Bytes(1536).to_string(), "1536");
        assert_eq!(Quantity::Bytes(3 << 30).to_string(), "3221225472 (3 GiB)");
    }
}
