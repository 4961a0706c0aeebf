//! `Deserializer` over a borrowed [`Value`]: str and bin are handed to
//! serde as borrowed slices (serde's own buffering keeps them borrowed, and
//! a [`Bin`](super::Bin) takes a slice of their buffer back); blocks,
//! arrays and out-of-band values travel through the side table by index.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::error::Error;
use super::types::{MAGIC, MARKER_KEY};
use super::{by_op, side};
use crate::value::Value;

/// Deserializes from a borrowed [`Value`].
pub(super) struct ValueDeserializer<'de> {
    value: &'de Value,
}

impl<'de> ValueDeserializer<'de> {
    pub(super) fn new(value: &'de Value) -> ValueDeserializer<'de> {
        ValueDeserializer { value }
    }

    /// A value the serde data model has no room for: stashed, and handed to
    /// the visitor as the one-entry map `{MARKER_KEY: index}` (which
    /// survives serde's buffering) that the framewire types take it back from.
    fn visit_stashed<V: Visitor<'de>>(&self, visitor: V) -> Result<V::Value, Error> {
        let index = side::stash(self.value.clone());
        visitor.visit_map(MarkerAccess { index: Some(index) })
    }
}

impl ValueDeserializer<'_> {
    /// An error when the value is one that travels through the side table.
    fn not_stashed(&self, expected: &str) -> Result<(), Error> {
        match self.value {
            Value::Serialized(_)
            | Value::Pickled(_)
            | Value::ToSerialize(_)
            | Value::NdArray(_) => Err(Error::new(format!(
                "expected {expected}, found {}",
                kind(self.value)
            ))),
            _ => Ok(()),
        }
    }
}

fn int_error(v: &Value) -> Error {
    Error::new(format!("{v:?} does not fit the integer type"))
}

impl<'de> de::Deserializer<'de> for ValueDeserializer<'de> {
    type Error = Error;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Nil => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) => visitor.visit_u64(u),
                (None, Some(s)) => visitor.visit_i64(s),
                (None, None) => Err(int_error(self.value)),
            },
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Str(s) => visitor.visit_borrowed_str(s),
            Value::Bin(b) => {
                side::own(b);
                visitor.visit_borrowed_bytes(b)
            }
            Value::Array(items) => visitor.visit_seq(SeqAccess {
                items: items.iter(),
                index: 0,
            }),
            Value::IntArray(ints) => visitor.visit_seq(IntSeqAccess {
                ints: ints.iter(),
                index: 0,
            }),
            Value::BinArray(bins) => visitor.visit_seq(BinSeqAccess { bins, index: 0 }),
            Value::Map(entries) => visitor.visit_map(MapAccess {
                entries: entries.iter(),
                value: None,
            }),
            Value::Serialized(_)
            | Value::Pickled(_)
            | Value::ToSerialize(_)
            | Value::NdArray(_) => self.visit_stashed(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Nil => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        if name == MAGIC {
            // A framewire type asks for the value itself.
            return visitor.visit_u64(side::stash(self.value.clone()));
        }
        if name == by_op::BY_OP {
            let op = match self.value {
                Value::Map(_) => match self.value.get("op").and_then(Value::as_str) {
                    Some(op) => by_op::OpIs::Str(op),
                    None => by_op::OpIs::Absent,
                },
                _ => by_op::OpIs::NotAMap,
            };
            return visitor.visit_enum(by_op::ByOp::new(op, self));
        }
        visitor.visit_newtype_struct(self)
    }

    /// A unit variant is its name; any other is `{variant: content}` (as
    /// serde_json reads them).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            Value::Str(s) => visitor.visit_enum((&**s).into_deserializer()),
            Value::Map(entries) if entries.len() == 1 => visitor.visit_enum(EnumAccess {
                variant: &entries[0].0,
                content: &entries[0].1,
            }),
            other => Err(Error::not_an_enum(kind(other))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    // A block or an array is a map only to `deserialize_any` (serde's
    // buffering, `Value`), never to a type that asks for a map.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.not_stashed("a map")?;
        self.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.not_stashed("a map (a struct)")?;
        self.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct identifier
    }
}

/// What kind of value an error met.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Bool(_) => "a bool",
        Value::Int(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Str(_) => "a str",
        Value::Bin(_) => "a bin",
        Value::Array(_) | Value::IntArray(_) | Value::BinArray(_) => "an array",
        Value::Map(_) => "a map",
        Value::Serialized(_) | Value::Pickled(_) => "a block",
        Value::ToSerialize(_) => "a value to serialize",
        Value::NdArray(_) => "an array (ndarray)",
    }
}

struct SeqAccess<'de> {
    items: std::slice::Iter<'de, Value>,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for SeqAccess<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(ValueDeserializer::new(item))
            .map(Some)
            .map_err(|e| e.at_index(index))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The items of a packed [`Value::IntArray`], handed out as integers.
struct IntSeqAccess<'de> {
    ints: std::slice::Iter<'de, i64>,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for IntSeqAccess<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(&x) = self.ints.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(x.into_deserializer())
            .map(Some)
            .map_err(|e: Error| e.at_index(index))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.ints.len())
    }
}

/// The items of a packed [`Value::BinArray`], handed out as borrowed bytes
/// (views of their buffer, as a [`Value::Bin`]'s are).
struct BinSeqAccess<'de> {
    bins: &'de crate::value::BinArray,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for BinSeqAccess<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some((owner, item)) = self.bins.item_in(self.index) else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        side::own(owner);
        let item: de::value::BorrowedBytesDeserializer<'de, Error> =
            de::value::BorrowedBytesDeserializer::new(item);
        seed.deserialize(item)
            .map(Some)
            .map_err(|e: Error| e.at_index(index))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.bins.len() - self.index)
    }
}

struct MapAccess<'de> {
    entries: std::slice::Iter<'de, (Value, Value)>,
    value: Option<&'de (Value, Value)>,
}

impl<'de> de::MapAccess<'de> for MapAccess<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(entry);
        seed.deserialize(ValueDeserializer::new(&entry.0))
            .map(Some)
            .map_err(|e| e.at_key(&entry.0))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let entry = self.value.take().ok_or_else(Error::value_without_key)?;
        seed.deserialize(ValueDeserializer::new(&entry.1))
            .map_err(|e| e.at_key(&entry.0))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// The one-entry map `{MARKER_KEY: index}` a stashed value is visited as.
struct MarkerAccess {
    index: Option<u64>,
}

impl<'de> de::MapAccess<'de> for MarkerAccess {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.index {
            Some(_) => seed.deserialize(MARKER_KEY.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let index = self.index.take().ok_or_else(Error::value_without_key)?;
        seed.deserialize(index.into_deserializer())
    }
}

struct EnumAccess<'de> {
    variant: &'de Value,
    content: &'de Value,
}

impl<'de> de::EnumAccess<'de> for EnumAccess<'de> {
    type Error = Error;
    type Variant = VariantAccess<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantAccess<'de>), Error> {
        let variant = seed.deserialize(ValueDeserializer::new(self.variant))?;
        Ok((
            variant,
            VariantAccess {
                variant: self.variant,
                content: self.content,
            },
        ))
    }
}

struct VariantAccess<'de> {
    variant: &'de Value,
    content: &'de Value,
}

impl<'de> de::VariantAccess<'de> for VariantAccess<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.content {
            Value::Nil => Ok(()),
            other => Err(Error::unit_variant_holds(kind(other))),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(ValueDeserializer::new(self.content))
            .map_err(|e| e.at_key(self.variant))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_seq(ValueDeserializer::new(self.content), visitor)
            .map_err(|e| e.at_key(self.variant))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_map(ValueDeserializer::new(self.content), visitor)
            .map_err(|e| e.at_key(self.variant))
    }
}
