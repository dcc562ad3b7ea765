//! Per-thread memory for the bytes of denials' header values.
//!
//! A denial's `grpc-message`, `grpc-status-details-bin` and time-dependent
//! numbers are written one after the other into a buffer of this thread,
//! and each header value is a reference-counted slice of it (as hyper's
//! request header values are slices of the connection's read buffer). When
//! the buffer is full and every answer written into it is gone, it is
//! reused in place; only while some of them are still alive (not yet
//! written to their connections) does a new buffer take its place.
//!
//! Kept for the allocations it saves more than for instructions: with a
//! buffer of the answer's own and a vector of the denial's own for the
//! encoded status (both sized), a denial makes 5 allocations instead of 2
//! (`tests/denial_allocations.rs`, whose goal is 2), for only 103
//! instructions more of about 75,000 per denied gRPC call (0.14%; 11,210
//! against 11,107 in the layer, `cargo bench -p throttle-fleet-suite
//! --bench grpc_denial_instructions`).

use std::cell::RefCell;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use bytes::{BufMut, BytesMut};
use http::HeaderValue;

/// The size of a buffer: room for about 30 denials of a typical rule.
const CHUNK: usize = 16 * 1024;

thread_local! {
    static ARENA: RefCell<BytesMut> = RefCell::new(BytesMut::new());
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Writes header values into this thread's buffer.
pub(crate) struct Writer<'a> {
    buf: &'a mut BytesMut,
}

impl Writer<'_> {
    /// The header value of the bytes `write` appends; `None` if they are
    /// not a valid header value.
    pub(crate) fn value(&mut self, write: impl FnOnce(&mut BytesMut)) -> Option<HeaderValue> {
        write(self.buf);
        HeaderValue::from_maybe_shared(self.buf.split().freeze()).ok()
    }

    /// `n` in decimal.
    pub(crate) fn number(&mut self, n: u64) -> Option<HeaderValue> {
        self.value(|b| b.put_slice(itoa::Buffer::new().format(n).as_bytes()))
    }

    /// `data` in base64 without padding, as gRPC sends binary metadata.
    pub(crate) fn base64(&mut self, data: &[u8]) -> Option<HeaderValue> {
        self.value(|b| {
            let start = b.len();
            b.resize(start + base64_len(data.len()), 0);
            let written = STANDARD_NO_PAD
                .encode_slice(data, &mut b[start..])
                .expect("sized by base64_len");
            debug_assert_eq!(start + written, b.len());
        })
    }
}

/// The length of `len` bytes in base64 without padding.
pub(crate) fn base64_len(len: usize) -> usize {
    len / 3 * 4 + [0, 2, 3][len % 3]
}

/// Runs `f` with a writer that has room for `need` bytes.
pub(crate) fn write<T>(need: usize, f: impl FnOnce(&mut Writer<'_>) -> T) -> T {
    ARENA.with_borrow_mut(|buf| {
        if buf.capacity() - buf.len() < need {
            // Reclaims the buffer when no value written into it is alive,
            // allocates a new one otherwise.
            buf.reserve(need.max(CHUNK));
        }
        f(&mut Writer { buf })
    })
}

/// Runs `f` with this thread's scratch vector, empty (for bytes that are
/// encoded further before they become a header value).
pub(crate) fn scratch<T>(f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    SCRATCH.with_borrow_mut(|v| {
        v.clear();
        f(v)
    })
}

#[cfg(test)]
mod tests;
