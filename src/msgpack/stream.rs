//! Reading one frame item by item, for a caller that builds its own values
//! (the typed layer's direct path): the same reader, checks and counters as
//! [`decode`](super::decode), so a frame read this way is accepted or
//! refused exactly as decoding it would be.

use std::ops::Range;

use bytes::Bytes;

use super::decode::{decode_one, MapHook};
use super::reader::{read_item, Cursor, Item};
use super::{MsgpackError, Position};
use crate::limits::Limits;
use crate::value::{Integer, Value};

/// One item of the frame. Str and bin borrow from the frame; a container is
/// its header only (its items follow).
pub(crate) enum Token<'a> {
    Nil,
    Bool(bool),
    Int(Integer),
    Float(f64),
    Str(&'a str),
    Bin(&'a [u8]),
    Array(u64),
    Map(u64),
}

/// A container [`Stream::enter`] stepped into.
#[derive(Clone, Copy)]
pub(crate) struct Entered {
    /// How many items may be reserved ahead of data.
    pub(crate) hint: usize,
    reserved: usize,
}

/// A reader over one msgpack frame that hands out items one at a time. The
/// caller says when it enters and leaves a container ([`Stream::enter`],
/// [`Stream::leave`]), so that depth is checked as [`decode`](super::decode)
/// checks it; items are counted against the same budget.
pub(crate) struct Stream<'a> {
    rd: Cursor<'a>,
    limits: &'a Limits,
    items_seen: usize,
    /// Containers open around the next item.
    depth: usize,
    /// Items still to reserve ahead of data, shared by the open containers
    /// (as [`decode`](super::decode) shares `prealloc_cap`).
    prealloc_left: usize,
}

impl<'a> Stream<'a> {
    /// A stream over frame `frame`, `buf`; refused outright when longer than
    /// [`Limits::max_header_len`].
    pub(crate) fn new(
        buf: &'a Bytes,
        frame: usize,
        limits: &'a Limits,
    ) -> Result<Stream<'a>, MsgpackError> {
        Ok(Stream {
            rd: Cursor::new(buf, frame, limits)?,
            limits,
            items_seen: 0,
            depth: 0,
            prealloc_left: (limits.prealloc_cap / std::mem::size_of::<Value>()).max(1),
        })
    }

    /// Containers open around the next item.
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// Where the next item starts.
    pub(crate) fn pos(&self) -> usize {
        self.rd.pos
    }

    /// `offset` as a position in the frame.
    pub(crate) fn at(&self, offset: usize) -> Position {
        self.rd.at(offset)
    }

    /// The next item. A container's item count is checked against the depth
    /// limit and the bytes that remain; its items are read next, inside
    /// [`Stream::enter`] and [`Stream::leave`].
    #[inline]
    pub(crate) fn next(&mut self) -> Result<Token<'a>, MsgpackError> {
        let start = self.rd.pos;
        self.rd
            .count_item(&mut self.items_seen, start, self.limits)?;
        let buf: &'a Bytes = self.rd.buf;
        // The one-byte forms most of a message is made of, read in place;
        // anything else (and every error) goes through `read_item`.
        match buf.get(start) {
            Some(&b @ 0x00..=0x7f) => {
                self.rd.pos += 1;
                return Ok(Token::Int(Integer::from(b)));
            }
            Some(&b @ 0xa0..=0xbf) => {
                let end = start + 1 + usize::from(b & 0x1f);
                if let Some(text) = buf.get(start + 1..end) {
                    let text = std::str::from_utf8(text)
                        .map_err(|_| MsgpackError::InvalidUtf8(self.rd.at(start)))?;
                    self.rd.pos = end;
                    return Ok(Token::Str(text));
                }
            }
            Some(&b @ 0x80..=0x9f) => {
                // fixmap, fixarray
                let (len, is_map) = (u64::from(b & 0x0f), b < 0x90);
                self.rd.pos += 1;
                self.rd
                    .open_container(start, len, is_map, self.depth, self.limits)?;
                return Ok(match is_map {
                    true => Token::Map(len),
                    false => Token::Array(len),
                });
            }
            _ => {}
        }
        Ok(match read_item(&mut self.rd)? {
            Item::Scalar(Value::Nil) => Token::Nil,
            Item::Scalar(Value::Bool(b)) => Token::Bool(b),
            Item::Scalar(Value::Int(i)) => Token::Int(i),
            Item::Scalar(Value::Float(f)) => Token::Float(f),
            Item::Scalar(_) => unreachable!("read_item gives only these scalars"),
            Item::Str { start, end, at } => Token::Str(
                std::str::from_utf8(&buf[start..end])
                    .map_err(|_| MsgpackError::InvalidUtf8(self.rd.at(at)))?,
            ),
            Item::Bin { start, end } => Token::Bin(&buf[start..end]),
            Item::Container { len, is_map } => {
                self.rd
                    .open_container(start, len, is_map, self.depth, self.limits)?;
                match is_map {
                    true => Token::Map(len),
                    false => Token::Array(len),
                }
            }
        })
    }

    /// Steps into a container of `len` items (as [`Stream::next`] gave it,
    /// each made of `values` values: 2 for a map entry): how many of them
    /// may be reserved ahead of data, a share of `prealloc_cap` given back
    /// by [`Stream::leave`].
    pub(crate) fn enter(&mut self, len: u64, values: usize) -> Entered {
        self.depth += 1;
        let hint = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(self.prealloc_left / values);
        self.prealloc_left -= hint * values;
        Entered {
            hint,
            reserved: hint * values,
        }
    }

    /// Steps out of a container [`Stream::enter`] entered.
    pub(crate) fn leave(&mut self, entered: Entered) {
        self.depth -= 1;
        self.prealloc_left += entered.reserved;
    }

    /// The whole value at the reader, decoded (maps through `hook`, as
    /// [`decode`](super::decode) does), counted and depth-checked as part
    /// of this frame.
    pub(crate) fn value<E: From<MsgpackError>>(
        &mut self,
        hook: &mut MapHook<'_, E>,
    ) -> Result<Value, E> {
        decode_one(
            &mut self.rd,
            self.depth,
            &mut self.items_seen,
            self.limits,
            hook,
            usize::MAX,
        )
    }

    /// Refuses bytes after the frame's one value.
    pub(crate) fn finish(&self) -> Result<(), MsgpackError> {
        match self.rd.pos == self.rd.buf.len() {
            true => Ok(()),
            false => Err(MsgpackError::TrailingBytes(self.rd.at(self.rd.pos))),
        }
    }
}

/// Whether the value at `buf[pos]` is a one-entry map whose key is the str
/// `a` or `b`. Looks only: malformed bytes answer `false`.
#[inline]
pub(crate) fn one_entry_map_keyed(buf: &[u8], pos: usize, a: &str, b: &str) -> bool {
    // Most values are no map of one entry: answered by their first byte.
    matches!(buf.get(pos), Some(0x81 | 0xde | 0xdf)) && keyed(buf, pos, a, b)
}

fn keyed(buf: &[u8], pos: usize, a: &str, b: &str) -> bool {
    let key_at = match buf.get(pos) {
        Some(0x81) => pos + 1,
        Some(0xde) if buf.get(pos + 1..pos + 3) == Some(&[0, 1]) => pos + 3,
        Some(0xdf) if buf.get(pos + 1..pos + 5) == Some(&[0, 0, 0, 1]) => pos + 5,
        _ => return false,
    };
    str_at(buf, key_at).is_some_and(|r| {
        let key = &buf[r];
        key == a.as_bytes() || key == b.as_bytes()
    })
}

/// The bytes of the str at `pos`, if a whole str is there.
pub(crate) fn str_at(buf: &[u8], pos: usize) -> Option<Range<usize>> {
    let (len, from) = match *buf.get(pos)? {
        b @ 0xa0..=0xbf => (usize::from(b & 0x1f), pos + 1),
        0xd9 => (usize::from(*buf.get(pos + 1)?), pos + 2),
        0xda => (
            usize::from(u16::from_be_bytes(
                buf.get(pos + 1..pos + 3)?.try_into().ok()?,
            )),
            pos + 3,
        ),
        0xdb => (
            usize::try_from(u32::from_be_bytes(
                buf.get(pos + 1..pos + 5)?.try_into().ok()?,
            ))
            .ok()?,
            pos + 5,
        ),
        _ => return None,
    };
    let end = from.checked_add(len)?;
    (end <= buf.len()).then_some(from..end)
}
