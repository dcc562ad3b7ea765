//! JSON read strictly, for the admin endpoint's bodies: an object that
//! names a field twice, at any depth, is an error naming the field, where
//! `serde_json::Value` would keep the last one silently (so that
//! `{"rule": "nope", "rule": "ip"}` would act on rule `ip` while a proxy or
//! an audit log that keeps the first saw `nope`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// One JSON value from `bytes`, whitespace around it allowed. A field
/// named twice in one object is an error of category
/// [`Data`](serde_json::error::Category::Data) (the only one this reader
/// raises; malformed JSON is `Syntax` or `Eof`) reading `duplicate field
/// "key.ip" at line 1 column 40`: the field by its path from the top
/// (`[]` for an array's elements), at most 64 characters of it.
pub(crate) fn from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let value = Strict { at: None }.deserialize(&mut reader)?;
    reader.end()?;
    Ok(value)
}

/// Reads a value whose objects name each field once. `at` is where the
/// value sits (its parent and the step from it; `None` at the top), for
/// the error: nothing is allocated for it unless there is one.
struct Strict<'a> {
    at: Option<(&'a Strict<'a>, Step<'a>)>,
}

/// A step down from a value.
#[derive(Clone, Copy)]
enum Step<'a> {
    /// To an object's field.
    Field(&'a str),
    /// To an array's element.
    Item,
}

impl Strict<'_> {
    /// This value's path from the top: `key.header.x-api-key`, `list[]`.
    fn path(&self, out: &mut String) {
        let Some((parent, step)) = self.at else {
            return;
        };
        parent.path(out);
        match step {
            Step::Field(field) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(field);
            }
            Step::Item => out.push_str("[]"),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // The parser yields only finite numbers; `Value` does the same.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        let item = || Strict {
            at: Some((&self, Step::Item)),
        };
        while let Some(value) = seq.next_element_seed(item())? {
            items.push(value);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(field) = access.next_key::<String>()? {
            let child = Strict {
                at: Some((&self, Step::Field(&field))),
            };
            if map.contains_key(&field) {
                let mut path = String::new();
                child.path(&mut path);
                return Err(de::Error::custom(format_args!(
                    "duplicate field {:?}",
                    crate::admin::clip(&path)
                )));
            }
            let value = access.next_value_seed(child)?;
            map.insert(field, value);
        }
        Ok(Value::Object(map))
    }
}
