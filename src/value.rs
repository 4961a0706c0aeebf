//! The value model: the msgpack data model Dask uses in frame 0 and in
//! sub-headers, plus the out-of-band leaves that carry frames of their own.
//!
//! ```text
//! Value ::= Nil | Bool | Int (i64 ∪ u64) | Float (f64) | Str | Bin
//!         | Array [Value]  | Map [(Value, Value)]      (insertion order kept)
//!         | IntArray [i64]       an Array of Ints, packed (same value, same bytes)
//!         | BinArray [Bytes]     an Array of Bins, packed (same value, same bytes)
//!         | Serialized Block                            ({"__Serialized__": i})
//!         | Pickled Block                               ({"__Pickled__": i})
//!         | Serialize Value      a value to serialize into frames of its own
//!         | NdArray              an n-dimensional array (always out of band)
//! ```
//!
//! `Str` and `Bin` are views of the frame they were decoded from: decoding
//! never copies them. A [`Block`] is a sub-header plus its payload frames,
//! carried verbatim (SPEC.md §4).

use std::fmt;
use std::sync::OnceLock;

use bytes::Bytes;
use bytestring::ByteString;
use smallvec::SmallVec;

use crate::ndarray::NdArray;

/// The payload frames of one block. Most blocks have one or two frames.
pub type BlockFrames = SmallVec<[Bytes; 2]>;

/// An integer in msgpack's range: `-2^63 ..= 2^64 - 1`.
///
/// Non-negative values are encoded in msgpack's unsigned forms and negative
/// ones in the signed forms, as msgpack-python does.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Integer(Repr);

/// Two 64-bit halves of the range rather than an `i128`: 8-byte aligned,
/// which keeps [`Value`] at 40 bytes instead of 48.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Repr {
    /// `0 ..= 2^64 - 1`.
    NonNeg(u64),
    /// `-2^63 ..= -1` (never a non-negative value: one representation each).
    Neg(i64),
}

impl Integer {
    /// The value as an `i64`, if it fits.
    pub fn as_i64(self) -> Option<i64> {
        match self.0 {
            Repr::NonNeg(u) => i64::try_from(u).ok(),
            Repr::Neg(i) => Some(i),
        }
    }
    /// The value as a `u64`, if it fits.
    pub fn as_u64(self) -> Option<u64> {
        match self.0 {
            Repr::NonNeg(u) => Some(u),
            Repr::Neg(_) => None,
        }
    }
    /// The value, widened.
    pub fn as_i128(self) -> i128 {
        match self.0 {
            Repr::NonNeg(u) => i128::from(u),
            Repr::Neg(i) => i128::from(i),
        }
    }
}

impl PartialOrd for Integer {
    fn partial_cmp(&self, other: &Integer) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Integer {
    fn cmp(&self, other: &Integer) -> std::cmp::Ordering {
        self.as_i128().cmp(&other.as_i128())
    }
}

impl fmt::Debug for Integer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.as_i128(), f)
    }
}

impl fmt::Display for Integer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.as_i128(), f)
    }
}

macro_rules! integer_from_unsigned {
    ($($t:ty),*) => {$(
        impl From<$t> for Integer {
            fn from(v: $t) -> Self {
                Integer(Repr::NonNeg(u64::from(v)))
            }
        }
    )*};
}
integer_from_unsigned!(u8, u16, u32, u64);

macro_rules! integer_from_signed {
    ($($t:ty),*) => {$(
        impl From<$t> for Integer {
            fn from(v: $t) -> Self {
                let v = i64::from(v);
                match u64::try_from(v) {
                    Ok(u) => Integer(Repr::NonNeg(u)),
                    Err(_) => Integer(Repr::Neg(v)),
                }
            }
        }
    )*};
}
integer_from_signed!(i8, i16, i32, i64);

impl From<usize> for Integer {
    fn from(v: usize) -> Self {
        // usize is at most 64 bits on every supported target.
        Integer(Repr::NonNeg(v as u64))
    }
}

/// A sub-header: the map, and the exact bytes it came from when it came off
/// the wire.
///
/// A header that came off the wire is re-emitted from its original bytes, so
/// a relay forwards it untouched even if msgpack-python would have encoded
/// it differently. Its map is decoded the first time it is asked for: a
/// relay that only forwards never builds it (the message layer has already
/// checked the bytes with the same limits, so decoding cannot fail). Two
/// headers are equal when their maps are.
#[derive(Clone, Debug)]
pub struct Header {
    /// The map, decoded from `raw` on first use ([`Header::map`], in the
    /// msgpack layer).
    pub(crate) map: OnceLock<Value>,
    pub(crate) raw: Option<Bytes>,
    /// What `raw` is known to hold under `num-sub-frames`.
    count: RawCount,
}

/// What a header's bytes are known to hold under `num-sub-frames`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RawCount {
    /// Nothing (no bytes, or bytes written from a map nobody looked into).
    Unknown,
    /// No such key: the serialize layer read the bytes through and saw none.
    Absent,
    /// This count: the message layer checked it off the wire.
    Is(u64),
}

impl Header {
    /// A header built locally. `map` should be a [`Value::Map`]; when the
    /// block is written, `num-sub-frames` is set in it (kept in place if the
    /// key exists, appended otherwise), as Dask does.
    pub fn new(map: Value) -> Header {
        Header {
            map: OnceLock::from(map),
            raw: None,
            count: RawCount::Unknown,
        }
    }

    /// A header the serialize layer wrote as msgpack bytes (a map, normally
    /// without `num-sub-frames`); its map is decoded only if asked for.
    pub(crate) fn written(raw: Bytes) -> Header {
        Header {
            map: OnceLock::new(),
            raw: Some(raw),
            count: RawCount::Unknown,
        }
    }

    /// [`Header::written`], its bytes read through and seen to have no
    /// `num-sub-frames` key: the message layer appends the key without
    /// reading them again.
    pub(crate) fn written_without_count(raw: Bytes) -> Header {
        Header {
            count: RawCount::Absent,
            ..Header::written(raw)
        }
    }

    /// A header whose bytes `raw` the message layer has checked (a msgpack
    /// map within its limits, with `num-sub-frames` = `count`); decoded on
    /// first use.
    pub(crate) fn from_wire(raw: Bytes, count: u64) -> Header {
        Header {
            map: OnceLock::new(),
            raw: Some(raw),
            count: RawCount::Is(count),
        }
    }

    /// The wire bytes, if they still describe `frames` payload frames.
    pub(crate) fn raw_for(&self, frames: usize) -> Option<&Bytes> {
        self.raw
            .as_ref()
            .filter(|_| self.count == RawCount::Is(frames as u64))
    }

    /// The header's msgpack bytes, when it has them: as it came off the
    /// wire, or as the serialize layer wrote it (without `num-sub-frames`).
    pub(crate) fn raw_bytes(&self) -> Option<&Bytes> {
        self.raw.as_ref()
    }

    /// Whether its bytes are known to have no `num-sub-frames` key.
    pub(crate) fn lacks_count(&self) -> bool {
        self.count == RawCount::Absent
    }

    /// The bytes this header was decoded from, if it came off the wire.
    pub fn raw(&self) -> Option<&Bytes> {
        self.raw
            .as_ref()
            .filter(|_| matches!(self.count, RawCount::Is(_)))
    }
}

/// A block: a sub-header and its payload frames, kept as they are.
///
/// This is Dask's `Serialized(header, frames)` (or `Pickled`): a value that
/// is already serialized. Its frames are never glued together, copied or
/// re-encoded by framewire; cloning a block clones reference counts only.
#[derive(Clone, Debug)]
pub struct Block {
    header: Header,
    frames: BlockFrames,
    /// Whether it was (or is to be) a `{"__Pickled__": i}` block; the
    /// [`Value`] variant holding a block says the same.
    pickled: bool,
}

/// Two blocks are equal when their headers and frames are.
impl PartialEq for Block {
    fn eq(&self, other: &Block) -> bool {
        self.header == other.header && self.frames == other.frames
    }
}

impl Block {
    /// A block from a header and its payload frames.
    pub fn new(header: Header, frames: impl IntoIterator<Item = Bytes>) -> Block {
        Block {
            header,
            frames: frames.into_iter().collect(),
            pickled: false,
        }
    }

    /// A `{"__Pickled__": i}` block (Dask's `ToPickle`).
    pub fn new_pickled(header: Header, frames: impl IntoIterator<Item = Bytes>) -> Block {
        Block::new(header, frames).with_kind(true)
    }

    /// A block over frames already collected (no copy of the list).
    pub(crate) fn from_vec(header: Header, frames: Vec<Bytes>) -> Block {
        Block {
            header,
            frames: BlockFrames::from_vec(frames),
            pickled: false,
        }
    }

    /// This block, marked as a `{"__Pickled__": i}` block or not.
    pub(crate) fn with_kind(mut self, pickled: bool) -> Block {
        self.pickled = pickled;
        self
    }

    /// Whether it is a `{"__Pickled__": i}` block (Dask's `ToPickle`, never
    /// unpickled) rather than a `{"__Serialized__": i}` one.
    pub fn is_pickled(&self) -> bool {
        self.pickled
    }

    /// The block as the [`Value`] that carries it: [`Value::Pickled`] or
    /// [`Value::Serialized`].
    pub fn into_value(self) -> Value {
        match self.pickled {
            true => Value::Pickled(Box::new(self)),
            false => Value::Serialized(Box::new(self)),
        }
    }

    /// The sub-header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The payload frames, in order.
    pub fn frames(&self) -> &[Bytes] {
        &self.frames
    }

    /// The header and frames.
    pub fn into_parts(self) -> (Header, BlockFrames) {
        (self.header, self.frames)
    }
}

/// A msgpack value, or an out-of-band leaf.
///
/// Equality compares floats by their bits (so NaN equals itself and
/// `0.0 != -0.0`), and blocks by their decoded header and frame bytes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Value {
    /// msgpack nil (Python `None`).
    Nil,
    /// A boolean.
    Bool(bool),
    /// An integer (msgpack int, any width).
    Int(Integer),
    /// A float; always written as float64, as msgpack-python does.
    Float(f64),
    /// UTF-8 text (msgpack str); a view of the frame it came from.
    Str(ByteString),
    /// Bytes (msgpack bin); a view of the frame it came from.
    Bin(Bytes),
    /// An array (Python tuple or list).
    Array(Vec<Value>),
    /// A map with any key type, in insertion (wire) order.
    Map(Vec<(Value, Value)>),
    /// An array whose items are all integers in `i64`'s range, packed: 8
    /// bytes an item instead of a `Value` each. It is the same value as the
    /// [`Value::Array`] of those [`Value::Int`]s: the two compare equal and
    /// encode to the same bytes; only the representation differs.
    ///
    /// Deserializing a `msgpack` blob packs every array of at least
    /// 32 such integers (a tuple of a million small ints decodes
    /// into 8 MB, not 40); build one with `Value::from(Vec<i64>)`. Read it
    /// with [`Value::as_int_array`], or any array with [`Value::array_len`]
    /// and [`Value::array_item`].
    ///
    /// ```
    /// use framewire::Value;
    ///
    /// let packed = Value::from(vec![1i64, -2, 3]);
    /// let boxed = Value::Array(vec![1.into(), (-2).into(), 3.into()]);
    /// assert_eq!(packed, boxed);
    /// assert_eq!(packed.array_item(1), Some((-2).into()));
    /// ```
    IntArray(Vec<i64>),
    /// An array whose items are all bytes, packed: one buffer and a 4-byte
    /// offset an item when the items lie back to back in one buffer, else
    /// their `Bytes` (32 bytes an item), never a `Value` each. It is the
    /// same value as the [`Value::Array`] of those [`Value::Bin`]s, as
    /// [`Value::IntArray`] is of its integers: the two compare equal,
    /// encode to the same bytes and serialize the same way.
    ///
    /// Deserializing a collection of at least 32 bytes elements (a list of
    /// bytes written with `IterateCollection::Always`: one frame an
    /// element) packs it, as views of those frames (no copy); build one
    /// with `Value::from(Vec<Bytes>)`. Read it with [`Value::as_bin_array`],
    /// or any array with [`Value::array_len`] and [`Value::array_item`].
    ///
    /// ```
    /// use bytes::Bytes;
    /// use framewire::Value;
    ///
    /// let packed = Value::from(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"c")]);
    /// let boxed = Value::Array(vec![Value::bin(&b"ab"[..]), Value::bin(&b"c"[..])]);
    /// assert_eq!(packed, boxed);
    /// assert_eq!(packed.array_item(1), Some(Value::bin(&b"c"[..])));
    /// ```
    BinArray(Box<BinArray>),
    /// A `{"__Serialized__": i}` block, carried verbatim.
    Serialized(Box<Block>),
    /// A `{"__Pickled__": i}` block, carried verbatim and never unpickled.
    Pickled(Box<Block>),
    /// A value to be serialized out of band into a block of its own (Dask's
    /// `to_serialize(x)`): see [`crate::serialize`].
    ToSerialize(Box<Value>),
    /// An n-dimensional array. It always travels out of band (Dask's
    /// `numpy.ndarray` header and one data frame): in frame 0 it is
    /// serialized as if wrapped in [`Value::ToSerialize`].
    NdArray(Box<NdArray>),
}

impl Value {
    /// A `Str` value.
    pub fn str(s: &str) -> Value {
        Value::Str(ByteString::from(s))
    }

    /// A `Str` value over a static string (no allocation).
    pub fn from_static(s: &'static str) -> Value {
        Value::Str(ByteString::from_static(s))
    }

    /// A `Bin` value.
    pub fn bin(b: impl Into<Bytes>) -> Value {
        Value::Bin(b.into())
    }

    /// An `Int` value.
    pub fn int(i: impl Into<Integer>) -> Value {
        Value::Int(i.into())
    }

    /// A map from `(key, value)` pairs whose keys are strings.
    pub fn map_of<'a>(entries: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
        Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (Value::str(k), v))
                .collect(),
        )
    }

    /// The text, if this is a `Str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is an `Int`.
    pub fn as_int(&self) -> Option<Integer> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The entries, if this is a `Map`.
    pub fn as_map(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The items, if this is an `Array`.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The integers, if this is an `IntArray`.
    pub fn as_int_array(&self) -> Option<&[i64]> {
        match self {
            Value::IntArray(a) => Some(a),
            _ => None,
        }
    }

    /// The byte strings, if this is a `BinArray`.
    pub fn as_bin_array(&self) -> Option<&BinArray> {
        match self {
            Value::BinArray(a) => Some(a),
            _ => None,
        }
    }

    /// The number of items, if this is an `Array`, an `IntArray` or a
    /// `BinArray`.
    pub fn array_len(&self) -> Option<usize> {
        match self {
            Value::Array(a) => Some(a.len()),
            Value::IntArray(a) => Some(a.len()),
            Value::BinArray(a) => Some(a.len()),
            _ => None,
        }
    }

    /// Item `i` of an `Array`, `IntArray` or `BinArray` (an `IntArray`'s as
    /// a [`Value::Int`], a `BinArray`'s as a [`Value::Bin`]).
    pub fn array_item(&self, i: usize) -> Option<Value> {
        match self {
            Value::Array(a) => a.get(i).cloned(),
            Value::IntArray(a) => a.get(i).map(|&x| Value::from(x)),
            Value::BinArray(a) => a.get(i).map(Value::Bin),
            _ => None,
        }
    }

    /// The items of an `Array` or `IntArray`, each as an integer (`None` for
    /// an item that is not one): header tables such as `frame-lengths` come
    /// in either form.
    pub(crate) fn int_items(&self) -> Option<IntItems<'_>> {
        match self {
            Value::Array(a) => Some(IntItems::Boxed(a.iter())),
            Value::IntArray(a) => Some(IntItems::Packed(a.iter())),
            _ => None,
        }
    }

    /// In a map, the value of the first entry whose key is the string `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }
}

/// See [`Value::int_items`].
pub(crate) enum IntItems<'a> {
    Boxed(std::slice::Iter<'a, Value>),
    Packed(std::slice::Iter<'a, i64>),
}

impl Iterator for IntItems<'_> {
    type Item = Option<Integer>;

    fn next(&mut self) -> Option<Option<Integer>> {
        match self {
            IntItems::Boxed(it) => it.next().map(Value::as_int),
            IntItems::Packed(it) => it.next().map(|&x| Some(Integer::from(x))),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            IntItems::Boxed(it) => it.size_hint(),
            IntItems::Packed(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for IntItems<'_> {}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value::*;
        match (self, other) {
            (Nil, Nil) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Str(a), Str(b)) => a == b,
            (Bin(a), Bin(b)) => a == b,
            (Array(a), Array(b)) => a == b,
            (IntArray(a), IntArray(b)) => a == b,
            (BinArray(a), BinArray(b)) => a == b,
            (BinArray(p), Array(a)) | (Array(a), BinArray(p)) => {
                p.len() == a.len()
                    && p.iter().zip(a).all(|(x, v)| match v {
                        Bin(b) => *b == x,
                        _ => false,
                    })
            }
            (IntArray(p), Array(a)) | (Array(a), IntArray(p)) => {
                p.len() == a.len()
                    && p.iter()
                        .zip(a)
                        .all(|(&x, v)| v.as_int().and_then(Integer::as_i64) == Some(x))
            }
            (Map(a), Map(b)) => a == b,
            (Serialized(a), Serialized(b)) | (Pickled(a), Pickled(b)) => a == b,
            (ToSerialize(a), ToSerialize(b)) => a == b,
            (NdArray(a), NdArray(b)) => a == b,
            _ => false,
        }
    }
}

/// [`Value::Nil`].
impl Default for Value {
    fn default() -> Value {
        Value::Nil
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::str(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Str(ByteString::from(v))
    }
}

impl From<Bytes> for Value {
    fn from(v: Bytes) -> Value {
        Value::Bin(v)
    }
}

impl From<Vec<Value>> for Value {
    fn from(v: Vec<Value>) -> Value {
        Value::Array(v)
    }
}

impl From<Vec<i64>> for Value {
    /// An [`Value::IntArray`].
    fn from(v: Vec<i64>) -> Value {
        Value::IntArray(v)
    }
}

impl From<Vec<Bytes>> for Value {
    /// A [`Value::BinArray`].
    fn from(v: Vec<Bytes>) -> Value {
        Value::BinArray(Box::new(BinArray::from(v)))
    }
}

impl From<BinArray> for Value {
    /// A [`Value::BinArray`].
    fn from(v: BinArray) -> Value {
        Value::BinArray(Box::new(v))
    }
}

/// The items of a [`Value::BinArray`]: byte strings, packed.
///
/// Items that lie back to back in one buffer are kept as that buffer and
/// where each item ends (4 bytes an item); others as their `Bytes`. Either
/// way an item is a view ([`BinArray::get`] clones a reference count, never
/// the bytes). Two arrays are equal when their items are, whatever their
/// form.
#[derive(Clone)]
pub struct BinArray(BinRepr);

#[derive(Clone)]
enum BinRepr {
    /// Item `i` is `data[ends[i - 1]..ends[i]]` (from 0 for the first).
    Spans { data: Bytes, ends: Vec<u32> },
    /// The items, each its own view.
    Frames(Vec<Bytes>),
}

impl BinArray {
    /// Items that are slices of one of `backing`, back to back in it, kept
    /// as a slice of that buffer and their ends; otherwise the items as
    /// they are. Only a buffer held in `backing` is sliced: items that
    /// merely sit next to each other in memory are never joined.
    pub fn packing(items: Vec<Bytes>, backing: &[Bytes]) -> BinArray {
        spans(&items, backing).unwrap_or(BinArray(BinRepr::Frames(items)))
    }

    /// Items lying back to back in `data`, item `i` ending at `ends[i]`
    /// (non-decreasing, the last `data.len()`; checked by the caller).
    pub(crate) fn spanning(data: Bytes, ends: Vec<u32>) -> BinArray {
        debug_assert!(ends
            .last()
            .map_or(data.is_empty(), |&e| e as usize == data.len()));
        BinArray(BinRepr::Spans { data, ends })
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        match &self.0 {
            BinRepr::Spans { ends, .. } => ends.len(),
            BinRepr::Frames(items) => items.len(),
        }
    }

    /// Whether it has no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item `i` (a view: no copy).
    pub fn get(&self, i: usize) -> Option<Bytes> {
        match &self.0 {
            BinRepr::Spans { data, ends } => {
                let end = *ends.get(i)? as usize;
                let start = match i {
                    0 => 0,
                    _ => ends[i - 1] as usize,
                };
                Some(data.slice(start..end))
            }
            BinRepr::Frames(items) => items.get(i).cloned(),
        }
    }

    /// The items, in order (views: no copy).
    pub fn iter(&self) -> BinItems<'_> {
        BinItems {
            array: self,
            next: 0,
        }
    }

    /// The one buffer all items are slices of, back to back, if they are
    /// kept so: their bytes concatenated.
    pub fn as_contiguous(&self) -> Option<&Bytes> {
        match &self.0 {
            BinRepr::Spans { data, .. } => Some(data),
            BinRepr::Frames(_) => None,
        }
    }

    /// Item `i` as a slice, with the buffer it is a slice of.
    #[cfg(feature = "serde")]
    pub(crate) fn item_in(&self, i: usize) -> Option<(&Bytes, &[u8])> {
        match &self.0 {
            BinRepr::Spans { data, ends } => {
                let end = *ends.get(i)? as usize;
                let start = match i {
                    0 => 0,
                    _ => ends[i - 1] as usize,
                };
                Some((data, &data[start..end]))
            }
            BinRepr::Frames(items) => items.get(i).map(|b| (b, &b[..])),
        }
    }

    /// The items as a vector of views.
    pub fn to_vec(&self) -> Vec<Bytes> {
        match &self.0 {
            BinRepr::Frames(items) => items.clone(),
            BinRepr::Spans { .. } => self.iter().collect(),
        }
    }

    /// The sum of the items' lengths.
    pub fn total_len(&self) -> usize {
        match &self.0 {
            BinRepr::Spans { data, .. } => data.len(),
            BinRepr::Frames(items) => items.iter().map(Bytes::len).sum(),
        }
    }
}

/// [`BinArray::packing`]'s one-buffer form, if the items allow it.
fn spans(items: &[Bytes], backing: &[Bytes]) -> Option<BinArray> {
    if backing.is_empty() {
        return None; // nothing to slice (and no table of ends to allocate)
    }
    // An empty item lies anywhere: it neither starts nor breaks a run.
    let first = items.iter().find(|b| !b.is_empty())?;
    let start = first.as_ptr() as usize;
    let mut end = start;
    let mut ends = Vec::with_capacity(items.len());
    for b in items {
        if !b.is_empty() && b.as_ptr() as usize != end {
            return None;
        }
        end += b.len();
        ends.push(u32::try_from(end - start).ok()?);
    }
    let parent = backing.iter().find(|p| {
        let base = p.as_ptr() as usize;
        start >= base && end <= base + p.len()
    })?;
    let base = parent.as_ptr() as usize;
    Some(BinArray(BinRepr::Spans {
        data: parent.slice(start - base..end - base),
        ends,
    }))
}

impl From<Vec<Bytes>> for BinArray {
    /// The items as they are.
    fn from(items: Vec<Bytes>) -> BinArray {
        BinArray(BinRepr::Frames(items))
    }
}

impl PartialEq for BinArray {
    fn eq(&self, other: &BinArray) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl fmt::Debug for BinArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a BinArray {
    type Item = Bytes;
    type IntoIter = BinItems<'a>;

    fn into_iter(self) -> BinItems<'a> {
        self.iter()
    }
}

/// The items of a [`BinArray`], in order: see [`BinArray::iter`].
#[derive(Debug)]
pub struct BinItems<'a> {
    array: &'a BinArray,
    next: usize,
}

impl Iterator for BinItems<'_> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let item = self.array.get(self.next)?;
        self.next += 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.array.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for BinItems<'_> {}

macro_rules! value_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::Int(Integer::from(v))
            }
        }
    )*};
}
value_from_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64);

impl Integer {
    /// Builds an integer from an `i128`, if it is in msgpack's range.
    pub fn try_from_i128(v: i128) -> Option<Integer> {
        match u64::try_from(v) {
            Ok(u) => Some(Integer(Repr::NonNeg(u))),
            Err(_) => i64::try_from(v).ok().map(|i| Integer(Repr::Neg(i))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_have_one_representation_and_order_across_the_range() {
        assert_eq!(std::mem::size_of::<Value>(), 40);
        assert_eq!(Integer::from(0i64), Integer::from(0u64));
        assert_eq!(Integer::from(7i8), Integer::from(7usize));
        assert_eq!(Integer::try_from_i128(-1), Some(Integer::from(-1i64)));
        assert_eq!(
            Integer::try_from_i128(i128::from(u64::MAX)),
            Some(u64::MAX.into())
        );
        assert_eq!(
            Integer::try_from_i128(i128::from(i64::MIN)),
            Some(i64::MIN.into())
        );
        assert_eq!(Integer::try_from_i128(i128::from(u64::MAX) + 1), None);
        assert_eq!(Integer::try_from_i128(i128::from(i64::MIN) - 1), None);
        let sorted = [
            i64::MIN.into(),
            (-1i64).into(),
            0u8.into(),
            (i64::MAX as u64 + 1).into(),
            u64::MAX.into(),
        ];
        for w in sorted.windows(2) {
            let (a, b): (Integer, Integer) = (w[0], w[1]);
            assert!(a < b, "{a} < {b}");
        }
        assert_eq!(Integer::from(-5i32).as_u64(), None);
        assert_eq!(Integer::from(u64::MAX).as_i64(), None);
        assert_eq!(Integer::from(-5i32).as_i128(), -5);
        assert_eq!(
            format!("{:?}", Integer::from(i64::MIN)),
            i64::MIN.to_string()
        );
    }
}
