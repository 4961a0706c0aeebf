//! The wire forms the messages of every channel share: [`Map`], [`Keys`]
//! (a list or a Python set), [`Number`] (an int or a float, as it came),
//! [`Timedelta`], [`StartStop`], Dask's [`ErrorReply`], and the serde
//! helpers the message types name in their attributes.

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::key::Key;
use crate::value::Value;

/// A map that keeps its entries in the order they came (Dask's dicts do):
/// `indexmap::IndexMap`, hashed with foldhash. Build one with
/// `Map::default()` (or `collect`); `Map::new()` is for std's hasher only.
///
/// The maps of a message are built from what a peer sends, so their hasher
/// must be seeded at random, or a peer that knows it could send keys that
/// all collide (HashDoS): foldhash's `fast::RandomState` draws its global
/// seed at random once per process and a per-map seed each time, as std's
/// `RandomState` does, and hashes a message's short keys several times
/// faster than std's SipHash (which was 18 % of a typed decode of a
/// `compute-task`).
pub type Map<K, V> = indexmap::IndexMap<K, V, foldhash::fast::RandomState>;

/// A collection of keys: a list, or the `{"__Set__": true, "as-list": [...]}`
/// a Python `set` becomes (a worker fetching dependencies sends one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    /// A list (or tuple).
    List(Vec<Key>),
    /// A set.
    Set(Vec<Key>),
}

impl Keys {
    /// The keys, whatever the form.
    pub fn keys(&self) -> &[Key] {
        match self {
            Keys::List(k) | Keys::Set(k) => k,
        }
    }
}

/// The wire form of a Python set.
#[derive(Serialize, Deserialize)]
struct SetForm {
    #[serde(rename = "__Set__")]
    set: bool,
    #[serde(rename = "as-list")]
    as_list: Vec<Key>,
}

impl Serialize for Keys {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Keys::List(k) => k.serialize(s),
            Keys::Set(k) => SetForm {
                set: true,
                as_list: k.clone(),
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            List(Vec<Key>),
            Set(SetForm),
        }
        Ok(match Form::deserialize(d)? {
            Form::List(k) => Keys::List(k),
            Form::Set(s) => Keys::Set(s.as_list),
        })
    }
}

/// What a task spent its time on: `{"action", "start", "stop"[, "source"]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StartStop {
    /// `"compute"`, `"transfer"`, `"disk-read"`...
    pub action: String,
    /// Seconds since the epoch.
    pub start: f64,
    /// Seconds since the epoch.
    pub stop: f64,
    /// Where a transfer came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Dask's error reply (`distributed.core.error_message`): a handler raised
/// (`"uncaught-error"`) or reported an error (`"error"`). `exception` and
/// `traceback` are pickled (a block, or its bytes once deserialized);
/// framewire reads the texts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// `"error"` or `"uncaught-error"`.
    pub status: String,
    /// The pickled exception.
    #[serde(default)]
    pub exception: Value,
    /// The pickled traceback, or nil.
    #[serde(default)]
    pub traceback: Value,
    /// `repr` of the exception.
    #[serde(default)]
    pub exception_text: String,
    /// The formatted traceback.
    #[serde(default)]
    pub traceback_text: String,
}

/// A number as Dask wrote it, an int or a float. Where the 2026.8.0 source
/// says `float`, Python still lets an int through, and Dask sends one:
/// `heartbeat_interval(n)` is the int `1` for 11 to 49 workers
/// (`scheduler.py:9203-9213`), resources are whatever the user wrote
/// (`submit(..., resources={"GPU": 1})`). Kept as it came, so a message
/// encodes back to the same bytes; [`Number::as_f64`] reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// A msgpack int.
    Int(i64),
    /// A msgpack float.
    Float(f64),
}

impl Number {
    /// The value as a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

impl From<f64> for Number {
    fn from(f: f64) -> Number {
        Number::Float(f)
    }
}

impl From<i64> for Number {
    fn from(i: i64) -> Number {
        Number::Int(i)
    }
}

impl Serialize for Number {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Number::Int(i) => s.serialize_i64(i),
            Number::Float(f) => s.serialize_f64(f),
        }
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Number, D::Error> {
        struct NumberVisitor;
        impl serde::de::Visitor<'_> for NumberVisitor {
            type Value = Number;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number (int or float)")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Number, E> {
                i64::try_from(v)
                    .map(Number::Int)
                    .map_err(|_| E::custom(format!("{v} is above i64")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number::Float(v))
            }
        }
        d.deserialize_any(NumberVisitor)
    }
}

/// A duration as Dask's `parse_timedelta` reads it (`utils.py`): seconds
/// (an int or a float), or a string with its unit (`"100 ms"`, `"60s"`).
/// Kept as it came, so a message encodes back to the same bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Timedelta {
    /// Seconds.
    Seconds(Number),
    /// A number and a unit, as Dask's configuration writes them.
    Text(String),
}

/// The op of a message map, if it has one.
pub(crate) fn op_of(v: &Value) -> Option<&str> {
    v.get("op").and_then(Value::as_str)
}

/// A message's `reply` key: absent is `None` (Dask's server replies), and
/// nil reads as `Some(false)`: Dask's `handle_comm` tests the value's truth,
/// so a nil `reply` asks for no reply, which an absent one would not say.
pub(crate) fn reply_flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(Some(Option::<bool>::deserialize(d)?.unwrap_or(false)))
}

/// A key that may be absent and may be nil, read as `Some` of what it holds
/// (`Some(None)` or `Some(Value::Nil)` for a nil): with `default` (absent is
/// `None`) and `skip_serializing_if = "Option::is_none"`, a nil is written
/// back as nil and an absent key stays absent.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// What a message's op is to a type that knows the ops `names`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dispatch {
    /// One of the names.
    Known(&'static str),
    /// A map whose op is none of them, or that has none.
    Unknown,
    /// Not a map.
    NotAMap,
}

/// Reads the variant the typed layer's by-op reading hands out
/// (`typed::BY_OP`) as a [`Dispatch`] over `names`.
pub(crate) struct OpSeed(pub(crate) &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for OpSeed {
    type Value = Dispatch;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Dispatch, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OpSeed {
    type Value = Dispatch;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a message's op")
    }
    fn visit_str<E: de::Error>(self, op: &str) -> Result<Dispatch, E> {
        Ok(self
            .0
            .iter()
            .find(|name| **name == op)
            .map_or(Dispatch::Unknown, |name| Dispatch::Known(name)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Dispatch, E> {
        Ok(Dispatch::Unknown)
    }
    fn visit_none<E: de::Error>(self) -> Result<Dispatch, E> {
        Ok(Dispatch::NotAMap)
    }
}
