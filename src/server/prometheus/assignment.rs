//! A classic consumer group member's assignment, read for the console: the bytes SyncGroup
//! handed out are opaque to the group coordinator, but a group of protocol type `consumer`
//! (every Kafka consumer's) carries Kafka's `ConsumerProtocolAssignment` in them:
//!
//! ```text
//! version: i16, topics: i32 count, each { name: i16 length + UTF-8, partitions: i32 count,
//! each i32 }, user_data: bytes (ignored)
//! ```
//!
//! Versions 0 to 3 share that prefix. Anything that does not parse is shown as unknown rather
//! than guessed at (a client may put its own protocol there).

/// Most partitions read from one assignment: a console row, not a whole cluster.
const MAX_PARTITIONS_SHOWN: usize = 10_000;

/// The `topic-partition` names of a `ConsumerProtocolAssignment`, or `None` when `bytes` is not
/// one.
pub fn consumer_assignment(bytes: &[u8]) -> Option<Vec<String>> {
    let mut reader = Reader(bytes);
    let version = reader.i16()?;
    if !(0..=3).contains(&version) {
        return None;
    }
    let topics = usize::try_from(reader.i32()?).ok()?;
    let mut names = Vec::new();
    for _ in 0..topics {
        let length = usize::try_from(reader.i16()?).ok()?;
        let topic = std::str::from_utf8(reader.take(length)?).ok()?;
        let partitions = usize::try_from(reader.i32()?).ok()?;
        for _ in 0..partitions {
            let partition = reader.i32()?;
            if names.len() < MAX_PARTITIONS_SHOWN {
                names.push(format!("{topic}-{partition}"));
            }
        }
    }
    Some(names)
}

/// Big-endian reads that fail at the end of the bytes instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Option<&'a [u8]> {
        if self.0.len() < length {
            return None;
        }
        let (taken, rest) = self.0.split_at(length);
        self.0 = rest;
        Some(taken)
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assignment as a Kafka consumer sends it reads back as its partitions; truncated or
    /// foreign bytes read as `None`, never a panic.
    #[test]
    fn reads_an_assignment_and_refuses_what_is_not_one() {
        let mut bytes = vec![0, 1]; // version 1
        bytes.extend(2i32.to_be_bytes());
        for (topic, partitions) in [("orders", &[0i32, 2][..]), ("audit", &[1][..])] {
            bytes.extend((topic.len() as i16).to_be_bytes());
            bytes.extend(topic.as_bytes());
            bytes.extend((partitions.len() as i32).to_be_bytes());
            for partition in partitions {
                bytes.extend(partition.to_be_bytes());
            }
        }
        bytes.extend((-1i32).to_be_bytes()); // null user data
        assert_eq!(
            consumer_assignment(&bytes).unwrap(),
            ["orders-0", "orders-2", "audit-1"]
        );
        for cut in 0..bytes.len() - 4 {
            assert_eq!(consumer_assignment(&bytes[..cut]), None, "cut at {cut}");
        }
        assert_eq!(consumer_assignment(&[0, 9, 0, 0, 0, 0]), None, "version 9");
        assert_eq!(consumer_assignment(&[0, 0, 0xff, 0xff, 0xff, 0xff]), None);
    }
}
