//! Typed messages: serde for frame 0 and its blocks (feature `serde`).
//!
//! ```text
//! T: Serialize ──to_value──▶ Value ──dumps──▶ frames        (blocks, arrays, Bin: no copy)
//! T: Deserialize ◀─from_value── Value ◀──loads── frames     (the same Bytes handed back)
//! ```
//!
//! [`to_value`] and [`from_value`] convert between your types and [`Value`],
//! as `serde_json::to_value` / `from_value` do for JSON. Structs are maps with
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

mod de;
mod error;
pub(crate) use error::field_error;
mod ser;
mod side;
mod types;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::EncodeError;
use crate::protocol::DecodeError;
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
    let _scope = side::Scope::enter();
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
    let _scope = side::Scope::enter();
    T::deserialize(de::ValueDeserializer::new(&value)).map_err(error::Error::into_decode)
}
