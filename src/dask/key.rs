//! [`Key`]: a Dask key, as it travels in a message.

use std::fmt;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::typed::Bin;

/// A Dask key: a str, an int, a float, or a tuple of keys (nested at any
/// depth), as `dask.typing.Key` defines it. On the wire a tuple is a msgpack
/// array (Dask decodes arrays as tuples), so keys round-trip exactly.
/// `bytes` keys are not valid in Dask 2026.8.0 (`dask.core.iskey`), but a
/// bin is read and written back unchanged.
///
/// ```
/// use framewire::dask::Key;
/// use framewire::Value;
///
/// let key = Key::from(("x", 3));
/// assert_eq!(key.to_string(), "('x', 3)");
/// let v = framewire::to_value(&key)?;
/// assert_eq!(v, Value::Array(vec![Value::str("x"), Value::from(3)]));
/// assert_eq!(framewire::from_value::<Key>(v)?, key);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub enum Key {
    /// A str key, e.g. `"inc-6a3c…"`.
    Str(String),
    /// An integer key.
    Int(i64),
    /// A float key (compared and hashed by its bits).
    Float(f64),
    /// A bin (not a valid Dask key; kept as it came).
    Bytes(Bytes),
    /// A tuple of keys, e.g. `("x", 0, 1)`.
    Tuple(Vec<Key>),
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        match (self, other) {
            (Key::Str(a), Key::Str(b)) => a == b,
            (Key::Int(a), Key::Int(b)) => a == b,
            (Key::Float(a), Key::Float(b)) => a.to_bits() == b.to_bits(),
            (Key::Bytes(a), Key::Bytes(b)) => a == b,
            (Key::Tuple(a), Key::Tuple(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Key::Str(s) => s.hash(h),
            Key::Int(i) => i.hash(h),
            Key::Float(f) => f.to_bits().hash(h),
            Key::Bytes(b) => b.hash(h),
            Key::Tuple(t) => t.hash(h),
        }
    }
}

/// Python's `repr` of the key: `'x'`, `3`, `('x', 0)`.
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Str(s) => write!(f, "'{s}'"),
            Key::Int(i) => write!(f, "{i}"),
            Key::Float(x) => write!(f, "{x:?}"),
            Key::Bytes(b) => write!(f, "b{b:?}"),
            Key::Tuple(items) => {
                f.write_str("(")?;
                for (i, k) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}")?;
                }
                if items.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::Str(s.to_owned())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Key {
        Key::Str(s)
    }
}

impl From<i64> for Key {
    fn from(i: i64) -> Key {
        Key::Int(i)
    }
}

impl From<i32> for Key {
    fn from(i: i32) -> Key {
        Key::Int(i.into())
    }
}

impl<A: Into<Key>, B: Into<Key>> From<(A, B)> for Key {
    fn from((a, b): (A, B)) -> Key {
        Key::Tuple(vec![a.into(), b.into()])
    }
}

impl<A: Into<Key>, B: Into<Key>, C: Into<Key>> From<(A, B, C)> for Key {
    fn from((a, b, c): (A, B, C)) -> Key {
        Key::Tuple(vec![a.into(), b.into(), c.into()])
    }
}

impl Serialize for Key {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Key::Str(k) => s.serialize_str(k),
            Key::Int(i) => s.serialize_i64(*i),
            Key::Float(x) => s.serialize_f64(*x),
            Key::Bytes(b) => Bin::from(b.clone()).serialize(s),
            Key::Tuple(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for k in items {
                    seq.serialize_element(k)?;
                }
                seq.end()
            }
        }
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Dask key (str, int, float, or an array of keys)")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Key, E> {
        Ok(Key::Str(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
        Ok(Key::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
        i64::try_from(v)
            .map(Key::Int)
            .map_err(|_| E::custom(format!("key {v} is above i64")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
        Ok(Key::Float(v))
    }
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Key, E> {
        Bin::deserialize(de::value::BorrowedBytesDeserializer::new(v))
            .map(|b| Key::Bytes(b.into_bytes()))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
        Ok(Key::Bytes(Bytes::copy_from_slice(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(k) = seq.next_element()? {
            items.push(k);
        }
        Ok(Key::Tuple(items))
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        d.deserialize_any(KeyVisitor)
    }
}
