//! Decoding: one msgpack frame into a [`Value`], iteratively (an explicit
//! stack, never recursion input can drive), zero-copy (str and bin are
//! slices of the frame), bounded by [`Limits`].

use bytes::Bytes;
use bytestring::ByteString;

use super::head::{head, is_fixpos, Head};
use super::reader::{read_item, Cursor, Item};
use super::{MsgpackError, Position};
use crate::limits::Limits;
use crate::value::{Integer, Value};

/// What the decoder does with each map once its entries are complete: the
/// message layer turns placeholders into blocks; anything else keeps maps
/// as they are ([`plain_map`]). Its error type is the caller's.
pub(crate) type MapHook<'h, E> = dyn FnMut(Vec<(Value, Value)>, Position) -> Result<Value, E> + 'h;

/// The map hook that keeps every map as plain data.
pub(crate) fn plain_map(entries: Vec<(Value, Value)>, _: Position) -> Result<Value, MsgpackError> {
    Ok(Value::Map(entries))
}

/// A container being filled.
struct Open {
    /// Contents (for a map: keys and values counted apart) still to read.
    remaining: u64,
    items: Contents,
    /// Capacity reserved for `items` ahead of data, returned to the shared
    /// budget when the container closes.
    reserved: usize,
    start: usize,
}

/// The items of an open container; a map keeps its key until the value comes.
enum Contents {
    Array(Vec<Value>),
    /// An array being packed; it becomes an `Array` at its first item that
    /// is not an integer in `i64`'s range.
    Ints(Vec<i64>),
    Map(Vec<(Value, Value)>, Option<Value>),
}

/// Decodes `buf` (frame `frame` of a message) as exactly one msgpack value.
///
/// Every map is passed to `hook` when complete. Str and bin values are
/// slices of `buf`. Errors carry the frame and byte offset.
pub(crate) fn decode<E: From<MsgpackError>>(
    buf: &Bytes,
    frame: usize,
    limits: &Limits,
    hook: &mut MapHook<'_, E>,
) -> Result<Value, E> {
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
) -> Result<Value, MsgpackError> {
    if let Some(b) = lone_fixpos(buf, limits) {
        return Ok(Value::from(b)); // an element's frame
    }
    decode_with(buf, frame, limits, &mut plain_map, pack_min)
}

/// The value of a frame that is one positive fixint, as [`decode`] gives
/// it under `limits` (which must allow one item of one byte).
#[inline]
pub(crate) fn lone_fixpos(buf: &[u8], limits: &Limits) -> Option<u8> {
    match *buf {
        [b] if is_fixpos(b) && limits.max_msgpack_items > 0 && limits.max_header_len > 0 => Some(b),
        _ => None,
    }
}

fn decode_with<E: From<MsgpackError>>(
    buf: &Bytes,
    frame: usize,
    limits: &Limits,
    hook: &mut MapHook<'_, E>,
    pack_min: usize,
) -> Result<Value, E> {
    let mut rd = Cursor::new(buf, frame, limits)?;
    let mut items_seen: usize = 0;
    let value = decode_one(&mut rd, 0, &mut items_seen, hook, pack_min)?;
    if rd.pos != buf.len() {
        return Err(MsgpackError::TrailingBytes(rd.at(rd.pos)).into());
    }
    Ok(value)
}

/// Decodes the one value at the reader, which sits inside `base` containers
/// already, counting its items into `items_seen` (shared with whoever reads
/// the rest of the frame, [`Stream`](super::Stream)), and leaves the reader
/// after it.
pub(super) fn decode_one<E: From<MsgpackError>>(
    rd: &mut Cursor<'_>,
    base: usize,
    items_seen: &mut usize,
    hook: &mut MapHook<'_, E>,
    pack_min: usize,
) -> Result<Value, E> {
    let buf = rd.buf;
    let limits = rd.limits;
    // Most values nest a few levels: no allocation for them.
    let mut stack: smallvec::SmallVec<[Open; 4]> = smallvec::SmallVec::new();
    // How many `Value`s may be reserved ahead of data, shared by every open
    // container (nested containers must not each reserve `prealloc_cap`).
    let mut prealloc_left = (limits.prealloc_cap / std::mem::size_of::<Value>()).max(1);

    loop {
        let start = rd.pos;
        rd.count_item(items_seen, start, limits)?;
        let mut value = match read_item(rd)? {
            Item::Nil => Value::Nil,
            Item::Bool(b) => Value::Bool(b),
            Item::Int(i) => Value::Int(i),
            Item::Float(f) => Value::Float(f),
            Item::Bin { start, end } => Value::Bin(buf.slice(start..end)),
            Item::Str { start, end, at } => Value::Str(
                ByteString::try_from(buf.slice(start..end))
                    .map_err(|_| MsgpackError::InvalidUtf8(rd.at(at)))?,
            ),
            Item::Container { len, is_map } => {
                let n = rd.open_container(start, len, is_map, base + stack.len())?;
                if n == 0 {
                    let empty = if is_map {
                        Contents::Map(Vec::new(), None)
                    } else {
                        Contents::Array(Vec::new())
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
                        Contents::Map(Vec::with_capacity(cap), None)
                    } else if n >= pack_min as u64 {
                        Contents::Ints(Vec::with_capacity(cap))
                    } else {
                        Contents::Array(Vec::with_capacity(cap))
                    };
                    let mut open = Open {
                        remaining: n,
                        items,
                        reserved: cap * per_item,
                        start,
                    };
                    if let Contents::Ints(ints) = &mut open.items {
                        read_ints(rd, ints, &mut open.remaining, items_seen, limits);
                    }
                    stack.push(open);
                    continue;
                }
            }
        };
        // Put the finished value into its parent; close every parent it completes.
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(value);
            };
            match &mut top.items {
                Contents::Array(items) => items.push(value),
                Contents::Ints(ints) => match value.as_int().and_then(Integer::as_i64) {
                    Some(x) => ints.push(x),
                    // Not an i64 after all: unpack what came so far.
                    None => {
                        let mut items: Vec<Value> = ints.drain(..).map(Value::from).collect();
                        items.push(value);
                        top.items = Contents::Array(items);
                    }
                },
                Contents::Map(entries, key) => match key.take() {
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

fn finish<E>(items: Contents, at: Position, hook: &mut MapHook<'_, E>) -> Result<Value, E> {
    match items {
        Contents::Array(items) => Ok(Value::Array(items)),
        Contents::Ints(ints) => Ok(Value::IntArray(ints)),
        Contents::Map(entries, _) => hook(entries, at),
    }
}

/// How many leading bytes of `bytes` are positive fixints. Whole chunks are
/// tested at once (an OR of their bytes, which the compiler vectorizes), the
/// chunk holding the first other byte byte by byte.
fn fixpos_run(bytes: &[u8]) -> usize {
    const CHUNK: usize = 32;
    let whole = bytes
        .chunks_exact(CHUNK)
        .take_while(|c| is_fixpos(c.iter().fold(0, |a, &b| a | b)))
        .count()
        * CHUNK;
    whole
        + bytes[whole..]
            .iter()
            .position(|&b| !is_fixpos(b))
            .unwrap_or(bytes.len() - whole)
}

/// The fast path of a packed array: reads integers straight into `ints`
/// while they come, leaving the array's last item (which closes it), and
/// anything else, to the general loop. It stops short of every error, so the
/// general loop reports it exactly as [`decode`] would.
fn read_ints(
    rd: &mut Cursor<'_>,
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
        // A run of positive fixints (one byte each: the bulk of a tuple of
        // small integers), widened in one pass; its items are all present,
        // so nothing is reserved ahead of data.
        let window = &buf[pos.min(buf.len())..];
        let window = &window[..window.len().min(todo - done)];
        let run = fixpos_run(window);
        if run > 0 {
            ints.extend(window[..run].iter().map(|&b| i64::from(b)));
            pos += run;
            done += run;
            continue;
        }
        // Any other integer in i64's range; the general loop unpacks
        // above it.
        let Some((Head::Int(i), width)) = head(buf, pos) else {
            break;
        };
        let Some(x) = i.as_i64() else { break };
        ints.push(x);
        pos += width;
        done += 1;
    }
    rd.pos = pos;
    *remaining -= done as u64;
    *items_seen += done;
}
