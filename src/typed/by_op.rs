//! Reading a message as the type its `op` names (the channel enums of
//! `framewire::dask`), without buffering it: a type asks for
//! `deserialize_newtype_struct(BY_OP, visitor)`; a framewire deserializer
//! answers `visit_enum`, whose variant is the op (read by [`OpSeed`]) and
//! whose newtype content is the whole message, read by the type the op
//! names. Any other deserializer answers `visit_newtype_struct`, and the
//! type reads the message as a [`Value`](crate::Value) first.

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};

use super::error::Error;

/// The newtype name by which a type asks to be read by op.
pub(crate) const BY_OP: &str = "\0framewire::by-op";

/// What a message says its op is.
pub(super) enum OpIs<'a> {
    /// Its `op`: the first entry with that str key, when its value is a str.
    Str(&'a str),
    /// A map without a str `op`.
    Absent,
    /// Not a map.
    NotAMap,
}

/// The message as an enum: the variant is its op, the content the message.
pub(super) struct ByOp<'a, D> {
    op: OpIs<'a>,
    message: D,
}

impl<'a, D> ByOp<'a, D> {
    pub(super) fn new(op: OpIs<'a>, message: D) -> ByOp<'a, D> {
        ByOp { op, message }
    }
}

impl<'de, D: Deserializer<'de, Error = Error>> de::EnumAccess<'de> for ByOp<'_, D> {
    type Error = Error;
    type Variant = Whole<D>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Whole<D>), Error> {
        let op = seed.deserialize(OpDeserializer(self.op))?;
        Ok((op, Whole(self.message)))
    }
}

/// The whole message, as a newtype variant's content.
pub(super) struct Whole<D>(D);

fn not_newtype() -> Error {
    Error::new("a message read by its op is a newtype variant")
}

impl<'de, D: Deserializer<'de, Error = Error>> de::VariantAccess<'de> for Whole<D> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Err(not_newtype())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self.0)
    }
    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Error> {
        Err(not_newtype())
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        Err(not_newtype())
    }
}

/// The op, to [`OpSeed`]: a str, unit (a map without one), or none (not a
/// map).
struct OpDeserializer<'a>(OpIs<'a>);

impl<'de> Deserializer<'de> for OpDeserializer<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            OpIs::Str(op) => visitor.visit_str(op),
            OpIs::Absent => visitor.visit_unit(),
            OpIs::NotAMap => visitor.visit_none(),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}
