//! Encoding: a [`Value`] into msgpack, in exactly the forms msgpack-python
//! (`use_bin_type=True`) writes (SPEC.md §3.2).
//!
//! The encoder knows msgpack only. Values msgpack has no form for (blocks,
//! values to serialize, arrays) and the rules of the layers above (which
//! values go out of band, which map keys are reserved) are its caller's,
//! through [`Leaves`].

use bytes::{BufMut, Bytes, BytesMut};
use rmp::Marker;

use super::head::{fixpos, NIL};
use crate::error::EncodeError;
use crate::value::{Integer, Value};

/// msgpack-python's own nesting limit: it refuses to encode or decode more
/// than 1024 nested containers.
pub(crate) const PYTHON_MAX_DEPTH: usize = 1024;

/// What the encoder leaves to its caller.
pub(crate) trait Leaves {
    /// Whether a bin, which msgpack could encode, is written by
    /// [`Leaves::write`] instead (the serialize layer sends large bytes out
    /// of band). Only bins can be diverted: every other value msgpack has a
    /// form for is the encoder's.
    #[inline]
    fn diverts_bin(&self, _bin: &Bytes) -> bool {
        false
    }

    /// Writes what stands for `v` (a placeholder), or refuses it: every
    /// value msgpack has no form for (`Serialized`, `Pickled`, `ToSerialize`,
    /// `NdArray`), and the bins [`Leaves::diverts_bin`] claims.
    fn write(&mut self, v: &Value, out: &mut BytesMut) -> Result<(), EncodeError>;

    /// Checks a map key before its entry is written.
    #[inline]
    fn check_key(&mut self, _key: &Value) -> Result<(), EncodeError> {
        Ok(())
    }
}

/// Leaves for a frame of plain msgpack: a value msgpack has no form for is
/// refused ([`EncodeError::OutOfBandInHeader`]).
#[cfg(test)]
pub(crate) struct Plain;

#[cfg(test)]
impl Leaves for Plain {
    fn write(&mut self, _: &Value, _: &mut BytesMut) -> Result<(), EncodeError> {
        Err(EncodeError::OutOfBandInHeader)
    }
}

/// Whether `v` goes to [`Leaves::write`]: msgpack has no form for it, or it
/// is a bin the caller diverts.
#[inline]
fn is_leaf(v: &Value, leaves: &impl Leaves) -> bool {
    match v {
        Value::Serialized(_) | Value::Pickled(_) | Value::ToSerialize(_) | Value::NdArray(_) => {
            true
        }
        Value::Bin(b) => leaves.diverts_bin(b),
        _ => false,
    }
}

/// Encodes one value as a standalone msgpack frame.
pub(crate) fn encode(value: &Value, leaves: &mut impl Leaves) -> Result<Bytes, EncodeError> {
    let mut out = BytesMut::with_capacity(64);
    encode_into(value, &mut out, leaves)?;
    Ok(out.freeze())
}

/// Encodes `value` into `out`.
pub(crate) fn encode_into(
    value: &Value,
    out: &mut BytesMut,
    leaves: &mut impl Leaves,
) -> Result<(), EncodeError> {
    encode_at(value, out, leaves, 0)
}

/// [`encode_into`] for a value inside `base` containers already (a part of
/// a header being written).
pub(crate) fn encode_at(
    value: &Value,
    out: &mut BytesMut,
    leaves: &mut impl Leaves,
    base: usize,
) -> Result<(), EncodeError> {
    if !is_leaf(value, leaves) && put_scalar(value, out)? {
        return Ok(()); // a scalar: no work list needed
    }
    // Values still to write, with their depth (containers they sit in).
    let mut todo: Vec<(&Value, usize)> = vec![(value, base)];
    while let Some((v, depth)) = todo.pop() {
        if is_leaf(v, leaves) {
            leaves.write(v, out)?;
            continue;
        }
        if put_scalar(v, out)? {
            continue;
        }
        match v {
            Value::Array(items) => {
                check_depth(depth)?;
                put_array_len(out, items.len())?;
                out.reserve(items.len());
                // Scalars are written at once (small non-negative integers,
                // the bulk of an integer tuple, a chunk at a time); from the
                // first item that is not a scalar, the rest wait on the
                // stack (in order).
                let mut rest = &items[put_fixints(items, out)..];
                while let Some((x, tail)) = rest.split_first() {
                    if is_leaf(x, leaves) || !put_scalar(x, out)? {
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
            Value::BinArray(items) => {
                check_depth(depth)?;
                put_array_len(out, items.len())?;
                for b in items.iter() {
                    match leaves.diverts_bin(&b) {
                        true => leaves.write(&Value::Bin(b), out)?,
                        false => put_bin(out, &b)?,
                    }
                }
            }
            Value::Map(entries) => {
                check_depth(depth)?;
                let len = u32::try_from(entries.len())
                    .map_err(|_| EncodeError::TooLong { len: entries.len() })?;
                put_map_len(out, len);
                for (k, v) in entries.iter().rev() {
                    leaves.check_key(k)?;
                    todo.push((v, depth + 1));
                    todo.push((k, depth + 1));
                }
            }
            // Leaves went to `leaves.write` above; scalars to `put_scalar`.
            _ => {}
        }
    }
    Ok(())
}

/// Writes the leading items of `items` that are integers in `0..128`
/// (positive fixints: one byte each, as [`put_uint`] writes them) and
/// returns how many. A chunk's bytes are gathered on the stack and appended
/// at once, so the loop does no capacity check per item.
fn put_fixints(items: &[Value], out: &mut BytesMut) -> usize {
    const CHUNK: usize = 256;
    let mut bytes = [0u8; CHUNK];
    let mut done = 0;
    for chunk in items.chunks(CHUNK) {
        let mut n = 0;
        for x in chunk {
            match x.as_int().and_then(Integer::as_u64).and_then(fixpos) {
                Some(b) => bytes[n] = b,
                None => break,
            }
            n += 1;
        }
        out.extend_from_slice(&bytes[..n]);
        done += n;
        if n < chunk.len() {
            break;
        }
    }
    done
}

/// Writes `v` if it is a scalar (the caller has ruled out an out-of-band
/// `Bin`); `false` for containers and out-of-band leaves.
#[inline]
fn put_scalar(v: &Value, out: &mut BytesMut) -> Result<bool, EncodeError> {
    match v {
        Value::Nil => put_nil(out),
        Value::Bool(b) => put_bool(out, *b),
        Value::Int(i) => match i.as_u64() {
            Some(u) => put_uint(out, u),
            // Negative, so in i64's range: rmp picks the smallest signed
            // form, as msgpack-python does.
            None => put_int(out, i.as_i64().unwrap_or(i64::MIN)),
        },
        Value::Float(f) => put_f64(out, *f),
        Value::Str(s) => put_str(out, s)?,
        Value::Bin(b) => put_bin(out, b)?,
        _ => return Ok(false),
    }
    Ok(true)
}

#[inline]
pub(crate) fn put_nil(out: &mut BytesMut) {
    out.put_u8(NIL);
}

/// Writes `n` nils (the items of an array of nils, after its length).
#[inline]
pub(crate) fn put_nils(out: &mut BytesMut, n: usize) {
    out.put_bytes(NIL, n);
}

#[inline]
pub(crate) fn put_bool(out: &mut BytesMut, b: bool) {
    let marker = if b { Marker::True } else { Marker::False };
    out.put_u8(marker.to_u8());
}

/// Refuses a container inside `depth` others once msgpack-python could not
/// read it.
#[inline]
pub(crate) fn check_depth(depth: usize) -> Result<(), EncodeError> {
    if depth >= PYTHON_MAX_DEPTH {
        return Err(EncodeError::DepthExceeded {
            limit: PYTHON_MAX_DEPTH,
        });
    }
    Ok(())
}

#[inline]
pub(crate) fn put_int(out: &mut BytesMut, v: i64) {
    match u64::try_from(v) {
        Ok(u) => put_uint(out, u),
        Err(_) => {
            let _ = rmp::encode::write_sint(&mut out.writer(), v);
        }
    }
}

/// Writes a non-negative integer in the smallest unsigned form (§3.2:
/// fixint, then `cc`..`cf`, what `rmp::encode::write_uint` writes), inline.
#[inline]
pub(crate) fn put_uint(out: &mut BytesMut, v: u64) {
    match v {
        0..=0x7f => out.put_u8(v as u8),
        0x80..=0xff => out.put_slice(&[0xcc, v as u8]),
        0x100..=0xffff => {
            out.put_u8(0xcd);
            out.put_u16(v as u16);
        }
        0x1_0000..=0xffff_ffff => {
            out.put_u8(0xce);
            out.put_u32(v as u32);
        }
        _ => {
            out.put_u8(0xcf);
            out.put_u64(v);
        }
    }
}

/// Writes an array's length prefix.
#[inline]
pub(crate) fn put_array_len(out: &mut BytesMut, len: usize) -> Result<(), EncodeError> {
    if len < 16 {
        out.put_u8(0x90 | len as u8); // fixarray: the common case, inline
        return Ok(());
    }
    let (head, width) = array_len_bytes(len)?;
    out.extend_from_slice(&head[..width]);
    Ok(())
}

/// The array header `put_array_len` writes, as bytes (the first `width`
/// of the five): also for a header written into room kept before the items.
pub(crate) fn array_len_bytes(len: usize) -> Result<([u8; 5], usize), EncodeError> {
    let mut head = [0u8; 5];
    let n = u32::try_from(len).map_err(|_| EncodeError::TooLong { len })?;
    let mut rest = &mut head[..];
    let _ = rmp::encode::write_array_len(&mut rest, n);
    let width = 5 - rest.len();
    Ok((head, width))
}

/// Writes an array of integers, as the `Array` of their `Int`s would be.
pub(crate) fn put_ints(out: &mut BytesMut, items: &[i64]) -> Result<(), EncodeError> {
    put_array_len(out, items.len())?;
    out.reserve(items.len());
    items.iter().for_each(|&x| put_int(out, x));
    Ok(())
}

#[inline]
pub(crate) fn put_str(out: &mut BytesMut, s: &str) -> Result<(), EncodeError> {
    if s.len() >= 32 {
        return put_long_str(out, s);
    }
    out.put_u8(0xa0 | s.len() as u8); // fixstr: the common case, inline
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_long_str(out: &mut BytesMut, s: &str) -> Result<(), EncodeError> {
    let len = u32::try_from(s.len()).map_err(|_| EncodeError::TooLong { len: s.len() })?;
    let _ = rmp::encode::write_str_len(&mut out.writer(), len);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// Writes a float, always as float64 (msgpack-python's form).
#[inline]
pub(crate) fn put_f64(out: &mut BytesMut, f: f64) {
    out.put_u8(0xcb); // float64: what rmp::encode::write_f64 writes, inline
    out.put_f64(f);
}

#[inline]
pub(crate) fn put_bin(out: &mut BytesMut, b: &[u8]) -> Result<(), EncodeError> {
    match u8::try_from(b.len()) {
        Ok(len) => out.put_slice(&[0xc4, len]), // bin8: the common case, inline
        Err(_) => {
            let len = u32::try_from(b.len()).map_err(|_| EncodeError::TooLong { len: b.len() })?;
            let _ = rmp::encode::write_bin_len(&mut out.writer(), len);
        }
    }
    out.extend_from_slice(b);
    Ok(())
}

#[inline]
pub(crate) fn put_map_len(out: &mut BytesMut, len: u32) {
    if len < 16 {
        out.put_u8(0x80 | len as u8); // fixmap: the common case, inline
        return;
    }
    let _ = rmp::encode::write_map_len(&mut out.writer(), len);
}

/// How many bytes [`put_map_len`] and [`put_array_len`] write for `len`.
#[inline]
pub(crate) fn len_prefix_width(len: usize) -> usize {
    match len {
        0..=15 => 1,
        16..=0xffff => 3,
        _ => 5,
    }
}

/// Rewrites, in place, the length of the map whose prefix starts at
/// `buf[at]` to `len`. The prefix must already have the width `len` takes
/// ([`len_prefix_width`]).
#[inline]
pub(crate) fn set_map_len(buf: &mut [u8], at: usize, len: u32) {
    match len_prefix_width(len as usize) {
        1 => buf[at] = Marker::FixMap(len as u8).to_u8(),
        3 => buf[at + 1..at + 3].copy_from_slice(&(len as u16).to_be_bytes()),
        _ => buf[at + 1..at + 5].copy_from_slice(&len.to_be_bytes()),
    }
}

/// Counts one more entry in the map whose prefix is at `buf[at]`, a fixmap
/// of fewer than 15 entries (its prefix keeps its one byte).
///
/// # Panics
///
/// When it is not such a fixmap.
#[inline]
pub(crate) fn add_map_entry(buf: &mut [u8], at: usize) {
    match Marker::from_u8(buf[at]) {
        Marker::FixMap(n) if n < 15 => buf[at] = Marker::FixMap(n + 1).to_u8(),
        _ => panic!("add_map_entry: not a fixmap of fewer than 15 entries"),
    }
}

/// msgpack bytes built at compile time, in the forms [`encode`] writes:
/// the encodings the layers above copy or compare as they are (a leaf
/// header, a reserved key). Every form is checked when the constant is
/// built: a form this builder does not write fails the build.
///
/// ```text
/// const LEAF: &[u8] = Static::new().map(1).str("serializer").str("msgpack").bytes();
/// ```
#[derive(Clone, Copy)]
pub(crate) struct Static {
    bytes: [u8; Static::CAP],
    len: usize,
}

impl Static {
    /// The longest encoding it builds.
    const CAP: usize = 512;

    /// No bytes yet.
    pub(crate) const fn new() -> Static {
        Static {
            bytes: [0; Static::CAP],
            len: 0,
        }
    }

    /// A map of `len` entries (they follow): a fixmap, so fewer than 16.
    pub(crate) const fn map(self, len: usize) -> Static {
        assert!(len < 16, "a fixmap");
        self.put(&[Marker::FixMap(len as u8).to_u8()])
    }

    /// A str, in the form [`put_str`] writes: a fixstr, or a str 8 from 32
    /// bytes; fewer than 256 bytes.
    pub(crate) const fn str(self, s: &str) -> Static {
        let n = s.len();
        let head = if n < 32 {
            self.put(&[Marker::FixStr(n as u8).to_u8()])
        } else {
            assert!(n < 256, "a str 8");
            self.put(&[Marker::Str8.to_u8(), n as u8])
        };
        head.put(s.as_bytes())
    }

    /// A bin, in the form [`put_bin`] writes: a bin 8, so fewer than 256
    /// bytes.
    pub(crate) const fn bin(self, b: &[u8]) -> Static {
        assert!(b.len() < 256, "a bin 8");
        self.put(&[Marker::Bin8.to_u8(), b.len() as u8]).put(b)
    }

    /// The bytes built.
    pub(crate) const fn bytes(&self) -> &[u8] {
        self.bytes.split_at(self.len).0
    }

    const fn put(mut self, b: &[u8]) -> Static {
        let mut i = 0;
        while i < b.len() {
            self.bytes[self.len] = b[i];
            self.len += 1;
            i += 1;
        }
        self
    }
}
