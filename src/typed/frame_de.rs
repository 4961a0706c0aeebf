//! `Deserializer` that reads frame 0 itself ([`from_frames`](super::from_frames)):
//! what [`from_value`](super::from_value) makes of what `loads` gives, without
//! building the message's `Value`.
//!
//! Items are read as serde asks for them through the msgpack layer's
//! [`Stream`] (the decoder's own reader, depth and item budget). A
//! placeholder is claimed by the message layer's [`Claims`], with every
//! check `loads` makes, and its block deserialized as `loads` does; the
//! value it gives (kept in an arena for as long as the conversion, since
//! serde may borrow from it) is read by the [`ValueDeserializer`]. So are
//! whole subtrees a type wants as a [`Value`](crate::Value), and what a type
//! ignores is decoded (so checked, its blocks claimed) and dropped: a
//! message is accepted exactly when `loads` accepts it.

use std::cell::OnceCell;

use bytes::Bytes;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use typed_arena::Arena;

use super::de::{kind as value_kind, ValueDeserializer};
use super::error::Error;
use super::types::MAGIC;
use super::{by_op, side};
use crate::message::{
    is_placeholder_at, placeholder_at, BlockKind, Claims, MessageError, PICKLED_KEY, SERIALIZED_KEY,
};
use crate::msgpack::{self, StrItem, Stream, Token};
use crate::serialize::{self, DecompressBudget, DeserializeOptions};
use crate::value::{Block, Value};

/// How deep in frame 0 items are read one by one: below, a value is decoded
/// whole and read by the value deserializer, whose recursion (a type such
/// as `Key` that nests as deep as the message does) takes less stack per
/// level. No Dask message comes near.
const DIRECT_DEPTH: usize = 32;

/// The state of one message being read.
pub(super) struct Decoder<'de> {
    frame0: &'de Bytes,
    stream: Stream<'de>,
    claims: Claims<'de>,
    opts: &'de DeserializeOptions,
    budget: DecompressBudget,
    /// The values of the blocks read so far (serde borrows from them); made
    /// at the first.
    arena: &'de OnceCell<Arena<Value>>,
    /// The str of the last op [`FrameDeserializer::by_op`] looked up, whose
    /// UTF-8 was validated then: read again as the op field, it is not
    /// validated twice.
    op: Option<StrItem<'de>>,
}

/// What a placeholder gives: a pickled block as it is, a serialized
/// block's value (deserialized as `loads` does).
enum Claimed {
    Block(Block),
    Value(Value),
}

impl Claimed {
    fn into_value(self) -> Value {
        match self {
            Claimed::Block(b) => b.into_value(),
            Claimed::Value(v) => v,
        }
    }
}

impl<'de> Decoder<'de> {
    #[inline]
    pub(super) fn new(
        frames: &'de [Bytes],
        opts: &'de DeserializeOptions,
        arena: &'de OnceCell<Arena<Value>>,
    ) -> Result<Decoder<'de>, Error> {
        let claims = Claims::new(frames, &opts.limits)?;
        let frame0 = &frames[0];
        Ok(Decoder {
            frame0,
            stream: Stream::new(frame0, 0, &opts.limits)?,
            claims,
            opts,
            budget: DecompressBudget::new(&opts.limits),
            arena,
            op: None,
        })
    }

    /// The next item, as [`Stream::next`] reads it.
    #[inline]
    fn next(&mut self) -> Result<Token<'de>, Error> {
        if let Some(op) = self.op.filter(|op| op.start == self.stream.pos()) {
            self.stream.next_known_str(op.end)?;
            return Ok(Token::Str(op.text));
        }
        Ok(self.stream.next()?)
    }

    /// Refuses bytes after frame 0's value.
    pub(super) fn finish(&self) -> Result<(), Error> {
        Ok(self.stream.finish()?)
    }

    /// The whole value here, as `loads` gives it: placeholders claimed and
    /// their blocks deserialized.
    fn value(&mut self) -> Result<Value, Error> {
        match self.block()? {
            Some(b) => Ok(b.into_value()),
            None => self.value_not_block(),
        }
    }

    /// The whole value here, where [`Decoder::block`] found none.
    fn value_not_block(&mut self) -> Result<Value, Error> {
        let Decoder {
            stream,
            claims,
            opts,
            budget,
            ..
        } = self;
        stream.value(&mut |entries, at| match claims.resolve(entries, at)? {
            Value::Serialized(block) => {
                Ok(serialize::deserialize_with_budget(&block, opts, budget)?)
            }
            other => Ok(other),
        })
    }

    /// What the placeholder here gives, as [`Decoder::value`] gives it,
    /// read in place: its three items counted and checked as `value` checks
    /// them, no map built for it; a pickled block as it is (no `Value`
    /// around it). `None` when there is none here, or its offset is not an
    /// int of 1 or more (`value` refuses it).
    #[inline]
    fn block(&mut self) -> Result<Option<Claimed>, Error> {
        let Some((kind, offset)) = self.placeholder()? else {
            return Ok(None);
        };
        let block = self.claims.claim(kind, offset)?;
        Ok(Some(match kind {
            BlockKind::Pickled => Claimed::Block(block),
            BlockKind::Serialized => Claimed::Value(self.deserialize(&block)?),
        }))
    }

    /// The placeholder here, read (its three items counted and checked as
    /// [`Decoder::value`] checks them): its kind and offset. `None` (and
    /// nothing read) when there is none here, or its offset is not an int
    /// of 1 or more (`value` refuses it).
    #[inline]
    fn placeholder(&mut self) -> Result<Option<(BlockKind, u64)>, Error> {
        let Some((kind, offset)) = placeholder_at(self.frame0, self.stream.pos()) else {
            return Ok(None);
        };
        self.stream.next()?; // the map
        match self.stream.str_among(&[SERIALIZED_KEY, PICKLED_KEY], 0) {
            // The key placeholder_at read: no UTF-8 to validate again.
            Some((_, end)) => self.stream.next_known_str(end)?,
            None => {
                self.stream.next()?;
            }
        }
        self.stream.next()?; // the offset
        Ok(Some((kind, offset)))
    }

    /// A serialized block's value, deserialized as `loads` does.
    fn deserialize(&mut self, block: &Block) -> Result<Value, Error> {
        Ok(serialize::deserialize_with_budget(
            block,
            self.opts,
            &mut self.budget,
        )?)
    }

    /// The value here in the side table, as [`Decoder::value`] gives it (a
    /// pickled block stashed as the block it is): its token.
    fn stash_value(&mut self) -> Result<u64, Error> {
        // As `block` reads it, the block stashed where it is claimed (a
        // block is large: moved as few times as can be).
        let Some((kind, offset)) = self.placeholder()? else {
            return Ok(side::stash(self.value_not_block()?));
        };
        let block = self.claims.claim(kind, offset)?;
        Ok(match kind {
            BlockKind::Pickled => side::stash_block(block),
            BlockKind::Serialized => side::stash(self.deserialize(&block)?),
        })
    }

    /// [`Decoder::value`], kept for as long as the conversion.
    #[inline(never)]
    fn kept_value(&mut self) -> Result<&'de Value, Error> {
        let v = self.value()?;
        Ok(self.arena.get_or_init(Arena::new).alloc(v))
    }

    /// The value here, decoded, when it is not read item by item: a
    /// placeholder's (its block's value), or anything nested deeper than
    /// [`DIRECT_DEPTH`] (the value deserializer needs less stack a level).
    #[inline(always)]
    fn whole(&mut self) -> Result<Option<&'de Value>, Error> {
        match self.stream.depth() >= DIRECT_DEPTH
            || is_placeholder_at(self.frame0, self.stream.pos())
        {
            true => self.kept_value().map(Some),
            false => Ok(None),
        }
    }

    /// Reads past the value here (checked, its blocks claimed): what a
    /// type ignores.
    fn skip(&mut self) -> Result<(), Error> {
        self.value().map(drop)
    }

    /// The key starting at `pos`, decoded again for the path of an error.
    fn key_at(&self, pos: usize) -> Value {
        msgpack::value_at(self.frame0, pos).unwrap_or(Value::Nil)
    }
}

/// Deserializes the value at the decoder's position.
pub(super) struct FrameDeserializer<'a, 'de> {
    pub(super) d: &'a mut Decoder<'de>,
}

impl<'a, 'de> FrameDeserializer<'a, 'de> {
    fn seq<V: Visitor<'de>>(self, len: u64, visitor: V) -> Result<V::Value, Error> {
        let entered = self.d.stream.enter(len, 1);
        let mut items = SeqAccess {
            d: &mut *self.d,
            left: len,
            index: 0,
            hint: entered.hint,
        };
        let mut value = visitor.visit_seq(&mut items);
        if value.is_ok() {
            for _ in 0..items.left {
                if let Err(e) = self.d.skip() {
                    value = Err(e);
                    break;
                }
            }
        }
        self.d.stream.leave(entered);
        value
    }

    /// A map's entries; `fields`, the names of the struct it is read as
    /// (empty for a map), are keys read without decoding them again.
    fn map<V: Visitor<'de>>(
        self,
        len: u64,
        start: usize,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let entered = self.d.stream.enter(len, 2);
        let mut entries = MapAccess {
            d: &mut *self.d,
            left: len,
            start,
            fields,
            next_field: 0,
            key: Key::At(0),
            value_pending: false,
            hint: entered.hint,
        };
        // The visitor's result is returned as it is, from the one place it
        // is made (an error of the rest replaces it there): a struct's can
        // be large, and a value returned on every path needs no copy.
        let mut value = visitor.visit_map(&mut entries);
        // Most visitors read every entry: nothing left to skip.
        if value.is_ok() && (entries.value_pending || entries.left > 0) {
            if let Err(e) = entries.skip_rest() {
                value = Err(e);
            }
        }
        self.d.stream.leave(entered);
        value
    }

    /// The channel enums' dispatch (`by_op`): the op of the map here, then
    /// the map itself, read as the type the op names.
    fn by_op<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let buf = self.d.frame0;
        let pos = self.d.stream.pos();
        if let Some(v) = self.d.whole()? {
            return de::Deserializer::deserialize_newtype_struct(
                ValueDeserializer::new(v),
                by_op::BY_OP,
                visitor,
            );
        }
        if !msgpack::is_map_at(buf, pos) {
            return visitor.visit_enum(by_op::ByOp::new(by_op::OpIs::NotAMap, self));
        }
        match msgpack::lookup_str_item(buf, pos, "op") {
            Some(op) => {
                self.d.op = op;
                let op = op.map_or(by_op::OpIs::Absent, |op| by_op::OpIs::Str(op.text));
                visitor.visit_enum(by_op::ByOp::new(op, self))
            }
            // A map whose op a block may give: as a value.
            None => {
                let v = self.d.kept_value()?;
                de::Deserializer::deserialize_newtype_struct(
                    ValueDeserializer::new(v),
                    by_op::BY_OP,
                    visitor,
                )
            }
        }
    }
}

impl<'de> FrameDeserializer<'_, 'de> {
    /// The value `token` (read at `start`) begins, to `visitor`; `fields`
    /// as [`FrameDeserializer::map`] takes them.
    #[inline(always)]
    fn token<V: Visitor<'de>>(
        self,
        start: usize,
        token: Token<'de>,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match token {
            Token::Nil => visitor.visit_unit(),
            Token::Bool(b) => visitor.visit_bool(b),
            Token::Int(i) => match i.as_u64() {
                Some(u) => visitor.visit_u64(u),
                None => visitor.visit_i64(i.as_i64().unwrap_or(i64::MIN)),
            },
            Token::Float(f) => visitor.visit_f64(f),
            Token::Str(s) => visitor.visit_borrowed_str(s),
            Token::Bin(b) => {
                side::own(self.d.frame0);
                visitor.visit_borrowed_bytes(b)
            }
            Token::Array(len) => self.seq(len, visitor),
            Token::Map(len) => self.map(len, start, fields, visitor),
        }
    }
}

/// What kind of value a token starts.
fn kind(t: &Token<'_>) -> &'static str {
    match t {
        Token::Nil => "nil",
        Token::Bool(_) => "a bool",
        Token::Int(_) => "an integer",
        Token::Float(_) => "a float",
        Token::Str(_) => "a str",
        Token::Bin(_) => "a bin",
        Token::Array(_) => "an array",
        Token::Map(_) => "a map",
    }
}

impl<'de> de::Deserializer<'de> for FrameDeserializer<'_, 'de> {
    type Error = Error;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if let Some(v) = self.d.whole()? {
            return ValueDeserializer::new(v).deserialize_any(visitor);
        }
        let start = self.d.stream.pos();
        let token = self.d.next()?;
        self.token(start, token, &[], visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if let Some(v) = self.d.whole()? {
            return ValueDeserializer::new(v).deserialize_option(visitor);
        }
        if self.d.stream.at_nil() {
            self.d.stream.next()?;
            return visitor.visit_none();
        }
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        if name == MAGIC {
            // A framewire type asks for the value itself.
            return visitor.visit_u64(self.d.stash_value()?);
        }
        if name == by_op::BY_OP {
            return self.by_op(visitor);
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        if let Some(v) = self.d.whole()? {
            return ValueDeserializer::new(v).deserialize_enum(name, variants, visitor);
        }
        match self.d.next()? {
            Token::Str(s) => visitor.visit_enum(s.into_deserializer()),
            Token::Map(1) => {
                let entered = self.d.stream.enter(1, 2);
                let key = Key::At(self.d.stream.pos());
                let value = visitor.visit_enum(EnumAccess {
                    d: &mut *self.d,
                    key,
                })?;
                self.d.stream.leave(entered);
                Ok(value)
            }
            other => Err(Error::not_an_enum(kind(&other))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.d.skip()?;
        visitor.visit_unit()
    }

    // A block or an array is a map only to `deserialize_any`, never to a
    // type that asks for a map (the value deserializer refuses it).
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if let Some(v) = self.d.whole()? {
            return ValueDeserializer::new(v).deserialize_map(visitor);
        }
        self.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        if let Some(v) = self.d.whole()? {
            return ValueDeserializer::new(v).deserialize_struct(name, fields, visitor);
        }
        let start = self.d.stream.pos();
        let token = self.d.next()?;
        self.token(start, token, fields, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct identifier
    }
}

struct SeqAccess<'a, 'de> {
    d: &'a mut Decoder<'de>,
    left: u64,
    index: usize,
    hint: usize,
}

impl<'de> de::SeqAccess<'de> for SeqAccess<'_, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let index = self.index;
        self.index += 1;
        match seed.deserialize(FrameDeserializer { d: &mut *self.d }) {
            Ok(v) => Ok(Some(v)),
            Err(e) => Err(e.at_index(index)),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(
            self.hint
                .min(usize::try_from(self.left).unwrap_or(usize::MAX)),
        )
    }
}

/// A map key, for the path of an error: where it is in frame 0, or the
/// value of the block it is.
#[derive(Clone, Copy)]
enum Key<'de> {
    At(usize),
    Block(&'de Value),
}

impl Key<'_> {
    fn value(self, d: &Decoder<'_>) -> Value {
        match self {
            Key::At(pos) => d.key_at(pos),
            Key::Block(v) => v.clone(),
        }
    }
}

struct MapAccess<'a, 'de> {
    d: &'a mut Decoder<'de>,
    left: u64,
    /// Where the map starts.
    start: usize,
    /// The field names of the struct it is read as (empty for a map).
    fields: &'static [&'static str],
    /// The field the next key is likely to name (the one after the last).
    next_field: usize,
    key: Key<'de>,
    value_pending: bool,
    hint: usize,
}

impl<'de> MapAccess<'_, 'de> {
    /// A map of frame 0 that uses a reserved key as a key, and is not a
    /// one-entry placeholder (which was read as its block), is refused.
    #[inline]
    fn check_key(&self) -> Result<(), Error> {
        let reserved = msgpack::is_str_at(
            self.d.frame0,
            self.d.stream.pos(),
            SERIALIZED_KEY,
            PICKLED_KEY,
        );
        match reserved {
            true => Err(MessageError::AmbiguousReference {
                at: self.d.stream.at(self.start),
            }
            .into()),
            false => Ok(()),
        }
    }

    /// The key here, when it is a str naming one of the struct's fields:
    /// that name and where the str ends (not read yet; [`KnownKey`] reads
    /// it). A reserved key is refused as [`MapAccess::check_key`] refuses
    /// it; a str is no placeholder.
    #[inline(always)]
    fn known_field(&mut self) -> Result<Option<(&'static str, usize)>, Error> {
        if self.fields.is_empty() {
            return Ok(None);
        }
        let Some((i, end)) = self.d.stream.str_among(self.fields, self.next_field) else {
            return Ok(None);
        };
        self.next_field = i + 1;
        let name = self.fields[i];
        if name == SERIALIZED_KEY || name == PICKLED_KEY {
            return Err(MessageError::AmbiguousReference {
                at: self.d.stream.at(self.start),
            }
            .into());
        }
        self.key = Key::At(self.d.stream.pos());
        self.value_pending = true;
        Ok(Some((name, end)))
    }

    /// What the visitor left unread, checked as `loads` checks it.
    fn skip_rest(&mut self) -> Result<(), Error> {
        if self.value_pending {
            self.value_pending = false;
            self.d.skip()?;
        }
        while self.left > 0 {
            self.left -= 1;
            self.check_key()?;
            self.d.skip()?;
            self.d.skip()?;
        }
        Ok(())
    }
}

impl<'de> de::MapAccess<'de> for MapAccess<'_, 'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.value_pending {
            // The visitor skipped a value.
            self.value_pending = false;
            self.d.skip()?;
        }
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        if let Some((name, end)) = self.known_field()? {
            let key = KnownKey {
                d: &mut *self.d,
                name,
                end,
            };
            return seed
                .deserialize(key)
                .map(Some)
                .map_err(|e| e.at_key(&self.key.value(self.d)));
        }
        self.check_key()?;
        self.value_pending = true;
        let key = match self.d.whole()? {
            Some(v) => Key::Block(v),
            None => Key::At(self.d.stream.pos()),
        };
        self.key = key;
        let r = match key {
            Key::Block(v) => seed.deserialize(ValueDeserializer::new(v)),
            Key::At(_) => seed.deserialize(FrameDeserializer { d: &mut *self.d }),
        };
        r.map(Some).map_err(|e| e.at_key(&key.value(self.d)))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        if !self.value_pending {
            return Err(Error::value_without_key());
        }
        self.value_pending = false;
        let key = self.key;
        seed.deserialize(FrameDeserializer { d: &mut *self.d })
            .map_err(|e| e.at_key(&key.value(self.d)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(
            self.hint
                .min(usize::try_from(self.left).unwrap_or(usize::MAX)),
        )
    }
}

/// A struct's key that names one of its fields ([`MapAccess::known_field`]):
/// read as that name when asked for as a field name or a str (no UTF-8 to
/// validate: the name's bytes are), as any other key otherwise.
struct KnownKey<'a, 'de> {
    d: &'a mut Decoder<'de>,
    name: &'static str,
    /// Where the key's str ends.
    end: usize,
}

impl<'a, 'de> KnownKey<'a, 'de> {
    fn name<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.d.stream.next_known_str(self.end)?;
        visitor.visit_borrowed_str(self.name)
    }

    fn other(self) -> FrameDeserializer<'a, 'de> {
        FrameDeserializer { d: self.d }
    }
}

impl<'de> de::Deserializer<'de> for KnownKey<'_, 'de> {
    type Error = Error;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.name(visitor)
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.name(visitor)
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.name(visitor)
    }
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.name(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.other().deserialize_option(visitor)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.other().deserialize_newtype_struct(name, visitor)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.other().deserialize_enum(name, variants, visitor)
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.other().deserialize_ignored_any(visitor)
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.other().deserialize_map(visitor)
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.other().deserialize_struct(name, fields, visitor)
    }

    // As the frame deserializer reads them: its `deserialize_any`, here
    // the name (a str key is the same str either way).
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char
        bytes byte_buf unit unit_struct seq tuple tuple_struct
    }
}

/// `{variant: content}`: the key names the variant.
struct EnumAccess<'a, 'de> {
    d: &'a mut Decoder<'de>,
    key: Key<'de>,
}

impl<'a, 'de> de::EnumAccess<'de> for EnumAccess<'a, 'de> {
    type Error = Error;
    type Variant = VariantAccess<'a, 'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantAccess<'a, 'de>), Error> {
        let key = match self.d.whole()? {
            Some(v) => Key::Block(v),
            None => self.key,
        };
        let variant = match key {
            Key::Block(v) => seed.deserialize(ValueDeserializer::new(v))?,
            Key::At(_) => seed.deserialize(FrameDeserializer { d: &mut *self.d })?,
        };
        Ok((variant, VariantAccess { d: self.d, key }))
    }
}

struct VariantAccess<'a, 'de> {
    d: &'a mut Decoder<'de>,
    key: Key<'de>,
}

impl<'de> de::VariantAccess<'de> for VariantAccess<'_, 'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        let found = match self.d.whole()? {
            Some(Value::Nil) => return Ok(()),
            Some(v) => value_kind(v),
            None => match self.d.next()? {
                Token::Nil => return Ok(()),
                other => kind(&other),
            },
        };
        Err(Error::unit_variant_holds(found))
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        let key = self.key;
        seed.deserialize(FrameDeserializer { d: &mut *self.d })
            .map_err(|e| e.at_key(&key.value(self.d)))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Error> {
        let key = self.key;
        de::Deserializer::deserialize_seq(FrameDeserializer { d: &mut *self.d }, visitor)
            .map_err(|e| e.at_key(&key.value(self.d)))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let key = self.key;
        de::Deserializer::deserialize_map(FrameDeserializer { d: &mut *self.d }, visitor)
            .map_err(|e| e.at_key(&key.value(self.d)))
    }
}
