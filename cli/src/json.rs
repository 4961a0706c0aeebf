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
//!
//! After deserialization (`inspect --deserialize`):
//! NdArray                       {"$ndarray": {"dtype": "<i8", "shape": [..], "data_sha256": "<hex>"}}
//!                               (logical shape; sha256 of the C-order bytes)
//! a block framewire cannot      {"$opaque": {"serializer": "pickle" | .. | null,
//!   decode (and every Pickled)               "frame_lengths": [..]}}
//! a block of the error family   {"$error": "<text>"}
//!
//! Input only (`encode`):
//! Serialize (out of band)       {"$serialize": value}
//! NdArray                       {"$ndarray": {"dtype": "<f8", "shape": [2, 3], "data": "<hex, C order>"}}
//! ```
//!
//! A JSON object is a tag when its only key is one of the tags above (or it
//! is the long `$bytes` form, keys `$bytes`, `len`, `sha256`); every other
//! object is a str-keyed map. A str-keyed map that would read as a tag (say
//! `{"$bytes": ..}`) is therefore written as `{"$map": ..}`, so that
//! [`json_to_value`] is the inverse of [`message_to_json`] wherever the JSON
//! carries the whole value (no placeholders, no abbreviated bins).

use std::collections::HashSet;

use bytes::Bytes;
use framewire::message::{self, BlockKind, BlockRef};
use framewire::serialize::{self, DecompressBudget, DeserializeOptions};
use framewire::{Block, DeserializeError, NdArray, Value};
use serde_json::{Map, Number, Value as Json};
use sha2::{Digest, Sha256};

/// Bins up to this many bytes are written inline as hex.
pub const INLINE_BYTES: usize = 512;

/// The JSON of frame 0 of a decoded message: placeholders become
/// `{"$serialized": i}` / `{"$pickled": i}`, with `i` taken from `blocks`
/// (the `loads_detailed` list, in the order a depth-first walk meets them).
pub fn message_to_json(value: &Value, blocks: &[BlockRef]) -> Json {
    Converter {
        leaves: Leaves::Offsets(blocks.iter()),
    }
    .convert(value)
}

/// The JSON of a decoded message with each block replaced by what
/// deserializing it gave: `results` in the order of [`blocks_in_order`], a
/// value (`Pickled` blocks given as themselves) or the text of a remote
/// serialization error.
pub fn deserialized_to_json(value: &Value, results: &[Result<Value, String>]) -> Json {
    Converter {
        leaves: Leaves::Deserialized(results.iter()),
    }
    .convert(value)
}

/// Every block of a decoded message deserialized with `opts` (compressed
/// frames decompressed under one budget for the whole message), in the
/// order of [`blocks_in_order`], as [`deserialized_to_json`] takes them: a
/// value (a `Pickled` block stays itself, frames as they came), or the
/// text `on_error` gives for a block that failed. `on_error` returns
/// `Ok(text)` to keep the text in the block's place (a remote serialization
/// error, shown as `$error`), or `Err` to stop with that error.
pub fn deserialize_blocks(
    loaded: &message::Decoded,
    opts: &DeserializeOptions,
    mut on_error: impl FnMut(&BlockRef, DeserializeError) -> Result<String, String>,
) -> Result<Vec<Result<Value, String>>, String> {
    let mut budget = DecompressBudget::new(&opts.limits);
    let blocks = blocks_in_order(&loaded.value);
    loaded
        .blocks
        .iter()
        .zip(blocks)
        .map(|(r, b)| match r.kind {
            BlockKind::Pickled => Ok(Ok(Value::Pickled(Box::new(b.clone())))),
            BlockKind::Serialized => {
                match serialize::deserialize_with_budget(b, opts, &mut budget) {
                    Ok(v) => Ok(Ok(v)),
                    Err(e) => on_error(r, e).map(Err),
                }
            }
        })
        .collect()
}

/// The JSON of a value that holds no placeholders (a sub-header, a handshake).
/// A stray out-of-band leaf, which a decoded header cannot hold, is written
/// with a `null` offset.
pub fn value_to_json(value: &Value) -> Json {
    Converter {
        leaves: Leaves::Offsets([].iter()),
    }
    .convert(value)
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

/// The JSON of an array: dtype, logical shape, sha256 of the C-order bytes.
pub fn ndarray_to_json(a: &NdArray) -> Json {
    let mut body = Map::new();
    body.insert("dtype".into(), Json::from(a.dtype()));
    body.insert(
        "shape".into(),
        a.logical_shape().iter().map(|&n| Json::from(n)).collect(),
    );
    body.insert(
        "data_sha256".into(),
        Json::from(hex::encode(Sha256::digest(a.to_c_order()))),
    );
    tagged("$ndarray", Json::Object(body))
}

/// The JSON of a block framewire keeps opaque; `serializer` overrides the
/// header's (`"pickle"` for a `Pickled` block).
pub fn opaque_to_json(block: &Block, serializer: Option<&str>) -> Json {
    let serializer = match serializer {
        Some(s) => Json::from(s),
        None => block
            .header()
            .get("serializer")
            .map_or(Json::Null, value_to_json),
    };
    let mut body = Map::new();
    body.insert("serializer".into(), serializer);
    body.insert(
        "frame_lengths".into(),
        block.frames().iter().map(|f| Json::from(f.len())).collect(),
    );
    tagged("$opaque", Json::Object(body))
}

/// Every tag a one-key object can be.
const TAGS: [&str; 9] = [
    "$bytes",
    "$float",
    "$map",
    "$serialized",
    "$pickled",
    "$opaque",
    "$error",
    "$ndarray",
    "$serialize",
];

/// The keys of the long `$bytes` form, sorted.
const LONG_BYTES: [&str; 3] = ["$bytes", "len", "sha256"];

/// The tag an object with these keys is, or `None` for a str-keyed map.
pub fn tag_of<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut keys: Vec<&str> = keys.into_iter().collect();
    match keys[..] {
        [only] => TAGS.contains(&only).then_some(only),
        _ => {
            keys.sort_unstable();
            (keys == LONG_BYTES).then_some("$bytes")
        }
    }
}

fn tagged(tag: &str, v: Json) -> Json {
    let mut obj = Map::new();
    obj.insert(tag.into(), v);
    Json::Object(obj)
}

/// What the out-of-band leaves of a value become.
enum Leaves<'a> {
    /// `{"$serialized": i}`, `i` from the `loads_detailed` list.
    Offsets(std::slice::Iter<'a, BlockRef>),
    /// The deserialized value (or error) of each block, in turn.
    Deserialized(std::slice::Iter<'a, Result<Value, String>>),
    /// Inside a deserialized value: blocks left undecoded, `$opaque`.
    Opaque,
}

/// Walks a value; recursion is bounded by the value's depth (≤ 1024 for
/// anything the decoder accepts with `Limits::dask_compat()`).
struct Converter<'a> {
    leaves: Leaves<'a>,
}

impl Converter<'_> {
    fn convert(&mut self, v: &Value) -> Json {
        // The wildcard covers values that exist only before encoding (such as
        // `Value::ToSerialize`): decoding never produces them.
        #[allow(unreachable_patterns)]
        match v {
            Value::Nil => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Int(i) => int_to_json(*i),
            Value::Float(f) => float_to_json(*f),
            Value::Str(s) => Json::String(s.to_string()),
            Value::Bin(b) => bytes_to_json(b),
            Value::Array(items) => Json::Array(items.iter().map(|x| self.convert(x)).collect()),
            Value::IntArray(items) => Json::Array(items.iter().map(|&x| Json::from(x)).collect()),
            Value::BinArray(items) => {
                Json::Array(items.iter().map(|b| bytes_to_json(&b)).collect())
            }
            Value::Map(entries) => self.map(entries),
            Value::Serialized(b) => self.leaf(b, "$serialized", None),
            Value::Pickled(b) => self.leaf(b, "$pickled", Some("pickle")),
            Value::NdArray(a) => ndarray_to_json(a),
            _ => tagged("$serialized", Json::Null),
        }
    }

    fn leaf(&mut self, block: &Block, tag: &str, serializer: Option<&str>) -> Json {
        match &mut self.leaves {
            Leaves::Offsets(blocks) => {
                let offset = blocks.next().map_or(Json::Null, |b| Json::from(b.offset));
                tagged(tag, offset)
            }
            Leaves::Deserialized(results) => match results.next() {
                Some(Ok(v)) => Converter {
                    leaves: Leaves::Opaque,
                }
                .convert(v),
                Some(Err(text)) => tagged("$error", Json::from(text.as_str())),
                None => opaque_to_json(block, serializer),
            },
            Leaves::Opaque => opaque_to_json(block, serializer),
        }
    }

    fn map(&mut self, entries: &[(Value, Value)]) -> Json {
        let mut seen = HashSet::with_capacity(entries.len());
        let plain = entries
            .iter()
            .all(|(k, _)| k.as_str().is_some_and(|s| seen.insert(s)))
            && tag_of(entries.iter().filter_map(|(k, _)| k.as_str())).is_none();
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

// ---- JSON → Value (encode) ----------------------------------------------------

/// The value a JSON document describes, for `encode`: the inverse of
/// [`message_to_json`], plus the input-only `$serialize` and `$ndarray`
/// (with `data`). Placeholders, abbreviated bins, `$opaque`, `$error` and
/// `$ndarray` given by digest are refused: they cannot be rebuilt.
/// Recursion is bounded by the document's depth (the caller bounds it).
pub fn json_to_value(j: &Json) -> Result<Value, String> {
    from_json(j).map_err(|e| {
        let path: String = e.path.iter().rev().map(|p| format!("/{p}")).collect();
        if path.is_empty() {
            format!("JSON input: {}", e.what)
        } else {
            format!("JSON input at {path}: {}", e.what)
        }
    })
}

/// An input error and where it is (innermost first).
struct InputError {
    path: Vec<String>,
    what: String,
}

fn bad(what: impl Into<String>) -> InputError {
    InputError {
        path: Vec::new(),
        what: what.into(),
    }
}

/// Adds a path segment to an error coming up from inside.
fn at<T>(segment: impl std::fmt::Display, r: Result<T, InputError>) -> Result<T, InputError> {
    r.map_err(|mut e| {
        e.path.push(segment.to_string());
        e
    })
}

fn from_json(j: &Json) -> Result<Value, InputError> {
    Ok(match j {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Value::from(u),
            (None, Some(i), _) => Value::from(i),
            (None, None, Some(f)) => Value::Float(f),
            (None, None, None) => return Err(bad(format!("number {n} is not representable"))),
        },
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| at(i, from_json(x)))
                .collect::<Result<_, _>>()?,
        ),
        Json::Object(obj) => match tag_of(obj.keys().map(String::as_str)) {
            Some(tag) => at(tag, from_tag(tag, obj))?,
            None => Value::Map(
                obj.iter()
                    .map(|(k, v)| Ok((Value::from(k.as_str()), at(k, from_json(v))?)))
                    .collect::<Result<_, _>>()?,
            ),
        },
    })
}

fn from_tag(tag: &str, obj: &Map<String, Json>) -> Result<Value, InputError> {
    let body = &obj[tag];
    match tag {
        "$bytes" if obj.len() > 1 || body.is_null() => Err(bad(
            "an abbreviated {\"$bytes\": null, \"len\", \"sha256\"} cannot be rebuilt: \
             give the bytes in hex",
        )),
        "$bytes" => hex_bytes(body).map(Value::Bin),
        "$float" => match body.as_str() {
            Some("nan") => Ok(Value::Float(f64::NAN)),
            Some("inf") => Ok(Value::Float(f64::INFINITY)),
            Some("-inf") => Ok(Value::Float(f64::NEG_INFINITY)),
            Some("-0.0") => Ok(Value::Float(-0.0)),
            _ => Err(bad(format!(
                "$float takes \"nan\", \"inf\", \"-inf\" or \"-0.0\", not {body}"
            ))),
        },
        "$map" => {
            let pairs = body
                .as_array()
                .ok_or_else(|| bad("$map takes an array of [key, value] pairs"))?;
            let entries = pairs
                .iter()
                .enumerate()
                .map(|(i, pair)| match pair.as_array().map(Vec::as_slice) {
                    Some([k, v]) => Ok((at(i, at(0, from_json(k)))?, at(i, at(1, from_json(v)))?)),
                    _ => Err(at(i, Err(bad("not a [key, value] pair")))?),
                })
                .collect::<Result<_, InputError>>()?;
            Ok(Value::Map(entries))
        }
        "$serialize" => Ok(Value::ToSerialize(Box::new(from_json(body)?))),
        "$ndarray" => ndarray_from_json(body),
        _ => Err(bad(format!(
            "{tag} describes a decoded block and cannot be rebuilt"
        ))),
    }
}

fn hex_bytes(j: &Json) -> Result<Bytes, InputError> {
    let text = j
        .as_str()
        .ok_or_else(|| bad(format!("expected a hex string, got {j}")))?;
    hex::decode(text)
        .map(Bytes::from)
        .map_err(|e| bad(format!("bad hex: {e}")))
}

fn ndarray_from_json(body: &Json) -> Result<Value, InputError> {
    let usage = "$ndarray takes {\"dtype\": str, \"shape\": [int, ..], \"data\": hex}";
    let obj = body.as_object().ok_or_else(|| bad(usage))?;
    if obj.contains_key("data_sha256") {
        return Err(bad(
            "an $ndarray given by data_sha256 cannot be rebuilt: give its data in hex",
        ));
    }
    if obj.len() != 3 {
        return Err(bad(usage));
    }
    let dtype = obj
        .get("dtype")
        .and_then(Json::as_str)
        .ok_or_else(|| bad(usage))?;
    let shape = obj
        .get("shape")
        .and_then(Json::as_array)
        .and_then(|s| s.iter().map(Json::as_u64).collect::<Option<Vec<u64>>>())
        .ok_or_else(|| bad(usage))?;
    let data = at(
        "data",
        hex_bytes(obj.get("data").ok_or_else(|| bad(usage))?),
    )?;
    NdArray::from_c_order(dtype, &shape, data)
        .map(|a| Value::NdArray(Box::new(a)))
        .map_err(|e| bad(format!("{e} (dtype {dtype}, shape {shape:?})")))
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
    fn packed_bytes_are_written_as_the_boxed_array() {
        let items: Vec<Bytes> = (0..40u8)
            .map(|i| Bytes::from(vec![i; usize::from(i % 3)]))
            .collect();
        let boxed = Value::Array(items.iter().cloned().map(Value::Bin).collect());
        let packed = Value::from(items);
        assert_eq!(value_to_json(&packed), value_to_json(&boxed));
        assert_eq!(json_to_value(&value_to_json(&packed)).unwrap(), packed);
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
        // A map that would read as a tag is written as $map.
        let tag_like = Value::map_of([("$bytes", Value::str("00"))]);
        let j = value_to_json(&tag_like);
        assert_eq!(j.to_string(), r#"{"$map":[["$bytes","00"]]}"#);
        assert_eq!(json_to_value(&j).unwrap(), tag_like);
        let long = Value::map_of([
            ("len", Value::Nil),
            ("sha256", Value::Nil),
            ("$bytes", Value::Nil),
        ]);
        assert!(value_to_json(&long).get("$map").is_some());
        let two = Value::map_of([("$bytes", Value::Nil), ("x", Value::Nil)]);
        assert_eq!(
            value_to_json(&two).to_string(),
            r#"{"$bytes":null,"x":null}"#
        );
        assert_eq!(json_to_value(&value_to_json(&two)).unwrap(), two);
    }

    #[test]
    fn input() {
        let j: Json = serde_json::from_str(
            r#"[18446744073709551615, -9223372036854775808, 0.5, {"$float": "-0.0"},
                {"$bytes": "01ab"}, {"$map": [[1, 2]]}, {"a": {"$serialize": [1]}}]"#,
        )
        .unwrap();
        let v = json_to_value(&j).unwrap();
        assert_eq!(
            v,
            Value::Array(vec![
                Value::from(u64::MAX),
                Value::from(i64::MIN),
                Value::Float(0.5),
                Value::Float(-0.0),
                Value::bin(&b"\x01\xab"[..]),
                Value::Map(vec![(Value::from(1u8), Value::from(2u8))]),
                Value::map_of([(
                    "a",
                    Value::ToSerialize(Box::new(Value::Array(vec![Value::from(1u8)])))
                )]),
            ])
        );
        for (text, needle) in [
            (r#"{"x": [{"$serialized": 1}]}"#, "at /x/0/$serialized: "),
            (r#"{"$pickled": 2}"#, "cannot be rebuilt"),
            (
                r#"{"$bytes": null, "len": 600, "sha256": "00"}"#,
                "abbreviated",
            ),
            (
                r#"{"$ndarray": {"dtype": "<f8", "shape": [2], "data": "00"}}"#,
                "do not agree",
            ),
            (r#"{"$float": "NaN"}"#, "$float takes"),
        ] {
            let err = json_to_value(&serde_json::from_str(text).unwrap()).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
