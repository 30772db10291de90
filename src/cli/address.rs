//! Checks a `HOST:PORT` flag value before anything uses it, so a mistyped address is refused
//! with the flag, the value and an example, instead of a resolver's "invalid socket address"
//! (and, for `fencelog serve`, before the data directory is created or locked).
//!
//! Why only the shape is checked here: whether a host name resolves, or a port is free, is known
//! only by trying, which the caller does next (`serve` binds at once; clients connect).

use std::net::IpAddr;

use super::CliError;

/// Which address a flag names, for the example and the hint in its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// A native listener (`--listen`, `--advertise`, a client's `--addr`).
    Native,
    /// A Kafka listener (`--kafka-listen`, `--kafka-advertise`).
    Kafka,
    /// The Prometheus metrics listener (`--metrics-listen`).
    Metrics,
}

impl AddressKind {
    /// An address of this kind that works on one machine.
    pub fn example(self) -> &'static str {
        match self {
            AddressKind::Native => crate::server::DEFAULT_LISTEN,
            AddressKind::Kafka => "127.0.0.1:9092",
            AddressKind::Metrics => "127.0.0.1:9464",
        }
    }

    /// What to add when the port is missing: the port people usually mean.
    fn port_hint(self) -> &'static str {
        match self {
            AddressKind::Native => " (the native listener's default port is 7171)",
            AddressKind::Kafka => " (Kafka's usual port is 9092)",
            AddressKind::Metrics => "",
        }
    }
}

/// Checks that `value`, given as `flag`, is `HOST:PORT` (an IPv6 host in brackets, port 0 for
/// any free port). A bare host gets "missing port", anything else "not an address"; both name
/// the flag, the value and an example.
pub fn check_host_port(flag: &str, value: &str, kind: AddressKind) -> Result<(), CliError> {
    if is_bare_host(value) {
        return Err(CliError::invalid_argument(format!(
            "{flag} {value}: missing port: use HOST:PORT, e.g. {}{}",
            kind.example(),
            kind.port_hint()
        )));
    }
    let well_formed = value.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.chars().any(char::is_whitespace) && port.parse::<u16>().is_ok()
    });
    if well_formed {
        Ok(())
    } else {
        Err(CliError::invalid_argument(format!(
            "{flag} {value}: not an address: expected HOST:PORT, e.g. {}",
            kind.example()
        )))
    }
}

/// Checks every entry of a comma-separated list of `HOST:PORT` (a client's `--addr`); blank
/// entries are skipped, as the client's address list skips them.
pub fn check_host_port_list(flag: &str, value: &str, kind: AddressKind) -> Result<(), CliError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .try_for_each(|entry| check_host_port(flag, entry, kind))
}

/// Whether `value` is a host with no port: an IP address (IPv6 with or without brackets),
/// `localhost`, or a dotted host name.
fn is_bare_host(value: &str) -> bool {
    let unbracketed = value
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(value);
    if unbracketed.parse::<IpAddr>().is_ok() || value == "localhost" {
        return true;
    }
    value.contains('.')
        && !value.starts_with('.')
        && !value.ends_with('.')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves: addresses people type are accepted, and each mistake gets the message that says
    // what to do (a bare host: add the port; anything else: the HOST:PORT shape).
    #[test]
    fn host_port_accepts_addresses_and_names_the_fix_for_each_mistake() {
        for good in [
            "127.0.0.1:7171",
            "localhost:0",
            "[::1]:9092",
            "broker-1.lan:7171",
        ] {
            check_host_port("--listen", good, AddressKind::Native).expect(good);
        }
        for bare in ["127.0.0.1", "localhost", "::1", "[::1]", "broker-1.lan"] {
            let message = check_host_port("--addr", bare, AddressKind::Native)
                .unwrap_err()
                .message;
            assert_eq!(
                message,
                format!("--addr {bare}: missing port: use HOST:PORT, e.g. 127.0.0.1:7171 (the native listener's default port is 7171)")
            );
        }
        for bad in [
            "nonsense",
            "",
            ":7171",
            "host:port",
            "host:70000",
            "a b:1",
            "1.2.3.4.",
        ] {
            let message = check_host_port("--listen", bad, AddressKind::Native)
                .unwrap_err()
                .message;
            assert_eq!(
                message,
                format!("--listen {bad}: not an address: expected HOST:PORT, e.g. 127.0.0.1:7171")
            );
        }
        check_host_port_list("--addr", "127.0.0.1:1, ,127.0.0.2:2,", AddressKind::Native)
            .expect("blank entries are skipped");
        let list = check_host_port_list("--addr", "127.0.0.1:1, 127.0.0.2", AddressKind::Native);
        assert!(list
            .unwrap_err()
            .message
            .starts_with("--addr 127.0.0.2: missing port"));
    }
}
