//! The framewire types serde carries without copying — [`Bin`], blocks,
//! arrays, [`ToSerialize`] — and serde for [`Value`] itself.

use std::fmt;
use std::ops::Deref;

use ::bytes::Bytes;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::side;
use crate::ndarray::NdArray;
use crate::value::{Block, Integer, Value};

/// The newtype name by which the framewire types ask a framewire
/// conversion for a value of the side table (serialize side) or for the
/// value itself (deserialize side). Other serializers never see it used.
pub(super) const MAGIC: &str = "\0framewire::side-table";

/// The key of the one-entry map a stashed value is visited as when serde
/// buffers it (tagged enums, `flatten`).
pub(super) const MARKER_KEY: &str = "\0framewire::side-table";

/// Serializes `value` through the side table: a framewire conversion puts
/// it in place, without looking at (or copying) what it holds.
fn serialize_stashed<S: Serializer>(value: Value, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_newtype_struct(MAGIC, &side::stash(value))
}

/// A msgpack bin whose bytes are never copied: serialized by
/// [`to_value`](super::to_value) as the same `Bytes`, and deserialized by
/// [`from_value`](super::from_value) as a slice of the buffer the message
/// was received into (serde itself can only hand out `&[u8]` or `Vec<u8>`;
/// serde-rs/serde#1956). With other serializers it is plain bytes.
///
/// For a `bytes::Bytes` field, `#[serde(with = "framewire::typed::bytes")]`
/// does the same.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bin(Bytes);

impl Bin {
    /// The bytes.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The bytes, borrowed.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }
}

impl fmt::Debug for Bin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Deref for Bin {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Bytes> for Bin {
    fn from(b: Bytes) -> Bin {
        Bin(b)
    }
}

impl From<Vec<u8>> for Bin {
    fn from(v: Vec<u8>) -> Bin {
        Bin(Bytes::from(v))
    }
}

impl From<&'static [u8]> for Bin {
    fn from(v: &'static [u8]) -> Bin {
        Bin(Bytes::from_static(v))
    }
}

impl From<Bin> for Bytes {
    fn from(b: Bin) -> Bytes {
        b.0
    }
}

impl Serialize for Bin {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match side::mode() {
            Some(side::Mode::Value) => serialize_stashed(Value::Bin(self.0.clone()), s),
            // Frame 0's bytes: the bin is written in place (never out of
            // band, as `dumps` writes a `Value::Bin`).
            Some(side::Mode::Frames) | None => s.serialize_bytes(&self.0),
        }
    }
}

struct BinVisitor;

impl<'de> Visitor<'de> for BinVisitor {
    type Value = Bin;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bytes")
    }
    /// A framewire conversion's value, by index.
    fn visit_u64<E: de::Error>(self, index: u64) -> Result<Bin, E> {
        match side::take(index) {
            Some(Value::Bin(b)) => Ok(Bin(b)),
            Some(Value::Str(s)) => Ok(Bin(s.into_bytes())),
            Some(other) => Err(E::custom(format!(
                "expected bytes, found {}",
                kind_of(&other)
            ))),
            None => Err(E::invalid_type(de::Unexpected::Unsigned(index), &self)),
        }
    }
    /// A slice framewire handed out: a slice of its buffer, not a copy.
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Bin, E> {
        Ok(Bin(side::bytes_of(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bin, E> {
        Ok(Bin(Bytes::copy_from_slice(v)))
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bin, E> {
        Ok(Bin(Bytes::from(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bin, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64 << 10));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(Bin(Bytes::from(out)))
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Bin, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl<'de> Deserialize<'de> for Bin {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bin, D::Error> {
        d.deserialize_newtype_struct(MAGIC, BinVisitor)
    }
}

/// `#[serde(with = "framewire::typed::bytes")]` for a `bytes::Bytes`
/// field: serialized and deserialized as a [`Bin`], without copying.
///
/// ```
/// use bytes::Bytes;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Chunk {
///     #[serde(with = "framewire::typed::bytes")]
///     data: Bytes,
/// }
///
/// let data = Bytes::from(vec![1u8; 4096]);
/// let v = framewire::to_value(&Chunk { data: data.clone() })?;
/// let back: Chunk = framewire::from_value(v)?;
/// assert_eq!(back.data.as_ptr(), data.as_ptr());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod bytes {
    use ::bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Bin;

    /// Serializes a `Bytes` as a [`Bin`].
    pub fn serialize<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        Bin(b.clone()).serialize(s)
    }

    /// Deserializes a `Bytes` as a [`Bin`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        Bin::deserialize(d).map(Bin::into_bytes)
    }
}

/// Marks a value to be serialized out of band, as Dask's `to_serialize`:
/// in the message it becomes a `{"__Serialized__": i}` block of its own
/// ([`Value::ToSerialize`]), which the serialize layer writes with its
/// families (an array as Dask's numpy family, bytes as the dask family, a
/// collection iterated or as one blob).
///
/// Deserializing is transparent: [`loads`](crate::loads) has already
/// turned the block back into the value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToSerialize<T>(pub T);

impl<T: Serialize> Serialize for ToSerialize<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !side::active() {
            return self.0.serialize(s);
        }
        let inner = super::to_value(&self.0).map_err(serde::ser::Error::custom)?;
        serialize_stashed(Value::ToSerialize(Box::new(inner)), s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ToSerialize<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToSerialize<T>, D::Error> {
        T::deserialize(d).map(ToSerialize)
    }
}

/// What a stashed value must be for a framewire type to take it.
trait FromStashed: Sized {
    const EXPECTING: &'static str;
    /// The value as `Self`, or back when it is not one.
    fn from_stashed(v: Value) -> Result<Self, Value>;
    /// Takes the stashed value of `token` as `Self` (or the value it is).
    fn take(token: u64) -> Option<Result<Self, Value>> {
        side::take(token).map(Self::from_stashed)
    }
}

impl FromStashed for Block {
    const EXPECTING: &'static str = "a block ({\"__Serialized__\": i} or {\"__Pickled__\": i})";
    fn from_stashed(v: Value) -> Result<Block, Value> {
        match v {
            Value::Serialized(b) => Ok(b.with_kind(false)),
            Value::Pickled(b) => Ok(b.with_kind(true)),
            other => Err(other),
        }
    }
    /// A block stashed as it is comes back without a `Value` around it.
    fn take(token: u64) -> Option<Result<Block, Value>> {
        side::take_block(token)
    }
}

impl FromStashed for NdArray {
    const EXPECTING: &'static str = "an array (numpy.ndarray)";
    fn from_stashed(v: Value) -> Result<NdArray, Value> {
        match v {
            Value::NdArray(a) => Ok(*a),
            other => Err(other),
        }
    }
}

/// What kind of value an error met (never its contents: a payload can be
/// gigabytes).
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Bool(_) => "a bool",
        Value::Int(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Str(_) => "a str",
        Value::Bin(_) => "a bin",
        Value::Array(_) | Value::IntArray(_) | Value::BinArray(_) => "an array",
        Value::Map(_) => "a map",
        Value::Serialized(_) => "a serialized block",
        Value::Pickled(_) => "a pickled block",
        Value::ToSerialize(_) => "a value to serialize",
        Value::NdArray(_) => "an ndarray",
    }
}

/// Takes a block or an array out of the side table: by index on the direct
/// path, from its marker map once serde has buffered it.
struct StashedVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: FromStashed> Visitor<'de> for StashedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }
    fn visit_u64<E: de::Error>(self, index: u64) -> Result<T, E> {
        match T::take(index) {
            Some(Ok(t)) => Ok(t),
            Some(Err(v)) => Err(E::custom(format!(
                "expected {}, found {}",
                T::EXPECTING,
                kind_of(&v)
            ))),
            None => Err(E::custom(format!("expected {}", T::EXPECTING))),
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        match map.next_key::<String>()? {
            Some(k) if k == MARKER_KEY => {
                let index: u64 = map.next_value()?;
                self.visit_u64(index)
            }
            _ => Err(de::Error::custom(format!(
                "expected {}, found a map",
                T::EXPECTING
            ))),
        }
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

fn deserialize_stashed<'de, D: Deserializer<'de>, T: FromStashed>(d: D) -> Result<T, D::Error> {
    d.deserialize_newtype_struct(MAGIC, StashedVisitor(std::marker::PhantomData))
}

/// In a framewire conversion, a block stays the block it is (a
/// `{"__Serialized__": i}` or `{"__Pickled__": i}` placeholder and its
/// frames, untouched). Elsewhere it is `{"header": map, "frames": [bin]}`.
impl Serialize for Block {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if side::active() {
            let v = match self.is_pickled() {
                true => Value::Pickled(Box::new(self.clone())),
                false => Value::Serialized(Box::new(self.clone())),
            };
            return serialize_stashed(v, s);
        }
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("header", self.header().map())?;
        map.serialize_entry("frames", &Frames(self.frames()))?;
        map.end()
    }
}

/// Frames, as a sequence of bytes.
struct Frames<'a>(&'a [Bytes]);

impl Serialize for Frames<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for f in self.0 {
            seq.serialize_element(&Bin(f.clone()))?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Block, D::Error> {
        deserialize_stashed(d)
    }
}

/// In a framewire conversion, an array travels out of band as Dask's
/// numpy family, its data never copied. Elsewhere it is `{"dtype": str,
/// "shape": [u64], "strides": [u64], "data": bytes}`.
impl Serialize for NdArray {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if side::active() {
            return serialize_stashed(Value::NdArray(Box::new(self.clone())), s);
        }
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("dtype", self.dtype())?;
        map.serialize_entry("shape", self.shape())?;
        map.serialize_entry("strides", self.strides())?;
        map.serialize_entry("data", &Bin(self.data().clone()))?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for NdArray {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NdArray, D::Error> {
        deserialize_stashed(d)
    }
}

/// A [`Value`] serializes as itself: in [`to_value`](super::to_value) it is
/// put in place whole (blocks included); elsewhere as its msgpack data
/// (blocks and arrays as [`Block`] and [`NdArray`] write themselves; in
/// [`to_frames`](super::to_frames) a value to serialize is put in place
/// whole too, its block made as `dumps` makes it).
impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let _nested = match (side::mode(), self) {
            (Some(side::Mode::Value), _) | (Some(side::Mode::Frames), Value::ToSerialize(_)) => {
                return serialize_stashed(self.clone(), s);
            }
            // Written where it is, level by level, up to a depth: deeper,
            // the encoder writes it whole.
            (Some(side::Mode::Frames), _) => match side::Nested::enter() {
                Some(nested) => Some(nested),
                None => return serialize_stashed(self.clone(), s),
            },
            (None, _) => None,
        };
        match self {
            Value::Nil => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) => s.serialize_u64(u),
                (None, Some(x)) => s.serialize_i64(x),
                (None, None) => s.serialize_i128(i.as_i128()),
            },
            Value::Float(f) => s.serialize_f64(*f),
            Value::Str(t) => s.serialize_str(t),
            Value::Bin(b) => s.serialize_bytes(b),
            Value::Array(items) => s.collect_seq(items),
            Value::IntArray(items) => s.collect_seq(items),
            Value::BinArray(items) => s.collect_seq(items.iter().map(Value::Bin)),
            Value::Map(entries) => s.collect_map(entries.iter().map(|(k, v)| (k, v))),
            Value::Serialized(b) | Value::Pickled(b) => b.serialize(s),
            Value::ToSerialize(v) => v.serialize(s),
            Value::NdArray(a) => a.serialize(s),
        }
    }
}

/// A [`Value`] deserializes as whatever is there: from a framewire
/// conversion the value itself (blocks and arrays kept, bin not copied),
/// from any other deserializer its data.
impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_newtype_struct(MAGIC, ValueVisitor { whole: true })
    }
}

/// `whole`: the direct path, where an integer is a side-table index.
struct ValueVisitor {
    whole: bool,
}

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any msgpack value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Integer::try_from_i128(v)
            .map(Value::Int)
            .ok_or_else(|| E::custom(format!("{v} is outside msgpack's integer range")))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        // Outside a conversion the table holds nothing: `take` finds none.
        if self.whole {
            if let Some(value) = side::take(v) {
                return Ok(value);
            }
        }
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::str(v))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Value, E> {
        Ok(Value::Bin(side::bytes_of(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Bin(Bytes::copy_from_slice(v)))
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Value, E> {
        Ok(Value::Bin(Bytes::from(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Nil)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Nil)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor { whole: false })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(Element)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(k) = map.next_key_seed(Element)? {
            if entries.is_empty() && k.as_str() == Some(MARKER_KEY) {
                // A stashed block or array, buffered by serde.
                let index: u64 = map.next_value()?;
                return side::take(index)
                    .ok_or_else(|| de::Error::custom("a framewire value outside its conversion"));
            }
            let v = map.next_value_seed(Element)?;
            entries.push((k, v));
        }
        Ok(Value::Map(entries))
    }
}

/// An item inside a value: any value, where an integer is just an integer.
struct Element;

impl<'de> de::DeserializeSeed<'de> for Element {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor { whole: false })
    }
}
