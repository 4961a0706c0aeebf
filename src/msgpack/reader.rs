//! The checked reader every msgpack path shares: [`decode`](super::decode),
//! `Stream`, [`skim`](super::skim) and [`RawMap`](super::RawMap) read items
//! (their heads classified by [`head`]) and check lengths, depth and the
//! item budget through it, so they accept and refuse exactly the same bytes.

use bytes::Bytes;

use super::head::{head, is_ext, Head};
use super::MsgpackError;
use super::Position;
use crate::limits::Limits;
use crate::value::Integer;

/// Limits for reading bytes that were already checked (by [`skim`](super::skim)
/// or [`decode`](super::decode) under the caller's limits): nothing left to
/// refuse.
pub(crate) const CHECKED: Limits = Limits::unchecked();

pub(super) struct Cursor<'a> {
    pub(super) buf: &'a Bytes,
    pub(super) pos: usize,
    frame: usize,
    /// The limits the frame is read under.
    pub(super) limits: &'a Limits,
}

impl<'a> Cursor<'a> {
    /// A reader over one msgpack frame, refused outright when it is longer
    /// than [`Limits::max_header_len`].
    #[inline]
    pub(super) fn new(
        buf: &'a Bytes,
        frame: usize,
        limits: &'a Limits,
    ) -> Result<Cursor<'a>, MsgpackError> {
        let len = buf.len() as u64;
        if len > limits.max_header_len {
            return Err(MsgpackError::HeaderTooLarge {
                frame,
                len,
                limit: limits.max_header_len,
            });
        }
        Ok(Cursor {
            buf,
            pos: 0,
            frame,
            limits,
        })
    }

    /// Counts one more item against [`Limits::max_msgpack_items`].
    pub(super) fn count_item(
        &self,
        seen: &mut usize,
        start: usize,
        limits: &Limits,
    ) -> Result<(), MsgpackError> {
        *seen += 1;
        if *seen > limits.max_msgpack_items {
            return Err(MsgpackError::ItemBudgetExceeded {
                at: self.at(start),
                limit: limits.max_msgpack_items,
            });
        }
        Ok(())
    }

    /// Checks a container that opens at `start` inside `depth` others: the
    /// depth limit, and its items against the bytes that remain. Returns how
    /// many items follow (a map's keys and values counted apart).
    pub(super) fn open_container(
        &self,
        start: usize,
        len: u64,
        is_map: bool,
        depth: usize,
    ) -> Result<u64, MsgpackError> {
        let limits = self.limits;
        if depth >= limits.max_depth {
            return Err(MsgpackError::DepthExceeded {
                at: self.at(start),
                limit: limits.max_depth,
            });
        }
        let units = if is_map { 2 } else { 1 };
        self.check_len(start, len, units)?;
        Ok(len * units) // cannot overflow: checked against the buffer
    }

    pub(super) fn at(&self, offset: usize) -> Position {
        Position {
            frame: self.frame,
            offset,
        }
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Checks a declared length against the bytes that remain (each declared
    /// unit needs at least `unit` bytes), before anything is sliced or reserved.
    pub(super) fn check_len(
        &self,
        start: usize,
        declared: u64,
        unit: u64,
    ) -> Result<(), MsgpackError> {
        let remaining = self.remaining() as u64;
        match declared.checked_mul(unit) {
            Some(need) if need <= remaining => Ok(()),
            _ => Err(MsgpackError::LengthExceedsRemaining {
                at: self.at(start),
                declared,
                remaining,
            }),
        }
    }

    /// Steps over the next `len` bytes (checked against what remains) and
    /// returns their range.
    pub(super) fn skip(&mut self, start: usize, len: u64) -> Result<(usize, usize), MsgpackError> {
        self.check_len(start, len, 1)?;
        // Checked against the bytes that remain, so it fits.
        let len = usize::try_from(len).map_err(|_| MsgpackError::LengthExceedsRemaining {
            at: self.at(start),
            declared: len,
            remaining: self.remaining() as u64,
        })?;
        let from = self.pos;
        self.pos += len;
        Ok((from, self.pos))
    }
}

/// What one msgpack item turned out to be. Str and bin are byte ranges of
/// the frame (already bounds-checked), materialized only by [`decode`].
pub(super) enum Item {
    Nil,
    Bool(bool),
    Int(Integer),
    Float(f64),
    Str { start: usize, end: usize, at: usize },
    Bin { start: usize, end: usize },
    Container { len: u64, is_map: bool },
}

/// Reads the item at the reader: a scalar whole, a str's or bin's bytes
/// checked against what remains, a container's head only. Ext types and
/// the reserved byte are refused.
#[inline]
pub(super) fn read_item(rd: &mut Cursor<'_>) -> Result<Item, MsgpackError> {
    let start = rd.pos;
    let Some((head, width)) = head(rd.buf, start) else {
        return Err(cut(rd, start));
    };
    rd.pos = start + width;
    Ok(match head {
        Head::Nil => Item::Nil,
        Head::Bool(b) => Item::Bool(b),
        Head::Int(i) => Item::Int(i),
        Head::Float(f) => Item::Float(f),
        Head::Str(n) => {
            let (from, end) = rd.skip(start, n.into())?;
            Item::Str {
                start: from,
                end,
                at: start,
            }
        }
        Head::Bin(n) => {
            let (from, end) = rd.skip(start, n.into())?;
            Item::Bin { start: from, end }
        }
        Head::Array(n) => Item::Container {
            len: n.into(),
            is_map: false,
        },
        Head::Map(n) => Item::Container {
            len: n.into(),
            is_map: true,
        },
        Head::Ext(_) => return Err(MsgpackError::UnsupportedExt(rd.at(start))),
        Head::Reserved => {
            return Err(MsgpackError::InvalidMarker {
                at: rd.at(start),
                byte: rd.buf[start],
            })
        }
    })
}

/// The error for a head the frame cuts short: the frame ends where an item
/// should start or inside its head (an ext is refused as an ext).
#[cold]
fn cut(rd: &Cursor<'_>, start: usize) -> MsgpackError {
    match rd.buf.get(start) {
        None => MsgpackError::Truncated(rd.at(start)),
        Some(&b) if is_ext(b) => MsgpackError::UnsupportedExt(rd.at(start)),
        Some(_) => MsgpackError::Truncated(rd.at(start + 1)),
    }
}

/// Steps over one whole value (containers included), iteratively, with
/// the checks and errors of [`read_item`]: every head is stepped over in
/// place, anything else (and every error) goes through [`read_item`].
pub(super) fn skip_value(rd: &mut Cursor<'_>) -> Result<(), MsgpackError> {
    let buf: &[u8] = rd.buf;
    let mut left: u64 = 1;
    while left > 0 {
        left -= 1;
        let start = rd.pos;
        let (len, is_map) = match head(buf, start) {
            Some((Head::Nil | Head::Bool(_) | Head::Int(_) | Head::Float(_), width)) => {
                rd.pos = start + width;
                continue;
            }
            Some((Head::Str(n) | Head::Bin(n), width))
                if n as usize <= buf.len() - (start + width) =>
            {
                rd.pos = start + width + n as usize;
                continue;
            }
            Some((Head::Array(n), width)) => {
                rd.pos = start + width;
                (u64::from(n), false)
            }
            Some((Head::Map(n), width)) => {
                rd.pos = start + width;
                (u64::from(n), true)
            }
            _ => match read_item(rd)? {
                Item::Container { len, is_map } => (len, is_map),
                _ => continue,
            },
        };
        let units = if is_map { 2 } else { 1 };
        rd.check_len(start, len, units)?;
        left += len * units; // cannot overflow: checked against the buffer
    }
    Ok(())
}

/// Whether a str item's bytes are UTF-8. ASCII (nearly every str Dask
/// sends: ops, keys, addresses, ids) is checked a word at a time
/// (`is_ascii`); anything else gets std's full UTF-8 check.
pub(super) fn is_text(bytes: &[u8]) -> bool {
    bytes.is_ascii() || std::str::from_utf8(bytes).is_ok()
}

/// A str item's bytes as text, or `None` when they are not UTF-8, checked
/// as [`is_text`] checks them (`ascii` gives the `&str` of bytes
/// `is_ascii` passed, without a second check).
#[cfg(feature = "serde")]
#[inline]
pub(crate) fn text(bytes: &[u8]) -> Option<&str> {
    match ascii::AsAsciiStr::as_ascii_str(bytes) {
        Ok(ascii) => Some(ascii.as_str()),
        Err(_) => std::str::from_utf8(bytes).ok(),
    }
}
