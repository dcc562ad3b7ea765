//! A script's reply of integers, as the scripts of the exact and leased
//! modes send it: one string of decimal integers separated by spaces (one
//! value for the connection to parse, however many integers), or an array.

use redis::{FromRedisValue, ParsingError, Value};

/// A script's integers: the batch scripts' one string of them (one value
/// for the connection to parse, however many checks), or the log script's
/// array.
pub(crate) struct Reply(Vec<i64>);

impl Reply {
    /// Integer `i` of the reply.
    pub(crate) fn int(&self, i: usize) -> Option<i64> {
        self.0.get(i).copied()
    }

    /// Integer `i` of the reply, if not negative.
    pub(crate) fn u64(&self, i: usize) -> Option<u64> {
        u64::try_from(self.int(i)?).ok()
    }

    /// The integers of `text`, separated by single spaces.
    fn parse(text: &[u8]) -> Option<Self> {
        let mut out = Vec::with_capacity(1 + text.len() / 8);
        for field in text.split(|&b| b == b' ') {
            let (negative, digits) = match field.split_first() {
                Some((b'-', rest)) => (true, rest),
                _ => (false, field),
            };
            if digits.is_empty() || digits.len() > 18 {
                return None;
            }
            let mut v: i64 = 0;
            for &d in digits {
                if !d.is_ascii_digit() {
                    return None;
                }
                v = v * 10 + i64::from(d - b'0');
            }
            out.push(if negative { -v } else { v });
        }
        Some(Self(out))
    }
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let bad = |v: &Value| format!("unexpected reply from the rate-limit script: {v:?}").into();
        match v {
            Value::BulkString(ref text) => Self::parse(text).ok_or_else(|| bad(&v)),
            Value::Array(items) => items
                .iter()
                .map(|item| match item {
                    Value::Int(i) => Ok(*i),
                    other => Err(bad(other)),
                })
                .collect::<Result<_, _>>()
                .map(Self),
            other => Err(bad(&other)),
        }
    }
}

#[cfg(test)]
mod tests;
