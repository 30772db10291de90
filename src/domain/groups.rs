//! Where a consumer group's committed offsets and membership live in a cluster: one partition of
//! the internal offsets topic, chosen by the group id alone, so every broker and every client
//! computes the same coordinator without asking anyone.
//!
//! The choice is Kafka's (`abs(groupId.hashCode) % offsets partitions`, Java's `String.hashCode`
//! with the sign bit cleared), so a group lands on the same offsets partition number as it would
//! in a Kafka cluster with as many offsets partitions.

/// The internal topic holding committed offsets and group membership in a cluster (Kafka's name,
/// so Kafka tools recognise it as internal).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The offsets partition of `group` among `partitions` (at least 1).
pub fn offsets_partition(group: &str, partitions: u32) -> u32 {
    let hash = (java_string_hash(group) & 0x7fff_ffff) as u32;
    hash % partitions.max(1)
}

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values Java computes.
    #[test]
    fn hash_is_javas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("hello world, this wraps"), 1_020_677_791);
    }

    /// A negative hash maps as Kafka's `Utils.abs` does (sign bit cleared, not negated).
    #[test]
    fn partition_clears_the_sign_bit() {
        let negative = "polygenelubricants"; // Java's hashCode is Integer.MIN_VALUE
        assert_eq!(java_string_hash(negative), i32::MIN);
        assert_eq!(offsets_partition(negative, 50), 0);
        assert_eq!(offsets_partition("hello", 50), 99_162_322 % 50);
        assert_eq!(offsets_partition("anything", 1), 0);
        assert_eq!(offsets_partition("anything", 0), 0);
    }
}
