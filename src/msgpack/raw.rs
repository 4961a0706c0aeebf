//! Reading msgpack in place: maps whose entries are found without being
//! decoded ([`RawMap`]), values set in a map's bytes ([`set_entries`]), and
//! frames checked without building anything ([`skim`]).

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use super::decode::decode_packed;
use super::encode::{encode_into, len_prefix_width, put_map_len, put_str, set_map_len, Leaves};
use super::head::{head, Head, NIL};
use super::peek::is_map_at;
use super::reader::{is_text, read_item, skip_value, Cursor, Item, CHECKED};
use super::MsgpackError;
use crate::error::EncodeError;
use crate::limits::Limits;
use crate::value::{Integer, Value};

/// A msgpack map read in place: where each entry's key text (for str keys)
/// and value lie in the buffer. Nothing is decoded until asked for, so the
/// serialize layer reads headers (and finds each sub-header of a million-
/// element collection) without building a `Value` per entry.
pub(crate) struct RawMap<'a> {
    buf: &'a Bytes,
    entries: SmallVec<[RawEntry; 6]>,
    /// See [`RawMap::read_noting_items`].
    items: Option<ArrayItems>,
}

/// Where the items of an array lie, found while stepping over it (see
/// [`RawMap::read_noting_items`]): nothing is kept per item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArrayItems {
    /// How many items.
    pub(crate) count: usize,
    /// Where the first item starts (the array's end when it has none).
    pub(crate) start: usize,
    /// Where the last item ends.
    pub(crate) end: usize,
    /// Whether every item is a map.
    pub(crate) all_maps: bool,
    /// When every item (at least one) is an encoding the caller's `known`
    /// knows, all of this one length: the length. A caller whose known
    /// encodings have distinct lengths then knows every item is the first
    /// one's encoding without comparing them again.
    pub(crate) same_known: Option<usize>,
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
    ) -> Result<Option<(RawMap<'a>, usize)>, MsgpackError> {
        Self::read_noting_items(buf, pos, None, |_| None)
    }

    /// [`RawMap::read`], noting on the way where the items of the array under
    /// `items_of` lie (see [`RawMap::items`]): a collection header's
    /// sub-headers are found in the same pass that steps over them. When
    /// `known` says that an item's bytes begin with one of the encodings it
    /// knows (each one whole map), giving that encoding's length, the item
    /// is exactly it and is stepped over without parsing.
    pub(crate) fn read_noting_items(
        buf: &'a Bytes,
        pos: usize,
        mut items_of: Option<&str>,
        known: impl Fn(&[u8]) -> Option<usize>,
    ) -> Result<Option<(RawMap<'a>, usize)>, MsgpackError> {
        let mut rd = Cursor::new(buf, 0, &CHECKED)?;
        rd.pos = pos;
        let Item::Container { len, is_map: true } = read_item(&mut rd)? else {
            return Ok(None);
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
                items = array_items(&mut rd, &known)?;
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

    /// Where the items of the array under the `items_of` key lie (see
    /// [`RawMap::read_noting_items`]); `None` if there was no such key or its
    /// value is not an array.
    pub(crate) fn items(&self) -> Option<ArrayItems> {
        self.items
    }

    /// The value under `key`, decoded.
    pub(crate) fn value(&self, key: &str) -> Result<Option<Value>, MsgpackError> {
        self.get(key)
            .map(|r| decode_range(self.buf, r, usize::MAX))
            .transpose()
    }

    /// The value under `key`, decoded, with every integer array packed (for
    /// the integer tables: `frame-lengths`, `split-*`).
    pub(crate) fn table(&self, key: &str) -> Result<Option<Value>, MsgpackError> {
        self.get(key)
            .map(|r| decode_range(self.buf, r, 1))
            .transpose()
    }

    /// The length of the array under `key` when every item of it is nil (a
    /// `compression` list with nothing compressed), found from its bytes.
    pub(crate) fn nils(&self, key: &str) -> Option<usize> {
        let range = self.get(key)?;
        let (len, false, first) = container_at(self.buf, range.start)? else {
            return None;
        };
        let items = &self.buf[first..range.end];
        let len = usize::try_from(len).ok()?;
        (items.len() == len && items.iter().all(|&b| b == NIL)).then_some(len)
    }

    /// The items of the array under `key` when every one is a positive
    /// fixint (`0..=127`, one byte each: a collection's `frame-lengths`
    /// when no element has 128 frames or more), found from its bytes.
    pub(crate) fn fixints(&self, key: &str) -> Option<&'a [u8]> {
        let range = self.get(key)?;
        let (len, false, first) = container_at(self.buf, range.start)? else {
            return None;
        };
        let items = &self.buf[first..range.end];
        let len = usize::try_from(len).ok()?;
        (items.len() == len && items.iter().all(|&b| b < 0x80)).then_some(items)
    }

    /// The text under `key`, if it is a str.
    pub(crate) fn str(&self, key: &str) -> Option<&'a str> {
        let range = self.get(key)?;
        let mut rd = Cursor::new(self.buf, 0, &CHECKED).ok()?;
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
) -> Result<Value, MsgpackError> {
    decode_packed(&buf.slice(range), 0, &CHECKED, pack_min)
}

/// Where the items of the array at the reader lie, stepping over it (an
/// item `known` knows, a map, by its length); `None` (nothing read) when
/// the value there is not an array.
fn array_items(
    rd: &mut Cursor<'_>,
    known: &impl Fn(&[u8]) -> Option<usize>,
) -> Result<Option<ArrayItems>, MsgpackError> {
    let pos = rd.pos;
    let Item::Container { len, is_map: false } = read_item(rd)? else {
        rd.pos = pos;
        return Ok(None);
    };
    rd.check_len(pos, len, 1)?;
    let start = rd.pos;
    let mut all_maps = true;
    // The length every item so far is a known encoding of; `None` once
    // one is not known, or of another length.
    let mut same = None;
    for i in 0..len {
        match known(&rd.buf[rd.pos..]) {
            Some(len) => {
                if i == 0 {
                    same = Some(len);
                } else if same != Some(len) {
                    same = None;
                }
                rd.pos += len; // one whole map, so the item is exactly it
            }
            None => {
                same = None;
                all_maps &= is_map_at(rd.buf, rd.pos);
                skip_value(rd)?;
            }
        }
    }
    Ok(Some(ArrayItems {
        count: len as usize, // checked against the bytes
        start,
        end: rd.pos,
        all_maps,
        same_known: same,
    }))
}

/// Where the one value at `buf[pos]` (checked bytes) ends.
pub(crate) fn value_end(buf: &Bytes, pos: usize) -> Result<usize, MsgpackError> {
    let mut rd = Cursor::new(buf, 0, &CHECKED)?;
    rd.pos = pos;
    skip_value(&mut rd)?;
    Ok(rd.pos)
}

/// The container whose header is at `buf[pos]`, as [`read_item`] reads it:
/// its length, whether it is a map, and where its first item starts.
fn container_at(buf: &Bytes, pos: usize) -> Option<(u64, bool, usize)> {
    let mut rd = Cursor::new(buf, 0, &CHECKED).ok()?;
    rd.pos = pos;
    match read_item(&mut rd).ok()? {
        Item::Container { len, is_map } => Some((len, is_map, rd.pos)),
        _ => None,
    }
}

/// `raw` (a msgpack map) with `entries` set as Python dict assignment does:
/// a key already there keeps its place and takes the new value, the others
/// are appended in order. The new values are encoded with `leaves`. See
/// [`set_entries_with`]; with `known_new` (the caller knows `raw` has none
/// of the keys), [`append_entries_with`], which reads only the map's length.
pub(crate) fn set_entries(
    raw: Bytes,
    entries: &[(&str, &Value)],
    leaves: &mut impl Leaves,
    known_new: bool,
) -> Result<Bytes, EncodeError> {
    let keys: SmallVec<[&str; 4]> = entries.iter().map(|(k, _)| *k).collect();
    let write = |i: usize, out: &mut BytesMut| encode_into(entries[i].1, out, leaves);
    if known_new {
        append_entries_with(raw, &keys, write)
    } else {
        Ok(set_entries_with(raw, &keys, write, NOTING_NOTHING, None)?.0)
    }
}

/// What [`RawMap::read_noting_items`] may be told: the key of the array
/// whose items to note, and the item encodings it may step over.
type Noting<'a> = Option<(&'a str, fn(&[u8]) -> Option<usize>)>;

/// No array's items noted while a map is read (see [`set_entries_with`]).
const NOTING_NOTHING: Noting<'static> = None;

/// [`set_entries`], the value of `keys[i]` written by `write(i, out)` (once
/// each), and the map read as [`RawMap::read_noting_items`] reads it with
/// `noting`'s `items_of` and `known` (a header's sub-headers stepped over by
/// their bytes). Also says whether the map has the key `probe`, if one is
/// given.
///
/// When every key is new, the entries are appended as
/// [`append_entries_with`] does. Otherwise the other entries are copied byte
/// for byte into a new buffer.
pub(crate) fn set_entries_with(
    raw: Bytes,
    keys: &[&str],
    mut write: impl FnMut(usize, &mut BytesMut) -> Result<(), EncodeError>,
    noting: Option<(&str, impl Fn(&[u8]) -> Option<usize>)>,
    probe: Option<&str>,
) -> Result<(Bytes, bool), EncodeError> {
    let bad = || EncodeError::HeaderNotMap;
    let read = match noting {
        Some((items_of, known)) => RawMap::read_noting_items(&raw, 0, Some(items_of), known),
        None => RawMap::read_noting_items(&raw, 0, None, |_| None),
    };
    let (map, end) = read.ok().flatten().ok_or_else(bad)?;
    if end != raw.len() {
        return Err(bad());
    }
    let has_probe = probe.is_some_and(|k| map.has(k));
    let appended = keys.iter().filter(|k| !map.has(k)).count();
    if appended == keys.len() {
        drop(map);
        return Ok((append_entries_with(raw, keys, write)?, has_probe));
    }
    let new_len = u32::try_from(map.entries.len() + appended).map_err(|_| bad())?;
    let mut out = BytesMut::with_capacity(raw.len() + 64);
    put_map_len(&mut out, new_len);
    let mut done = vec![false; keys.len()];
    for e in &map.entries {
        let key_text = e.key.as_ref().map(|k| &raw[k.clone()]);
        match keys.iter().position(|k| key_text == Some(k.as_bytes())) {
            // The first entry with the key takes the value (as `Value::get`
            // finds it); later duplicates stay as they were.
            Some(i) if !done[i] => {
                done[i] = true;
                out.extend_from_slice(&raw[e.start..e.value.start]);
                write(i, &mut out)?;
            }
            _ => out.extend_from_slice(&raw[e.start..e.value.end]),
        }
    }
    for (i, (key, done)) in keys.iter().zip(done).enumerate() {
        if !done {
            put_str(&mut out, key)?;
            write(i, &mut out)?;
        }
    }
    Ok((out.freeze(), has_probe))
}

/// `raw` (a msgpack map known to have none of `keys`) with the value of
/// `keys[i]` written by `write(i, out)` appended, as [`set_entries_with`]
/// would, but only the map's length is read.
///
/// When `raw` is the only handle on its buffer (a header just written) and
/// its length prefix keeps its size, the entries are appended to that
/// buffer and the length is rewritten in place: nothing is copied.
/// Otherwise the map's entries are copied, as bytes, after a new prefix.
pub(crate) fn append_entries_with(
    raw: Bytes,
    keys: &[&str],
    mut write: impl FnMut(usize, &mut BytesMut) -> Result<(), EncodeError>,
) -> Result<Bytes, EncodeError> {
    let bad = || EncodeError::HeaderNotMap;
    let Some((old_len, true, prefix)) = container_at(&raw, 0) else {
        return Err(bad());
    };
    let old_len = u32::try_from(old_len).map_err(|_| bad())?;
    let new_len = u32::try_from(keys.len())
        .ok()
        .and_then(|n| old_len.checked_add(n))
        .ok_or_else(bad)?;
    let mut buf = if prefix == len_prefix_width(new_len as usize) && raw.is_unique() {
        let mut buf = raw.try_into_mut().map_err(|_| bad())?;
        set_map_len(&mut buf, 0, new_len);
        buf
    } else {
        let mut out = BytesMut::with_capacity(raw.len() + 64);
        put_map_len(&mut out, new_len);
        out.extend_from_slice(&raw[prefix..]);
        out
    };
    for (i, key) in keys.iter().enumerate() {
        put_str(&mut buf, key)?;
        write(i, &mut buf)?;
    }
    Ok(buf.freeze())
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
/// ([`Header::map`](crate::Header::map)).
pub(crate) fn skim(
    buf: &Bytes,
    frame: usize,
    limits: &Limits,
    key: &str,
) -> Result<Skimmed, MsgpackError> {
    if let Some(flat) = skim_flat(buf, limits, key) {
        return Ok(flat);
    }
    let mut rd = Cursor::new(buf, frame, limits)?;
    /// An open container: items still to read, whether it is an array,
    /// where it starts, and the items counted before it.
    struct Open {
        left: u64,
        is_array: bool,
        start: usize,
        counted_before: usize,
    }
    /// The last container completed as an item of an array: its bytes, the
    /// items in it (itself included), and its depth.
    struct Done {
        bytes: Range<usize>,
        items: usize,
        depth: usize,
    }
    // Sub-headers nest a few levels: no allocation for them.
    let mut stack: smallvec::SmallVec<[Open; 8]> = smallvec::SmallVec::new();
    let mut done: Option<Done> = None;
    let mut out = Skimmed {
        is_map: is_map_at(buf, 0),
        int_at_key: None,
    };
    let mut items_seen: usize = 0;
    let mut want_value = false;
    let mut seen_key = false;
    loop {
        let start = rd.pos;
        // An item byte for byte the container the array's previous item was
        // (a collection header's sub-headers): checked as that one was, at
        // the same depth, so valid; stepped over when the item budget holds
        // it (so that a budget error stands where decode reports it).
        let copy = match (&done, stack.last()) {
            (Some(d), Some(top)) => {
                top.is_array
                    && d.depth == stack.len()
                    && buf.get(start) == buf.get(d.bytes.start)
                    && buf[start..].starts_with(&buf[d.bytes.clone()])
                    && items_seen + d.items <= limits.max_msgpack_items
            }
            _ => false,
        };
        // Inside the top-level map, an even number of items left means a key.
        let top_level_key = out.is_map && stack.len() == 1 && stack[0].left.is_multiple_of(2);
        let top_level_value = out.is_map && stack.len() == 1 && stack[0].left % 2 == 1;
        if let (true, Some(d)) = (copy, &done) {
            rd.pos = start + d.bytes.len();
            items_seen += d.items;
        } else if !(top_level_value && want_value)
            && matches!(
                head(buf, start),
                Some((Head::Nil | Head::Bool(_) | Head::Int(_), 1))
            )
        {
            // A one-byte scalar (the bulk of a table: small integers, nils)
            // where its value is not wanted: counted and stepped over.
            rd.count_item(&mut items_seen, start, limits)?;
            rd.pos = start + 1;
        } else {
            rd.count_item(&mut items_seen, start, limits)?;
            match read_item(&mut rd)? {
                Item::Container { len, is_map } => {
                    let n = rd.open_container(start, len, is_map, stack.len())?;
                    if n > 0 {
                        stack.push(Open {
                            left: n,
                            is_array: !is_map,
                            start,
                            counted_before: items_seen - 1,
                        });
                        want_value = false;
                        continue;
                    }
                }
                Item::Str {
                    start: from,
                    end,
                    at,
                } => {
                    let text = &buf[from..end];
                    if !is_text(text) {
                        return Err(MsgpackError::InvalidUtf8(rd.at(at)));
                    }
                    if top_level_key {
                        // The first entry with this key counts, as in `Value::get`.
                        want_value = text == key.as_bytes() && !seen_key;
                        seen_key |= want_value;
                        if let Some(top) = stack.last_mut() {
                            top.left -= 1;
                        }
                        continue;
                    }
                }
                Item::Int(i) if top_level_value && want_value => {
                    out.int_at_key = Some(i);
                }
                Item::Nil | Item::Bool(_) | Item::Int(_) | Item::Float(_) | Item::Bin { .. } => {}
            }
        }
        want_value = false;
        // Close every container this item completes.
        loop {
            let Some(top) = stack.last_mut() else {
                if rd.pos != buf.len() {
                    return Err(MsgpackError::TrailingBytes(rd.at(rd.pos)));
                }
                return Ok(out);
            };
            top.left -= 1;
            if top.left > 0 {
                break;
            }
            let closed = stack.pop().expect("a top level exists");
            if stack.last().is_some_and(|p| p.is_array) {
                done = Some(Done {
                    bytes: closed.start..rd.pos,
                    items: items_seen - closed.counted_before,
                    depth: stack.len(),
                });
            }
        }
    }
}

/// [`skim`] of the sub-header most blocks have, in one pass: a fixmap whose
/// keys are ASCII fixstrs and whose values are nil, bools, numbers, ASCII
/// strs, bins or empty containers, within the limits (its items, a depth of
/// two, its length). The answer `skim` gives, or `None` for anything else
/// (`skim` reads it item by item then, and reports its errors).
fn skim_flat(buf: &[u8], limits: &Limits, key: &str) -> Option<Skimmed> {
    let &marker = buf.first()?;
    let entries = usize::from(marker.checked_sub(0x80).filter(|&n| n <= 0x0f)?);
    if buf.len() as u64 > limits.max_header_len
        || limits.max_depth < 2
        || 1 + 2 * entries > limits.max_msgpack_items
    {
        return None;
    }
    let mut out = Skimmed {
        is_map: true,
        int_at_key: None,
    };
    let mut seen_key = false;
    let mut pos = 1;
    for _ in 0..entries {
        let len = usize::from(buf.get(pos)?.checked_sub(0xa0).filter(|&n| n <= 0x1f)?);
        let text = buf.get(pos + 1..pos + 1 + len)?;
        if !text.is_ascii() {
            return None;
        }
        pos += 1 + len;
        // The first entry with this key counts, as in `Value::get`.
        let want_value = !seen_key && text == key.as_bytes();
        seen_key |= want_value;
        let (value, width) = head(buf, pos)?;
        let from = pos + width;
        pos = match value {
            Head::Int(i) => {
                if want_value {
                    out.int_at_key = Some(i);
                }
                from
            }
            Head::Nil | Head::Bool(_) | Head::Float(_) | Head::Array(0) | Head::Map(0) => from,
            Head::Str(n) => {
                let text = buf.get(from..from.checked_add(usize::try_from(n).ok()?)?)?;
                if !text.is_ascii() {
                    return None;
                }
                from + text.len()
            }
            Head::Bin(n) => {
                Some(from.checked_add(usize::try_from(n).ok()?)?).filter(|&end| end <= buf.len())?
            }
            _ => return None,
        };
    }
    (pos == buf.len()).then_some(out)
}

/// The str under `key` in the map at `buf[pos]`, looked up without decoding:
/// `Some(Some(text))` when the map's first entry with the str key `key` has
/// a str value, `Some(None)` when the map has no such entry or its value is
/// anything else but a map. `None` when it cannot tell: the value is a map,
/// a key before it is one (either could be a placeholder, whose block may
/// deserialize to a str), the value at `pos` is not a map, or the bytes are
/// malformed (the caller's full read reports them).
#[cfg(feature = "dask")]
pub(crate) fn lookup_str<'a>(buf: &'a Bytes, pos: usize, key: &str) -> Option<Option<&'a str>> {
    lookup_str_item(buf, pos, key).map(|found| found.map(|s| s.text))
}

/// A str [`lookup_str_item`] found: its text, and the bytes of its item
/// (head included) in the frame.
#[cfg(feature = "serde")]
#[derive(Clone, Copy)]
pub(crate) struct StrItem<'a> {
    pub(crate) text: &'a str,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// [`lookup_str`], with where the str is: a reader that meets it later
/// need not validate its UTF-8 again.
///
/// Heads are read in place (the one-byte ones inline), as the checked
/// reader reads them; an entry before the key's is stepped over by it.
#[cfg(feature = "serde")]
pub(crate) fn lookup_str_item<'a>(
    buf: &'a Bytes,
    pos: usize,
    key: &str,
) -> Option<Option<StrItem<'a>>> {
    let bytes: &'a [u8] = buf;
    // The bytes of the str or bin whose head at `at` is `width` bytes long
    // and declares `n` bytes: `None` when the frame ends before them.
    let body = |at: usize, width: usize, n: u32| {
        let from = at + width;
        let end = from.checked_add(usize::try_from(n).ok()?)?;
        (end <= bytes.len()).then_some(from..end)
    };
    let (Head::Map(len), width) = head(bytes, pos)? else {
        return None;
    };
    let mut rd = Cursor::new(buf, 0, &CHECKED).ok()?;
    rd.pos = pos + width;
    rd.check_len(pos, len.into(), 2).ok()?;
    for _ in 0..len {
        let key_start = rd.pos;
        match head(bytes, key_start)? {
            (Head::Str(n), w) => {
                let r = body(key_start, w, n)?;
                if &bytes[r.clone()] == key.as_bytes() {
                    let start = r.end;
                    return match head(bytes, start)? {
                        (Head::Str(n), w) => {
                            let r = body(start, w, n)?;
                            let text = super::reader::text(&bytes[r.clone()])?;
                            Some(Some(StrItem {
                                text,
                                start,
                                end: r.end,
                            }))
                        }
                        (Head::Bin(n), w) => body(start, w, n).map(|_| None),
                        (Head::Map(_) | Head::Ext(_) | Head::Reserved, _) => None,
                        _ => Some(None),
                    };
                }
            }
            (Head::Map(_), _) => return None,
            _ => {}
        }
        skip_value(&mut rd).ok()?;
        skip_value(&mut rd).ok()?;
    }
    Some(None)
}

/// The one value at `buf[pos]`, decoded with every map plain (for messages
/// about a value already read under real limits); `None` if it is not whole.
#[cfg(feature = "serde")]
pub(crate) fn value_at(buf: &Bytes, pos: usize) -> Option<Value> {
    let mut rd = Cursor::new(buf, 0, &CHECKED).ok()?;
    rd.pos = pos;
    skip_value(&mut rd).ok()?;
    decode_range(buf, pos..rd.pos, usize::MAX).ok()
}
