//! Reading the IETF fields back: `RateLimit` and `RateLimit-Policy` as
//! Structured Field lists (RFC 9651), the inverse of
//! [`ratelimit_item`](super::ratelimit_item) and
//! [`policy_item`](super::policy_item), for clients of any server that
//! writes them (draft-ietf-httpapi-ratelimit-headers-11).
//!
//! What is defined for every input, never a panic:
//! - a field that is not a Structured Field list is ignored whole, as
//!   RFC 9651 says a parser must (`None`);
//! - an item whose parameter the draft gives as a non-negative integer
//!   (`r`, `t`, `q`, `w`) holds anything else there (a negative, a
//!   decimal, a string) is dropped, and the rest of the list is kept;
//! - a parameter named twice counts with its last value (RFC 9651);
//! - integers have at most 15 digits (RFC 9651), so no figure read here
//!   is larger than 999,999,999,999,999;
//! - parameters the draft does not name are skipped.
//!
//! ```
//! use throttle_fleet_core::fields::read::{policy_items, ratelimit_items};
//!
//! let items = ratelimit_items(r#""burst";r=0;t=12, "day";r=1000;t=3600;pk=:cGs=:"#).unwrap();
//! assert_eq!((items[0].name, items[0].remaining, items[0].reset_secs), ("burst", 0, Some(12)));
//! assert_eq!(items[1].partition_key, Some("cGs="));
//!
//! let policies = policy_items(r#""burst";q=100;w=60"#).unwrap();
//! assert_eq!((policies[0].quota, policies[0].window_secs), (100, Some(60)));
//!
//! assert!(ratelimit_items("\"a\";r=1,,").is_none()); // not a list: ignored whole
//! ```

/// One item of a `RateLimit` field: a policy's state now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitItem<'a> {
    /// The policy's name (a String's text, escapes left as written, or a
    /// Token).
    pub name: &'a str,
    /// `r`: what is left of the quota.
    pub remaining: u64,
    /// `t`: seconds until the quota is restored, if given.
    pub reset_secs: Option<u64>,
    /// `pk`: the server's partition key (base64 text between the colons).
    pub partition_key: Option<&'a str>,
}

/// One item of a `RateLimit-Policy` field: a policy as it is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyItem<'a> {
    /// The policy's name.
    pub name: &'a str,
    /// `q`: the quota.
    pub quota: u64,
    /// `w`: the window in seconds, if given.
    pub window_secs: Option<u64>,
    /// `qu`: the quota's unit (`"requests"` when absent, by the draft).
    pub quota_unit: Option<&'a str>,
    /// `pk`: the server's partition key.
    pub partition_key: Option<&'a str>,
}

/// The items of a `RateLimit` field value with their required `r`;
/// `None` when the value is not a Structured Field list.
pub fn ratelimit_items(value: &str) -> Option<Vec<RateLimitItem<'_>>> {
    let mut out = Vec::new();
    for item in list(value)? {
        let (Some(Bare::Integer(r)), reset) = (item.param("r"), item.param("t")) else {
            continue;
        };
        let Some(reset_secs) = optional_count(reset) else {
            continue;
        };
        let Ok(remaining) = u64::try_from(r) else {
            continue;
        };
        out.push(RateLimitItem {
            name: item.name,
            remaining,
            reset_secs,
            partition_key: item.bytes("pk"),
        });
    }
    Some(out)
}

/// The items of a `RateLimit-Policy` field value with their required `q`;
/// `None` when the value is not a Structured Field list.
pub fn policy_items(value: &str) -> Option<Vec<PolicyItem<'_>>> {
    let mut out = Vec::new();
    for item in list(value)? {
        let Some(Bare::Integer(q)) = item.param("q") else {
            continue;
        };
        let (Ok(quota), Some(window_secs)) = (u64::try_from(q), optional_count(item.param("w")))
        else {
            continue;
        };
        let quota_unit = match item.param("qu") {
            None => None,
            Some(Bare::String(unit) | Bare::Token(unit)) => Some(unit),
            Some(_) => continue,
        };
        out.push(PolicyItem {
            name: item.name,
            quota,
            window_secs,
            quota_unit,
            partition_key: item.bytes("pk"),
        });
    }
    Some(out)
}

/// `Some(None)` for an absent parameter, `Some(Some(n))` for a
/// non-negative integer, `None` for anything else (the item is dropped).
fn optional_count(value: Option<Bare<'_>>) -> Option<Option<u64>> {
    match value {
        None => Some(None),
        Some(Bare::Integer(n)) => u64::try_from(n).ok().map(Some),
        Some(_) => None,
    }
}

/// A bare item's value, as far as these fields need one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bare<'a> {
    Integer(i64),
    Decimal,
    String(&'a str),
    Token(&'a str),
    Bytes(&'a str),
    Boolean,
}

/// A list member: a name (String or Token) and its parameters, last
/// value first found from the end.
struct Item<'a> {
    name: &'a str,
    params: Vec<(&'a str, Bare<'a>)>,
}

impl<'a> Item<'a> {
    fn param(&self, key: &str) -> Option<Bare<'a>> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|&(_, v)| v)
    }

    fn bytes(&self, key: &str) -> Option<&'a str> {
        match self.param(key) {
            Some(Bare::Bytes(b)) => Some(b),
            _ => None,
        }
    }
}

/// RFC 9651's list parser, for members whose bare item is a String or a
/// Token (others are skipped, inner lists make the field invalid).
fn list(value: &str) -> Option<Vec<Item<'_>>> {
    let mut p = Parser { s: value, i: 0 };
    p.skip(|c| c == b' ' || c == b'\t');
    let mut items = Vec::new();
    if p.at_end() {
        return Some(items);
    }
    loop {
        let bare = p.bare()?;
        let params = p.params()?;
        let name = match bare {
            Bare::String(n) | Bare::Token(n) => Some(n),
            _ => None,
        };
        if let Some(name) = name {
            items.push(Item { name, params });
        }
        p.skip(|c| c == b' ' || c == b'\t');
        if p.at_end() {
            return Some(items);
        }
        if p.next()? != b',' {
            return None;
        }
        p.skip(|c| c == b' ' || c == b'\t');
        if p.at_end() {
            return None; // a trailing comma
        }
    }
}

struct Parser<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Parser<'a> {
    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn skip(&mut self, keep: impl Fn(u8) -> bool) -> &'a str {
        let start = self.i;
        while self.peek().is_some_and(&keep) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn params(&mut self) -> Option<Vec<(&'a str, Bare<'a>)>> {
        let mut params = Vec::new();
        while self.peek() == Some(b';') {
            self.i += 1;
            self.skip(|c| c == b' ');
            let key = self.key()?;
            let value = if self.peek() == Some(b'=') {
                self.i += 1;
                self.bare()?
            } else {
                Bare::Boolean
            };
            params.push((key, value));
        }
        Some(params)
    }

    fn key(&mut self) -> Option<&'a str> {
        let first = self.peek()?;
        if !(first.is_ascii_lowercase() || first == b'*') {
            return None;
        }
        Some(self.skip(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'.' | b'*')
        }))
    }

    fn bare(&mut self) -> Option<Bare<'a>> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => {
                self.i += 1;
                let start = self.i;
                loop {
                    match self.next()? {
                        b'\\' => {
                            if !matches!(self.next()?, b'"' | b'\\') {
                                return None;
                            }
                        }
                        b'"' => return Some(Bare::String(&self.s[start..self.i - 1])),
                        c if (0x20..0x7f).contains(&c) => {}
                        _ => return None,
                    }
                }
            }
            b':' => {
                self.i += 1;
                let text =
                    self.skip(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='));
                (self.next()? == b':').then_some(Bare::Bytes(text))
            }
            b'?' => {
                self.i += 1;
                matches!(self.next()?, b'0' | b'1').then_some(Bare::Boolean)
            }
            c if c.is_ascii_alphabetic() || c == b'*' => {
                Some(Bare::Token(self.skip(|c| {
                    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c)
                })))
            }
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Bare<'a>> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let whole = self.skip(|c| c.is_ascii_digit());
        if whole.is_empty() {
            return None;
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            let fraction = self.skip(|c| c.is_ascii_digit());
            return (whole.len() <= 12 && (1..=3).contains(&fraction.len()))
                .then_some(Bare::Decimal);
        }
        if whole.len() > 15 {
            return None;
        }
        let n: i64 = whole.parse().ok()?;
        Some(Bare::Integer(if negative { -n } else { n }))
    }
}

#[cfg(test)]
mod tests;
