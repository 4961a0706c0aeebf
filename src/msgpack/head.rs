//! What the first bytes of a msgpack item say: rmp's [`Marker`] for the
//! first byte, then the big-endian bytes after it (a scalar's value, or a
//! length or count). Every walker of the crate classifies items here, the
//! checked [`Cursor`](super::reader::Cursor) and the lenient
//! [`Walk`](super::Walk) alike, so they agree on every form.

use rmp::Marker;

use crate::value::Integer;

/// The head of one msgpack item: a scalar, whole, or what a str, bin, ext
/// or container declares (its bytes or items follow the head).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Head {
    Nil,
    Bool(bool),
    Int(Integer),
    /// A float 64, or a float 32 widened.
    Float(f64),
    /// A str of this many bytes.
    Str(u32),
    /// A bin of this many bytes.
    Bin(u32),
    /// An array of this many items.
    Array(u32),
    /// A map of this many entries (a key and a value each).
    Map(u32),
    /// An ext type with this many bytes of data (its type byte is part of
    /// the head). Dask never sends one.
    Ext(u32),
    /// The one byte msgpack never uses.
    Reserved,
}

/// The byte of nil.
pub(crate) const NIL: u8 = Marker::Null.to_u8();

/// The head at `buf[pos]` and how many bytes it takes; `None` when `buf`
/// ends at `pos` or inside the head.
///
/// The one-byte heads (most of a message) are read here, inlined into
/// each walker's loop, where the walker's own match on the [`Head`] folds
/// into this one; the others in [`wide_head`].
#[inline(always)]
pub(crate) fn head(buf: &[u8], pos: usize) -> Option<(Head, usize)> {
    let &b = buf.get(pos)?;
    Some(match Marker::from_u8(b) {
        Marker::FixPos(v) => (Head::Int(v.into()), 1),
        Marker::FixNeg(v) => (Head::Int(v.into()), 1),
        Marker::FixStr(n) => (Head::Str(n.into()), 1),
        Marker::FixMap(n) => (Head::Map(n.into()), 1),
        Marker::FixArray(n) => (Head::Array(n.into()), 1),
        Marker::Null => (Head::Nil, 1),
        Marker::True => (Head::Bool(true), 1),
        Marker::False => (Head::Bool(false), 1),
        Marker::Reserved => (Head::Reserved, 1),
        marker => return wide_head(buf, pos + 1, marker),
    })
}

/// A head longer than its marker, whose bytes after the marker start at
/// `buf[at]`.
fn wide_head(buf: &[u8], at: usize, marker: Marker) -> Option<(Head, usize)> {
    Some(match marker {
        Marker::U8 => (Head::Int(u8::from_be_bytes(be(buf, at)?).into()), 2),
        Marker::U16 => (Head::Int(u16::from_be_bytes(be(buf, at)?).into()), 3),
        Marker::U32 => (Head::Int(u32::from_be_bytes(be(buf, at)?).into()), 5),
        Marker::U64 => (Head::Int(u64::from_be_bytes(be(buf, at)?).into()), 9),
        Marker::I8 => (Head::Int(i8::from_be_bytes(be(buf, at)?).into()), 2),
        Marker::I16 => (Head::Int(i16::from_be_bytes(be(buf, at)?).into()), 3),
        Marker::I32 => (Head::Int(i32::from_be_bytes(be(buf, at)?).into()), 5),
        Marker::I64 => (Head::Int(i64::from_be_bytes(be(buf, at)?).into()), 9),
        Marker::F32 => {
            let f = f32::from_be_bytes(be(buf, at)?);
            (Head::Float(f.into()), 5)
        }
        Marker::F64 => (Head::Float(f64::from_be_bytes(be(buf, at)?)), 9),
        Marker::Str8 => (Head::Str(len8(buf, at)?), 2),
        Marker::Str16 => (Head::Str(len16(buf, at)?), 3),
        Marker::Str32 => (Head::Str(len32(buf, at)?), 5),
        Marker::Bin8 => (Head::Bin(len8(buf, at)?), 2),
        Marker::Bin16 => (Head::Bin(len16(buf, at)?), 3),
        Marker::Bin32 => (Head::Bin(len32(buf, at)?), 5),
        Marker::Array16 => (Head::Array(len16(buf, at)?), 3),
        Marker::Array32 => (Head::Array(len32(buf, at)?), 5),
        Marker::Map16 => (Head::Map(len16(buf, at)?), 3),
        Marker::Map32 => (Head::Map(len32(buf, at)?), 5),
        // The fixed forms: the type byte after the marker.
        Marker::FixExt1 => ext(buf, at, 1, 0)?,
        Marker::FixExt2 => ext(buf, at, 2, 0)?,
        Marker::FixExt4 => ext(buf, at, 4, 0)?,
        Marker::FixExt8 => ext(buf, at, 8, 0)?,
        Marker::FixExt16 => ext(buf, at, 16, 0)?,
        // The others: the length, then the type byte.
        Marker::Ext8 => ext(buf, at, len8(buf, at)?, 1)?,
        Marker::Ext16 => ext(buf, at, len16(buf, at)?, 2)?,
        Marker::Ext32 => ext(buf, at, len32(buf, at)?, 4)?,
        Marker::FixPos(_)
        | Marker::FixNeg(_)
        | Marker::FixStr(_)
        | Marker::FixMap(_)
        | Marker::FixArray(_)
        | Marker::Null
        | Marker::True
        | Marker::False
        | Marker::Reserved => unreachable!("read by head"),
    })
}

/// Whether `b` is an ext type's marker (whose head may be cut short: the
/// checked reader refuses the ext all the same).
pub(crate) fn is_ext(b: u8) -> bool {
    matches!(
        Marker::from_u8(b),
        Marker::FixExt1
            | Marker::FixExt2
            | Marker::FixExt4
            | Marker::FixExt8
            | Marker::FixExt16
            | Marker::Ext8
            | Marker::Ext16
            | Marker::Ext32
    )
}

/// Whether `b` is a positive fixint (`Marker::FixPos`): a whole item, its
/// own value.
#[inline]
pub(crate) const fn is_fixpos(b: u8) -> bool {
    b < 0x80
}

/// The byte of `v` as a positive fixint, if it is one (`0..128`).
#[inline]
pub(crate) fn fixpos(v: u64) -> Option<u8> {
    u8::try_from(v).ok().filter(|&b| is_fixpos(b))
}

#[inline(always)]
fn be<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..)?.first_chunk::<N>().copied()
}

#[inline(always)]
fn len8(buf: &[u8], at: usize) -> Option<u32> {
    Some(u8::from_be_bytes(be(buf, at)?).into())
}

#[inline(always)]
fn len16(buf: &[u8], at: usize) -> Option<u32> {
    Some(u16::from_be_bytes(be(buf, at)?).into())
}

#[inline(always)]
fn len32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(be(buf, at)?))
}

/// An ext head: `len` bytes of data, after `len_bytes` bytes of length and
/// the type byte.
#[inline]
fn ext(buf: &[u8], at: usize, len: u32, len_bytes: usize) -> Option<(Head, usize)> {
    buf.get(at + len_bytes)?; // the type byte
    Some((Head::Ext(len), 2 + len_bytes))
}
