//! The gRPC parts of an answer, read without a protobuf library: the
//! status code of a Trailers-Only answer, the `RetryInfo` inside
//! `grpc-status-details-bin`, `grpc-retry-pushback-ms`, and the caller's
//! `grpc-timeout`. A limiter answers before any message, so its status is
//! in the headers (Trailers-Only); a status in trailers after a body is
//! not read here (the answer has begun and is the caller's).

use std::time::Duration;

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use http::HeaderMap;
use throttle_fleet_core::fields::names;

/// `RESOURCE_EXHAUSTED`.
pub(crate) const RESOURCE_EXHAUSTED: u32 = 8;
/// `UNAVAILABLE`.
pub(crate) const UNAVAILABLE: u32 = 14;

/// `google.rpc.RetryInfo`'s type URL in a `google.protobuf.Any`.
const RETRY_INFO_TYPE_URL: &[u8] = b"type.googleapis.com/google.rpc.RetryInfo";

/// Binary metadata is base64, padded or not (gRPC over HTTP/2: a reader
/// must accept both).
const BINARY: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Whether the request is gRPC (`content-type: application/grpc…`).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The `grpc-status` in the headers, if any and a number.
pub(crate) fn status(headers: &HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What `grpc-retry-pushback-ms` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushback {
    /// Wait this long before retrying.
    Wait(Duration),
    /// Negative or not a number: do not retry (gRFC A6).
    Never,
}

/// The pushback header, if present.
pub(crate) fn pushback(headers: &HeaderMap) -> Option<Pushback> {
    let value = headers.get(names::GRPC_RETRY_PUSHBACK_MS)?;
    let text = value.to_str().ok().map(str::trim).unwrap_or("");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Pushback::Never);
    }
    // Digits only: an overflow is only "very long", and the ceiling cuts it.
    let ms = text.parse::<u64>().unwrap_or(u64::MAX);
    Some(Pushback::Wait(Duration::from_millis(ms)))
}

/// The `RetryInfo.retry_delay` inside `grpc-status-details-bin`, if the
/// header decodes and holds one with a non-negative delay.
pub(crate) fn retry_info(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-status-details-bin")?.as_bytes();
    let bytes = BINARY.decode(text).ok()?;
    // google.rpc.Status { code = 1; message = 2; repeated Any details = 3 }
    let mut status = Fields(&bytes);
    while let Some((field, value)) = status.next()? {
        let (3, Value::Bytes(any)) = (field, value) else {
            continue;
        };
        // google.protobuf.Any { type_url = 1; value = 2 }
        let (mut url, mut message) = (None, None);
        let mut fields = Fields(any);
        while let Some((field, value)) = fields.next()? {
            match (field, value) {
                (1, Value::Bytes(b)) => url = Some(b),
                (2, Value::Bytes(b)) => message = Some(b),
                _ => {}
            }
        }
        if url == Some(RETRY_INFO_TYPE_URL) {
            return delay(message.unwrap_or_default());
        }
    }
    None
}

/// `RetryInfo { Duration retry_delay = 1 }`, `Duration { int64 seconds =
/// 1; int32 nanos = 2 }`.
fn delay(retry_info: &[u8]) -> Option<Duration> {
    let mut duration = None;
    let mut fields = Fields(retry_info);
    while let Some((field, value)) = fields.next()? {
        if let (1, Value::Bytes(b)) = (field, value) {
            duration = Some(b);
        }
    }
    let (mut seconds, mut nanos) = (0_i64, 0_i64);
    let mut fields = Fields(duration?);
    while let Some((field, value)) = fields.next()? {
        match (field, value) {
            // int64 and int32 are sent as their two's complement varint.
            (1, Value::Varint(v)) => seconds = v as i64,
            (2, Value::Varint(v)) => nanos = i64::from(v as i32),
            _ => {}
        }
    }
    if seconds < 0 || !(0..1_000_000_000).contains(&nanos) {
        return None;
    }
    Some(Duration::new(seconds as u64, nanos as u32))
}

/// A protobuf field's value, as far as these messages need one.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a protobuf message, in order; `None` (from `next`) when
/// the bytes are not a message.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    #[allow(clippy::type_complexity)]
    fn next(&mut self) -> Option<Option<(u64, Value<'a>)>> {
        if self.0.is_empty() {
            return Some(None);
        }
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => Value::Varint(self.varint()?),
            1 => self.skip(8).map(|_| Value::Fixed)?,
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                Value::Bytes(self.skip(len)?)
            }
            5 => self.skip(4).map(|_| Value::Fixed)?,
            _ => return None,
        };
        Some(Some((tag >> 3, value)))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0_u64;
        for (i, &byte) in self.0.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.0 = &self.0[i + 1..];
                return Some(value);
            }
        }
        None
    }

    fn skip(&mut self, len: usize) -> Option<&'a [u8]> {
        if len > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(head)
    }
}

/// The caller's `grpc-timeout` (`1*8DIGIT` and a unit of `H M S m u n`).
pub(crate) fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-timeout")?.as_bytes();
    let (&unit, digits) = text.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Encodes binary metadata as the servers do (for tests).
#[cfg(test)]
pub(crate) fn encode_binary(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests;
