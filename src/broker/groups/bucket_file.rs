//! The on-disk form of a bucket of committed offsets: one small file per bucket, replaced whole
//! (temporary file, fsync, rename, directory fsync) on every commit to a group in it.
//!
//! A bucket holds the groups whose name hashes (FNV-1a, 64 bits) to its number; with 2^64
//! buckets it almost always holds one. Hashing instead of using the group name as the file name
//! lets group names be any UTF-8 (Kafka group ids are free-form) with file names of fixed length.
//!
//! Layout (all integers big-endian):
//!
//! | position | size | field          | notes |
//! |---------:|-----:|----------------|-------|
//! | 0        | 4    | `magic`        | `FLGO` (`46 4c 47 4f`) |
//! | 4        | 2    | `version`      | `1` |
//! | 6        | 2    | reserved       | `0` |
//! | 8        | 4    | `body_length`  | bytes after this 16-byte header |
//! | 12       | 4    | `crc`          | CRC-32 (ISO-HDLC) of the body |
//! | 16       | …    | body           | `group_count u32`, then per group `name string16`, `entry_count u32` and per entry `topic string16, partition u32, offset u64, metadata string16` |
//!
//! A `string16` is a `u16` length and that many bytes of UTF-8. Groups are sorted by name and
//! entries by topic and partition, so equal contents are equal bytes. Decoding is strict: a file
//! with a wrong magic, version, length, CRC, a group in the wrong bucket, or bytes left over is
//! refused as a whole, never read in part.

use std::collections::BTreeMap;

use super::CommittedOffset;

/// The four bytes every bucket file starts with.
pub const MAGIC: [u8; 4] = *b"FLGO";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;
/// Size of the header before the body.
pub const HEADER_BYTES: usize = 16;
/// File name suffix of bucket files.
pub const SUFFIX: &str = ".offsets";

/// A topic partition's key in a group: topic name and partition index.
pub type PartitionKey = (String, u32);
/// One group's committed offsets.
pub type GroupEntries = BTreeMap<PartitionKey, CommittedOffset>;
/// A bucket's groups, by name.
pub type BucketGroups = BTreeMap<String, GroupEntries>;

/// The bucket of a group: FNV-1a (64 bits) of its name. Stable across builds and platforms, as
/// it names files.
pub fn bucket_of(group: &str) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    group.bytes().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The file name of a bucket: 16 lower-case hex digits and [`SUFFIX`].
pub fn file_name(bucket: u64) -> String {
    format!("{bucket:016x}{SUFFIX}")
}

/// The bucket a file name denotes, if it is a bucket file's name.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    let lower_hex = digits
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if digits.len() != 16 || !lower_hex {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// The file contents for `groups`. Every string must fit a `string16` (the store checks names
/// and metadata against its limits before they get here).
pub fn encode(groups: &BucketGroups) -> Vec<u8> {
    let mut body = Vec::new();
    put_count(&mut body, groups.len());
    for (name, entries) in groups {
        put_string(&mut body, name);
        put_count(&mut body, entries.len());
        for ((topic, partition), committed) in entries {
            put_string(&mut body, topic);
            body.extend_from_slice(&partition.to_be_bytes());
            body.extend_from_slice(&committed.offset.to_be_bytes());
            put_string(&mut body, &committed.metadata);
        }
    }
    let mut file = Vec::with_capacity(HEADER_BYTES + body.len());
    file.extend_from_slice(&MAGIC);
    file.extend_from_slice(&VERSION.to_be_bytes());
    file.extend_from_slice(&0u16.to_be_bytes());
    put_count(&mut file, body.len());
    file.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    file.extend_from_slice(&body);
    file
}

fn put_count(destination: &mut Vec<u8>, count: usize) {
    let count = u32::try_from(count).expect("counts are bounded far below u32::MAX by the limits");
    destination.extend_from_slice(&count.to_be_bytes());
}

fn put_string(destination: &mut Vec<u8>, text: &str) {
    let length = u16::try_from(text.len()).expect("stored strings are checked against u16::MAX");
    destination.extend_from_slice(&length.to_be_bytes());
    destination.extend_from_slice(text.as_bytes());
}

/// Reads a bucket file's contents, checking everything; `bucket` is the number its name says,
/// which every group in it must hash to. The error says what check failed.
pub fn decode(bucket: u64, file: &[u8]) -> Result<BucketGroups, String> {
    let mut header = Cursor { rest: file };
    if header.take(4, "magic")? != MAGIC {
        return Err("not a committed offsets file (wrong magic)".into());
    }
    let version = header.u16("version")?;
    if version != VERSION {
        return Err(format!(
            "format version {version} is not {VERSION} (written by another fencelog?)"
        ));
    }
    if header.u16("reserved")? != 0 {
        return Err("reserved header field is not 0".into());
    }
    let body_length = header.u32("body_length")? as usize;
    let crc = header.u32("crc")?;
    if header.rest.len() != body_length {
        return Err(format!(
            "body is {} bytes but the header says {body_length} (torn or truncated)",
            header.rest.len()
        ));
    }
    if crc32fast::hash(header.rest) != crc {
        return Err("CRC mismatch".into());
    }
    let mut body = Cursor { rest: header.rest };
    let mut groups = BucketGroups::new();
    for _ in 0..body.u32("group_count")? {
        let name = body.string("group name")?;
        if bucket_of(&name) != bucket {
            return Err(format!(
                "group {name:?} does not belong in bucket {bucket:016x}"
            ));
        }
        let mut entries = GroupEntries::new();
        for _ in 0..body.u32("entry_count")? {
            let topic = body.string("topic")?;
            let partition = body.u32("partition")?;
            let offset = body.u64("offset")?;
            let metadata = body.string("metadata")?;
            entries.insert((topic, partition), CommittedOffset { offset, metadata });
        }
        if groups.insert(name, entries).is_some() {
            return Err("a group appears twice".into());
        }
    }
    if !body.rest.is_empty() {
        return Err(format!(
            "{} bytes left over after the last group",
            body.rest.len()
        ));
    }
    Ok(groups)
}

/// A bounds-checked reader over a byte slice.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, count: usize, field: &str) -> Result<&'a [u8], String> {
        if self.rest.len() < count {
            return Err(format!("file ends inside {field}"));
        }
        let (taken, rest) = self.rest.split_at(count);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], String> {
        let bytes = self.take(N, field)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    fn u16(&mut self, field: &str) -> Result<u16, String> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &str) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    fn string(&mut self, field: &str) -> Result<String, String> {
        let length = usize::from(self.u16(field)?);
        let bytes = self.take(length, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{field} is not valid UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (u64, BucketGroups) {
        let mut entries = GroupEntries::new();
        entries.insert(
            ("orders".into(), 0),
            CommittedOffset {
                offset: 42,
                metadata: "host-1".into(),
            },
        );
        entries.insert(("orders".into(), 1), CommittedOffset::at(7));
        let mut groups = BucketGroups::new();
        groups.insert("billing".into(), entries);
        (bucket_of("billing"), groups)
    }

    #[test]
    fn contents_round_trip() {
        // Proves: what is written is read back exactly.
        let (bucket, groups) = sample();
        assert_eq!(decode(bucket, &encode(&groups)), Ok(groups));
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        // Proves: a torn or damaged file is refused whole: no prefix and no single-byte change
        // of a file reads as some other set of offsets.
        let (bucket, groups) = sample();
        let file = encode(&groups);
        for length in 0..file.len() {
            assert!(decode(bucket, &file[..length]).is_err(), "prefix {length}");
        }
        for position in 0..file.len() {
            let mut damaged = file.clone();
            damaged[position] ^= 0x01;
            assert!(decode(bucket, &damaged).is_err(), "flip at {position}");
        }
        let mut longer = file.clone();
        longer.push(0);
        assert!(decode(bucket, &longer).is_err());
    }

    #[test]
    fn a_group_in_the_wrong_bucket_is_refused() {
        // Proves: a file renamed (or copied) to another bucket's name is not believed.
        let (bucket, groups) = sample();
        assert!(decode(bucket.wrapping_add(1), &encode(&groups)).is_err());
    }

    #[test]
    fn file_names_are_sixteen_hex_digits() {
        // Proves: names round-trip and nothing else passes for a bucket file.
        assert_eq!(parse_file_name(&file_name(0xab)), Some(0xab));
        assert_eq!(file_name(1), "0000000000000001.offsets");
        for name in [
            "0000000000000001.offsets.tmp",
            "000000000000001.offsets",
            "000000000000000A.offsets",
            "zz00000000000001.offsets",
        ] {
            assert_eq!(parse_file_name(name), None, "{name}");
        }
        // FNV-1a 64 reference value: the hash of the empty string is the offset basis.
        assert_eq!(bucket_of(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(bucket_of("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
