//! The spliced produce path's append (`Partition::append_spliced_pending`): a batch whose first
//! bytes are in memory and whose rest a `fill` puts straight into the segment file, as a splice
//! from the producer's socket does. The fence and the producer sequence check run before any
//! byte lands, the batch is validated as it landed, and only a valid batch is written.

use crate::support::storage;

use std::cell::Cell;
use std::os::unix::fs::FileExt;

use bytes::Bytes;
use fencelog::batch::{BatchBuilder, HEADER_BYTES};
use fencelog::storage::splice::SplicePipe;
use fencelog::storage::{
    FenceError, FlushPolicy, Partition, PendingAppend, StorageError, WriteCredential,
};
use storage::{batch, config, fresh, read_all_batches, SMALL_SEGMENT_BYTES};

/// The head a connection has read (the header and a little more) and the tail still on the
/// socket.
fn split(batch: &[u8]) -> (&[u8], &[u8]) {
    batch.split_at(HEADER_BYTES + 16)
}

/// Appends the batch `head` + `tail` through the spliced path under `epoch`, its tail landing
/// as a splice lands it: the result, and whether the fill ran.
fn splice_in(
    partition: &Partition,
    epoch: u64,
    head: &[u8],
    tail: &[u8],
) -> (Result<PendingAppend, StorageError>, bool) {
    let ran = Cell::new(false);
    let result = partition.append_spliced_pending(
        WriteCredential::Epoch(epoch),
        head,
        tail.len(),
        &mut |file, offset| {
            ran.set(true);
            file.write_all_at(tail, offset)
        },
    );
    (result, ran.get())
}

/// The stored bytes of a batch from the offset on (the base offset stamped).
fn without_offset(batch: &[u8]) -> &[u8] {
    &batch[8..]
}

#[test]
fn a_spliced_batch_is_stored_as_the_copy_path_stores_it() {
    // Proves: batches appended through the spliced path, some rolling the segment, read back
    // byte for byte as the same batches appended through the copy path do.
    let spliced_dir = tempfile::tempdir().unwrap();
    let copied_dir = tempfile::tempdir().unwrap();
    let small = config(SMALL_SEGMENT_BYTES, FlushPolicy::Never);
    let spliced = fresh(spliced_dir.path(), small);
    let copied = fresh(copied_dir.path(), small);
    for tag in 0..12 {
        let bytes = batch(1, tag, 3, 300);
        let (head, tail) = split(&bytes);
        let (pending, ran) = splice_in(&spliced, 1, head, tail);
        assert!(ran);
        let appended = spliced.acknowledge(pending.unwrap()).unwrap();
        assert_eq!(appended, copied.append(&bytes).unwrap());
    }
    let (a, b) = (read_all_batches(&spliced), read_all_batches(&copied));
    assert_eq!(a.len(), 12);
    assert_eq!(a, b);
    assert!(
        storage::segment_bases(spliced_dir.path()).len() > 1,
        "the batches rolled the segment"
    );
}

#[test]
fn a_stale_holder_is_refused_before_any_byte_lands() {
    // Proves: a fenced epoch is refused by the fence first, `fill` never runs (the bytes stay
    // on the socket for the caller to read and drop), and the log does not change.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(SMALL_SEGMENT_BYTES, FlushPolicy::Never));
    partition.install_epoch(2).unwrap();
    let bytes = batch(1, 0, 2, 100);
    let (head, tail) = split(&bytes);
    let (refused, ran) = splice_in(&partition, 1, head, tail);
    assert!(
        matches!(
            refused,
            Err(StorageError::Fence(FenceError::Fenced {
                epoch: 1,
                current: 2
            }))
        ),
        "{refused:?}"
    );
    assert!(!ran);
    assert_eq!(partition.log_end_offset(), 0);
}

#[test]
fn a_corrupt_spliced_batch_is_refused_and_the_next_takes_its_offset() {
    // Proves: a batch whose bytes fail their CRC as they landed is refused and nothing of it is
    // written or served; the next valid batch lands at the same offset.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(SMALL_SEGMENT_BYTES, FlushPolicy::Never));
    let bytes = batch(1, 0, 2, 100);
    let (head, tail) = split(&bytes);
    let mut damaged = tail.to_vec();
    damaged[10] ^= 0x40;
    let (refused, ran) = splice_in(&partition, 1, head, &damaged);
    assert!(ran);
    assert!(
        matches!(refused, Err(StorageError::InvalidBatch(_))),
        "{refused:?}"
    );
    assert_eq!(partition.log_end_offset(), 0);
    let good = batch(1, 1, 2, 100);
    let (head, tail) = split(&good);
    let (pending, _) = splice_in(&partition, 1, head, tail);
    assert_eq!(
        partition.acknowledge(pending.unwrap()).unwrap().base_offset,
        0
    );
    let stored = read_all_batches(&partition);
    assert_eq!(stored.len(), 1);
    assert_eq!(without_offset(&stored[0]), without_offset(&good));
}

#[test]
fn a_refused_batch_leaves_nothing_after_the_data_once_the_segment_rolls() {
    // Proves: the bytes of a refused (corrupt) spliced batch that later appends do not cover
    // are cut when the segment rolls, so a crash image of the directory, recovered with no
    // segment trusted, finds nothing after the first segment's data and keeps the later
    // segment: no acknowledged batch is lost to the refused bytes.
    let dir = tempfile::tempdir().unwrap();
    let small = config(SMALL_SEGMENT_BYTES, FlushPolicy::Always);
    let partition = fresh(dir.path(), small);
    let mut written = Vec::new();
    let mut tag = 0;
    while partition.size_bytes() < 2_800 {
        tag += 1;
        written.push(batch(1, tag, 1, 200));
        partition.append(written.last().unwrap()).unwrap();
    }
    // Near the end of the first segment: a refused batch that fits, then one that does not.
    let refused_bytes = batch(1, 100, 1, 700);
    let (head, tail) = split(&refused_bytes);
    let mut damaged = tail.to_vec();
    damaged[100] ^= 0x01;
    let (refused, _) = splice_in(&partition, 1, head, &damaged);
    assert!(
        matches!(refused, Err(StorageError::InvalidBatch(_))),
        "{refused:?}"
    );
    for (tag, value_len) in [(101, 1_200), (102, 200), (103, 200)] {
        written.push(batch(1, tag, 1, value_len));
        partition.append(written.last().unwrap()).unwrap();
    }
    assert_eq!(storage::segment_bases(dir.path()).len(), 2, "rolled once");
    let image = tempfile::tempdir().unwrap();
    storage::copy_directory(dir.path(), image.path());
    drop(partition);
    let _ = std::fs::remove_file(image.path().join("recovery-point"));
    let recovered = Partition::open("t/0", image.path(), small, &storage::seal_worker()).unwrap();
    let stored = read_all_batches(&recovered);
    assert_eq!(
        stored.len(),
        written.len(),
        "nothing lost after the refused bytes"
    );
    for (stored, sent) in stored.iter().zip(&written) {
        assert_eq!(without_offset(stored), without_offset(sent));
    }
}

#[test]
fn a_producer_retry_is_answered_without_splicing() {
    // Proves: the producer sequence check runs on the header before any byte lands: a retry of
    // a batch already in the log gets its first offsets and `fill` does not run.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(SMALL_SEGMENT_BYTES, FlushPolicy::Never));
    let mut builder = BatchBuilder::with_producer(1, 42, 0);
    builder.push(1_000, None, Some(&[7; 200]));
    let bytes: Bytes = builder.finish_with_sequence(0);
    let (head, tail) = split(&bytes);
    for attempt in 0..2 {
        let (pending, ran) = splice_in(&partition, 1, head, tail);
        let appended = partition.acknowledge(pending.unwrap()).unwrap();
        assert_eq!(appended.base_offset, 0);
        assert_eq!(appended.duplicate, attempt == 1);
        assert_eq!(ran, attempt == 0);
    }
    assert_eq!(partition.log_end_offset(), 1);
}

#[test]
fn bytes_from_a_socket_are_spliced_into_the_log() {
    // Proves: the real splice (socket -> pipe -> segment file) stores a batch larger than the
    // pipe exactly as sent, and the frame after it is still on the socket.
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    // A small pipe and a batch a default receive buffer holds whole (the produce path waits
    // for every byte before it splices).
    let mut pipe = SplicePipe::with_capacity(8 * 1024).unwrap();
    let bytes = batch(1, 0, 8, pipe.capacity() / 2);
    assert!(bytes.len() > pipe.capacity());
    let sender = {
        let bytes = bytes.clone();
        std::thread::spawn(move || {
            client.write_all(&bytes).unwrap();
            client.write_all(b"next").unwrap();
            client
        })
    };
    let _client = sender.join().unwrap();
    let mut head = vec![0; HEADER_BYTES + 16];
    server.read_exact(&mut head).unwrap();
    let tail_len = bytes.len() - head.len();
    let mut probe = vec![0; tail_len + 4];
    while server.peek(&mut probe).unwrap() < probe.len() {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(
        dir.path(),
        config(4 * bytes.len() as u64, FlushPolicy::Never),
    );
    server.set_nonblocking(true).unwrap();
    let pending = partition
        .append_spliced_pending(
            WriteCredential::Epoch(1),
            &head,
            tail_len,
            &mut |file, offset| pipe.transfer(&server, file, offset, tail_len),
        )
        .unwrap();
    server.set_nonblocking(false).unwrap();
    partition.acknowledge(pending).unwrap();
    let stored = read_all_batches(&partition);
    assert_eq!(stored.len(), 1);
    assert_eq!(without_offset(&stored[0]), without_offset(&bytes));
    let mut next = [0; 4];
    server.read_exact(&mut next).unwrap();
    assert_eq!(&next, b"next");
}
