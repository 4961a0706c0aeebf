//! The JSON conventions every framewire command speaks, in one place.
//!
//! ```text
//! Value                         JSON
//! nil / bool / str              null / true|false / "..."
//! int (i64 ∪ u64)               exact JSON integer
//! float (finite, not -0.0)      JSON number
//! NaN / +inf / -inf / -0.0      {"$float": "nan" | "inf" | "-inf" | "-0.0"}
//! bin, ≤ 512 bytes              {"$bytes": "<lowercase hex>"}
//! bin, longer                   {"$bytes": null, "len": n, "sha256": "<hex>"}
//! array                         [...]
//! map, keys all distinct str    {...}, keys in wire order
//! any other map                 {"$map": [[k, v], ...]}, wire order
//! Serialized / Pickled leaf     {"$serialized": i} / {"$pickled": i}, i = frame offset
//! ```
//!
//! Only the Value → JSON direction exists so far. The JSON → Value direction
//! (for `encode` / `call`) belongs in this module too, as the exact inverse
//! of [`Converter::convert`] (the `$`-tagged one-key objects above decoding
//! to their Value, every other object to a str-keyed map).

use std::collections::HashSet;

use framewire::message::{BlockKind, BlockRef};
use framewire::{Block, Value};
use serde_json::{Map, Number, Value as Json};
use sha2::{Digest, Sha256};

/// Bins up to this many bytes are written inline as hex.
pub const INLINE_BYTES: usize = 512;

/// The JSON of frame 0 of a decoded message: placeholders become
/// `{"$serialized": i}` / `{"$pickled": i}`, with `i` taken from `blocks`
/// (the `loads_detailed` list, in the order a depth-first walk meets them).
pub fn message_to_json(value: &Value, blocks: &[BlockRef]) -> Json {
    Converter {
        blocks: blocks.iter(),
    }
    .convert(value)
}

/// The JSON of a value that holds no placeholders (a sub-header, a handshake).
/// A stray out-of-band leaf, which a decoded header cannot hold, is written
/// with a `null` offset.
pub fn value_to_json(value: &Value) -> Json {
    Converter { blocks: [].iter() }.convert(value)
}

/// The name of a block kind, as in `"kind"` and `{"$serialized": i}`.
pub fn kind_name(kind: BlockKind) -> &'static str {
    match kind {
        BlockKind::Serialized => "serialized",
        BlockKind::Pickled => "pickled",
    }
}

/// The JSON of a bin.
pub fn bytes_to_json(b: &[u8]) -> Json {
    let mut obj = Map::new();
    if b.len() <= INLINE_BYTES {
        obj.insert("$bytes".into(), Json::String(hex::encode(b)));
    } else {
        obj.insert("$bytes".into(), Json::Null);
        obj.insert("len".into(), Json::from(b.len()));
        obj.insert(
            "sha256".into(),
            Json::String(hex::encode(Sha256::digest(b))),
        );
    }
    Json::Object(obj)
}

/// The JSON of a float: a number when JSON can carry it exactly, else `$float`.
pub fn float_to_json(f: f64) -> Json {
    let special = if f.is_nan() {
        "nan"
    } else if f == f64::INFINITY {
        "inf"
    } else if f == f64::NEG_INFINITY {
        "-inf"
    } else if f == 0.0 && f.is_sign_negative() {
        "-0.0"
    } else {
        // Finite: from_f64 only refuses NaN and infinities.
        return Number::from_f64(f).map_or(Json::Null, Json::Number);
    };
    tagged("$float", Json::String(special.into()))
}

/// The JSON of an integer in msgpack's range, exact.
pub fn int_to_json(i: framewire::Integer) -> Json {
    match (i.as_u64(), i.as_i64()) {
        (Some(u), _) => Json::from(u),
        (None, Some(s)) => Json::from(s),
        // Unreachable for a decoded Integer; keep the digits rather than panic.
        (None, None) => Json::String(i.to_string()),
    }
}

/// The blocks of a value, in the order a depth-first walk meets them (map
/// keys before values, array items in order): the order of
/// `Loaded::blocks`.
pub fn blocks_in_order(value: &Value) -> Vec<&Block> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Serialized(b) | Value::Pickled(b) => out.push(&**b),
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Map(entries) => {
                for (k, v) in entries.iter().rev() {
                    stack.push(v);
                    stack.push(k);
                }
            }
            _ => {}
        }
    }
    out
}

fn tagged(tag: &str, v: Json) -> Json {
    let mut obj = Map::new();
    obj.insert(tag.into(), v);
    Json::Object(obj)
}

/// Walks a value; recursion is bounded by the value's depth (≤ 1024 for
/// anything the decoder accepts with `Limits::dask_compat()`).
struct Converter<'a> {
    blocks: std::slice::Iter<'a, BlockRef>,
}

impl Converter<'_> {
    fn convert(&mut self, v: &Value) -> Json {
        // The wildcard covers values that exist only before encoding (such as
        // `Value::Serialize`): decoding never produces them.
        #[allow(unreachable_patterns)]
        match v {
            Value::Nil => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Int(i) => int_to_json(*i),
            Value::Float(f) => float_to_json(*f),
            Value::Str(s) => Json::String(s.to_string()),
            Value::Bin(b) => bytes_to_json(b),
            Value::Array(items) => Json::Array(items.iter().map(|x| self.convert(x)).collect()),
            Value::Map(entries) => self.map(entries),
            Value::Serialized(_) => self.placeholder("$serialized"),
            Value::Pickled(_) => self.placeholder("$pickled"),
            _ => tagged("$serialized", Json::Null),
        }
    }

    fn placeholder(&mut self, tag: &str) -> Json {
        let offset = self
            .blocks
            .next()
            .map_or(Json::Null, |b| Json::from(b.offset));
        tagged(tag, offset)
    }

    fn map(&mut self, entries: &[(Value, Value)]) -> Json {
        let mut seen = HashSet::with_capacity(entries.len());
        let plain = entries
            .iter()
            .all(|(k, _)| k.as_str().is_some_and(|s| seen.insert(s)));
        if plain {
            let mut obj = Map::with_capacity(entries.len());
            for (k, v) in entries {
                let key = k.as_str().unwrap_or_default().to_owned();
                let v = self.convert(v);
                obj.insert(key, v);
            }
            Json::Object(obj)
        } else {
            let pairs = entries
                .iter()
                .map(|(k, v)| {
                    let k = self.convert(k);
                    Json::Array(vec![k, self.convert(v)])
                })
                .collect();
            tagged("$map", Json::Array(pairs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn scalars() {
        assert_eq!(float_to_json(-0.0).to_string(), r#"{"$float":"-0.0"}"#);
        assert_eq!(float_to_json(f64::NAN).to_string(), r#"{"$float":"nan"}"#);
        assert_eq!(float_to_json(0.5).to_string(), "0.5");
        assert_eq!(
            value_to_json(&Value::from(u64::MAX)).to_string(),
            "18446744073709551615"
        );
        assert_eq!(
            value_to_json(&Value::from(i64::MIN)).to_string(),
            "-9223372036854775808"
        );
        let big = bytes_to_json(&[0u8; 513]);
        assert_eq!(big["len"], 513);
        assert!(big["$bytes"].is_null());
        assert_eq!(bytes_to_json(b"\x01\xab")["$bytes"], "01ab");
    }

    #[test]
    fn maps() {
        let dup = Value::Map(vec![
            (Value::str("a"), Value::from(1u8)),
            (Value::str("a"), Value::from(2u8)),
        ]);
        assert_eq!(
            value_to_json(&dup).to_string(),
            r#"{"$map":[["a",1],["a",2]]}"#
        );
        let plain = Value::map_of([("z", Value::Nil), ("a", Value::Bin(Bytes::new()))]);
        assert_eq!(
            value_to_json(&plain).to_string(),
            r#"{"z":null,"a":{"$bytes":""}}"#
        );
    }
}
