//! Who is being limited within a rule.

use std::fmt;
use std::hash::{Hash, Hasher};

/// The longest key material kept as is; longer material is replaced by its
/// BLAKE3 digest.
pub const MAX_KEY_LEN: usize = 64;

const DIGEST_LEN: usize = 32;

/// Who is being limited within a rule: a client address, an API key, a route,
/// a user id, or several of these together.
///
/// A key is a byte string of at most [`MAX_KEY_LEN`] bytes that lives inline
/// (building, copying and comparing one never allocates). Longer material is
/// replaced by its 32-byte BLAKE3 digest, marked as such, so a digest can
/// never equal a raw key, and hostile input cannot grow memory or choose where
/// a key lands. Backends render keys without letting the bytes choose
/// anything (the Redis backends hex-encode them inside the hash tag).
///
/// Extractors normalise before building the key (an IP address is masked to
/// its prefix, for example); the key itself compares bytes exactly.
///
/// ```
/// use throttle_fleet_core::Key;
///
/// let a = Key::new("tenant-42");
/// assert_eq!(a.as_bytes(), b"tenant-42");
/// assert!(!a.is_digest());
///
/// let long = Key::new("x".repeat(10_000));
/// assert!(long.is_digest());
/// assert_eq!(long.as_bytes().len(), 32);
///
/// // Parts are length-prefixed, so ("ab", "c") and ("a", "bc") differ.
/// assert_ne!(Key::from_parts(&[b"ab", b"c"]), Key::from_parts(&[b"a", b"bc"]));
/// ```
#[derive(Clone, Copy)]
pub struct Key {
    digest: bool,
    len: u8,
    buf: [u8; MAX_KEY_LEN],
}

impl Key {
    /// The empty key: one shared counter for every request.
    pub const fn global() -> Self {
        Self {
            digest: false,
            len: 0,
            buf: [0; MAX_KEY_LEN],
        }
    }

    /// A key from raw bytes; material longer than [`MAX_KEY_LEN`] is hashed.
    pub fn new(material: impl AsRef<[u8]>) -> Self {
        let bytes = material.as_ref();
        if bytes.len() <= MAX_KEY_LEN {
            let mut key = Self::global();
            key.buf[..bytes.len()].copy_from_slice(bytes);
            key.len = bytes.len() as u8;
            key
        } else {
            Self::from_digest(blake3::hash(bytes).as_bytes())
        }
    }

    /// A key from several parts (a composite such as prefix + fingerprint +
    /// user agent). Each part is length-prefixed, so no two different lists
    /// of parts give the same key; if the encoding is longer than
    /// [`MAX_KEY_LEN`], the key is its digest.
    pub fn from_parts(parts: &[&[u8]]) -> Self {
        let encoded_len: usize = parts
            .iter()
            .map(|p| 2 + p.len().min(usize::from(u16::MAX)))
            .sum();
        let too_long =
            encoded_len > MAX_KEY_LEN || parts.iter().any(|p| p.len() > usize::from(u16::MAX));
        if too_long {
            let mut hasher = blake3::Hasher::new();
            for part in parts {
                hasher.update(&(part.len() as u64).to_be_bytes());
                hasher.update(part);
            }
            return Self::from_digest(hasher.finalize().as_bytes());
        }
        let mut key = Self::global();
        let mut at = 0;
        for part in parts {
            let n = part.len();
            key.buf[at..at + 2].copy_from_slice(&(n as u16).to_be_bytes());
            key.buf[at + 2..at + 2 + n].copy_from_slice(part);
            at += 2 + n;
        }
        key.len = at as u8;
        key
    }

    /// A key exactly as stored: `bytes` is at most [`MAX_KEY_LEN`] long.
    pub(crate) fn from_stored(digest: bool, bytes: &[u8]) -> Self {
        let mut key = Self::global();
        let n = bytes.len().min(MAX_KEY_LEN);
        key.buf[..n].copy_from_slice(&bytes[..n]);
        key.len = n as u8;
        key.digest = digest;
        key
    }

    fn from_digest(digest: &[u8; DIGEST_LEN]) -> Self {
        let mut key = Self::global();
        key.buf[..DIGEST_LEN].copy_from_slice(digest);
        key.len = DIGEST_LEN as u8;
        key.digest = true;
        key
    }

    /// The key's bytes: the material itself, or its digest.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// Whether the material was too long and the key holds its digest.
    #[inline]
    pub const fn is_digest(&self) -> bool {
        self.digest
    }

    /// Writes the key as lowercase hex, prefixed by `r` (raw) or `h` (digest):
    /// a form with no characters that mean anything to Redis or a log line.
    pub fn write_hex(&self, out: &mut String) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.reserve(1 + 2 * self.as_bytes().len());
        out.push(if self.digest { 'h' } else { 'r' });
        for b in self.as_bytes() {
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        }
    }

    /// The key [`write_hex`](Self::write_hex) wrote as `text`, or `None`
    /// if `text` is not such a form (for backends that keep keys outside
    /// this process).
    ///
    /// ```
    /// use throttle_fleet_core::Key;
    ///
    /// for key in [Key::new("10.0.0.1"), Key::new("y".repeat(100))] {
    ///     let mut text = String::new();
    ///     key.write_hex(&mut text);
    ///     assert_eq!(Key::from_hex(&text), Some(key));
    /// }
    /// assert_eq!(Key::from_hex("x00"), None);
    /// ```
    pub fn from_hex(text: &str) -> Option<Self> {
        let digest = match text.as_bytes().first()? {
            b'r' => false,
            b'h' => true,
            _ => return None,
        };
        let hex = &text.as_bytes()[1..];
        if !hex.len().is_multiple_of(2)
            || hex.len() > 2 * MAX_KEY_LEN
            || (digest && hex.len() != 2 * DIGEST_LEN)
        {
            return None;
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut bytes = [0u8; MAX_KEY_LEN];
        for (i, pair) in hex.chunks(2).enumerate() {
            bytes[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
        }
        Some(Self::from_stored(digest, &bytes[..hex.len() / 2]))
    }
}

impl Default for Key {
    fn default() -> Self {
        Self::global()
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest && self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u8(u8::from(self.digest));
        state.write(self.as_bytes());
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Self {
        Self::new(b)
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

impl From<&String> for Key {
    fn from(s: &String) -> Self {
        Self::new(s)
    }
}

impl From<Vec<u8>> for Key {
    fn from(b: Vec<u8>) -> Self {
        Self::new(b)
    }
}

impl From<u64> for Key {
    fn from(n: u64) -> Self {
        Self::new(n.to_be_bytes())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.digest {
            f.write_str("Key(digest ")?;
        } else {
            f.write_str("Key(\"")?;
        }
        for &b in self.as_bytes() {
            if self.digest {
                write!(f, "{b:02x}")?;
            } else {
                write!(f, "{}", std::ascii::escape_default(b))?;
            }
        }
        f.write_str(if self.digest { ")" } else { "\")" })
    }
}

#[cfg(test)]
mod tests;
