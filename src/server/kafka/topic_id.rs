//! Topic ids for Kafka clients, derived from the topic name.
//!
//! Metadata v10+ and CreateTopics v7+ carry a topic UUID; fencelog topics have no stored id.
//! The id is derived from the name (FNV-1a 128 of the UTF-8 bytes, stamped as a version-8
//! "custom" UUID), so it is the same on every request and across restarts without a disk format
//! change, and never the all-zero UUID Kafka reads as "no id". The cost: a topic deleted and
//! re-created under the same name gets the same id (DeleteTopics v6 deletes by this id); a
//! stored random id in `topic.json` would tell the two apart.

use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const FNV_OFFSET_BASIS: u128 = 0x6c62272e07bb014262b821756295c58d;
const FNV_PRIME: u128 = 0x0000000001000000000000000000013B;

/// The topic id clients see for `name`.
pub fn topic_id(name: &str) -> Uuid {
    let mut hash = FNV_OFFSET_BASIS;
    for byte in name.bytes() {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    let mut bytes = hash.to_be_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x80; // version 8: custom
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    Uuid::from_bytes(bytes)
}

/// A topic name as the codec carries it.
pub fn topic_name(name: &str) -> kafka_protocol::messages::TopicName {
    StrBytes::from_string(name.to_string()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id depends on the name alone, differs between names and is never the nil UUID.
    #[test]
    fn topic_ids_are_stable_distinct_and_not_nil() {
        assert_eq!(topic_id("orders"), topic_id("orders"));
        assert_ne!(topic_id("orders"), topic_id("order"));
        assert!(!topic_id("").is_nil());
        assert_eq!(topic_id("orders").get_version_num(), 8);
    }
}
