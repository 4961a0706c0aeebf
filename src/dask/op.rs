//! [`Op`]: the `op` field of a message type.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::ser::{Serialize, Serializer};

/// A message type's op name.
pub trait OpName {
    /// The `op` string on the wire, from the 2026.8.0 source (handler tables
    /// `scheduler.py` `handlers` / `stream_handlers`, `worker.py`).
    const NAME: &'static str;
}

/// The `op` field of message type `M`: written as `M::NAME`, and read only
/// if the message says `M::NAME`. It is a field of its own so that it sits
/// where Dask puts it (first for most messages, after the fields for those
/// the worker's state machine writes), and the message's value round-trips
/// exactly.
///
/// ```
/// use framewire::dask::{KeepAlive, Op};
/// let v = framewire::to_value(&KeepAlive { op: Op::new() })?;
/// assert_eq!(v.get("op").and_then(framewire::Value::as_str), Some("keep-alive"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Op<M>(PhantomData<fn() -> M>);

impl<M> Op<M> {
    /// The op.
    pub const fn new() -> Op<M> {
        Op(PhantomData)
    }
}

impl<M> Default for Op<M> {
    fn default() -> Op<M> {
        Op::new()
    }
}

impl<M> Clone for Op<M> {
    fn clone(&self) -> Op<M> {
        *self
    }
}

impl<M> Copy for Op<M> {}

impl<M> PartialEq for Op<M> {
    fn eq(&self, _: &Op<M>) -> bool {
        true
    }
}

impl<M: OpName> fmt::Debug for Op<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", M::NAME)
    }
}

impl<M: OpName> Serialize for Op<M> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(M::NAME)
    }
}

impl<'de, M: OpName> Deserialize<'de> for Op<M> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Op<M>, D::Error> {
        struct OpVisitor<M>(PhantomData<fn() -> M>);
        impl<M: OpName> Visitor<'_> for OpVisitor<M> {
            type Value = Op<M>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "op {:?}", M::NAME)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Op<M>, E> {
                match v == M::NAME {
                    true => Ok(Op::new()),
                    false => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_str(OpVisitor(PhantomData))
    }
}
