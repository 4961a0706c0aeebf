//! Looking at a frame without reading it through, for callers that want a
//! fact or two and tolerate anything else: whether a map or a str is at a
//! byte, whether a value is a one-entry map with a given key, and a
//! lenient [`Walk`] (an op peeked from frame 0). Nothing is checked against
//! limits; bytes that are not msgpack answer `false` or `None`.

use rmp::Marker;

use super::head::{head, Head};

/// Whether the value at `buf[pos]` is a map (by its marker alone).
#[inline]
pub(crate) fn is_map_at(buf: &[u8], pos: usize) -> bool {
    buf.get(pos).is_some_and(|&b| {
        matches!(
            Marker::from_u8(b),
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32
        )
    })
}

/// The bytes of the str at `pos`, if a whole str is there.
#[cfg(feature = "serde")]
#[inline]
pub(crate) fn str_at(buf: &[u8], pos: usize) -> Option<std::ops::Range<usize>> {
    let (Head::Str(len), width) = head(buf, pos)? else {
        return None;
    };
    let from = pos + width;
    let end = from.checked_add(usize::try_from(len).ok()?)?;
    (end <= buf.len()).then_some(from..end)
}

/// Whether the value at `buf[pos]` is a one-entry map whose key is the str
/// `a` or `b`.
#[cfg(feature = "serde")]
#[inline(always)]
pub(crate) fn one_entry_map_keyed(buf: &[u8], pos: usize, a: &str, b: &str) -> bool {
    // Most values: answered by their first byte, in place.
    may_be_one_entry_map(buf, pos) && one_entry_map_keyed_at(buf, pos, a, b)
}

#[cfg(feature = "serde")]
#[inline(never)]
fn one_entry_map_keyed_at(buf: &[u8], pos: usize, a: &str, b: &str) -> bool {
    let Some((Head::Map(1), width)) = head(buf, pos) else {
        return false;
    };
    is_str_at(buf, pos + width, a, b)
}

/// Whether the first byte at `buf[pos]` may start a map of one entry: a
/// fixmap of one, or a map 16 or 32 (whose length is read next).
#[cfg(feature = "serde")]
#[inline(always)]
fn may_be_one_entry_map(buf: &[u8], pos: usize) -> bool {
    matches!(buf.get(pos), Some(0x81 | 0xde | 0xdf))
}

/// Whether the value at `buf[pos]` is the str `a` or `b`; a fixstr or a
/// str 8 of another length is answered by its first bytes.
#[cfg(feature = "serde")]
#[inline(always)]
pub(crate) fn is_str_at(buf: &[u8], pos: usize, a: &str, b: &str) -> bool {
    let other_len = |n: u8| usize::from(n) != a.len() && usize::from(n) != b.len();
    match buf.get(pos) {
        Some(&m @ 0xa0..=0xbf) if other_len(m & 0x1f) => false,
        Some(0xd9) if buf.get(pos + 1).is_some_and(|&n| other_len(n)) => false,
        Some(0xa0..=0xbf | 0xd9..=0xdb) => is_str_at_slow(buf, pos, a, b),
        _ => false,
    }
}

#[cfg(feature = "serde")]
#[inline(never)]
fn is_str_at_slow(buf: &[u8], pos: usize, a: &str, b: &str) -> bool {
    str_at(buf, pos).is_some_and(|r| {
        let key = &buf[r];
        key == a.as_bytes() || key == b.as_bytes()
    })
}

/// The one-entry map at `buf[pos]` whose key is the str `a` or `b` and
/// whose value is an int of 1 or more: whether its key is `b`, and the int.
/// Looks only.
#[cfg(feature = "serde")]
#[inline]
pub(crate) fn one_entry_map_to_count(
    buf: &[u8],
    pos: usize,
    a: &str,
    b: &str,
) -> Option<(bool, u64)> {
    if !may_be_one_entry_map(buf, pos) {
        return None;
    }
    let (Head::Map(1), width) = head(buf, pos)? else {
        return None;
    };
    let r = str_at(buf, pos + width)?;
    let is_b = match &buf[r.clone()] {
        key if key == a.as_bytes() => false,
        key if key == b.as_bytes() => true,
        _ => return None,
    };
    let (Head::Int(i), _) = head(buf, r.end)? else {
        return None;
    };
    i.as_u64().filter(|&n| n > 0).map(|n| (is_b, n))
}

/// What [`Walk::next`] meets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Seen<'a> {
    /// A str that is UTF-8.
    Str(&'a str),
    /// A map's head: this many entries follow.
    Map(u64),
    /// An array's head: this many items follow.
    Array(u64),
    /// Anything else, stepped over whole (a str that is not UTF-8 too).
    Other,
}

/// A walk over one frame that takes whatever msgpack can encode (ext
/// types, float 32, a str that is not UTF-8), with no limit on depth or
/// items and no recursion. Only bytes that are not msgpack stop it
/// (`None`): the frame cut short, or the byte msgpack never uses.
#[derive(Debug)]
pub(crate) struct Walk<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Walk<'a> {
    /// A walk from the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Walk<'a> {
        Walk { buf, pos: 0 }
    }

    /// Whether the walk has reached the end of the frame.
    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// The next item: a scalar, str, bin or ext whole, a container's head
    /// only (its items come next).
    pub(crate) fn next(&mut self) -> Option<Seen<'a>> {
        let (head, width) = head(self.buf, self.pos)?;
        let from = self.pos + width;
        let bytes = |n: u32| {
            let end = from.checked_add(usize::try_from(n).ok()?)?;
            Some((self.buf.get(from..end)?, end))
        };
        let (seen, end) = match head {
            Head::Str(n) => {
                let (text, end) = bytes(n)?;
                (
                    std::str::from_utf8(text).map_or(Seen::Other, Seen::Str),
                    end,
                )
            }
            Head::Bin(n) | Head::Ext(n) => (Seen::Other, bytes(n)?.1),
            Head::Map(n) => (Seen::Map(n.into()), from),
            Head::Array(n) => (Seen::Array(n.into()), from),
            Head::Nil | Head::Bool(_) | Head::Int(_) | Head::Float(_) => (Seen::Other, from),
            Head::Reserved => return None,
        };
        self.pos = end;
        Some(seen)
    }

    /// Steps over `n` values, however nested: a count of values still to
    /// step over. Every value takes at least one byte, so a count declared
    /// beyond the frame fails at the frame's end.
    pub(crate) fn skip(&mut self, mut n: u64) -> Option<()> {
        while n > 0 {
            n -= 1;
            match self.next()? {
                Seen::Map(k) => n = n.checked_add(k.checked_mul(2)?)?,
                Seen::Array(k) => n = n.checked_add(k)?,
                Seen::Str(_) | Seen::Other => {}
            }
        }
        Some(())
    }

    /// Steps over the rest of the value whose head [`Walk::next`] gave as
    /// `seen`.
    pub(crate) fn skip_rest(&mut self, seen: Seen<'a>) -> Option<()> {
        match seen {
            Seen::Map(k) => self.skip(k.checked_mul(2)?),
            Seen::Array(k) => self.skip(k),
            Seen::Str(_) | Seen::Other => Some(()),
        }
    }
}
