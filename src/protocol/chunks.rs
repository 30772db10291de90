//! A queue of byte chunks written with vectored writes.
//!
//! Both ends send large payloads they already hold as `Bytes` (a produced batch on the client,
//! stored batches of a fetch on the server). Encoding those into one write buffer would copy
//! every payload byte once more before the kernel copies it again; queueing them as chunks next
//! to the small encoded headers lets `AsyncWriteExt::write_all_buf` hand them all to one
//! `writev`.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// Byte chunks in write order; a [`Buf`] whose `chunks_vectored` exposes all of them.
#[derive(Debug, Default)]
pub struct Chunks {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl Chunks {
    /// Appends `part` (empty parts are dropped: they would only waste an `iovec`).
    pub fn push(&mut self, part: Bytes) {
        if part.is_empty() {
            return;
        }
        self.remaining += part.len();
        self.parts.push_back(part);
    }
}

impl Buf for Chunks {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |part| part.as_ref())
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut filled = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = IoSlice::new(part);
            filled += 1;
        }
        filled
    }

    fn advance(&mut self, mut count: usize) {
        assert!(
            count <= self.remaining,
            "advance past the end of the chunks"
        );
        self.remaining -= count;
        while count > 0 {
            let front = self.parts.front_mut().expect("advance within remaining");
            if count < front.len() {
                front.advance(count);
                return;
            }
            count -= front.len();
            self.parts.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advancing_across_parts_keeps_the_rest_in_order() {
        let mut chunks = Chunks::default();
        chunks.push(Bytes::from_static(b"abc"));
        chunks.push(Bytes::new());
        chunks.push(Bytes::from_static(b"defg"));
        assert_eq!(chunks.remaining(), 7);
        chunks.advance(4);
        assert_eq!(chunks.chunk(), b"efg");
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(chunks.chunks_vectored(&mut slices), 1);
        chunks.advance(3);
        assert_eq!(chunks.remaining(), 0);
        assert_eq!(chunks.chunk(), b"");
    }
}
