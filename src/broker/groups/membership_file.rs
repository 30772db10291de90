//! The on-disk form of a bucket of group memberships (a standalone broker's classic groups:
//! members, generation, protocol, leader, assignments), replaced whole (temporary file, fsync,
//! rename, directory fsync) whenever a group in it changes generation or loses members.
//!
//! Groups are spread over buckets by the same FNV-1a hash as committed offsets
//! ([`super::bucket_file::bucket_of`]), so a file name is fixed-length whatever the group id.
//! The body is the JSON of the cluster's membership snapshot
//! ([`crate::broker::coordinator::GroupSnapshot`], the value of a `group` record of
//! `__consumer_offsets`): one encoding of a group's membership, whoever keeps it.
//!
//! Layout (integers big-endian):
//!
//! | position | size | field          | notes |
//! |---------:|-----:|----------------|-------|
//! | 0        | 4    | `magic`        | `FLGM` (`46 4c 47 4d`) |
//! | 4        | 2    | `version`      | `1` |
//! | 6        | 2    | reserved       | `0` |
//! | 8        | 4    | `body_length`  | bytes after this 16-byte header |
//! | 12       | 4    | `crc`          | CRC-32 (ISO-HDLC) of the body |
//! | 16       | …    | body           | JSON array of `{"group": id, "snapshot": GroupSnapshot}`, sorted by group id |
//!
//! Decoding is strict: a wrong magic, version, length or CRC, a group in the wrong bucket or
//! twice, or a body that is not that JSON refuses the whole file (a torn write is caught by
//! the length or the CRC).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bucket_file::bucket_of;
use crate::broker::coordinator::GroupSnapshot;

/// The four bytes every membership file starts with.
pub const MAGIC: [u8; 4] = *b"FLGM";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;
/// Size of the header before the body.
pub const HEADER_BYTES: usize = 16;
/// File name suffix of membership files.
pub const SUFFIX: &str = ".members";
/// Largest membership file written or read; a bigger one is refused (on write: the group's
/// generation is not stored and it rebalances; on read: the file is dropped as damaged). A
/// group at the coordinator's default limits (1000 members with subscriptions and assignments
/// of a few KiB) stays well below.
pub const MAX_MEMBERSHIP_FILE_BYTES: usize = 64 * 1024 * 1024;

/// A bucket's groups, by id.
pub type BucketMemberships = BTreeMap<String, GroupSnapshot>;

#[derive(Serialize, Deserialize)]
struct StoredGroup {
    group: String,
    snapshot: GroupSnapshot,
}

/// The file name of a bucket: 16 lower-case hex digits and [`SUFFIX`].
pub fn file_name(bucket: u64) -> String {
    format!("{bucket:016x}{SUFFIX}")
}

/// The bucket a file name denotes, if it is a membership file's name.
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

/// The file contents for `groups`, or why they cannot be stored (too large).
pub fn encode(groups: &BucketMemberships) -> Result<Vec<u8>, String> {
    let stored: Vec<StoredGroup> = groups
        .iter()
        .map(|(group, snapshot)| StoredGroup {
            group: group.clone(),
            snapshot: snapshot.clone(),
        })
        .collect();
    let body = serde_json::to_vec(&stored).map_err(|error| format!("encode: {error}"))?;
    if HEADER_BYTES + body.len() > MAX_MEMBERSHIP_FILE_BYTES {
        return Err(format!(
            "{} bytes of group state is more than the {MAX_MEMBERSHIP_FILE_BYTES} a membership file can hold",
            HEADER_BYTES + body.len()
        ));
    }
    let body_length = u32::try_from(body.len()).expect("bounded by MAX_MEMBERSHIP_FILE_BYTES");
    let mut file = Vec::with_capacity(HEADER_BYTES + body.len());
    file.extend_from_slice(&MAGIC);
    file.extend_from_slice(&VERSION.to_be_bytes());
    file.extend_from_slice(&0u16.to_be_bytes());
    file.extend_from_slice(&body_length.to_be_bytes());
    file.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    file.extend_from_slice(&body);
    Ok(file)
}

/// Reads a membership file, checking everything; `bucket` is the number its name says, which
/// every group in it must hash to. The error says what check failed.
pub fn decode(bucket: u64, file: &[u8]) -> Result<BucketMemberships, String> {
    if file.len() > MAX_MEMBERSHIP_FILE_BYTES {
        return Err(format!(
            "{} bytes is more than the {MAX_MEMBERSHIP_FILE_BYTES} a membership file can be",
            file.len()
        ));
    }
    let Some((header, body)) = file.split_at_checked(HEADER_BYTES) else {
        return Err(format!(
            "{} bytes is shorter than the header (torn or truncated)",
            file.len()
        ));
    };
    let field = |at: usize, size: usize| &header[at..at + size];
    if field(0, 4) != MAGIC {
        return Err("not a group membership file (wrong magic)".into());
    }
    let version = u16::from_be_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(format!(
            "format version {version} is not {VERSION} (written by another fencelog?)"
        ));
    }
    if field(6, 2) != [0, 0] {
        return Err("reserved header field is not 0".into());
    }
    let body_length = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let crc = u32::from_be_bytes([header[12], header[13], header[14], header[15]]);
    if body.len() != body_length as usize {
        return Err(format!(
            "body is {} bytes but the header says {body_length} (torn or truncated)",
            body.len()
        ));
    }
    if crc32fast::hash(body) != crc {
        return Err("CRC mismatch".into());
    }
    let stored: Vec<StoredGroup> =
        serde_json::from_slice(body).map_err(|error| format!("body: {error}"))?;
    let mut groups = BucketMemberships::new();
    for StoredGroup { group, snapshot } in stored {
        if bucket_of(&group) != bucket {
            return Err(format!(
                "group {group:?} does not belong in bucket {bucket:016x}"
            ));
        }
        if groups.insert(group, snapshot).is_some() {
            return Err("a group appears twice".into());
        }
    }
    Ok(groups)
}
