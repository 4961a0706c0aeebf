//! Serializer families: `dask` (bytes and numpy arrays), `msgpack`, `error`,
//! and the [`Family`] trait users implement to add their own.

use bytes::{Bytes, BytesMut};

use super::error::DeserializeError;
use crate::error::EncodeError;
use crate::limits::Limits;
use crate::message::HeaderRules;
use crate::msgpack::{self, Static};
use crate::ndarray::{Geometry, NdArray};
use crate::value::Value;

/// What a family makes of a value: its header entries (without
/// `serializer`, which is set to the family's name) and its frames.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// Header entries, in order.
    pub header: Vec<(Value, Value)>,
    /// The payload frames.
    pub frames: Vec<Bytes>,
    /// Shards of these frames are cut at a multiple of this many bytes (the
    /// array's item size; 1 for bytes).
    pub shard_unit: usize,
}

/// A serializer family: Dask's `serializer` header value names it.
///
/// ```
/// use bytes::Bytes;
/// use framewire::serialize::{serialize, Encoded, Family, Registry, SerializeOptions};
/// use framewire::{DeserializeError, EncodeError, Limits, Value};
///
/// /// Sends text as raw UTF-8 frames under the name "utf8".
/// struct Utf8;
/// impl Family for Utf8 {
///     fn name(&self) -> &'static str { "utf8" }
///     fn serialize(&self, v: &Value) -> Option<Result<Encoded, EncodeError>> {
///         let s = v.as_str()?;
///         Some(Ok(Encoded { header: vec![], frames: vec![Bytes::copy_from_slice(s.as_bytes())], shard_unit: 1 }))
///     }
///     fn deserialize(&self, _: &Value, frames: &[Bytes], _: &Limits) -> Option<Result<Value, DeserializeError>> {
///         let text = String::from_utf8(frames.concat()).ok()?;
///         Some(Ok(Value::from(text)))
///     }
/// }
///
/// let mut opts = SerializeOptions::default();
/// opts.registry = Registry::default().with(Utf8);
/// let block = serialize(&Value::from_static("hi"), &opts)?;
/// assert_eq!(block.header().get("serializer").and_then(Value::as_str), Some("utf8"));
/// assert_eq!(&block.frames()[0][..], b"hi");
/// # Ok::<(), EncodeError>(())
/// ```
pub trait Family: Send + Sync {
    /// The `serializer` name in headers.
    fn name(&self) -> &'static str;
    /// Serializes `value` if this family handles it; `None` means "not mine,
    /// try the next family".
    fn serialize(&self, value: &Value) -> Option<Result<Encoded, EncodeError>>;
    /// Rebuilds a value from a header this family wrote and its (merged)
    /// frames; `None` means "cannot", and the block is kept opaque.
    fn deserialize(
        &self,
        header: &Value,
        frames: &[Bytes],
        limits: &Limits,
    ) -> Option<Result<Value, DeserializeError>>;
}

/// Dask's `type-serialized` for `bytes`: pickle protocol 5 of `builtins.bytes`.
pub(crate) const BYTES_TYPE: &[u8] =
    b"\x80\x05\x95\x16\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x05bytes\x94\x93\x94.";
/// ... for `bytearray`.
pub(crate) const BYTEARRAY_TYPE: &[u8] = b"\x80\x05\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x09bytearray\x94\x93\x94.";
/// ... for `numpy.ndarray`.
pub(crate) const NDARRAY_TYPE: &[u8] =
    b"\x80\x05\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94.";

/// Dask's `dask` family for `bytes` and `numpy.ndarray` (simple dtypes).
/// Other `dask` types (pickled dtypes, masked arrays, memoryview...) are kept
/// opaque.
#[derive(Clone, Copy, Debug, Default)]
pub struct DaskFamily;

impl DaskFamily {
    /// `"dask"`.
    pub const NAME: &'static str = "dask";
}

fn ints(values: &[u64]) -> Value {
    Value::Array(values.iter().map(|&v| Value::from(v)).collect())
}

impl Family for DaskFamily {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn serialize(&self, value: &Value) -> Option<Result<Encoded, EncodeError>> {
        let (sub_header, type_name, type_serialized, frame, unit) = match value {
            Value::Bin(b) => (Value::Map(vec![]), "bytes", BYTES_TYPE, b.clone(), 1),
            Value::NdArray(a) => {
                let mut sub = vec![
                    (
                        Value::from_static("dtype"),
                        Value::Array(vec![0.into(), Value::str(a.dtype())]),
                    ),
                    (Value::from_static("shape"), ints(a.shape())),
                    (Value::from_static("strides"), ints(a.strides())),
                    (
                        Value::from_static("writeable"),
                        Value::Array(vec![a.writeable().into()]),
                    ),
                ];
                if let Some(full) = a.broadcast_to() {
                    sub.push((Value::from_static("broadcast_to"), ints(full)));
                }
                (
                    Value::Map(sub),
                    "numpy.ndarray",
                    NDARRAY_TYPE,
                    a.data().clone(),
                    a.shard_unit(),
                )
            }
            _ => return None,
        };
        Some(Ok(Encoded {
            header: vec![
                (Value::from_static("sub-header"), sub_header),
                (Value::from_static("type"), Value::from_static(type_name)),
                (
                    Value::from_static("type-serialized"),
                    Value::Bin(Bytes::from_static(type_serialized)),
                ),
                (
                    Value::from_static("serializer"),
                    Value::from_static(Self::NAME),
                ),
            ],
            frames: vec![frame],
            shard_unit: unit,
        }))
    }

    fn deserialize(
        &self,
        header: &Value,
        frames: &[Bytes],
        _: &Limits,
    ) -> Option<Result<Value, DeserializeError>> {
        let Some(Value::Bin(type_serialized)) = header.get("type-serialized") else {
            return Some(Err(DeserializeError::InvalidHeader {
                field: "type-serialized",
            }));
        };
        let sub = header.get("sub-header");
        match &type_serialized[..] {
            BYTES_TYPE | BYTEARRAY_TYPE => Some(Ok(Value::Bin(concat(frames)))),
            NDARRAY_TYPE => ndarray(sub?, frames).transpose(),
            _ => None,
        }
    }
}

/// One frame as is, several joined (a copy).
pub(super) fn concat(frames: &[Bytes]) -> Bytes {
    match frames {
        [one] => one.clone(),
        _ => {
            let mut out = BytesMut::with_capacity(frames.iter().map(Bytes::len).sum());
            frames.iter().for_each(|f| out.extend_from_slice(f));
            out.freeze()
        }
    }
}

/// A `numpy.ndarray` sub-header; `None` for layouts framewire keeps opaque
/// (pickled object arrays, pickled dtypes, `np.matrix`).
fn ndarray(sub: &Value, frames: &[Bytes]) -> Result<Option<Value>, DeserializeError> {
    let invalid = |reason| DeserializeError::InvalidArray { reason };
    if sub.get("pickle").is_some() || sub.get("matrix").is_some() {
        return Ok(None);
    }
    let dtype = sub
        .get("dtype")
        .and_then(Value::as_array)
        .ok_or(invalid("no dtype"))?;
    let dtype = match dtype {
        [Value::Int(k), Value::Str(s)] if k.as_u64() == Some(0) => s,
        // A pickled dtype, or the descr list Dask falls back on for void dtypes.
        [Value::Int(k), _] if k.as_u64() == Some(1) => return Ok(None),
        [Value::Int(k), Value::Array(_)] if k.as_u64() == Some(0) => return Ok(None),
        _ => return Err(invalid("dtype is not [0, str] or [1, bin]")),
    };
    let uints = |key: &str| -> Result<Vec<u64>, DeserializeError> {
        sub.get(key)
            .and_then(Value::as_array)
            .ok_or(invalid("shape, strides or broadcast_to missing"))?
            .iter()
            .map(|v| {
                v.as_int()
                    .and_then(|i| i.as_u64())
                    .ok_or(invalid("shape and strides must be non-negative integers"))
            })
            .collect()
    };
    let writeable = match sub.get("writeable").and_then(Value::as_array) {
        Some([Value::Bool(w)]) => *w,
        _ => return Err(invalid("writeable is not [bool]")),
    };
    let broadcast_to = match sub.get("broadcast_to") {
        None | Some(Value::Nil) => None,
        Some(_) => Some(uints("broadcast_to")?),
    };
    let [frame] = frames else {
        return Err(invalid("an array has exactly one data frame"));
    };
    let geometry = Geometry {
        shape: uints("shape")?,
        strides: uints("strides")?,
        broadcast_to,
    };
    let array = NdArray::from_parts(dtype, geometry, writeable, frame.clone()).map_err(invalid)?;
    Ok(Some(Value::NdArray(Box::new(array))))
}

/// Dask's `msgpack` family: any plain value as one msgpack frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct MsgpackFamily;

impl MsgpackFamily {
    /// `"msgpack"`.
    pub const NAME: &'static str = "msgpack";
}

impl Family for MsgpackFamily {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn serialize(&self, value: &Value) -> Option<Result<Encoded, EncodeError>> {
        match msgpack::encode(value, &mut HeaderRules) {
            Err(EncodeError::OutOfBandInHeader) => None,
            Err(e) => Some(Err(e)),
            Ok(frame) => Some(Ok(Encoded {
                header: vec![],
                frames: vec![frame],
                shard_unit: 1,
            })),
        }
    }

    fn deserialize(
        &self,
        _: &Value,
        frames: &[Bytes],
        limits: &Limits,
    ) -> Option<Result<Value, DeserializeError>> {
        Some(msgpack_value(frames, limits))
    }
}

/// The byte of a `msgpack` family element that is one positive fixint in
/// one frame (an element of an iterated integer tuple): what
/// [`msgpack_value`] decodes it to, without the decoder.
#[inline]
pub(super) fn fixint_frame(frames: &[Bytes], limits: &Limits) -> Option<u8> {
    match frames {
        [one] => msgpack::lone_fixpos(one, limits),
        _ => None,
    }
}

/// The `msgpack` family's value: its frames (one: in place; several:
/// joined) as one msgpack value, long integer arrays packed.
pub(super) fn msgpack_value(frames: &[Bytes], limits: &Limits) -> Result<Value, DeserializeError> {
    let decode = |frame: &Bytes| msgpack::decode_packed(frame, 0, limits, super::PACK_MIN);
    Ok(match frames {
        [one] => decode(one)?,
        _ => decode(&concat(frames))?,
    })
}

/// Dask's `error` family: the sender could not serialize a value and sent
/// its text instead. Deserializing gives [`DeserializeError::RemoteSerializationError`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrorFamily;

/// Dask truncates a traceback to 100 000 characters; framewire keeps at most
/// this many bytes of error text.
const MAX_ERROR_TEXT: usize = 100_000;

impl Family for ErrorFamily {
    fn name(&self) -> &'static str {
        "error"
    }

    fn serialize(&self, _: &Value) -> Option<Result<Encoded, EncodeError>> {
        None
    }

    fn deserialize(
        &self,
        _: &Value,
        frames: &[Bytes],
        _: &Limits,
    ) -> Option<Result<Value, DeserializeError>> {
        let parts: Vec<String> = frames
            .iter()
            .map(|f| String::from_utf8_lossy(&f[..f.len().min(MAX_ERROR_TEXT)]).into_owned())
            .collect();
        Some(Err(DeserializeError::RemoteSerializationError {
            text: parts.join("\n"),
        }))
    }
}

// ---- the built-in families' leaf headers ----------------------------------
// Written by `serialize` and recognized by `deserialize` as bytes.

pub(super) const SERIALIZER: &str = "serializer";

/// `{"serializer": "msgpack"}` in msgpack.
pub(super) const MSGPACK_LEAF_HEADER: &[u8] = Static::new()
    .map(1)
    .str(SERIALIZER)
    .str(MsgpackFamily::NAME)
    .bytes();

/// The header the `dask` family writes for a bin, `{"sub-header": {},
/// "type": "bytes", "type-serialized": <pickled bytes class>, "serializer":
/// "dask"}`, in msgpack (checked against what the family's entries encode
/// to by a test).
pub(super) const DASK_BYTES_LEAF_HEADER: &[u8] = Static::new()
    .map(4)
    .str("sub-header")
    .map(0)
    .str("type")
    .str("bytes")
    .str("type-serialized")
    .bin(BYTES_TYPE)
    .str(SERIALIZER)
    .str(DaskFamily::NAME)
    .bytes();

/// A leaf header the built-in families write, known by its bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Leaf {
    /// [`MSGPACK_LEAF_HEADER`].
    Msgpack,
    /// [`DASK_BYTES_LEAF_HEADER`].
    DaskBytes,
}

impl Leaf {
    pub(super) fn len(self) -> usize {
        match self {
            Leaf::Msgpack => MSGPACK_LEAF_HEADER.len(),
            Leaf::DaskBytes => DASK_BYTES_LEAF_HEADER.len(),
        }
    }
}

// Told apart by their lengths (see `ArrayItems::same_known`).
const _: () = assert!(MSGPACK_LEAF_HEADER.len() != DASK_BYTES_LEAF_HEADER.len());

/// The leaf header `rest` begins with, if it is one of the built-in
/// families': the sub-header there is then exactly it (each is one whole
/// msgpack map). Compared as constants of known length, so inline.
#[inline]
pub(super) fn known_leaf(rest: &[u8]) -> Option<Leaf> {
    if rest.get(..MSGPACK_LEAF_HEADER.len()) == Some(MSGPACK_LEAF_HEADER) {
        Some(Leaf::Msgpack)
    } else if rest.get(..DASK_BYTES_LEAF_HEADER.len()) == Some(DASK_BYTES_LEAF_HEADER) {
        Some(Leaf::DaskBytes)
    } else {
        None
    }
}

/// The length of the built-in families' leaf header `rest` begins with, if
/// it begins with one (see [`RawMap::read_noting_items`]).
pub(super) fn known_leaf_len(rest: &[u8]) -> Option<usize> {
    known_leaf(rest).map(Leaf::len)
}
