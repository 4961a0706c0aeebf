//! Typed messages: serde for frame 0 and its blocks (feature `serde`).
//!
//! ```text
//! the Value path   T ──to_value──▶ Value ──dumps──▶ frames     frames ──loads──▶ Value ──from_value──▶ T
//! the direct path  T ────────to_frames────────▶ frames         frames ────────from_frames────────▶ T
//! ```
//!
//! Two paths give the same result. [`to_value`] and [`from_value`] convert
//! between your types and [`Value`], as `serde_json::to_value` /
//! `from_value` do for JSON: use them to hold, inspect or change a message
//! as a value. [`to_frames`] and [`from_frames`] go between your types and
//! a message's frames without building the `Value` (frame 0 is written and
//! read as serde walks the type; blocks, arrays and `Value` fields go
//! through the message and serialize layers as `dumps` and `loads` take
//! them): `to_frames(x)` is byte for byte `dumps_with(&to_value(x)?)`, and
//! `from_frames(f)` is `from_value(loads_with(f)?)`, same value, same error,
//! the same checks and [`Limits`](crate::Limits), at a fraction of the cost
//! (`BENCHMARKS.md`). The transport's typed calls take the direct path:
//! `Connection::send_msg` / `recv_msg`, `MessageCodec`, and
//! `framewire::dask`'s `Rpc`, `BatchedReader::recv` and `BatchedWriter::send`.
//! What a type buffers (serde's internally tagged enums, `flatten`) or asks
//! for as a `Value` is built as a `Value` for that part only.
//!
//! Why two paths, and what they share: the `Value` path builds and reads
//! owned values (a message to hold or change; what a type buffers); the
//! direct path writes and reads frame 0's bytes in place, and is the one
//! the transport takes, at a fraction of the cost. Each wraps the same
//! core where one exists: the direct reader hands every whole value it
//! decodes (a placeholder's block, a `Value` field, what lies deeper than
//! it reads item by item) to the `Value` reader; the direct writer hands
//! every out-of-band value to the message layer's encoder, which `dumps`
//! uses; blocks are claimed by the message layer's `Claims`, as `loads`
//! claims them. Their equality is tested on every captured message
//! (`tests/typed_direct.rs`) and fuzzed (`fuzz/fuzz_targets/typed_from_frames.rs`).
//!
//! Why one thread-local: serde's data model has no room for a `Bytes`, a
//! block or an array, and a `Deserialize` impl meets only a generic
//! deserializer (no downcast without `unsafe`), so a [`Bin`] or a
//! [`Block`] reaches its value through a side table (as servo/ipc-channel
//! passes shared memory): one per thread, alive only while a conversion
//! runs, and emptied when the outermost one ends. Nothing else is kept
//! between serde calls: an error's path travels in the error.
//!
//! Structs are maps with
//! their field names as keys, in field order (msgpack-python's and rmp-serde's
//! `write_named` form); `Option` fields may be absent or nil; unknown keys are
//! ignored unless the type denies them (`#[serde(deny_unknown_fields)]`);
//! enums work with `#[serde(tag = "op", rename_all = "kebab-case")]`.
//!
//! Values that travel out of band keep their frames, zero-copy both ways,
//! also inside tagged enums (whose derive buffers every field in serde's
//! private `Content`): a side table beside the conversion carries them, as
//! servo/ipc-channel carries shared-memory regions.
//!
//! | field type | in the message |
//! |---|---|
//! | [`Block`] | a `{"__Serialized__": i}` or `{"__Pickled__": i}` block, kept verbatim ([`Block::is_pickled`] says which) |
//! | [`NdArray`] | an array, out of band as Dask's numpy family |
//! | [`Bin`] (or `Bytes` with `#[serde(with = "framewire::typed::bytes")]`) | msgpack bin, sliced, never copied |
//! | [`ToSerialize<T>`] | any `T: Serialize` serialized out of band, like Dask's `to_serialize` |
//! | [`Value`] | stays dynamic, blocks included |
//!
//! ```
//! use framewire::typed::{from_value, to_value, Bin};
//! use framewire::Value;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Debug, PartialEq)]
//! #[serde(tag = "op", rename_all = "kebab-case")]
//! enum Msg {
//!     Store { key: String, data: Bin, nbytes: Option<u64> },
//!     KeepAlive,
//! }
//!
//! let data = Bin::from(vec![7u8; 1 << 20]);
//! let msg = Msg::Store { key: "x".into(), data: data.clone(), nbytes: None };
//! let value = to_value(&msg)?;
//! assert_eq!(value.get("op").and_then(Value::as_str), Some("store"));
//! let back: Msg = from_value(value)?;
//! let Msg::Store { data: back_data, .. } = &back else { unreachable!() };
//! assert_eq!(back_data.as_ptr(), data.as_ptr()); // the same bytes, not a copy
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod by_op;
mod de;
mod error;
mod frame_de;
mod frame_ser;
mod ser;
mod side;
mod types;

use std::cell::OnceCell;

use ::bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::EncodeError;
use crate::message::Placeholders;
use crate::protocol::{self, DecodeError};
use crate::serialize::{self, DeserializeOptions, SerializeOptions};
use crate::value::Value;

pub use types::{bytes, Bin, ToSerialize};

#[doc(no_inline)]
pub use crate::ndarray::NdArray;
#[doc(no_inline)]
pub use crate::value::Block;

/// `value` as a [`Value`], ready for [`dumps`](crate::dumps): out-of-band
/// fields become blocks and arrays without copying their bytes.
///
/// Errors name the field they happened at ([`EncodeError::Field`]).
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, EncodeError> {
    let _scope = side::Scope::enter(side::Mode::Value);
    value
        .serialize(ser::ValueSerializer)
        .map_err(error::Error::into_encode)
}

/// A `T` from a [`Value`] (by value, as `serde_json::from_value`), such as
/// what [`loads`](crate::loads) returns: blocks, arrays and bin fields are
/// handed over without copying.
///
/// Errors name the field they happened at ([`DecodeError::Field`]): a wrong
/// type, a missing field, an unknown variant. The value was already bounded
/// by [`Limits`](crate::Limits) when it was decoded, so no field can make
/// this allocate more than the value holds.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, DecodeError> {
    let _scope = side::Scope::enter(side::Mode::Value);
    T::deserialize(de::ValueDeserializer::new(&value)).map_err(error::Error::into_decode)
}

/// `value` as a message's frames, as [`dumps_with`](crate::dumps_with)
/// writes [`to_value`]`(value)`, byte for byte, without building the
/// [`Value`]: frame 0 is written as serde walks `value`, and what travels out
/// of band (blocks, arrays, [`ToSerialize`] fields, `Value` fields holding
/// any) becomes placeholders and blocks as `dumps_with` makes them, with
/// `opts` (the codec a session agreed...). Payloads are never copied.
///
/// Errors are those of `to_value` then `dumps_with`: a field's
/// ([`EncodeError::Field`], with its path) before the message's.
///
/// ```
/// use framewire::typed::{to_frames, to_value, Bin};
/// use framewire::{dumps_with, SerializeOptions};
/// use serde::Serialize;
///
/// #[derive(Serialize)]
/// struct Store { op: &'static str, key: String, data: Bin }
///
/// let msg = Store { op: "store", key: "x".into(), data: Bin::from(vec![7u8; 64]) };
/// let opts = SerializeOptions::default();
/// let frames = to_frames(&msg, &opts)?;
/// assert_eq!(frames, dumps_with(&to_value(&msg)?, &opts)?);
/// # Ok::<(), framewire::EncodeError>(())
/// ```
pub fn to_frames<T: Serialize + ?Sized>(
    value: &T,
    opts: &SerializeOptions,
) -> Result<Vec<Bytes>, EncodeError> {
    let mut frame0 = BytesMut::with_capacity(256);
    let blocks = append_to(value, opts, 0, &mut frame0)?;
    let mut frames = Vec::with_capacity(1 + blocks.len());
    frames.push(frame0.freeze());
    frames.extend(blocks);
    Ok(frames)
}

/// Writes `value`'s frame 0 at the end of `out`, after what it holds (the
/// ops of a batch before it), as a value inside `depth` containers of a
/// message written around it (nesting is checked as `dumps` checks it
/// there). Returns the blocks its placeholders name (frames 1 and on;
/// none, and nothing allocated, for most messages). On an error `out` is
/// as it was.
pub(crate) fn append_to<T: Serialize + ?Sized>(
    value: &T,
    opts: &SerializeOptions,
    depth: usize,
    out: &mut BytesMut,
) -> Result<Vec<Bytes>, EncodeError> {
    let start = out.len();
    let direct = {
        let _scope = side::Scope::enter(side::Mode::Frames);
        let mut serialize = |leaf: &Value| serialize::serialize_and_split(leaf, opts);
        let mut f = frame_ser::Frame0 {
            out: &mut *out,
            leaves: Placeholders::new(&mut serialize),
        };
        let written = value.serialize(frame_ser::FrameSerializer { f: &mut f, depth });
        written.map(|()| f.leaves.into_blocks())
    };
    direct.map_err(|e| {
        out.truncate(start);
        // The error the dynamic path gives (a field's before the
        // message's), which meets them in another order.
        let dynamic = to_value(value).and_then(|v| {
            let wrapped = (0..depth).fold(v, |v, _| Value::Array(vec![v]));
            protocol::dumps_with(&wrapped, opts)
        });
        dynamic.err().unwrap_or_else(|| e.into_encode())
    })
}

/// A `T` from a message's frames, as [`from_value`] gives it from what
/// [`loads`](crate::loads) gives, without building the message's [`Value`]:
/// frame 0 is read as serde asks for it, strs and bins borrowed from it
/// (a [`Bin`] field is a slice of frame 0, not a copy); placeholders are
/// claimed and their blocks deserialized with `opts` as `loads` does (the
/// same checks and [`Limits`](crate::Limits)), and whatever `T` ignores is
/// still checked, so a message `loads` refuses is refused here too.
///
/// Errors: what `loads` refuses, as `loads` reports it; else a field that
/// does not fit `T` ([`DecodeError::Field`], with its path).
///
/// ```
/// use framewire::typed::{from_frames, from_value};
/// use framewire::{dumps, loads_with, DeserializeOptions, Value};
/// use serde::Deserialize;
///
/// #[derive(Deserialize, Debug, PartialEq)]
/// struct Ping { op: String, n: u32 }
///
/// let frames = dumps(&Value::map_of([("op", Value::str("ping")), ("n", Value::from(3u8))]))?;
/// let opts = DeserializeOptions::default();
/// let ping: Ping = from_frames(&frames, &opts)?;
/// assert_eq!(ping, from_value(loads_with(&frames, &opts)?)?);
/// assert_eq!(ping.n, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn from_frames<T: DeserializeOwned>(
    frames: &[Bytes],
    opts: &DeserializeOptions,
) -> Result<T, DecodeError> {
    from_frames_direct(frames, opts).map_err(|e| {
        // A message `loads` refuses is its error, as the dynamic path
        // reports it: the direct path meets the message's errors and the
        // fields' in another order (a block's before a later placeholder's,
        // a field's before anything after it).
        protocol::loads_with(frames, opts)
            .err()
            .unwrap_or_else(|| e.into_decode())
    })
}

fn from_frames_direct<T: DeserializeOwned>(
    frames: &[Bytes],
    opts: &DeserializeOptions,
) -> Result<T, error::Error> {
    let _scope = side::Scope::enter(side::Mode::Value);
    let arena = OnceCell::new();
    let mut d = frame_de::Decoder::new(frames, opts, &arena)?;
    let value = T::deserialize(frame_de::FrameDeserializer { d: &mut d })?;
    d.finish()?;
    Ok(value)
}
