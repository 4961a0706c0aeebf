//! msgpack ⇄ [`Value`], on top of `rmp`'s marker table and writers.
//!
//! Decoding is iterative (an explicit stack, never recursion that input can
//! drive), zero-copy (str and bin are slices of the frame), and bounded by
//! [`Limits`]: nesting depth, an item budget, and every declared length
//! checked against the bytes that remain before anything is reserved.
//!
//! Encoding writes exactly the forms msgpack-python (`use_bin_type=True`)
//! chooses: non-negative integers in unsigned forms, negative ones in the
//! smallest signed form, float64 only, str8 for 32..=255-byte text, bin8 even
//! for empty bytes, maps in insertion order (SPEC.md §3).

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;
use rmp::Marker;
use smallvec::SmallVec;

use crate::error::{DecodeError, EncodeError, Position};
use crate::limits::Limits;
use crate::value::{Integer, Value};

/// msgpack-python's own nesting limit: it refuses to encode or decode more
/// than 1024 nested containers.
pub(crate) const PYTHON_MAX_DEPTH: usize = 1024;

/// Limits for decoding bytes that were already checked (by [`skim`] or
/// [`decode`] under the caller's limits): nothing left to refuse.
pub(crate) const CHECKED: Limits = Limits::unchecked();

/// What the decoder does with each map once its entries are complete.
/// frame 0 uses it to turn placeholders into blocks; sub-headers use
/// [`plain_map`].
pub(crate) type MapHook<'h> =
    dyn FnMut(Vec<(Value, Value)>, Position) -> Result<Value, DecodeError> + 'h;

/// The map hook that keeps every map as plain data.
pub(crate) fn plain_map(entries: Vec<(Value, Value)>, _: Position) -> Result<Value, DecodeError> {
    Ok(Value::Map(entries))
}

/// A container being filled.
struct Open {
    /// Items (for a map: keys and values counted apart) still to read.
    remaining: u64,
    items: Items,
    /// Capacity reserved for `items` ahead of data, returned to the shared
    /// budget when the container closes.
    reserved: usize,
    start: usize,
}

/// The items of an open container; a map keeps its key until the value comes.
enum Items {
    Array(Vec<Value>),
    /// An array being packed; it becomes an `Array` at its first item that
    /// is not an integer in `i64`'s range.
    Ints(Vec<i64>),
    Map(Vec<(Value, Value)>, Option<Value>),
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    frame: usize,
}

impl<'a> Reader<'a> {
    /// A reader over one msgpack frame, refused outright when it is longer
    /// than [`Limits::max_header_len`]. [`decode`] and [`skim`] share this and
    /// the checks below, so they accept and refuse exactly the same bytes.
    fn new(buf: &'a Bytes, frame: usize, limits: &Limits) -> Result<Reader<'a>, DecodeError> {
        let len = buf.len() as u64;
        if len > limits.max_header_len {
            return Err(DecodeError::HeaderTooLarge {
                frame,
                len,
                limit: limits.max_header_len,
            });
        }
        Ok(Reader { buf, pos: 0, frame })
    }

    /// Counts one more item against [`Limits::max_msgpack_items`].
    fn count_item(
        &self,
        seen: &mut usize,
        start: usize,
        limits: &Limits,
    ) -> Result<(), DecodeError> {
        *seen += 1;
        if *seen > limits.max_msgpack_items {
            return Err(DecodeError::ItemBudgetExceeded {
                at: self.at(start),
                limit: limits.max_msgpack_items,
            });
        }
        Ok(())
    }

    /// Checks a container that opens at `start` inside `depth` others: the
    /// depth limit, and its items against the bytes that remain. Returns how
    /// many items follow (a map's keys and values counted apart).
    fn open_container(
        &self,
        start: usize,
        len: u64,
        is_map: bool,
        depth: usize,
        limits: &Limits,
    ) -> Result<u64, DecodeError> {
        if depth >= limits.max_depth {
            return Err(DecodeError::DepthExceeded {
                at: self.at(start),
                limit: limits.max_depth,
            });
        }
        let units = if is_map { 2 } else { 1 };
        self.check_len(start, len, units)?;
        Ok(len * units) // cannot overflow: checked against the buffer
    }

    fn at(&self, offset: usize) -> Position {
        Position {
            frame: self.frame,
            offset,
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self
            .buf
            .get(self.pos..)
            .and_then(|rest| rest.get(..N))
            .ok_or(DecodeError::MsgpackTruncated(self.at(self.pos)))?;
        self.pos += N;
        // `bytes` has exactly N bytes.
        <[u8; N]>::try_from(bytes).map_err(|_| DecodeError::MsgpackTruncated(self.at(self.pos)))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take()?))
    }

    /// Checks a declared length against the bytes that remain (each declared
    /// unit needs at least `unit` bytes), before anything is sliced or reserved.
    fn check_len(&self, start: usize, declared: u64, unit: u64) -> Result<(), DecodeError> {
        let remaining = self.remaining() as u64;
        match declared.checked_mul(unit) {
            Some(need) if need <= remaining => Ok(()),
            _ => Err(DecodeError::LengthExceedsRemaining {
                at: self.at(start),
                declared,
                remaining,
            }),
        }
    }

    /// Steps over the next `len` bytes (checked against what remains) and
    /// returns their range.
    fn skip(&mut self, start: usize, len: u64) -> Result<(usize, usize), DecodeError> {
        self.check_len(start, len, 1)?;
        let len = usize::try_from(len).map_err(|_| DecodeError::LengthOverflow)?;
        let from = self.pos;
        self.pos += len;
        Ok((from, self.pos))
    }
}

/// What one msgpack item turned out to be. Str and bin are byte ranges of
/// the frame (already bounds-checked), materialized only by [`decode`].
enum Item {
    Scalar(Value),
    Str { start: usize, end: usize, at: usize },
    Bin { start: usize, end: usize },
    Container { len: u64, is_map: bool },
}

/// Decodes `buf` (frame `frame` of a message) as exactly one msgpack value.
///
/// Every map is passed to `hook` when complete. Str and bin values are
/// slices of `buf`. Errors carry the frame and byte offset.
pub(crate) fn decode(
    buf: &Bytes,
    frame: usize,
    limits: &Limits,
    hook: &mut MapHook<'_>,
) -> Result<Value, DecodeError> {
    decode_with(buf, frame, limits, hook, usize::MAX)
}

/// [`decode`] with every map kept plain and every array of at least
/// `pack_min` items that are all integers in `i64`'s range packed into a
/// [`Value::IntArray`] (the `msgpack` family's blobs). It accepts and
/// refuses exactly what [`decode`] does.
#[inline]
pub(crate) fn decode_packed(
    buf: &Bytes,
    frame: usize,
    limits: &Limits,
    pack_min: usize,
) -> Result<Value, DecodeError> {
    if let [b @ 0x00..=0x7f] = buf[..] {
        if limits.max_msgpack_items > 0 && limits.max_header_len > 0 {
            return Ok(Value::from(b)); // a lone positive fixint: an element's frame
        }
    }
    decode_with(buf, frame, limits, &mut plain_map, pack_min)
}

fn decode_with(
    buf: &Bytes,
    frame: usize,
    limits: &Limits,
    hook: &mut MapHook<'_>,
    pack_min: usize,
) -> Result<Value, DecodeError> {
    let mut rd = Reader::new(buf, frame, limits)?;
    let mut stack: Vec<Open> = Vec::new();
    let mut items_seen: usize = 0;
    // How many `Value`s may be reserved ahead of data, shared by every open
    // container (nested containers must not each reserve `prealloc_cap`).
    let mut prealloc_left = (limits.prealloc_cap / std::mem::size_of::<Value>()).max(1);

    loop {
        let start = rd.pos;
        rd.count_item(&mut items_seen, start, limits)?;
        let mut value = match read_item(&mut rd)? {
            Item::Scalar(v) => v,
            Item::Bin { start, end } => Value::Bin(buf.slice(start..end)),
            Item::Str { start, end, at } => Value::Str(
                ByteString::try_from(buf.slice(start..end))
                    .map_err(|_| DecodeError::InvalidUtf8(rd.at(at)))?,
            ),
            Item::Container { len, is_map } => {
                let n = rd.open_container(start, len, is_map, stack.len(), limits)?;
                if n == 0 {
                    let empty = if is_map {
                        Items::Map(Vec::new(), None)
                    } else {
                        Items::Array(Vec::new())
                    };
                    finish(empty, rd.at(start), hook)?
                } else {
                    // In `Value`s: a map entry holds two.
                    let per_item = if is_map { 2 } else { 1 };
                    let cap = usize::try_from(len)
                        .unwrap_or(usize::MAX)
                        .min(prealloc_left / per_item);
                    prealloc_left -= cap * per_item;
                    let items = if is_map {
                        Items::Map(Vec::with_capacity(cap), None)
                    } else if n >= pack_min as u64 {
                        Items::Ints(Vec::with_capacity(cap))
                    } else {
                        Items::Array(Vec::with_capacity(cap))
                    };
                    let mut open = Open {
                        remaining: n,
                        items,
                        reserved: cap * per_item,
                        start,
                    };
                    if let Items::Ints(ints) = &mut open.items {
                        read_ints(&mut rd, ints, &mut open.remaining, &mut items_seen, limits);
                    }
                    stack.push(open);
                    continue;
                }
            }
        };
        // Put the finished value into its parent; close every parent it completes.
        loop {
            let Some(top) = stack.last_mut() else {
                if rd.pos != buf.len() {
                    return Err(DecodeError::TrailingBytes(rd.at(rd.pos)));
                }
                return Ok(value);
            };
            match &mut top.items {
                Items::Array(items) => items.push(value),
                Items::Ints(ints) => match value.as_int().and_then(Integer::as_i64) {
                    Some(x) => ints.push(x),
                    // Not an i64 after all: unpack what came so far.
                    None => {
                        let mut items: Vec<Value> = ints.drain(..).map(Value::from).collect();
                        items.push(value);
                        top.items = Items::Array(items);
                    }
                },
                Items::Map(entries, key) => match key.take() {
                    Some(k) => entries.push((k, value)),
                    None => *key = Some(value),
                },
            }
            top.remaining -= 1;
            if top.remaining > 0 {
                break;
            }
            let done = stack.pop().expect("stack has a top");
            prealloc_left += done.reserved;
            value = finish(done.items, rd.at(done.start), hook)?;
        }
    }
}

fn finish(items: Items, at: Position, hook: &mut MapHook<'_>) -> Result<Value, DecodeError> {
    match items {
        Items::Array(items) => Ok(Value::Array(items)),
        Items::Ints(ints) => Ok(Value::IntArray(ints)),
        Items::Map(entries, _) => hook(entries, at),
    }
}

/// The fast path of a packed array: reads integers straight into `ints`
/// while they come, leaving the array's last item (which closes it), and
/// anything else, to the general loop. It stops short of every error, so the
/// general loop reports it exactly as [`decode`] would.
fn read_ints(
    rd: &mut Reader<'_>,
    ints: &mut Vec<i64>,
    remaining: &mut u64,
    items_seen: &mut usize,
    limits: &Limits,
) {
    let buf: &[u8] = rd.buf;
    let mut pos = rd.pos;
    let budget = limits.max_msgpack_items.saturating_sub(*items_seen);
    let todo = usize::try_from(*remaining - 1)
        .unwrap_or(usize::MAX)
        .min(budget);
    let mut done = 0;
    while done < todo {
        let Some(&b) = buf.get(pos) else { break };
        let (x, width) = match b {
            0x00..=0x7f => (i64::from(b), 1),
            0xe0..=0xff => (i64::from(b as i8), 1),
            0xcc..=0xd3 => {
                let width = 1usize << ((b - 0xcc) & 3);
                let Some(be) = buf.get(pos + 1..pos + 1 + width) else {
                    break;
                };
                let mut raw = [0u8; 8];
                raw[8 - width..].copy_from_slice(be);
                let u = u64::from_be_bytes(raw);
                let x = if b >= 0xd0 {
                    // Signed: sign-extend from `width` bytes.
                    let shift = 64 - 8 * width as u32;
                    ((u << shift) as i64) >> shift
                } else {
                    match i64::try_from(u) {
                        Ok(x) => x,
                        Err(_) => break, // above i64: the general loop unpacks
                    }
                };
                (x, 1 + width)
            }
            _ => break,
        };
        ints.push(x);
        pos += width;
        done += 1;
    }
    rd.pos = pos;
    *remaining -= done as u64;
    *items_seen += done;
}

fn read_item(rd: &mut Reader<'_>) -> Result<Item, DecodeError> {
    let start = rd.pos;
    let marker = Marker::from_u8(rd.u8()?);
    let int = |v: Integer| Ok(Item::Scalar(Value::Int(v)));
    let container = |len: u64, is_map: bool| Ok(Item::Container { len, is_map });
    match marker {
        Marker::Null => Ok(Item::Scalar(Value::Nil)),
        Marker::True => Ok(Item::Scalar(Value::Bool(true))),
        Marker::False => Ok(Item::Scalar(Value::Bool(false))),
        Marker::FixPos(v) => int(v.into()),
        Marker::FixNeg(v) => int(v.into()),
        Marker::U8 => int(rd.u8()?.into()),
        Marker::U16 => int(rd.u16()?.into()),
        Marker::U32 => int(rd.u32()?.into()),
        Marker::U64 => int(rd.u64()?.into()),
        Marker::I8 => int(i8::from_be_bytes(rd.take()?).into()),
        Marker::I16 => int(i16::from_be_bytes(rd.take()?).into()),
        Marker::I32 => int(i32::from_be_bytes(rd.take()?).into()),
        Marker::I64 => int(i64::from_be_bytes(rd.take()?).into()),
        Marker::F32 => Ok(Item::Scalar(Value::Float(f64::from(f32::from_bits(
            rd.u32()?,
        ))))),
        Marker::F64 => Ok(Item::Scalar(Value::Float(f64::from_bits(rd.u64()?)))),
        Marker::FixStr(n) => read_str(rd, start, n.into()),
        Marker::Str8 => {
            let n = rd.u8()?;
            read_str(rd, start, n.into())
        }
        Marker::Str16 => {
            let n = rd.u16()?;
            read_str(rd, start, n.into())
        }
        Marker::Str32 => {
            let n = rd.u32()?;
            read_str(rd, start, n.into())
        }
        Marker::Bin8 => {
            let n = rd.u8()?;
            read_bin(rd, start, n.into())
        }
        Marker::Bin16 => {
            let n = rd.u16()?;
            read_bin(rd, start, n.into())
        }
        Marker::Bin32 => {
            let n = rd.u32()?;
            read_bin(rd, start, n.into())
        }
        Marker::FixArray(n) => container(n.into(), false),
        Marker::Array16 => container(rd.u16()?.into(), false),
        Marker::Array32 => container(rd.u32()?.into(), false),
        Marker::FixMap(n) => container(n.into(), true),
        Marker::Map16 => container(rd.u16()?.into(), true),
        Marker::Map32 => container(rd.u32()?.into(), true),
        Marker::FixExt1
        | Marker::FixExt2
        | Marker::FixExt4
        | Marker::FixExt8
        | Marker::FixExt16
        | Marker::Ext8
        | Marker::Ext16
        | Marker::Ext32 => Err(DecodeError::UnsupportedExt(rd.at(start))),
        Marker::Reserved => Err(DecodeError::InvalidMarker {
            at: rd.at(start),
            byte: 0xc1,
        }),
    }
}

fn read_str(rd: &mut Reader<'_>, start: usize, len: u64) -> Result<Item, DecodeError> {
    let (from, end) = rd.skip(start, len)?;
    Ok(Item::Str {
        start: from,
        end,
        at: start,
    })
}

fn read_bin(rd: &mut Reader<'_>, start: usize, len: u64) -> Result<Item, DecodeError> {
    let (from, end) = rd.skip(start, len)?;
    Ok(Item::Bin { start: from, end })
}

/// A msgpack map read in place: where each entry's key text (for str keys)
/// and value lie in the buffer. Nothing is decoded until asked for, so the
/// serialize layer reads headers (and finds each sub-header of a million-
/// element collection) without building a `Value` per entry.
pub(crate) struct RawMap<'a> {
    buf: &'a Bytes,
    entries: SmallVec<[RawEntry; 6]>,
    /// See [`RawMap::read_noting_items`].
    items: Option<Vec<usize>>,
}

/// Where one map entry lies: it starts at `start` (its key), `key` is the
/// key's text when the key is a str, `value` the value's bytes.
struct RawEntry {
    start: usize,
    key: Option<Range<usize>>,
    value: Range<usize>,
}

impl<'a> RawMap<'a> {
    /// The map at `pos` and where it ends; `None` when the value there is
    /// not a map. The bytes must already be checked msgpack (a header the
    /// message layer claimed, or one framewire wrote).
    pub(crate) fn read(
        buf: &'a Bytes,
        pos: usize,
    ) -> Result<Option<(RawMap<'a>, usize)>, DecodeError> {
        Self::read_noting_items(buf, pos, None)
    }

    /// [`RawMap::read`], noting on the way where the items of the array under
    /// `items_of` start (see [`RawMap::items`]): a collection header's
    /// sub-headers are found in the same pass that steps over them.
    pub(crate) fn read_noting_items(
        buf: &'a Bytes,
        pos: usize,
        mut items_of: Option<&str>,
    ) -> Result<Option<(RawMap<'a>, usize)>, DecodeError> {
        let mut rd = Reader::new(buf, 0, &CHECKED)?;
        rd.pos = pos;
        let len = match Marker::from_u8(rd.u8()?) {
            Marker::FixMap(n) => u64::from(n),
            Marker::Map16 => u64::from(rd.u16()?),
            Marker::Map32 => u64::from(rd.u32()?),
            _ => return Ok(None),
        };
        rd.check_len(pos, len, 2)?;
        let mut entries: SmallVec<[RawEntry; 6]> = SmallVec::new();
        let mut items = None;
        for _ in 0..len {
            let key_start = rd.pos;
            let key = match read_item(&mut rd)? {
                Item::Str { start, end, .. } => Some(start..end),
                _ => {
                    rd.pos = key_start;
                    skip_value(&mut rd)?;
                    None
                }
            };
            let value_start = rd.pos;
            // Only the first entry with the key counts, as in `get`.
            let wanted = items_of
                .take_if(|k| {
                    key.as_ref()
                        .is_some_and(|r| &buf[r.clone()] == k.as_bytes())
                })
                .is_some();
            if wanted {
                items = array_items(&mut rd)?;
            }
            if items.is_none() || !wanted {
                skip_value(&mut rd)?;
            }
            entries.push(RawEntry {
                start: key_start,
                key,
                value: value_start..rd.pos,
            });
        }
        Ok(Some((
            RawMap {
                buf,
                entries,
                items,
            },
            rd.pos,
        )))
    }

    /// The value range of the first entry whose key is the str `key` (as
    /// [`Value::get`]).
    pub(crate) fn get(&self, key: &str) -> Option<Range<usize>> {
        self.entries
            .iter()
            .find(|e| {
                e.key
                    .as_ref()
                    .is_some_and(|k| &self.buf[k.clone()] == key.as_bytes())
            })
            .map(|e| e.value.clone())
    }

    /// Whether the map has an entry with this key.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Where the items of the array under the `items_of` key start,
    /// followed by where the array ends (see [`RawMap::read_noting_items`]);
    /// `None` if there was no such key or its value is not an array.
    pub(crate) fn items(&self) -> Option<&[usize]> {
        self.items.as_deref()
    }

    /// The value under `key`, decoded.
    pub(crate) fn value(&self, key: &str) -> Result<Option<Value>, DecodeError> {
        self.get(key)
            .map(|r| decode_range(self.buf, r, usize::MAX))
            .transpose()
    }

    /// The value under `key`, decoded, with every integer array packed (for
    /// the integer tables: `frame-lengths`, `split-*`).
    pub(crate) fn table(&self, key: &str) -> Result<Option<Value>, DecodeError> {
        self.get(key)
            .map(|r| decode_range(self.buf, r, 1))
            .transpose()
    }

    /// The text under `key`, if it is a str.
    pub(crate) fn str(&self, key: &str) -> Option<&'a str> {
        let range = self.get(key)?;
        let mut rd = Reader::new(self.buf, 0, &CHECKED).ok()?;
        rd.pos = range.start;
        match read_item(&mut rd).ok()? {
            Item::Str { start, end, .. } => std::str::from_utf8(&self.buf[start..end]).ok(),
            _ => None,
        }
    }
}

/// Decodes the one value at `buf[range]` (checked bytes), packing integer
/// arrays of at least `pack_min` items.
pub(crate) fn decode_range(
    buf: &Bytes,
    range: Range<usize>,
    pack_min: usize,
) -> Result<Value, DecodeError> {
    decode_packed(&buf.slice(range), 0, &CHECKED, pack_min)
}

/// Where the items of the array at the reader start, followed by where the
/// array ends, stepping over it; `None` (nothing read) when the value there
/// is not an array.
fn array_items(rd: &mut Reader<'_>) -> Result<Option<Vec<usize>>, DecodeError> {
    let pos = rd.pos;
    let len = match Marker::from_u8(rd.u8()?) {
        Marker::FixArray(n) => u64::from(n),
        Marker::Array16 => u64::from(rd.u16()?),
        Marker::Array32 => u64::from(rd.u32()?),
        _ => {
            rd.pos = pos;
            return Ok(None);
        }
    };
    rd.check_len(pos, len, 1)?;
    let mut items = Vec::with_capacity(len as usize + 1); // checked against the bytes
    for _ in 0..len {
        items.push(rd.pos);
        skip_value(rd)?;
    }
    items.push(rd.pos);
    Ok(Some(items))
}

/// Whether the value at `buf[pos]` is a map.
pub(crate) fn is_map_at(buf: &[u8], pos: usize) -> bool {
    buf.get(pos).is_some_and(|&b| {
        matches!(
            Marker::from_u8(b),
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32
        )
    })
}

/// Steps over one whole value (containers included), iteratively. The
/// one-byte forms headers are made of are stepped over in place; the rest
/// (and every error) goes through [`read_item`].
fn skip_value(rd: &mut Reader<'_>) -> Result<(), DecodeError> {
    let buf: &[u8] = rd.buf;
    let mut left: u64 = 1;
    let mut pos = rd.pos;
    while left > 0 {
        left -= 1;
        let Some(&b) = buf.get(pos) else {
            break; // read_item reports it
        };
        let (width, items) = match b {
            0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => (1, 0),
            0xa0..=0xbf => (1 + usize::from(b & 0x1f), 0),
            0x80..=0x8f => (1, 2 * u64::from(b & 0x0f)),
            0x90..=0x9f => (1, u64::from(b & 0x0f)),
            _ => (usize::MAX, 0),
        };
        if width <= buf.len() - pos {
            pos += width;
            left += items;
            continue;
        }
        rd.pos = pos;
        if let Item::Container { len, is_map } = read_item(rd)? {
            let units = if is_map { 2 } else { 1 };
            rd.check_len(pos, len, units)?;
            left += len * units;
        }
        pos = rd.pos;
    }
    rd.pos = pos;
    if left > 0 {
        read_item(rd)?; // past the end: the error read_item gives
    }
    Ok(())
}

/// `raw` (a msgpack map) with `entries` set as Python dict assignment does:
/// a key already there keeps its place and takes the new value, the others
/// are appended in order. The other entries are copied byte for byte.
pub(crate) fn set_entries(raw: &Bytes, entries: &[(&str, &Value)]) -> Result<Bytes, EncodeError> {
    let bad = || EncodeError::HeaderNotMap;
    let (map, end) = RawMap::read(raw, 0).ok().flatten().ok_or_else(bad)?;
    let mut out = BytesMut::with_capacity(raw.len() + 64);
    let appended = entries.iter().filter(|(k, _)| !map.has(k)).count();
    put_map_len(
        &mut out,
        u32::try_from(map.entries.len() + appended).map_err(|_| bad())?,
    );
    let new_value = |out: &mut BytesMut, v: &Value| {
        encode_into(v, out, usize::MAX, &mut |_, _| {
            Err(EncodeError::OutOfBandInHeader)
        })
    };
    if end != raw.len() {
        return Err(bad());
    }
    let mut done = vec![false; entries.len()];
    for e in &map.entries {
        let key_text = e.key.as_ref().map(|k| &raw[k.clone()]);
        match entries
            .iter()
            .position(|(k, _)| key_text == Some(k.as_bytes()))
        {
            // The first entry with the key takes the value (as `Value::get`
            // finds it); later duplicates stay as they were.
            Some(i) if !done[i] => {
                done[i] = true;
                out.extend_from_slice(&raw[e.start..e.value.start]);
                new_value(&mut out, entries[i].1)?;
            }
            _ => out.extend_from_slice(&raw[e.start..e.value.end]),
        }
    }
    for ((key, value), done) in entries.iter().zip(done) {
        if !done {
            put_str(&mut out, key)?;
            new_value(&mut out, value)?;
        }
    }
    Ok(out.freeze())
}

/// What [`skim`] learns about a frame without building it.
pub(crate) struct Skimmed {
    /// Whether the value is a map.
    pub(crate) is_map: bool,
    /// The value of the top-level map entry whose key is the str asked for,
    /// if there is one and it is an integer.
    pub(crate) int_at_key: Option<Integer>,
}

/// Checks `buf` exactly as [`decode`] does (same limits, same errors, UTF-8
/// included) but builds nothing: no allocation per item. Returns whether it
/// is a map and the integer under `key` in that map. A pass-through relay
/// checks sub-headers this way and decodes them only when asked
/// ([`crate::Header::map`]).
pub(crate) fn skim(
    buf: &Bytes,
    frame: usize,
    limits: &Limits,
    key: &str,
) -> Result<Skimmed, DecodeError> {
    let mut rd = Reader::new(buf, frame, limits)?;
    // Per open container: items still to read.
    let mut stack: Vec<u64> = Vec::new();
    let mut out = Skimmed {
        is_map: buf.first().is_some_and(|&b| {
            matches!(
                Marker::from_u8(b),
                Marker::FixMap(_) | Marker::Map16 | Marker::Map32
            )
        }),
        int_at_key: None,
    };
    let mut items_seen: usize = 0;
    let mut want_value = false;
    let mut seen_key = false;
    loop {
        let start = rd.pos;
        rd.count_item(&mut items_seen, start, limits)?;
        // Inside the top-level map, an even number of items left means a key.
        let top_level_key = out.is_map && stack.len() == 1 && stack[0].is_multiple_of(2);
        let top_level_value = out.is_map && stack.len() == 1 && stack[0] % 2 == 1;
        match read_item(&mut rd)? {
            Item::Container { len, is_map } => {
                let n = rd.open_container(start, len, is_map, stack.len(), limits)?;
                if n > 0 {
                    stack.push(n);
                    want_value = false;
                    continue;
                }
            }
            Item::Str {
                start: from,
                end,
                at,
            } => {
                let text = std::str::from_utf8(&buf[from..end])
                    .map_err(|_| DecodeError::InvalidUtf8(rd.at(at)))?;
                if top_level_key {
                    // The first entry with this key counts, as in `Value::get`.
                    want_value = text == key && !seen_key;
                    seen_key |= want_value;
                    if let Some(top) = stack.last_mut() {
                        *top -= 1;
                    }
                    continue;
                }
            }
            Item::Scalar(Value::Int(i)) if top_level_value && want_value => {
                out.int_at_key = Some(i);
            }
            Item::Scalar(_) | Item::Bin { .. } => {}
        }
        want_value = false;
        // Close every container this item completes.
        loop {
            let Some(top) = stack.last_mut() else {
                if rd.pos != buf.len() {
                    return Err(DecodeError::TrailingBytes(rd.at(rd.pos)));
                }
                return Ok(out);
            };
            *top -= 1;
            if *top > 0 {
                break;
            }
            stack.pop();
        }
    }
}

/// Encodes one value as a standalone msgpack frame (a sub-header or the
/// `msgpack` family's frame). Out-of-band values are refused: they only have
/// a meaning in frame 0, where [`crate::message::dumps`] places them.
pub(crate) fn encode(value: &Value) -> Result<Bytes, EncodeError> {
    let mut out = BytesMut::with_capacity(64);
    encode_into(value, &mut out, usize::MAX, &mut |_, _| {
        Err(EncodeError::OutOfBandInHeader)
    })?;
    Ok(out.freeze())
}

/// Writes the placeholder map for an out-of-band leaf: `{key: index}`.
pub(crate) fn write_placeholder(out: &mut BytesMut, key: &'static str, index: usize) {
    put_map_len(out, 1);
    let _ = put_str(out, key); // a short constant
    put_uint(out, index as u64);
}

/// Whether a value can only travel out of band: it has, or becomes, frames of
/// its own. A bin of `bin_threshold` bytes or more counts too.
pub(crate) fn is_out_of_band(v: &Value, bin_threshold: usize) -> bool {
    match v {
        Value::Serialized(_) | Value::Pickled(_) | Value::Serialize(_) | Value::NdArray(_) => true,
        Value::Bin(b) => b.len() >= bin_threshold,
        _ => false,
    }
}

/// Encodes `value` into `out`. `leaf` is given every value that must travel
/// out of band (see [`is_out_of_band`]) instead of encoding it: it writes
/// what stands for it (a placeholder) or refuses with an error.
pub(crate) fn encode_into(
    value: &Value,
    out: &mut BytesMut,
    bin_threshold: usize,
    leaf: &mut dyn FnMut(&Value, &mut BytesMut) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    encode_at(value, out, bin_threshold, leaf, 0)
}

/// Encodes a header value (out-of-band values refused) that sits inside
/// `depth` containers of the header being written.
pub(crate) fn encode_header_at(
    value: &Value,
    out: &mut BytesMut,
    depth: usize,
) -> Result<(), EncodeError> {
    encode_at(
        value,
        out,
        usize::MAX,
        &mut |_, _| Err(EncodeError::OutOfBandInHeader),
        depth,
    )
}

/// [`encode_into`] for a value inside `base` containers already.
fn encode_at(
    value: &Value,
    out: &mut BytesMut,
    bin_threshold: usize,
    leaf: &mut dyn FnMut(&Value, &mut BytesMut) -> Result<(), EncodeError>,
    base: usize,
) -> Result<(), EncodeError> {
    if !is_out_of_band(value, bin_threshold) && put_scalar(value, out)? {
        return Ok(()); // a scalar: no work list needed
    }
    // Values still to write, with their depth (containers they sit in).
    let mut todo: Vec<(&Value, usize)> = vec![(value, base)];
    while let Some((v, depth)) = todo.pop() {
        if is_out_of_band(v, bin_threshold) {
            leaf(v, out)?;
            continue;
        }
        if put_scalar(v, out)? {
            continue;
        }
        match v {
            Value::Array(items) => {
                check_depth(depth)?;
                let len = u32::try_from(items.len())
                    .map_err(|_| EncodeError::TooLong { len: items.len() })?;
                let _ = rmp::encode::write_array_len(&mut out.writer(), len);
                out.reserve(items.len());
                // Scalars are written at once; from the first item that is
                // not, the rest wait on the stack (in order).
                let mut rest = &items[..];
                while let Some((x, tail)) = rest.split_first() {
                    if is_out_of_band(x, bin_threshold) || !put_scalar(x, out)? {
                        break;
                    }
                    rest = tail;
                }
                todo.extend(rest.iter().rev().map(|x| (x, depth + 1)));
            }
            Value::IntArray(items) => {
                check_depth(depth)?;
                put_ints(out, items)?;
            }
            Value::Map(entries) => {
                check_depth(depth)?;
                let len = u32::try_from(entries.len())
                    .map_err(|_| EncodeError::TooLong { len: entries.len() })?;
                put_map_len(out, len);
                for (k, v) in entries.iter().rev() {
                    if let Some(key) = k.as_str().and_then(reserved_key) {
                        return Err(EncodeError::ReservedKey { key });
                    }
                    todo.push((v, depth + 1));
                    todo.push((k, depth + 1));
                }
            }
            // Out-of-band values were handed to `leaf` above.
            Value::Serialized(_) | Value::Pickled(_) | Value::Serialize(_) | Value::NdArray(_) => {
                leaf(v, out)?
            }
            // Written by `put_scalar`.
            Value::Nil
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Str(_)
            | Value::Bin(_) => {}
        }
    }
    Ok(())
}

/// Writes `v` if it is a scalar (the caller has ruled out an out-of-band
/// `Bin`); `false` for containers and out-of-band leaves.
#[inline]
fn put_scalar(v: &Value, out: &mut BytesMut) -> Result<bool, EncodeError> {
    match v {
        Value::Nil => out.put_u8(0xc0),
        Value::Bool(b) => out.put_u8(if *b { 0xc3 } else { 0xc2 }),
        Value::Int(i) => match i.as_u64() {
            Some(u) => put_uint(out, u),
            // Negative, so in i64's range: rmp picks the smallest signed
            // form, as msgpack-python does.
            None => put_int(out, i.as_i64().unwrap_or(i64::MIN)),
        },
        Value::Float(f) => {
            let _ = rmp::encode::write_f64(&mut out.writer(), *f);
        }
        Value::Str(s) => put_str(out, s)?,
        Value::Bin(b) => {
            let len = u32::try_from(b.len()).map_err(|_| EncodeError::TooLong { len: b.len() })?;
            let _ = rmp::encode::write_bin_len(&mut out.writer(), len);
            out.extend_from_slice(b);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Refuses a container inside `depth` others once msgpack-python could not
/// read it.
pub(crate) fn check_depth(depth: usize) -> Result<(), EncodeError> {
    if depth >= PYTHON_MAX_DEPTH {
        return Err(EncodeError::DepthExceeded {
            limit: PYTHON_MAX_DEPTH,
        });
    }
    Ok(())
}

fn put_int(out: &mut BytesMut, v: i64) {
    match u64::try_from(v) {
        Ok(u) => put_uint(out, u),
        Err(_) => {
            let _ = rmp::encode::write_sint(&mut out.writer(), v);
        }
    }
}

fn put_uint(out: &mut BytesMut, v: u64) {
    if v < 0x80 {
        out.put_u8(v as u8); // positive fixint: the common case, inline
        return;
    }
    let _ = rmp::encode::write_uint(&mut out.writer(), v);
}

/// Writes an array's length prefix.
pub(crate) fn put_array_len(out: &mut BytesMut, len: usize) -> Result<(), EncodeError> {
    let len = u32::try_from(len).map_err(|_| EncodeError::TooLong { len })?;
    let _ = rmp::encode::write_array_len(&mut out.writer(), len);
    Ok(())
}

/// Writes an array of integers, as the `Array` of their `Int`s would be.
pub(crate) fn put_ints(out: &mut BytesMut, items: &[i64]) -> Result<(), EncodeError> {
    put_array_len(out, items.len())?;
    out.reserve(items.len());
    items.iter().for_each(|&x| put_int(out, x));
    Ok(())
}

pub(crate) fn put_str(out: &mut BytesMut, s: &str) -> Result<(), EncodeError> {
    let len = u32::try_from(s.len()).map_err(|_| EncodeError::TooLong { len: s.len() })?;
    let _ = rmp::encode::write_str_len(&mut out.writer(), len);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// The keys that mark a placeholder in frame 0: a plain map may not use them.
pub(crate) const SERIALIZED_KEY: &str = "__Serialized__";
/// See [`SERIALIZED_KEY`].
pub(crate) const PICKLED_KEY: &str = "__Pickled__";

fn reserved_key(key: &str) -> Option<&'static str> {
    [SERIALIZED_KEY, PICKLED_KEY]
        .into_iter()
        .find(|r| *r == key)
}

fn put_map_len(out: &mut BytesMut, len: u32) {
    let _ = rmp::encode::write_map_len(&mut out.writer(), len);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `skim` must accept and refuse exactly what `decode` does, with the
    /// same error, and find the same `num-sub-frames`.
    fn agree(buf: &[u8], limits: &Limits) {
        let buf = Bytes::copy_from_slice(buf);
        let decoded = decode(&buf, 3, limits, &mut plain_map);
        let skimmed = skim(&buf, 3, limits, "num-sub-frames");
        match (&decoded, &skimmed) {
            (Ok(v), Ok(s)) => {
                assert_eq!(s.is_map, v.as_map().is_some(), "{buf:02x?}");
                assert_eq!(
                    s.int_at_key,
                    v.get("num-sub-frames").and_then(Value::as_int),
                    "{buf:02x?}"
                );
            }
            (Err(d), Err(s)) => assert_eq!(d, s, "{buf:02x?}"),
            _ => panic!(
                "decode {decoded:?} but skim {:?} for {buf:02x?}",
                skimmed.is_ok()
            ),
        }
    }

    #[test]
    fn skim_agrees_with_decode_on_mutated_sub_headers() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/captures");
        let mut seeds: Vec<Vec<u8>> = vec![
            b"\x82\xaenum-sub-frames\x01\xaenum-sub-frames\x02".to_vec(),
            b"\x81\xaenum-sub-frames\xc3".to_vec(),
            b"\x81\x01\xaenum-sub-frames".to_vec(),
            b"\x91\x81\xaenum-sub-frames\x01".to_vec(),
        ];
        for case in [
            "task_with_numpy",
            "sharded_4096",
            "msgpack_family",
            "topickle",
        ] {
            seeds.push(std::fs::read(format!("{dir}/{case}/frame_001.bin")).unwrap());
        }
        let mut tight = Limits::strict();
        tight.max_depth = 2;
        tight.max_msgpack_items = 12;
        if cfg!(miri) {
            // Every seed, but only the small ones: the captures' headers
            // times every mutation take hours under Miri.
            seeds.retain(|s| s.len() <= 64);
        }
        for seed in &seeds {
            for limits in [Limits::strict(), tight.clone()] {
                agree(seed, &limits);
                for cut in 0..seed.len() {
                    agree(&seed[..cut], &limits);
                }
                for i in 0..seed.len() {
                    for byte in [0x00, 0x7f, 0x80, 0xc1, 0xd9, 0xdc, 0xde, 0xff] {
                        let mut m = seed.clone();
                        m[i] = byte;
                        agree(&m, &limits);
                    }
                }
            }
        }
    }

    /// `decode_packed` must accept and refuse exactly what `decode` does
    /// (same error), give an equal value, and pack exactly the arrays of at
    /// least `pack_min` items that are all integers in `i64`'s range.
    fn packed_agrees(buf: &[u8], limits: &Limits, pack_min: usize) {
        let buf = Bytes::copy_from_slice(buf);
        let plain = decode(&buf, 0, limits, &mut plain_map);
        let packed = decode_packed(&buf, 0, limits, pack_min);
        match (&plain, &packed) {
            (Ok(p), Ok(q)) => {
                assert_eq!(p, q, "{buf:02x?}");
                assert_packed_exactly(p, q, pack_min);
            }
            (Err(p), Err(q)) => assert_eq!(p, q, "{buf:02x?}"),
            _ => panic!("decode {plain:?} but decode_packed {packed:?} for {buf:02x?}"),
        }
    }

    fn assert_packed_exactly(plain: &Value, packed: &Value, pack_min: usize) {
        match (plain, packed) {
            (Value::Array(a), Value::IntArray(p)) => {
                assert!(a.len() >= pack_min && a.len() == p.len());
            }
            (Value::Array(a), Value::Array(b)) => {
                let all_i64 = a
                    .iter()
                    .all(|v| v.as_int().and_then(Integer::as_i64).is_some());
                assert!(a.len() < pack_min || !all_i64, "not packed: {a:?}");
                for (x, y) in a.iter().zip(b) {
                    assert_packed_exactly(x, y, pack_min);
                }
            }
            (Value::Map(a), Value::Map(b)) => {
                for ((k, x), (l, y)) in a.iter().zip(b) {
                    assert_packed_exactly(k, l, pack_min);
                    assert_packed_exactly(x, y, pack_min);
                }
            }
            (p, q) => assert_eq!(p, q),
        }
    }

    #[test]
    fn packed_decoding_covers_every_int_form_and_agrees_with_decode() {
        // Every integer form at its edges, in i64's range.
        let ints: Vec<i64> = vec![
            0,
            1,
            127,
            128,
            255,
            256,
            65535,
            65536,
            1 << 32,
            i64::MAX,
            -1,
            -32,
            -33,
            -128,
            -129,
            -32768,
            -32769,
            -(1 << 31) - 1,
            i64::MIN,
        ];
        let mut buf = BytesMut::new();
        encode_into(
            &Value::from(ints.clone()),
            &mut buf,
            usize::MAX,
            &mut |_, _| Err(EncodeError::OutOfBandInHeader),
        )
        .unwrap();
        let buf = buf.freeze();
        let v = decode_packed(&buf, 0, &Limits::strict(), 4).unwrap();
        assert_eq!(v.as_int_array(), Some(&ints[..]));
        assert_eq!(
            encode(&v).unwrap(),
            buf,
            "IntArray encodes as the Array does"
        );
        let boxed = Value::Array(ints.iter().map(|&x| Value::from(x)).collect());
        assert_eq!(encode(&boxed).unwrap(), buf);
        // Below pack_min: a plain array.
        assert!(decode_packed(&buf, 0, &Limits::strict(), 20)
            .unwrap()
            .as_array()
            .is_some());

        let seeds: Vec<Vec<u8>> = vec![
            buf.to_vec(),
            // u64 above i64::MAX in the middle, then more ints: unpacked.
            b"\x95\x01\x02\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x03\x04".to_vec(),
            // A string last, a nested packed array, a map of arrays.
            b"\x94\x01\x02\x03\xa1x".to_vec(),
            b"\x92\x94\x01\x02\x03\x04\x94\xd0\x80\xd1\x80\x00\x00\xc0".to_vec(),
            b"\x81\xa1k\x94\x01\xcc\x80\xcd\x01\x00\xce\x00\x01\x00\x00".to_vec(),
        ];
        let mut tight = Limits::strict();
        tight.max_msgpack_items = 6;
        let seeds = if cfg!(miri) { &seeds[1..2] } else { &seeds[..] }; // hours under Miri
        for seed in seeds {
            for limits in [Limits::strict(), tight.clone()] {
                for pack_min in [1, 4, 5] {
                    packed_agrees(seed, &limits, pack_min);
                    for cut in 0..seed.len() {
                        packed_agrees(&seed[..cut], &limits, pack_min);
                    }
                    for i in 0..seed.len() {
                        for byte in [
                            0x00, 0x7f, 0x80, 0xa1, 0xc0, 0xcc, 0xcf, 0xd0, 0xd3, 0xe0, 0xff,
                        ] {
                            let mut m = seed.clone();
                            m[i] = byte;
                            packed_agrees(&m, &limits, pack_min);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn raw_maps_are_read_and_set_in_place() {
        let map = Value::Map(vec![
            (Value::str("a"), 1u8.into()),
            (2u8.into(), Value::str("x")),
            (Value::str("a"), 3u8.into()),
            (
                Value::str("b"),
                Value::Array(vec![Value::Nil, Value::str("y")]),
            ),
        ]);
        let raw = encode(&map).unwrap();
        let (read, end) = RawMap::read_noting_items(&raw, 0, Some("b"))
            .unwrap()
            .unwrap();
        assert_eq!(end, raw.len());
        // The first entry with a key counts; non-str keys are never found.
        assert_eq!(
            decode_range(&raw, read.get("a").unwrap(), 1).unwrap(),
            1u8.into()
        );
        assert!(read.has("b") && !read.has("x") && !read.has("2"));
        assert_eq!(read.str("a"), None);
        let items = read.items().unwrap();
        assert_eq!(items.len(), 3, "two items, then the end");
        assert_eq!(
            decode_range(&raw, items[1]..items[2], 1).unwrap(),
            Value::str("y")
        );
        assert!(RawMap::read(&encode(&Value::Nil).unwrap(), 0)
            .unwrap()
            .is_none());

        // Dict assignment: the first "a" takes the value in place, the rest
        // are copied, a new key is appended.
        let set = set_entries(&raw, &[("a", &9u8.into()), ("c", &Value::Nil)]).unwrap();
        let back = decode(&set, 0, &CHECKED, &mut plain_map).unwrap();
        assert_eq!(
            back,
            Value::Map(vec![
                (Value::str("a"), 9u8.into()),
                (2u8.into(), Value::str("x")),
                (Value::str("a"), 3u8.into()),
                (
                    Value::str("b"),
                    Value::Array(vec![Value::Nil, Value::str("y")])
                ),
                (Value::str("c"), Value::Nil),
            ])
        );
        assert_eq!(
            set_entries(&encode(&Value::Nil).unwrap(), &[("a", &Value::Nil)]),
            Err(EncodeError::HeaderNotMap)
        );
    }
}
