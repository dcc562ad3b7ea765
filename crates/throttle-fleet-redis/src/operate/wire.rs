//! The operations' fields, values and replies as Redis holds them.
//!
//! A field is `<rule> <key as hex>` (`Key::write_hex`: nothing in it
//! means anything to Redis or a log line). A block's value is
//! `<until µs> <cause> <label>`, the cause `o` (an operator) or the
//! penalty's level; a reset's, in the table, `<generation> <until µs>`,
//! the generation being its log entry's id.

use std::sync::Arc;

use redis::Value;
use throttle_fleet_core::Key;
use throttle_fleet_core::operate::{Block, BlockCause};

/// The longest label kept, in bytes.
const MAX_LABEL: usize = 200;

pub(super) fn field(rule: &str, key: &Key) -> String {
    let mut out = String::with_capacity(rule.len() + 2 + 2 * key.as_bytes().len());
    out.push_str(rule);
    out.push(' ');
    key.write_hex(&mut out);
    out
}

fn parse_field(field: &str) -> Option<(Arc<str>, Key)> {
    let (rule, hex) = field.split_once(' ')?;
    Some((Arc::from(rule), Key::from_hex(hex)?))
}

pub(super) fn block_value(block: &Block) -> String {
    let cause = match block.cause {
        BlockCause::Operator => "o".to_owned(),
        BlockCause::Penalty { level } => level.to_string(),
    };
    let mut label = &*block.label;
    if label.len() > MAX_LABEL {
        let mut end = MAX_LABEL;
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        label = &label[..end];
    }
    format!("{} {cause} {label}", block.until_us)
}

fn parse_block(value: &str) -> Option<Block> {
    let mut parts = value.splitn(3, ' ');
    let until_us = parts.next()?.parse().ok()?;
    let cause = match parts.next()? {
        "o" => BlockCause::Operator,
        level => BlockCause::Penalty {
            level: level.parse().ok()?,
        },
    };
    Some(Block {
        until_us,
        label: Arc::from(parts.next().unwrap_or("")),
        cause,
    })
}

/// One change read from the log.
pub(super) enum Change {
    Block {
        rule: Arc<str>,
        key: Key,
        block: Block,
    },
    Unblock {
        rule: Arc<str>,
        key: Key,
    },
    Reset {
        rule: Arc<str>,
        key: Key,
        until_us: u64,
    },
    /// An entry this version does not know (a newer one wrote it).
    Unknown,
}

/// What `poll.lua` answered, with the epoch of the Redis that answered.
pub(super) enum Polled {
    /// The log's entries since the last read, oldest first.
    Entries(Vec<(String, Change)>),
    /// Everything: the last id, the blocks, the resets.
    Tables {
        epoch: String,
        last: String,
        blocks: Vec<(Arc<str>, Key, Block)>,
        resets: Vec<(Arc<str>, Key, String, u64)>,
    },
    /// Redis lost what this instance had read (restarted without its
    /// data, or a replica promoted before it had it).
    Lost,
}

/// What `op.lua` answered.
pub(super) enum Sent {
    /// Done: the log entry's id.
    Done(String),
    /// Not applied: a later change to the key holds, this block (`None`:
    /// no block).
    Stale(Option<Block>),
}

pub(super) fn sent(reply: &Value) -> Option<Sent> {
    match reply {
        Value::Array(items) => {
            if text(items.first()?)? != "s" {
                return None;
            }
            let value = text(items.get(1)?)?;
            if value.is_empty() {
                Some(Sent::Stale(None))
            } else {
                Some(Sent::Stale(Some(parse_block(&value)?)))
            }
        }
        other => Some(Sent::Done(text(other)?)),
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn pairs(v: &Value) -> Option<Vec<(String, String)>> {
    let Value::Array(items) = v else { return None };
    items
        .chunks(2)
        .map(|p| Some((text(p.first()?)?, text(p.get(1)?)?)))
        .collect()
}

fn change(fields: &[(String, String)]) -> Change {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, v)| v.as_str())
    };
    let (Some(op), Some(Some((rule, key)))) = (get("o"), get("f").map(parse_field)) else {
        return Change::Unknown;
    };
    let value = get("v").unwrap_or("");
    match op {
        "b" => match parse_block(value) {
            Some(block) => Change::Block { rule, key, block },
            None => Change::Unknown,
        },
        "u" => Change::Unblock { rule, key },
        "r" => match value.parse() {
            Ok(until_us) => Change::Reset {
                rule,
                key,
                until_us,
            },
            Err(_) => Change::Unknown,
        },
        _ => Change::Unknown,
    }
}

pub(super) fn polled(reply: Value) -> Option<Polled> {
    let Value::Array(items) = reply else {
        return None;
    };
    let epoch = text(items.get(1)?)?;
    match text(items.first()?)?.as_str() {
        "e" => {
            let mut out = Vec::with_capacity(items.len() - 2);
            for entry in &items[2..] {
                let Value::Array(e) = entry else { return None };
                let id = text(e.first()?)?;
                let fields = pairs(e.get(1)?)?;
                out.push((id, change(&fields)));
            }
            Some(Polled::Entries(out))
        }
        "l" => Some(Polled::Lost),
        "t" => {
            let last = text(items.get(2)?)?;
            let blocks = pairs(items.get(3)?)?
                .into_iter()
                .filter_map(|(f, v)| {
                    let (rule, key) = parse_field(&f)?;
                    Some((rule, key, parse_block(&v)?))
                })
                .collect();
            let resets = pairs(items.get(4)?)?
                .into_iter()
                .filter_map(|(f, v)| {
                    let (rule, key) = parse_field(&f)?;
                    let (generation, until) = v.split_once(' ')?;
                    Some((rule, key, generation.to_owned(), until.parse().ok()?))
                })
                .collect();
            Some(Polled::Tables {
                epoch,
                last,
                blocks,
                resets,
            })
        }
        _ => None,
    }
}

/// The block `penalty.lua` started: length (µs), level, until (µs).
pub(super) fn started(reply: &Value) -> Option<(u64, u32, u64)> {
    let t = text(reply)?;
    let mut parts = t.split(' ');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    ))
}

#[cfg(test)]
mod tests;
