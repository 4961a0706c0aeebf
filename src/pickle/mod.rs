//! Plain Python values out of pickles and into them (feature `pickle`,
//! SPEC.md §5.13): what Dask sends as a pickle when a value is not `bytes`
//! or a numpy array (`client.submit` results, `ToPickle` values) read into
//! [`Value`] / [`NdArray`](crate::NdArray), and values written as pickles
//! Python reads. Nothing is imported or executed.
//!
//! ```text
//! Block {"serializer": "pickle", "writeable": [..]}  frames [pickle, buffer…]   ─┐
//! Block {"pickled-obj": pickle} ({"__Pickled__": i}) frames [buffer…]           ─┼─ deserialize ──▶ Value
//!                                   pickle bytes + out-of-band buffers          ─┘    (loads)
//! ```
//!
//! | Python | protocols | `Value` |
//! |---|---|---|
//! | `None`, `bool`, `float`, `str` | 2–5 | `Nil`, `Bool`, `Float`, `Str` (a slice of the pickle) |
//! | `int` in `-2^63 ..= 2^64 - 1` | 2–5 | `Int`; beyond: [`PickleError::IntegerOutOfRange`] |
//! | `bytes`, `bytearray` | 2–5 | `Bin` (a slice of the pickle from protocol 3 on) |
//! | `tuple`, `list`, `set`, `frozenset` | 2–5 | `Array` in pickle order (`IntArray` for 32 integers or more, as the `msgpack` family reads them) |
//! | `dict` | 2–5 | `Map`, in order; a key set twice one entry holding the last value, as in Python (`1`, `1.0` and `True` one key) |
//! | `numpy.ndarray` out of band (protocol 5, `buffer_callback`) | 5 | `NdArray` over the buffer's own `Bytes`, C or Fortran order |
//! | `numpy.ndarray` in band | 2–5 | `NdArray` over a slice of the pickle (protocols 3–5; numpy's `_reconstruct` form for non-contiguous arrays) |
//! | numpy scalar (`np.float64(1.5)`), `complex` | 2–5 | a 0-d `NdArray` (`complex` as `<c16`) |
//!
//! numpy dtypes are those [`NdArray`](crate::NdArray) holds: booleans,
//! integers, floats, complex, `S`, `U`, `datetime64`, `timedelta64`, either
//! byte order. Shared references (one list twice in a dict) come out as
//! copies, within the bound on values below
//! ([`PickleError::TooManyValues`]); a container inside itself is
//! [`PickleError::Recursive`].
//!
//! **Refused, never run.** Any other global (`GLOBAL`, `STACK_GLOBAL`,
//! then `REDUCE`, `BUILD`, `NEWOBJ`) is
//! [`PickleError::GlobalNotAllowed`], naming it (`pickle global not
//! allowed: collections.OrderedDict`); object and structured dtypes are
//! [`PickleError::UnsupportedDtype`]. The globals interpreted, by name and
//! only with the arguments their own pickles carry: numpy's
//! `_reconstruct`, `ndarray`, `dtype`, `_frombuffer` and `scalar` (under
//! `numpy._core` and `numpy.core`), `builtins.complex`, `bytearray`,
//! `bytes`, `set`, `frozenset` (`__builtin__` at protocol 2) and
//! `_codecs.encode`. The text opcodes of protocol 0, persistent ids and
//! the extension registry are [`PickleError::UnsupportedOpcode`].
//!
//! **Bounded.** Every length is checked against the bytes that are there
//! before anything is sliced (a declared length allocates nothing), nesting
//! against [`Limits::max_depth`], the values made (and copied out of
//! shared references) against the pickle's length and
//! [`Limits::max_pickle_values`], memo indices against the same bound (4
//! bytes of memo per value at most). Reading costs at most about 120 bytes
//! per byte of pickle (a stack slot per one-byte opcode; Python builds an
//! object per opcode too). The machine never recurses (the values it has
//! built are dropped recursively, as any [`Value`] is). A pickle within
//! these bounds that Python reads differently is a bug.
//!
//! **Writing** ([`dumps`], [`serialize`]): protocol 5, numpy arrays out of
//! band as numpy 2 pickles them (`numpy._core.numeric._frombuffer`; the
//! buffer is the array's own data when it is C- or Fortran-contiguous); a
//! 0-d array as the numpy scalar of its dtype; `Array` and `IntArray` as
//! tuples; `Map` as a dict. Python needs numpy 2 to read arrays.
//!
//! **Why not a crate.** `serde-pickle`, the well-kept pickle crate, reads
//! through `io::Read` (every str and bytes copied; no out-of-band buffers),
//! keeps dicts in a `BTreeMap` (order lost), knows no numpy, writes
//! protocols 2 and 3 only, and has no memo, depth or size bounds to set.
//! What framewire needs is those: a small reader over `Bytes`.
//!
//! ```
//! use bytes::Bytes;
//! use framewire::{pickle, Limits, NdArray, Value};
//!
//! let data = Bytes::from((0..4u8).map(|i| i as f64).flat_map(f64::to_le_bytes).collect::<Vec<u8>>());
//! let array = NdArray::from_c_order("<f8", &[2, 2], data.clone())?;
//! let value = Value::map_of([("n", 3.into()), ("x", Value::NdArray(Box::new(array)))]);
//! let (bytes, buffers) = pickle::dumps(&value)?;
//! assert_eq!(buffers[0].as_ptr(), data.as_ptr()); // the array's own data, out of band
//!
//! let back = pickle::loads(&bytes, &buffers, &Limits::default())?;
//! assert_eq!(back, value);
//!
//! // A pickle of collections.OrderedDict() is refused, naming the global.
//! let err = pickle::loads(&Bytes::from_static(b"\x80\x04\x95\x22\x00\x00\x00\x00\x00\x00\x00\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94."), &[], &Limits::default()).unwrap_err();
//! assert_eq!(err.to_string(), "pickle global not allowed: collections.OrderedDict");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod call;
mod error;
mod function;
mod inert;
mod numpy;
mod opcodes;
mod read;
mod write;

use bytes::Bytes;

pub(crate) use call::Py;
// For the layer above, whose task graphs name constants of their own.
#[allow(unused_imports)]
pub(crate) use call::Fixed;
pub use error::PickleError;
pub use function::{PyFunction, PyFunctionError};
pub use inert::PyException;

use crate::error::EncodeError;
use crate::limits::Limits;
use crate::serialize::{DecompressBudget, DeserializeError, DeserializeOptions, Encoded, Family};
use crate::value::{Block, Header, Value};

/// Reads a pickle (protocols 2 to 5) into a value; `buffers` are its
/// out-of-band buffers (Python's `pickle.loads(data, buffers=...)`), used in
/// order by its `NEXT_BUFFER`s. Strs, bytes and array data are slices of
/// `data` and of the buffers: nothing is copied but protocol 2's latin-1
/// bytes. See the [module docs](self) for what is read and refused.
pub fn loads(data: &Bytes, buffers: &[Bytes], limits: &Limits) -> Result<Value, PickleError> {
    read::loads(data, buffers, limits)
}

/// Writes a value as a protocol 5 pickle, and its out-of-band buffers (one
/// per numpy array, in order: Python's `pickle.dumps(x, protocol=5,
/// buffer_callback=...)`). Blocks and [`Value::ToSerialize`] have no pickle
/// ([`EncodeError::Unserializable`]), nor does a dict key that is a map or
/// an array; containers nest at most 1024 deep.
pub fn dumps(value: &Value) -> Result<(Bytes, Vec<Bytes>), EncodeError> {
    let (pickle, buffers) = write::dumps(value)?;
    Ok((pickle, buffers.into_iter().map(|(b, _)| b).collect()))
}

/// Reads the pickle of a Python exception, and of its traceback when
/// given, as Dask's `task-erred` carries them (tblib's
/// `unpickle_exception_with_attrs(<class>, {"args": ...}, cause, tb, ...)`,
/// or a plain `<class>(*args)`): the class by name, the arguments, the
/// message, the traceback's lines and the cause. **Inert**: globals are
/// read as names, nothing is imported, called or built; whatever else the
/// pickle holds is described, not run. A pickle that is not an exception,
/// garbage, or hostile is a [`PickleError`], never a panic.
///
/// ```
/// use framewire::pickle;
///
/// // pickle.dumps(ZeroDivisionError("division by zero"), protocol=4)
/// let p = b"\x80\x04\x95-\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x11ZeroDivisionError\x94\x93\x94\x8c\x10division by zero\x94\x85\x94R\x94.";
/// let e = pickle::read_exception(p, None)?;
/// assert_eq!((e.name.as_str(), e.message.as_str()), ("ZeroDivisionError", "division by zero"));
/// # Ok::<(), pickle::PickleError>(())
/// ```
pub fn read_exception(
    exception: &[u8],
    traceback: Option<&[u8]>,
) -> Result<PyException, PickleError> {
    inert::read_exception(exception, traceback)
}

/// `py` as a protocol 5 pickle and its out-of-band buffers, each with
/// whether it is writeable (crate-internal: Dask's task graphs).
#[allow(dead_code)] // (see call::Global)
pub(crate) fn dumps_py(py: &Py) -> Result<(Bytes, Vec<(Bytes, bool)>), EncodeError> {
    write::dumps_py(py)
}

/// Reads the value of a pickle block: a `{"__Pickled__": i}` block
/// ([`Value::Pickled`], Dask's `ToPickle`: the pickle in the header's
/// `pickled-obj`, its frames the buffers), or a block of Dask's `pickle`
/// family ([`Value::Serialized`] with `"serializer": "pickle"`: the pickle in
/// the first frame, the buffers after it). Compressed frames are
/// decompressed and shards merged first, under `opts.limits`, as
/// [`serialize::deserialize`](crate::serialize::deserialize) does; the
/// block itself is left as it is whatever happens.
///
/// ```
/// use framewire::{pickle, serialize::DeserializeOptions, Value};
///
/// let block = pickle::serialize(&Value::map_of([("a", 1.5.into())]))?;
/// assert_eq!(block.header().get("serializer").and_then(Value::as_str), Some("pickle"));
/// let back = pickle::deserialize(&block, &DeserializeOptions::default())?;
/// assert_eq!(back, Value::map_of([("a", 1.5.into())]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn deserialize(block: &Block, opts: &DeserializeOptions) -> Result<Value, PickleError> {
    let header = block.header().map();
    let in_header = match (block.is_pickled(), header.get("pickled-obj")) {
        (true, Some(Value::Bin(pickle))) => Some(pickle),
        (false, _)
            if header.get("serializer").and_then(Value::as_str) == Some(PickleFamily::NAME) =>
        {
            None
        }
        _ => return Err(PickleError::NotPickle),
    };
    let mut budget = DecompressBudget::new(&opts.limits);
    let frames = crate::serialize::merged_frames(header, block.frames(), opts, &mut budget)?;
    match (in_header, &frames[..]) {
        (Some(pickle), buffers) => loads(pickle, buffers, &opts.limits),
        (None, [pickle, buffers @ ..]) => loads(pickle, buffers, &opts.limits),
        (None, []) => Err(PickleError::NotPickle),
    }
}

/// Writes a value as a block of Dask's `pickle` family (what
/// `distributed.protocol.serialize(x, serializers=("pickle",))` makes):
/// header `{"serializer": "pickle", "writeable": [...]}`, frames the pickle
/// and the out-of-band buffers of [`dumps`]. Placed in a message as a
/// [`Value::Serialized`] (`block.into_value()`), Python's `loads` unpickles
/// it. (A `{"__Pickled__": i}` block holds the pickle in its header:
/// `Block::new_pickled(Header::new(Value::map_of([("pickled-obj",
/// Value::Bin(pickle))])), buffers)`.)
pub fn serialize(value: &Value) -> Result<Block, EncodeError> {
    let (pickle, buffers) = write::dumps(value)?;
    let writeable = buffers.iter().map(|&(_, w)| Value::Bool(w)).collect();
    let header = Value::map_of([
        ("serializer", Value::from_static(PickleFamily::NAME)),
        ("writeable", Value::Array(writeable)),
    ]);
    let frames = std::iter::once(pickle).chain(buffers.into_iter().map(|(b, _)| b));
    Ok(Block::new(Header::new(header), frames))
}

/// Dask's `pickle` family, for a [`Registry`](crate::serialize::Registry):
/// with it, [`serialize::deserialize`](crate::serialize::deserialize) and
/// [`deserialize_blocks`](crate::serialize::deserialize_blocks) read pickle
/// blocks (at the top and as elements of collections) into values. A pickle
/// it cannot read (a global not allowed, a hostile one) stays an opaque
/// [`Value::Serialized`] block, whole: [`deserialize`] on it says why. It
/// reads only; values are written by the other families (or [`serialize`]).
///
/// ```
/// use framewire::pickle::{self, PickleFamily};
/// use framewire::serialize::{deserialize_blocks, DeserializeOptions, Registry};
/// use framewire::Value;
///
/// let mut opts = DeserializeOptions::default();
/// opts.registry = Registry::default().with(PickleFamily);
/// let message = Value::map_of([("data", pickle::serialize(&Value::from(7u8))?.into_value())]);
/// let value = deserialize_blocks(message, &opts)?;
/// assert_eq!(value.get("data"), Some(&Value::from(7u8)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct PickleFamily;

impl PickleFamily {
    /// `"pickle"`.
    pub const NAME: &'static str = "pickle";
}

impl Family for PickleFamily {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn serialize(&self, _: &Value) -> Option<Result<Encoded, EncodeError>> {
        None
    }

    fn deserialize(
        &self,
        _: &Value,
        frames: &[Bytes],
        limits: &Limits,
    ) -> Option<Result<Value, DeserializeError>> {
        let [pickle, buffers @ ..] = frames else {
            return None;
        };
        loads(pickle, buffers, limits).ok().map(Ok)
    }
}
