//! `Serializer` for [`Value`]: a type's serde data model as msgpack values
//! (as msgpack-python and rmp-serde's `write_named` write them), and the
//! side table's values put back in their place.

use bytes::Bytes;
use serde::ser::{self, Serialize};

use super::error::Error;
use super::side;
use super::types::MAGIC;
use crate::serialize::PACK_MIN;
use crate::value::{Integer, Value};

/// A 128-bit integer as msgpack holds it (both paths).
#[inline]
pub(super) fn integer_of_i128(v: i128) -> Result<Integer, Error> {
    Integer::try_from_i128(v).ok_or_else(|| Error::out_of_range(v))
}

/// A 128-bit integer as msgpack holds it (both paths).
#[inline]
pub(super) fn integer_of_u128(v: u128) -> Result<Integer, Error> {
    i128::try_from(v)
        .ok()
        .and_then(Integer::try_from_i128)
        .ok_or_else(|| Error::out_of_range(v))
}

/// Serializes into a [`Value`].
pub(super) struct ValueSerializer;

impl ser::Serializer for ValueSerializer {
    type Ok = Value;
    type Error = Error;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = SeqBuilder;
    type SerializeTupleVariant = VariantBuilder<SeqBuilder>;
    type SerializeMap = MapBuilder;
    type SerializeStruct = StructBuilder;
    type SerializeStructVariant = VariantBuilder<StructBuilder>;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn serialize_bool(self, v: bool) -> Result<Value, Error> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<Value, Error> {
        integer_of_i128(v).map(Value::Int)
    }
    fn serialize_u8(self, v: u8) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<Value, Error> {
        Ok(Value::from(v))
    }
    fn serialize_u128(self, v: u128) -> Result<Value, Error> {
        integer_of_u128(v).map(Value::Int)
    }
    /// msgpack-python reads and writes float64 only.
    fn serialize_f32(self, v: f32) -> Result<Value, Error> {
        Ok(Value::Float(f64::from(v)))
    }
    fn serialize_f64(self, v: f64) -> Result<Value, Error> {
        Ok(Value::Float(v))
    }
    fn serialize_char(self, v: char) -> Result<Value, Error> {
        Ok(Value::from(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, Error> {
        Ok(Value::str(v))
    }
    /// Copies: a [`Bin`](super::Bin) field hands over its `Bytes` instead.
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, Error> {
        Ok(Value::Bin(Bytes::copy_from_slice(v)))
    }
    fn serialize_none(self) -> Result<Value, Error> {
        Ok(Value::Nil)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value, Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, Error> {
        Ok(Value::Nil)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Value, Error> {
        Ok(Value::Nil)
    }
    /// A unit variant is its name (as serde_json writes it).
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Value, Error> {
        Ok(Value::from_static(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Value, Error> {
        if name == MAGIC {
            // A value of the side table, by index.
            let index = match value.serialize(ValueSerializer)? {
                Value::Int(i) => i.as_u64(),
                _ => None,
            };
            return index
                .and_then(side::take)
                .ok_or_else(Error::outside_conversion);
        }
        value.serialize(self)
    }
    /// `{variant: value}`, as serde_json writes it.
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, Error> {
        let inner = value
            .serialize(ValueSerializer)
            .map_err(|e| e.at_field(variant))?;
        Ok(Value::Map(vec![(Value::from_static(variant), inner)]))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder::new(len.unwrap_or(0)))
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder::new(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder::new(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<VariantBuilder<SeqBuilder>, Error> {
        Ok(VariantBuilder {
            variant,
            inner: SeqBuilder::new(len),
        })
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapBuilder, Error> {
        Ok(MapBuilder {
            entries: Vec::with_capacity(len.unwrap_or(0)),
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<StructBuilder, Error> {
        Ok(StructBuilder {
            entries: Vec::with_capacity(len),
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<VariantBuilder<StructBuilder>, Error> {
        Ok(VariantBuilder {
            variant,
            inner: StructBuilder {
                entries: Vec::with_capacity(len),
            },
        })
    }
}

/// The items of a sequence: packed while they are integers in `i64`'s
/// range (a `Vec<i64>` becomes a [`Value::IntArray`], 8 bytes an item).
pub(super) enum SeqBuilder {
    Ints(Vec<i64>),
    Values(Vec<Value>),
}

impl SeqBuilder {
    fn new(len: usize) -> SeqBuilder {
        // `len` comes from the value being serialized, not from a peer.
        SeqBuilder::Ints(Vec::with_capacity(len))
    }

    /// An item that is not an `i64`; the first one turns the packed items
    /// into values.
    #[cold]
    fn unpack(&mut self, v: Value) {
        match self {
            SeqBuilder::Ints(ints) => {
                let mut items: Vec<Value> = ints.drain(..).map(Value::from).collect();
                items.push(v);
                *self = SeqBuilder::Values(items);
            }
            SeqBuilder::Values(items) => items.push(v),
        }
    }

    #[inline(always)]
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        match self {
            SeqBuilder::Ints(ints) => {
                let index = ints.len();
                let other = value
                    .serialize(ItemSerializer(ints))
                    .map_err(|e| e.at_index(index))?;
                if let Some(v) = other {
                    self.unpack(v);
                }
            }
            SeqBuilder::Values(items) => {
                let v = value
                    .serialize(ValueSerializer)
                    .map_err(|e| e.at_index(items.len()))?;
                items.push(v);
            }
        }
        Ok(())
    }

    fn finish(self) -> Value {
        match self {
            SeqBuilder::Ints(ints) if ints.len() >= PACK_MIN => Value::IntArray(ints),
            SeqBuilder::Ints(ints) => Value::Array(ints.into_iter().map(Value::from).collect()),
            SeqBuilder::Values(items) => Value::Array(items),
        }
    }
}

impl ser::SerializeSeq for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<Value, Error> {
        Ok(self.finish())
    }
}

impl ser::SerializeTuple for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<Value, Error> {
        Ok(self.finish())
    }
}

impl ser::SerializeTupleStruct for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<Value, Error> {
        Ok(self.finish())
    }
}

/// Serializes one item of a packed sequence: an integer in `i64`'s range is
/// pushed where it is (`None`: no `Value` built, none dropped), anything
/// else is handed back as its `Value` (`Some`), exactly as [`ValueSerializer`]
/// builds it.
struct ItemSerializer<'a>(&'a mut Vec<i64>);

impl ItemSerializer<'_> {
    #[inline(always)]
    fn int(self, v: i64) -> Result<Option<Value>, Error> {
        self.0.push(v);
        Ok(None)
    }

    /// A value built by [`ValueSerializer`]: pushed if it is an `i64`.
    fn keep(self, v: Value) -> Result<Option<Value>, Error> {
        match &v {
            Value::Int(i) => match i.as_i64() {
                Some(i) => self.int(i),
                None => Ok(Some(v)),
            },
            _ => Ok(Some(v)),
        }
    }
}

/// A compound item of a packed sequence, built by [`ValueSerializer`]'s
/// builders and handed back whole.
struct Whole<B>(B);

macro_rules! delegate_to_value {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method(self, $($arg: $ty),*) -> Result<Option<Value>, Error> {
            ValueSerializer.$method($($arg),*).map(Some)
        }
    )*};
}

impl<'a> ser::Serializer for ItemSerializer<'a> {
    type Ok = Option<Value>;
    type Error = Error;
    type SerializeSeq = Whole<SeqBuilder>;
    type SerializeTuple = Whole<SeqBuilder>;
    type SerializeTupleStruct = Whole<SeqBuilder>;
    type SerializeTupleVariant = Whole<VariantBuilder<SeqBuilder>>;
    type SerializeMap = Whole<MapBuilder>;
    type SerializeStruct = Whole<StructBuilder>;
    type SerializeStructVariant = Whole<VariantBuilder<StructBuilder>>;

    fn is_human_readable(&self) -> bool {
        false
    }

    #[inline(always)]
    fn serialize_i8(self, v: i8) -> Result<Option<Value>, Error> {
        self.int(v.into())
    }
    #[inline(always)]
    fn serialize_i16(self, v: i16) -> Result<Option<Value>, Error> {
        self.int(v.into())
    }
    #[inline(always)]
    fn serialize_i32(self, v: i32) -> Result<Option<Value>, Error> {
        self.int(v.into())
    }
    #[inline(always)]
    fn serialize_i64(self, v: i64) -> Result<Option<Value>, Error> {
        self.int(v)
    }
    #[inline(always)]
    fn serialize_u8(self, v: u8) -> Result<Option<Value>, Error> {
        self.int(v.into())
    }
    #[inline(always)]
    fn serialize_u16(self, v: u16) -> Result<Option<Value>, Error> {
        self.int(v.into())
    }
    #[inline(always)]
    fn serialize_u32(self, v: u32) -> Result<Option<Value>, Error> {
        self.int(v.into())
    }
    #[inline(always)]
    fn serialize_u64(self, v: u64) -> Result<Option<Value>, Error> {
        match i64::try_from(v) {
            Ok(v) => self.int(v),
            Err(_) => Ok(Some(Value::from(v))),
        }
    }
    fn serialize_i128(self, v: i128) -> Result<Option<Value>, Error> {
        let v = ValueSerializer.serialize_i128(v)?;
        self.keep(v)
    }
    fn serialize_u128(self, v: u128) -> Result<Option<Value>, Error> {
        let v = ValueSerializer.serialize_u128(v)?;
        self.keep(v)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Option<Value>, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Option<Value>, Error> {
        if name == MAGIC {
            let v = ValueSerializer.serialize_newtype_struct(name, value)?;
            return self.keep(v);
        }
        value.serialize(self)
    }

    delegate_to_value! {
        serialize_bool(v: bool);
        serialize_f32(v: f32);
        serialize_f64(v: f64);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Option<Value>, Error> {
        ValueSerializer
            .serialize_newtype_variant(name, index, variant, value)
            .map(Some)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Whole<SeqBuilder>, Error> {
        ValueSerializer.serialize_seq(len).map(Whole)
    }
    fn serialize_tuple(self, len: usize) -> Result<Whole<SeqBuilder>, Error> {
        ValueSerializer.serialize_tuple(len).map(Whole)
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Whole<SeqBuilder>, Error> {
        ValueSerializer.serialize_tuple_struct(name, len).map(Whole)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Whole<VariantBuilder<SeqBuilder>>, Error> {
        ValueSerializer
            .serialize_tuple_variant(name, index, variant, len)
            .map(Whole)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Whole<MapBuilder>, Error> {
        ValueSerializer.serialize_map(len).map(Whole)
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Whole<StructBuilder>, Error> {
        ValueSerializer.serialize_struct(name, len).map(Whole)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Whole<VariantBuilder<StructBuilder>>, Error> {
        ValueSerializer
            .serialize_struct_variant(name, index, variant, len)
            .map(Whole)
    }
}

/// `Whole` forwards a compound trait's calls to the builder it wraps.
macro_rules! whole {
    ($trait:ident for $builder:ty { $($method:ident($($arg:ident: $ty:ty),*);)* }) => {
        impl ser::$trait for Whole<$builder> {
            type Ok = Option<Value>;
            type Error = Error;
            $(fn $method<T: Serialize + ?Sized>(&mut self, $($arg: $ty,)* value: &T) -> Result<(), Error> {
                ser::$trait::$method(&mut self.0, $($arg,)* value)
            })*
            fn end(self) -> Result<Option<Value>, Error> {
                ser::$trait::end(self.0).map(Some)
            }
        }
    };
}

whole!(SerializeSeq for SeqBuilder { serialize_element(); });
whole!(SerializeTuple for SeqBuilder { serialize_element(); });
whole!(SerializeTupleStruct for SeqBuilder { serialize_field(); });
whole!(SerializeTupleVariant for VariantBuilder<SeqBuilder> { serialize_field(); });
whole!(SerializeStruct for StructBuilder { serialize_field(key: &'static str); });
whole!(SerializeStructVariant for VariantBuilder<StructBuilder> { serialize_field(key: &'static str); });

impl ser::SerializeMap for Whole<MapBuilder> {
    type Ok = Option<Value>;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        ser::SerializeMap::serialize_key(&mut self.0, key)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeMap::serialize_value(&mut self.0, value)
    }
    fn end(self) -> Result<Option<Value>, Error> {
        ser::SerializeMap::end(self.0).map(Some)
    }
}

/// A map's entries, in insertion order, any key type.
pub(super) struct MapBuilder {
    entries: Vec<(Value, Value)>,
    key: Option<Value>,
}

impl ser::SerializeMap for MapBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.key = Some(key.serialize(ValueSerializer)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().ok_or_else(Error::value_without_key)?;
        let value = value
            .serialize(ValueSerializer)
            .map_err(|e| e.at_key(&key))?;
        self.entries.push((key, value));
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Map(self.entries))
    }
}

/// A struct: a map keyed by its field names (static strings: no allocation
/// per key), in field order.
pub(super) struct StructBuilder {
    entries: Vec<(Value, Value)>,
}

impl ser::SerializeStruct for StructBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        let value = value
            .serialize(ValueSerializer)
            .map_err(|e| e.at_field(key))?;
        self.entries.push((Value::from_static(key), value));
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Map(self.entries))
    }
}

/// A tuple or struct variant: `{variant: [items]}` / `{variant: {fields}}`.
pub(super) struct VariantBuilder<B> {
    variant: &'static str,
    inner: B,
}

impl ser::SerializeTupleVariant for VariantBuilder<SeqBuilder> {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.inner
            .element(value)
            .map_err(|e| e.at_field(self.variant))
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Map(vec![(
            Value::from_static(self.variant),
            self.inner.finish(),
        )]))
    }
}

impl ser::SerializeStructVariant for VariantBuilder<StructBuilder> {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        let variant = self.variant;
        ser::SerializeStruct::serialize_field(&mut self.inner, key, value)
            .map_err(|e| e.at_field(variant))
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Map(vec![(
            Value::from_static(self.variant),
            Value::Map(self.inner.entries),
        )]))
    }
}
