//! The Kafka listener's settings: what it advertises to clients (Metadata's broker address,
//! node id, cluster id) and its own frame limit.
//!
//! Kafka clients connect to the address a broker *advertises* in Metadata, not to the one they
//! were given first, so it must be reachable from them: a listener bound to `0.0.0.0` has no
//! such address of its own and refuses to start until one is given. The frame limit is separate
//! from the native protocol's because Kafka clients size their batches for Kafka's default
//! (`socket.request.max.bytes`, 100 MiB).

use std::net::SocketAddr;

use thiserror::Error;

/// Default largest Kafka request frame: 100 MiB, Kafka's `socket.request.max.bytes`.
pub const DEFAULT_KAFKA_MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;
/// Largest frame the limit may be set to: a Kafka frame length is an `i32`.
pub const KAFKA_MAX_FRAME_BYTES_LIMIT: usize = i32::MAX as usize;
/// Default cluster id reported in Metadata v2+ (clients treat it as an opaque name).
pub const DEFAULT_KAFKA_CLUSTER_ID: &str = "fencelog";
/// Longest advertised host name (a DNS name is at most 253 bytes).
pub const MAX_ADVERTISED_HOST_BYTES: usize = 253;

/// Settings of the Kafka listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// Host clients are told to connect to (Metadata's broker host).
    pub advertised_host: String,
    /// Port clients are told to connect to.
    pub advertised_port: u16,
    /// The cluster id in Metadata v2+.
    pub cluster_id: String,
    /// Largest request frame accepted, checked before anything is allocated or decoded.
    pub max_frame_bytes: usize,
}

/// A Kafka listener setting that cannot work.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KafkaConfigError {
    /// The advertised host is empty, too long, or a wildcard no client can connect to.
    #[error(
        "the Kafka advertised host {host:?} is not an address clients can reach; set --kafka-advertise HOST:PORT"
    )]
    UnreachableHost {
        /// The host given.
        host: String,
    },
    /// The advertised port is 0.
    #[error("the Kafka advertised port must not be 0")]
    ZeroPort,
    /// `HOST:PORT` could not be parsed.
    #[error("{given:?} is not HOST:PORT")]
    NotHostPort {
        /// What was given.
        given: String,
    },
    /// The cluster id is empty.
    #[error("the Kafka cluster id must not be empty")]
    EmptyClusterId,
    /// The frame limit is 0 or above what a Kafka frame length can say.
    #[error(
        "the Kafka frame limit {max_frame_bytes} is outside 1..={KAFKA_MAX_FRAME_BYTES_LIMIT}"
    )]
    FrameLimit {
        /// The limit given.
        max_frame_bytes: usize,
    },
}

impl KafkaConfig {
    /// Default settings advertising `addr` (the listener's bound address when it is a specific
    /// one). Call [`KafkaConfig::validate`]: a wildcard address is refused there.
    pub fn advertising(addr: SocketAddr) -> Self {
        Self {
            advertised_host: addr.ip().to_string(),
            advertised_port: addr.port(),
            cluster_id: DEFAULT_KAFKA_CLUSTER_ID.to_string(),
            max_frame_bytes: DEFAULT_KAFKA_MAX_FRAME_BYTES,
        }
    }

    /// Default settings advertising `HOST:PORT` (`[v6]:PORT` for an IPv6 address).
    pub fn advertising_host_port(host_port: &str) -> Result<Self, KafkaConfigError> {
        let not_host_port = || KafkaConfigError::NotHostPort {
            given: host_port.to_string(),
        };
        let (host, port) = host_port.rsplit_once(':').ok_or_else(not_host_port)?;
        let port: u16 = port.parse().map_err(|_| not_host_port())?;
        let host = host
            .strip_prefix('[')
            .and_then(|inner| inner.strip_suffix(']'))
            .unwrap_or(host);
        let mut config = Self::advertising(SocketAddr::from(([127, 0, 0, 1], port)));
        config.advertised_host = host.to_string();
        config.validate()?;
        Ok(config)
    }

    /// `HOST:PORT` as advertised (`[v6]:PORT` for an IPv6 address): what a cluster broker
    /// registers for the others' Metadata.
    pub fn advertised_address(&self) -> String {
        if self.advertised_host.contains(':') {
            format!("[{}]:{}", self.advertised_host, self.advertised_port)
        } else {
            format!("{}:{}", self.advertised_host, self.advertised_port)
        }
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<(), KafkaConfigError> {
        let host = self.advertised_host.as_str();
        let wildcard = host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        if host.is_empty() || host.len() > MAX_ADVERTISED_HOST_BYTES || wildcard {
            return Err(KafkaConfigError::UnreachableHost {
                host: host.to_string(),
            });
        }
        if self.advertised_port == 0 {
            return Err(KafkaConfigError::ZeroPort);
        }
        if self.cluster_id.is_empty() {
            return Err(KafkaConfigError::EmptyClusterId);
        }
        if !(1..=KAFKA_MAX_FRAME_BYTES_LIMIT).contains(&self.max_frame_bytes) {
            return Err(KafkaConfigError::FrameLimit {
                max_frame_bytes: self.max_frame_bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener bound to every interface has no address to advertise of its own.
    #[test]
    fn a_wildcard_address_cannot_be_advertised() {
        let config = KafkaConfig::advertising("0.0.0.0:9092".parse().unwrap());
        assert!(matches!(
            config.validate(),
            Err(KafkaConfigError::UnreachableHost { .. })
        ));
        let config = KafkaConfig::advertising("[::]:9092".parse().unwrap());
        assert!(config.validate().is_err());
        assert!(KafkaConfig::advertising("127.0.0.1:9092".parse().unwrap())
            .validate()
            .is_ok());
    }

    /// `HOST:PORT` parses names, IPv4 and bracketed IPv6, and refuses the rest.
    #[test]
    fn advertised_host_port_parses() {
        let config = KafkaConfig::advertising_host_port("kafka.example:9093").unwrap();
        assert_eq!(
            (config.advertised_host.as_str(), config.advertised_port),
            ("kafka.example", 9093)
        );
        let config = KafkaConfig::advertising_host_port("[::1]:9092").unwrap();
        assert_eq!(config.advertised_host, "::1");
        for bad in [
            "nohost",
            "host:",
            ":9092",
            "host:99999",
            "0.0.0.0:9092",
            "h:0",
        ] {
            assert!(KafkaConfig::advertising_host_port(bad).is_err(), "{bad}");
        }
    }
}
