//! The byte reader every msgpack path shares: [`decode`](super::decode),
//! [`skim`](super::skim) and [`RawMap`](super::RawMap) read items and check
//! lengths, depth and the item budget through it, so they accept and refuse
//! exactly the same bytes.

use bytes::Bytes;
use rmp::Marker;

use super::MsgpackError;
use super::Position;
use crate::limits::Limits;
use crate::value::{Integer, Value};

/// Limits for reading bytes that were already checked (by [`skim`](super::skim)
/// or [`decode`](super::decode) under the caller's limits): nothing left to
/// refuse.
pub(crate) const CHECKED: Limits = Limits::unchecked();

pub(super) struct Cursor<'a> {
    pub(super) buf: &'a Bytes,
    pub(super) pos: usize,
    frame: usize,
}

impl<'a> Cursor<'a> {
    /// A reader over one msgpack frame, refused outright when it is longer
    /// than [`Limits::max_header_len`]. [`decode`] and [`skim`] share this and
    /// the checks below, so they accept and refuse exactly the same bytes.
    pub(super) fn new(
        buf: &'a Bytes,
        frame: usize,
        limits: &Limits,
    ) -> Result<Cursor<'a>, MsgpackError> {
        let len = buf.len() as u64;
        if len > limits.max_header_len {
            return Err(MsgpackError::HeaderTooLarge {
                frame,
                len,
                limit: limits.max_header_len,
            });
        }
        Ok(Cursor { buf, pos: 0, frame })
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
        limits: &Limits,
    ) -> Result<u64, MsgpackError> {
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

    pub(super) fn take<const N: usize>(&mut self) -> Result<[u8; N], MsgpackError> {
        let bytes = self
            .buf
            .get(self.pos..)
            .and_then(|rest| rest.get(..N))
            .ok_or(MsgpackError::Truncated(self.at(self.pos)))?;
        self.pos += N;
        // `bytes` has exactly N bytes.
        <[u8; N]>::try_from(bytes).map_err(|_| MsgpackError::Truncated(self.at(self.pos)))
    }

    pub(super) fn u8(&mut self) -> Result<u8, MsgpackError> {
        Ok(self.take::<1>()?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, MsgpackError> {
        Ok(u16::from_be_bytes(self.take()?))
    }
    pub(super) fn u32(&mut self) -> Result<u32, MsgpackError> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    pub(super) fn u64(&mut self) -> Result<u64, MsgpackError> {
        Ok(u64::from_be_bytes(self.take()?))
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
    Scalar(Value),
    Str { start: usize, end: usize, at: usize },
    Bin { start: usize, end: usize },
    Container { len: u64, is_map: bool },
}

pub(super) fn read_item(rd: &mut Cursor<'_>) -> Result<Item, MsgpackError> {
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
        | Marker::Ext32 => Err(MsgpackError::UnsupportedExt(rd.at(start))),
        Marker::Reserved => Err(MsgpackError::InvalidMarker {
            at: rd.at(start),
            byte: 0xc1,
        }),
    }
}

fn read_str(rd: &mut Cursor<'_>, start: usize, len: u64) -> Result<Item, MsgpackError> {
    let (from, end) = rd.skip(start, len)?;
    Ok(Item::Str {
        start: from,
        end,
        at: start,
    })
}

fn read_bin(rd: &mut Cursor<'_>, start: usize, len: u64) -> Result<Item, MsgpackError> {
    let (from, end) = rd.skip(start, len)?;
    Ok(Item::Bin { start: from, end })
}

/// Steps over one whole value (containers included), iteratively. The
/// one-byte forms headers are made of (and bin 8) are stepped over in place; the rest
/// (and every error) goes through [`read_item`].
pub(super) fn skip_value(rd: &mut Cursor<'_>) -> Result<(), MsgpackError> {
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
            // bin 8 (a pickled type in a sub-header): its length byte, if there.
            0xc4 => match buf.get(pos + 1) {
                Some(&n) => (2 + usize::from(n), 0),
                None => (usize::MAX, 0),
            },
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
