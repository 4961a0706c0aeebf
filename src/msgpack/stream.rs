//! Reading one frame item by item, for a caller that builds its own values
//! (the typed layer's direct path): the same reader, checks and counters as
//! [`decode`](super::decode), so a frame read this way is accepted or
//! refused exactly as decoding it would be.

use bytes::Bytes;
use bytestring::ByteString;

use super::decode::{decode_one, MapHook};
use super::head::NIL;
use super::reader::{read_item, text, Cursor, Item};
use super::{MsgpackError, Position};
use crate::limits::Limits;
use crate::value::{Integer, Value};

/// How many levels of a value [`Stream::value`] builds as it reads them.
const SHALLOW_LEVELS: usize = 8;

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
    #[inline]
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
        let buf: &'a [u8] = self.rd.buf;
        // The one-byte heads most of a message is made of, and the bytes
        // of a fixstr or str 8, read in place (not through `Item`);
        // anything else, and every error, as `read_item` reads it.
        let (from, len) = match buf.get(start) {
            Some(&b @ 0x00..=0x7f) => return Ok(self.one_byte(Token::Int(b.into()))),
            Some(&b @ 0xe0..=0xff) => return Ok(self.one_byte(Token::Int((b as i8).into()))),
            Some(&m @ 0x80..=0x9f) => {
                let (len, is_map) = (u64::from(m & 0x0f), m < 0x90);
                self.rd.pos = start + 1;
                self.rd.open_container(start, len, is_map, self.depth)?;
                return Ok(match is_map {
                    true => Token::Map(len),
                    false => Token::Array(len),
                });
            }
            Some(&m @ 0xa0..=0xbf) => (start + 1, usize::from(m & 0x1f)),
            Some(0xc0) => return Ok(self.one_byte(Token::Nil)),
            Some(0xc2) => return Ok(self.one_byte(Token::Bool(false))),
            Some(0xc3) => return Ok(self.one_byte(Token::Bool(true))),
            Some(0xd9) => match buf.get(start + 1) {
                Some(&n) => (start + 2, usize::from(n)),
                None => return self.read(start),
            },
            _ => return self.read(start),
        };
        let Some(bytes) = buf.get(from..from + len) else {
            return self.read(start);
        };
        self.rd.pos = from + len;
        match text(bytes) {
            Some(s) => Ok(Token::Str(s)),
            None => Err(MsgpackError::InvalidUtf8(self.rd.at(start))),
        }
    }

    /// `token`, a one-byte item, read.
    #[inline(always)]
    fn one_byte(&mut self, token: Token<'a>) -> Token<'a> {
        self.rd.pos += 1;
        token
    }

    /// [`Stream::next`] for the item at `start`, counted already.
    fn read(&mut self, start: usize) -> Result<Token<'a>, MsgpackError> {
        let buf: &'a Bytes = self.rd.buf;
        Ok(match read_item(&mut self.rd)? {
            Item::Nil => Token::Nil,
            Item::Bool(b) => Token::Bool(b),
            Item::Int(i) => Token::Int(i),
            Item::Float(f) => Token::Float(f),
            Item::Str { start, end, at } => Token::Str(
                text(&buf[start..end]).ok_or_else(|| MsgpackError::InvalidUtf8(self.rd.at(at)))?,
            ),
            Item::Bin { start, end } => Token::Bin(&buf[start..end]),
            Item::Container { len, is_map } => {
                self.rd.open_container(start, len, is_map, self.depth)?;
                match is_map {
                    true => Token::Map(len),
                    false => Token::Array(len),
                }
            }
        })
    }

    /// The next item, when it is a str whose bytes are one of `names`:
    /// that name's index and where the str ends (looked at, not read; the
    /// caller reads it with [`Stream::next_known_str`]). Its bytes are
    /// those of a `&str`, so nothing is left to validate. The names are
    /// tried from index `from` on, then from the first: a struct's fields
    /// come in their order.
    #[inline(always)]
    pub(crate) fn str_among(&self, names: &[&str], from: usize) -> Option<(usize, usize)> {
        let buf: &[u8] = self.rd.buf;
        let pos = self.rd.pos;
        let r = match buf.get(pos) {
            // A fixstr, as Dask's keys are: its length is in its marker.
            Some(&m @ 0xa0..=0xbf) => pos + 1..pos + 1 + usize::from(m & 0x1f),
            _ => super::peek::str_at(buf, pos)?,
        };
        let bytes = buf.get(r.clone())?;
        let is = |n: &&str| same_bytes(n.as_bytes(), bytes);
        // Most often the very name expected.
        if names.get(from).is_some_and(is) {
            return Some((from, r.end));
        }
        names.iter().position(is).map(|i| (i, r.end))
    }

    /// Reads the str [`Stream::str_among`] found, ending at `end`: counted
    /// as [`Stream::next`] counts it.
    #[inline]
    pub(crate) fn next_known_str(&mut self, end: usize) -> Result<(), MsgpackError> {
        let start = self.rd.pos;
        self.rd
            .count_item(&mut self.items_seen, start, self.limits)?;
        self.rd.pos = end;
        Ok(())
    }

    /// Whether the next item is nil (looked at, not read).
    #[inline]
    pub(crate) fn at_nil(&self) -> bool {
        self.rd.buf.get(self.rd.pos) == Some(&NIL)
    }

    /// Steps into a container of `len` items (as [`Stream::next`] gave it,
    /// each made of `values` values: 2 for a map entry): how many of them
    /// may be reserved ahead of data, a share of `prealloc_cap` given back
    /// by [`Stream::leave`].
    #[inline]
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
    #[inline]
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
        self.value_within(SHALLOW_LEVELS, hook)
    }

    /// [`Stream::value`], built as it is read, item by item (a call per
    /// level), for `levels` levels; anything deeper by `decode_one`'s stack
    /// of open containers, which costs more than a small value's items.
    fn value_within<E: From<MsgpackError>>(
        &mut self,
        levels: usize,
        hook: &mut MapHook<'_, E>,
    ) -> Result<Value, E> {
        if levels == 0 {
            return decode_one(
                &mut self.rd,
                self.depth,
                &mut self.items_seen,
                hook,
                usize::MAX,
            );
        }
        let start = self.rd.pos;
        let buf: &'a Bytes = self.rd.buf;
        // A str's bytes validated once, by the `ByteString` made of them.
        if let Some(r) = super::peek::str_at(buf, start) {
            self.next_known_str(r.end)?;
            return match ByteString::try_from(buf.slice(r)) {
                Ok(s) => Ok(Value::Str(s)),
                Err(_) => Err(MsgpackError::InvalidUtf8(self.rd.at(start)).into()),
            };
        }
        Ok(match self.next()? {
            Token::Nil => Value::Nil,
            Token::Bool(b) => Value::Bool(b),
            Token::Int(i) => Value::Int(i),
            Token::Float(f) => Value::Float(f),
            // Not met: `str_at` found every whole str.
            Token::Str(s) => Value::str(s),
            Token::Bin(b) => Value::Bin(buf.slice_ref(b)),
            Token::Array(len) => {
                let entered = self.enter(len, 1);
                let mut items = Vec::with_capacity(entered.hint);
                for _ in 0..len {
                    items.push(self.value_within(levels - 1, hook)?);
                }
                self.leave(entered);
                Value::Array(items)
            }
            Token::Map(len) => {
                let entered = self.enter(len, 2);
                let mut entries = Vec::with_capacity(entered.hint);
                for _ in 0..len {
                    let key = self.value_within(levels - 1, hook)?;
                    entries.push((key, self.value_within(levels - 1, hook)?));
                }
                self.leave(entered);
                hook(entries, self.rd.at(start))?
            }
        })
    }

    /// Refuses bytes after the frame's one value.
    pub(crate) fn finish(&self) -> Result<(), MsgpackError> {
        match self.rd.pos == self.rd.buf.len() {
            true => Ok(()),
            false => Err(MsgpackError::TrailingBytes(self.rd.at(self.rd.pos))),
        }
    }
}

/// Whether `a` and `b` are the same bytes: compared inline, a word at a
/// time (the last word overlapping the one before), as a short name is
/// compared faster than a call to `memcmp` can.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if let (Some(a_last), Some(b_last)) = (a.last_chunk::<8>(), b.last_chunk::<8>()) {
        let (a_words, b_words) = (a.as_chunks::<8>().0, b.as_chunks::<8>().0);
        return a_words.iter().zip(b_words).all(|(x, y)| x == y) && a_last == b_last;
    }
    // Shorter than a word: its first and last four bytes, or byte by byte.
    match (a.last_chunk::<4>(), b.last_chunk::<4>()) {
        (Some(a_last), Some(b_last)) => {
            a.first_chunk::<4>() == b.first_chunk::<4>() && a_last == b_last
        }
        _ => a.iter().zip(b).all(|(x, y)| x == y),
    }
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    #[test]
    fn same_bytes_is_slice_equality() {
        // Every pair of slices of a text (every length below and above a
        // word, equal and not), and each byte of a slice changed in turn.
        let text = b"__Serialized__ resource_restrictions __Pickled__";
        for (i, j) in (0..=text.len()).flat_map(|i| (i..=text.len()).map(move |j| (i, j))) {
            for (k, l) in (0..=text.len()).flat_map(|k| (k..=text.len()).map(move |l| (k, l))) {
                let (a, b) = (&text[i..j], &text[k..l]);
                assert_eq!(same_bytes(a, b), a == b, "{a:?} {b:?}");
            }
            let a = &text[i..j];
            for at in 0..a.len() {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_bytes(a, &b), "{a:?} {b:?}");
            }
        }
    }
}
