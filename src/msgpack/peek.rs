//! Looking at a frame without reading it through, for callers that want a
//! fact or two and tolerate anything else: whether a map or a str is at a
//! byte, whether a value is a one-entry map with a given key. Nothing is
//! checked against limits; bytes that are not msgpack answer `false` or
//! `None`.

use rmp::Marker;

#[cfg(feature = "serde")]
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
#[inline]
pub(crate) fn one_entry_map_keyed(buf: &[u8], pos: usize, a: &str, b: &str) -> bool {
    let Some((Head::Map(1), width)) = head(buf, pos) else {
        return false; // most values: answered by their first byte
    };
    str_at(buf, pos + width).is_some_and(|r| {
        let key = &buf[r];
        key == a.as_bytes() || key == b.as_bytes()
    })
}
