//! Framing: where the ClientHello ends in the bytes a client sent first.
//!
//! A ClientHello is one handshake message, carried in one or more TLS
//! records, which may themselves arrive in any number of TCP segments. This
//! module only finds the message's bytes; [`crate::Ja4`] reads its fields.

use std::fmt;

/// The default bound on what is buffered before the handshake: 16 KiB. Real
/// ClientHellos are a few hundred bytes to about 2 KiB (post-quantum key
/// shares included); 16 KiB leaves room for large session tickets.
pub const DEFAULT_MAX_HELLO: usize = 16 * 1024;

const RECORD_HEADER: usize = 5;
const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// A TLS plaintext record carries at most 2^14 bytes (RFC 8446, 5.1).
const MAX_RECORD: usize = 1 << 14;

/// Why the first bytes of a connection are not a ClientHello that can be
/// fingerprinted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HelloError {
    /// The bytes are not a TLS handshake record (e.g. plain HTTP).
    NotTls,
    /// The first handshake message is not a ClientHello.
    NotClientHello,
    /// A record or the ClientHello is larger than the configured bound.
    TooLarge,
    /// The client closed the connection before the ClientHello was complete.
    Truncated,
    /// The ClientHello is complete but its contents do not parse.
    Malformed,
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotTls => "the connection did not start with a TLS handshake record",
            Self::NotClientHello => "the first handshake message is not a ClientHello",
            Self::TooLarge => "the ClientHello is larger than the configured bound",
            Self::Truncated => "the connection closed inside the ClientHello",
            Self::Malformed => "the ClientHello does not parse",
        })
    }
}

impl std::error::Error for HelloError {}

/// What the bytes received so far amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scan {
    /// More bytes are needed to finish the ClientHello.
    NeedMore,
    /// The whole ClientHello handshake message (4-byte header included),
    /// reassembled from its records.
    Complete(Vec<u8>),
    /// The bytes cannot become a fingerprintable ClientHello.
    Invalid(HelloError),
}

/// Looks for a complete ClientHello at the start of `buf`, which holds the
/// first bytes of a connection. Never reads past `max` bytes' worth of
/// message: a hello that would need more is [`HelloError::TooLarge`].
pub(crate) fn scan(buf: &[u8], max: usize) -> Scan {
    Scanner::new(max).scan(buf)
}

/// [`scan`] for bytes that arrive a few at a time: it remembers where the
/// records it has already read end and the message bytes they carried, so
/// each call only looks at the bytes after the last complete record. A
/// client sending its hello one byte per segment costs linear work, not
/// quadratic.
#[derive(Debug)]
pub(crate) struct Scanner {
    max: usize,
    /// Where the first record not yet read starts in the connection's bytes.
    at: usize,
    /// The handshake bytes of the records read so far.
    message: Vec<u8>,
}

impl Scanner {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            at: 0,
            message: Vec::new(),
        }
    }

    /// `buf` holds every byte of the connection so far: the bytes of the
    /// previous call, then any that arrived since. Bytes before the first
    /// unread record are not looked at again. Once it has answered
    /// [`Scan::Complete`] or [`Scan::Invalid`] the scanner is done.
    pub(crate) fn scan(&mut self, buf: &[u8]) -> Scan {
        let max = self.max;
        loop {
            let at = self.at;
            let Some(header) = buf.get(at..at + RECORD_HEADER) else {
                return need_more(buf, max);
            };
            if header[0] != CONTENT_HANDSHAKE || header[1] != 3 {
                return Scan::Invalid(HelloError::NotTls);
            }
            let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
            if len == 0 {
                // An empty handshake record is forbidden (RFC 8446, 5.1).
                return Scan::Invalid(HelloError::Malformed);
            }
            if len > MAX_RECORD {
                return Scan::Invalid(HelloError::TooLarge);
            }
            let body_at = at + RECORD_HEADER;
            let Some(body) = buf.get(body_at..body_at + len) else {
                // Check the first fragment's message header as soon as it is
                // there, so an oversized hello is refused before it is read.
                return match check_header(&self.message, &buf[body_at.min(buf.len())..]) {
                    Some(Err(e)) => Scan::Invalid(e),
                    Some(Ok(total)) if total > max => Scan::Invalid(HelloError::TooLarge),
                    _ => need_more(buf, max),
                };
            };
            self.message.extend_from_slice(body);
            self.at = body_at + len;
            if self.message.len() >= 4 {
                if self.message[0] != HANDSHAKE_CLIENT_HELLO {
                    return Scan::Invalid(HelloError::NotClientHello);
                }
                let total = 4 + be_u24(&self.message[1..4]);
                if total > max {
                    return Scan::Invalid(HelloError::TooLarge);
                }
                if self.message.len() >= total {
                    let mut message = std::mem::take(&mut self.message);
                    message.truncate(total);
                    return Scan::Complete(message);
                }
            }
            if self.at > max {
                return Scan::Invalid(HelloError::TooLarge);
            }
        }
    }
}

/// The message length announced in the first bytes of the handshake, when
/// they are available, as an error if they already fail.
fn check_header(message: &[u8], partial: &[u8]) -> Option<Result<usize, HelloError>> {
    let mut head = [0u8; 4];
    let have = message.len().min(4);
    head[..have].copy_from_slice(&message[..have]);
    let more = (4 - have).min(partial.len());
    head[have..have + more].copy_from_slice(&partial[..more]);
    if have + more == 0 {
        return None;
    }
    if head[0] != HANDSHAKE_CLIENT_HELLO {
        return Some(Err(HelloError::NotClientHello));
    }
    if have + more < 4 {
        return None;
    }
    Some(Ok(4 + be_u24(&head[1..4])))
}

fn need_more(buf: &[u8], max: usize) -> Scan {
    if buf.len() >= max + RECORD_HEADER {
        Scan::Invalid(HelloError::TooLarge)
    } else {
        Scan::NeedMore
    }
}

fn be_u24(b: &[u8]) -> usize {
    (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2])
}

#[cfg(test)]
mod tests;
