//! JA4, FoxIO's TLS client fingerprint, from the raw ClientHello.
//!
//! `t13d1516h2_8daaf6152771_e5627efa2ab1`: protocol (`t`, TLS over TCP),
//! TLS version (the highest of `supported_versions`, else the hello's
//! version), `d` with SNI or `i` without, the number of cipher suites and of
//! extensions (two digits each, at most 99), the first and last characters
//! of the first ALPN value (`00` without ALPN); then the SHA-256 of the
//! sorted cipher suites, truncated to 12 hex characters; then the same of
//! the sorted extensions without SNI and ALPN, followed by `_` and the
//! signature algorithms in the order sent. GREASE values are ignored
//! everywhere.

use std::fmt;

use sha2::{Digest, Sha256};
use tls_parser::{TlsExtension, TlsMessage, TlsMessageHandshake};

use crate::hello::{self, HelloError, Scan};

const EXT_SNI: u16 = 0x0000;
const EXT_SIGNATURE_ALGORITHMS: u16 = 0x000d;
const EXT_ALPN: u16 = 0x0010;
const EXT_SUPPORTED_VERSIONS: u16 = 0x002b;
const LEN: usize = 36;

/// A JA4 fingerprint: 36 ASCII characters, `Copy`, no allocation.
///
/// ```
/// # fn hello() -> Vec<u8> { include_bytes!("../tests/vectors/curl.bin").to_vec() }
/// use throttle_fleet_tls::Ja4;
/// let ja4 = Ja4::from_records(&hello()).unwrap();
/// assert_eq!(ja4.as_str(), "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ja4([u8; LEN]);

impl Ja4 {
    /// The fingerprint of the first bytes a client sent: one or more TLS
    /// handshake records carrying a ClientHello of at most
    /// [`DEFAULT_MAX_HELLO`](crate::DEFAULT_MAX_HELLO) bytes. Bytes after the
    /// hello are ignored.
    pub fn from_records(wire: &[u8]) -> Result<Self, HelloError> {
        match hello::scan(wire, hello::DEFAULT_MAX_HELLO) {
            Scan::Complete(message) => Self::from_handshake(&message),
            Scan::NeedMore => Err(HelloError::Truncated),
            Scan::Invalid(e) => Err(e),
        }
    }

    /// The fingerprint of a ClientHello handshake message (its 4-byte
    /// handshake header included, record headers removed).
    pub fn from_handshake(message: &[u8]) -> Result<Self, HelloError> {
        let hello = match tls_parser::parse_tls_message_handshake(message) {
            Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(ch)))) => ch,
            Ok(_) => return Err(HelloError::NotClientHello),
            Err(_) => return Err(HelloError::Malformed),
        };
        let mut ciphers: Vec<u16> = hello
            .ciphers
            .iter()
            .map(|c| c.0)
            .filter(|&c| !is_grease(c))
            .collect();

        let mut extensions = Vec::new();
        let mut sni = false;
        let mut alpn: Option<Vec<u8>> = None;
        let mut signature_algorithms: Vec<u16> = Vec::new();
        let mut supported_versions: Vec<u16> = Vec::new();
        let mut rest = hello.ext.unwrap_or_default();
        while !rest.is_empty() {
            // Each extension: type (2), length (2), data. The walk is ours so
            // that one extension tls-parser cannot read does not hide the
            // ones after it; tls-parser reads the contents JA4 needs.
            let [t0, t1, l0, l1, ..] = *rest else {
                return Err(HelloError::Malformed);
            };
            let ty = u16::from_be_bytes([t0, t1]);
            let end = 4 + usize::from(u16::from_be_bytes([l0, l1]));
            let Some(raw) = rest.get(..end) else {
                return Err(HelloError::Malformed);
            };
            rest = &rest[end..];
            if is_grease(ty) {
                continue;
            }
            extensions.push(ty);
            match ty {
                EXT_SNI => sni = true,
                EXT_ALPN | EXT_SIGNATURE_ALGORITHMS | EXT_SUPPORTED_VERSIONS => {
                    match tls_parser::parse_tls_client_hello_extension(raw) {
                        Ok((_, TlsExtension::ALPN(names))) => {
                            alpn = Some(names.first().map(|n| n.to_vec()).unwrap_or_default());
                        }
                        Ok((_, TlsExtension::SignatureAlgorithms(algs))) => {
                            signature_algorithms = algs;
                        }
                        Ok((_, TlsExtension::SupportedVersions(vs))) => {
                            supported_versions = vs.iter().map(|v| v.0).collect();
                        }
                        _ => return Err(HelloError::Malformed),
                    }
                }
                _ => {}
            }
        }

        let version = supported_versions
            .iter()
            .copied()
            .filter(|&v| !is_grease(v))
            .max()
            .unwrap_or(hello.version.0);

        let mut out = [0u8; LEN];
        out[0] = b't';
        out[1..3].copy_from_slice(version_code(version));
        out[3] = if sni { b'd' } else { b'i' };
        out[4..6].copy_from_slice(&two_digits(ciphers.len()));
        out[6..8].copy_from_slice(&two_digits(extensions.len()));
        out[8..10].copy_from_slice(&alpn_code(alpn.as_deref().unwrap_or_default()));
        out[10] = b'_';

        ciphers.sort_unstable();
        let mut text = String::with_capacity(5 * ciphers.len().max(extensions.len()) + 64);
        hex_list(&mut text, &ciphers);
        hash12(&mut out[11..23], (!ciphers.is_empty()).then_some(&text));
        out[23] = b'_';

        extensions.retain(|&e| e != EXT_SNI && e != EXT_ALPN);
        extensions.sort_unstable();
        text.clear();
        hex_list(&mut text, &extensions);
        signature_algorithms.retain(|&s| !is_grease(s));
        if !signature_algorithms.is_empty() {
            text.push('_');
            hex_list(&mut text, &signature_algorithms);
        }
        hash12(&mut out[24..36], (!extensions.is_empty()).then_some(&text));
        Ok(Self(out))
    }

    /// A fingerprint written as text (as [`as_str`](Self::as_str) gives
    /// it): 36 ASCII letters, digits and underscores, or `None`.
    ///
    /// ```
    /// use throttle_fleet_tls::Ja4;
    /// let ja4 = Ja4::parse("t13d1516h2_8daaf6152771_e5627efa2ab1").unwrap();
    /// assert_eq!(ja4.as_str(), "t13d1516h2_8daaf6152771_e5627efa2ab1");
    /// assert!(Ja4::parse("t13d").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let bytes: [u8; LEN] = text.as_bytes().try_into().ok()?;
        bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .then_some(Self(bytes))
    }

    /// The fingerprint as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever written into the array.
        std::str::from_utf8(&self.0).unwrap_or("")
    }

    /// The fingerprint's 36 ASCII bytes.
    pub fn as_bytes(&self) -> &[u8; LEN] {
        &self.0
    }
}

impl fmt::Display for Ja4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Ja4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ja4({})", self.as_str())
    }
}

/// GREASE values (RFC 8701): `0x?a?a` with both bytes equal.
pub(crate) const fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && (v >> 8) == (v & 0xff)
}

fn version_code(v: u16) -> &'static [u8; 2] {
    match v {
        0x0304 => b"13",
        0x0303 => b"12",
        0x0302 => b"11",
        0x0301 => b"10",
        0x0300 => b"s3",
        0x0002 => b"s2",
        0xfeff => b"d1",
        0xfefd => b"d2",
        0xfefc => b"d3",
        _ => b"00",
    }
}

fn two_digits(n: usize) -> [u8; 2] {
    let n = n.min(99) as u8;
    [b'0' + n / 10, b'0' + n % 10]
}

/// First and last characters of the first ALPN value; when either is not
/// ASCII alphanumeric, the first and last hex digits of the value instead
/// (FoxIO's "ALPN Extension Value"); `00` for none.
fn alpn_code(value: &[u8]) -> [u8; 2] {
    let (Some(&first), Some(&last)) = (value.first(), value.last()) else {
        return *b"00";
    };
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        [first, last]
    } else {
        [HEX[usize::from(first >> 4)], HEX[usize::from(last & 0x0f)]]
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_list(out: &mut String, values: &[u16]) {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for shift in [12, 8, 4, 0] {
            out.push(char::from(HEX[usize::from((v >> shift) & 0xf)]));
        }
    }
}

fn hash12(out: &mut [u8], text: Option<&String>) {
    let Some(text) = text else {
        out.fill(b'0');
        return;
    };
    let digest = Sha256::digest(text.as_bytes());
    for (i, byte) in digest.iter().take(6).enumerate() {
        out[2 * i] = HEX[usize::from(byte >> 4)];
        out[2 * i + 1] = HEX[usize::from(byte & 0xf)];
    }
}

#[cfg(test)]
mod tests;
