//! `Serializer` that writes frame 0 itself ([`to_frames`](super::to_frames)):
//! the msgpack forms `dumps` writes for the [`Value`] that
//! [`to_value`](super::to_value) would build (§3.2), without building it.
//! What travels out of band (blocks, arrays, [`ToSerialize`](super::ToSerialize)
//! values, `Value` fields) comes through the side table as a `Value` and is
//! written by the message layer's encoder ([`Placeholders`]), which appends
//! its blocks.

use bytes::{Bytes, BytesMut};
use serde::ser::{self, Serialize};

use super::error::Error;
use super::ser::{integer_of_i128, integer_of_u128, ValueSerializer};
use super::side;
use super::types::MAGIC;
use crate::message::{check_key_bytes, check_key_str, Placeholders};
use crate::msgpack;
use crate::value::{Integer, Value};

/// Room reserved after a bin larger than this, for the rest of frame 0.
const BIN_HEADROOM: usize = 64 << 10;

/// Frame 0 being written (at the end of what `out` holds), and the blocks
/// it places.
pub(super) struct Frame0<'s> {
    pub(super) out: &'s mut BytesMut,
    pub(super) leaves: Placeholders<'s>,
}

/// Writes one value into [`Frame0`], inside `depth` containers.
pub(super) struct FrameSerializer<'f, 's> {
    pub(super) f: &'f mut Frame0<'s>,
    pub(super) depth: usize,
}

impl FrameSerializer<'_, '_> {
    #[inline]
    fn int(self, i: Integer) -> Result<(), Error> {
        match i.as_u64() {
            Some(u) => msgpack::put_uint(self.f.out, u),
            // Negative, so in i64's range.
            None => msgpack::put_int(self.f.out, i.as_i64().unwrap_or(i64::MIN)),
        }
        Ok(())
    }

    /// `{variant: ...}`: the map and its key; the content follows.
    #[inline]
    fn variant_key(&mut self, variant: &'static str) -> Result<(), Error> {
        msgpack::check_depth(self.depth)?;
        check_key_str(variant)?;
        msgpack::put_map_len(self.f.out, 1);
        msgpack::put_str(self.f.out, variant)?;
        Ok(())
    }
}

impl<'f, 's> ser::Serializer for FrameSerializer<'f, 's> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'f, 's>;
    type SerializeTuple = Compound<'f, 's>;
    type SerializeTupleStruct = Compound<'f, 's>;
    type SerializeTupleVariant = Compound<'f, 's>;
    type SerializeMap = Compound<'f, 's>;
    type SerializeStruct = Compound<'f, 's>;
    type SerializeStructVariant = Compound<'f, 's>;

    #[inline]
    fn is_human_readable(&self) -> bool {
        false
    }

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        msgpack::put_bool(self.f.out, v);
        Ok(())
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        msgpack::put_int(self.f.out, v);
        Ok(())
    }
    #[inline]
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.int(integer_of_i128(v)?)
    }
    #[inline]
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        msgpack::put_uint(self.f.out, v);
        Ok(())
    }
    #[inline]
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.int(integer_of_u128(v)?)
    }
    /// msgpack-python reads and writes float64 only.
    #[inline]
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.serialize_f64(v.into())
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        msgpack::put_f64(self.f.out, v);
        Ok(())
    }
    #[inline]
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    #[inline]
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        Ok(msgpack::put_str(self.f.out, v)?)
    }
    /// A bin is written in frame 0, as `dumps` writes a `Value::Bin`: its
    /// one copy is frame 0 itself. A large one gets room for what follows
    /// it too, so that frame 0 is not copied again as it grows.
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        if v.len() > BIN_HEADROOM {
            self.f.out.reserve(v.len() + BIN_HEADROOM);
        }
        Ok(msgpack::put_bin(self.f.out, v)?)
    }
    #[inline]
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    #[inline]
    fn serialize_unit(self) -> Result<(), Error> {
        msgpack::put_nil(self.f.out);
        Ok(())
    }
    #[inline]
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    /// A unit variant is its name.
    #[inline]
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    #[inline]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        if name != MAGIC {
            return value.serialize(self);
        }
        // A value of the side table, by index: the message layer writes it
        // (placeholders and blocks for what goes out of band).
        let stashed = match value.serialize(ValueSerializer)? {
            Value::Int(i) => i.as_u64().and_then(side::take),
            _ => None,
        };
        let v = stashed.ok_or_else(Error::outside_conversion)?;
        let f = self.f;
        Ok(msgpack::encode_at(&v, f.out, &mut f.leaves, self.depth)?)
    }
    /// `{variant: value}`.
    #[inline]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.variant_key(variant)?;
        let inner = FrameSerializer {
            f: self.f,
            depth: self.depth + 1,
        };
        value.serialize(inner).map_err(|e| e.at_field(variant))
    }
    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'f, 's>, Error> {
        Compound::open(self.f, self.depth, len, false, None)
    }
    #[inline]
    fn serialize_tuple(self, len: usize) -> Result<Compound<'f, 's>, Error> {
        Compound::open(self.f, self.depth, Some(len), false, None)
    }
    #[inline]
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> Result<Compound<'f, 's>, Error> {
        Compound::open(self.f, self.depth, Some(len), false, None)
    }
    #[inline]
    fn serialize_tuple_variant(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'f, 's>, Error> {
        self.variant_key(variant)?;
        Compound::open(self.f, self.depth + 1, Some(len), false, Some(variant))
    }
    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'f, 's>, Error> {
        Compound::open(self.f, self.depth, len, true, None)
    }
    #[inline]
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Compound<'f, 's>, Error> {
        Compound::open(self.f, self.depth, Some(len), true, None)
    }
    #[inline]
    fn serialize_struct_variant(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'f, 's>, Error> {
        self.variant_key(variant)?;
        Compound::open(self.f, self.depth + 1, Some(len), true, Some(variant))
    }
}

/// An array or a map being written: its length prefix is written for the
/// length serde announced and rewritten at the end if the items were
/// another number (a `Serialize` impl may not know it beforehand).
pub(super) struct Compound<'f, 's> {
    f: &'f mut Frame0<'s>,
    /// Containers around the items.
    depth: usize,
    /// Where the length prefix starts.
    start: usize,
    announced: usize,
    count: usize,
    is_map: bool,
    /// Where the pending map key starts and ends.
    key: (usize, usize),
    /// A tuple or struct variant's name, for the path of an error.
    variant: Option<&'static str>,
}

#[inline]
fn put_len(out: &mut BytesMut, n: usize, is_map: bool) -> Result<(), Error> {
    match is_map {
        true => {
            let len =
                u32::try_from(n).map_err(|_| crate::error::EncodeError::TooLong { len: n })?;
            msgpack::put_map_len(out, len);
        }
        false => msgpack::put_array_len(out, n)?,
    }
    Ok(())
}

impl<'f, 's> Compound<'f, 's> {
    #[inline]
    fn open(
        f: &'f mut Frame0<'s>,
        depth: usize,
        len: Option<usize>,
        is_map: bool,
        variant: Option<&'static str>,
    ) -> Result<Compound<'f, 's>, Error> {
        msgpack::check_depth(depth)?;
        let announced = len.unwrap_or(0);
        let start = f.out.len();
        put_len(f.out, announced, is_map)?;
        Ok(Compound {
            f,
            depth: depth + 1,
            start,
            announced,
            count: 0,
            is_map,
            key: (0, 0),
            variant,
        })
    }

    #[inline]
    fn item(&mut self) -> FrameSerializer<'_, 's> {
        FrameSerializer {
            f: self.f,
            depth: self.depth,
        }
    }

    #[inline]
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let index = self.count;
        self.count += 1;
        let r = value.serialize(self.item()).map_err(|e| e.at_index(index));
        self.in_variant(r)
    }

    #[inline]
    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        self.count += 1;
        check_key_str(key)?;
        msgpack::put_str(self.f.out, key)?;
        let r = value.serialize(self.item()).map_err(|e| e.at_field(key));
        self.in_variant(r)
    }

    #[inline]
    fn in_variant(&self, r: Result<(), Error>) -> Result<(), Error> {
        match self.variant {
            Some(variant) => r.map_err(|e| e.at_field(variant)),
            None => r,
        }
    }

    /// The pending key, decoded again for the path of an error.
    #[inline]
    fn key_value(&self) -> Value {
        let (start, end) = self.key;
        let bytes = Bytes::copy_from_slice(&self.f.out[start..end]);
        msgpack::decode_range(&bytes, 0..bytes.len(), usize::MAX).unwrap_or(Value::Nil)
    }

    #[inline]
    fn end(self) -> Result<(), Error> {
        if self.count != self.announced {
            // Another number of items than announced: the prefix again.
            let out = &mut *self.f.out;
            let tail = out.split_off(self.start + msgpack::len_prefix_width(self.announced));
            out.truncate(self.start);
            put_len(out, self.count, self.is_map)?;
            out.unsplit(tail);
        }
        Ok(())
    }
}

/// The sequence forms: items.
macro_rules! items {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            #[inline]
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            #[inline]
            fn end(self) -> Result<(), Error> {
                Compound::end(self)
            }
        }
    )*};
}

items!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// The struct forms: fields.
macro_rules! fields {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            #[inline]
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Error> {
                self.field(key, value)
            }
            #[inline]
            fn end(self) -> Result<(), Error> {
                Compound::end(self)
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    #[inline]
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.count += 1;
        let start = self.f.out.len();
        key.serialize(self.item())?;
        self.key = (start, self.f.out.len());
        check_key_bytes(&self.f.out[start..])?;
        Ok(())
    }
    #[inline]
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value
            .serialize(self.item())
            .map_err(|e| e.at_key(&self.key_value()))
    }
    #[inline]
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}
